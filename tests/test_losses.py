"""Tests for training.optimization.losses (paper Section 5.4; PEERS.md pain points 6, 8)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from training.distribute import build_strategy
from training.optimization.losses import (
    MaskedAccuracy,
    MaskedPerplexity,
    MaskedSparseCategoricalCrossentropy,
    SparseSmoothedCrossentropy,
    masked_token_cross_entropy,
)

VOCAB = 5
# Row 0 has 4 real tokens, row 1 has 1: per-row means differ from the
# per-token mean, so a wrong denominator shows.
LABELS = np.array([[2, 4, 1, 3, 0, 0], [3, 0, 0, 0, 0, 0]], np.int32)


def reference_loss(labels, logits, eps, pad_id=0):
    """Smoothed cross-entropy by hand: explicit target distribution q."""
    logits = np.asarray(logits, np.float64)
    log_p = logits - logits.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    vocab = logits.shape[-1]
    q = (1.0 - eps) * np.eye(vocab)[labels] + eps / vocab
    per_token = -(q * log_p).sum(-1)
    real = labels != pad_id
    return per_token[real].sum() / max(real.sum(), 1)


def random_logits(rng, shape=(2, 6, VOCAB), scale=3.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.5])
def test_matches_numpy_reference(rng, eps):
    logits = random_logits(rng)
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=eps)
    np.testing.assert_allclose(
        float(loss(LABELS, logits)), reference_loss(LABELS, logits, eps), rtol=1e-6
    )


def test_hand_computed_uniform_logits():
    # p = 1/4 everywhere: CE = log 4 for any smoothing (q sums to one).
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    value = float(loss(np.array([[1, 2, 0]]), np.zeros((1, 3, 4), np.float32)))
    np.testing.assert_allclose(value, np.log(4.0), rtol=1e-6)


def test_hand_computed_two_classes():
    # V=2, p = (0.8, 0.2), true class 1, eps=0.2: q = (0.1, 0.9).
    logits = np.log(np.array([[[0.8, 0.2]]], np.float32))
    value = float(MaskedSparseCategoricalCrossentropy(0.2)(np.array([[1]]), logits))
    expected = -(0.1 * np.log(0.8) + 0.9 * np.log(0.2))
    np.testing.assert_allclose(value, expected, rtol=1e-6)


def test_padding_changes_nothing(rng):
    logits = random_logits(rng)
    loss = MaskedSparseCategoricalCrossentropy()
    padded_labels = np.pad(LABELS, [(0, 0), (0, 3)])
    padded_logits = np.concatenate([logits, random_logits(rng, (2, 3, VOCAB))], 1)
    np.testing.assert_allclose(
        float(loss(padded_labels, padded_logits)),
        float(loss(LABELS, logits)),
        rtol=1e-6,
    )


def test_all_pad_batch_gives_zero_and_finite_gradient(rng):
    logits = tf.constant(random_logits(rng))
    with tf.GradientTape() as tape:
        tape.watch(logits)
        value = MaskedSparseCategoricalCrossentropy()(
            np.zeros((2, 6), np.int32), logits
        )
    assert float(value) == 0.0
    np.testing.assert_array_equal(tape.gradient(value, logits).numpy(), 0.0)


def test_keras_mask_on_y_pred_is_ignored(rng):
    logits_np = random_logits(rng)
    plain = MaskedSparseCategoricalCrossentropy()(LABELS, logits_np)
    logits = tf.constant(logits_np)
    logits._keras_mask = tf.constant(
        [[True] * 6, [True, True, True, False, False, False]]
    )
    # Stock Keras losses do read the mask: the injected mask is live.
    stock = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    assert abs(float(stock(LABELS, logits)) - float(stock(LABELS, logits_np))) > 1e-3
    masked = MaskedSparseCategoricalCrossentropy()(LABELS, logits)
    np.testing.assert_allclose(float(masked), float(plain), rtol=1e-7)
    accuracy = MaskedAccuracy()
    accuracy.update_state(LABELS, logits)
    reference = MaskedAccuracy()
    reference.update_state(LABELS, logits_np)
    assert float(accuracy.result()) == float(reference.result())


def test_model_with_implicit_mask_evaluates_per_real_token(rng):
    # Embedding(mask_zero) gives the logits a Keras mask from the *inputs*;
    # it differs from the label mask on purpose.
    inputs = np.array([[2, 4, 0, 3, 1, 0], [3, 2, 2, 0, 0, 0]], np.int32)
    model = keras.Sequential(
        [
            keras.Input((6,), dtype="int32"),
            keras.layers.Embedding(VOCAB, 8, mask_zero=True),
        ]
        + [keras.layers.Dense(VOCAB)]
    )
    model.compile(
        loss=MaskedSparseCategoricalCrossentropy(), metrics=[MaskedAccuracy()]
    )
    assert model(inputs)._keras_mask is not None
    logits = model.predict(inputs, verbose=0)
    result = model.evaluate(inputs, LABELS, batch_size=2, verbose=0, return_dict=True)
    np.testing.assert_allclose(
        result["loss"], reference_loss(LABELS, logits, 0.1), rtol=1e-5
    )
    real = LABELS != 0
    accuracy = (logits.argmax(-1) == LABELS)[real].mean()
    np.testing.assert_allclose(result["masked_accuracy"], accuracy, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_logits_are_computed_in_float32(dtype):
    # 6e4 is near float16's maximum: exp() or a sum in float16 would overflow.
    logits = np.array([[[6e4, 0.0, -6e4, 1.0]]], np.float32)
    low = tf.cast(logits, dtype)
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    value = loss(np.array([[2]]), low)
    assert value.dtype == tf.float32
    expected = reference_loss(np.array([[2]]), tf.cast(low, tf.float32).numpy(), 0.1)
    np.testing.assert_allclose(float(value), expected, rtol=1e-6)


def test_mixed_float16_model_evaluates_like_the_reference(rng):
    keras.config.set_dtype_policy("mixed_float16")  # conftest restores float32
    inputs = rng.integers(1, VOCAB, size=(2, 6)).astype(np.int32)
    model = keras.Sequential(
        [keras.Input((6,), dtype="int32"), keras.layers.Embedding(VOCAB, 8)]
        + [keras.layers.Dense(VOCAB)]
    )
    model.compile(optimizer="sgd", loss=MaskedSparseCategoricalCrossentropy())
    logits = model.predict(inputs, verbose=0)
    assert logits.dtype == np.float16
    loss = model.evaluate(inputs, LABELS, verbose=0)
    np.testing.assert_allclose(loss, reference_loss(LABELS, logits, 0.1), rtol=1e-5)


def test_from_probabilities_matches_from_logits(rng):
    logits = random_logits(rng)
    probabilities = tf.nn.softmax(logits).numpy()
    from_logits = MaskedSparseCategoricalCrossentropy()(LABELS, logits)
    from_probs = MaskedSparseCategoricalCrossentropy(from_logits=False)(
        LABELS, probabilities
    )
    np.testing.assert_allclose(float(from_probs), float(from_logits), rtol=1e-5)


def test_sample_weight_per_sequence(rng):
    logits = random_logits(rng)
    loss = MaskedSparseCategoricalCrossentropy()
    only_first = loss(LABELS, logits, sample_weight=np.array([1.0, 0.0]))
    np.testing.assert_allclose(
        float(only_first), reference_loss(LABELS[:1], logits[:1], 0.1), rtol=1e-6
    )


def test_accuracy_and_perplexity_hand_case():
    logits = np.log(
        np.array([[[0.1, 0.6, 0.3], [0.5, 0.25, 0.25], [0.2, 0.2, 0.6]]], np.float32)
    )
    labels = np.array([[1, 2, 0]])  # 2 real tokens: first right, second wrong
    accuracy, perplexity = MaskedAccuracy(), MaskedPerplexity()
    accuracy.update_state(labels, logits)
    perplexity.update_state(labels, logits)
    assert float(accuracy.result()) == pytest.approx(0.5)
    expected = np.exp(-(np.log(0.6) + np.log(0.25)) / 2)
    np.testing.assert_allclose(float(perplexity.result()), expected, rtol=1e-6)
    # A second batch of one real token counts once more, not as one batch.
    perplexity.update_state(np.array([[1, 0, 0]]), logits)
    expected = np.exp(-(2 * np.log(0.6) + np.log(0.25)) / 3)
    np.testing.assert_allclose(float(perplexity.result()), expected, rtol=1e-6)
    accuracy.reset_state()
    assert float(accuracy.result()) == 0.0


def test_unsmoothed_helper_is_per_token_nll(rng):
    logits = random_logits(rng)
    losses, mask = masked_token_cross_entropy(LABELS, logits)
    np.testing.assert_array_equal(mask.numpy(), LABELS != 0)
    log_p = tf.nn.log_softmax(logits).numpy()
    nll = -np.take_along_axis(log_p, LABELS[..., None], -1)[..., 0]
    np.testing.assert_allclose(losses.numpy(), nll * (LABELS != 0), rtol=1e-6)


@pytest.mark.parametrize(
    "cls", [MaskedSparseCategoricalCrossentropy, MaskedAccuracy, MaskedPerplexity]
)
def test_config_round_trip(cls):
    obj = (
        cls(pad_id=3) if cls is not MaskedSparseCategoricalCrossentropy else cls(0.2, 3)
    )
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(obj)
    )
    assert type(restored) is cls
    assert restored.get_config() == obj.get_config()


def test_label_smoothing_out_of_range():
    with pytest.raises(ValueError, match="label_smoothing=1.5"):
        MaskedSparseCategoricalCrossentropy(label_smoothing=1.5)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_sparse_smoothed_crossentropy_matches_numpy_reference(rng, eps):
    """Class ids (B,) and (B, 1) against (B, K) logits: the explicit smoothed
    target's cross-entropy averaged over the batch (class 0 is a class, not
    padding), and the plain sparse cross-entropy at eps = 0."""
    labels = np.array([0, 2, 1, 0], np.int32)
    logits = random_logits(rng, (4, 3))
    expected = reference_loss(labels[:, None], logits[:, None], eps, pad_id=-1)
    loss = SparseSmoothedCrossentropy(eps)
    for y in (labels, labels[:, None]):
        np.testing.assert_allclose(float(loss(y, logits)), expected, rtol=1e-6)
    if eps == 0.0:
        plain = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        np.testing.assert_allclose(float(plain(labels, logits)), expected, rtol=1e-6)
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(loss)
    )
    assert type(restored) is SparseSmoothedCrossentropy
    assert restored.get_config() == loss.get_config()
    with pytest.raises(ValueError, match="label_smoothing=1.0"):
        SparseSmoothedCrossentropy(label_smoothing=1.0)


def _fit_one_step(strategy, initial_weights, inputs):
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((6,), dtype="int32"), keras.layers.Embedding(VOCAB, 4)]
            + [keras.layers.Dense(VOCAB)]
        )
        model.set_weights(initial_weights)
        model.compile(
            optimizer=keras.optimizers.SGD(0.5),
            loss=MaskedSparseCategoricalCrossentropy(),
            metrics=[MaskedAccuracy(), MaskedPerplexity()],
        )
    history = model.fit(
        inputs, LABELS, batch_size=2, epochs=1, shuffle=False, verbose=0
    )
    return {k: v[0] for k, v in history.history.items()}, model.get_weights()


def test_two_replicas_report_and_train_like_one_device(rng):
    inputs = rng.integers(1, VOCAB, size=(2, 6)).astype(np.int32)
    shapes = [(VOCAB, 4), (4, VOCAB), (VOCAB,)]
    initial = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    mirrored = build_strategy("mirrored")
    assert mirrored.num_replicas_in_sync == 2
    single_logs, single_weights = _fit_one_step(
        build_strategy("default"), initial, inputs
    )
    mirrored_logs, mirrored_weights = _fit_one_step(mirrored, initial, inputs)

    logits = initial[0][inputs] @ initial[1] + initial[2]  # (2, 6, VOCAB)
    expected = reference_loss(LABELS, logits, 0.1)
    np.testing.assert_allclose(single_logs["loss"], expected, rtol=1e-5)
    # A mean of per-replica means (Keras' default) would be far off here.
    per_row = [
        reference_loss(LABELS[i : i + 1], logits[i : i + 1], 0.1) for i in (0, 1)
    ]
    assert abs(np.mean(per_row) - expected) > 1e-2
    for key in ("loss", "masked_accuracy", "perplexity"):
        np.testing.assert_allclose(mirrored_logs[key], single_logs[key], atol=1e-5)
    for got, want in zip(mirrored_weights, single_weights, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert not np.allclose(single_weights[1], initial[1])
