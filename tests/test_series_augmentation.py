"""`training.pipeline.series_augmentation`: mixup, jitter and crops of series batches."""

import re

import numpy as np
import pytest
import tensorflow as tf

from training.pipeline.series_augmentation import (
    augment_series,
    jitter,
    mixup,
    random_resized_crop,
)

SEED = tf.constant([3, 4])


def _batch(batch=6, length=16, features=2, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, length, features)).astype("float32")
    labels = np.arange(batch) % classes
    return x, np.eye(classes, dtype="float32")[labels], labels


def test_mixup_is_the_same_convex_pair_of_series_and_labels():
    """lam read back from the labels rebuilds the features exactly:
    lam·x_i + (1-lam)·x_{B-1-i}, lam in [0.5, 1]."""
    x, y, labels = _batch(batch=6, classes=6)  # every partner of another class
    mixed, soft = (t.numpy() for t in mixup(x, y, 0.4, SEED))
    np.testing.assert_allclose(soft.sum(-1), 1.0, rtol=1e-6)
    lam = soft[np.arange(len(x)), labels]
    np.testing.assert_allclose(soft[np.arange(len(x)), labels[::-1]], 1 - lam, atol=1e-6)
    assert np.all((lam >= 0.5 - 1e-6) & (lam <= 1 + 1e-6)), lam
    want = lam[:, None, None] * x + (1 - lam[:, None, None]) * x[::-1]
    np.testing.assert_allclose(mixed, want, atol=1e-5)
    assert np.any(lam < 0.999), "alpha 0.4 mixed nothing"


def test_mixup_is_reproducible_from_its_seed():
    x, y, _ = _batch()
    first = mixup(x, y, 0.2, SEED)[0].numpy()
    np.testing.assert_array_equal(first, mixup(x, y, 0.2, SEED)[0].numpy())
    assert not np.array_equal(first, mixup(x, y, 0.2, tf.constant([3, 5]))[0].numpy())


def test_jitter_adds_noise_of_the_asked_scale():
    x = np.zeros((64, 128, 1), "float32")
    noise = jitter(x, 0.1, SEED).numpy()
    assert abs(noise.std() - 0.1) < 0.005 and abs(noise.mean()) < 0.005
    np.testing.assert_array_equal(jitter(x + 1, 0.0, SEED).numpy(), x + 1)


def test_crop_of_zero_is_the_identity_and_a_crop_is_a_resampled_window():
    """A ramp 0..T-1 cropped to [a, b] and resampled is again a straight ramp
    from a·(T-1) to b·(T-1), inside the original range, still increasing."""
    length = 50
    ramp = np.tile(np.arange(length, dtype="float32")[None, :, None], (8, 1, 1))
    np.testing.assert_allclose(random_resized_crop(ramp, 0.0, SEED).numpy(), ramp, atol=1e-4)
    crops = random_resized_crop(ramp, 0.3, SEED).numpy()[:, :, 0]
    steps = np.diff(crops, axis=1)
    assert np.all(steps > 0) and np.allclose(steps, steps[:, :1], atol=1e-3)
    span = crops[:, -1] - crops[:, 0]  # (1 - u·0.3)(T-1): between 0.7 and 1
    assert np.all(span >= 0.7 * (length - 1) - 1e-3) and np.all(span <= length - 1 + 1e-3)
    assert crops.min() >= 0 and crops.max() <= length - 1
    assert np.any(span < 0.99 * (length - 1)), "nothing was cropped"


def test_augment_series_one_hot_labels_seeded_per_batch():
    x, _, labels = _batch(batch=8)
    dataset = tf.data.Dataset.from_tensor_slices(({"features": x}, labels)).batch(4)
    plain = list(augment_series(dataset, 3))
    for (inputs, y), start in zip(plain, (0, 4), strict=True):
        np.testing.assert_array_equal(inputs["features"].numpy(), x[start : start + 4])
        np.testing.assert_array_equal(y.numpy(), np.eye(3)[labels[start : start + 4]])
    kwargs = dict(mixup_alpha=0.3, jitter_stddev=0.1, max_crop=0.2, seed=7)
    first = [b[0]["features"].numpy() for b in augment_series(dataset, 3, **kwargs)]
    again = [b[0]["features"].numpy() for b in augment_series(dataset, 3, **kwargs)]
    np.testing.assert_array_equal(first[0], again[0])  # same seed, same batches
    assert not np.allclose(first[0], x[:4])
    other = augment_series(dataset, 3, **{**kwargs, "seed": 8})
    assert not np.array_equal(next(iter(other))[0]["features"].numpy(), first[0])


@pytest.mark.parametrize(
    "kwargs, name, value",
    [
        (dict(mixup_alpha=-0.1), "mixup_alpha", -0.1),
        (dict(jitter_stddev="0.1"), "jitter_stddev", "0.1"),
        (dict(max_crop=1.0), "max_crop", 1.0),
        (dict(max_crop=True), "max_crop", True),
    ],
)
def test_bad_strengths_raise_naming_them(kwargs, name, value):
    dataset = tf.data.Dataset.from_tensor_slices(({"features": np.zeros((2, 4, 1))}, [0, 1]))
    with pytest.raises(ValueError, match=re.escape(f"{name}={value!r}")):
        augment_series(dataset.batch(2), 2, **kwargs)
