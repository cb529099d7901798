"""Word dropout (`keras_transformer.layers.TokenDropout`, `TransformerClassifier(token_dropout=...)`)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import TokenDropout
from keras_transformer.models import ClassifierEnsemble, TransformerClassifier
from training.config import TrainingConfig


def _ids(rows=200, length=100, seed=0):
    ids = np.random.default_rng(seed).integers(2, 50, (rows, length)).astype("int32")
    ids[:, length // 2:] = 0  # half of every row is padding
    return ids


def test_training_replaces_real_tokens_at_the_rate_and_keeps_the_rest():
    ids = _ids()
    out = np.asarray(TokenDropout(0.25, replacement_id=1, seed=3)(ids, training=True))
    real = ids != 0
    replaced = out != ids
    assert (out[replaced] == 1).all()  # replaced by [UNK] and nothing else
    assert not replaced[~real].any()  # padding stays padding
    assert abs(replaced[real].mean() - 0.25) < 0.01  # 10,000 real tokens
    assert out.dtype == ids.dtype


def test_inference_and_rate_zero_pass_the_ids_through():
    ids = _ids(4, 8)
    np.testing.assert_array_equal(TokenDropout(0.5, seed=0)(ids), ids)
    np.testing.assert_array_equal(TokenDropout(0.5, seed=0)(ids, training=False), ids)
    np.testing.assert_array_equal(TokenDropout(0.0, seed=0)(ids, training=True), ids)


def test_seeded_draws_repeat_and_each_call_draws_anew():
    ids = _ids(8, 16)
    first, second = TokenDropout(0.5, seed=7), TokenDropout(0.5, seed=7)
    a = np.asarray(first(ids, training=True))
    np.testing.assert_array_equal(a, np.asarray(second(ids, training=True)))
    assert not np.array_equal(a, np.asarray(first(ids, training=True)))


@pytest.mark.parametrize("kwargs, message", [
    (dict(rate=1.0), "rate=1.0"),
    (dict(rate=-0.1), "rate=-0.1"),
    (dict(rate=0.1, replacement_id=0), "replacement_id=0, pad_id=0"),
    (dict(rate=0.1, replacement_id=-1), "replacement_id=-1"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TokenDropout(**kwargs)


def _model(token_dropout, **kwargs):
    return TransformerClassifier(
        num_classes=3, vocabulary_size=20, num_layers=0, hidden_dim=8, num_heads=2,
        intermediate_dim=16, dropout=0.0, max_sequence_length=8, ngram_widths=(2,),
        pooling="max", token_dropout=token_dropout, **kwargs,
    )


def _unk_gradient(model, ids, labels):
    """Gradient of the training loss on the [UNK] row (id 1) of the embedding table."""
    table = next(v for v in model.trainable_variables if "token_embedding" in v.path
                 and v.shape[0] == 20)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(ids, training=True))
    return np.asarray(tf.convert_to_tensor(tape.gradient(loss, table))[1])


def test_the_unknown_word_embedding_learns_only_with_word_dropout():
    # No [UNK] in the input: its embedding is trained only on replaced words.
    ids, labels = _ids(4, 8) % 17 + 3, np.array([0, 1, 2, 0])
    assert not np.any(_unk_gradient(_model(0.0), ids, labels))
    assert np.any(_unk_gradient(_model(0.5), ids, labels))


def test_classifier_inference_is_unchanged_and_the_option_round_trips():
    ids = _ids(4, 8) % 17 + 3
    model = _model(0.5)
    inference = np.asarray(model(ids))
    np.testing.assert_allclose(np.asarray(model(ids, training=False)), inference, rtol=1e-6)
    assert not np.allclose(np.asarray(model(ids, training=True)), inference)
    restored = TransformerClassifier.from_config(model.get_config())
    assert restored.token_dropout == 0.5
    # Without it, no layer (and no seed generator a checkpoint would hold) is added.
    plain = _model(0.0)
    assert plain.token_dropout_layer is None
    assert "token_dropout" in [layer.name for layer in model.layers]
    assert "token_dropout" not in [layer.name for layer in plain.layers]


def test_ensemble_members_drop_words_independently():
    ids = _ids(4, 8) % 17 + 3
    members = [_model(0.5, name=f"member_{i}") for i in range(2)]
    ensemble = ClassifierEnsemble(members)
    ensemble(ids)  # built
    # Each member draws from its own generator: with the weights made equal,
    # their training outputs still differ.
    members[1].set_weights(members[0].get_weights())
    a, b = (np.asarray(m(ids, training=True)) for m in members)
    assert not np.allclose(a, b)


def test_numeric_input_and_other_tasks_refuse_it():
    with pytest.raises(ValueError, match="token_dropout=0.1 with num_features=1"):
        TransformerClassifier(num_classes=2, num_features=1, num_layers=0, hidden_dim=8,
                              num_heads=2, intermediate_dim=16, token_dropout=0.1)
    with pytest.raises(ValueError, match="token_dropout=1.0"):
        TrainingConfig(task="classification", dataset="sst2", token_dropout=1.0).validate()
    with pytest.raises(ValueError, match="`token_dropout` does not apply"):
        TrainingConfig(token_dropout=0.1).validate()  # translation
