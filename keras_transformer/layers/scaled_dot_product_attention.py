"""Scaled dot-product attention (Vaswani et al., 2017, Section 3.2.1)."""

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

    Returns:
        `(output (B, T, H, d_v), weights (B, H, T, S) float32)`.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    # Scale the queries, not the scores: T*d_k multiplies instead of T*S.
    query = ops.multiply(query, ops.cast(scale, query.dtype))
    if heads_first:
        # Batched matmuls over (B, H) against the cache as it is laid out,
        # contracting the keys' last axis: a transposed key cache (what
        # `matmul(q, swapaxes(k))`, or an einsum Keras rewrites as one, reads)
        # is a copy of every key cache on every step of an XLA decoding loop.
        query = ops.transpose(query, (0, 2, 1, 3))  # (B, H, T, d_k); T = 1: no copy
        scores = ops.einsum("...td,...sd->...ts", query, key)  # (B, H, T, S)
    else:
        # Head-major operands: both batched matmuls (and their gradients)
        # then read (B, H) as leading batch axes; the einsums over (B, S, H,
        # d) made XLA and TF transpose inside every one of them (1.25x
        # slower attention, forward and backward, at B=64, T=64, h=8).
        query, key, value = (
            ops.transpose(t, (0, 2, 1, 3)) for t in (query, key, value)
        )  # (B, H, T or S, d)
        scores = ops.einsum("bhtd,bhsd->bhts", query, key)  # (B, H, T, S)
    if mask is not None and len(mask.shape) == 3:
        mask = ops.expand_dims(mask, 1)  # (B, 1, T, S)
    weights = masked_softmax(scores, mask)  # (B, H, T, S) float32
    dropped = weights if dropout_fn is None else dropout_fn(weights)
    if heads_first:
        output = ops.matmul(ops.cast(dropped, value.dtype), value)  # (B, H, T, d_v)
        output = ops.transpose(output, (0, 2, 1, 3))  # (B, T, H, d_v)
    else:
        dropped = ops.cast(dropped, value.dtype)
        output = ops.einsum("bhts,bhsd->bhtd", dropped, value)  # (B, H, T, d_v)
        output = ops.transpose(output, (0, 2, 1, 3))  # (B, T, H, d_v)
    return output, weights


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
