"""Mixup of a classifier's pooled features (`TextCNNClassifier(mixup_alpha=...)`, `TransformerClassifier(mixup_alpha=...)`)."""

import keras
import numpy as np
import pytest

from keras_transformer.models import (
    ClassifierEnsemble,
    TextCNNClassifier,
)
from keras_transformer.models.pooled_classifier import (
    classifier_loss,
    mixup_lambda,
)
from training.optimization.losses import SparseSmoothedCrossentropy


def _text_model(num_classes=3, mixup_alpha=0.4, name=None, dropout=0.0):
    return TextCNNClassifier(
        num_classes=num_classes, vocabulary_size=20, hidden_dim=8, dropout=dropout, max_sequence_length=8, ngram_widths=(2, 3),
        pooling="max", mixup_alpha=mixup_alpha, name=name,
    )


def _tokens(batch=4, seed=0):
    ids = np.random.default_rng(seed).integers(3, 20, (batch, 6)).astype("int32")
    ids[0, 4:] = 0  # some padding
    return ids


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_training_mixes_each_pooled_sentence_with_its_mirror():
    model = _text_model()
    x = _tokens()
    out = np.asarray(model(x, training=True))
    assert out.shape == (4, 3)  # the mixed batch's logits, as any call's
    (lam,) = model.step_outputs.take()  # kept for compute_loss
    lam = np.asarray(lam)
    assert ((lam >= 0.5) & (lam <= 1.0)).all()
    assert model.step_outputs.take() is None  # taken once
    pooled = np.asarray(model._pooled_features(x))  # no dropout: as in training
    mixed = lam[:, None] * pooled + (1 - lam[:, None]) * pooled[::-1]
    np.testing.assert_allclose(out, np.asarray(model._head(mixed)), rtol=1e-5, atol=1e-6)
    # Inference is the plain graph, as without mixup.
    plain = _text_model(mixup_alpha=0.0)
    plain.set_weights(model.get_weights()[: len(plain.get_weights())])
    np.testing.assert_allclose(np.asarray(model(x)), np.asarray(plain(x)), atol=1e-6)
    np.testing.assert_allclose(np.asarray(model(x)),
                               np.asarray(model._head(pooled)), rtol=1e-5, atol=1e-6)
    assert plain(x, training=True).shape == (4, 3)


def test_lam_is_beta_folded_to_the_upper_half():
    lam = np.asarray(mixup_lambda(20000, 1.0, keras.random.SeedGenerator(3)))
    # Beta(1, 1) folded: uniform on [0.5, 1], mean 0.75, variance 1/48.
    assert lam.min() >= 0.5 and lam.max() <= 1.0
    np.testing.assert_allclose(lam.mean(), 0.75, atol=0.01)
    np.testing.assert_allclose(lam.var(), 1 / 48, atol=0.002)
    small = np.asarray(mixup_lambda(20000, 0.1, keras.random.SeedGenerator(3)))
    assert small.mean() > 0.9  # a small alpha seldom mixes much


@pytest.mark.parametrize("loss_name", ["sparse", "smoothed", "binary"])
def test_loss_mixes_each_example_s_loss_with_its_partner_s(loss_name):
    num_classes = 1 if loss_name == "binary" else 3
    model = _text_model(num_classes)
    loss_fn = {
        "sparse": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        "smoothed": SparseSmoothedCrossentropy(0.1, from_logits=True),
        "binary": keras.losses.BinaryCrossentropy(from_logits=True),
    }[loss_name]
    model.compile(loss=loss_fn)
    x = _tokens()
    y = np.array([0, 1, 1, 0]) if num_classes == 1 else np.array([0, 2, 1, 1])
    logits = np.asarray(model(x, training=True))
    kept = model.step_outputs.values  # what compute_loss of this step takes
    lam = np.asarray(kept[0])
    if num_classes == 1:
        z = logits[:, 0]
        per = lambda t: np.logaddexp(0, z) - t * z  # noqa: E731 (binary CE on logits)
    else:
        eps = 0.1 if loss_name == "smoothed" else 0.0
        per = lambda t: -(((1 - eps) * np.eye(3)[t] + eps / 3) * _log_softmax(logits)).sum(-1)  # noqa: E731
    expected = (lam * per(y) + (1 - lam) * per(y[::-1])).mean()
    got = float(model.compute_loss(x, y, logits, training=True))
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # Each label's term is weighed by the weight of the example it belongs
    # to: the partner's term by the partner's weight.
    w = np.array([1.0, 0.0, 2.0, 3.0], "float32")
    expected = (w * lam * per(y) + w[::-1] * (1 - lam) * per(y[::-1])).mean()
    model.step_outputs.keep(kept)  # as the same step's call would
    got = float(model.compute_loss(x, y, logits, sample_weight=w, training=True))
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # Inference outputs keep the plain loss.
    plain = np.asarray(model(x))
    np.testing.assert_allclose(float(model.compute_loss(x, y, plain, training=False)),
                               float(loss_fn(y, plain)), rtol=1e-6)


def test_model_losses_count_once():
    """The compiled loss is called twice; what the model adds itself (weight
    regularisers) must not be doubled."""
    def compute_loss(x, y, logits, weight, training=True):
        return keras.ops.mean(weight * keras.ops.cast(y, "float32")) + 5.0  # + model losses
    y = np.array([1.0, 2.0, 3.0, 4.0], "float32")
    logits, lam = np.zeros((4, 2), "float32"), np.full((4,), 0.75, "float32")
    got = float(classifier_loss(compute_loss, None, y, logits, lam))
    np.testing.assert_allclose(got, np.mean(0.75 * y + 0.25 * y[::-1]) + 5.0, rtol=1e-6)


def test_metrics_score_the_logits_against_each_example_s_own_label():
    model = _text_model()
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    x, y = _tokens(), np.array([0, 2, 1, 1])
    logits = np.asarray(model(x, training=True))
    model.evaluate(x, y, verbose=0)  # builds the metrics
    model.reset_metrics()
    got = float(model.compute_metrics(x, y, logits)["accuracy"])
    assert got == (logits.argmax(-1) == y).mean()


def test_an_ensemble_of_mixing_members_trains_each_on_its_mixed_loss():
    members = [_text_model(name=f"m{i}") for i in range(2)]
    model = ClassifierEnsemble(members)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(loss=loss_fn, metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    x, y = _tokens(), np.array([0, 2, 1, 1])
    answer = model(x, training=True)
    assert answer.shape == (4, 3)  # the ensemble's answer, as at inference
    member_logits, lam = (np.asarray(t) for t in model.step_outputs.values)
    assert member_logits.shape == (4, 2, 3) and lam.shape == (4, 2)
    expected = []
    for i in range(2):
        logits = member_logits[:, i]
        per = lambda t: -(np.eye(3)[t] * _log_softmax(logits)).sum(-1)  # noqa: E731, B023
        expected.append((lam[:, i] * per(y) + (1 - lam[:, i]) * per(y[::-1])).mean())
    np.testing.assert_allclose(float(model.compute_loss(x, y, answer, training=True)),
                               np.mean(expected), rtol=1e-5)
    assert np.asarray(model(x)).shape == (4, 3)
    model.evaluate(x, y, verbose=0)
    model.reset_metrics()
    metrics = model.compute_metrics(x, y, answer)
    assert 0.0 <= float(metrics["accuracy"]) <= 1.0
    with pytest.raises(ValueError, match=r"share `mixup_alpha`.*\[0.0, 0.4\]"):
        ClassifierEnsemble([_text_model(name="a"), _text_model(mixup_alpha=0.0, name="b")])


def test_mixup_alpha_is_saved_and_checked(tmp_path):
    model = _text_model(mixup_alpha=0.4)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert loaded.mixup_alpha == 0.4
    x = _tokens()
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(model(x)), atol=1e-6)
    assert loaded(x, training=True).shape == (4, 3)
    assert loaded.step_outputs.take()[0].shape == (4,)
    for bad in (-0.1, float("inf"), "0.4", True):
        with pytest.raises(ValueError, match=f"received mixup_alpha={bad!r}"):
            _text_model(mixup_alpha=bad)


def test_a_mixup_classifier_learns_a_separable_task():
    """Two classes told apart by one token: a mixed model still learns them."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 64)
    x = rng.integers(5, 20, (64, 6)).astype("int32")
    x[:, 2] = 3 + y  # token 3 or 4 decides the class
    model = _text_model(num_classes=2, mixup_alpha=0.4)
    model.compile(optimizer=keras.optimizers.Adam(0.02),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    model.fit(x, y, batch_size=16, epochs=15, verbose=0)
    assert model.evaluate(x, y, verbose=0, return_dict=True)["accuracy"] == 1.0
