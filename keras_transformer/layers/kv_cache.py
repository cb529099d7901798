"""The key/value cache of `MultiHeadAttention`: writing it and sharing it.

Pure functions in `keras.ops`.  A cache tensor is head-major
`(B, h, S_max, d)`, the layout the attention matmuls read without a
transpose.

`MultiHeadAttention` calls `write_caches` through this module's namespace, so
`benchmarks/ablate_cache_write.py` can swap in another write by assigning
`kv_cache.write_caches`.

A TensorFlow graph copies the whole cache on every functional write (its
scatter kernel on the CPU reused the input's buffer in no graph tried).  A caller that
runs a search in such a graph may offer an in-place writer
(`writes_in_place`); the searches (`greedy_search`, `beam_search`) then copy
their caches once into buffers of their own and write each step's position
into them.  The writer is backend code (TensorFlow's is
`training.serving.in_place.TENSORFLOW_IN_PLACE`); this module stays in
`keras.ops`.
"""

import contextlib
import contextvars

from keras import ops

from keras_transformer.layers._shapes import leading_shape

_OFFERED = contextvars.ContextVar("keras_transformer_offered_cache_writer", default=None)
_ACTIVE = contextvars.ContextVar("keras_transformer_active_cache_writer", default=None)


@contextlib.contextmanager
def writes_in_place(writer):
    """Within this context, a search traced here writes its caches in place with `writer`.

    `writer` has two methods: `copy(tensor)`, a copy in a buffer no other
    tensor shares (one the graph optimizer neither merges with an equal copy
    nor folds into a constant), and `update_rows(cache, indices, values)`,
    `cache` `(B, h, S, d)` with rows `indices` `(M,)` of its `(B * h * S,
    d)` view set to `values` `(M, d)` in its own buffer, returned.  A search
    takes the writer when it is traced (`decoding._common.owned_cache`): it
    copies the cache entries a step writes, then traces each step inside
    `writing(writer)`, so nothing but its own loop holds the buffers it
    writes.  A step run outside a search stays
    functional.  Enter it only where the writer's ops run: TensorFlow's has
    no XLA kernel, and a program XLA compiles updates in place itself.
    """
    token = _OFFERED.set(writer)
    try:
        yield
    finally:
        _OFFERED.reset(token)


def offered_writer():
    """The writer of the innermost `writes_in_place`, or None."""
    return _OFFERED.get()


@contextlib.contextmanager
def writing(writer):
    """A search's step: one-position writes traced here go through `writer`
    (None: functional writes).  For the searches, on buffers they own."""
    token = _ACTIVE.set(writer)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def write_cache(cache, new, index):
    """Head-major `cache` `(B, h, S_max, d)` with `new` `(B, T, h, d)` at `index`.

    One position (a decoding step) is written with a scatter of `B * h` rows,
    which costs less than a `slice_update` of the same position in a
    TensorFlow graph (`benchmarks/ablate_cache_write.py`).  Neither is in
    place there: the runtime copies the whole cache on every write, so a
    step's write grows with `S_max`, unless a search writes its own
    buffers in place (`writes_in_place`); XLA updates in place itself.
    Several positions (a prompt) go through `slice_update`.
    """
    new = ops.cast(new, cache.dtype)
    if new.shape[1] != 1:
        return ops.slice_update(
            cache, [0, 0, index, 0], ops.transpose(new, (0, 2, 1, 3))
        )  # (B, h, T, d) at positions index..index+T-1
    return _scatter_position(cache, new, _position_rows(cache, index))


class CachePosition:
    """One decoding position, as every layer of a step writes and reads it.

    Its index, the scatter rows that write it into a cache of
    `(B, h, S_max, d)`, and the cache slots its
    query may attend, `key_mask` `(1, 1, S_max)`: slots `0..index`.  A step
    makes it once (`Transformer.decode_step`) and passes it as each layer's
    `cache_update_index`, so the layers share these tensors instead of each
    making its own: in a TensorFlow graph a decoding step at batch 1 costs
    about one executor hand-off an op.

    Args:
        index: The position, a scalar int tensor or a Python int.
        cache: A self-attention cache the step writes (for its shape).
    """

    def __init__(self, index, cache):
        self.index = index
        length = cache_length(cache)
        self.rows = _position_rows(cache, index)
        slots = ops.arange(length, dtype="int32")  # (S_max,)
        self.key_mask = ops.reshape(
            ops.less_equal(slots, ops.cast(index, "int32")), (1, 1, -1)
        )  # (1, 1, S_max)


def position_index(index):
    """The index of a `cache_update_index`: a `CachePosition`'s, or itself."""
    return index.index if isinstance(index, CachePosition) else index


def write_caches(caches, news, index):
    """`write_cache` of each `(cache, new)` pair: a layer's keys and values.

    One position written into caches of the same rows and heads shares its
    scatter indices: made once per layer, or once per step when `index` is a
    `CachePosition`.
    """
    if any(n.shape[1] != 1 for n in news):
        index = position_index(index)
        return tuple(write_cache(c, n, index) for c, n in zip(caches, news, strict=True))
    if isinstance(index, CachePosition):
        rows = index.rows
    else:
        rows = _position_rows(caches[0], position_index(index))
    return tuple(
        _scatter_position(c, ops.cast(n, c.dtype), rows) for c, n in zip(caches, news, strict=True)
    )


def _position_rows(cache, index):
    """The rows that write one position: `(B * h, 3)` [row, head, index]
    scatter indices, or in place the `(B * h,)` rows `(b * h + head) * S_max
    + index` of the cache seen as `(B * h * S_max, d)`."""
    heads = cache.shape[1]
    flat = ops.arange(leading_shape(cache, 1)[0] * heads, dtype="int32")  # (B * h,)
    if _ACTIVE.get() is not None:
        return flat * cache_length(cache) + ops.cast(index, "int32")  # (B * h,)
    return ops.stack(
        [
            ops.floor_divide(flat, heads),  # batch row
            ops.mod(flat, heads),  # head
            flat * 0 + ops.cast(index, "int32"),  # position (no shape op, as `full` has)
        ],
        axis=1,
    )  # (B * h, 3)


def _scatter_position(cache, new, rows):
    # (B, 1, h, d) -> (B * h, d): row b * h + head, as `rows`; no transpose.
    new = ops.reshape(new, (-1, cache.shape[3]))
    writer = _ACTIVE.get()
    if writer is not None:
        return writer.update_rows(cache, rows, new)
    return ops.scatter_update(cache, rows, new)


def cache_length(cache):
    """Positions of a head-major cache tensor `(B, h, S_max, d)`."""
    return leading_shape(cache, 3)[2]


def check_query_groups(query_rows, cache_rows):
    """Raise unless `query_rows` is a multiple of `cache_rows` (where both are static)."""
    if (
        isinstance(query_rows, int)
        and isinstance(cache_rows, int)
        and (query_rows % cache_rows if cache_rows else query_rows)
    ):
        raise ValueError(
            "A precomputed `cache` `(B, h, S, d)` is shared by groups of "
            "consecutive query rows, so the query's batch must be a multiple "
            f"of the cache's; received query batch {query_rows} and cache "
            f"batch {cache_rows}."
        )


def group_rows(mask, rows):
    """A per-query `(B_q, T, ...)` mask as `(rows, B_q // rows * T, ...)`, or None."""
    if mask is None:
        return None
    return ops.reshape(mask, (rows, -1, *ops.shape(mask)[2:]))


def ungroup_weights(weights, query_rows, query_length, cache_rows):
    """Grouped weights `(B_kv, h, g * T, S)` back to `(B_q, h, T, S)`."""
    heads, keys = weights.shape[1], ops.shape(weights)[-1]
    weights = ops.reshape(
        weights, (cache_rows, heads, -1, query_length, keys)
    )  # (B_kv, h, g, T, S)
    return ops.reshape(
        ops.transpose(weights, (0, 2, 1, 3, 4)),
        (query_rows, heads, query_length, keys),
    )  # (B_q, h, T, S)
