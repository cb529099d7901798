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
  run.json               what the folder is: {"format": "keras-transformer run",
                         "format_version": 1, ...} and the training files' fingerprints
  manifest.json          a finished run's files, their sizes and SHA-256 (written last)
  .lock                  held by the one process training the run (RunDirLock)
```

A finished run keeps what it made (model.keras, metrics.json, logs, the
vocabulary and scores.json) and drops what only an unfinished run needs:
the resume checkpoint (weights with the optimizer's state) and the epoch
weights that model selection read (`compact_finished_run`); then it records
its files in `manifest.json` (`finish_run`), which `load_run` checks before
it reads anything: a file cut short or changed is named, never used.

Every file is written whole or not at all (`training.data.atomic`): a
temporary, fsynced, renamed, the folder fsynced.

`--overwrite` replaces a run, never anything else (`prepare_run_dir`): a
folder is a run when it holds `run.json`, or, written before runs carried
one, a `config.json` of a `TrainingConfig` and only the entries a run
writes.  The run it replaces is set aside as `.NAME.replaced` beside it and
dropped once the new run has written its first checkpoint; if the new run
fails before that (a typo in a data path), the old one is put back
(`claim_run_dir`).
"""

import contextlib
import dataclasses
import datetime
import fcntl
import glob
import json
import os
import shutil
import socket
import tempfile
import warnings
import zipfile

import keras

import keras_transformer  # noqa: F401  (registers the serializable classes)
import training.optimization.schedule  # noqa: F401  (the saved optimizer's TransformerSchedule)
from training.config import TrainingConfig
from training.data.atomic import (
    atomic_write_json,
    atomic_write_text,
    fsync_directory,
)
from training.data.manifest import (
    MANIFEST,
    check_format,
    check_manifest,
    format_record,
    write_manifest,
)
from training.data.readers import read_json
from training.pipeline.prepared import file_fingerprint
from training.runs.predict import predict_run
from training.task_models import TaskModel, task_model_for
from training.tasks import get_task
from training.text.tokenizers import check_vocabulary_size

#: The lock file of a run directory, kept by `prepare_run_dir --overwrite`.
LOCK_NAME = ".lock"
#: The file that makes a folder a run directory (`training.data.manifest.format_record`).
MARKER = "run.json"
#: Every entry a run directory may hold; `--overwrite` replaces nothing else.
RUN_ENTRIES = frozenset({
    LOCK_NAME, MARKER, MANIFEST, "config.json", "vocab", "labels.json", "checkpoints",
    "logs", "model.keras", "metrics.json", "plan.json", "stream_passes.json", "data",
})
#: What `load_run` and `prepare_run_dir` tell a user to do with a run they cannot read.
_RETRAIN = "train the run again (--overwrite replaces it)"


def write_json_atomically(path, value):
    """Writes `value` as JSON to `path` whole or not at all (a temporary,
    fsynced and renamed), so a kill or a power cut leaves the old file or
    the new one, never half."""
    atomic_write_json(path, value)


def finish_run(run_dir):
    """Compacts a finished run (`compact_finished_run`) and records its files
    in `manifest.json`, last: a run has finished once that is there.

    The summaries (`logs/`) and the lock are left out: nothing reads them
    back to answer.
    """
    compact_finished_run(run_dir)
    return write_manifest(run_dir, "run", skip=(LOCK_NAME, "logs"))


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


def _is_run_entry(name):
    """Whether `name` is an entry a run writes, or a temporary a kill left of one
    (`.NAME.tmp-XXXX`, `NAME.tmp-PID`, `NAME.partial`)."""
    if ".tmp-" in name:
        name = name.split(".tmp-")[0]
        name = name[1:] if name.startswith(".") else name
    return name.removesuffix(".partial") in RUN_ENTRIES


def _read_marker(run_dir, remedy="choose another --run-dir"):
    """The run's `run.json`, checked (a newer layout is refused, saying to
    upgrade or `remedy`); None without one."""
    path = os.path.join(run_dir, MARKER)
    if not os.path.isfile(path):
        return None
    record = read_json(path, f"run_dir={run_dir!r}")
    check_format(record, "run", path, remedy)
    return record


def _is_older_run(run_dir):
    """Whether `run_dir`, which has no `run.json`, is a run written before
    runs carried one: a `config.json` of a `TrainingConfig`, and only the
    entries a run writes."""
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path) or not all(map(_is_run_entry, os.listdir(run_dir))):
        return False
    try:
        TrainingConfig.from_dict(read_json(path, f"run_dir={run_dir!r}"))
    except (ValueError, TypeError, AttributeError):
        return False
    return True


def _is_unstarted_run(run_dir):
    """Whether `run_dir` holds only what a run killed while writing its first
    file leaves: an empty `checkpoints/` folder and temporaries of a run's files."""
    for name in _run_files(run_dir):
        path = os.path.join(run_dir, name)
        if ".tmp-" in name and _is_run_entry(name) and os.path.isfile(path):
            continue
        if name == "checkpoints" and os.path.isdir(path) and not os.listdir(path):
            continue
        return False
    return True


def _recognised_run(run_dir):
    """`run_dir`'s marker ({} for an older run without one, or a run killed
    before its first file was whole), or FileExistsError when the folder is
    not a run: nothing is touched."""
    marker = _read_marker(run_dir)
    if marker is not None:
        return marker
    if _is_older_run(run_dir) or _is_unstarted_run(run_dir):
        return {}
    raise FileExistsError(
        f"run_dir={run_dir!r} exists and is not a run directory (no {MARKER}); "
        "nothing in it was changed, --overwrite or not: choose another --run-dir "
        "(or an empty folder)."
    )


def _aside_path(run_dir):
    """Where a run being replaced waits: `.NAME.replaced` beside `run_dir`."""
    parent, name = os.path.split(os.path.abspath(run_dir))
    return os.path.join(parent, f".{name}.replaced")


def _has_checkpoint(run_dir):
    """Whether the run in `run_dir` got as far as a checkpoint (or finished)."""
    return (os.path.isfile(os.path.join(run_dir, "checkpoints", "resume", "LATEST"))
            or os.path.isfile(os.path.join(run_dir, "metrics.json")))


def _clear(run_dir):
    """Removes a run's entries (not its lock file)."""
    for name in _run_files(run_dir):
        path = os.path.join(run_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    fsync_directory(run_dir)


def _set_aside(run_dir):
    """Moves the run in `run_dir` to `.NAME.replaced`, keeping the lock file
    (held by this process) in `run_dir`, which is left empty.

    One `rename` moves the whole run, so a kill at any point leaves it
    whole, in one place or the other.  Where a replacement was killed
    before its first checkpoint, `.NAME.replaced` already holds the run it
    replaced: that one is kept, the unstarted replacement removed.
    """
    aside = _aside_path(run_dir)
    if os.path.lexists(aside):
        _clear(run_dir)
        return
    os.rename(run_dir, aside)
    os.mkdir(run_dir)
    if os.path.lexists(os.path.join(aside, LOCK_NAME)):
        os.rename(os.path.join(aside, LOCK_NAME), os.path.join(run_dir, LOCK_NAME))
    fsync_directory(os.path.dirname(os.path.abspath(run_dir)))


def drop_replaced_run(run_dir):
    """Removes the run `run_dir` replaced (`.NAME.replaced`), once the new
    one has a checkpoint; returns whether there was one to remove."""
    aside = _aside_path(run_dir)
    if not os.path.isdir(aside) or not _has_checkpoint(run_dir):
        return False
    shutil.rmtree(aside)
    return True


def restore_replaced_run(run_dir):
    """Puts back the run `run_dir` replaced, while the new run has no
    checkpoint (it failed first); returns whether it did.  The lock file
    stays with the process holding it."""
    aside = _aside_path(run_dir)
    if not os.path.isdir(aside) or _has_checkpoint(run_dir):
        return False
    parent, name = os.path.split(os.path.abspath(run_dir))
    if not os.path.lexists(run_dir):
        os.rename(aside, run_dir)
        fsync_directory(parent)
        return True
    failed = tempfile.mkdtemp(prefix=f".{name}.failed-", dir=parent)
    if os.path.lexists(os.path.join(run_dir, LOCK_NAME)):
        os.rename(os.path.join(run_dir, LOCK_NAME), os.path.join(aside, LOCK_NAME))
    os.rename(run_dir, os.path.join(failed, name))
    os.rename(aside, run_dir)
    fsync_directory(parent)
    shutil.rmtree(failed)
    return True


def _input_fingerprints(config):
    """The fingerprints (`training.pipeline.prepared.file_fingerprint`: size
    and SHA-256 of the head and tail) of the files `config` names (a glob
    pattern: the files it matches), each under its path as given."""
    records = []
    for key in ("train_files", "valid_files", "test_files"):
        for pattern in getattr(config, key, ()) or ():
            if not isinstance(pattern, str):
                continue
            paths = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
            records += [{"file": path, **file_fingerprint(path)}
                        for path in paths if os.path.isfile(path)]
    return records


def _check_inputs(run_dir, marker, config):
    """Raises ValueError, naming the file, when a training file the run
    started from changed, went, or a new one matches its pattern (a
    resumed run must read the same data).  Only the files the config names
    are fingerprinted; a named dataset's (under `data_dir`) are not."""
    recorded = {r["file"]: r for r in marker.get("inputs", ()) if isinstance(r, dict)}
    current = {r["file"]: r for r in _input_fingerprints(config)}
    if "inputs" in marker:
        recorded.update({path: None for path in current if path not in recorded})
    for path, record in sorted(recorded.items()):
        now = current.get(path)
        if record is None:
            change = "appeared"
        elif now is None:
            change = "is gone"
        elif now["size"] != record.get("size"):
            change = f"has {now['size']} bytes where it had {record.get('size')}"
        elif now["sha256_head_tail"] != record.get("sha256_head_tail"):
            change = "changed (its first or last MiB differs)"
        else:
            continue
        raise ValueError(
            f"run_dir={run_dir!r} cannot resume: its training file {path!r} {change} since "
            "the run started, and a resumed run must read the data it started with; put "
            "the file back, or start a new run (--overwrite or another --run-dir)."
        )


def _create_run(run_dir, config):
    """Writes a new run's config.json and run.json (with its files' fingerprints)."""
    os.makedirs(os.path.join(run_dir, "checkpoints"), exist_ok=True)
    atomic_write_text(os.path.join(run_dir, "config.json"), config.to_json())
    atomic_write_json(os.path.join(run_dir, MARKER),
                      format_record("run", inputs=_input_fingerprints(config)))


def prepare_run_dir(run_dir, config, overwrite=False):
    """Create or reopen `run_dir`; return True when it resumes a run.

    An existing run directory is reused only with an identical config and
    the same training files (size and SHA-256 of their head and tail), so a
    killed run resumes by repeating its command; otherwise nothing is
    touched unless `overwrite=True`.

    `overwrite` replaces a run and nothing else: a folder that is not a run
    (no `run.json`) is refused with or without it, and so is a run holding
    files a run does not write.  The run replaced is set aside as
    `.NAME.replaced` beside `run_dir` (`drop_replaced_run` removes it once
    the new run has a checkpoint, `restore_replaced_run` puts it back if the
    new run fails before; `claim_run_dir` does both).

    A run written before runs carried `run.json` (a `config.json` of a
    `TrainingConfig` and only a run's entries) counts as a run: it resumes,
    and gets its `run.json` on resume, and `--overwrite` replaces it.

    The lock file (`RunDirLock`) does not count as content and survives
    `overwrite`: the process replacing the run keeps holding it.

    Raises:
        FileExistsError: On a folder that is not a run, a run of another
            config or a finished run (without `overwrite`), a run holding
            other files (with it); nothing is changed.
        ValueError: On a run of a newer format, or one whose training files
            changed.
    """
    run_dir = os.fspath(run_dir)
    if os.path.lexists(run_dir) and not os.path.isdir(run_dir):
        raise FileExistsError(f"run_dir={run_dir!r} is a file, not a folder; choose another "
                              "--run-dir.")
    if os.path.isdir(_aside_path(run_dir)):
        if os.path.isdir(run_dir) and _run_files(run_dir):
            drop_replaced_run(run_dir)  # a replacement killed after its first checkpoint
        else:  # one killed before it wrote a file: as if it never began
            restore_replaced_run(run_dir)
    config_path = os.path.join(run_dir, "config.json")
    if os.path.isdir(run_dir) and _run_files(run_dir):
        marker = _recognised_run(run_dir)
        if overwrite:
            others = sorted(n for n in os.listdir(run_dir) if not _is_run_entry(n))
            if others:
                raise FileExistsError(
                    f"run_dir={run_dir!r} holds files a run does not write ({others[:5]}); "
                    "nothing was changed: move them out of the folder, or choose another "
                    "--run-dir."
                )
            _set_aside(run_dir)
        elif not os.path.isfile(config_path):
            # A run killed between its first two files: started afresh.
            _clear(run_dir)
        else:
            existing = TrainingConfig.from_dict(read_json(config_path, f"run_dir={run_dir!r}"))
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
                if marker and not os.path.isfile(os.path.join(run_dir, MANIFEST)):
                    finish_run(run_dir)  # killed while it finished: model.keras is whole
                raise FileExistsError(
                    f"run_dir={run_dir!r} holds a finished run; pass --overwrite "
                    "to train it again."
                )
            _check_inputs(run_dir, marker, config)
            if not marker:  # an older run: from now on it says what it is
                atomic_write_json(os.path.join(run_dir, MARKER),
                                  format_record("run", inputs=_input_fingerprints(config)))
            return True
    _create_run(run_dir, config)
    return False


@contextlib.contextmanager
def claim_run_dir(run_dir, config, overwrite=False):
    """Locks and prepares `run_dir` (`RunDirLock`, `prepare_run_dir`) for
    the training inside; yields whether it resumes.

    If the training raises before its first checkpoint, the run directory
    is given back as it was: the run `overwrite` replaced is put back, and
    a new run's files are removed (a typo in a data path does not leave
    the folder pinned to that config).  A run that has a checkpoint stays,
    to be resumed.  Where the training ends (or checkpoints,
    `drop_replaced_run`), the replaced run is removed.

    A folder that is not a run is refused before the lock file is made in
    it: nothing in it changes.
    """
    run_dir = os.fspath(run_dir)
    if os.path.isdir(run_dir) and _run_files(run_dir):
        _recognised_run(run_dir)
    created = not os.path.lexists(run_dir)
    lock_made = not os.path.lexists(os.path.join(run_dir, LOCK_NAME))
    cleared = False
    try:
        with RunDirLock(run_dir):
            resumed = prepare_run_dir(run_dir, config, overwrite)
            try:
                yield resumed
            except BaseException:
                if (not restore_replaced_run(run_dir) and not resumed
                        and not os.path.isdir(os.path.join(run_dir, "checkpoints", "resume"))
                        and not os.path.isfile(os.path.join(run_dir, "metrics.json"))):
                    _clear(run_dir)
                    cleared = True
                raise
            drop_replaced_run(run_dir)
    finally:
        # What this failed run made: its lock file, and the folder if it made that too.
        with contextlib.suppress(OSError):
            if cleared and lock_made:
                os.remove(os.path.join(run_dir, LOCK_NAME))
            if cleared and created:
                os.rmdir(run_dir)


@dataclasses.dataclass
class Run:
    """What a finished run directory holds, loaded.

    `task` is the run's `training.tasks.Task`, its tokenizer and class
    names loaded from the run directory; `predict` answers raw inputs
    through its serving side (`serving`, `training.runs.predict`);
    `task_model.export(path, config=config)` writes its SavedModel, as
    `python -m export saved-model` does.
    """

    run_dir: str
    task: object
    config: dict
    model: keras.Model
    metrics: dict

    @property
    def serving(self):
        """The task's serving side (`training.serving.task_serving.Serving`):
        what parses, answers and exports for this run's model."""
        return self.task.serving()

    @property
    def tokenizer(self):
        """The run's tokenizer (None for numeric and image input)."""
        return self.task.tokenizer

    @property
    def label_names(self):
        """The run's class names (None for translation)."""
        return self.task.label_names

    @property
    def task_model(self):
        """The run's model with its preprocessing: a `training.task_models`
        `Translator`, `TextClassifier` or `TimeSeriesClassifier` (its model,
        tokenizer and class names), which `translate`s or `predict`s raw
        input, saves one `.keras` file and `export`s; None for images, whose
        model answers arrays itself."""
        return task_model_for(self.model, self.tokenizer, self.label_names)

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


#: What `load_run` warns of a run written before runs carried a format version.
OLDER_RUN_WARNING = (
    "run_dir={run_dir!r} was written before run directories carried a format version "
    "(it has no run.json): read as it is, its files unchecked; train it again to have "
    "them checked."
)


def load_run(run_dir):
    """Load a finished run: model, tokenizer, labels, config and metrics.

    The files are checked against the run's `manifest.json` first, and a
    file that differs (cut short by a full disk, edited) is named, never
    read.  A run of a newer format is refused in one line.  A run written
    before runs carried `run.json` is read as it is, unchecked, with a
    warning (`OLDER_RUN_WARNING`).

    Raises:
        FileNotFoundError: If `run_dir` is not a finished run.
        ValueError: On a newer format, or a file that differs from the manifest.
    """
    run_dir = os.fspath(run_dir)
    what = f"run_dir={run_dir!r}"
    model_path = os.path.join(run_dir, "model.keras")
    if not os.path.isfile(model_path):
        raise FileNotFoundError(
            f"No trained model in run_dir={run_dir!r} (missing model.keras); "
            "has the run finished?"
        )
    marker = _read_marker(run_dir, "train the run again with this one")
    if marker is None and not os.path.isfile(os.path.join(run_dir, "config.json")):
        raise FileNotFoundError(
            f"{what} is not a run directory (no {MARKER}, no config.json); pass the "
            "--run-dir of a `python -m training train`."
        )
    if marker is None:
        warnings.warn(OLDER_RUN_WARNING.format(run_dir=run_dir), UserWarning, stacklevel=2)
    elif not os.path.isfile(os.path.join(run_dir, MANIFEST)):
        raise FileNotFoundError(
            f"{what} has no {MANIFEST}: the run stopped before it finished writing; run "
            "the same train command again to finish it."
        )
    else:
        check_manifest(run_dir, "run", what, _RETRAIN)
    config = read_json(os.path.join(run_dir, "config.json"), what)
    task = get_task(config["task"]).load_assets(run_dir)
    metrics = {}
    if os.path.isfile(os.path.join(run_dir, "metrics.json")):
        metrics = read_json(os.path.join(run_dir, "metrics.json"), what)
    model = _load_model(model_path)
    if isinstance(model, TaskModel):  # a run's model with its preprocessing (its task model)
        model = model.backbone
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
