"""Model selection by validation: scores, early stopping, pruning, averaging."""

import json
import os
import warnings
import zipfile

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


def test_keep_zero_scores_every_epoch_and_saves_no_weights(tmp_path):
    """A run that keeps its last weights (`selection="last"`) reads no epoch's
    checkpoint: it still scores each epoch (early stopping), but writes none."""
    _run(tmp_path, [1.0, 3.0, 2.9], keep=0)
    assert sorted(selection.read_scores(tmp_path)) == [1, 2, 3]
    assert _kept(tmp_path) == []


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


def _trained_ensemble():
    from keras_transformer.models import ClassifierEnsemble, TextCNNClassifier

    keras.utils.set_random_seed(0)
    model = ClassifierEnsemble([TextCNNClassifier(
        num_classes=3, vocabulary_size=2000, hidden_dim=32, ngram_widths=(2,), dropout=0.1,
        mixup_alpha=0.4, char_ngram_buckets=2000, char_ngrams_per_word=3, name=f"member_{i}")
        for i in range(2)])
    model.compile(optimizer=keras.optimizers.AdamW(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.default_rng(0).integers(0, 20, size=(8, 5, 4)).astype("int32")
    model.fit(x, np.arange(8) % 3, epochs=2, batch_size=4, verbose=0)
    return model, x  # the tables dominate the files, as on the text presets


def test_epoch_checkpoints_hold_the_weights_and_not_the_optimizer_state(tmp_path):
    """Selection and averaging read only the weights: an epoch checkpoint is
    a third of one with AdamW's moments, it loads back the same weights,
    and loading it leaves the optimizer's state as it was (no warning)."""
    import h5py

    from training.runs.checkpoint_average import average_checkpoints

    model, _ = _trained_ensemble()
    os.makedirs(tmp_path / "checkpoints")
    scores = selection.EpochScores(tmp_path, "val_accuracy", "max", keep=2, patience=0)
    scores.set_model(model)
    scores.on_epoch_end(0, {"val_accuracy": 0.5})
    path = selection.epoch_checkpoint(tmp_path, 1)
    with h5py.File(path, "r") as weights_file:
        assert "optimizer" not in weights_file
    model.save_weights(tmp_path / "with_optimizer.weights.h5")
    assert os.path.getsize(path) < 0.5 * os.path.getsize(tmp_path / "with_optimizer.weights.h5")
    weights = [np.asarray(w) for w in model.weights]
    moments = [np.asarray(v) for v in model.optimizer.variables]
    for w in model.weights:
        w.assign(np.zeros(w.shape, w.dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        average_checkpoints([path], model)
    for before, after in zip(weights, model.weights, strict=True):
        np.testing.assert_array_equal(before, np.asarray(after))
    for before, after in zip(moments, model.optimizer.variables, strict=True):
        np.testing.assert_array_equal(before, np.asarray(after))


def test_the_final_model_file_has_no_optimizer_and_answers_as_the_model(tmp_path):
    model, x = _trained_ensemble()
    path = tmp_path / "model.keras"
    selection.save_final_model(model, path)
    model.save(tmp_path / "compiled.keras")
    assert os.path.getsize(path) < 0.5 * os.path.getsize(tmp_path / "compiled.keras")
    with zipfile.ZipFile(path) as archive:
        assert not json.loads(archive.read("config.json")).get("compile_config")  # no optimizer
    restored = keras.saving.load_model(path)
    assert getattr(restored, "optimizer", None) is None and model.optimizer is not None  # the caller's stays compiled
    np.testing.assert_allclose(np.asarray(restored(x)), np.asarray(model(x)), atol=1e-6)
    assert [m.name for m in restored.members] == ["member_0", "member_1"]
