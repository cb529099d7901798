"""`training.estimator.SeriesClassifier`: the `timeseries` recipe in scikit-learn's form.

Fits on 24 series of 24 steps whose two classes are easy to tell apart (a
sine wave or noise), a few passes, one member, a small encoder: a few
seconds a fit.  One fitted estimator is shared by the module; the bad
inputs are refused before anything trains.  Also `write_ts`, the file the
estimator trains from.
"""

import gc
import json
import os

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV

from training.data.series_files import read_ts, write_ts
from training.estimator import SeriesClassifier
from training.runs.predict import SavedModelPredictor
from training.runs.run_dir import finish_run, load_run
from training.task_models import TimeSeriesClassifier
from training.tasks import get_task

SMALL = {"hidden_dim": 16, "num_heads": 2, "intermediate_dim": 32, "num_layers": 1}
PARAMS = dict(epochs=3, ensemble_size=1, model_overrides=SMALL)


def easy_series(n, seed, channels=1, length=24):
    """(X (n, channels, length), y): "wave" series hold a sine of 3 periods, "flat" ones noise."""
    rng = np.random.default_rng(seed)
    y = np.array(["flat", "wave"] * (n // 2))
    x = 0.3 * rng.standard_normal((n, channels, length))
    x[y == "wave"] += np.sin(2 * np.pi * 3 * np.linspace(0, 1, length))
    return x, y


@pytest.fixture(scope="module")
def fitted():
    x, y = easy_series(24, seed=0)
    return SeriesClassifier(**PARAMS).fit(x, y)


def test_write_ts_reads_back_exactly(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7, 2)).astype(np.float32)
    x[0, 0, 0] = np.float32(0.1)  # no short decimal is this float32
    x[1, 5:] = np.nan  # a shorter series, padded
    x[2, 3, 1] = np.nan  # a missing value
    write_ts(tmp_path / "a.ts", x, [0, 1, 2, 1, 0], ["walk", "run", "10"])
    series, ids, names, _ = read_ts(tmp_path / "a.ts")
    np.testing.assert_array_equal(series, x)  # NaN where NaN, every float32 bit-equal
    assert ids.tolist() == [0, 1, 2, 1, 0] and names.tolist() == ["walk", "run", "10"]
    with pytest.raises(ValueError, match=r"label_names=\['a b', 'c'\]"):
        write_ts(tmp_path / "b.ts", x, [0, 1, 0, 1, 0], ["a b", "c"])


def test_fit_predict_proba_and_score_with_string_labels(fitted):
    x, y = easy_series(40, seed=1)  # unseen series of the same two kinds
    assert fitted.classes_.tolist() == ["flat", "wave"] and fitted.n_channels_ == 1
    probabilities = fitted.predict_proba(x)
    assert probabilities.shape == (40, 2)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    predicted = fitted.predict(x)
    assert predicted.tolist() == fitted.classes_[probabilities.argmax(axis=1)].tolist()
    assert set(predicted) <= set(fitted.classes_)
    assert fitted.score(x, y) >= 0.9  # chance is 0.5
    # The run scored only its training series: reported as that, not as held out.
    assert "train_accuracy" in fitted.metrics_ and "train_loss" in fitted.metrics_
    assert not [k for k in fitted.metrics_ if k.startswith(("valid_", "test_"))]


def test_int_labels_two_dimensional_input_and_the_temporary_run():
    x, y = easy_series(24, seed=0)
    labels = np.where(y == "wave", 7, 3)
    clf = SeriesClassifier(**PARAMS).fit(x[:, 0, :], labels)  # (n_series, length): one channel
    assert clf.classes_.dtype.kind == "i" and clf.classes_.tolist() == [3, 7]
    tx, ty = easy_series(40, seed=1)
    predicted = clf.predict(tx[:, 0, :])
    assert set(predicted.tolist()) <= {3, 7}
    assert clf.score(tx, np.where(ty == "wave", 7, 3)) >= 0.9
    first = os.path.dirname(clf.run_dir_)  # the temporary folder the estimator owns
    clf.fit(x, labels)  # a new fit removes the folder of the last
    assert not os.path.exists(first)
    folder = os.path.dirname(clf.run_dir_)
    assert os.path.isdir(folder)
    del clf
    gc.collect()
    assert not os.path.exists(folder)


def test_a_list_of_unequal_lengths_and_labels_with_spaces(fitted):
    x, y = easy_series(24, seed=2)
    series = [x[i, :, : 16 + i % 9] for i in range(24)]  # 16 to 24 steps
    series[3] = series[3][0]  # a 1-D array is one channel
    series[5] = series[5].copy()
    series[5][0, 4] = np.nan  # a missing value
    labels = np.where(y == "wave", "right hand", "left hand")
    clf = SeriesClassifier(**PARAMS).fit(series, labels)
    assert clf.classes_.tolist() == ["left hand", "right hand"]
    assert load_run(clf.run_dir_).label_names == ["left hand", "right hand"]
    assert set(clf.predict(series)) <= {"left hand", "right hand"}
    # A series answers the same alone as NaN-padded in a 3-D array.
    shorter = [x[i, :, :16] for i in range(4)]
    padded = np.full((4, 1, 24), np.nan)
    padded[:, :, :16] = x[:4, :, :16]
    np.testing.assert_allclose(fitted.predict_proba(shorter), fitted.predict_proba(padded),
                               atol=1e-6)


def test_clone_is_unfitted_with_equal_params(fitted):
    copy = clone(fitted)
    assert copy.get_params() == fitted.get_params()
    assert copy.set_params(epochs=5).epochs == 5 and fitted.epochs == 3
    with pytest.raises(NotFittedError):
        copy.predict(easy_series(2, seed=0)[0])


@pytest.mark.slow
def test_grid_search_fits_each_candidate():
    x, y = easy_series(24, seed=0)
    search = GridSearchCV(SeriesClassifier(**PARAMS), {"epochs": [1, 3]}, cv=2,
                          error_score="raise").fit(x, y)
    assert len(search.cv_results_["params"]) == 2
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.best_params_["epochs"] in (1, 3)
    assert set(search.predict(x)) <= {"flat", "wave"}


X_GOOD, Y_GOOD = easy_series(6, seed=0)
NAN_SERIES = X_GOOD.copy()
NAN_SERIES[2] = np.nan
INFINITE = X_GOOD.copy()
INFINITE[4, 0, 5] = np.inf


@pytest.mark.parametrize("x, y, message", [
    (np.zeros(24), Y_GOOD, r"X must be a 3-D array .* received X of shape \(24,\)"),
    (np.zeros((6, 1, 4, 2)), Y_GOOD, r"received X of shape \(6, 1, 4, 2\)"),
    ([np.zeros(4), np.zeros((1, 2, 3))], Y_GOOD[:2], r"received X\[1\] of shape \(1, 2, 3\)"),
    ([np.zeros((2, 4)), np.zeros((3, 4))], Y_GOOD[:2], r"X\[1\] has 3 channel\(s\) but X\[0\] has 2"),
    (np.full((6, 1, 4), "a"), Y_GOOD, r"X must hold numbers"),
    (NAN_SERIES, Y_GOOD, r"X\[2\] has no known value"),
    (INFINITE, Y_GOOD, r"X\[4\] holds an infinite value"),
    (X_GOOD, Y_GOOD[:5], r"X has 6 series but y has 5 labels"),
    (X_GOOD, np.array(["a"] * 6), r"y holds one class \('a'\)"),
    (X_GOOD, Y_GOOD[:, None], r"y must be one label per series.* shape \(6, 1\)"),
    (X_GOOD, np.array([0.0, 1.0, np.nan, 0.0, 1.0, 0.0]), r"y\[2\] is NaN"),
])
def test_bad_input_is_one_line_naming_the_argument(x, y, message):
    with pytest.raises(ValueError, match=message) as error:
        SeriesClassifier(**PARAMS).fit(x, y)
    assert "\n" not in str(error.value)


def test_a_bad_parameter_or_preset_is_named_before_training():
    x, y = X_GOOD, Y_GOOD
    with pytest.raises(ValueError, match=r"epochs=0"):
        SeriesClassifier(epochs=0).fit(x, y)
    with pytest.raises(ValueError, match=r"preset='toy' is not a series preset"):
        SeriesClassifier(preset="toy").fit(x, y)


def test_predict_refuses_other_channels_and_an_unfitted_estimator(fitted):
    with pytest.raises(ValueError, match=r"X has 2 channel\(s\) but the classifier was "
                                         r"fitted on 1 \(n_channels_=1\)"):
        fitted.predict(np.zeros((3, 2, 24)))
    with pytest.raises(NotFittedError):
        SeriesClassifier().predict_proba(X_GOOD)


def test_save_and_load_give_the_same_answers(fitted, tmp_path):
    path = fitted.save(tmp_path / "saved")
    x, _ = easy_series(10, seed=3)
    loaded = SeriesClassifier.load(path)
    assert loaded.classes_.tolist() == fitted.classes_.tolist()
    assert loaded.get_params() == fitted.get_params()
    # Equal to float32 rounding: a traced predict's kernels may differ by batch shape.
    np.testing.assert_allclose(loaded.predict_proba(x), fitted.predict_proba(x), atol=1e-6)
    assert loaded.predict(x).tolist() == fitted.predict(x).tolist()
    run = load_run(path)  # an ordinary run directory, its manifest whole
    assert run.config["dataset"] == "arrays" and run.config["train_files"] == []
    with pytest.raises(FileExistsError, match=r"path=.*saved.* exists"):
        fitted.save(path)


def test_a_pickled_fitted_estimator_answers_the_same_from_its_own_copy(fitted):
    """pickle (and joblib, deepcopy) carries the trained run itself: the copy
    answers the same from a folder of its own, removed when it is collected."""
    import copy
    import gc
    import pickle

    x, _ = easy_series(10, seed=4)
    clone = pickle.loads(pickle.dumps(fitted))
    assert clone.run_dir_ != fitted.run_dir_ and clone.get_params() == fitted.get_params()
    assert clone.classes_.tolist() == fitted.classes_.tolist()
    np.testing.assert_allclose(clone.predict_proba(x), fitted.predict_proba(x), atol=1e-6)
    assert load_run(clone.run_dir_).config["dataset"] == "arrays"
    folder = os.path.dirname(clone.run_dir_)
    del clone
    gc.collect()
    assert not os.path.exists(folder)
    assert copy.deepcopy(fitted).predict(x).tolist() == fitted.predict(x).tolist()
    unfitted = pickle.loads(pickle.dumps(SeriesClassifier(seed=3)))
    assert unfitted.get_params()["seed"] == 3 and not hasattr(unfitted, "classes_")


def test_fit_trains_on_the_arrays_writing_no_series_and_no_record_twice(fitted):
    """The run holds no file of the series, and its config and record are the
    ones the run wrote (the manifest `finish_run` wrote last still matches)."""
    files = [os.path.relpath(os.path.join(d, f), fitted.run_dir_)
             for d, _, names in os.walk(fitted.run_dir_) for f in names]
    assert os.path.join("data", "estimator.json") in files
    assert not [f for f in files if f.endswith((".ts", ".txt", ".csv", ".tsv"))]
    run = load_run(fitted.run_dir_)  # checks each recorded file against the manifest
    assert run.config["dataset"] == "arrays"
    with open(os.path.join(fitted.run_dir_, "run.json"), encoding="utf-8") as f:
        assert not json.load(f).get("inputs")  # no file to fingerprint


def test_a_run_on_arrays_is_not_read_from_files_again(fitted):
    from training.config import TrainingConfig
    from training.train import train

    config = TrainingConfig.from_dict(load_run(fitted.run_dir_).config)
    with pytest.raises(ValueError, match=r"dataset='arrays': the run trained on series given "
                                         r"in memory"):
        get_task("timeseries").load_data(config, fitted.run_dir_)
    with pytest.raises(ValueError, match=r"train\(data=...\) goes with dataset='arrays'"):
        train(config, fitted.run_dir_ + "-again")
    assert not os.path.exists(fitted.run_dir_ + "-again")


def test_the_runs_task_model_answers_as_the_estimator(fitted, tmp_path):
    """`load_run(...).task_model` of the run `fit` trained is the series task
    model of the same model and labels (the estimator's `task_model_`)."""
    x, _ = easy_series(8, seed=6)
    for model in (load_run(fitted.run_dir_).task_model, fitted.task_model_):
        assert isinstance(model, TimeSeriesClassifier)
        answer = model.predict(x, verbose=0)
        np.testing.assert_allclose(answer["probabilities"], fitted.predict_proba(x), atol=1e-5)
        assert answer["labels"].tolist() == fitted.predict(x).tolist()


def test_load_reads_a_run_of_the_command_line(fitted, tmp_path):
    """A `timeseries` run without the estimator's record: labels from its labels.json."""
    path = fitted.save(tmp_path / "saved")
    os.remove(os.path.join(path, "data", "estimator.json"))
    finish_run(path)  # its manifest without that file, as a run of the command line has
    loaded = SeriesClassifier.load(path)
    assert loaded.classes_.tolist() == ["flat", "wave"] and loaded.n_channels_ == 1
    x, _ = easy_series(6, seed=5)
    assert loaded.predict(x).tolist() == fitted.predict(x).tolist()


def test_fit_trains_in_the_run_dir_given_and_refuses_a_folder_that_is_no_run(tmp_path):
    x, y = easy_series(24, seed=0)
    clf = SeriesClassifier(**PARAMS, run_dir=tmp_path / "run").fit(x, y)
    assert clf.run_dir_ == str(tmp_path / "run")
    assert load_run(clf.run_dir_).config["dataset"] == "arrays"
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"notes.* is not a run directory"):
        SeriesClassifier(**PARAMS, run_dir=tmp_path / "notes").fit(x, y)
    assert os.listdir(tmp_path / "notes") == ["todo.txt"]


@pytest.mark.slow
def test_a_saved_run_exports_and_serves_the_same_labels(fitted, tmp_path):
    run = load_run(fitted.save(tmp_path / "saved"))
    run.task_model.export(tmp_path / "exported", config=run.config)
    x, _ = easy_series(6, seed=4)
    lines = SavedModelPredictor(tmp_path / "exported").predict(list(x.transpose(0, 2, 1)))
    assert [line.split("\t")[0] for line in lines] == fitted.predict(x).tolist()


def test_held_out_metrics_keep_the_splits_that_were_held_out():
    from training.estimator import held_out_metrics

    metrics = {"valid_accuracy": 1.0, "test_accuracy": 0.9, "test_loss": 0.3, "steps": 5}
    assert held_out_metrics(metrics, {"test_files": [], "valid_files": []}) == {
        "train_accuracy": 0.9, "train_loss": 0.3, "steps": 5}
    assert held_out_metrics(metrics, {"test_files": ["t.ts"], "valid_files": ["v.ts"]}) == metrics


def test_export_takes_series_as_fit_and_predict_take_them(fitted, tmp_path):
    import tensorflow as tf

    x, _ = easy_series(6, seed=5)  # (N, C, T)
    served = tf.saved_model.load(fitted.export(tmp_path / "export")).signatures["serving_default"]
    assert served.structured_input_signature[1]["features"].shape.as_list() == [None, 1, None]
    answer = served(features=tf.constant(x.astype("float32")))
    assert [b.decode() for b in answer["labels"].numpy()] == fitted.predict(x).tolist()
    np.testing.assert_allclose(answer["probabilities"].numpy(), fitted.predict_proba(x), atol=1e-5)
