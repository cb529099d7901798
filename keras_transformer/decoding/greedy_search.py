"""Greedy decoding over the decoder's key/value cache."""

from keras import ops

from keras_transformer.decoding._common import (
    owned_cache,
    resolve_max_length,
    weights_read_once,
    without_pad,
    write_position,
)
from keras_transformer.layers import kv_cache
from keras_transformer.models.transformer_config import END_ID, PAD_ID, START_ID


def greedy_search(
    model,
    encoder_token_ids,
    max_length=None,
    start_id=START_ID,
    end_id=END_ID,
    pad_id=PAD_ID,
):
    """Translate a batch by taking the most probable token at every position.

    The decoder is auto-regressive (Vaswani et al., 2017, Section 3): position
    i is predicted from the source and the outputs before it.  The source is
    encoded once, the cross-attention keys/values are projected once by
    `model.init_cache`, and each step runs `model.decode_step` for a single
    position against a self-attention cache preallocated for `max_length`
    positions, so every shape inside the loop is fixed.  All steps run in one
    `keras.ops.while_loop` that stops as soon as every sequence has produced
    `end_id` (Section 6.1: "terminate early when possible") or at
    `max_length`.  In a `tf.function` it traces once for any batch size and
    source length; XLA compiles it once per input shape and `max_length`.

    `pad_id` is never generated (it would be read as padding); after a
    sequence's `end_id` its remaining positions are `pad_id`.  With
    `length_penalty=0`, `beam_search(..., beam_size=1)` returns the same tokens.

    Masking: source padding (`pad_id` in `encoder_token_ids`) is masked out of
    the encoder and of cross-attention by the model.

    Args:
        model: a `keras_transformer.models.Transformer`, or any object with
            its `encode`, `init_cache` and `decode_step` methods.
        encoder_token_ids: `(B, S)` int source ids, padded with `pad_id`.
        max_length: most target tokens to generate, a Python int or a scalar
            tensor; source length + 50 (Section 6.1) if None, capped at
            `max_sequence_length` for learned positions.
        start_id: the first decoder input (`[START]`).
        end_id: the end-of-sentence token (`[END]`).
        pad_id: the padding token, written after `end_id`.

    Returns:
        `(B, max_length)` int32 target ids: `start_id` excluded, `end_id`
        included, `pad_id` after it.

    Example:
    >>> model = keras_transformer.models.Transformer.from_preset("tiny")
    >>> source = keras.ops.array([[5, 6, 7, 3], [8, 9, 3, 0]], "int32")
    >>> tokens = keras_transformer.decoding.greedy_search(model, source, max_length=6)
    >>> tuple(tokens.shape)
    (2, 6)

    References:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017.
    """
    encoder_token_ids = ops.convert_to_tensor(encoder_token_ids, "int32")
    max_length = resolve_max_length(model, encoder_token_ids, max_length)
    batch = ops.shape(encoder_token_ids)[0]
    encoder_output = model.encode(encoder_token_ids, training=False)  # (B, S, d)
    cache = model.init_cache(encoder_token_ids, encoder_output, max_length)
    cache, writer = owned_cache(cache, getattr(model, "static_cache_entries", ()))
    weights_scope = weights_read_once(model)

    def cond(index, last_ids, token_ids, finished, cache):
        return ops.logical_and(
            ops.less(index, max_length), ops.logical_not(ops.all(finished))
        )

    def body(index, last_ids, token_ids, finished, cache):
        with weights_scope(), kv_cache.writing(writer):
            logits, cache = model.decode_step(last_ids, cache, index)  # (B, V)
        # The most likely token: the log-softmax is the logits shifted per
        # row, so the argmax of the logits is the same and skips a pass over V.
        next_ids = ops.argmax(without_pad(logits, pad_id), axis=-1)  # (B,)
        next_ids = ops.where(finished, pad_id, ops.cast(next_ids, "int32"))
        token_ids = write_position(token_ids, index, next_ids)  # (B, max_length)
        finished = ops.logical_or(finished, ops.equal(next_ids, end_id))
        last_ids = ops.expand_dims(next_ids, 1)  # (B, 1)
        return index + 1, last_ids, token_ids, finished, cache

    loop_vars = (
        ops.convert_to_tensor(0, "int32"),
        ops.full((batch, 1), start_id, "int32"),
        ops.full((batch, max_length), pad_id, "int32"),
        ops.zeros((batch,), "bool"),
        cache,
    )
    _, _, token_ids, _, _ = ops.while_loop(cond, body, loop_vars)
    return token_ids
