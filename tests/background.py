"""Checks that run wholly in other processes, started as soon as the session has
collected its tests.

Most of the suite runs in the pytest process and keeps about one of the two
cores busy. A check that runs entirely in subprocesses (the JAX backend check,
each notebook in small mode) needs nothing from this process, so it does not
wait for its turn: a test declares its check with the `background` marker,
`pytest_collection_finish` (conftest.py) starts the checks of the selected
tests in a pool of `WORKERS` processes, the costliest first, and the test
reads the outcome with `result(name)`. A test that times the wall clock asks
for the `quiet_machine` fixture, which waits until every check has ended.

Under pytest-xdist (the README's test command runs two workers) every
worker collects the same tests, and one of them, `gw0`, runs the checks:
each outcome is written to a folder the run's workers share (named by
xdist's run id), where a test on another worker reads it. The same folder
holds the lock of `machine_turn`: every test holds a shared turn, and a
test that times the wall clock (`quiet_machine`) holds the machine alone.

This module imports no TensorFlow: the pool's processes import it to run a
check.
"""

import atexit
import concurrent.futures
import contextlib
import fcntl
import importlib
import multiprocessing
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
import tempfile
import time

#: Two processes: with the pytest process that makes about three busy
#: processes on two cores while they run, and none idle.
WORKERS = 2
#: The longest a test on one xdist worker waits for a check another runs.
REMOTE_TIMEOUT = 3600
#: How often it looks.
POLL_SECONDS = 0.25


def shared_folder(run=None):
    """The folder the xdist workers of run `run` (this worker's run if None)
    share, or None outside xdist."""
    run = run or os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return None
    folder = pathlib.Path(tempfile.gettempdir()) / f"keras-transformer-tests-{run}"
    folder.mkdir(exist_ok=True)
    return folder


def runs_checks():
    """Whether this process runs the checks: outside xdist, or its first worker."""
    return os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0"


def _outcome_path(folder, name):
    return folder / ("check-" + "".join(c if c.isalnum() else "_" for c in name))


def _write_outcome(path, future):
    """Writes what `future` gave (its value, or its error) to `path`, whole."""
    error = future.exception()
    outcome = ("error", f"{type(error).__name__}: {error}") if error else ("value", future.result())
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(pickle.dumps(outcome))
    os.replace(partial, path)


def _read_outcome(path, name):
    """Waits for the outcome another worker writes to `path`; returns its value."""
    deadline = time.monotonic() + REMOTE_TIMEOUT
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"check {name!r} of xdist worker gw0 wrote no outcome to "
                               f"{path} in {REMOTE_TIMEOUT} s")
        time.sleep(POLL_SECONDS)
    kind, value = pickle.loads(path.read_bytes())
    if kind == "error":
        raise RuntimeError(f"check {name!r} failed on xdist worker gw0: {value}")
    return value


@contextlib.contextmanager
def machine_turn(alone=False):
    """Holds this run's machine: shared with the other xdist workers' tests, or
    `alone` (it waits for their running tests to end, and none starts until it
    is released). A turnstile lock taken before the machine's keeps a waiting
    `alone` from being passed by tests that start after it. Nothing outside
    xdist."""
    folder = shared_folder()
    if folder is None:
        yield
        return
    with open(folder / "turnstile.lock", "a") as turnstile, \
            open(folder / "machine.lock", "a") as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


def built_once(name, write, read):
    """`read(path)` of what `write(path)` wrote: once for the whole run.

    Under xdist the first worker to ask writes it into the run's shared
    folder, holding a lock, and every worker (that one included) reads it
    from there: a trained model or an export that each worker would
    otherwise build for itself. Outside xdist, `write` goes to a fresh
    temporary folder removed at exit."""
    folder = shared_folder()
    if folder is None:
        directory = tempfile.mkdtemp(prefix=f"keras-transformer-{name}-")
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        path = pathlib.Path(directory) / name
        write(path)
        return read(path)
    path = folder / f"built-{name}"
    with open(folder / f"built-{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (folder / f"built-{name}.done").exists():
                shutil.rmtree(path, ignore_errors=True)
                write(path)
                (folder / f"built-{name}.done").touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return read(path)


def call(module, function, args):
    """`module.function(*args)`, in whichever process runs it."""
    return getattr(importlib.import_module(module), function)(*args)


def run_script(path, env, cwd, timeout):
    """Runs `python3 path` in `cwd` with `env` added to this environment; returns
    (exit status, stdout, stderr). A check for a script that must have a
    process of its own (another Keras backend, say)."""
    result = subprocess.run(
        [sys.executable, str(path)], env={**os.environ, **env},
        capture_output=True, text=True, timeout=timeout, cwd=cwd,
    )
    return result.returncode, result.stdout, result.stderr


class Checks:
    """Named checks, each `module.function(*args)`, run in a process pool."""

    def __init__(self, workers=WORKERS):
        self.workers = workers
        self._checks = {}  # name -> (cost in seconds alone, module, function, args, prepare)
        self._futures = {}
        self._remote = {}  # name -> the outcome file another xdist worker writes
        self._pool = None

    def define(self, name, cost, module, function, *args, prepare=None):
        """Declares check `name`: `module.function(*args)`, about `cost` s alone.

        `module` is a name the pool's processes can import (this process's
        `sys.path` is theirs), and the function returns what its test asserts
        on. `prepare`, if given, runs here before the check starts (it must
        not mind being called again), for set-up that two processes must not
        do at once.
        """
        self._checks[name] = (cost, module, function, args, prepare)

    def start(self, names):
        """Starts the declared checks among `names`, the costliest first."""
        names = sorted(set(names) & set(self._checks), key=lambda n: -self._checks[n][0])
        if not names:
            return
        folder = shared_folder()
        if folder is not None and not runs_checks():
            self._remote.update((name, _outcome_path(folder, name)) for name in names)
            return
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("spawn")
            )
        for name in names:
            _, module, function, args, prepare = self._checks[name]
            if prepare is not None:
                prepare()
            self._futures[name] = self._pool.submit(call, module, function, args)
        if folder is not None:  # for the other workers' tests
            for name in names:
                path = _outcome_path(folder, name)
                self._futures[name].add_done_callback(
                    lambda future, path=path: _write_outcome(path, future))

    def result(self, name):
        """The outcome of check `name`; run here and now if it was not started."""
        if name in self._remote:
            return _read_outcome(self._remote[name], name)
        if name not in self._futures:
            _, module, function, args, _ = self._checks[name]
            return call(module, function, args)
        return self._futures[name].result()

    def wait_all(self):
        """Returns when every started check has ended (on any xdist worker)."""
        concurrent.futures.wait(list(self._futures.values()))
        for name, path in self._remote.items():
            with contextlib.suppress(RuntimeError):
                _read_outcome(path, name)

    def stop(self):
        """Cancels what has not started, and the running checks end on their
        own; under xdist it first waits for them all, as other workers' tests
        may still read them."""
        if self._pool is not None:
            if shared_folder() is not None:
                self.wait_all()
            self._pool.shutdown(wait=False, cancel_futures=True)


#: The session's checks.
CHECKS = Checks()
define, start, result, wait_all, stop = (
    CHECKS.define, CHECKS.start, CHECKS.result, CHECKS.wait_all, CHECKS.stop)
