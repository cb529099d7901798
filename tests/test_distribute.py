"""Tests for training.distribute (PEERS.md pain point 8)."""

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from training.distribute import (
    STRATEGY_NAMES,
    WorkerRole,
    build_strategy,
    configure_logical_cpus,
    global_batch_note,
    validate_tf_config,
    worker_role,
)
from training.optimization.losses import MaskedSparseCategoricalCrossentropy

WORKER = pathlib.Path(__file__).with_name("multiworker_worker.py")
VOCAB = 6


def test_mirrored_has_two_cpu_replicas():
    strategy = build_strategy("mirrored")
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == 2


def test_default_and_one_device():
    assert build_strategy("default") is tf.distribute.get_strategy()
    one = build_strategy("one_device")
    assert isinstance(one, tf.distribute.OneDeviceStrategy)
    assert one.num_replicas_in_sync == 1


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="'tpu'.*default, mirrored, multi_worker"):
        build_strategy("tpu")
    assert STRATEGY_NAMES == ("default", "mirrored", "multi_worker", "one_device")


@pytest.mark.parametrize(
    "value, reason",
    [
        (None, "is not set"),
        ("{cluster", "is not valid JSON"),
        ('["worker"]', "is not a JSON object"),
        (
            '{"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}',
            "cluster",
        ),
        ('{"cluster": {"worker": ["localhost:1"]}}', '"task"'),
        (
            '{"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}}',
            '"task"',
        ),
        (
            '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}',
            "index",
        ),
    ],
)
def test_multi_worker_rejects_bad_tf_config(monkeypatch, value, reason):
    if value is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", value)
    with pytest.raises(ValueError, match="TF_CONFIG") as info:
        build_strategy("multi_worker")
    assert reason in str(info.value)
    assert f"TF_CONFIG={value!r}" in str(info.value)


def test_valid_tf_config_is_parsed():
    value = {
        "cluster": {"worker": ["a:1", "b:2"]},
        "task": {"type": "worker", "index": 1},
    }
    assert validate_tf_config(json.dumps(value)) == value


@pytest.mark.parametrize("tf_config, is_chief", [
    (None, True),  # one process, no cluster
    ("", True),
    ('{"task": {"type": "chief", "index": 0}}', True),
    ('{"task": {"type": "worker", "index": 0}}', True),  # a cluster without a chief
    ('{"task": {"type": "worker", "index": 1}}', False),
    # A cluster with a chief: the chief writes, worker 0 does not (one writer).
    ('{"cluster": {"chief": ["a:1"], "worker": ["b:2"]}, "task": {"type": "worker", "index": 0}}',
     False),
    ('{"cluster": {"chief": ["a:1"], "worker": ["b:2"]}, "task": {"type": "chief", "index": 0}}',
     True),
    ('{"task": {"type": "evaluator", "index": 0}}', False),
])
def test_the_worker_role_is_read_from_tf_config(monkeypatch, tf_config, is_chief):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    assert worker_role() == WorkerRole(is_chief)
    assert worker_role(tf_config) == WorkerRole(is_chief)


def test_configure_logical_cpus_after_initialisation():
    configure_logical_cpus(2)  # conftest already made two: a no-op
    with pytest.raises(RuntimeError, match=r"before TensorFlow initialises.*2 logical"):
        configure_logical_cpus(3)
    with pytest.raises(ValueError, match="n=0"):
        configure_logical_cpus(0)


@pytest.mark.slow
def test_configure_logical_cpus_in_a_fresh_process():
    code = (
        "import tensorflow as tf\n"
        "from training.distribute import build_strategy, configure_logical_cpus\n"
        "configure_logical_cpus(3)\n"
        "print(build_strategy('mirrored').num_replicas_in_sync)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=WORKER.parents[1],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "3"


def test_global_batch_note():
    strategy = build_strategy("mirrored")
    note = global_batch_note(64, strategy)
    assert note == "global batch 64 = 2 replica(s) x 32 per replica (MirroredStrategy)"
    assert "unequal" in global_batch_note(5, strategy)


def _fit_copy_task(strategy, rng, width, epochs):
    inputs = rng.integers(1, VOCAB, size=(4, 5)).astype(np.int32)
    labels = np.where(np.arange(5) < [[5], [3], [4], [1]], inputs, 0)  # copy task
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((5,), dtype="int32"), keras.layers.Embedding(VOCAB, width)]
            + [keras.layers.Dense(VOCAB)]
        )
        model.compile(keras.optimizers.Adam(0.1), MaskedSparseCategoricalCrossentropy())
    return model.fit(inputs, labels, batch_size=2, epochs=epochs, verbose=0)


def test_tiny_model_trains_under_mirrored(rng):
    losses = _fit_copy_task(build_strategy("mirrored"), rng, 8, 4).history["loss"]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.7 * losses[0]


def test_two_mirrored_strategies_in_one_process(rng):
    # Plain MirroredStrategy instances share collective keys: the second fit,
    # with other gradient shapes, would fail (tensorflow/tensorflow#62790).
    for width in (3, 7):
        history = _fit_copy_task(build_strategy("mirrored"), rng, width, 1)
        assert np.isfinite(history.history["loss"][0])


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.slow
def test_multi_worker_matches_single_device(tmp_path, rng):
    import multiworker_worker  # tests/ is on sys.path (rootdir conftest)

    inputs = rng.integers(1, VOCAB, size=(4, 6)).astype(np.int32)
    labels = np.where(np.arange(6) < [[6], [2], [5], [1]], (inputs + 1) % VOCAB, 0)
    shapes = [(VOCAB, 4), (4, VOCAB), (VOCAB,)]
    weights = {
        f"w{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)
    }
    data = {"inputs": inputs, "labels": labels, **weights}
    np.savez(tmp_path / "data.npz", **data)

    workers = [f"localhost:{port}" for port in _free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": index},
        }
        env = {
            **os.environ,
            "TF_CONFIG": json.dumps(tf_config),
            "CUDA_VISIBLE_DEVICES": "",
        }
        command = [sys.executable, str(WORKER), str(tmp_path / "data.npz")]
        processes.append(
            subprocess.Popen(
                command + [str(tmp_path / f"worker{index}.npz")],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    deadline = time.monotonic() + 120
    outputs = []
    try:
        for process in processes:
            remaining = max(deadline - time.monotonic(), 1)
            outputs.append(process.communicate(timeout=remaining)[0])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-3000:]

    want_weights, want_losses = multiworker_worker.train(
        build_strategy("default"), data
    )
    assert want_losses[-1] < want_losses[0]
    for index in range(2):
        result = np.load(tmp_path / f"worker{index}.npz")
        np.testing.assert_allclose(result["losses"], want_losses, atol=1e-5)
        for i, want in enumerate(want_weights):
            np.testing.assert_allclose(result[f"w{i}"], want, atol=1e-5)
