"""The splits a task reads, and the file checks its readers share.

Each task reads its own datasets (`training.tasks.*.load_data`); they all
return a `TaskData` and find the shared corpora and files the same way.
"""

import dataclasses
import glob
import gzip
import os
import pathlib

from training.data.readers import GZIP_ERRORS, damaged_gzip, no_file

_GZIP_MAGIC = b"\x1f\x8b"

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class TaskData:
    """Train/valid/test splits; `inputs` are strings or `(N, T, F)` arrays.

    `train` may instead be a `training.data.shards.StreamedCorpus`: files
    too large to read, streamed by the task's training dataset.
    """

    train: tuple
    valid: tuple
    test: tuple
    label_names: list | None = None
    #: One line on how the training split was read (streamed or into memory), or None.
    summary: str | None = None
    #: JSON files `{name: value}` the run keeps in its `data/` folder: what
    #: the giver of in-memory data needs back from the run (the labels'
    #: own values and type, `training.estimator`), written by `Task.prepare`.
    records: dict | None = None


def resolve_data_dir(data_dir):
    """`data_dir` as given if it exists, else relative to the repository."""
    path = pathlib.Path(data_dir)
    if path.is_dir() or path.is_absolute():
        return path
    return REPO_ROOT / data_dir


def require_file(path, what):
    """`path`, or FileNotFoundError (IsADirectoryError for a directory) naming
    `what` and the path when it is no file."""
    if not os.path.isfile(path):
        raise no_file(path, what)
    return path


def check_data_files(config):
    """Refuses, before any is read, a data file of `config` that cannot be read whole.

    Each path of `train_files`, `valid_files` and `test_files` (each file a
    glob pattern matches) must be a file, and a gzip file must hold whole
    gzip streams: one cut short (a copy that stopped) would otherwise fail
    part way through the data work, or, streamed, end the training data
    without a word where it was cut (`tf.data` reads the lines before the
    cut and stops).  Checking costs one decompression of each gzip file.

    Raises:
        FileNotFoundError, IsADirectoryError: A path that is no file, or a
            pattern that matches none, naming the field and the path.
        ValueError: A gzip file cut short or damaged, naming it.
    """
    for field in ("train_files", "valid_files", "test_files"):
        for index, pattern in enumerate(getattr(config, field)):
            what = f"{field}[{index}]"
            if glob.has_magic(pattern) and not os.path.isfile(pattern):
                paths = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
                if not paths:
                    raise FileNotFoundError(f"{what}={pattern!r} matches no file.")
            else:
                paths = [require_file(pattern, what)]
            for path in paths:
                check_gzip(path)


def check_gzip(path, chunk_bytes=2**20):
    """Reads gzip file `path` to its end (nothing for another file).

    Raises:
        ValueError: It ends early or is damaged (its CRC is checked too).
    """
    with open(path, "rb") as raw:
        if raw.read(2) != _GZIP_MAGIC:
            return
        raw.seek(0)
        try:
            with gzip.GzipFile(fileobj=raw) as stream:
                while stream.read(chunk_bytes):
                    pass
        except GZIP_ERRORS as error:
            raise damaged_gzip(path, error) from None
