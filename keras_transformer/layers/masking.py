"""Mask maths shared by every attention layer, as small pure functions.

Every mask here is boolean, `True` where attention is *allowed*.  All the
kinds a caller may give (query padding, key/value padding, causal, explicit)
are merged in `merge_attention_masks` into one `(B, T, S)` mask, the single
place where they meet.
"""

from keras import ops


def padding_mask(token_ids, pad_id=0):
    """`True` at real tokens: `token_ids != pad_id`, shape `(B, T)`."""
    return ops.not_equal(token_ids, pad_id)


def causal_mask(query_length, key_length, offset=0):
    """Lower-triangular mask, `(T, S)`: query `i` sees keys `j <= i + offset`.

    `offset` is the position of the first query in the key sequence; it is
    non-zero when decoding step by step against a key/value cache.
    """
    col = ops.arange(key_length, dtype="int32")  # (S,)
    if isinstance(query_length, int) and query_length == 1:
        # A decoding step: one row, keys 0..offset (three ops a step, not seven).
        return ops.expand_dims(ops.less_equal(col, ops.cast(offset, "int32")), 0)  # (1, S)
    row = ops.expand_dims(ops.arange(query_length, dtype="int32"), 1)  # (T, 1)
    return ops.greater_equal(row + ops.cast(offset, "int32"), ops.expand_dims(col, 0))  # (T, S)


def merge_attention_masks(
    query,
    key,
    query_mask=None,
    key_mask=None,
    attention_mask=None,
    use_causal_mask=False,
    causal_offset=0,
    key_length=None,
    broadcast=True,
):
    """AND every given mask into one boolean `(B, T, S)` mask, or `None`.

    Args:
        query: `(B, T, ...)` tensor, used for its static or dynamic shape.
        key: `(B, S, ...)` tensor, used for its shape.
        query_mask: optional `(B, T)` padding mask of the queries.
        key_mask: optional `(B, S)` padding mask of the keys/values.
        attention_mask: optional `(B, T, S)` or `(T, S)` explicit mask.
        use_causal_mask: forbid attention to later positions.
        causal_offset: position of the first query among the keys.
        key_length: S, when `key` does not hold it on axis 1 (a head-major
            `(B, h, S, d)` cache).
        broadcast: return the full `(B, T, S)`; with False, a rank-3 mask
            that broadcasts to it (what a `where` over the scores needs,
            without the shape ops a decoding step would pay for).
    """
    mask = None
    if key_length is None and (use_causal_mask or broadcast):
        key_length = _dim(key, 1)  # only where it is needed: a shape op a step

    def _and(a, b):
        return b if a is None else ops.logical_and(a, b)

    if query_mask is not None:
        mask = _and(mask, ops.expand_dims(ops.cast(query_mask, "bool"), -1))  # (B, T, 1)
    if key_mask is not None:
        mask = _and(mask, ops.expand_dims(ops.cast(key_mask, "bool"), -2))  # (B, 1, S)
    if use_causal_mask:
        causal = causal_mask(_dim(query, 1), key_length, causal_offset)
        mask = _and(mask, ops.expand_dims(causal, 0))  # (1, T, S)
    if attention_mask is not None:
        attention_mask = ops.cast(attention_mask, "bool")
        if len(attention_mask.shape) == 2:
            attention_mask = ops.expand_dims(attention_mask, 0)  # (1, T, S)
        mask = _and(mask, attention_mask)
    if mask is None or not broadcast:
        return mask
    return ops.broadcast_to(
        mask, (_dim(query, 0), _dim(query, 1), key_length)
    )  # (B, T, S)


def _dim(x, axis):
    """`x`'s size along `axis`: a Python int where static (no shape op)."""
    size = x.shape[axis]
    return ops.shape(x)[axis] if size is None else size
