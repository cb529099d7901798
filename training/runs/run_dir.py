"""A run is a directory: config, vocabulary, checkpoints, logs, model, metrics.

```
RUN/
  config.json            the resolved TrainingConfig
  vocab/                 vocab.txt + tokenizer.json (text tasks)
  labels.json            class names (classification tasks)
  checkpoints/resume/    step-<n>/ + LATEST: resumable, kill-safe
  checkpoints/epoch-<e>.weights.h5   the last k and best k epochs, for averaging
  checkpoints/scores.json            each epoch's validation score
  logs/                  TensorBoard: train/, validation/, attention/, hparams
  model.keras            the final (optionally averaged) model
  metrics.json           final validation and test figures
  .lock                  held by the one process training the run (RunDirLock)
```

A finished run keeps what it made (model.keras, metrics.json, logs, the
vocabulary and scores.json) and drops what only an unfinished run needs:
the resume checkpoint (weights with the optimizer's state) and the epoch
weights that model selection read (`compact_finished_run`).
"""

import dataclasses
import datetime
import fcntl
import json
import os
import shutil
import socket
import zipfile

import keras

import keras_transformer  # noqa: F401  (registers the serializable classes)
import training.optimization.schedule  # noqa: F401  (the saved optimizer's TransformerSchedule)
from training.config import TrainingConfig
from training.data.readers import read_json
from training.runs.predict import predict_run
from training.tasks import get_task
from training.text.tokenizers import check_vocabulary_size

#: The lock file of a run directory, kept by `prepare_run_dir --overwrite`.
LOCK_NAME = ".lock"


def write_json_atomically(path, value):
    """Writes `value` as JSON to `path` through a temporary file and a
    rename, so a kill leaves the old file or the new one, never half."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
    os.replace(tmp, path)


def compact_finished_run(run_dir):
    """Removes what only an unfinished run needs; returns the bytes freed.

    Call it once `model.keras` and `metrics.json` are written: a finished
    run is never resumed (`prepare_run_dir` refuses it), so the resume
    checkpoint's optimizer state is dead weight, and the epoch weights are
    already in `model.keras` (selection chose or averaged them; which ones
    and their scores stay in metrics.json and `checkpoints/scores.json`).
    A kill part-way leaves a finished run with some files still to remove,
    and nothing else.
    """
    checkpoints = os.path.join(os.fspath(run_dir), "checkpoints")
    if not os.path.isfile(os.path.join(os.fspath(run_dir), "metrics.json")):
        raise FileNotFoundError(
            f"run_dir={os.fspath(run_dir)!r} has no metrics.json: an unfinished run "
            "keeps its checkpoints."
        )
    freed = 0
    if not os.path.isdir(checkpoints):
        return freed
    for name in sorted(os.listdir(checkpoints)):
        path = os.path.join(checkpoints, name)
        if name == "resume" and os.path.isdir(path):
            freed += _tree_bytes(path)
            shutil.rmtree(path)
        elif name.startswith("epoch-") and name.endswith(".weights.h5"):
            freed += os.path.getsize(path)
            os.remove(path)
    return freed


def _tree_bytes(path):
    return sum(
        os.path.getsize(os.path.join(folder, name))
        for folder, _, names in os.walk(path)
        for name in names
    )


class RunDirInUseError(OSError):
    """Another live process holds the run directory's lock."""


class RunDirLock:
    """One process per run directory: an exclusive lock on `RUN/.lock`.

    Two processes training into one directory would interleave checkpoints
    and overwrite each other's `model.keras`; the second one fails at once
    instead, naming the process that holds the directory.  The lock is an
    `fcntl.flock` on the open file, which the kernel drops when the holder
    exits in any way (`SIGKILL` included), so a lock left by a killed run
    never blocks its resume: the next process simply takes it over.  The
    file itself stays, holding the pid, host and start time of the last
    holder as JSON (read only to word the error).

    A lock is held per open file, so a second `RunDirLock` on the same
    directory fails in the same process too.

    Args:
        run_dir: The run directory; created if missing.

    Example:
    >>> with RunDirLock("runs/toy"):
    ...     train(...)

    Raises:
        RunDirInUseError: On entering, if another process holds the lock.
    """

    def __init__(self, run_dir):
        self.run_dir = os.fspath(run_dir)
        self.path = os.path.join(self.run_dir, LOCK_NAME)
        self._fd = None

    def acquire(self):
        """Take the lock or raise `RunDirInUseError`; returns self."""
        if self._fd is not None:
            raise RuntimeError(f"RunDirLock({self.run_dir!r}) is already held.")
        os.makedirs(self.run_dir, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunDirInUseError(
                f"run_dir={self.run_dir!r} is in use by {holder}; a run directory "
                "takes one training process at a time. Wait for that process to "
                "end (or stop it: a killed run's lock is taken over on resume), "
                "or choose another --run-dir."
            ) from None
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._fd = fd
        return self

    def release(self):
        """Drop the lock (also done by the kernel when the process dies)."""
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)  # before unlocking: the next holder writes its own
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc_info):
        self.release()


def _read_holder(fd):
    """'process PID on HOST (since TIME)' from the lock file, as far as written."""
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except ValueError:
        holder = {}
    if "pid" not in holder:  # the holder has not written its name yet
        return "another process"
    since = f", since {holder['since']}" if holder.get("since") else ""
    return f"process {holder['pid']} on host {holder.get('host', '?')!r}{since}"


def _run_files(run_dir):
    """The entries of `run_dir` other than its lock file."""
    return [name for name in os.listdir(run_dir) if name != LOCK_NAME]


def prepare_run_dir(run_dir, config, overwrite=False):
    """Create or reopen `run_dir`; return True when it resumes a run.

    An existing run directory is reused only with an identical config (so a
    killed run resumes by repeating its command); otherwise nothing is
    touched unless `overwrite=True`.  The lock file (`RunDirLock`) does not
    count as content and survives `overwrite`: the process replacing the run
    keeps holding it.
    """
    run_dir = os.fspath(run_dir)
    config_path = os.path.join(run_dir, "config.json")
    if os.path.isdir(run_dir) and _run_files(run_dir):
        if overwrite:
            for name in _run_files(run_dir):
                path = os.path.join(run_dir, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
        elif not os.path.isfile(config_path):
            raise FileExistsError(
                f"run_dir={run_dir!r} exists and is not a run directory; "
                "choose another path or pass --overwrite."
            )
        else:
            with open(config_path, encoding="utf-8") as f:
                existing = TrainingConfig.from_dict(json.load(f))
            if existing != config:
                changed = sorted(
                    k for k, v in config.to_dict().items() if existing.to_dict().get(k) != v
                )
                raise FileExistsError(
                    f"run_dir={run_dir!r} holds a run with a different config "
                    f"(fields {changed} differ); pass --overwrite to replace it "
                    "or choose another --run-dir."
                )
            if os.path.isfile(os.path.join(run_dir, "metrics.json")):
                raise FileExistsError(
                    f"run_dir={run_dir!r} holds a finished run; pass --overwrite "
                    "to train it again."
                )
            return True
    os.makedirs(os.path.join(run_dir, "checkpoints"), exist_ok=True)
    with open(config_path, "w", encoding="utf-8") as f:
        f.write(config.to_json())
    return False


@dataclasses.dataclass
class Run:
    """What a finished run directory holds, loaded.

    `task` is the run's `training.tasks.Task`, its tokenizer and class
    names loaded from the run directory; `predict` answers raw inputs
    through it (`training.runs.predict`), and the exporters take it as it
    is (`export.saved_model.export_saved_model(run.model, run.config, path,
    run.task)`).
    """

    run_dir: str
    task: object
    config: dict
    model: keras.Model
    metrics: dict

    @property
    def tokenizer(self):
        """The run's tokenizer (None for numeric and image input)."""
        return self.task.tokenizer

    @property
    def label_names(self):
        """The run's class names (None for translation)."""
        return self.task.label_names

    def predict(self, inputs, beam_size=1, batch_size=64):
        """One output line per input: a translation, or `label<TAB>probability`.

        Args:
            inputs: Sentences, or series (arrays, or lines of numbers).
            beam_size: Beams of a translator (1: greedy search).
            batch_size: Inputs per model call.

        Returns:
            A list of strings, the same the run's SavedModel gives
            (`training.runs.predict.predict_saved_model`).
        """
        return predict_run(self, inputs, beam_size=beam_size, batch_size=batch_size)


def load_run(run_dir):
    """Load a finished run: model, tokenizer, labels, config and metrics."""
    run_dir = os.fspath(run_dir)
    model_path = os.path.join(run_dir, "model.keras")
    if not os.path.isfile(model_path):
        raise FileNotFoundError(
            f"No trained model in run_dir={run_dir!r} (missing model.keras); "
            "has the run finished?"
        )
    config = read_json(os.path.join(run_dir, "config.json"))
    task = get_task(config["task"]).load_assets(run_dir)
    metrics = {}
    if os.path.isfile(os.path.join(run_dir, "metrics.json")):
        metrics = read_json(os.path.join(run_dir, "metrics.json"))
    model = _load_model(model_path)
    vocabulary_size = getattr(model, "vocabulary_size", None) or getattr(
        getattr(model, "config", None), "vocabulary_size", None)  # a classifier's, a translator's
    check_vocabulary_size(task.tokenizer, vocabulary_size, os.path.join(run_dir, "vocab"))
    return Run(run_dir, task, config, model, metrics)


def _load_model(path):
    """`keras.saving.load_model(path)`; a file cut short is a ValueError naming it
    (Keras says "File not found" of a file that is there but no zip archive)."""
    damaged = (f"{path!r} is not a whole .keras file (a zip archive): it was cut short or "
               "damaged while it was written")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{damaged}.")
    try:
        return keras.saving.load_model(path)
    except zipfile.BadZipFile as error:
        raise ValueError(f"{damaged} ({error}).") from None
