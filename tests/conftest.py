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

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

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


@pytest.fixture
def quiet_machine():
    """Waits until the background checks have ended: for a test that times
    the wall clock and must not share the cores with them."""
    background.wait_all()


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
