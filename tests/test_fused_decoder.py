"""`FusedDecoder`: the serving decoder's step computes the model's own step.

Its logits equal `Transformer.decode_step`'s at every position, for each
layout the presets use (post- and pre-LN, tied and untied projection,
sinusoidal and learned positions), and greedy and beam search over it
return the model's tokens.  Models it does not cover are named, and the
serving module then decodes with the model itself.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import beam_search, greedy_search
from keras_transformer.models import Transformer
from training.serving.fused_decoder import FusedDecoder, fused_decoder_unsupported
from training.serving.signatures import TranslatorModule, bucket_size, pad_to_buckets

LAYOUTS = {
    "post_ln_tied": {},
    "pre_ln": {"normalize_first": True},
    "untied_learned": {"tie_embeddings": False, "positions": "learned"},
    "key_dim_wider_than_heads": {"key_dim": 12, "value_dim": 6},
}
SOURCE = np.array(
    [[5, 9, 14, 7, 3, 0, 0], [11, 4, 3, 0, 0, 0, 0], [6, 6, 8, 12, 10, 13, 3]], "int32"
)


def model_of(layout, seed=0):
    keras.utils.set_random_seed(seed)
    return Transformer.from_preset(
        "tiny", vocabulary_size=17, hidden_dim=16, num_heads=2, intermediate_dim=24,
        num_layers=2, dropout=0.0, max_sequence_length=12, **LAYOUTS[layout],
    )  # fmt: skip


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def model(request):
    return model_of(request.param)


def test_every_step_has_the_models_logits(model):
    fused = FusedDecoder(model)
    encoded = model.encode(SOURCE, training=False)
    cache = model.init_cache(SOURCE, encoded, 6)
    fused_cache = fused.init_cache(SOURCE, encoded, 6)
    tokens = np.array([[2], [2], [2]], "int32")
    for index in range(6):
        expected, cache = model.decode_step(tokens, cache, index)
        got, fused_cache = fused.decode_step(tokens, fused_cache, index)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        for name in ("self_key", "self_value"):
            for ours, theirs in zip(fused_cache[name], cache[name], strict=True):
                np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
        # The searches never feed [PAD] (id 0) back: it is never generated.
        tokens = 1 + np.argmax(np.asarray(expected)[:, 1:], axis=-1)
        tokens = tokens[:, None].astype("int32")


@pytest.mark.parametrize("layout", ["post_ln_tied", "untied_learned"])
def test_searches_return_the_models_tokens_in_a_graph(layout):
    # Two layouts: the step's logits are held to the model's in all four.
    model = model_of(layout)
    fused = FusedDecoder(model)

    @tf.function(autograph=False)
    def both(ids):
        return (
            greedy_search(model, ids, max_length=10),
            greedy_search(fused, ids, max_length=10),
            beam_search(model, ids, beam_size=3, max_length=10)[0],
            beam_search(fused, ids, beam_size=3, max_length=10)[0],
        )

    greedy, fused_greedy, beam, fused_beam = both(tf.constant(SOURCE))
    np.testing.assert_array_equal(fused_greedy, greedy)
    np.testing.assert_array_equal(fused_beam, beam)
    assert np.count_nonzero(greedy) > 3  # the search ran, not an empty result


@pytest.mark.parametrize(
    "override, feature",
    [
        ({"dtype": "mixed_bfloat16"}, "dtype policy"),
        ({"activation": "gelu"}, "activation 'gelu'"),
    ],
)
def test_a_model_it_does_not_cover_is_named_and_served_by_the_model(override, feature):
    model = Transformer.from_preset(
        "tiny", vocabulary_size=17, hidden_dim=16, num_heads=2, intermediate_dim=24,
        num_layers=1, max_sequence_length=12, **override,
    )  # fmt: skip
    assert feature in fused_decoder_unsupported(model)
    with pytest.raises(ValueError, match=feature):
        FusedDecoder(model)
    assert fused_decoder_unsupported(model_of("post_ln_tied")) is None
    module = TranslatorModule(model, tokenizer=None)
    assert module._decoder is model


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


def test_xla_greedy_returns_the_graphs_tokens():
    model = model_of("post_ln_tied", seed=3)
    module = TranslatorModule(model, tokenizer=None)
    for source in (SOURCE, SOURCE[1:2, :3]):
        ids = tf.constant(source)
        expected = greedy_search(model, ids, max_length=min(ids.shape[1] + 50, 12))
        got = tf.function(module._greedy_xla, autograph=False)(ids)
        np.testing.assert_array_equal(got, expected)
