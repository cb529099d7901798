"""Every public layer through the shared harness, plus what each must compute.

The harness (tests/harness.py) checks config and `.keras` round trips, the
symbolic and eager calls, a fit step and mixed_bfloat16; the extra asserts
here pin each layer's own maths and masking.
"""

import math

import keras
import numpy as np
import pytest
from harness import run_layer_test
from keras import ops

from keras_transformer.layers import (
    FeedForward,
    MaskedMaxPooling,
    MaskedMeanPooling,
    MultiHeadAttention,
    NGramConvolution,
    PositionEmbedding,
    SinusoidalPositionEncoding,
    TokenAndPositionEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from keras_transformer.layers.sinusoidal_position_encoding import sinusoids

B, T, S, D, V = 2, 4, 6, 8, 11


def _float(rng, *shape):
    return rng.normal(size=shape).astype("float32")


# Token ids with padding (id 0) at the end of the second row.
TOKENS = np.array([[3, 5, 7, 9], [4, 2, 0, 0]], "int32")


@pytest.mark.parametrize(
    "init_kwargs, call_kwargs",
    [
        ({"num_heads": 2}, {}),
        ({"num_heads": 2}, {"use_causal_mask": True}),
        (
            {"num_heads": 2, "scorer": "additive", "dropout": 0.1},
            {"use_causal_mask": True},
        ),
    ],
    ids=["dot", "dot_causal", "additive_causal"],
)
def test_multi_head_self_attention(init_kwargs, call_kwargs, tmp_path, rng):
    """Self-attention (one tensor as query and value: the fused QKV matmul)."""
    x = _float(rng, B, T, D)
    layer, out = run_layer_test(
        MultiHeadAttention,
        init_kwargs,
        [x],
        tmp_path,
        call_kwargs=call_kwargs,
        call_args=(0, 0),
        expected_output_shape=(B, T, D),
    )
    assert layer.fused and hasattr(layer, "qkv_kernel")
    if call_kwargs.get("use_causal_mask"):
        # Position 0 may only attend to itself, whatever comes after it.
        y = x.copy()
        y[:, 1:] = _float(rng, B, T - 1, D)
        np.testing.assert_allclose(
            layer(y, y, use_causal_mask=True)[:, 0], out[:, 0], atol=1e-6
        )


@pytest.mark.parametrize(
    "init_kwargs, value_width, frozen_ok",
    [
        # Same widths: cross-attention slices the fused kernel.
        ({"num_heads": 2}, D, ()),
        # Different widths: separate kernels; the key bias adds the same
        # q . b_k to every score of a row, which softmax ignores: zero gradient.
        (
            {"num_heads": 2, "key_dim": 3, "value_dim": 5, "output_dim": 7},
            6,
            ("key_bias",),
        ),
        ({"num_heads": 1, "scorer": "additive"}, D, ()),
    ],
    ids=["fused", "unfused_dims", "additive"],
)
def test_multi_head_cross_attention(init_kwargs, value_width, frozen_ok, tmp_path, rng):
    """Cross-attention with T != S (and widths differing from d_model)."""
    query, value = _float(rng, B, T, D), _float(rng, B, S, value_width)
    out_width = init_kwargs.get("output_dim", D)
    layer, (out, weights) = run_layer_test(
        MultiHeadAttention,
        init_kwargs,
        [query, value],
        tmp_path,
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=(B, T, out_width),
        frozen_ok=frozen_ok,
    )
    assert layer.fused == (value_width == D)
    heads = init_kwargs["num_heads"]
    assert tuple(weights.shape) == (B, heads, T, S)
    np.testing.assert_allclose(ops.sum(weights, -1), np.ones((B, heads, T)), atol=1e-6)


def test_attention_puts_query_mask_back_on_output():
    """The query's Keras mask reaches the output: a masked pooling downstream
    then ignores padding, so extra padding leaves the pooled vector unchanged."""
    ids = keras.Input((None,), dtype="int32")
    x = TokenAndPositionEmbedding(V, D, positions="learned", max_sequence_length=8)(ids)
    attended = MultiHeadAttention(num_heads=2)(x, x)
    pooled = keras.layers.GlobalAveragePooling1D()(attended)
    model = keras.Model(ids, [attended, pooled])
    out, pooled_short = model(TOKENS)
    np.testing.assert_array_equal(ops.convert_to_numpy(out._keras_mask), TOKENS != 0)
    padded = np.pad(TOKENS, ((0, 0), (0, 3)))
    _, pooled_long = model(padded)
    np.testing.assert_allclose(pooled_long, pooled_short, atol=1e-6)


@pytest.mark.parametrize("scorer", ["dot", "additive"])
def test_attention_cache_equals_full_causal_pass(scorer, rng):
    """A head-major `(B, h, S_max, d)` cache, filled by a 2-token prompt and
    then one token per call, gives the outputs of one causal pass over the
    whole sequence; a precomputed cross cache gives the uncached cross
    output.  Breaks if a write lands at the wrong position, head or layout.
    The cache holds two positions more than the sequence."""
    heads, width = 2, D // 2
    layer = MultiHeadAttention(num_heads=heads, scorer=scorer)
    x = _float(rng, B, T, D)
    full = ops.convert_to_numpy(layer(x, x, use_causal_mask=True))
    cache = (np.zeros((B, heads, T + 2, width), "float32"),) * 2
    out, cache = layer(
        x[:, :2], x[:, :2], use_causal_mask=True, cache=cache, cache_update_index=0
    )
    outputs = [ops.convert_to_numpy(out)]
    for i in range(2, T):
        out, cache = layer(
            x[:, i : i + 1], x[:, i : i + 1], use_causal_mask=True,
            cache=cache, cache_update_index=i,
        )
        outputs.append(ops.convert_to_numpy(out))
    np.testing.assert_allclose(np.concatenate(outputs, 1), full, atol=1e-5)
    # The written cache is the head-major projection of the whole sequence.
    key, value = layer.project_key_value(x, heads_first=True)
    np.testing.assert_allclose(cache[0][:, :, :T], key, atol=1e-5)
    np.testing.assert_allclose(cache[1][:, :, :T], value, atol=1e-5)
    np.testing.assert_array_equal(cache[0][:, :, T:], 0)  # past the end: unwritten

    memory = _float(rng, B, S, D)
    cross_cache = layer.project_key_value(memory, heads_first=True)
    assert tuple(cross_cache[0].shape) == (B, heads, S, width)
    cached_cross, _ = layer(x, None, cache=cross_cache)
    np.testing.assert_allclose(cached_cross, layer(x, memory), atol=1e-5)


@pytest.mark.parametrize("scorer", ["dot", "additive"])
def test_precomputed_cache_is_shared_by_groups_of_query_rows(scorer, rng):
    """Query rows `g * b` .. `g * b + g - 1` against row `b` of a precomputed
    cache (a sentence's beams against its encoder output) give the outputs,
    weights and masking of the cache tiled `g` times.  Breaks if the rows are
    grouped in the wrong order (beam-major instead of sentence-major)."""
    groups, heads = 3, 2
    layer = MultiHeadAttention(num_heads=heads, scorer=scorer)
    memory = _float(rng, B, S, D)
    memory_mask = np.arange(S)[None, :] < np.array([[S], [S - 2]])  # (B, S)
    query = _float(rng, B * groups, 2, D)
    query_mask = np.array([[True, True], [True, False]] * 3)  # (B * g, 2)
    uncached = layer(
        query, np.repeat(memory, groups, axis=0), query_mask=query_mask,
        value_mask=np.repeat(memory_mask, groups, axis=0),
    )
    cache = layer.project_key_value(memory, heads_first=True)  # (B, h, S, d)
    tiled = tuple(np.repeat(ops.convert_to_numpy(c), groups, axis=0) for c in cache)
    kwargs = dict(query_mask=query_mask, return_attention_scores=True)
    shared, shared_weights, _ = layer(
        query, None, value_mask=memory_mask, cache=cache, **kwargs
    )
    expected, expected_weights, _ = layer(
        query, None, value_mask=np.repeat(memory_mask, groups, axis=0),
        cache=tiled, **kwargs
    )
    assert tuple(shared.shape) == (B * groups, 2, D)
    assert tuple(shared_weights.shape) == (B * groups, heads, 2, S)
    np.testing.assert_allclose(shared, expected, atol=1e-5)
    np.testing.assert_allclose(shared, uncached, atol=1e-5)
    np.testing.assert_allclose(shared_weights, expected_weights, atol=1e-6)
    # The second sentence's padded source positions get no weight (from a
    # real query; a fully masked query row spreads its weight evenly).
    weights = ops.convert_to_numpy(shared_weights)
    np.testing.assert_array_equal(weights[groups:, :, 0, -2:], 0)
    assert (weights[:groups, :, 0, -2:] > 0).all()
    # An explicit (B_q, T, S) mask is grouped with its query rows too.
    attention_mask = rng.random((B * groups, 2, S)) < 0.7
    attention_mask[..., 0] = True
    np.testing.assert_allclose(
        layer(query, None, attention_mask=attention_mask, cache=cache)[0],
        layer(query, None, attention_mask=attention_mask, cache=tiled)[0],
        atol=1e-5,
    )
    with pytest.raises(ValueError, match="query batch 5 and cache batch 2"):
        layer(query[:5], None, cache=cache)


def test_sinusoidal_position_encoding(tmp_path, rng):
    """Output is the sinusoid table broadcast over the batch, input values ignored."""
    x = _float(rng, B, T, D)
    _, out = run_layer_test(SinusoidalPositionEncoding, {}, x, tmp_path)
    expected = ops.convert_to_numpy(sinusoids(T, D))
    np.testing.assert_allclose(out, np.broadcast_to(expected, (B, T, D)), atol=1e-6)
    shifted = SinusoidalPositionEncoding()(x, start_index=2)
    np.testing.assert_allclose(shifted[:, :2], out[:, 2:], atol=1e-6)


def test_position_embedding(tmp_path, rng):
    """Output rows are the learned table's first T rows (offset by start_index)."""
    x = _float(rng, B, T, D)
    layer, out = run_layer_test(PositionEmbedding, {"sequence_length": 8}, x, tmp_path)
    table = ops.convert_to_numpy(layer.position_embeddings)
    np.testing.assert_allclose(out, np.broadcast_to(table[:T], (B, T, D)), atol=1e-6)
    np.testing.assert_allclose(layer(x, start_index=3)[0], table[3 : 3 + T], atol=1e-6)


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_token_and_position_embedding(positions, tmp_path):
    """E[x]·sqrt(d) + PE, with the padding mask `ids != 0` on the output."""
    init = {
        "vocabulary_size": V,
        "hidden_dim": D,
        "max_sequence_length": 8,
        "positions": positions,
    }
    layer, out = run_layer_test(TokenAndPositionEmbedding, init, TOKENS, tmp_path)
    np.testing.assert_array_equal(ops.convert_to_numpy(out._keras_mask), TOKENS != 0)
    table = ops.convert_to_numpy(layer.embeddings)
    pe = ops.convert_to_numpy(layer.position_encoding(ops.zeros((B, T, D))))
    np.testing.assert_allclose(out, table[TOKENS] * math.sqrt(D) + pe, atol=1e-5)


def test_token_and_position_embedding_reverse(tmp_path, rng):
    """reverse=True is the tied pre-softmax projection x E^T, with no Keras mask."""
    hidden = _float(rng, B, T, D)
    init = {"vocabulary_size": V, "hidden_dim": D}
    layer, logits = run_layer_test(
        TokenAndPositionEmbedding,
        init,
        hidden,
        tmp_path,
        call_kwargs={"reverse": True},
        expected_output_shape=(B, T, V),
    )
    np.testing.assert_allclose(
        logits, hidden @ ops.convert_to_numpy(layer.embeddings).T, atol=1e-5
    )
    assert getattr(logits, "_keras_mask", None) is None
    # Also when the hidden states come from the (masked) forward call.
    embedded = layer(TOKENS)
    assert getattr(layer(embedded, reverse=True), "_keras_mask", None) is None


def test_feed_forward(tmp_path, rng):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, position by position."""
    x = _float(rng, B, T, D)
    layer, out = run_layer_test(FeedForward, {"intermediate_dim": 16}, x, tmp_path)
    w1, b1, w2, b2 = layer.get_weights()
    np.testing.assert_allclose(out, np.maximum(0, x @ w1 + b1) @ w2 + b2, atol=1e-5)


def test_masked_mean_pooling(tmp_path, rng):
    """Mean over real positions (== GlobalAveragePooling1D); an empty row is 0, not NaN."""
    x = _float(rng, 3, T, D)
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]], bool)
    layer, out = run_layer_test(MaskedMeanPooling, {}, x, tmp_path)
    np.testing.assert_allclose(out, x.mean(axis=1), atol=1e-6)
    got = ops.convert_to_numpy(layer(x, mask=mask))
    reference = keras.layers.GlobalAveragePooling1D()(x[:2], mask=mask[:2])
    np.testing.assert_allclose(got[:2], reference, atol=1e-6)
    np.testing.assert_array_equal(got[2], np.zeros(D, "float32"))
    # A Keras mask (here from mask_zero) is used and not passed on.
    ids = keras.Input((None,), dtype="int32")
    pooled = MaskedMeanPooling()(keras.layers.Embedding(V, D, mask_zero=True)(ids))
    model = keras.Model(ids, pooled)
    embedded = ops.convert_to_numpy(model.layers[1](TOKENS))
    np.testing.assert_allclose(
        model(TOKENS)[1], embedded[1, :2].mean(axis=0), atol=1e-6
    )
    assert getattr(model(TOKENS), "_keras_mask", None) is None


def test_masked_max_pooling(tmp_path, rng):
    """Max over real positions (== GlobalMaxPooling1D without padding); padding
    never wins, even where every real value is negative; an empty row is 0."""
    x = _float(rng, 3, T, D) - 10.0  # all negative: a padded 0 would win
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]], bool)
    layer, out = run_layer_test(MaskedMaxPooling, {}, x, tmp_path)
    np.testing.assert_allclose(out, x.max(axis=1), atol=1e-6)
    got = ops.convert_to_numpy(layer(x, mask=mask))
    np.testing.assert_allclose(got[0], x[0].max(axis=0), atol=1e-6)
    np.testing.assert_allclose(got[1], x[1, :2].max(axis=0), atol=1e-6)
    np.testing.assert_array_equal(got[2], np.zeros(D, "float32"))


def _explicit_ngram_features(layer, x):
    """concat_k ReLU(Conv_k(x)), each Conv_k a "same" convolution, summed window by window."""
    features = []
    for conv in layer.convolutions:
        kernel, bias = (ops.convert_to_numpy(w) for w in conv.weights)  # (k, D, F), (F,)
        k = kernel.shape[0]
        padded = np.pad(x, ((0, 0), ((k - 1) // 2, k // 2), (0, 0)))
        windows = np.stack([padded[:, t:t + k] for t in range(x.shape[1])], axis=1)  # (B, T, k, D)
        features.append(np.maximum(np.einsum("btkd,kdf->btf", windows, kernel) + bias, 0))
    return np.concatenate(features, axis=-1)


def test_ngram_convolution_is_a_residual_of_same_padded_convolutions(tmp_path, rng):
    """LayerNorm(x + Dense(concat_k ReLU(Conv_k(x)))), each Conv_k a "same"
    convolution: checked against an explicit sum over each window."""
    x = _float(rng, B, T, D)
    layer, out = run_layer_test(NGramConvolution, {"widths": (2, 3), "filters": 4}, x, tmp_path)
    w, b = (ops.convert_to_numpy(v) for v in layer.projection.weights)
    y = x + _explicit_ngram_features(layer, x) @ w + b
    gamma, beta = (ops.convert_to_numpy(v) for v in layer.norm.weights)
    mean, var = y.mean(-1, keepdims=True), y.var(-1, keepdims=True)
    expected = (y - mean) / np.sqrt(var + layer.layer_norm_epsilon) * gamma + beta
    np.testing.assert_allclose(out, expected, atol=1e-4)


def test_ngram_convolution_without_residual_returns_the_bare_features(tmp_path, rng):
    """residual=False (Kim's CNN): concat_k ReLU(Conv_k(x)), `filters` per
    width, nothing projected, added or normalised; a bad value is named."""
    x = _float(rng, B, T, D)
    layer, out = run_layer_test(
        NGramConvolution, {"widths": (2, 3), "filters": 4, "residual": False}, x, tmp_path
    )
    assert out.shape == (B, T, 8)
    assert len(layer.weights) == 4  # two kernels, two biases
    np.testing.assert_allclose(out, _explicit_ngram_features(layer, x), atol=1e-5)
    with pytest.raises(ValueError, match="residual='no'"):
        NGramConvolution((3,), residual="no")


def test_ngram_convolution_sees_only_its_window_and_no_padding(rng):
    """A token's output moves with tokens inside its widest window and not with
    those outside it; a padded position's value never reaches a real one."""
    layer = NGramConvolution((3,))  # position t sees t-1, t, t+1
    x = _float(rng, 1, 7, D)
    base = ops.convert_to_numpy(layer(x))
    moved = x.copy()
    moved[0, 6] += 5.0  # far from position 2
    np.testing.assert_allclose(ops.convert_to_numpy(layer(moved))[0, :5], base[0, :5], atol=1e-6)
    assert not np.allclose(ops.convert_to_numpy(layer(moved))[0, 5], base[0, 5])
    mask = np.array([[1, 1, 1, 1, 0, 0, 0]], bool)
    garbage = x.copy()
    garbage[0, 4:] = 100.0
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(garbage, mask=mask))[0, :4],
        ops.convert_to_numpy(layer(x, mask=mask))[0, :4], atol=1e-6,
    )
    with pytest.raises(ValueError, match=r"widths=\(\)"):
        NGramConvolution(())


# Pre-LN runs with `return_attention_scores=True`: the functional call must
# return the same `(output, weights)` structure as the eager one.
BLOCK_CASES = pytest.mark.parametrize(
    "normalize_first, scores",
    [(False, False), (True, True)],
    ids=["post_ln", "pre_ln_scores"],
)


@BLOCK_CASES
def test_transformer_encoder_block(normalize_first, scores, tmp_path, rng):
    """Harness, and the padding mask: padded positions never reach real ones."""
    x = _float(rng, B, T, D)
    init = {"intermediate_dim": 16, "num_heads": 2, "normalize_first": normalize_first}
    layer, out = run_layer_test(
        TransformerEncoderBlock,
        init,
        x,
        tmp_path,
        call_kwargs={"return_attention_scores": scores},
        expected_output_shape=(B, T, D),
    )
    if scores:
        assert tuple(out[1].shape) == (B, 2, T, T)
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
    y = x.copy()
    y[1, 2:] = _float(rng, 2, D) * 10
    a, b = layer(x, mask=mask), layer(y, mask=mask)
    np.testing.assert_allclose(a[mask], b[mask], atol=1e-5)


@BLOCK_CASES
def test_transformer_decoder_block(normalize_first, scores, tmp_path, rng):
    """Harness with T != S; later decoder positions never change earlier outputs."""
    dec, enc = _float(rng, B, T, D), _float(rng, B, S, D)
    init = {"intermediate_dim": 16, "num_heads": 2, "normalize_first": normalize_first}
    layer, out = run_layer_test(
        TransformerDecoderBlock,
        init,
        [dec, enc],
        tmp_path,
        call_kwargs={"return_attention_scores": scores},
        expected_output_shape=(B, T, D),
    )
    if scores:
        out, weights = out
        assert tuple(weights["self"].shape) == (B, 2, T, T)
        assert tuple(weights["cross"].shape) == (B, 2, T, S)
        assert np.all(np.triu(ops.convert_to_numpy(weights["self"]), k=1) == 0)
    changed = dec.copy()
    changed[:, 2:] = _float(rng, B, T - 2, D)
    np.testing.assert_allclose(layer(changed, enc)[:, :2], out[:, :2], atol=1e-5)
    # The encoder padding mask hides padded source positions from cross-attention.
    enc_mask = np.array([[1] * S, [1, 1, 1, 0, 0, 0]], bool)
    noisy = enc.copy()
    noisy[1, 3:] = _float(rng, 3, D) * 10
    np.testing.assert_allclose(
        layer(dec, noisy, encoder_sequence_mask=enc_mask),
        layer(dec, enc, encoder_sequence_mask=enc_mask),
        atol=1e-5,
    )
