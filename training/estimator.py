"""A scikit-learn estimator for series classification: the `timeseries` recipe from arrays.

```python
from training.estimator import SeriesClassifier

clf = SeriesClassifier()        # the `timeseries` preset; sizes from the data
clf.fit(X, y)                   # X (n_series, n_channels, length), as aeon takes it
clf.predict(X_test)             # labels drawn from clf.classes_
```

`fit` runs the same recipe as `python -m training train --config
timeseries` given a training file, on the arrays themselves: it builds the
config from the preset (`dataset="arrays"`) and trains a run directory
with `training.train.train(config, run_dir, data=...)`; no file of the
series is written and the run's records are written once, by the run.
`export(path)` writes a SavedModel taking series as `fit` does;
`save(path)` copies the run, which `python -m export saved-model --run-dir
PATH --output DIR` exports as any run; `load(path)` gives a fitted
estimator back.  Parameters follow scikit-learn's convention (stored
as given, read by `fit`), so `get_params`, `set_params`, `sklearn.base.clone`
and `GridSearchCV` work.

Inputs, as aeon takes them:

- a 3-D array `(n_series, n_channels, length)`;
- a 2-D array `(n_series, length)`: one channel;
- a list of arrays `(n_channels, length_i)` (or `(length_i,)`) of unequal
  lengths, NaN-padded at the end as the package's readers pad them.

NaN inside a series is a missing value (the model fills it); a series needs
one known value.  Labels are any sortable values (strings, integers);
`classes_` holds them sorted (`np.unique`), and `predict_proba`'s columns
follow it.
"""

import io
import os
import shutil
import tarfile
import tempfile
import weakref

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from training.config import TrainingConfig, read_preset
from training.data.atomic import atomic_directory
from training.data.common import TaskData
from training.data.readers import read_json
from training.data.series_files import as_series
from training.runs.run_dir import load_run
from training.task_models import TimeSeriesClassifier
from training.train import train

#: What `load` restores that the run's own files do not hold: the labels with
#: their type, the channels and the parameters; in the run's `data/` folder.
ESTIMATOR_FILE = "estimator.json"
#: Series per model call in `predict_proba`.
PREDICT_BATCH = 256
#: The kinds of label arrays `fit` takes: integers, booleans, floats, strings, objects.
_LABEL_KINDS = "iubfUO"


def held_out_metrics(metrics, config):
    """`metrics` with each split's figures under the name of the series they
    were scored on: a run without `test_files` (or `valid_files`) scores its
    training series in their place, so its `test_*` entries become `train_*`
    and its `valid_*` entries are left out."""
    metrics = dict(metrics)
    held_out = {"valid": config.get("valid_files"), "test": config.get("test_files")}
    for split, files in held_out.items():
        for key in [k for k in metrics if k.startswith(split + "_")]:
            value = metrics.pop(key)
            if not files and split == "test":
                metrics["train_" + key[len(split) + 1:]] = value
            elif files:
                metrics[key] = value
    return metrics


def as_labels(y, num_series):
    """(`classes_`, class ids `(N,)` into it) of labels `y`.

    Raises:
        ValueError: In one line naming `y`: not one label per series, a
            label that is NaN or of no sortable kind, a single class.
    """
    labels = np.asarray(y)
    if labels.ndim != 1:
        raise ValueError(f"y must be one label per series, shape (n_series,); received y of "
                         f"shape {labels.shape}.")
    if len(labels) != num_series:
        raise ValueError(f"X has {num_series} series but y has {len(labels)} labels; "
                         "give one label per series.")
    if labels.dtype.kind not in _LABEL_KINDS:
        raise ValueError(f"y must hold strings or numbers; received y of dtype {labels.dtype}.")
    if labels.dtype.kind == "f" and np.isnan(labels).any():
        i = int(np.flatnonzero(np.isnan(labels))[0])
        raise ValueError(f"y[{i}] is NaN; every series needs a label.")
    try:
        classes, ids = np.unique(labels, return_inverse=True)
    except TypeError:
        raise ValueError("y must hold labels of one sortable kind (strings or numbers); "
                         f"received {sorted({type(v).__name__ for v in labels})}.") from None
    if len(classes) < 2:
        raise ValueError(f"y holds one class ({classes.tolist()[0]!r}); a classifier needs at least "
                         "two.")
    return classes, ids.reshape(-1)


def _label_texts(classes):
    """The labels the run's `labels.json` (and its export's `labels` output)
    hold: the classes as text where no two read the same, else "0", "1", ..."""
    names = [str(c) for c in classes]
    if len(set(names)) == len(names):
        return names
    return [str(i) for i in range(len(classes))]


class SeriesClassifier(ClassifierMixin, BaseEstimator):
    """Series classification with the `timeseries` recipe, in scikit-learn's form.

    Each parameter left None takes the preset's value; the `timeseries`
    preset leaves them to the data (`training.recipe.series`: batch,
    updates and up to five voting members from the number and length of
    the series), as on the command line.

    Args:
        preset: A preset name or JSON config path of task "timeseries".
        seed: The seed of every random draw (stem kernels, initialisation,
            batches).
        ensemble_size: Voting members (None: the recipe's).
        epochs: Passes over the training series (None: the recipe's updates).
        batch_size: Series per update (None: the recipe's).
        time_budget_minutes: Wall-clock minutes the whole fit plans to (None:
            none).
        model_overrides: Model fields over the preset's (`{"num_layers": 1}`).
        run_dir: Where `fit` trains its run; a run there is replaced
            (anything else there is refused).  None: a temporary folder the
            estimator owns, removed when the estimator is collected or
            fitted again (`save` copies the run out).
        verbose: 0 says nothing; otherwise a line per epoch.

    Attributes (after `fit` or `load`):
        classes_: The labels, sorted; `predict_proba`'s columns.
        n_channels_: The channels a series has.
        run_dir_: The run directory trained (or loaded).
        model_: Its Keras model (a `TransformerClassifier` or `ClassifierEnsemble`).
        task_model_: That model as a `training.task_models.TimeSeriesClassifier`
            (labels `classes_` as text), which `predict_proba` and `export`
            run: to `fit` further, `save` as one `.keras` file or serve.
        metrics_: Its `metrics.json`, under honest names: `fit`'s run has
            no validation or test series, so what the run scored on its
            training series is `train_accuracy` and `train_loss`, and no
            `valid_*` or `test_*` entry is reported (`held_out_metrics`).
    """

    def __init__(self, preset="timeseries", seed=0, ensemble_size=None, epochs=None,
                 batch_size=None, time_budget_minutes=None, model_overrides=None,
                 run_dir=None, verbose=0):
        self.preset = preset
        self.seed = seed
        self.ensemble_size = ensemble_size
        self.epochs = epochs
        self.batch_size = batch_size
        self.time_budget_minutes = time_budget_minutes
        self.model_overrides = model_overrides
        self.run_dir = run_dir
        self.verbose = verbose

    # --- training -----------------------------------------------------------

    def training_config(self):
        """The `TrainingConfig` `fit` trains: the preset, the parameters given
        (not None) over it, and the series given in memory (`dataset="arrays"`)."""
        values = read_preset(self.preset)
        values.pop("_comment", None)
        if values.get("task") != "timeseries":
            raise ValueError(f"preset={self.preset!r} is not a series preset (its task is "
                             f"{values.get('task', 'translation')!r}, not 'timeseries').")
        given = {name: getattr(self, name) for name in (
            "seed", "ensemble_size", "epochs", "batch_size", "time_budget_minutes")}
        given = {name: value for name, value in given.items() if value is not None}
        if self.model_overrides is not None:
            if not isinstance(self.model_overrides, dict):
                raise ValueError("model_overrides must be a dict of model fields; received "
                                 f"model_overrides={self.model_overrides!r}.")
            given["model_overrides"] = {**values.get("model_overrides", {}),
                                        **self.model_overrides}
        values.update(given, dataset="arrays", train_files=[], valid_files=[], test_files=[])
        sources = {name: f"SeriesClassifier({name}=...)" for name in given}
        return TrainingConfig.from_dict(values, sources=sources)

    def fit(self, X, y):
        """Trains the recipe on series `X` and labels `y`; returns self.

        Raises:
            ValueError: For a bad `X` or `y` (`as_series`, `as_labels`) or a
                bad parameter, in one line naming it.
        """
        series = as_series(X)
        classes, ids = as_labels(y, len(series))
        config = self.training_config()
        record = {"classes": classes.tolist(), "classes_dtype": classes.dtype.str,
                  "n_channels": int(series.shape[2]), "params": _json_params(self)}
        split = (series, ids.astype("int32"))
        # Every series trains and is scored: no split is held out (`held_out_metrics`).
        data = TaskData(split, split, split, label_names=_label_texts(classes),
                        records={ESTIMATOR_FILE: record})
        self._release()
        work = None
        if self.run_dir is None:  # a folder the estimator owns, removed with it
            work = tempfile.mkdtemp(prefix="series-classifier-")
            run_dir = os.path.join(work, "run")
        else:
            run_dir = os.path.abspath(os.fspath(self.run_dir))
        try:
            train(config, run_dir, overwrite=True, verbose="auto" if self.verbose else 0,
                  data=data)
        except BaseException:
            if work is not None:
                shutil.rmtree(work, ignore_errors=True)
            raise
        if work is not None:
            self._finalizer = weakref.finalize(self, shutil.rmtree, work, True)
        self.answer_from_run(run_dir)
        return self

    def _release(self):
        """Removes the temporary folder of a previous `fit`, if it owns one."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()
            self._finalizer = None

    def answer_from_run(self, run_dir):
        """Answers from the finished `timeseries` run in `run_dir` (what `fit`
        trained, a copy `__setstate__` unpacked, or `load`'s): its model,
        labels and metrics become the fitted attributes."""
        run = load_run(run_dir)
        if run.config.get("task") != "timeseries":
            raise ValueError(f"run_dir={run_dir!r} is a run of task {run.config.get('task')!r}, "
                             "not 'timeseries'.")
        record_path = os.path.join(run_dir, "data", ESTIMATOR_FILE)
        if os.path.isfile(record_path):
            record = read_json(record_path, f"run_dir={run_dir!r}")
            self.classes_ = np.asarray(record["classes"], dtype=np.dtype(record["classes_dtype"]))
            self.n_channels_ = int(record["n_channels"])
        else:  # a run of the command line: its labels as text
            self.classes_ = np.asarray(run.label_names)
            self.n_channels_ = int(run.model.num_features)
        self.run_dir_ = os.fspath(run_dir)
        self.model_ = run.model
        self._task_model = TimeSeriesClassifier(run.model, [str(c) for c in self.classes_])
        self.metrics_ = held_out_metrics(run.metrics, run.config)

    # --- pickling -------------------------------------------------------------

    def __getstate__(self):
        """The parameters and, once fitted, the run directory's files (a tar in
        memory): `pickle`, `joblib.dump` and `copy.deepcopy` carry the
        trained run, not a path to a folder another process may not have."""
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_finalizer", "model_", "_task_model", "run_dir_")}
        if hasattr(self, "run_dir_"):
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as archive:
                archive.add(self.run_dir_, arcname="run",
                            filter=lambda member: None if member.name.endswith("/.lock") else member)
            state["_run_archive"] = buffer.getvalue()
        return state

    def __setstate__(self, state):
        """A fitted estimator's run is unpacked into a temporary folder it owns
        (removed with it, as `fit`'s own), then loaded as `load` does."""
        state = dict(state)
        archive = state.pop("_run_archive", None)
        self.__dict__.update(state)
        if archive is None:
            return
        work = tempfile.mkdtemp(prefix="series-classifier-")
        self._finalizer = weakref.finalize(self, shutil.rmtree, work, True)
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
            # The "data" filter (Python 3.10.12+) refuses links and paths out of `work`.
            tar.extractall(work, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        self.answer_from_run(os.path.join(work, "run"))

    # --- answers -------------------------------------------------------------

    def predict_proba(self, X):
        """Class probabilities `(n_series, n_classes)`, columns in `classes_` order."""
        check_is_fitted(self)
        series = as_series(X)
        if series.shape[2] != self.n_channels_:
            raise ValueError(f"X has {series.shape[2]} channel(s) but the classifier was "
                             f"fitted on {self.n_channels_} (n_channels_={self.n_channels_}).")
        answer = self._task_model.predict(series.transpose(0, 2, 1), batch_size=PREDICT_BATCH,
                                          verbose=0)
        return answer["probabilities"].astype(np.float64)

    def export(self, path, overwrite=False):
        """Writes a SavedModel whose `serving_default` takes `features` float32
        `(B, n_channels, length)`, as `fit` and `predict` take series (NaN
        where a value is missing or after a shorter series' end), and returns
        `probabilities` `(B, n_classes)` in `classes_` order and `labels`
        `(B,)` tf.string (each class as text); returns the export's path.

        It is the command line's export of the same run
        (`python -m export saved-model --run-dir`).
        """
        check_is_fitted(self)
        return self.task_model_.export(path, overwrite=overwrite)

    @property
    def task_model_(self):
        check_is_fitted(self)
        return self._task_model

    def predict(self, X):
        """The most probable label of each series, from `classes_`."""
        probabilities = self.predict_proba(X)  # NotFittedError before fit
        return self.classes_[probabilities.argmax(axis=1)]

    # --- run directories -----------------------------------------------------

    def save(self, path):
        """Writes the fitted run as the run directory `path` (a new folder).

        It loads with `training.runs.run_dir.load_run`, exports as any run
        (`python -m export saved-model --run-dir PATH --output DIR`) and
        comes back with `SeriesClassifier.load(path)`.

        Raises:
            FileExistsError: If `path` exists.
        """
        check_is_fitted(self)
        path = os.path.abspath(os.fspath(path))
        if os.path.lexists(path):
            raise FileExistsError(f"path={path!r} exists; save writes a new run directory: "
                                  "choose another path or remove it.")
        with atomic_directory(path) as staged:
            shutil.copytree(self.run_dir_, staged, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(".lock"))
        return path

    @classmethod
    def load(cls, run_dir):
        """A fitted estimator of a run directory: one `save` or `fit` wrote
        (labels and parameters restored: a `fit` of it trains where the
        original would), or a `timeseries` run of the command line (labels
        as its `labels.json` text, default parameters)."""
        run_dir = os.path.abspath(os.fspath(run_dir))
        record_path = os.path.join(run_dir, "data", ESTIMATOR_FILE)
        params = {}
        if os.path.isfile(record_path):
            params = read_json(record_path, f"run_dir={run_dir!r}").get("params", {})
        estimator = cls(**params)
        estimator.answer_from_run(run_dir)
        return estimator


def _json_params(estimator):
    """The parameters, as `estimator.json` keeps them (a path as text)."""
    params = estimator.get_params()
    if params["run_dir"] is not None:
        params["run_dir"] = os.fspath(params["run_dir"])
    return params

