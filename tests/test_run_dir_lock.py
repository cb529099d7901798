"""One process per run directory: `training.runs.run_dir.RunDirLock`."""

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from cli.errors import run_reporting_errors
from tests.conftest import REPO_ROOT
from training.config import load_config
from training.runs.run_dir import (
    LOCK_NAME,
    RunDirInUseError,
    RunDirLock,
    prepare_run_dir,
)

# Holds the lock of argv[1], says so, and waits to be killed.
HOLDER = """
import sys, time
from training.runs.run_dir import RunDirLock
lock = RunDirLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder(tmp_path):
    """A separate process holding the lock of tmp_path / "run"."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "run")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        line = process.stdout.readline()
        assert line == "locked\n", process.stderr.read()
        yield process
    finally:
        process.kill()
        process.wait(timeout=30)
        process.stdout.close()
        process.stderr.close()


def test_second_process_fails_at_once_naming_the_holder(tmp_path, holder):
    with pytest.raises(RunDirInUseError) as error:
        RunDirLock(tmp_path / "run").acquire()
    message = str(error.value)
    assert f"process {holder.pid} on host {socket.gethostname()!r}" in message
    assert str(tmp_path / "run") in message
    # The command line prints it as one error line.
    assert run_reporting_errors(lambda: RunDirLock(tmp_path / "run").acquire()) == 2


def test_lock_of_a_killed_process_is_taken_over(tmp_path, holder):
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    lock_file = tmp_path / "run" / LOCK_NAME
    assert json.loads(lock_file.read_text())["pid"] == holder.pid  # left behind
    with RunDirLock(tmp_path / "run"):
        assert json.loads(lock_file.read_text())["pid"] == os.getpid()
    assert lock_file.read_text() == ""  # released
    with RunDirLock(tmp_path / "run"):  # and can be taken again
        pass


def test_one_lock_per_directory_within_a_process_too(tmp_path):
    with RunDirLock(tmp_path / "run"):
        with pytest.raises(RunDirInUseError, match=f"process {os.getpid()} "):
            RunDirLock(tmp_path / "run").acquire()
        with RunDirLock(tmp_path / "other"):  # another directory is free
            pass
    with RunDirLock(tmp_path / "run"):
        pass


def test_lock_file_is_not_run_content_and_survives_overwrite(tmp_path):
    config = load_config("tiny")
    run_dir = tmp_path / "run"
    with RunDirLock(run_dir):
        assert prepare_run_dir(run_dir, config) is False  # a new run, not "not a run dir"
        (run_dir / "checkpoints" / "old.txt").write_text("old")
        assert prepare_run_dir(run_dir, config.replace(epochs=3), overwrite=True) is False
        assert sorted(os.listdir(run_dir)) == [LOCK_NAME, "checkpoints", "config.json",
                                               "run.json"]
        assert not (run_dir / "checkpoints" / "old.txt").exists()
        # The replaced run waits beside it until the new one has a checkpoint.
        assert (tmp_path / ".run.replaced" / "checkpoints" / "old.txt").read_text() == "old"
        assert not (tmp_path / ".run.replaced" / LOCK_NAME).exists()
        with pytest.raises(RunDirInUseError):  # still held after the overwrite
            RunDirLock(run_dir).acquire()


def test_compact_finished_run_keeps_the_product_and_drops_the_checkpoints(tmp_path):
    from training.runs.run_dir import compact_finished_run

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "resume" / "step-000000004").mkdir(parents=True)
    (run_dir / "checkpoints" / "resume" / "step-000000004" / "w.h5").write_bytes(b"x" * 300)
    (run_dir / "checkpoints" / "resume" / "LATEST").write_text("step-000000004")
    (run_dir / "checkpoints" / "epoch-001.weights.h5").write_bytes(b"y" * 100)
    (run_dir / "checkpoints" / "scores.json").write_text("{}")
    (run_dir / "model.keras").write_bytes(b"m")
    with pytest.raises(FileNotFoundError, match="no metrics.json"):
        compact_finished_run(run_dir)  # an unfinished run keeps everything
    assert (run_dir / "checkpoints" / "resume" / "LATEST").exists()
    (run_dir / "metrics.json").write_text("{}")
    assert compact_finished_run(run_dir) == 300 + len("step-000000004") + 100
    assert sorted(os.listdir(run_dir / "checkpoints")) == ["scores.json"]
    assert (run_dir / "model.keras").exists()
    assert compact_finished_run(run_dir) == 0  # a second call (after a kill) is harmless
