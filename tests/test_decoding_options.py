"""Every decoding path runs the model's own layers, for every model option.

One path only: greedy and beam search, eagerly, in a graph and under XLA,
and the SavedModel's id signatures all call `Transformer.decode_step` (its
attention over the cache elementwise or in batched matmuls, both checked), so
for each option a user can build (pre- or post-LN, ReLU or GELU, learned or
sinusoidal positions, tied or untied embeddings, key widths other than
d_model / h, a mixed dtype policy) their tokens must equal those of the
reference that re-runs the whole model on the growing prefix at every step
(`full_model_greedy`), and each step's logits the full pass's.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_decoding import full_model_greedy, full_model_scores

from keras_transformer.decoding import beam_search, greedy_search
from keras_transformer.layers import elementwise_attention
from keras_transformer.models import START_ID, Transformer
from training.serving.in_place import graph_cache_writes
from training.serving.signatures import TranslatorModule, bucket_size, pad_to_buckets

OPTIONS = {
    "paper": {},
    "pre_ln_gelu": {"normalize_first": True, "activation": "gelu"},
    "learned_untied": {"positions": "learned", "tie_embeddings": False},
    "key_dim_wider_than_heads": {"key_dim": 12, "value_dim": 6},
}
SOURCE = np.array(
    [[5, 9, 14, 7, 3, 0, 0], [11, 4, 3, 0, 0, 0, 0], [6, 6, 8, 12, 10, 13, 3]], "int32"
)
STEPS = 8


def model_of(options, seed=0, **overrides):
    keras.utils.set_random_seed(seed)
    return Transformer.from_preset(
        "tiny", vocabulary_size=17, hidden_dim=16, num_heads=2, intermediate_dim=24,
        num_layers=2, dropout=0.0, max_sequence_length=12, **options, **overrides,
    )  # fmt: skip


@pytest.fixture(scope="module", params=sorted(OPTIONS))
def option(request):
    model = model_of(OPTIONS[request.param])
    return model, full_model_greedy(model, SOURCE, STEPS)


# Keras warns about a softmax over one key whenever the full model sees a
# one-token target (the reference's first step); the maths is right.
pytestmark = pytest.mark.filterwarnings(
    "ignore:You are using a softmax over axis -1:UserWarning"
)


def test_greedy_eagerly_in_a_graph_and_under_xla_is_the_full_models(option):
    model, expected = option
    assert np.count_nonzero(expected) > len(SOURCE)  # the search ran
    np.testing.assert_array_equal(greedy_search(model, SOURCE, max_length=STEPS), expected)
    for jit_compile in (False, True):
        search = tf.function(lambda ids: greedy_search(model, ids, max_length=STEPS),
                             jit_compile=jit_compile, autograph=False)
        np.testing.assert_array_equal(search(tf.constant(SOURCE)), expected)
    # Shapes unknown when traced: each step's attention picks its form at
    # run time; with limit 0 every step is batched matmuls.
    for limit in (0, 10**9):
        with elementwise_attention(limit):
            search = tf.function(lambda ids: greedy_search(model, ids, max_length=STEPS),
                                 input_signature=[tf.TensorSpec([None, None], tf.int32)],
                                 autograph=False)
            np.testing.assert_array_equal(search(tf.constant(SOURCE)), expected)


def test_beam_search_of_one_beam_is_greedy_and_scores_are_the_full_models(option):
    model, expected = option
    search = tf.function(
        lambda ids: beam_search(model, ids, beam_size=1, length_penalty=0.0,
                                max_length=STEPS), autograph=False)
    tokens, _ = search(tf.constant(SOURCE))
    np.testing.assert_array_equal(tokens, expected)
    tokens, scores = beam_search(model, SOURCE, beam_size=3, length_penalty=0.6,
                                 max_length=STEPS)
    np.testing.assert_allclose(
        scores, full_model_scores(model, SOURCE, np.asarray(tokens), 0.6), atol=1e-4)


def test_the_savedmodel_id_signatures_decode_the_full_models_tokens(option):
    model, _ = option
    module = TranslatorModule(model, tokenizer=None)
    length = min(SOURCE.shape[1] + 50, 12)  # the signatures' own limit
    expected = full_model_greedy(model, SOURCE, length)
    np.testing.assert_array_equal(module.translate_ids(tf.constant(SOURCE))["token_ids"],
                                  expected)
    xla = tf.function(module._greedy_xla, autograph=False)
    np.testing.assert_array_equal(xla(tf.constant(SOURCE)), expected)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_a_mixed_policy_decodes_each_step_as_the_full_pass(policy):
    model = model_of({}, dtype=policy)
    tokens = np.asarray(tf.function(
        lambda ids: greedy_search(model, ids, max_length=STEPS), autograph=False,
    )(tf.constant(SOURCE)))
    # Each step's logits against the full pass over the tokens it chose
    # (teacher forcing): rounding may differ, the computation may not.
    decoder = np.concatenate([np.full((len(SOURCE), 1), START_ID), tokens[:, :-1]], 1)
    full = np.asarray(model({"encoder_token_ids": SOURCE,
                             "decoder_token_ids": decoder.astype("int32")}))
    cache = model.init_cache(SOURCE, model.encode(SOURCE, training=False), STEPS)
    for index in range(STEPS):
        logits, cache = model.decode_step(decoder[:, index : index + 1], cache, index)
        assert logits.dtype == "float32"
        np.testing.assert_allclose(logits, full[:, index], atol=0.1, rtol=0.05)


def test_inputs_are_padded_to_power_of_two_buckets():
    sizes = [int(bucket_size(tf.constant(n), 8, 48)) for n in (1, 8, 9, 17, 33, 47, 60)]
    assert sizes == [8, 8, 16, 32, 48, 48, 60]
    assert [int(bucket_size(tf.constant(n))) for n in (1, 2, 3, 5, 32, 33)] == [
        1, 2, 4, 8, 32, 64,
    ]  # fmt: skip
    padded = pad_to_buckets(tf.constant(SOURCE), 64).numpy()
    assert padded.shape == (4, 8)
    np.testing.assert_array_equal(padded[:3, :7], SOURCE)
    np.testing.assert_array_equal(padded[3, :7], SOURCE[0])  # a copy of row 0
    assert not padded[:, 7:].any()
    # An empty row averages over every column: its batch keeps its width.
    with_empty = np.concatenate([SOURCE, np.zeros((1, 7), "int32")])
    assert pad_to_buckets(tf.constant(with_empty), 64).shape == (4, 7)


def test_xla_greedy_of_a_single_short_source_is_the_graphs():
    model = model_of({}, seed=3)
    module = TranslatorModule(model, tokenizer=None)
    ids = tf.constant(SOURCE[1:2, :3])
    expected = greedy_search(model, ids, max_length=min(ids.shape[1] + 50, 12))
    got = tf.function(module._greedy_xla, autograph=False)(ids)
    np.testing.assert_array_equal(got, expected)


def _op_types(concrete):
    """The op types of a traced function, its loop bodies' included."""
    graph = concrete.graph.as_graph_def()
    nodes = list(graph.node)
    for function in graph.library.function:
        nodes.extend(function.node_def)
    return {node.op for node in nodes}


def test_a_search_offered_the_tensorflow_writer_writes_its_own_cache_in_place():
    # Traced inside `graph_cache_writes()` (as the SavedModel's graph
    # signatures are), the searches copy their caches once and write each
    # step into those buffers; the tokens and beams stay those of the
    # functional writes, call after call.  Without it (XLA's programs, a
    # user's own graph) they write functionally.
    model = model_of({}, seed=1)
    spec = [tf.TensorSpec([None, None], tf.int32)]

    def traced(search):
        def run(ids):
            with graph_cache_writes():
                return search(ids)
        return tf.function(run, input_signature=spec, autograph=False)

    def greedy(ids):
        return greedy_search(model, ids, max_length=STEPS)

    def beam(ids):
        return beam_search(model, ids, beam_size=3, max_length=STEPS, return_all_beams=True)

    for search in (greedy, beam):
        in_place = _op_types(traced(search).get_concrete_function())
        assert {"InplaceUpdate", "DeepCopy"} <= in_place
        assert "TensorScatterUpdate" not in in_place
        plain = _op_types(tf.function(search, input_signature=spec,
                                      autograph=False).get_concrete_function())
        assert "TensorScatterUpdate" in plain and "InplaceUpdate" not in plain

    expected = np.asarray(greedy(SOURCE))
    other = SOURCE[::-1, :4].copy()
    greedy_in_place = traced(greedy)
    for _ in range(2):  # a call starts from fresh buffers: nothing carries over
        np.testing.assert_array_equal(greedy_in_place(tf.constant(SOURCE)), expected)
        greedy_in_place(tf.constant(other))
    tokens, scores = beam(SOURCE)
    in_place_tokens, in_place_scores = traced(beam)(tf.constant(SOURCE))
    np.testing.assert_array_equal(in_place_tokens, tokens)
    np.testing.assert_allclose(in_place_scores, scores, atol=1e-5)


def test_decode_step_outside_a_search_leaves_the_callers_cache_as_it_was():
    # Only a search's own buffers are written in place: a step run in the
    # writer's context but outside a search returns a new cache and the one
    # passed in is unchanged.
    # (Shapes unknown, as in an export: the zero caches are then one
    # buffer to the graph optimizer, which a write in place would reach.)
    model = model_of({}, seed=1)

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def step(ids):
        cache = model.init_cache(ids, model.encode(ids, training=False), STEPS)
        start = tf.fill((tf.shape(ids)[0], 1), START_ID)
        with graph_cache_writes():
            _, written = model.decode_step(start, cache, 0)
        return cache["self_key"][0], cache["self_value"][1], written["self_key"][0]

    key_before, value_before, key_after = step(tf.constant(SOURCE))
    assert not np.any(key_before) and not np.any(value_before)
    assert np.any(key_after[:, :, 0]) and not np.any(key_after[:, :, 1:])
