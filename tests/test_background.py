"""tests/background.py: the checks that start with the session run in other
processes, the costliest first, and a test reads what each returned."""

import os
import shutil
import threading
import time
import uuid

import background
import pytest


def test_started_checks_run_elsewhere_costliest_first_and_others_run_here(monkeypatch):
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID"):  # as outside xdist
        monkeypatch.delenv(name, raising=False)
    prepared = []
    checks = background.Checks(workers=1)  # one process: they run in the order started
    checks.define("cheap", 1, "time", "monotonic")
    checks.define("dear", 5, "time", "monotonic", prepare=lambda: prepared.append("dear"))
    checks.define("pid", 3, "os", "getpid")
    checks.define("sum", 2, "builtins", "sum", [1, 2, 3])
    checks.define("not selected", 4, "os", "getpid")
    try:
        checks.start(["cheap", "sum", "dear", "pid", "never declared"])
        assert prepared == ["dear"]  # here, before it started
        assert checks.result("sum") == 6
        assert checks.result("pid") != os.getpid()
        assert checks.result("dear") < checks.result("cheap")
        checks.wait_all()
        assert checks.result("not selected") == os.getpid()
    finally:
        checks.stop()


def _as_xdist_worker(monkeypatch, worker, run):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", run)


def test_under_xdist_the_first_worker_runs_the_checks_and_another_reads_them(monkeypatch):
    run = f"check-outcomes-{uuid.uuid4().hex}"
    runner, reader = background.Checks(workers=1), background.Checks(workers=1)
    for checks in (runner, reader):
        checks.define("pid", 2, "os", "getpid")
        checks.define("fails", 1, "builtins", "int", "not a number")
    try:
        _as_xdist_worker(monkeypatch, "gw1", run)
        reader.start(["pid", "fails"])  # started nothing: gw0 runs them
        assert reader._pool is None
        _as_xdist_worker(monkeypatch, "gw0", run)
        runner.start(["pid", "fails"])
        _as_xdist_worker(monkeypatch, "gw1", run)
        pid = reader.result("pid")
        assert pid == runner.result("pid") and pid != os.getpid()
        with pytest.raises(RuntimeError, match="check 'fails' failed on xdist worker gw0: "
                                               "ValueError: invalid literal"):
            reader.result("fails")
        reader.wait_all()
    finally:
        runner.stop()
        shutil.rmtree(background.shared_folder())


def test_a_test_that_asks_for_the_machine_alone_waits_and_is_not_passed(monkeypatch):
    """Shared turns (other workers' tests) end before an `alone` turn starts,
    and a shared turn asked for after it waits until it ends."""
    _as_xdist_worker(monkeypatch, "gw0", f"machine-turn-{uuid.uuid4().hex}")
    events, release_first = [], threading.Event()

    def hold(name, alone, until=None):
        with background.machine_turn(alone=alone):
            events.append(f"{name} in")
            if until is not None:
                until.wait(10)
            time.sleep(0.05)
            events.append(f"{name} out")

    first = threading.Thread(target=hold, args=("shared 1", False, release_first))
    first.start()
    while "shared 1 in" not in events:
        time.sleep(0.01)
    quiet = threading.Thread(target=hold, args=("alone", True))
    quiet.start()
    time.sleep(0.3)
    later = threading.Thread(target=hold, args=("shared 2", False))
    later.start()
    time.sleep(0.3)
    assert events == ["shared 1 in"]  # the alone turn waits; the later one queues behind it
    release_first.set()
    for thread in (first, quiet, later):
        thread.join(10)
    try:
        assert events == ["shared 1 in", "shared 1 out", "alone in", "alone out",
                          "shared 2 in", "shared 2 out"]
    finally:
        shutil.rmtree(background.shared_folder())


def test_what_the_workers_share_is_built_once_and_read_by_each(monkeypatch):
    """Two workers asking at once: one writes, both read what it wrote; outside
    xdist each process writes its own."""
    run = f"built-once-{uuid.uuid4().hex}"
    _as_xdist_worker(monkeypatch, "gw0", run)
    writes, answers = [], []

    def write(path):
        writes.append(path)
        time.sleep(0.2)  # the other asks while this one writes
        path.write_text("built")

    def ask():
        answers.append(background.built_once("model.keras", write, lambda p: (p, p.read_text())))

    try:
        askers = [threading.Thread(target=ask) for _ in range(2)]
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join()
        assert len(writes) == 1 and answers == [(writes[0], "built")] * 2
        assert writes[0].parent == background.shared_folder()
    finally:
        shutil.rmtree(background.shared_folder())
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    ask()
    assert len(writes) == 2 and writes[1] != writes[0] and answers[-1] == (writes[1], "built")
