"""Tests for training.runs.checkpoint_average (paper Section 6.1)."""

import keras
import numpy as np
import pytest

from training.runs.checkpoint_average import (
    average_checkpoints,
    average_weights_files,
    find_checkpoints,
    main,
)


def tiny_model(width=4):
    return keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(width), keras.layers.Dense(2)]
    )


class _RecordWeights(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.weights = []

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append(self.model.get_weights())


@pytest.fixture
def run(tmp_path, rng):
    """Three ModelCheckpoint files (with Adam state) and the weights in each."""
    model = tiny_model()
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
    record = _RecordWeights()
    # The run directory layout of training/runs/run_dir.py.
    checkpoint = keras.callbacks.ModelCheckpoint(
        str(tmp_path / "checkpoints" / "epoch-{epoch:03d}.weights.h5"),
        save_weights_only=True,
    )
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    model.fit(x, y, epochs=3, batch_size=2, verbose=0, callbacks=[checkpoint, record])
    model.save(tmp_path / "model.keras")
    paths = [str(tmp_path / f"checkpoints/epoch-00{e}.weights.h5") for e in (1, 2, 3)]
    return paths, record.weights


def numpy_mean(weight_lists):
    return [np.mean(np.stack(ws), axis=0) for ws in zip(*weight_lists, strict=True)]


def assert_weights_close(got, want, **kwargs):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, **kwargs)


def test_average_of_three_equals_numpy_mean(run):
    paths, weights = run
    model = average_checkpoints(paths, tiny_model())
    assert_weights_close(model.get_weights(), numpy_mean(weights), rtol=1e-6)
    # The checkpoints really differ, so the mean is not any one of them.
    assert not np.allclose(weights[0][0], weights[2][0])


def test_average_of_one_is_itself(run):
    paths, weights = run
    model = average_checkpoints(paths[1:2], tiny_model())
    assert_weights_close(model.get_weights(), weights[1], rtol=0, atol=0)


def test_keras_archives_average_like_weights_files(tmp_path, rng):
    weight_lists, paths = [], []
    for i in range(2):
        model = tiny_model()
        model.set_weights([rng.standard_normal(w.shape) for w in model.get_weights()])
        weight_lists.append(model.get_weights())
        paths.append(str(tmp_path / f"m{i}.keras"))
        model.save(paths[-1])
    averaged = average_checkpoints(paths, tiny_model())
    assert_weights_close(averaged.get_weights(), numpy_mean(weight_lists), rtol=1e-6)


def test_mismatched_checkpoint_names_the_file(run, tmp_path):
    paths, _ = run
    wide = str(tmp_path / "wide.weights.h5")
    tiny_model(width=5).save_weights(wide)
    with pytest.raises(ValueError, match=r"wide\.weights\.h5.*shape \(3, 5\)"):
        average_weights_files([paths[0], wide], tmp_path / "out.weights.h5")


def test_checkpoint_of_another_architecture_is_rejected(run):
    paths, _ = run
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
    with pytest.raises(
        ValueError, match="epoch-001.weights.h5 holds 4 model variables"
    ):
        average_checkpoints(paths, other)


def test_empty_paths_rejected():
    with pytest.raises(ValueError, match="empty"):
        average_checkpoints([], tiny_model())


def test_find_checkpoints_sorts_naturally(tmp_path):
    for name in ("ckpt-10.weights.h5", "ckpt-9.weights.h5", "ckpt-2.weights.h5"):
        (tmp_path / name).touch()
    found = find_checkpoints([str(tmp_path / "*.weights.h5")], last=2)
    assert [p.rsplit("/", 1)[1] for p in found] == [
        "ckpt-9.weights.h5",
        "ckpt-10.weights.h5",
    ]
    with pytest.raises(FileNotFoundError, match="No checkpoint"):
        find_checkpoints([str(tmp_path / "*.keras")])


@pytest.mark.parametrize("output_name", ["averaged.weights.h5", "averaged.keras"])
def test_main_averages_last_k_of_a_run(run, tmp_path, output_name, capsys):
    _, weights = run
    output = tmp_path / output_name
    # The architecture comes from RUN/model.keras, as no --model is given.
    argv = ["--run-dir", str(tmp_path), "--last", "2", "--output", str(output)]
    assert main(argv) == 0
    assert "Averaged 2 checkpoints" in capsys.readouterr().out
    if output_name.endswith(".keras"):
        restored = keras.saving.load_model(output)
    else:
        restored = tiny_model()
        restored.load_weights(output)
    assert_weights_close(restored.get_weights(), numpy_mean(weights[1:]), rtol=1e-6)


def test_main_takes_explicit_globs_and_requires_a_model(run, tmp_path):
    paths, weights = run
    output = tmp_path / "out" / "avg.weights.h5"
    output.parent.mkdir()
    with pytest.raises(SystemExit):
        main([paths[0], "--output", str(output)])  # no --model nor --run-dir
    main(
        ["--model", str(tmp_path / "model.keras"), "--output", str(output)] + paths[:2]
    )
    restored = tiny_model()
    restored.load_weights(output)
    assert_weights_close(restored.get_weights(), numpy_mean(weights[:2]), rtol=1e-6)
