"""Pieces shared by greedy and beam search: lengths, log-probabilities, writes.

Everything here is a small function over `keras.ops`, so both searches
run unchanged on the TensorFlow and JAX backends (`tests/test_jax_backend.py`),
eagerly, inside a `tf.function` and under XLA.
"""

import keras
from keras import ops

from keras_transformer.layers import kv_cache
from keras_transformer.layers._shapes import leading_shape

# Section 6.1: "We set the maximum output length during inference to input
# length + 50, but terminate early when possible."
EXTRA_OUTPUT_LENGTH = 50

# Log-probability of an impossible hypothesis.  A true -inf keeps the search
# exact (no finite penalty can be outweighed) and never meets a +inf or a
# multiplication by zero below, so it cannot turn into NaN.
NEG_INF = float("-inf")


def resolve_max_length(model, encoder_token_ids, max_length=None):
    """`max_length`, or source length + 50 (Section 6.1) when it is None.

    The source length is read with `ops.shape`, so under a `tf.function` with
    an unknown length the default is a traced scalar.  Learned positions
    (Table 3, row E) end at `config.max_sequence_length`: the default is
    capped there and a larger Python int is an error, because past the table
    TensorFlow fails and XLA silently clamps to the last position.
    """
    config = getattr(model, "config", None)
    limit = None
    if getattr(config, "positions", None) == "learned":
        limit = config.max_sequence_length
    if max_length is None:
        default = ops.shape(encoder_token_ids)[1] + EXTRA_OUTPUT_LENGTH
        return default if limit is None else ops.minimum(default, limit)
    if limit is not None and isinstance(max_length, int) and max_length > limit:
        raise ValueError(
            "`max_length` must not exceed the learned positions' "
            f"max_sequence_length={limit}; received max_length={max_length}."
        )
    return max_length


def weights_read_once(model):
    """A scope for a decoding loop's body: `model`'s variables read as values read here.

    In a TensorFlow graph a variable read inside a `while_loop` body runs on
    every step; a decoding step of a `Transformer` reads about sixty.  Read
    once before the loop, each is a loop-invariant tensor that the steps
    share.  Returns a callable that makes the scope (Keras'
    `StatelessScope`, which maps each variable to its value, as
    `stateless_call` does); the body runs `decode_step` inside it.  The
    weights only: a step draws nothing (no dropout), so the seed
    generators' states, which an exported module does not hold, are not
    read.  An object without `weights` gets an empty scope.
    """
    pairs = [(variable, _read(variable)) for variable in getattr(model, "weights", ())]
    return lambda: keras.StatelessScope(state_mapping=pairs)


def map_written_entries(fn, cache, static_entries):
    """`fn` on every tensor of `cache`, except those of the dict entries named static.

    A static entry (one `decode_step` never writes, such as the encoder's
    cross-attention keys/values) is the same for every beam of a sentence: it
    keeps one row per sentence, which `decode_step` reads for all the
    sentence's beams at once, so beam search neither tiles nor reorders it,
    and no search copies it.
    """

    def apply(entry):
        return keras.tree.map_structure(fn, entry)

    if not isinstance(cache, dict):
        return apply(cache)
    return {
        name: entry if name in static_entries else apply(entry)
        for name, entry in cache.items()
    }


def owned_cache(cache, static_entries=()):
    """`(cache, writer)`: the cache a search loops over, and how its steps write it.

    With a writer offered by the caller (`kv_cache.writes_in_place`), every
    entry a step writes (all but `static_entries`) is copied once, before
    the loop, into a buffer of the search's own (`writer.copy`), and the
    loop's body traces `decode_step` inside `kv_cache.writing(writer)`, so
    each step writes its position into those buffers instead of into a
    copy of the whole cache.  Nothing but the loop holds them, and a step
    writes only after the step before it has read the cache (its token
    comes from those reads).  Without one, `(cache, None)`: functional
    writes.
    """
    writer = kv_cache.offered_writer()
    if writer is None:
        return cache, None
    return map_written_entries(writer.copy, cache, frozenset(static_entries)), writer


def _read(variable):
    """The value of `variable` as a tensor: on TensorFlow `ops.copy` reads it
    (its `value` is the `tf.Variable` itself, read again at every use);
    elsewhere `value` already is an array."""
    if keras.backend.backend() == "tensorflow":
        return ops.copy(variable)
    return variable.value


def without_pad(scores, pad_id):
    """`(N, V)` scores with column `pad_id` at -inf: padding is never generated.

    Padding is not a word: a generated `pad_id` would be indistinguishable
    from the padding written after END, and the full (uncached) model would
    mask it out of attention, so cached and full decoding would disagree.
    """
    vocabulary = ops.arange(ops.shape(scores)[-1], dtype="int32")  # (V,)
    return ops.where(
        ops.expand_dims(ops.equal(vocabulary, pad_id), 0), NEG_INF, scores
    )  # (N, V)


def next_token_log_probs(logits, pad_id):
    """float32 log-softmax of `(N, V)` logits with `pad_id` made impossible."""
    return without_pad(ops.log_softmax(ops.cast(logits, "float32"), axis=-1), pad_id)


def flat_row_indices(indices, width):
    """`(N, K)` indices into rows of `width` -> `(N * K,)` indices into the
    `(N * width, ...)` flattening, where row `n` starts at `n * width`."""
    rows = ops.shape(indices)[0]
    offsets = ops.expand_dims(ops.arange(rows, dtype="int32") * width, 1)  # (N, 1)
    return ops.reshape(ops.cast(indices, "int32") + offsets, (-1,))  # (N * K,)


def take_per_row(x, indices):
    """`x` `(N, W, ...)` at `indices` `(N, K)` along axis 1 -> `(N, K, ...)`.

    `ops.take_along_axis(x, indices, axis=1)` (indices broadcast over the
    trailing axes) as one `take` of the flattened `(N * W, ...)`:
    TensorFlow's `take_along_axis` broadcasts the indices to `x`'s shape and
    transposes around a batched gather, which costs more than the gather
    itself at the sizes of a decoding step.
    """
    rows, width, *rest = leading_shape(x, len(x.shape))
    taken = ops.take(
        ops.reshape(x, (rows * width, *rest)), flat_row_indices(indices, width), axis=0
    )  # (N * K, ...)
    return ops.reshape(taken, (rows, leading_shape(indices, 2)[1], *rest))


# Row width of the blocks `top_k_rows` reduces first: the fastest of 32, 64,
# 128 and 256 for (128, 8000) float32 rows and k = 9 on TensorFlow's CPU
# kernels (0.9 ms against 2.1 ms for one `top_k`).
TOP_K_BLOCK = 32


def top_k_rows(x, k, block=TOP_K_BLOCK):
    """`ops.top_k(x, k)` of `(N, V)` rows with a static `V`, by blocks first.

    A row is cut into blocks of `block` columns (the last one padded with
    -inf); the `k` blocks with the largest maxima hold the row's `k` largest
    entries, since each block ranked before a block holding one of them holds
    an entry ranked before it.  One `top_k` over the `k * block` entries of
    those blocks, taken in column order, then gives the same values and
    indices as `ops.top_k` on the whole row, ties included (the lower index
    first).  On a CPU this scans a vocabulary-sized row once, with a max,
    instead of with `top_k`'s heap.  Rows of fewer than `4 * k` blocks go
    through `ops.top_k` directly.

    Returns `(values, indices)`, each `(N, k)`, best first, and the row
    maxima `(N, 1)`, which `top_k_log_probs` reuses.
    """
    width = x.shape[-1]
    blocks = -(-width // block)
    if blocks < 4 * k:
        values, indices = ops.top_k(x, k)
        return values, indices, ops.max(x, axis=-1, keepdims=True)
    if blocks * block != width:
        x = ops.pad(x, [[0, 0], [0, blocks * block - width]], constant_values=NEG_INF)
    rows = leading_shape(x, 1)[0]
    x = ops.reshape(x, (rows, blocks, block))
    block_max = ops.max(x, axis=-1)  # (N, nb)
    _, chosen = ops.top_k(block_max, k)  # (N, k)
    chosen = ops.sort(chosen, axis=-1)  # column order, so ties keep index order
    candidates = ops.reshape(take_per_row(x, chosen), (rows, k * block))
    values, slot = ops.top_k(candidates, k)  # (N, k); slot in [0, k * block)
    slot = ops.cast(slot, "int32")
    column_block = ops.cast(take_per_row(chosen, ops.floor_divide(slot, block)), "int32")
    indices = column_block * block + ops.mod(slot, block)
    return values, indices, ops.max(block_max, axis=-1, keepdims=True)


def top_k_log_probs(logits, k, pad_id):
    """The `k` best next tokens of each row: float32 log-probabilities and ids.

    Equal to `ops.top_k(next_token_log_probs(logits, pad_id), k)` up to
    float32 rounding (log-softmax is a shift by each row's log-sum-exp, which
    keeps the ranking), but ranks the raw logits with `top_k_rows` and only
    shifts the `k` kept ones: no `(N, V)` log-softmax is written.  `k + 1`
    are ranked so that, `pad_id` dropped, `k` remain.

    Returns `(log_probs, token_ids)`: `(N, k)` float32 and `(N, k)` int32.
    """
    logits = ops.cast(logits, "float32")
    if k + 1 > logits.shape[-1]:  # a vocabulary too small to rank k + 1
        values, indices = ops.top_k(next_token_log_probs(logits, pad_id), k)
        return values, ops.cast(indices, "int32")
    values, indices, row_max = top_k_rows(logits, k + 1)  # (N, k + 1), (N, 1)
    indices = ops.cast(indices, "int32")
    normalizer = row_max + ops.log(
        ops.sum(ops.exp(logits - row_max), axis=-1, keepdims=True)
    )  # (N, 1): log-sum-exp of the row, pad included as in log_softmax
    values = ops.where(ops.equal(indices, pad_id), NEG_INF, values - normalizer)
    values, keep = ops.top_k(values, k)  # pad (if ranked) moves last; order kept
    return values, take_per_row(indices, keep)


def write_position(token_ids, index, column):
    """`token_ids` `(..., L)` with position `index` set to `column` `(...)`.

    A one-hot select rather than a scatter: it needs no static shape, traces
    to the same graph for every `index`, and compiles under XLA.
    """
    positions = ops.arange(ops.shape(token_ids)[-1], dtype="int32")  # (L,)
    at_index = ops.equal(positions, index)  # (L,), broadcast over the leading axes
    return ops.where(at_index, ops.expand_dims(column, -1), token_ids)  # (..., L)


def gnmt_length_penalty(length, alpha):
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al., 2016, Section 7).

    The paper decodes with beam size 4 and alpha = 0.6 (Section 6.1); a
    hypothesis is ranked by log P(Y) / lp(Y).  With alpha = 0 the penalty is
    1 and the ranking is by log-probability alone.
    """
    length = ops.cast(length, "float32")
    return ops.power((5.0 + length) / 6.0, ops.cast(alpha, "float32"))
