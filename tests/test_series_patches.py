"""`SeriesPatches` and the patched numeric `TransformerClassifier` (PatchTST tokens)."""

import re

import numpy as np
import pytest
import tensorflow as tf
from harness import assert_trees_equal, check_saved_model_round_trip, run_layer_test
from keras import ops

from keras_transformer.layers import SeriesPatches
from keras_transformer.models import TransformerClassifier
from training.config import TrainingConfig

CLASSIFIER = dict(
    num_classes=2,
    num_layers=1,
    hidden_dim=8,
    num_heads=2,
    intermediate_dim=16,
    dropout=0.0,
)


def _series(batch, length, features, seed=0):
    return (
        np.random.default_rng(seed)
        .normal(size=(batch, length, features))
        .astype("float32")
    )


def _reference(x, p):
    """Zero-pad the time axis to a multiple of p, then lay each patch's steps side by side."""
    batch, length, features = x.shape
    padded = np.pad(x, ((0, 0), (0, -length % p), (0, 0)))  # (B, ceil(T/p)*p, F)
    return padded.reshape(batch, -1, p * features)  # (B, ceil(T/p), p*F)


@pytest.mark.parametrize(
    "length, p",
    [(8, 4), (8, 1), (8, 8), (5, 2), (7, 3), (5, 8)],
    ids=["divisible", "p1", "one_patch", "pad1", "pad2", "p_longer_than_T"],
)
def test_layer_equals_numpy_reference(length, p):
    x = _series(2, length, 3)
    got = ops.convert_to_numpy(SeriesPatches(p)(x))
    np.testing.assert_array_equal(got, _reference(x, p))


def test_layer_passes_the_harness(tmp_path):
    """Round trips, symbolic call, `.keras` file, mixed precision, a fit step."""
    run_layer_test(
        SeriesPatches,
        {"patch_length": 3},
        _series(2, 7, 2),
        tmp_path,
        expected_output_shape=(2, 3, 6),
    )


@pytest.mark.parametrize(
    "input_shape, expected",
    [
        ((None, None, 2), (None, None, 6)),
        ((2, 7, None), (2, 3, None)),
        ((2, 6, 2), (2, 2, 6)),
    ],
)
def test_compute_output_shape_keeps_unknown_dims(input_shape, expected):
    assert SeriesPatches(3).compute_output_shape(input_shape) == expected


def test_layer_traced_with_unknown_length_pads_each_call():
    """One graph for every length: the padding is computed from the runtime T."""
    layer = SeriesPatches(3)
    patches = tf.function(
        layer, input_signature=[tf.TensorSpec((None, None, 2), tf.float32)]
    )
    for length in (5, 6, 8):
        x = _series(2, length, 2)
        np.testing.assert_array_equal(patches(x).numpy(), _reference(x, 3))


def test_patched_classifier_round_trips_through_config_and_keras_file(tmp_path):
    model = TransformerClassifier(num_features=2, patch_length=4, **CLASSIFIER)
    x = _series(2, 7, 2)
    assert model.input_shape == (None, None, 2)  # the time axis stays variable
    config = model.get_config()
    assert config["patch_length"] == 4
    clone = TransformerClassifier.from_config(config)
    assert clone.get_config() == config
    clone.set_weights(model.get_weights())
    assert_trees_equal(model(x), clone(x), err_msg="from_config clone")
    reloaded = check_saved_model_round_trip(model, x, tmp_path)
    assert reloaded.get_config() == config
    assert isinstance(reloaded.get_layer("series_patches"), SeriesPatches)


def test_every_value_of_a_patch_reaches_the_logits():
    """Permuting the steps inside one patch, or changing the padded last patch,
    changes the logits: the projection sees all p*F values of a token."""
    model = TransformerClassifier(num_features=1, patch_length=4, **CLASSIFIER)
    x = _series(2, 7, 1)  # patches: steps 0-3 and 4-6 plus one padded zero
    logits = ops.convert_to_numpy(model(x))
    permuted = x.copy()
    permuted[:, :4] = x[:, [3, 1, 0, 2]]  # same values, same patch, new order
    changed = x.copy()
    changed[:, 6] += 1.0  # the last real step, next to the zero padding
    for other, what in ((permuted, "permuted patch"), (changed, "ragged tail")):
        diff = np.abs(ops.convert_to_numpy(model(other)) - logits).max(axis=-1)
        assert np.all(diff > 1e-6), f"{what}: logits unchanged ({diff})"


@pytest.mark.parametrize("value", [0, -2, 2.5, True, "8"])
def test_bad_patch_length_raises_naming_it(value):
    match = re.escape(f"patch_length={value!r}")
    with pytest.raises(ValueError, match=match):
        SeriesPatches(value)
    with pytest.raises(ValueError, match=match):
        TransformerClassifier(num_features=1, patch_length=value, **CLASSIFIER)


def test_patch_length_with_token_input_raises_naming_it():
    with pytest.raises(ValueError, match=r"patch_length=4 with vocabulary_size=20"):
        TransformerClassifier(vocabulary_size=20, patch_length=4, **CLASSIFIER)


def test_training_config_checks_patch_length():
    with pytest.raises(ValueError, match=r"patch_length=0"):
        TrainingConfig(task="timeseries", dataset="ucr", patch_length=0).validate()
    with pytest.raises(ValueError, match=r"patch_length=8 with task='classification'"):
        TrainingConfig(task="classification", dataset="sst2", patch_length=8).validate()
    TrainingConfig(task="timeseries", dataset="ucr", patch_length=8).validate()


def test_default_classifier_has_no_patch_layer():
    """patch_length=1 keeps the per-step model (and its saved layout) unchanged."""
    model = TransformerClassifier(num_features=1, **CLASSIFIER)
    assert model.patch_length == 1
    assert not any(isinstance(layer, SeriesPatches) for layer in model.layers)
