"""Beam search with the GNMT length penalty over the decoder's key/value cache."""

from keras import ops

from keras_transformer.decoding._common import (
    NEG_INF,
    flat_row_indices,
    gnmt_length_penalty,
    map_written_entries,
    owned_cache,
    resolve_max_length,
    take_per_row,
    top_k_log_probs,
    weights_read_once,
    write_position,
)
from keras_transformer.layers import kv_cache
from keras_transformer.layers.validation import check_positive_int
from keras_transformer.models.transformer_config import END_ID, PAD_ID, START_ID


def _tile_cache(cache, beams, static_entries):
    """Every per-beam cache entry repeated `beams` times on axis 0."""
    return map_written_entries(lambda t: ops.repeat(t, beams, axis=0), cache, static_entries)


def _reorder_cache(cache, rows, static_entries):
    """Rows `rows` of every per-beam cache entry (`rows` stay within a sentence)."""
    return map_written_entries(lambda t: ops.take(t, rows, axis=0), cache, static_entries)


def beam_search(
    model,
    encoder_token_ids,
    beam_size=4,
    length_penalty=0.6,
    max_length=None,
    start_id=START_ID,
    end_id=END_ID,
    pad_id=PAD_ID,
    return_all_beams=False,
    buffer_length=None,
):
    """Translate a batch with beam search and the GNMT length penalty.

    Section 6.1: "we used beam search with a beam size of 4 and length penalty
    alpha = 0.6", the penalty of Wu et al. (2016, Section 7):
    lp(Y) = ((5 + |Y|) / 6)^alpha, and a hypothesis scores log P(Y) / lp(Y).

    The search keeps, per source sentence, `beam_size` *alive* hypotheses
    (not yet ended) and the `beam_size` best *finished* ones, as in
    tensor2tensor and Flax's WMT example.  Each step extends every alive beam
    by every token and ranks the extensions by log P.  Those among the best
    `beam_size` that end in `end_id` join the finished set with their
    penalised score (as in fairseq: an ending that fell off the beam is lost);
    the best `beam_size` that do not end stay alive (all are among the best
    `2 * beam_size`, since at most `beam_size` of those end).

    Beams are flattened into the batch axis (`B * beam_size` rows) for
    `model.decode_step`; the key/value cache is tiled once and reordered every
    step to follow its beams, except the entries named in the model's
    optional `static_cache_entries` (the cross-attention keys/values and the
    source mask for a `Transformer`), which are the same for every beam of a
    sentence: they keep one row per sentence, and each step's cross-attention
    reads a sentence's keys/values once for all its beams.  The single
    `keras.ops.while_loop` stops at
    `max_length`, or earlier once no alive beam can beat the best finished
    hypothesis (the worst kept one with `return_all_beams`): log P only falls
    as a hypothesis grows, so an alive beam can score at most its log P over
    the largest lp of the lengths it can still reach.

    `pad_id` is never generated, and positions after `end_id` are `pad_id`.
    A sentence with no finished hypothesis at `max_length` returns its alive
    beams, scored as if they ended there.  With `beam_size=1` and
    `length_penalty=0` the result is greedy search.

    Masking: source padding (`pad_id` in `encoder_token_ids`) is masked out of
    the encoder and of cross-attention by the model.

    Args:
        model: a `keras_transformer.models.Transformer`, or any object with
            its `encode`, `init_cache` and `decode_step` methods.  If its cache
            is a dict, an optional `static_cache_entries` attribute names the
            entries `decode_step` never writes (identical across the beams of
            a sentence), which are then neither tiled nor reordered:
            `decode_step` gets them with `B` rows and its token ids with
            `B * beam_size` (beam `j` of sentence `b` at row `b * beam_size +
            j`).  By default every entry is tiled and reordered.
        encoder_token_ids: `(B, S)` int source ids, padded with `pad_id`.
        beam_size: alive and finished hypotheses kept per sentence (4).
        length_penalty: GNMT's alpha (0.6); 0 ranks by log-probability alone,
            larger values favour longer translations.
        max_length: most target tokens to generate, a Python int or a scalar
            tensor; source length + 50 (Section 6.1) if None, capped at
            `max_sequence_length` for learned positions.
        start_id: the first decoder input (`[START]`).
        end_id: the end-of-sentence token (`[END]`).
        pad_id: the padding token, written after `end_id`.
        return_all_beams: return every kept hypothesis, best first, instead
            of the best one.  Unfilled finished slots score -inf.
        buffer_length: positions allocated for the cache and the tokens,
            at least `max_length` (`max_length` if None).  Under XLA every
            shape is a compile-time constant: a program compiled once for a
            `buffer_length` then searches up to a `max_length` given at run
            time, with the same result as a search allocated for it.

    Returns:
        A tuple `(token_ids, scores)`: int32 `(B, buffer_length)` (`start_id`
        excluded, `end_id` included, padding from `max_length` on) and
        float32 `(B,)` scores log P(Y) / lp(Y); with `return_all_beams`,
        `(B, beam_size, buffer_length)` and `(B, beam_size)`.

    Example:
    >>> model = keras_transformer.models.Transformer.from_preset("tiny")
    >>> source = keras.ops.array([[5, 6, 7, 3], [8, 9, 3, 0]], "int32")
    >>> tokens, scores = keras_transformer.decoding.beam_search(
    ...     model, source, beam_size=4, max_length=6)
    >>> tuple(tokens.shape), tuple(scores.shape)
    ((2, 6), (2,))

    References:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017.
        Wu et al., "Google's Neural Machine Translation System", 2016.
    """
    k = check_positive_int("beam_size", beam_size)
    alpha = float(length_penalty)
    encoder_token_ids = ops.convert_to_tensor(encoder_token_ids, "int32")
    max_length = resolve_max_length(model, encoder_token_ids, max_length)
    buffer_length = max_length if buffer_length is None else buffer_length
    batch = ops.shape(encoder_token_ids)[0]
    encoder_output = model.encode(encoder_token_ids, training=False)  # (B, S, d)
    cache = model.init_cache(encoder_token_ids, encoder_output, buffer_length)
    static_entries = frozenset(getattr(model, "static_cache_entries", ()))
    # Copied before tiling (a k-th of the copy): the tiles are new buffers.
    cache, writer = owned_cache(cache, static_entries)
    # Row b * k + j of every other entry is beam j of sentence b: (B * k, ...).
    cache = _tile_cache(cache, k, static_entries)
    weights_scope = weights_read_once(model)

    def cond(state):
        index = state["index"]
        lp_bound = ops.maximum(
            gnmt_length_penalty(max_length, alpha),
            gnmt_length_penalty(index + 1, alpha),
        )
        best_alive = state["alive_log_probs"][:, 0] / lp_bound  # (B,)
        to_beat = state["finished_scores"][:, -1 if return_all_beams else 0]  # (B,)
        improvable = ops.logical_not(ops.all(ops.greater(to_beat, best_alive)))
        return ops.logical_and(ops.less(index, max_length), improvable)

    def body(state):
        index, alive_ids = state["index"], state["alive_ids"]
        last_ids = ops.take(alive_ids, index, axis=2)  # (B, k)
        last_ids = ops.reshape(last_ids, (-1, 1))  # (B * k, 1)
        with weights_scope(), kv_cache.writing(writer):
            logits, cache = model.decode_step(last_ids, state["cache"], index)
        # The best 2k extensions of a sentence are among the best 2k tokens
        # of each of its beams (all V if fewer): rank per beam, then the k * c.
        c = min(2 * k, logits.shape[-1])
        log_probs, tokens = top_k_log_probs(logits, c, pad_id)  # (B * k, c)
        log_probs = ops.reshape(log_probs, (batch, k, c))
        log_probs = log_probs + ops.expand_dims(state["alive_log_probs"], -1)
        log_probs = ops.reshape(log_probs, (batch, k * c))  # beam-major
        top_log_probs, top = ops.top_k(log_probs, 2 * k)  # (B, 2k), best first
        top_beams = ops.floor_divide(top, c)  # (B, 2k)
        top_tokens = take_per_row(ops.reshape(tokens, (batch, k * c)), top)  # (B, 2k)
        top_ids = take_per_row(alive_ids, top_beams)  # (B, 2k, L + 1)
        top_ids = write_position(top_ids, index + 1, top_tokens)
        ends = ops.equal(top_tokens, end_id)  # (B, 2k)

        # The best k extensions that do not end stay alive; the cache follows.
        alive_candidates = ops.where(ends, NEG_INF, top_log_probs)
        alive_log_probs, keep = ops.top_k(alive_candidates, k)  # (B, k)
        rows = flat_row_indices(take_per_row(top_beams, keep), k)  # (B * k,)
        cache = _reorder_cache(cache, rows, static_entries)

        # Extensions that end inside the beam (the top k) join the finished
        # set, ranked by penalised score; those ranked k+1..2k fell off it.
        in_beam = ops.less(ops.arange(2 * k, dtype="int32"), k)  # (2k,)
        scores = top_log_probs / gnmt_length_penalty(index + 1, alpha)  # |Y| with END
        scores = ops.where(ops.logical_and(ends, in_beam), scores, NEG_INF)
        scores = ops.concatenate([state["finished_scores"], scores], axis=1)
        finished_scores, best = ops.top_k(scores, k)  # (B, k) of (B, 3k)
        finished_ids = ops.concatenate([state["finished_ids"], top_ids], axis=1)
        return {
            "index": index + 1,
            "alive_ids": take_per_row(top_ids, keep),  # (B, k, L + 1)
            "alive_log_probs": alive_log_probs,
            "finished_ids": take_per_row(finished_ids, best),  # (B, k, L + 1)
            "finished_scores": finished_scores,
            "cache": cache,
        }

    # Column 0 holds start_id, so column i is the decoder input at position i.
    ids = ops.full((batch, k, buffer_length + 1), pad_id, "int32")
    ids = write_position(ids, 0, ops.full((batch, k), start_id, "int32"))
    # Only beam 0 is real at first; its k - 1 copies must not be extended too.
    first = ops.equal(ops.arange(k, dtype="int32"), 0)  # (k,)
    state = ops.while_loop(
        cond,
        body,
        {
            "index": ops.convert_to_tensor(0, "int32"),
            "alive_ids": ids,  # (B, k, L + 1)
            "alive_log_probs": ops.where(first, ops.zeros((batch, k)), NEG_INF),
            "finished_ids": ids,  # (B, k, L + 1)
            "finished_scores": ops.full((batch, k), NEG_INF, "float32"),
            "cache": cache,
        },
    )

    # Sentences with no finished hypothesis fall back to their alive beams.
    finished_scores = state["finished_scores"]
    any_finished = ops.greater(finished_scores[:, 0], NEG_INF)  # (B,)
    alive_lp = gnmt_length_penalty(state["index"], alpha)
    alive_scores = state["alive_log_probs"] / alive_lp  # (B, k)
    token_ids = ops.where(
        any_finished[:, None, None], state["finished_ids"], state["alive_ids"]
    )[:, :, 1:]  # (B, k, buffer_length)
    scores = ops.where(any_finished[:, None], finished_scores, alive_scores)
    if return_all_beams:
        return token_ids, scores
    return token_ids[:, 0], scores[:, 0]
