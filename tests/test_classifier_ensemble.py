"""ClassifierEnsemble: the members' mean answer, each member trained on its own loss."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import PatchStem
from keras_transformer.models import (
    ClassifierEnsemble,
    TransformerClassifier,
    mean_probability_logits,
)


def _member(num_classes=3, name=None, max_sequence_length=8, **sizes):
    sizes = {"num_layers": 1, "num_heads": 2, "intermediate_dim": 16, "dropout": 0.0, **sizes}
    stem = PatchStem(1, hidden_dim=8, max_sequence_length=max_sequence_length, patch_length=2)
    return TransformerClassifier(stem, num_classes, name=name, **sizes)


def _ensemble(num_classes=3, size=2):
    return ClassifierEnsemble([_member(num_classes, name=f"m{i}") for i in range(size)])


def _series(batch=4, length=8, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, length, 1)).astype("float32")


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("num_classes", [1, 3])
def test_answer_is_the_members_mean_probability(num_classes):
    model = _ensemble(num_classes, size=3)
    x = _series()
    member_logits = np.stack([np.asarray(m(x)) for m in model.members], 1)  # (B, k, K)
    if num_classes == 1:
        expected = (1 / (1 + np.exp(-member_logits))).mean(1)
    else:
        expected = _softmax(member_logits).mean(1)
    logits = model(x)
    assert logits.shape == (4, num_classes)
    np.testing.assert_allclose(np.asarray(model.probabilities(logits)), expected, atol=1e-6)
    # What the exporters call, and predict(), give the same answer.
    np.testing.assert_allclose(np.asarray(model.predict(x, verbose=0)), np.asarray(logits),
                               atol=1e-6)


def test_mean_probability_logits_stay_finite_for_confident_members():
    logits = np.array([[[80.0, -80.0], [-80.0, 80.0]]], "float32")  # (1, 2, 2)
    out = np.asarray(mean_probability_logits(logits, 2))
    assert np.isfinite(out).all()
    np.testing.assert_allclose(_softmax(out), [[0.5, 0.5]], atol=1e-6)
    single = np.asarray(mean_probability_logits(np.array([[[90.0], [-90.0]]], "float32"), 1))
    np.testing.assert_allclose(single, [[0.0]], atol=1e-5)  # logit of the mean 0.5


def test_training_answers_as_inference_and_the_loss_is_the_mean_member_loss():
    model = _ensemble(size=3)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = _series(), np.array([0, 1, 2, 1])
    answer = model(x, training=True)  # one shape: the ensemble's answer
    assert answer.shape == (4, 3)
    np.testing.assert_allclose(np.asarray(answer), np.asarray(model(x)), atol=1e-6)  # no dropout
    member_logits = np.stack([np.asarray(m(x)) for m in model.members], 1)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    expected = np.mean([float(loss_fn(y, member_logits[:, i])) for i in range(3)])
    got = float(model.compute_loss(x, y, answer, training=True))
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    # The kept member logits are taken once: a loss without a training call
    # of its own (evaluation) is the ensemble's answer's.
    ensemble = model(x)
    np.testing.assert_allclose(float(model.compute_loss(x, y, ensemble, training=False)),
                               float(loss_fn(y, ensemble)), rtol=1e-6)
    np.testing.assert_allclose(float(model.compute_loss(x, y, ensemble, training=True)),
                               float(loss_fn(y, ensemble)), rtol=1e-6)


def test_each_member_gets_its_own_gradient_divided_by_k():
    """Member 0's gradient is the one it gets alone (over k), whatever member 1 holds."""
    model = _ensemble(size=2)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = _series(), np.array([0, 1, 2, 1])
    first = model.members[0]

    def member_gradients():
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x, y, model(x, training=True), training=True)
        return [np.asarray(g) for g in tape.gradient(loss, first.trainable_weights)]

    with tf.GradientTape() as tape:
        alone = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
            y, first(x, training=True))
    expected = [np.asarray(g) / 2 for g in tape.gradient(alone, first.trainable_weights)]
    before = member_gradients()
    for got, want in zip(before, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    # Changing the other member changes nothing for this one.
    for weight in model.members[1].trainable_weights:
        weight.assign(weight * 3.0 + 0.5)
    for got, want in zip(member_gradients(), before, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_fit_reports_the_ensembles_accuracy_and_members_start_apart():
    model = _ensemble(size=2)
    first, second = (m.stem.feature_projection.kernel for m in model.members)
    assert not np.allclose(np.asarray(first), np.asarray(second))
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    x, y = _series(batch=8), np.array([0, 1, 2, 1, 0, 2, 1, 0])
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    # After the step (no dropout), training-mode and inference answers agree,
    # so the metric the step reported is the ensemble's accuracy.
    accuracy = model.evaluate(x, y, verbose=0, return_dict=True)["accuracy"]
    expected = (np.asarray(model.probabilities(model(x))).argmax(-1) == y).mean()
    np.testing.assert_allclose(accuracy, expected)
    model.reset_metrics()
    train_metrics = model.compute_metrics(x, y, model(x, training=True))
    np.testing.assert_allclose(float(train_metrics["accuracy"]), expected)


def test_saved_and_loaded_ensemble_answers_the_same(tmp_path):
    model = _ensemble(size=2)
    x = _series()
    path = tmp_path / "ensemble.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, ClassifierEnsemble) and loaded.size == 2
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(model(x)), atol=1e-6)
    assert (loaded.num_classes, loaded.num_features, loaded.max_sequence_length,
            loaded.input_name) == (3, 1, 8, "features")


def test_bad_members_are_named():
    with pytest.raises(ValueError, match="two or more"):
        ClassifierEnsemble([_member()])
    one = _member()
    with pytest.raises(ValueError, match="distinct"):
        ClassifierEnsemble([one, one])
    with pytest.raises(ValueError, match="share `num_classes`.*3.*2"):
        ClassifierEnsemble([_member(3), _member(2)])
    with pytest.raises(ValueError, match="share `max_sequence_length`"):
        ClassifierEnsemble([_member(), _member(max_sequence_length=16)])
    with pytest.raises(ValueError, match="classifiers with `num_classes`"):
        ClassifierEnsemble([_member(), keras.layers.Dense(3)])
    shared = TransformerClassifier(one.stem, 3, num_layers=1, num_heads=2, intermediate_dim=16)
    with pytest.raises(ValueError, match="a stem of its own"):
        ClassifierEnsemble([one, shared])


def test_excluded_members_leave_the_answer_and_saving_keeps_them(tmp_path):
    model = _ensemble(size=3)
    x = _series()
    member_logits = np.stack([np.asarray(m(x)) for m in model.members], 1)  # (B, 3, K)
    np.testing.assert_allclose(np.asarray(model.predict(x, verbose=0)),
                               np.asarray(model(x)), atol=1e-6)  # traced with all three
    model.exclude_members([1])
    assert model.excluded_members == (1,) and model.averaged_members == [0, 2]
    expected = _softmax(member_logits[:, [0, 2]]).mean(1)
    np.testing.assert_allclose(np.asarray(model.probabilities(model(x))), expected, atol=1e-6)
    # The compiled predict step is traced again, not the one averaging all three.
    np.testing.assert_allclose(np.asarray(model.probabilities(model.predict(x, verbose=0))),
                               expected, atol=1e-6)
    traced = model.predict_function
    model.exclude_members([1])  # no change: nothing to trace again
    assert model.predict_function is traced
    # Training still trains every member, and answers with all of them.
    np.testing.assert_allclose(np.asarray(model.probabilities(model(x, training=True))),
                               _softmax(member_logits).mean(1), atol=1e-6)
    assert model.step_outputs.take()[0].shape == (4, 3, 3)
    model.save(tmp_path / "ensemble.keras")
    loaded = keras.saving.load_model(tmp_path / "ensemble.keras")
    assert loaded.excluded_members == (1,)
    np.testing.assert_allclose(np.asarray(loaded.probabilities(loaded(x))), expected, atol=1e-6)
    model.exclude_members([])
    np.testing.assert_allclose(np.asarray(model.probabilities(model(x))),
                               _softmax(member_logits).mean(1), atol=1e-6)


@pytest.mark.parametrize("excluded", [[3], [-1], [0, 1, 2], [1, 1], [1.0], [True], "1", 1])
def test_bad_excluded_members_are_named(excluded):
    with pytest.raises(ValueError, match=r"excluded_members.*\[0, 3\).*received excluded_members="):
        ClassifierEnsemble([_member(name=f"m{i}") for i in range(3)], excluded_members=excluded)
