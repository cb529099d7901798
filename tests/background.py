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

This module imports no TensorFlow: the pool's processes import it to run a
check.
"""

import concurrent.futures
import importlib
import multiprocessing
import os
import subprocess
import sys

#: Two processes: with the pytest process that makes about three busy
#: processes on two cores while they run, and none idle.
WORKERS = 2


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
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("spawn")
            )
        for name in names:
            _, module, function, args, prepare = self._checks[name]
            if prepare is not None:
                prepare()
            self._futures[name] = self._pool.submit(call, module, function, args)

    def result(self, name):
        """The outcome of check `name`; run here and now if it was not started."""
        if name not in self._futures:
            _, module, function, args, _ = self._checks[name]
            return call(module, function, args)
        return self._futures[name].result()

    def wait_all(self):
        """Returns when every started check has ended."""
        concurrent.futures.wait(list(self._futures.values()))

    def stop(self):
        """Cancels what has not started; the running checks end on their own."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


#: The session's checks.
CHECKS = Checks()
define, start, result, wait_all, stop = (
    CHECKS.define, CHECKS.start, CHECKS.result, CHECKS.wait_all, CHECKS.stop)
