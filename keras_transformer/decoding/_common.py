"""Pieces shared by greedy and beam search: lengths, log-probabilities, writes.

Everything here is a small pure function over `keras.ops`, so both searches
run unchanged on the TensorFlow, JAX and PyTorch backends, eagerly, inside a
`tf.function` and under XLA.
"""

from keras import ops

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
