"""The splits a task reads, and the file checks its readers share.

Each task reads its own datasets (`training.tasks.*.load_data`); they all
return a `TaskData` and find the shared corpora and files the same way.
"""

import dataclasses
import os
import pathlib

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


def resolve_data_dir(data_dir):
    """`data_dir` as given if it exists, else relative to the repository."""
    path = pathlib.Path(data_dir)
    if path.is_dir() or path.is_absolute():
        return path
    return REPO_ROOT / data_dir


def require_file(path, what):
    """`path`, or FileNotFoundError naming `what` and the path when it is no file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what} not found: {os.fspath(path)!r}.")
    return path
