"""Process-wide test set-up.

TensorFlow is imported once for the whole session (it costs ~6 s), and the
single physical CPU is split into two logical devices *before* any op runs, so
that `tf.distribute.MirroredStrategy` tests have two replicas on a CPU-only
machine.  Tests must not change these settings.

The checks that run wholly in other processes start in the background as
soon as the tests are collected (tests/background.py); a test that times
the wall clock asks for `quiet_machine`.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
if "PYTEST_XDIST_WORKER" in os.environ:
    # Two workers, the background checks and their subprocesses share two
    # cores: one op thread each (inherited by every process a test starts),
    # instead of pools sized to the machine that spin against each other.
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import background  # noqa: E402  (tests/, on sys.path as conftest's folder)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0],
    [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()],
)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def pytest_collection_finish(session):
    """Starts the background checks of the selected tests (none when the
    tests are only listed)."""
    if session.config.option.collectonly:
        return
    background.start(
        marker.args[0]
        for item in session.items
        for marker in item.iter_markers("background")
    )


def pytest_sessionfinish(session):
    background.stop()


#: The run ids of the xdist workers this process started (its controller's).
_XDIST_RUNS = set()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist's hook, in the controller, for each worker it starts."""
    _XDIST_RUNS.add(node.workerinput["testrunuid"])


def pytest_unconfigure(config):
    for run in _XDIST_RUNS:  # in xdist's controller, once every worker has ended
        shutil.rmtree(background.shared_folder(run), ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under pytest-xdist each test, its fixtures' set-up and tear-down
    included, holds its share of the machine; a `quiet_machine` test holds it
    alone, once the background checks have ended (tests/background.py)."""
    alone = "quiet_machine" in item.fixturenames
    if alone:
        background.wait_all()
    with background.machine_turn(alone=alone):
        yield


#: A watcher that sleeps this long wakes at once on a running machine.
_WATCH_TICK = 0.05
#: A wake-up later than this counts as the machine having stalled.
_STALL = 0.5

_WATCHER = f"""
import sys, time
stalled, path = 0.0, sys.argv[1]
with open(path, "w") as f:
    f.write("0.0")  # running
while True:
    before = time.monotonic()
    time.sleep({_WATCH_TICK})
    late = time.monotonic() - before - {_WATCH_TICK}
    if late > {_STALL}:
        stalled += late
        with open(path, "w") as f:
            f.write(repr(stalled))
"""


@pytest.fixture
def quiet_machine(tmp_path_factory):
    """Waits until the background checks have ended, and under pytest-xdist
    until the other workers' running tests have (none starts until this test
    ends): for a test that times the wall clock and must not share the cores.

    Returns `stalled()`: the seconds for which the machine itself stopped
    since then, as seen by a process of its own that only sleeps and wakes
    (a CI run of the time-budget test once took 91 s of a 60-s budget that
    it meets alone with 6 s to spare).  The time a test's own process
    spends, however slowly, is not in it: a sleeping process is woken at
    once on a busy machine, and a stopped one is not.

    The waiting is `pytest_runtest_protocol`'s, before the test's set-up, so
    that the test takes the machine only once the checks have ended.
    """
    path = tmp_path_factory.mktemp("stalls") / "stalled"
    watcher = subprocess.Popen([sys.executable, "-c", _WATCHER, str(path)])
    while not path.exists() and watcher.poll() is None:
        time.sleep(_WATCH_TICK)
    assert watcher.poll() is None, "the stall watcher ended"

    def stalled():
        return float(path.read_text() or 0.0)

    stalled.watcher = watcher
    try:
        yield stalled
    finally:
        watcher.kill()
        watcher.wait()


@pytest.fixture(autouse=True)
def _seed_and_reset_policy():
    """Every test starts from the same seeds and the float32 policy."""
    keras.utils.set_random_seed(1234)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture
def shared_data():
    """Path to ../shared/data; skips with the reason when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real corpora not present at {SHARED_DATA} (../shared/data)")
    return SHARED_DATA


@pytest.fixture
def rng():
    return np.random.default_rng(0)
