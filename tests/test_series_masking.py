"""Series of unequal lengths and with missing values: the NaN input contract.

A series padded at its end with all-NaN steps must give the output it
gives alone, whatever else shares its batch; a missing value (NaN inside)
takes its feature's mean; standardization reads the known values only.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from harness import run_layer_test
from keras import ops

from export.saved_model import export_model
from export.tflite import export_model_tflite
from export.tflite_verify import verify_tflite
from export.verify import compare_outputs, reference_outputs, verify_saved_model
from keras_transformer.layers import (
    PatchStem,
    RandomKernelSeriesStem,
    SeriesLevelFeatures,
    SeriesPatches,
    SeriesStandardization,
    fill_missing,
    series_lengths,
    step_mask,
)
from keras_transformer.models import ClassifierEnsemble, TransformerClassifier
from training.pipeline.series_augmentation import mixup
from training.tasks import get_task

NAN = np.nan


def _series(length, features, seed):
    return np.random.default_rng(seed).normal(size=(length, features)).astype("float32")


def _pad(rows, length=None):
    """Series of their own lengths -> (N, T, F) float32 padded at the end with NaN."""
    length = length or max(len(r) for r in rows)
    out = np.full((len(rows), length, rows[0].shape[1]), NAN, np.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def test_series_lengths_count_to_the_last_step_with_a_known_value():
    x = _pad([_series(5, 2, 0), _series(2, 2, 1), _series(7, 2, 2)], length=8)
    x[0, 4, 0] = NAN  # one feature of the last step: the step is still in the series
    x[2, 1] = NAN  # a whole step missing inside: not padding
    x[2, 6] = NAN  # the last step missing: the series is 6 steps long
    empty = np.full((1, 8, 2), NAN, np.float32)
    lengths = ops.convert_to_numpy(series_lengths(np.concatenate([x, empty])))
    np.testing.assert_array_equal(lengths, [5, 2, 6, 0])
    mask = ops.convert_to_numpy(step_mask(lengths, np.zeros((4, 8))))
    np.testing.assert_array_equal(mask.sum(axis=1), [5, 2, 6, 0])
    assert mask[0, :5].all() and not mask[0, 5:].any()


def test_fill_missing_takes_the_feature_mean_and_zeroes_the_padding():
    x = np.array([[[1.0, 10.0], [NAN, 20.0], [3.0, NAN], [NAN, NAN]]], np.float32)
    filled = ops.convert_to_numpy(fill_missing(x))
    np.testing.assert_allclose(
        filled[0], [[1.0, 10.0], [2.0, 20.0], [3.0, 15.0], [0.0, 0.0]], rtol=1e-6
    )


def test_standardization_reads_the_known_values_only():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(2, 9, 3)) * [1.0, 5.0, 0.1] + [0.0, 3.0, -2.0]).astype("float32")
    x[0, 6:] = NAN  # padding
    x[1, 2, 1] = NAN  # a missing value
    got = ops.convert_to_numpy(SeriesStandardization()(x))
    assert np.isfinite(got).all()
    for i, f in np.ndindex(2, 3):
        column = x[i, :, f]
        known = ~np.isnan(column)
        want = (column[known] - column[known].mean()) / np.sqrt(column[known].var() + 1e-5)
        np.testing.assert_allclose(got[i, known, f], want, atol=1e-5)
        np.testing.assert_array_equal(got[i, ~known, f], 0.0)


def test_standardization_equals_group_normalization_on_complete_series():
    """Models trained with GroupNormalization before keep their outputs."""
    x = np.random.default_rng(1).normal(2.0, 3.0, size=(3, 11, 2)).astype("float32")
    reference = keras.layers.GroupNormalization(
        groups=-1, center=False, scale=False, epsilon=1e-5
    )(x)
    np.testing.assert_allclose(
        ops.convert_to_numpy(SeriesStandardization()(x)),
        ops.convert_to_numpy(reference), atol=1e-5,
    )


def test_standardization_layer_passes_the_harness(tmp_path):
    run_layer_test(
        SeriesStandardization, {"epsilon": 1e-5}, _series(7, 2, 0)[None], tmp_path,
        expected_output_shape=(1, 7, 2),
    )


def test_series_statistics_read_the_known_values_only():
    """The level and log scale `standardize` returns: each feature's mean and
    log standard deviation over its known values; padding and NaN change
    nothing, and a series gives the statistics it gives alone."""
    rng = np.random.default_rng(2)
    rows = [(rng.normal(size=(n, 3)) * [1.0, 5.0, 0.1] + [0.0, 3.0, -2.0]).astype("float32")
            for n in (9, 4, 7)]
    rows[0][2, 1] = NAN  # a missing value
    rows[2][3] = NAN  # a missing step
    layer = SeriesStandardization()
    standardized, statistics = layer.standardize(_pad(rows, length=12))
    np.testing.assert_array_equal(ops.convert_to_numpy(standardized),
                                  ops.convert_to_numpy(layer(_pad(rows, length=12))))
    statistics = ops.convert_to_numpy(statistics)
    assert statistics.shape == (3, 1, 6)
    for i, row in enumerate(rows):
        mean = np.nanmean(row, axis=0)
        log_std = 0.5 * np.log(np.nanvar(row, axis=0) + 1e-5)
        np.testing.assert_allclose(statistics[i, 0], np.concatenate([mean, log_std]),
                                   rtol=1e-5, atol=1e-5, err_msg=f"series {i}")
        alone = ops.convert_to_numpy(layer.standardize(row[None])[1])
        np.testing.assert_allclose(statistics[i], alone[0], atol=1e-6)


def test_level_features_standardize_what_they_adapt_to_and_pass_the_harness(tmp_path):
    statistics = np.random.default_rng(3).normal(4.0, 3.0, size=(20, 1, 6)).astype("float32")
    layer = SeriesLevelFeatures(8)
    layer.adapt(statistics)
    np.testing.assert_allclose(ops.convert_to_numpy(layer.statistic_mean),
                               statistics.mean(axis=(0, 1)), rtol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(layer.statistic_scale),
                               statistics.std(axis=(0, 1)), rtol=1e-5)
    kernel, bias = (ops.convert_to_numpy(w) for w in layer.projection.weights)
    standardized = (statistics - statistics.mean(axis=(0, 1))) / statistics.std(axis=(0, 1))
    np.testing.assert_allclose(ops.convert_to_numpy(layer(statistics)),
                               standardized @ kernel + bias, atol=1e-4)
    with pytest.raises(ValueError, match="finite statistics"):
        layer.adapt(np.full((2, 6), NAN, np.float32))
    run_layer_test(SeriesLevelFeatures, {"hidden_dim": 8}, statistics[:2], tmp_path,
                   expected_output_shape=(2, 1, 8),
                   frozen_ok=("statistic_mean", "statistic_scale"))


def test_level_features_give_back_the_level_and_scale_standardization_removes():
    """Standardized alone, a series and the same series shifted and scaled give
    one output; with `series_level_features`, two outputs; the option stays
    in the config, and it needs `standardize_series`."""
    options = dict(patch_length=4, standardize_series=True)
    row = _series(12, 3, 0)[None]
    moved = row * 3.0 + 2.0
    plain = _classifier(_stem(**options))
    np.testing.assert_allclose(ops.convert_to_numpy(plain(row, training=False)),
                               ops.convert_to_numpy(plain(moved, training=False)), atol=1e-4)
    model = _classifier(_stem(**options, series_level_features=True))
    model.stem.adapt_level_features(np.concatenate([row, moved, _series(12, 3, 1)[None]]))
    got = ops.convert_to_numpy(model(np.concatenate([row, moved]), training=False))
    assert np.abs(got[0] - got[1]).max() > 1e-3
    config = model.get_config()
    assert config["stem"]["config"]["series_level_features"] is True
    rebuilt = TransformerClassifier.from_config(config)
    assert rebuilt.stem.level_features is not None and plain.stem.level_features is None
    with pytest.raises(ValueError, match="series_level_features=True, standardize_series=False"):
        _stem(patch_length=4, series_level_features=True)
    with pytest.raises(ValueError, match="adapt_level_features"):
        plain.stem.adapt_level_features(row)


@pytest.mark.parametrize("p, s", [(4, None), (4, 2), (3, 1), (5, 5)])
def test_token_mask_keeps_the_patches_of_the_series_alone(p, s):
    layer = SeriesPatches(p, stride=s)
    lengths = np.arange(0, 14, dtype="int32")
    padded = np.zeros((len(lengths), 13, 1), np.float32)
    mask = ops.convert_to_numpy(layer.token_mask(lengths, layer(padded)))
    for length, row in zip(lengths, mask, strict=True):
        alone = layer(np.zeros((1, length, 1), np.float32)).shape[1] if length else 0
        assert row.sum() == alone and row[:alone].all(), (length, row)


def _adapt_batch(lengths, length):
    """NaN-padded series of `lengths` to adapt a kernel stem on, other than
    the series compared. A bias is a quantile of one training series'
    outputs, so a series that set it (one of a single step sets all its
    kernel's biases to its one output) ties with it, and a tie falls on the
    convolution's last bit, which on some CPUs differs between a batch
    padded to 24 steps and the series alone."""
    return _pad([_series(n, 3, 100 + seed) for seed, n in enumerate(lengths)], length=length)


CLASSIFIER = dict(num_classes=3, num_layers=2, num_heads=2, intermediate_dim=32, dropout=0.0)


def _stem(num_features=3, hidden_dim=16, max_sequence_length=64, random_kernel_stem=None,
          **options):
    """A `RandomKernelSeriesStem` of `random_kernel_stem`'s options, else a `PatchStem`."""
    if random_kernel_stem is not None:
        return RandomKernelSeriesStem(num_features, hidden_dim, max_sequence_length,
                                      **options, **random_kernel_stem)
    return PatchStem(num_features, hidden_dim, max_sequence_length, **options)


def _classifier(stem=None, **options):
    """The classifier of `CLASSIFIER` with `options` on `stem` (`_stem()`: steps)."""
    return TransformerClassifier(stem or _stem(), **{**CLASSIFIER, **options})


@pytest.mark.parametrize(
    "options, model_options",
    [
        (dict(patch_length=4, patch_stride=2, standardize_series=True), {}),
        (dict(patch_length=4, standardize_series=True), dict(pooling="max")),
        (dict(patch_length=1, positions="learned"), {}),
        (dict(patch_length=3, patch_stride=2), dict(normalize_first=True, ngram_widths=(3,))),
        (dict(standardize_series=True, random_kernel_stem=dict(
            series_length=24, num_windows=4, num_kernel_features=336, max_dilations=2)), {}),
        (dict(random_kernel_stem=dict(series_length=24, num_windows=3, num_kernel_features=168,
                                      max_dilations=1, max_positions=8)), {}),
        (dict(standardize_series=True, series_level_features=True, random_kernel_stem=dict(
            series_length=24, num_windows=4, num_kernel_features=336, max_dilations=2)), {}),
    ],
    ids=["overlap_standardized", "patches_max", "steps_learned", "prenorm_ngrams",
         "kernel_stem", "kernel_stem_strided", "kernel_stem_level_features"],
)
def test_a_padded_series_gives_its_own_output(options, model_options):
    """Each series alone at its own length == the same series NaN-padded in a
    batch of longer and shorter ones, with a missing value inside."""
    model = _classifier(_stem(**options), **model_options)
    rows = [_series(n, 3, seed) for seed, n in enumerate((9, 21, 14, 1, 17))]
    rows[0][3, 1] = NAN  # a missing value
    rows[2][5] = NAN  # a missing step
    batch = _pad(rows, length=24)
    if "random_kernel_stem" in options:  # biases from other padded series' own steps
        model.stem.adapt_kernels(_adapt_batch((9, 21, 14, 1, 17), length=24))
        assert np.any(ops.convert_to_numpy(model.stem.kernel_stem.biases) != 0)
    if options.get("series_level_features"):  # their standardization, from the same series
        model.stem.adapt_level_features(batch * 2.0 + 1.0)
        assert np.all(ops.convert_to_numpy(model.stem.level_features.statistic_mean) != 0)
    padded = ops.convert_to_numpy(model(batch, training=False))
    assert np.isfinite(padded).all()
    for i, row in enumerate(rows):
        alone = ops.convert_to_numpy(model(row[None], training=False))
        np.testing.assert_allclose(padded[i], alone[0], atol=2e-5, err_msg=f"series {i}")


def test_padding_changes_nothing_and_other_values_do():
    """The mask is no constant: a known value past the shorter series' end
    (not padding then) changes its output."""
    model = _classifier(_stem(patch_length=4, standardize_series=True))
    row = _series(10, 3, 0)
    alone = ops.convert_to_numpy(model(row[None], training=False))
    longer = _pad([row], length=16)
    longer[0, 12, 0] = 5.0
    changed = ops.convert_to_numpy(model(longer, training=False))
    assert np.abs(changed - alone).max() > 1e-4


def test_a_missing_value_is_filled_by_its_feature_mean():
    """Without standardization, NaN reads as the series' mean of that feature."""
    model = _classifier(_stem(patch_length=2))
    row = _series(8, 3, 0)
    missing = row.copy()
    missing[3, 2] = NAN
    filled = row.copy()
    filled[3, 2] = np.delete(row[:, 2], 3).mean()
    np.testing.assert_allclose(
        ops.convert_to_numpy(model(missing[None], training=False)),
        ops.convert_to_numpy(model(filled[None], training=False)), atol=1e-5,
    )


def test_padded_batches_train_to_finite_weights():
    """NaN input gives no NaN gradient (the fill happens before any weight)."""
    model = _classifier(_stem(patch_length=4, standardize_series=True))
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(
        from_logits=True))
    rows = [_series(n, 3, seed) for seed, n in enumerate((9, 21, 14, 5))]
    rows[1][4, 0] = NAN
    history = model.fit(_pad(rows), np.array([0, 1, 2, 1]), epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert all(np.isfinite(ops.convert_to_numpy(w)).all() for w in model.weights)


def test_mixup_keeps_the_main_series_length_and_missing_values():

    rows = [_series(n, 2, seed) for seed, n in enumerate((6, 3, 5, 6))]
    rows[3][1, 0] = NAN
    x = _pad(rows)
    y = np.eye(4, dtype="float32")
    mixed, soft = (t.numpy() for t in mixup(x, y, 0.4, np.array([3, 4], "int32")))
    np.testing.assert_array_equal(np.isnan(mixed), np.isnan(x))  # the main series' NaN only
    lam = soft[np.arange(4), np.arange(4)]
    partner = np.where(np.isnan(x[::-1]), x, x[::-1])
    want = lam[:, None, None] * x + (1 - lam[:, None, None]) * partner
    np.testing.assert_allclose(mixed, want, atol=1e-5)


#: The two series stems: patches, and MiniRocket's kernels (the preset's), that
#: one with each series' level and scale added to its tokens too, and as the
#: preset trains a small file: members voting, each with its own stem seed.
_KERNEL_STEM = dict(series_length=16, num_windows=4, num_kernel_features=336, max_dilations=2)
_LEVEL_FEATURES = dict(series_level_features=True, random_kernel_stem=_KERNEL_STEM)
STEMS = {
    "patches": dict(patch_length=4, patch_stride=2),
    "kernel_stem": dict(random_kernel_stem=_KERNEL_STEM),
    "kernel_stem_level_features": _LEVEL_FEATURES,
    "kernel_stem_level_features_ensemble": _LEVEL_FEATURES,
}
#: The STEMS entries built as two voting members.
ENSEMBLES = {"kernel_stem_level_features_ensemble": 2}


def _exported_classifier(stem="patches"):
    """A 3-channel classifier, its task, and series of unequal lengths with
    missing values (`rows`, each its own length)."""

    members = []
    rows = [_series(n, 3, seed) * (seed + 1) for seed, n in enumerate((16, 9, 12, 3))]
    rows[1][4, 2] = NAN  # a missing value
    rows[2][6] = NAN  # a missing step
    for index in range(ENSEMBLES.get(stem, 1)):
        options = dict(STEMS[stem])
        if "random_kernel_stem" in options:  # each member draws its own kernels
            options["random_kernel_stem"] = {**options["random_kernel_stem"],
                                             "seed": 1000 * index}
        member = TransformerClassifier(
            _stem(3, hidden_dim=8, max_sequence_length=16, standardize_series=True, **options),
            num_classes=3, num_layers=1, num_heads=2, intermediate_dim=16, dropout=0.0,
        )
        if "random_kernel_stem" in STEMS[stem]:
            # No series under 7 steps to adapt on: a kernel's six -1 taps can
            # cover all of one, whose output is then its standardised sum, 0
            # up to rounding, a bias that ties with the 3-step series compared.
            member.stem.adapt_kernels(_adapt_batch((16, 9, 12, 7), length=16))
        if STEMS[stem].get("series_level_features"):
            member.stem.adapt_level_features(_pad(rows))
        members.append(member)
    model = members[0] if len(members) == 1 else ClassifierEnsemble(members)
    return model, get_task("timeseries", label_names=["a", "b", "c"]), rows


def _alone(model, rows):
    return np.concatenate([
        ops.convert_to_numpy(model.probabilities(model(row[None], training=False)))
        for row in rows
    ])


@pytest.mark.parametrize("stem", sorted(STEMS))
def test_saved_model_and_tflite_answer_padded_multivariate_series_as_keras(stem, tmp_path):


    model, task, rows = _exported_classifier(stem)
    alone = _alone(model, rows)
    expected = reference_outputs(model, rows, label_names=task.label_names)  # NaN-padded to the longest
    np.testing.assert_allclose(expected["probabilities"], alone, atol=1e-5)

    target = export_model(model, tmp_path / "saved", label_names=task.label_names)
    signature = tf.saved_model.load(str(target)).signatures["serving_default"]
    got = signature(**{k: tf.constant(v) for k, v in task.serving().serving_inputs(rows).items()})
    got = {k: v.numpy() for k, v in got.items()}
    assert np.isnan(task.serving().serving_inputs(rows)["features"]).any()
    assert compare_outputs(got, expected) == []

    tflite = export_model_tflite(model, tmp_path / "series.tflite")
    report = verify_tflite(tflite, model, rows)  # NaN-padded to the file's 16 steps
    assert report["ok"] and report["num_examples"] == 4, report
    assert report["max_abs_diff"] <= 1e-5 and report["label_agreement"] == 1.0


def test_probe_inputs_hold_padding_and_missing_values():
    model, task, _ = _exported_classifier()
    probes = task.serving().probe_inputs(model)
    assert probes.shape == (6, 16, 3)
    assert np.isnan(probes[1, 8:]).all() and not np.isnan(probes[1, :8]).any()  # padded
    assert np.isnan(probes[2]).sum() == 1 and np.isnan(probes[3, 8]).all()  # missing


@pytest.mark.slow
def test_export_verification_covers_padded_multivariate_probes(tmp_path):
    """`verify_saved_model` (a fresh process and saved_model_cli) and
    `verify_tflite` on the task's probes, padded and with missing values."""

    model, task, _ = _exported_classifier()
    probes = task.serving().probe_inputs(model)
    target = export_model(model, tmp_path / "saved", label_names=task.label_names)
    report = verify_saved_model(target, model, label_names=task.label_names)
    assert report["ok"] and report["num_examples"] == 6, report
    assert report["fresh_process"] == [] and report["saved_model_cli"] == []
    tflite = export_model_tflite(model, tmp_path / "series.tflite")
    assert verify_tflite(tflite, model, probes)["ok"]
