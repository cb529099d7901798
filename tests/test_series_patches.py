"""`SeriesPatches` and the patched numeric `TransformerClassifier` (PatchTST tokens)."""

import re

import numpy as np
import pytest
import tensorflow as tf
from harness import assert_trees_equal, check_saved_model_round_trip, run_layer_test
from keras import ops

from keras_transformer.layers import PatchStem, SeriesPatches, TokenStem
from keras_transformer.models import TransformerClassifier
from training.config import TrainingConfig

CLASSIFIER = dict(
    num_classes=2,
    num_layers=1,
    num_heads=2,
    intermediate_dim=16,
    dropout=0.0,
)


def _patched(num_features, **stem):
    """A `TransformerClassifier` (d_model 8) on a `PatchStem` of `stem`'s options."""
    return TransformerClassifier(PatchStem(num_features, hidden_dim=8, **stem), **CLASSIFIER)


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
    model = _patched(2, patch_length=4)
    x = _series(2, 7, 2)
    assert model.input_shape == (None, None, 2)  # the time axis stays variable
    config = model.get_config()
    assert config["stem"]["config"]["patch_length"] == 4
    clone = TransformerClassifier.from_config(config)
    assert clone.get_config() == config
    clone.set_weights(model.get_weights())
    assert_trees_equal(model(x), clone(x), err_msg="from_config clone")
    reloaded = check_saved_model_round_trip(model, x, tmp_path)
    assert reloaded.get_config() == config
    assert isinstance(reloaded.get_layer("stem").patches, SeriesPatches)


def test_every_value_of_a_patch_reaches_the_logits():
    """Permuting the steps inside one patch, or changing the padded last patch,
    changes the logits: the projection sees all p*F values of a token."""
    model = _patched(1, patch_length=4)
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
        _patched(1, patch_length=value)


def test_patch_length_with_token_input_raises_naming_it():
    """Series options belong to the series stems: a token stem refuses them."""
    with pytest.raises(ValueError, match=r"TokenStem: \{'patch_length': 4\}"):
        TokenStem(vocabulary_size=20, hidden_dim=8, patch_length=4)


def test_training_config_checks_patch_length():
    with pytest.raises(ValueError, match=r"patch_length=0"):
        TrainingConfig(task="timeseries", dataset="ucr", patch_length=0).validate()
    with pytest.raises(ValueError, match=r"patch_length=8 with task='classification'"):
        TrainingConfig(task="classification", dataset="sst2", patch_length=8).validate()
    TrainingConfig(task="timeseries", dataset="ucr", patch_length=8).validate()


def test_default_classifier_has_no_patch_layer():
    """patch_length=1 keeps the per-step model (and its saved layout) unchanged."""
    model = _patched(1)
    assert model.stem.patch_length == 1
    assert model.stem.patches is None
    assert not any(isinstance(layer, SeriesPatches) for layer in model.layers)


# --- Overlapping patches (stride) -------------------------------------------


def _reference_strided(x, p, s):
    """Patch j holds steps js .. js+p-1, zero-padded to cover every step."""
    batch, length, features = x.shape
    count = -(-max(length - p, 0) // s) + 1
    padded = np.pad(x, ((0, 0), (0, (count - 1) * s + p - length), (0, 0)))
    patches = [padded[:, j * s : j * s + p].reshape(batch, p * features) for j in range(count)]
    return np.stack(patches, axis=1)  # (B, n, p*F)


@pytest.mark.parametrize(
    "length, p, s",
    [(11, 4, 2), (12, 4, 2), (8, 4, 1), (7, 3, 2), (3, 5, 2), (10, 5, 3)],
    ids=["pad", "exact", "s1", "odd", "p_longer_than_T", "s3"],
)
def test_strided_layer_equals_numpy_reference(length, p, s):
    x = _series(2, length, 3)
    layer = SeriesPatches(p, stride=s)
    got = ops.convert_to_numpy(layer(x))
    np.testing.assert_array_equal(got, _reference_strided(x, p, s))
    assert layer.compute_output_shape(x.shape) == got.shape


@pytest.mark.parametrize("length", [5, 8, 9])
def test_stride_equal_to_patch_length_is_the_plain_layer(length):
    """Two paths (gather, reshape) for the same patches when s = p."""
    x = _series(2, length, 2)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(SeriesPatches(4, stride=4)(x)),
        ops.convert_to_numpy(SeriesPatches(4)(x)),
    )


def test_strided_layer_passes_the_harness(tmp_path):
    run_layer_test(
        SeriesPatches,
        {"patch_length": 4, "stride": 2},
        _series(2, 9, 2),
        tmp_path,
        expected_output_shape=(2, 4, 8),
    )


def test_strided_layer_traced_with_unknown_length():
    layer = SeriesPatches(4, stride=3)
    patches = tf.function(
        layer, input_signature=[tf.TensorSpec((None, None, 1), tf.float32)]
    )
    for length in (2, 7, 10):
        x = _series(2, length, 1)
        np.testing.assert_array_equal(patches(x).numpy(), _reference_strided(x, 4, 3))


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_bad_stride_raises_naming_it(value):
    with pytest.raises(ValueError, match=re.escape(f"stride={value!r}")):
        SeriesPatches(4, stride=value)
    with pytest.raises(ValueError, match=re.escape(f"patch_stride={value!r}")):
        _patched(1, patch_length=4, patch_stride=value)


def test_stride_longer_than_patch_raises_naming_both():
    with pytest.raises(ValueError, match=r"stride=5, patch_length=4"):
        SeriesPatches(4, stride=5)
    with pytest.raises(ValueError, match=r"patch_stride=2, patch_length=1"):
        _patched(1, patch_stride=2)


# --- Per-series standardization ----------------------------------------------


def test_standardized_classifier_ignores_each_series_level_and_scale():
    """Logits unchanged when every series is shifted and scaled (by its own
    a > 0, b), and changed without the option: the test can fail."""
    x = _series(3, 20, 2)
    a = np.array([0.5, 3.0, 20.0], "float32")[:, None, None]
    b = np.array([-4.0, 0.5, 100.0], "float32")[:, None, None]
    for standardize in (True, False):
        model = _patched(2, patch_length=4, patch_stride=2, standardize_series=standardize)
        diff = np.abs(ops.convert_to_numpy(model(a * x + b) - model(x))).max()
        if standardize:
            assert diff < 1e-4, diff
        else:
            assert diff > 1e-3, diff


def test_standardization_is_per_feature():
    """Each feature is standardized on its own: scaling one feature of one
    series changes nothing (one shared statistic would)."""
    model = _patched(2, standardize_series=True)
    x = _series(2, 12, 2)
    scaled = x.copy()
    scaled[:, :, 1] *= 100.0
    np.testing.assert_allclose(
        ops.convert_to_numpy(model(scaled)), ops.convert_to_numpy(model(x)), atol=1e-4
    )


def test_new_options_round_trip_and_old_configs_still_load(tmp_path):
    model = _patched(1, patch_length=4, patch_stride=2, standardize_series=True)
    x = _series(2, 9, 1)
    config = model.get_config()
    stem = config["stem"]["config"]
    assert (stem["patch_stride"], stem["standardize_series"]) == (2, True)
    reloaded = check_saved_model_round_trip(model, x, tmp_path)
    assert reloaded.get_config() == config
    # A stem config saved before these options existed builds the old stem.
    old = {k: v for k, v in stem.items() if k not in ("patch_stride", "standardize_series")}
    clone = PatchStem.from_config(old)
    assert (clone.patch_stride, clone.standardize_series) == (None, False)
    assert clone.patches.step == 4


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(patch_stride=2), r"TokenStem: \{'patch_stride': 2\}"),
        (dict(standardize_series=True), r"TokenStem: \{'standardize_series': True\}"),
    ],
)
def test_series_options_with_token_input_raise_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TokenStem(vocabulary_size=20, hidden_dim=8, **kwargs)


@pytest.mark.parametrize("value", [1, "yes", None])
def test_standardize_series_must_be_a_bool(value):
    with pytest.raises(ValueError, match=re.escape(f"standardize_series={value!r}")):
        _patched(1, standardize_series=value)
