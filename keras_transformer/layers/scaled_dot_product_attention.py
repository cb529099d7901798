"""Scaled dot-product attention (Vaswani et al., 2017, Section 3.2.1)."""

import contextlib
import contextvars
import math

import keras
from keras import ops

#: A masked attention score: float32's own minimum (see `masked_softmax`).
MASKED_SCORE = -3.4028234663852886e38


def masked_softmax(scores, mask=None, axis=-1):
    """Softmax in float32 with masked entries at the dtype's own minimum.

    Filling with `finfo(float32).min` rather than `-inf` (or a large
    constant such as -1e9, which overflows float16) keeps a fully masked row
    finite: it becomes uniform instead of NaN.  Computing in float32 keeps the
    exponentials accurate under mixed precision.
    """
    scores = ops.cast(scores, "float32")
    if mask is not None:
        scores = ops.where(mask, scores, ops.cast(MASKED_SCORE, "float32"))
    if scores.shape[axis] == 1:
        # One key (the first decoding step): its weight is 1, masked or not.
        # ops.softmax would say the same but warn that the axis has length 1.
        return ops.ones_like(scores)
    # The backend's fused softmax: one kernel forward and one backward (a
    # softmax written out as max, exp, sum and divide costs seven more ops in
    # a TF graph's gradient); it subtracts the row maximum itself.
    return ops.softmax(scores, axis=axis)


#: The largest elementwise product, `B * H * T * S * d_k` values, for which
#: attention over a decoding cache multiplies and sums elementwise rather
#: than in batched matmuls on the TensorFlow backend
#: (`cached_attention_heads`).  Above it the batched matmuls are faster;
#: below it their fixed cost dominates: in a TensorFlow graph on x86 they
#: and the softmax run as oneDNN primitives, which hand even a one-query
#: product to the other op threads (about 35 us each on two cores, where
#: the elementwise ops cost a few).  Measured by
#: `benchmarks/ablate_step_attention.py`.
ELEMENTWISE_ATTENTION_LIMIT = 2**17
_LIMIT = contextvars.ContextVar("keras_transformer_elementwise_attention", default=None)


def elementwise_attention_limit():
    """The largest cached-attention product computed elementwise here (0: none).

    `ELEMENTWISE_ATTENTION_LIMIT` on the TensorFlow backend and 0 on the
    others (XLA compiles them, and its dots beat the elementwise form at
    every size), unless an `elementwise_attention` context says otherwise.
    """
    limit = _LIMIT.get()
    if limit is not None:
        return limit
    return ELEMENTWISE_ATTENTION_LIMIT if keras.backend.backend() == "tensorflow" else 0


@contextlib.contextmanager
def elementwise_attention(limit):
    """Within this context, attention over a decoding cache traced here
    computes products of at most `limit` values elementwise (0: batched
    matmuls at every size; see `cached_attention_heads`).

    Enter it with 0 around a decoding loop that XLA compiles on the
    TensorFlow backend (`tf.function(jit_compile=True)`): XLA's dots cost
    less than the elementwise form at every size, and without static
    shapes the choice would otherwise be a conditional in every step.
    """
    token = _LIMIT.set(int(limit))
    try:
        yield
    finally:
        _LIMIT.reset(token)


def scaled_dot_product_attention(
    query, key, value, mask=None, scale=None, dropout_fn=None, heads_first=False
):
    """softmax(Q K^T / sqrt(d_k)) V over heads.

    Args:
        query: `(B, T, H, d_k)`.
        key: `(B, S, H, d_k)`, or `(B, H, S, d_k)` with `heads_first`.
        value: `(B, S, H, d_v)`, or `(B, H, S, d_v)` with `heads_first`.
        mask: optional boolean `(B, T, S)` (broadcast over heads) or
            `(B, H, T, S)`; `True` where attention is allowed.
        scale: multiplier of the scores, `1 / sqrt(d_k)` by default.
        dropout_fn: optional callable applied to the attention weights.
        heads_first: keys and values are head-major, the layout the batched
            matmuls read without a transpose (a decoding cache, read every
            step: transposing it each time cost more than the matmuls).
            Without `dropout_fn`, a small product is computed elementwise
            (`cached_attention_heads`).

    Returns:
        `(output (B, T, H, d_v), weights (B, H, T, S) float32)`.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    # Scale the queries, not the scores: T*d_k multiplies instead of T*S.
    query = ops.multiply(query, ops.cast(scale, query.dtype))
    if heads_first:
        query = ops.transpose(query, (0, 2, 1, 3))  # (B, H, T, d_k); T = 1: no copy
    else:
        # Head-major operands: both batched matmuls (and their gradients)
        # then read (B, H) as leading batch axes; the einsums over (B, S, H,
        # d) made XLA and TF transpose inside every one of them (1.25x
        # slower attention, forward and backward, at B=64, T=64, h=8).
        query, key, value = (
            ops.transpose(t, (0, 2, 1, 3)) for t in (query, key, value)
        )  # (B, H, T or S, d)
    if mask is not None and len(mask.shape) == 3:
        mask = ops.expand_dims(mask, 1)  # (B, 1, T, S)
    if heads_first and dropout_fn is None:
        output, weights = cached_attention_heads(query, key, value, mask)
    else:
        output, weights = _batched_heads(query, key, value, mask, dropout_fn, heads_first)
    return ops.transpose(output, (0, 2, 1, 3)), weights  # (B, T, H, d_v)


def _batched_heads(query, key, value, mask, dropout_fn=None, heads_first=False):
    """Head-major `(B, H, T, d)` attention in two batched matmuls: `(output
    (B, H, T, d_v), weights (B, H, T, S) float32)`; `query` already scaled."""
    if heads_first:
        # Batched matmuls over (B, H) against the cache as it is laid out,
        # contracting the keys' last axis: a transposed key cache (what
        # `matmul(q, swapaxes(k))`, or an einsum Keras rewrites as one, reads)
        # is a copy of every key cache on every step of an XLA decoding loop.
        scores = ops.einsum("...td,...sd->...ts", query, key)  # (B, H, T, S)
    else:
        scores = ops.einsum("bhtd,bhsd->bhts", query, key)  # (B, H, T, S)
    weights = masked_softmax(scores, mask)  # (B, H, T, S) float32
    dropped = ops.cast(weights if dropout_fn is None else dropout_fn(weights), value.dtype)
    if heads_first:
        output = ops.matmul(dropped, value)  # (B, H, T, d_v)
    else:
        output = ops.einsum("bhts,bhsd->bhtd", dropped, value)  # (B, H, T, d_v)
    return output, weights


def cached_attention_heads(query, key, value, mask=None):
    """Attention of scaled head-major queries over a head-major cache.

    `query` `(B, H, T, d_k)` (already scaled), `key` `(B, H, S, d_k)`,
    `value` `(B, H, S, d_v)`, `mask` broadcasting to `(B, H, T, S)`.
    Returns `(output (B, H, T, d_v), weights (B, H, T, S) float32)`, the
    function of `_batched_heads`.

    A decoding step's product is small (one query a row): up to
    `elementwise_attention_limit()` values the scores are a multiply and a
    sum over d_k, the softmax is written out and the output a multiply and
    a sum over S, all in float32; above it, batched matmuls.  Where the
    shapes are static (or the limit is 0) the choice is made here,
    otherwise by `ops.cond` on the product's size, once a call.
    """
    def elementwise():
        dtype = value.dtype
        q, k, v = (ops.cast(t, "float32") for t in (query, key, value))
        scores = ops.sum(ops.expand_dims(q, 3) * ops.expand_dims(k, 2), axis=-1)  # (B, H, T, S)
        weights = _written_out_softmax(scores, mask)  # (B, H, T, S)
        output = ops.sum(
            ops.expand_dims(weights, -1) * ops.expand_dims(v, 2), axis=3
        )  # (B, H, T, d_v)
        return ops.cast(output, dtype), weights

    def batched():
        return _batched_heads(query, key, value, mask, heads_first=True)

    limit = elementwise_attention_limit()
    if limit <= 0:
        return batched()
    size = _product_size(query, key)
    if isinstance(size, int):
        return elementwise() if size <= limit else batched()
    return ops.cond(ops.less_equal(size, limit), elementwise, batched)


def _product_size(query, key):
    """`B * H * T * d_k * S`: a Python int where the shapes are static."""
    dims = (*query.shape, key.shape[2])
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims)
    return ops.size(query) * ops.shape(key)[2]


def _written_out_softmax(scores, mask=None, axis=-1):
    """`masked_softmax` of float32 `scores` as max, exp, sum and divide.

    The same function (a fully masked row is uniform), in elementwise ops:
    a decoding step's few scores cost less so than in a fused softmax that
    the runtime may hand to other threads (see `cached_attention_heads`).
    """
    if mask is not None:
        scores = ops.where(mask, scores, ops.cast(MASKED_SCORE, "float32"))
    exp = ops.exp(scores - ops.max(scores, axis=axis, keepdims=True))
    return exp / ops.sum(exp, axis=axis, keepdims=True)


def fused_attention_available():
    """Whether `fused_dot_product_attention` is the faster choice here.

    On the JAX backend `keras.ops.dot_product_attention` reaches cuDNN's fused
    (flash) kernel on a GPU for bfloat16/float16 inputs and JAX's own
    attention otherwise; on a base-size training step in bfloat16 on an
    H100 the fused kernel made the whole step 1.17x faster
    (benchmarks/ablate_gpu_step.py).  TensorFlow's version is the same
    einsum/softmax as ours, so there the hand-written path is kept.
    """
    return keras.backend.backend() == "jax"


def fused_dot_product_attention(query, key, value, mask=None, scale=None):
    """softmax(Q K^T / sqrt(d_k)) V through `keras.ops.dot_product_attention`.

    The same function as `scaled_dot_product_attention` without the weights
    (a fused kernel never materialises them) and without dropout on them.
    The softmax runs in float32 and masked scores get a large negative value,
    so a fully masked row is uniform, not NaN, as in the unfused path.

    Args:
        query: `(B, T, H, d_k)`; key: `(B, S, H, d_k)`; value: `(B, S, H, d_v)`.
        mask: optional boolean `(B, T, S)` or `(B, H, T, S)`, `True` attends.
        scale: multiplier of the scores, `1 / sqrt(d_k)` by default.

    Returns:
        `(B, T, H, d_v)`.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    if mask is not None and len(mask.shape) == 3:
        mask = ops.expand_dims(mask, 1)  # (B, 1, T, S)
    return ops.dot_product_attention(query, key, value, mask=mask, scale=scale)


def additive_attention(
    query, key, value, score_weight, mask=None, dropout_fn=None, heads_first=False
):
    """Additive (Bahdanau) attention: scores = w^T tanh(q + k), per head.

    Args:
        query: `(B, T, H, d_k)`.
        key: `(B, S, H, d_k)`, or `(B, H, S, d_k)` with `heads_first`.
        value: `(B, S, H, d_v)`, or `(B, H, S, d_v)` with `heads_first`.
        score_weight: `(H, d_k)` vector `w` of each head.
        mask: optional boolean `(B, T, S)`, `True` where attention is allowed.
        dropout_fn: optional callable applied to the attention weights.
        heads_first: keys and values are head-major (a decoding cache); the
            queries are moved to that layout instead of the whole cache.

    Returns:
        `(output (B, T, H, d_v), weights (B, H, T, S) float32)`.
    """
    if heads_first:
        query = ops.transpose(query, (0, 2, 1, 3))  # (B, H, T, d_k)
        hidden = ops.tanh(
            ops.expand_dims(query, 3) + ops.expand_dims(key, 2)
        )  # (B, H, T, S, d_k)
        scores = ops.einsum("bhtsd,hd->bhts", hidden, score_weight)  # (B, H, T, S)
    else:
        hidden = ops.tanh(
            ops.expand_dims(query, 2) + ops.expand_dims(key, 1)
        )  # (B, T, S, H, d_k)
        scores = ops.einsum("btshd,hd->bhts", hidden, score_weight)  # (B, H, T, S)
    if mask is not None and len(mask.shape) == 3:
        mask = ops.expand_dims(mask, 1)  # (B, 1, T, S)
    weights = masked_softmax(scores, mask)
    dropped = weights if dropout_fn is None else dropout_fn(weights)
    value_spec = "bhsd" if heads_first else "bshd"
    output = ops.einsum(
        f"bhts,{value_spec}->bthd", ops.cast(dropped, value.dtype), value
    )  # (B, T, H, d_v)
    return output, weights
