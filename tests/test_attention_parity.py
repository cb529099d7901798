"""Our attention equals Keras' given the same weights; golden sinusoids; masked softmax.

Keras' `MultiHeadAttention` keeps four `EinsumDense` layers with kernels
`(d, h, d_k)`; ours keeps 2-D kernels `(d, h d_k)` (heads side by side) and
fuses the query, key and value kernels into one `qkv_kernel` of shape
`(d, h d_k + h d_k + h d_v)` (all queries, then keys, then values) whenever
the widths agree.  Copying Keras' weights into that layout must give the
same outputs and weights, for every kind of mask (PEERS pain points 4 and 5).

Keras and we differ on purpose in one place: a query row whose keys are all
masked (a padded query) gets zero weights in Keras and uniform weights here
(finite either way; these rows are padding).  Outputs are therefore compared
at real query positions when a query mask is given.
"""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_transformer.layers import (
    MultiHeadAttention,
    elementwise_attention,
    elementwise_attention_limit,
    masked_softmax,
)
from keras_transformer.layers.scaled_dot_product_attention import (
    ELEMENTWISE_ATTENTION_LIMIT,
    cached_attention_heads,
)
from keras_transformer.layers.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
    sinusoids,
)

B, D, H = 2, 8, 2
ATOL = 1e-5


def _float(rng, *shape):
    return rng.normal(size=shape).astype("float32")


def _keras_masked(array, mask):
    """A fresh tensor carrying a Keras mask (Keras' layer strips it in place)."""
    tensor = tf.constant(array)
    if mask is not None:
        tensor._keras_mask = tf.constant(mask)
    return tensor


def _attention_pair(query, value, key_dim=4, value_dim=3):
    """Keras' layer and ours, built, with Keras' (non-zero) weights copied into ours."""
    reference = keras.layers.MultiHeadAttention(
        num_heads=H,
        key_dim=key_dim,
        value_dim=value_dim,
        bias_initializer="random_normal",
    )
    reference(query, value)
    ours = MultiHeadAttention(num_heads=H, key_dim=key_dim, value_dim=value_dim)
    ours(query, value)
    q, k, v, o = (
        reference._query_dense,
        reference._key_dense,
        reference._value_dense,
        reference._output_dense,
    )
    def flat(dense):  # (d, h, k) -> (d, h k), (h, k) -> (h k,)
        kernel = dense.kernel.numpy()
        return kernel.reshape(kernel.shape[0], -1), dense.bias.numpy().reshape(-1)

    if ours.fused:
        kernels, biases = zip(*(flat(d) for d in (q, k, v)), strict=True)
        ours.qkv_kernel.assign(np.concatenate(kernels, axis=-1))
        ours.qkv_bias.assign(np.concatenate(biases, axis=-1))
    else:
        for name, dense in (("query", q), ("key", k), ("value", v)):
            kernel, bias = flat(dense)
            getattr(ours, f"{name}_kernel").assign(kernel)
            getattr(ours, f"{name}_bias").assign(bias)
    ours.output_kernel.assign(o.kernel.numpy().reshape(-1, o.kernel.shape[-1]))
    ours.output_bias.assign(o.bias)
    return reference, ours


def _assert_close(ours, theirs, rows=None):
    ours, theirs = ops.convert_to_numpy(ours), ops.convert_to_numpy(theirs)
    if rows is not None:
        ours, theirs = ours[rows], theirs[rows]
    np.testing.assert_allclose(ours, theirs, atol=ATOL, rtol=0)


QUERY_MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
VALUE_MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_self_attention_matches_keras(causal, padded, rng):
    """Same outputs and weights as keras.layers.MultiHeadAttention, with the
    query/value padding masks given explicitly or as Keras masks."""
    x = _float(rng, B, 5, D)
    reference, ours = _attention_pair(x, x)
    mask = QUERY_MASK if padded else None
    kx = _keras_masked(x, mask)
    want, want_w = reference(
        kx, kx, use_causal_mask=causal, return_attention_scores=True
    )
    xt = ops.convert_to_tensor(x)
    got, got_w = ours(
        xt,
        xt,
        query_mask=mask,
        value_mask=mask,
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    rows = QUERY_MASK if padded else None
    _assert_close(got, want, rows)
    weight_rows = None if rows is None else np.broadcast_to(rows[:, None], (B, H, 5))
    _assert_close(got_w, want_w, weight_rows)
    # The same masks read from the inputs' Keras masks (the implicit path).
    ix = _keras_masked(x, mask)
    _assert_close(ours(ix, ix, use_causal_mask=causal), got)
    if causal:
        # Pain point 5: scores returned, and nothing above the diagonal (in
        # real query rows; a padded query row is uniform by design).
        above = np.triu(ops.convert_to_numpy(got_w), k=1)
        assert np.all(above[weight_rows] == 0) if padded else np.all(above == 0)


def test_explicit_attention_mask_matches_keras(rng):
    """An explicit (B, T, S) attention_mask, alone and AND-ed with causality."""
    x = _float(rng, B, 5, D)
    reference, ours = _attention_pair(x, x)
    attention_mask = rng.random((B, 5, 5)) > 0.4
    attention_mask[:, :, 0] = True  # every row keeps a key: no fully masked rows
    for causal in (False, True):
        want, want_w = reference(
            x,
            x,
            attention_mask=attention_mask,
            use_causal_mask=causal,
            return_attention_scores=True,
        )
        got, got_w = ours(
            x,
            x,
            attention_mask=attention_mask,
            use_causal_mask=causal,
            return_attention_scores=True,
        )
        _assert_close(got, want)
        _assert_close(got_w, want_w)
        assert np.all(
            ops.convert_to_numpy(got_w)[
                ~np.broadcast_to(attention_mask[:, None], (B, H, 5, 5))
            ]
            == 0
        )


@pytest.mark.parametrize("value_width", [D, 6], ids=["fused", "unfused"])
def test_cross_attention_matches_keras(value_width, rng):
    """T=4 queries over S=5 keys/values, with and without a value padding mask."""
    query, value = _float(rng, B, 4, D), _float(rng, B, 5, value_width)
    reference, ours = _attention_pair(query, value)
    assert ours.fused == (value_width == D)
    for mask in (None, VALUE_MASK):
        want, want_w = reference(
            query, _keras_masked(value, mask), return_attention_scores=True
        )
        got, got_w = ours(query, value, value_mask=mask, return_attention_scores=True)
        _assert_close(got, want)
        _assert_close(got_w, want_w)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_additive_scorer_matches_keras_additive_attention(causal, rng):
    """1 head, identity projections, zero biases: ours is AdditiveAttention(use_scale=True).

    Keras scores are sum_d scale_d tanh(q_d + k_d); ours are w^T tanh(q + k)
    with `score_weight[0] = scale`.
    """
    query, value = _float(rng, B, 4, D), _float(rng, B, 5 if not causal else 4, D)
    reference = keras.layers.AdditiveAttention(use_scale=True)
    reference([query, value])
    scale = _float(rng, D)
    reference.scale.assign(scale)
    ours = MultiHeadAttention(num_heads=1, scorer="additive")
    ours(query, value)
    eye = np.eye(D, dtype="float32")
    ours.qkv_kernel.assign(np.concatenate([eye, eye, eye], -1))  # (D, 3D): one head
    ours.output_kernel.assign(eye)  # (D, D)
    ours.score_weight.assign(scale[None])  # (1, D)
    assert not np.any(ours.qkv_bias.numpy()) and not np.any(ours.output_bias.numpy())
    value_mask = VALUE_MASK[:, : value.shape[1]]
    want, want_w = reference(
        [query, value],
        mask=[None, value_mask],
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    got, got_w = ours(
        query,
        value,
        value_mask=value_mask,
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    _assert_close(got, want)
    _assert_close(got_w[:, 0], want_w)


def test_sinusoids_golden_values():
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (Section 3.5)."""
    table = ops.convert_to_numpy(sinusoids(101, 512))
    np.testing.assert_array_equal(table[0, 0::2], 0.0)
    np.testing.assert_array_equal(table[0, 1::2], 1.0)
    # (pos, 2i, d): 10000^(2i/d) is 1 at i=0 and 100 at 2i = d/2.
    golden = {
        (1, 0): math.sin(1.0),
        (1, 1): math.cos(1.0),
        (100, 256): math.sin(1.0),
        (100, 257): math.cos(1.0),
        (50, 2): math.sin(50 / 10000 ** (2 / 512)),
    }
    for (pos, channel), value in golden.items():
        np.testing.assert_allclose(table[pos, channel], value, atol=2e-6)
    small = ops.convert_to_numpy(
        SinusoidalPositionEncoding()(np.zeros((1, 60, 8), "float32"))
    )
    # d=8: 2i=2 -> wavelength 10000^(1/4) = 10, 2i=4 -> 100.
    np.testing.assert_allclose(
        small[0, 3, 2:4], [math.sin(0.3), math.cos(0.3)], atol=1e-6
    )
    np.testing.assert_allclose(
        small[0, 50, 4:6], [math.sin(0.5), math.cos(0.5)], atol=1e-6
    )


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_masked_softmax_fully_masked_row_is_uniform(dtype):
    """A fully masked row is uniform and finite; masked entries of a partly
    masked row are exactly 0; the result is float32 whatever the input dtype
    (pain point 7: no -1e9 overflow in float16)."""
    scores = ops.cast(
        np.array([[3.0, -2.0, 60000.0, 1.0], [5.0, 1.0, 2.0, 0.5]]), dtype
    )
    mask = np.array([[True, False, False, True], [False] * 4])
    weights = ops.convert_to_numpy(masked_softmax(scores, mask))
    assert weights.dtype == np.float32 and np.all(np.isfinite(weights))
    np.testing.assert_allclose(weights[1], 0.25, atol=1e-7)
    np.testing.assert_array_equal(weights[0, 1:3], 0.0)
    np.testing.assert_allclose(weights[0].sum(), 1.0, atol=1e-6)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_attention_over_all_padding_is_finite(policy, rng):
    """A sequence that is all padding gives finite outputs under half precision."""
    keras.config.set_dtype_policy(policy)
    layer = MultiHeadAttention(num_heads=H)
    x = _float(rng, B, 4, D)
    mask = np.array([[1, 1, 0, 0], [0, 0, 0, 0]], bool)
    out, weights = layer(
        x, x, query_mask=mask, value_mask=mask, return_attention_scores=True
    )
    assert np.all(np.isfinite(ops.convert_to_numpy(ops.cast(out, "float32"))))
    np.testing.assert_allclose(ops.convert_to_numpy(weights)[1], 0.25, atol=1e-6)


def _cached_inputs(rng, batch=3, queries=1, keys=5):
    """Head-major query `(B, H, T, d_k)`, key and value caches and a mask
    `(B, 1, T, S)` whose last row attends to nothing."""
    query, key = _float(rng, batch, H, queries, 4), _float(rng, batch, H, keys, 4)
    value = _float(rng, batch, H, keys, 3)
    mask = rng.random((batch, 1, queries, keys)) < 0.7
    mask[:, :, :, 0] = True
    mask[-1] = False  # a fully masked row: uniform weights
    return [query, key, value, mask]


@pytest.mark.parametrize("queries", [1, 4])
def test_cached_attention_is_one_function_in_either_form(queries, rng):
    """The elementwise form (small products) and the batched matmuls give the
    same outputs and weights, eagerly and in a graph of unknown batch where
    `ops.cond` picks the form at run time; a fully masked row is uniform."""
    inputs = _cached_inputs(rng, queries=queries)
    results = {}
    for limit in (0, 10**9):
        with elementwise_attention(limit):
            results[limit] = cached_attention_heads(*inputs)
            spec = [tf.TensorSpec((None, *t.shape[1:]), t.dtype) for t in inputs]
            graph = tf.function(cached_attention_heads, input_signature=spec,
                                autograph=False)
            results[f"graph {limit}"] = graph(*inputs)
    for name, (output, weights) in results.items():
        np.testing.assert_allclose(output, results[0][0], atol=ATOL, err_msg=str(name))
        np.testing.assert_allclose(weights, results[0][1], atol=ATOL, err_msg=str(name))
        assert weights.dtype == "float32"
        np.testing.assert_allclose(weights[-1], 1 / weights.shape[-1], atol=1e-7)
        masked = ~np.broadcast_to(inputs[3], weights.shape)
        masked[-1] = False  # the fully masked row: uniform instead
        np.testing.assert_array_equal(np.asarray(weights)[masked], 0.0)


def _op_types(limit, batch):
    """The op types of `cached_attention_heads` traced under `limit`, for a
    static batch or (None) an unknown one."""
    inputs = _cached_inputs(np.random.default_rng(0))
    spec = [tf.TensorSpec((batch, *t.shape[1:]), t.dtype) for t in inputs]
    with elementwise_attention(limit):
        graph = tf.function(cached_attention_heads, autograph=False).get_concrete_function(*spec)
    return {op.type for op in graph.graph.get_operations()}


def test_the_limit_picks_the_form_at_trace_time_where_it_can():
    """Static shapes choose while tracing (no conditional), an unknown batch
    at run time; a limit of 0 (XLA programs, TFLite) is batched matmuls only;
    the TensorFlow backend's default limit is the measured one."""
    small = _op_types(10**9, batch=3)
    assert "Exp" in small and not small & {"BatchMatMulV2", "Einsum", "StatelessIf", "If"}
    batched = _op_types(0, batch=None)
    assert {"BatchMatMulV2", "Einsum"} <= batched and "Exp" not in batched
    assert not batched & {"StatelessIf", "If"}
    assert _op_types(10**9, batch=None) & {"StatelessIf", "If"}
    assert elementwise_attention_limit() == ELEMENTWISE_ATTENTION_LIMIT > 0
    with elementwise_attention(0):
        assert elementwise_attention_limit() == 0
    assert elementwise_attention_limit() == ELEMENTWISE_ATTENTION_LIMIT
