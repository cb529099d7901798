"""Model selection by validation: scores, early stopping, pruning, averaging."""

import os

import keras
import numpy as np
import pytest

from training.runs import selection
from training.train import _segments


def test_best_epochs_and_plateau():
    scores = {1: 10.0, 2: 14.0, 3: 14.0, 4: 12.0, 5: 11.0}
    assert selection.best_epochs(scores, 2) == [3, 2]  # ties: the later epoch first
    assert not selection.plateaued(scores, 3)  # best (3) is 2 epochs old
    assert selection.plateaued(scores, 2)
    assert not selection.plateaued(scores, 0)  # 0 never stops


class _Fit(keras.callbacks.Callback):
    """Sets the model's single weight before each epoch ends (fake training)."""

    def __init__(self, values):
        super().__init__()
        self.values = values

    def on_epoch_end(self, epoch, logs=None):
        self.model.layers[-1].kernel.assign([[self.values[epoch]]])
        logs["val_score"] = -abs(self.values[epoch] - 3.0)  # best at 3


def _model():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def _run(tmp_path, values, keep=2, patience=0):
    os.makedirs(tmp_path / "checkpoints", exist_ok=True)
    model = _model()
    scores = selection.EpochScores(tmp_path, "val_score", "max", keep, patience)
    x = np.zeros((4, 1), "float32")
    model.fit(x, x, epochs=len(values), verbose=0, callbacks=[_Fit(values), scores])
    return model


def _kept(tmp_path):
    return sorted(int(f[6:9]) for f in os.listdir(tmp_path / "checkpoints") if f.startswith("epoch-"))


def test_scores_are_recorded_and_last_k_plus_best_k_are_kept(tmp_path):
    _run(tmp_path, [1.0, 3.0, 2.9, 5.0, 6.0, 7.0])
    assert selection.read_scores(tmp_path) == pytest.approx(
        {1: -2.0, 2: 0.0, 3: -0.1, 4: -2.0, 5: -3.0, 6: -4.0})
    assert _kept(tmp_path) == [2, 3, 5, 6]  # best 2 (epochs 2, 3) + last 2


def test_early_stopping_after_patience_epochs(tmp_path):
    model = _run(tmp_path, [1.0, 3.0, 6.0, 7.0, 8.0, 9.0], patience=2)
    assert sorted(selection.read_scores(tmp_path)) == [1, 2, 3, 4]
    assert float(model.layers[-1].kernel[0, 0]) == 7.0


def test_select_compares_last_average_last_and_average_best(tmp_path):
    model = _run(tmp_path, [1.0, 3.0, 2.9, 5.0, 6.0, 7.0])

    def score(m):
        return -abs(float(m.layers[-1].kernel[0, 0]) - 3.0)

    chosen = selection.select(model, tmp_path, 2, score)
    assert chosen["epochs"] == {"average_last": [5, 6], "average_best": [2, 3]}
    assert chosen["validation"] == pytest.approx(
        {"last": -4.0, "average_last": -3.5, "average_best": -0.05})
    assert chosen["selected"] == "average_best"
    assert float(model.layers[-1].kernel[0, 0]) == pytest.approx(2.95)
    forced = selection.select(model, tmp_path, 2, score, selection="average_last")
    assert forced["selected"] == "average_last"
    assert float(model.layers[-1].kernel[0, 0]) == pytest.approx(6.5)


def test_select_keeps_the_last_weights_when_they_validate_best(tmp_path):
    model = _run(tmp_path, [5.0, 4.0, 3.0])

    def score(m):
        return -abs(float(m.layers[-1].kernel[0, 0]) - 3.0)

    assert selection.select(model, tmp_path, 2, score)["selected"] == "last"
    assert float(model.layers[-1].kernel[0, 0]) == 3.0


@pytest.mark.parametrize(
    "step, total, spe, expected",
    [(0, 30, 10, [(0, 3, 10)]),
     (4, 30, 10, [(0, 1, 6), (1, 3, 10)]),
     (0, 25, 10, [(0, 2, 10), (2, 3, 5)]),
     (12, 25, 10, [(1, 2, 8), (2, 3, 5)]),
     (25, 25, 10, [])],
)
def test_segments_cover_exactly_the_remaining_updates(step, total, spe, expected):
    segments = _segments(step, total, spe)
    assert segments == expected
    assert step + sum((e - i) * s for i, e, s in segments) == total
