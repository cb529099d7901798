"""RandomKernelStem (MiniRocket's features per window) and the preset that uses it."""

import importlib.util
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_transformer.layers import RandomKernelSeriesStem
from keras_transformer.layers.random_kernel_stem import (
    TAPS,
    RandomKernelStem,
    base_kernels,
    bias_quantiles,
    kernel_dilations,
)
from keras_transformer.models import ClassifierEnsemble, TransformerClassifier
from tests.conftest import REPO_ROOT
from training.config import load_config
from training.data.common import TaskData
from training.recipe.series import series_stem_recipe, stem_ensemble_size
from training.tasks import get_task


def _series(n=12, t=64, f=1, seed=0):
    rng = np.random.default_rng(seed)
    steps = np.linspace(0, 6, t)[None, :, None]
    return (np.sin(steps * rng.uniform(1, 3, (n, 1, f))) + 0.3 * rng.normal(size=(n, t, f))
            ).astype(np.float32)


def test_kernels_dilations_and_quantiles_follow_minirocket():
    kernels = base_kernels()
    assert kernels.shape == (9, 84) and len(set(TAPS)) == 84
    np.testing.assert_array_equal(kernels.sum(axis=0), 0.0)  # a level adds nothing
    assert sorted(set(kernels.ravel())) == [-1.0, 2.0]
    # Exponential from 1 to (T - 1) / 8: T = 1460 reaches 182.
    assert kernel_dilations(1460, 32)[0] == 1 and kernel_dilations(1460, 32)[-1] == 182
    assert kernel_dilations(24, 32) == [1, 2]
    q = bias_quantiles(50)
    assert ((q > 0) & (q < 1)).all() and len(set(np.round(q, 6))) == 50


def test_shapes_ppv_range_and_standardised_output():
    x = _series(f=3)
    stem = RandomKernelStem(64, num_windows=4, num_kernel_features=500, seed=1)
    stem.adapt(x)
    ppv = keras.ops.convert_to_numpy(stem.window_ppv(x))
    assert ppv.shape == (12, 4, stem.num_outputs)
    assert stem.num_outputs == 84 * len(stem.dilations) * stem.biases_per_kernel
    assert ppv.min() >= 0.0 and ppv.max() <= 1.0
    assert 0.0 < ppv.mean() < 1.0  # quantile biases: neither all 0 nor all 1
    out = keras.ops.convert_to_numpy(stem(x))
    assert out.shape == (12, 4, stem.num_outputs)
    np.testing.assert_allclose(out.reshape(-1, stem.num_outputs).mean(axis=0), 0.0, atol=1e-4)
    # Series of another length: windows of ceil(T / W) steps, the last shorter.
    assert stem(_series(n=2, t=50, f=3)).shape == (2, 4, stem.num_outputs)


def test_mean_of_equal_windows_is_the_global_ppv():
    x = _series(t=64)
    windows = RandomKernelStem(64, num_windows=8, num_kernel_features=300, seed=3)
    whole = RandomKernelStem(64, num_windows=1, num_kernel_features=300, seed=3)
    windows.adapt(x)
    whole.adapt(x)  # the same seed: the same kernels and biases
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(windows.biases),
                                  keras.ops.convert_to_numpy(whole.biases))
    per_window = keras.ops.convert_to_numpy(windows.window_ppv(x))
    global_ppv = keras.ops.convert_to_numpy(whole.window_ppv(x))[:, 0]
    np.testing.assert_allclose(per_window.mean(axis=1), global_ppv, atol=1e-6)


def test_max_positions_compares_every_sth_output():
    x = _series(n=4, t=64)
    every = RandomKernelStem(64, num_windows=2, num_kernel_features=200, seed=4)
    strided = RandomKernelStem(64, num_windows=2, num_kernel_features=200, seed=4,
                               max_positions=16)
    assert (every.position_stride, strided.position_stride) == (1, 4)
    every.adapt(x)
    strided.adapt(x)
    # The same biases; the PPV of every 4th output of x is that of all outputs
    # of x with the other steps' outputs dropped: count them by hand.
    biases = keras.ops.convert_to_numpy(every.biases)
    np.testing.assert_array_equal(biases, keras.ops.convert_to_numpy(strided.biases))
    h = keras.ops.convert_to_numpy(every._convolutions(x)[0])[:, ::4]  # (4, 16, 84)
    expected = (h[..., None] > biases[0]).reshape(4, 2, 8, -1).mean(axis=2)
    got = keras.ops.convert_to_numpy(strided.window_ppv(x))[..., : expected.shape[-1]]
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert strided(x).shape == every(x).shape


def test_each_kernels_biases_give_consecutive_outputs_counted_by_hand():
    """Output k * nb + j of a dilation is kernel k's PPV at its bias j: the
    stem compares one bias of every kernel at a time and stacks them."""
    x = _series(n=3, t=32)
    stem = RandomKernelStem(32, num_windows=2, num_kernel_features=504, max_dilations=2,
                            seed=5)
    stem.adapt(x)
    assert stem.biases_per_kernel == 3 and len(stem.dilations) == 2
    biases = keras.ops.convert_to_numpy(stem.biases)  # (D, 84, nb)
    got = keras.ops.convert_to_numpy(stem.window_ppv(x))  # (3, 2, D * 84 * nb)
    width = 84 * stem.biases_per_kernel
    for d, h in enumerate(stem._convolutions(x)):
        h = keras.ops.convert_to_numpy(h)  # (3, 32, 84): two windows of 16 steps
        expected = (h[..., None] > biases[d]).reshape(3, 2, 16, -1).mean(axis=2)
        np.testing.assert_allclose(got[..., d * width:(d + 1) * width], expected, atol=1e-7)


def test_biases_from_data_are_deterministic_for_a_seed():
    x = _series()

    def biases(seed, series=x):
        stem = RandomKernelStem(64, num_windows=2, num_kernel_features=200, seed=seed)
        stem.adapt(series)
        return keras.ops.convert_to_numpy(stem.biases)

    np.testing.assert_array_equal(biases(0), biases(0))
    assert not np.array_equal(biases(0), biases(1))
    assert not np.array_equal(biases(0), biases(0, 2 * x))  # they come from the data
    assert np.abs(biases(0)).max() > 0


def test_serialisation_round_trip_keeps_the_adapted_weights(tmp_path):
    x = _series(f=2)
    stem = RandomKernelSeriesStem(2, 16, standardize_series=True, series_length=64,
                                  num_windows=4, num_kernel_features=200, seed=5)
    model = TransformerClassifier(stem, num_classes=3, num_layers=1, num_heads=2,
                                  intermediate_dim=32)
    model.stem.adapt_kernels(x)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config()["stem"]["config"]["num_windows"] == 4
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded.stem.kernel_stem.biases),
                                  keras.ops.convert_to_numpy(model.stem.kernel_stem.biases))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(x)),
                               keras.ops.convert_to_numpy(model(x)), atol=1e-5)
    config = RandomKernelStem(64, num_windows=3, seed=2).get_config()
    assert RandomKernelStem.from_config(config).get_config() == config


def test_bad_arguments_raise_naming_them():
    with pytest.raises(ValueError, match="num_windows=0"):
        RandomKernelStem(64, num_windows=0)
    with pytest.raises(ValueError, match="seed='1'"):
        RandomKernelStem(64, seed="1")
    with pytest.raises(ValueError, match=r"RandomKernelSeriesStem: \{'patch_length': 4\}"):
        RandomKernelSeriesStem(1, 16, series_length=64, patch_length=4)
    with pytest.raises(ValueError, match="patch_length=8"):
        load_config("timeseries", ['train_files=["x.txt"]', "patch_length=8"])
    with pytest.raises(ValueError, match="series_stem='kernels'"):
        load_config("timeseries", ['train_files=["x.txt"]', "series_stem=kernels"])


def _data(n=36, t=64, k=3):
    x = _series(n=n, t=t)
    y = np.arange(n) % k
    return TaskData((x, y), (x, y), (x[:6], y[:6]), label_names=[str(i) for i in range(k)])


def test_the_preset_uses_the_stem_and_trains_one_tiny_step():
    task = get_task("timeseries")
    config = load_config("timeseries",
                         ['train_files=["x.txt"]', "ensemble_size=2", "stem_windows=4",
                          "stem_kernel_features=200"])
    data = _data()
    config = task.resolve_config(config, data)
    assert (config.patch_length, config.patch_stride) == (1, None)
    recipe = series_stem_recipe(36, 64, 3)
    assert (recipe["epochs"], recipe["steps_per_epoch"], recipe["ensemble_size"]) == (1, 200, 5)
    # Members share 3.2 M series-steps of stem work (U x B x min(T, 512)):
    # ArrowHead's 300 x 8 x 251 five times; one model for OSULeaf-sized files
    # and for a few long series, which a rule by file size would give five.
    assert [series_stem_recipe(n, t, 3)["ensemble_size"]
            for n, t in ((36, 251), (270, 29), (200, 427), (100, 1460), (36, 1500))] == [5, 5, 1, 1, 2]
    assert stem_ensemble_size(300, 8, 512) == 2 and stem_ensemble_size(300, 8, 5000) == 2
    assert stem_ensemble_size(300, 32, 1500) == 1
    with pytest.raises(ValueError, match="received series_length=0"):
        stem_ensemble_size(300, 8, 0)
    assert series_stem_recipe(1000, 64, 3)["steps_per_epoch"] == 30 * 32  # 30 passes
    # The members of an ensemble share 16,000 samples (updates x batch):
    # JapaneseVowels' five train 100 updates of 32, ItalyPowerDemand's 200 of
    # 16; a member trains at most 200 updates, so ArrowHead's five train 200
    # of 8 where one model would train 300, and one model is not cut.  A
    # member still makes 10 passes: 1,000 series of 24 steps, four members
    # of ceil(10 x 1000 / 32) = 313 updates, not 16,000 / (4 x 32) = 125.
    assert [(r["ensemble_size"], r["batch_size"], r["steps_per_epoch"])
            for r in (series_stem_recipe(n, t, 3) for n, t in ((270, 29), (67, 24), (36, 251),
                                                                (200, 427), (1000, 64),
                                                                (1000, 24)))] == [
        (5, 32, 100), (5, 16, 200), (5, 8, 200), (1, 32, 300), (1, 32, 960), (4, 32, 313)]
    model = task.build_model(config, data)
    assert isinstance(model, ClassifierEnsemble)
    first, second = (m.stem.kernel_stem for m in model.members)
    assert first.seed != second.seed  # each member its own kernels and biases
    assert np.abs(keras.ops.convert_to_numpy(first.biases)).max() > 0
    loss, metrics = task.loss_and_metrics(config)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss, metrics=metrics)
    batch = next(iter(task.make_dataset(config, data.train, training=True)))
    before = [keras.ops.convert_to_numpy(w) for w in first.weights]
    logs = model.train_on_batch(*batch, return_dict=True)
    assert np.isfinite(logs["loss"])
    for old, new in zip(before, first.weights, strict=True):  # the stem is fixed
        np.testing.assert_array_equal(old, keras.ops.convert_to_numpy(new))


def test_the_task_computes_each_members_fixed_features_once_and_the_model_reads_them_alike():
    """The training series' tokens come from stems adapted once (`FixedStems`);
    the model's stems take their weights, so each cached token equals what the
    model's own stem makes of the raw series, and the model answers alike from
    either; mixup (which mixes raw series) and the patch stem cache nothing."""
    task = get_task("timeseries")
    config = load_config("timeseries",
                         ['train_files=["x.txt"]', "ensemble_size=2", "stem_windows=4",
                          "stem_kernel_features=200", "series_level_features=true"])
    data = _data()
    config = task.resolve_config(config, data)
    task.prepare(config, data, None, write=False)
    model = task.build_model(config, data)
    x, _ = next(iter(task.make_dataset(config, data.train, training=True)))
    assert task.fixed_stems.features_of(data.train[0]) is task.fixed_stems.features_of(data.valid[0])
    for member, fixed in zip(model.members, x["stem_features"], strict=True):
        own = member.stem.fixed_features(x["features"])
        for key in ("tokens", "mask", "statistics"):
            np.testing.assert_allclose(keras.ops.convert_to_numpy(own[key]),
                                       keras.ops.convert_to_numpy(fixed[key]), atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)),
                               keras.ops.convert_to_numpy(model(x["features"])), atol=1e-5)
    for options in (["mixup_alpha=0.2"], ["series_stem=patches", "patch_length=8"]):
        other = load_config("timeseries", ['train_files=["x.txt"]', *options])
        task.prepare(task.resolve_config(other, data), data, None, write=False)
        assert task.fixed_stems is None


def test_the_stem_runs_on_the_jax_backend():
    if importlib.util.find_spec("jax") is None:
        pytest.skip("JAX is not installed; `pip install -e '.[dev]'` installs it")
    code = (
        "import numpy as np, keras\n"
        "from keras_transformer.layers.random_kernel_stem import RandomKernelStem\n"
        "x = np.random.default_rng(0).normal(size=(4, 40, 2)).astype('float32')\n"
        "s = RandomKernelStem(40, num_windows=4, num_kernel_features=200, seed=0)\n"
        "s.adapt(x)\n"
        "p = keras.ops.convert_to_numpy(s.window_ppv(x))\n"
        "assert keras.backend.backend() == 'jax'\n"
        "print(p.shape, float(p.min()), float(p.max()), float(np.abs(s.biases).sum()))\n"
    )
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO_ROOT))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=300, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    shape, low, high, biases = result.stdout.strip().splitlines()[-1].rsplit(" ", 3)
    assert shape.startswith("(4, 4,") and 0 <= float(low) <= float(high) <= 1
    assert float(biases) > 0


def test_the_preset_with_level_features_adapts_them_to_the_training_series():
    """`series_level_features=true`: each member's level features standardise
    the training series' own statistics (mean 0, scale their std), and the
    option needs the standardisation whose statistics they give back."""
    task = get_task("timeseries")
    config = load_config("timeseries",
                         ['train_files=["x.txt"]', "ensemble_size=2", "stem_windows=4",
                          "stem_kernel_features=200", "series_level_features=true"])
    data = _data()
    x = data.train[0] * np.linspace(0.5, 3.0, len(data.train[0]))[:, None, None] + 1.0
    data = TaskData((x, data.train[1]), data.valid, data.test, label_names=data.label_names)
    model = task.build_model(task.resolve_config(config, data), data)
    mean = np.concatenate([x.mean(axis=1), 0.5 * np.log(x.var(axis=1) + 1e-5)], axis=-1)
    for member in model.members:
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(member.stem.level_features.statistic_mean),
            mean.mean(axis=0), rtol=1e-4, atol=1e-5)
        assert member.get_config()["stem"]["config"]["series_level_features"] is True
    with pytest.raises(ValueError, match="series_level_features=true, standardize_series=false"):
        load_config("timeseries", ['train_files=["x.txt"]',
                                              "series_level_features=true",
                                              "standardize_series=false"])
