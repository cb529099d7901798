"""Nothing a user types loses their files or answers from a half-written one.

A write that fails part way (a full disk) leaves the old file.
"""

import errno
import json
import os

import pytest

from training.data import atomic


class _HalfThenFull:
    """A file whose write stores half of the bytes and fails: a full disk."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return self.f.__exit__(*exc_info)


def test_a_write_that_fails_part_way_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "metrics.json"
    atomic.atomic_write_json(path, {"old": 1})
    fdopen = os.fdopen
    monkeypatch.setattr(atomic.os, "fdopen", lambda fd, mode: _HalfThenFull(fdopen(fd, mode)))
    with pytest.raises(OSError, match="No space left"):
        atomic.atomic_write_json(path, {"new": list(range(1000))})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"old": 1}
    assert os.listdir(tmp_path) == ["metrics.json"]  # no temporary left
    # A writer that takes a path (`model.save`): the same.
    with pytest.raises(OSError, match="No space"):
        with atomic.atomic_path(path) as staged:
            with open(staged, "w") as f:
                f.write("{half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert json.loads(path.read_text()) == {"old": 1}
    assert os.listdir(tmp_path) == ["metrics.json"]
