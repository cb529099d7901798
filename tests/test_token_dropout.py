"""Word dropout (`keras_transformer.layers.TokenDropout`, `TransformerClassifier(token_dropout=...)`)
and word dropout by frequency (`RareWordDropout`, `rare_word_dropout`)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import RareWordDropout, TokenDropout
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


# --- word dropout by frequency ------------------------------------------------------


def test_rare_words_are_replaced_at_alpha_over_alpha_plus_count():
    counts = np.zeros(50)
    counts[2:50] = np.arange(48) % 6  # ids with counts 0..5
    layer = RareWordDropout(0.25, vocabulary_size=50, seed=1)
    layer.set_counts(counts)
    ids = np.tile(np.arange(50, dtype="int32"), (4000, 1))
    ids[:, :2] = 0  # padding columns
    out = np.asarray(layer(ids, training=True))
    replaced = out != ids
    assert (out[replaced] == 1).all()  # replaced by [UNK] and nothing else
    rate = replaced.mean(axis=0)
    for c in range(6):
        columns = [i for i in range(2, 50) if counts[i] == c]
        expected = 0.25 / (0.25 + c) if c else 0.0
        # 8 columns x 4,000 draws a count: 0.01 is over four standard errors.
        assert abs(rate[columns].mean() - expected) < 0.01, (c, rate[columns].mean())
    assert not replaced[:, :2].any()  # padding stays padding
    np.testing.assert_allclose(np.asarray(layer.rates())[2:8], [0, 0.2, 0.25 / 2.25,
                                                                 0.25 / 3.25, 0.25 / 4.25,
                                                                 0.25 / 5.25], rtol=1e-6)


def test_rare_word_dropout_passes_ids_through_outside_training_and_before_counts():
    ids = _ids(4, 8)
    layer = RareWordDropout(0.5, vocabulary_size=50, seed=0)
    np.testing.assert_array_equal(layer(ids, training=True), ids)  # no counts yet: rate 0
    layer.set_counts(np.ones(50))
    np.testing.assert_array_equal(layer(ids), ids)
    assert not np.array_equal(np.asarray(layer(ids, training=True)), ids)


@pytest.mark.parametrize("kwargs, message", [
    (dict(alpha=0.0, vocabulary_size=5), "alpha=0.0"),
    (dict(alpha=float("inf"), vocabulary_size=5), "alpha=inf"),
    (dict(alpha=0.25, vocabulary_size=0), "vocabulary_size=0"),
    (dict(alpha=0.25, vocabulary_size=5, replacement_id=0), "replacement_id=0, pad_id=0"),
])
def test_rare_word_dropout_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RareWordDropout(**kwargs)


def test_rare_word_counts_are_checked():
    layer = RareWordDropout(0.25, vocabulary_size=4)
    with pytest.raises(ValueError, match="must hold 4 finite numbers >= 0.*shape \\(3,\\)"):
        layer.set_counts([1, 2, 3])
    with pytest.raises(ValueError, match="minimum -1.0"):
        layer.set_counts([1, 2, 3, -1])
    with pytest.raises(ValueError, match="rare_word_dropout=0.0"):
        _model(0.0).set_word_counts(np.ones(20))


def test_rare_word_counts_are_saved_with_the_model(tmp_path):
    model = _model(0.0, rare_word_dropout=0.25)
    counts = np.arange(20) % 7
    model.set_word_counts(counts)
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert restored.rare_word_dropout == 0.25
    np.testing.assert_array_equal(np.asarray(restored.rare_word_dropout_layer.counts), counts)
    ids = _ids(4, 8) % 17 + 3
    np.testing.assert_allclose(np.asarray(restored(ids)), np.asarray(model(ids)), rtol=1e-6)
    assert _model(0.0).rare_word_dropout_layer is None


def test_numeric_input_and_other_tasks_refuse_rare_word_dropout():
    with pytest.raises(ValueError, match="rare_word_dropout=0.25 with num_features=1"):
        TransformerClassifier(num_classes=2, num_features=1, num_layers=0, hidden_dim=8,
                              num_heads=2, intermediate_dim=16, rare_word_dropout=0.25)
    with pytest.raises(ValueError, match="rare_word_dropout=-1"):
        TrainingConfig(task="classification", dataset="sst2", rare_word_dropout=-1).validate()
    with pytest.raises(ValueError, match="`rare_word_dropout` does not apply"):
        TrainingConfig(rare_word_dropout=0.25).validate()  # translation


def test_the_text_task_gives_every_member_the_training_word_counts(tmp_path):
    from training.tasks import get_task

    lines = ["0\tthe cat sat\n", "1\tthe dog ran far away\n", "0\ta cat ran\n",
             "1\tthe the dog\n"] * 3 + ["2\tonce\n"]
    train_file = tmp_path / "train.tsv"
    train_file.write_text("".join(lines))
    config = TrainingConfig(
        task="classification", dataset="files", train_files=(str(train_file),),
        min_word_count=1, max_sequence_length=4, ensemble_size=2, rare_word_dropout=0.25,
        ngram_widths=(2,), pooling="max", model_preset="tiny",
    )
    task = get_task("classification")
    data = task.load_data(config, tmp_path)
    task.prepare(config, data, tmp_path, write=False)
    model = task.build_model(config, data)
    # Counted by hand over the training text as the model reads it: cut to
    # four tokens, so "away" (fifth in its sentence) is never seen.
    expected = {}
    for text in data.train[0]:
        for word in text.split()[:4]:
            expected[word] = expected.get(word, 0) + 1
    vocabulary = task.tokenizer.vocabulary
    assert expected and "away" not in expected and expected["once"] == 1
    for member in model.members:
        counts = np.asarray(member.rare_word_dropout_layer.counts)
        assert {vocabulary[i]: int(c) for i, c in enumerate(counts) if c} == expected
