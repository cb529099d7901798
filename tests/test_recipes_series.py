"""The time-series recipe: rules of (N, T, K, F), and how the task applies them."""

import math
import re

import numpy as np
import pytest

from keras_transformer.layers import SeriesPatches
from keras_transformer.models import ClassifierEnsemble, TransformerClassifier
from training.config import TrainingConfig, load_config
from training.data.common import TaskData
from training.recipe.series import (
    series_batch_size,
    series_ensemble_size,
    series_recipe,
)
from training.tasks import get_task

# (N, T, K) of the three UCR files the rules were worked out on, and others.
SHAPES = [(36, 251, 3), (200, 427, 6), (100, 1460, 10), (5, 24, 2), (8926, 96, 2),
          (1000, 10, 5), (30, 20000, 4)]


@pytest.mark.parametrize("num_train, expected", [
    (4, 4), (8, 8), (36, 8), (64, 16), (100, 16), (128, 32), (200, 32), (10**6, 32),
])
def test_batch_is_a_quarter_of_the_series_as_a_power_of_two_in_8_32(num_train, expected):
    assert series_batch_size(num_train) == expected


@pytest.mark.parametrize("num_train, length, classes", SHAPES)
def test_updates_are_at_least_4000_and_100_passes_in_20_validations(num_train, length, classes):
    recipe = series_recipe(num_train, length, classes)
    updates = recipe["epochs"] * recipe["steps_per_epoch"]
    pass_ = math.ceil(num_train / recipe["batch_size"])
    assert recipe["epochs"] == 20
    assert updates >= max(4000, 100 * pass_)
    assert updates - 20 < max(4000, 100 * pass_)  # no more than the rounding of 20 epochs


@pytest.mark.parametrize("num_train, length, classes", SHAPES)
def test_patches_give_32_to_64_tokens_and_nothing_is_truncated(num_train, length, classes):
    recipe = series_recipe(num_train, length, classes)
    assert recipe["max_sequence_length"] == length
    p, s = recipe["patch_length"], recipe["patch_stride"]
    assert p == max(2, math.ceil(length / 32)) and s == math.ceil(p / 2)
    tokens = SeriesPatches(p, stride=s).compute_output_shape((1, length, 1))[1]
    assert 32 <= tokens <= 66 or tokens == length - 1, (length, p, s, tokens)


def test_the_three_ucr_files_get_the_rules_by_hand():
    """ArrowHead, OSULeaf, ACSF1: (B, p, s, updates per epoch) from the rules."""
    got = [
        tuple(series_recipe(n, t, k)[key] for key in
              ("batch_size", "patch_length", "patch_stride", "steps_per_epoch"))
        for n, t, k in SHAPES[:3]
    ]
    # 36/8 -> 5 updates a pass; 200/32 -> 7; 100/16 -> 7: all 4000 updates, 200 an epoch.
    assert got == [(8, 8, 4, 200), (32, 14, 7, 200), (16, 46, 23, 200)]


@pytest.mark.parametrize("kwargs, name", [
    (dict(num_train=0), "num_train"), (dict(series_length=2.5), "series_length"),
    (dict(num_classes=1), "num_classes"), (dict(num_features=True), "num_features"),
])
def test_bad_sizes_raise_naming_them(kwargs, name):
    arguments = dict(num_train=36, series_length=251, num_classes=3, num_features=1)
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=re.escape(f"{name}={kwargs[name]!r}")):
        series_recipe(**arguments)


def _data(n=36, t=251, k=3):
    x = np.zeros((n, t, 1), np.float32)
    y = np.arange(n) % k
    return TaskData((x, y), (x, y), (x, y), label_names=[str(i) for i in range(k)])


# The patch stem with the recipe it was measured with (the `timeseries` preset before 2026-11-29).
PATCH_STEM = ["series_stem=patches", "series_level_features=false", "mixup_alpha=0.4"]


def test_the_patch_stem_takes_its_sizes_from_the_data_and_given_fields_win():
    task = get_task("timeseries")
    config = load_config("timeseries", PATCH_STEM)
    assert config.batch_size is None and config.patch_length is None
    resolved = task.resolve_config(config, _data())
    assert (resolved.batch_size, resolved.epochs, resolved.steps_per_epoch) == (8, 20, 200)
    assert (resolved.max_sequence_length, resolved.patch_length, resolved.patch_stride) == (
        251, 8, 4)
    given = task.resolve_config(
        config.replace(batch_size=4, epochs=3, patch_length=6, max_sequence_length=100), _data()
    )
    # Given epochs are passes: steps_per_epoch stays null; a given p gets half of itself.
    assert (given.batch_size, given.epochs, given.steps_per_epoch) == (4, 3, None)
    assert (given.patch_length, given.patch_stride, given.max_sequence_length) == (6, 3, 100)


def test_files_of_at_most_64_series_train_an_ensemble_of_five():
    assert [series_ensemble_size(n) for n in (1, 36, 64, 65, 200, 10**6)] == [5, 5, 5, 1, 1, 1]
    task = get_task("timeseries")
    resolved = task.resolve_config(load_config("timeseries", PATCH_STEM), _data())  # 36 series
    assert resolved.ensemble_size == 5
    model = task.build_model(resolved, _data())
    assert isinstance(model, ClassifierEnsemble) and model.size == 5
    # The recipe's mixup (0.4) mixes series in the data pipeline, so the
    # models do not mix their pooled features as well (the text task's way).
    assert resolved.mixup_alpha == 0.4
    assert [m.mixup_alpha for m in model.members] == [0.0] * 5
    one = task.resolve_config(load_config("timeseries", [*PATCH_STEM, "ensemble_size=1"]), _data())
    assert isinstance(task.build_model(one, _data()), TransformerClassifier)
    with pytest.raises(ValueError, match="received ensemble_size=0"):
        load_config("timeseries", ["ensemble_size=0"])
    with pytest.raises(ValueError, match="`ensemble_size` does not apply"):
        TrainingConfig(ensemble_size=3).validate()  # translation


def test_null_sizes_are_refused_where_the_task_does_not_fill_them():
    with pytest.raises(ValueError, match="batch_size=None .task='translation' does not derive"):
        TrainingConfig(batch_size=None).validate()
    with pytest.raises(ValueError, match="patch_stride=5, patch_length=4"):
        TrainingConfig(task="timeseries", dataset="ucr", patch_length=4, patch_stride=5).validate()
    for alpha in (-0.1, float("inf"), float("nan")):  # no Beta(alpha, alpha) for these
        with pytest.raises(ValueError, match=f"mixup_alpha={alpha!r}"):
            TrainingConfig(task="timeseries", dataset="ucr", mixup_alpha=alpha).validate()
    with pytest.raises(ValueError, match="`mixup_alpha` does not apply"):
        TrainingConfig(mixup_alpha=0.4).validate()  # translation
    with pytest.raises(ValueError, match="received num_classes=1"):
        TrainingConfig(task="timeseries", dataset="ucr", num_classes=1).validate()


def test_training_batches_are_one_hot_and_mixed_evaluation_batches_one_hot():
    task = get_task("timeseries")
    data = _data(n=16, t=12, k=2)
    task.prepare(load_config("timeseries", PATCH_STEM), data, None, write=False)
    config = task.resolve_config(load_config("timeseries", PATCH_STEM), data)
    x, y = next(iter(task.make_dataset(config, data.train, shuffle=True, training=True)))
    assert x.shape == (8, 12, 1) and y.shape == (8, 2)
    np.testing.assert_allclose(np.sum(y, -1), 1.0, rtol=1e-6)
    assert np.any((y > 0) & (y < 1))  # mixup alpha 0.4: soft labels
    _, y = next(iter(task.make_dataset(config, data.valid)))
    # Scored in batches of at least 256: the 16 series in one.
    np.testing.assert_array_equal(y, np.eye(2)[np.arange(16) % 2])
