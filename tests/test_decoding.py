"""Greedy and beam search: cached equals full, beam beats greedy, traced once."""

import importlib
import math

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_transformer.decoding import _common as common
from keras_transformer.decoding import beam_search, greedy_search
from keras_transformer.models import END_ID, PAD_ID, START_ID, Transformer

V = 8  # PAD, UNK, START, END and the words A..D of the Markov models below
A, B, C, D = 4, 5, 6, 7


def tiny_model(vocabulary_size=13, **overrides):
    return Transformer.from_preset(
        "tiny",
        vocabulary_size=vocabulary_size,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        num_layers=2,
        dropout=0.0,
        **overrides,
    )


def full_model_greedy(model, source, max_length):
    """The reference: re-run the whole model on the growing prefix each step."""
    decoder = np.full((len(source), 1), START_ID, "int32")
    finished = np.zeros(len(source), bool)
    for _ in range(max_length):
        logits = np.array(
            model({"encoder_token_ids": source, "decoder_token_ids": decoder})
        )[:, -1]  # (B, V)
        logits[:, PAD_ID] = -np.inf
        next_ids = np.where(finished, PAD_ID, logits.argmax(-1)).astype("int32")
        finished |= next_ids == END_ID
        decoder = np.concatenate([decoder, next_ids[:, None]], axis=1)
    return decoder[:, 1:]


def full_model_scores(model, source, tokens, alpha):
    """log P(Y | X) / lp(Y) of each row of `tokens` by one full forward pass."""
    decoder = np.concatenate([np.full((len(tokens), 1), START_ID), tokens[:, :-1]], 1)
    logits = np.array(
        model(
            {"encoder_token_ids": source, "decoder_token_ids": decoder.astype("int32")}
        )
    ).astype("float64")  # (B, T, V)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, tokens[..., None], -1)[..., 0]  # (B, T)
    lengths = (tokens != PAD_ID).sum(-1)
    return (picked * (tokens != PAD_ID)).sum(-1) / ((5 + lengths) / 6) ** alpha


class MarkovModel:
    """A stand-in for `Transformer`: fixed next-token tables, no learning.

    The next token depends on the source's first token and the last target
    token: `transitions[source][last] = {next: probability}`.  Unlisted moves
    keep a tiny probability, so every sequence is possible but unlikely.
    """

    def __init__(self, transitions):
        table = np.full((V, V, V), 1e-6)
        for source, rows in transitions.items():
            for last, nexts in rows.items():
                for token, probability in nexts.items():
                    table[source, last, token] = probability
        table /= table.sum(-1, keepdims=True)
        self.log_table = ops.convert_to_tensor(
            np.log(table).reshape(V * V, V), "float32"
        )
        self.calls = 0

    def log_prob(self, source, tokens):
        previous = [START_ID, *tokens[:-1]]
        rows = self.log_table.numpy().reshape(V, V, V)[source]
        return sum(rows[p, t] for p, t in zip(previous, tokens, strict=True))

    def encode(self, encoder_token_ids, training=False):
        return ops.expand_dims(ops.cast(encoder_token_ids, "float32"), -1)

    def init_cache(self, encoder_token_ids, encoder_output, max_length):
        return {"source": encoder_token_ids[:, 0]}

    def decode_step(self, token_ids, cache, index):
        self.calls += 1  # eager while_loop bodies run once per step
        rows = cache["source"] * V + token_ids[:, 0]  # (N,)
        return ops.take(self.log_table, rows, axis=0), cache


# Source A: greedy takes START -> A (0.55), whose continuations are spread out,
# while B (0.45) almost surely ends next.  Source B: ends at once.
TRAP = {
    A: {
        START_ID: {A: 0.55, B: 0.45},
        A: {C: 0.4, D: 0.3, END_ID: 0.3},
        B: {END_ID: 0.95, D: 0.05},
        C: {END_ID: 0.95, D: 0.05},
        D: {END_ID: 0.95, C: 0.05},
    },
    B: {START_ID: {END_ID: 0.9, A: 0.1}},
}
# Source A: [END] (0.6) against [A B C END] (0.35 * 0.95^3).
SHORT_OR_LONG = {
    A: {
        START_ID: {END_ID: 0.6, A: 0.35, D: 0.05},
        A: {B: 0.95, D: 0.05},
        B: {C: 0.95, D: 0.05},
        C: {END_ID: 0.95, D: 0.05},
    },
}
# Source A: END is the runner-up at the first step, outside a beam of one.
RUNNER_UP_END = {
    A: {
        START_ID: {A: 0.6, END_ID: 0.4},
        A: {B: 0.55, D: 0.45},
        B: {END_ID: 0.9, D: 0.1},
        D: {END_ID: 0.9, C: 0.1},
    },
}


# Keras warns about a softmax over one key whenever the full model sees a
# one-token target (the reference's first step); the maths is right.
@pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1:UserWarning")
@pytest.mark.parametrize(
    "overrides",
    [{}, {"normalize_first": True, "positions": "learned"}, {"tie_embeddings": False}],
)
def test_cached_greedy_equals_full_model_greedy(overrides):
    model = tiny_model(**overrides)
    rng = np.random.default_rng(len(overrides))
    source = rng.integers(4, 13, size=(2, 6)).astype("int32")
    source[1, 3:] = PAD_ID  # different source lengths in one batch
    expected = full_model_greedy(model, source, max_length=7)
    tokens = np.asarray(greedy_search(model, source, max_length=7))
    np.testing.assert_array_equal(tokens, expected)
    assert tokens.dtype == np.int32
    # Source padding changes nothing: the short row alone decodes the same.
    alone = np.asarray(greedy_search(model, source[1:, :3], max_length=7))
    np.testing.assert_array_equal(alone, tokens[1:])


def test_beam_size_one_is_greedy_and_scores_match_full_model():
    model = tiny_model()
    source = np.array([[5, 6, 7, 8, 9], [4, 11, 0, 0, 0]], "int32")
    greedy = np.asarray(greedy_search(model, source, max_length=6))
    tokens, scores = beam_search(
        model, source, beam_size=1, length_penalty=0.0, max_length=6
    )
    np.testing.assert_array_equal(np.asarray(tokens), greedy)
    np.testing.assert_allclose(
        scores, full_model_scores(model, source, greedy, 0.0), atol=1e-4
    )


def test_beam_of_one_drops_an_end_that_fell_off_the_beam():
    # tensor2tensor would finish [END] (0.4) from the 2 candidates it keeps.
    model = MarkovModel(RUNNER_UP_END)
    source = np.array([[A, 1]], "int32")
    tokens, _ = beam_search(
        model, source, beam_size=1, length_penalty=0.0, max_length=5
    )
    np.testing.assert_array_equal(tokens, [[A, B, END_ID, 0, 0]])
    np.testing.assert_array_equal(greedy_search(model, source, max_length=5), tokens)


@pytest.mark.parametrize("width", [37, 1200, 1217])  # direct; by blocks; padded
@pytest.mark.parametrize("ties", [False, True])
def test_top_k_rows_equals_top_k_ties_included(width, ties):
    rng = np.random.default_rng(width)
    x = rng.integers(0, 3, (5, width)) if ties else rng.normal(size=(5, width))
    x = x.astype("float32")
    x[:, width - 30] = 3.0  # a late block ranked first, holding tied 2s too
    x[0, ::7] = -np.inf  # masked entries, such as the pad column
    values, indices, row_max = common.top_k_rows(ops.convert_to_tensor(x), 9)
    expected_values, expected_indices = ops.top_k(x, 9)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)  # lower index first
    np.testing.assert_array_equal(row_max, x.max(-1, keepdims=True))


@pytest.mark.parametrize("width", [9, 1200])
def test_top_k_log_probs_are_log_softmax_without_pad(width):
    rng = np.random.default_rng(width)
    logits = rng.normal(size=(4, width)).astype("float32")
    logits[1, PAD_ID] = 50.0  # the most likely token is never proposed
    log_probs, ids = common.top_k_log_probs(logits, 8, PAD_ID)
    full = np.asarray(common.next_token_log_probs(logits, PAD_ID))  # pad at -inf
    expected_ids = np.argsort(-full, axis=-1, kind="stable")[:, :8]
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(
        log_probs, np.take_along_axis(full, expected_ids, -1), rtol=1e-6, atol=1e-5
    )
    assert not np.any(np.asarray(ids) == PAD_ID)


def test_beam_search_by_blocks_equals_beam_search_by_whole_rows(monkeypatch):
    # A vocabulary large enough that beams rank their tokens by blocks.
    model = tiny_model(vocabulary_size=1200)
    source = np.array([[5, 6, 7, 8, 9], [4, 11, 0, 0, 0]], "int32")
    by_blocks = beam_search(
        model, source, beam_size=4, max_length=6, return_all_beams=True
    )

    def whole_rows(x, k, block=None):
        values, indices = ops.top_k(x, k)
        return values, indices, ops.max(x, axis=-1, keepdims=True)

    monkeypatch.setattr(common, "top_k_rows", whole_rows)
    by_rows = beam_search(
        model, source, beam_size=4, max_length=6, return_all_beams=True
    )
    np.testing.assert_array_equal(by_blocks[0], by_rows[0])
    np.testing.assert_allclose(by_blocks[1], by_rows[1], rtol=1e-6)


@pytest.mark.parametrize("vocabulary_size", [13, 5])  # 5: fewer tokens than 2k
def test_beam_scores_are_full_model_scores_of_every_beam(vocabulary_size):
    # Reordering the cache wrongly would score beams against another's past.
    model = tiny_model(vocabulary_size)
    source = np.array([[5, 6, 7, 8, 9], [4, 11, 0, 0, 0]], "int32")
    source = np.where(source > 0, 4 + source % (vocabulary_size - 4), 0)  # words
    tokens, scores = beam_search(
        model, source, beam_size=3, max_length=5, return_all_beams=True
    )
    tokens, scores = np.asarray(tokens), np.asarray(scores)
    assert tokens.shape == (2, 3, 5) and scores.shape == (2, 3)
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first
    for row in range(2):
        kept = np.isfinite(scores[row])  # unfilled finished slots score -inf
        expected = full_model_scores(
            model,
            np.repeat(source[row : row + 1], kept.sum(), 0),
            tokens[row][kept],
            0.6,
        )
        np.testing.assert_allclose(scores[row][kept], expected, atol=1e-4)
        assert len({tuple(t) for t in tokens[row][kept]}) == kept.sum()  # distinct


class TileEverything:
    """`model` with no `static_cache_entries`: beam search tiles and reorders all."""

    def __init__(self, model):
        self.model, self.config = model, model.config

    def encode(self, *args, **kwargs):
        return self.model.encode(*args, **kwargs)

    def init_cache(self, *args, **kwargs):
        return self.model.init_cache(*args, **kwargs)

    def decode_step(self, *args):
        return self.model.decode_step(*args)


def test_beam_skips_reordering_only_static_cache_entries(monkeypatch):
    # Transformer keeps the cross keys/values and source mask at one row per
    # sentence (neither tiled nor reordered: identical across its beams), so
    # the result must be that of tiling and reordering everything.
    model = tiny_model()
    assert set(model.static_cache_entries) == {
        "cross_key", "cross_value", "encoder_padding_mask"
    }
    source = np.array([[5, 6, 7, 8, 9, 10], [4, 11, 12, 0, 0, 0]], "int32")

    def search(model):
        tokens, scores = beam_search(
            model, source, beam_size=4, max_length=7, return_all_beams=True
        )
        return np.asarray(tokens), np.asarray(scores)

    tokens, scores = search(model)
    all_tokens, all_scores = search(TileEverything(model))
    np.testing.assert_array_equal(tokens, all_tokens)
    np.testing.assert_array_equal(scores, all_scores)
    # The test can see a mistake: not reordering the written self-attention
    # cache (beams would read another beam's past) changes the result.
    beam_module = importlib.import_module("keras_transformer.decoding.beam_search")
    monkeypatch.setattr(beam_module, "_reorder_cache", lambda cache, rows, static: cache)
    wrong_tokens, wrong_scores = search(model)
    assert not (
        np.array_equal(wrong_tokens, tokens) and np.array_equal(wrong_scores, scores)
    )


def test_beam_finds_the_sequence_greedy_misses():
    model = MarkovModel(TRAP)
    source = np.array([[A, 1], [B, 1]], "int32")
    greedy = np.asarray(greedy_search(model, source, max_length=6))
    np.testing.assert_array_equal(greedy[0], [A, C, END_ID, 0, 0, 0])
    tokens, scores = beam_search(
        model, source, beam_size=2, length_penalty=0.0, max_length=6
    )
    np.testing.assert_array_equal(
        tokens, [[B, END_ID, 0, 0, 0, 0], [END_ID, 0, 0, 0, 0, 0]]
    )
    assert scores[0] > model.log_prob(A, [A, C, END_ID])
    np.testing.assert_allclose(scores[0], model.log_prob(A, [B, END_ID]), rtol=1e-6)
    np.testing.assert_allclose(scores[0], math.log(0.45 * 0.95), rtol=1e-3)


def test_loops_stop_when_every_sequence_has_ended():
    model = MarkovModel(TRAP)
    source = np.array([[A, 1], [B, 1]], "int32")
    greedy = np.asarray(greedy_search(model, source, max_length=20))
    assert model.calls == 3  # row 0 ends at step 3, row 1 at step 1; not 20
    np.testing.assert_array_equal(greedy[:, 3:], 0)
    np.testing.assert_array_equal(greedy[1], [END_ID] + [PAD_ID] * 19)
    model.calls = 0
    beam_search(model, source, beam_size=2, length_penalty=0.0, max_length=20)
    # Step 2 finishes [B, END]; no alive beam can beat it, so the search stops.
    assert model.calls == 2


def test_length_penalty_decides_between_short_and_long():
    model = MarkovModel(SHORT_OR_LONG)
    source = np.array([[A, 1]], "int32")
    short, _ = beam_search(model, source, beam_size=2, length_penalty=0.0, max_length=8)
    np.testing.assert_array_equal(short, [[END_ID] + [PAD_ID] * 7])
    assert model.calls == 1  # no alive beam beats [END] when alpha = 0
    long, score = beam_search(
        model, source, beam_size=2, length_penalty=3.0, max_length=8
    )
    np.testing.assert_array_equal(long, [[A, B, C, END_ID, 0, 0, 0, 0]])
    lp = ((5 + 4) / 6) ** 3.0
    np.testing.assert_allclose(
        score, model.log_prob(A, [A, B, C, END_ID]) / lp, rtol=1e-5
    )


def test_traced_once_across_batch_sizes_and_source_lengths():
    model = tiny_model()
    traces = []

    @tf.function(
        jit_compile=False,
        reduce_retracing=True,
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )
    def translate(source):
        traces.append(1)
        return greedy_search(model, source), beam_search(model, source, beam_size=2)

    for shape in [(2, 5), (3, 7)]:
        source = np.random.default_rng(sum(shape)).integers(4, 13, size=shape)
        greedy, (tokens, scores) = translate(source.astype("int32"))
        # Section 6.1: the default maximum output length is input length + 50.
        assert greedy.shape == tokens.shape == (shape[0], shape[1] + 50)
        assert scores.shape == (shape[0],)
    assert len(traces) == 1


def test_xla_matches_eager():
    model = tiny_model()
    source = np.array([[5, 6, 7, 8, 9], [4, 11, 0, 0, 0]], "int32")

    def translate(source):
        return greedy_search(model, source, max_length=6), beam_search(
            model, source, beam_size=2, max_length=6
        )

    (greedy, (tokens, scores)) = tf.function(translate, jit_compile=True)(source)
    (eager_greedy, (eager_tokens, eager_scores)) = translate(source)
    np.testing.assert_array_equal(greedy, eager_greedy)
    np.testing.assert_array_equal(tokens, eager_tokens)
    np.testing.assert_allclose(scores, eager_scores, atol=1e-5)


def test_a_longer_buffer_searches_to_the_max_length_given_at_run_time():
    model = MarkovModel(SHORT_OR_LONG)
    source = np.array([[A, 1]], "int32")
    expected, expected_score = beam_search(
        model, source, beam_size=2, length_penalty=3.0, max_length=3
    )  # cut at 3 tokens: [A, B, C] never reaches its END
    limit = tf.Variable(3)  # a run-time value, not a shape

    @tf.function(jit_compile=True)
    def search(source):
        return beam_search(model, source, beam_size=2, length_penalty=3.0,
                           max_length=limit, buffer_length=8)

    tokens, score = search(source)
    assert tokens.shape == (1, 8)
    np.testing.assert_array_equal(tokens[:, :3], expected)
    assert not np.asarray(tokens[:, 3:]).any()
    np.testing.assert_allclose(score, expected_score, rtol=1e-6)
    limit.assign(8)  # the same program, a longer search: now it ends
    np.testing.assert_array_equal(search(source)[0], [[A, B, C, END_ID, 0, 0, 0, 0]])


def test_learned_positions_cap_the_default_max_length():
    model = tiny_model(positions="learned", max_sequence_length=8)
    source = np.array([[5, 6, 7, 8, 9]], "int32")
    assert tuple(greedy_search(model, source).shape) == (1, 8)  # not 5 + 50
    with pytest.raises(ValueError, match="max_length=9"):
        beam_search(model, source, max_length=9)


def test_rejects_a_bad_beam_size():
    with pytest.raises(ValueError, match="beam_size=0"):
        beam_search(MarkovModel(TRAP), np.array([[A]], "int32"), beam_size=0)
