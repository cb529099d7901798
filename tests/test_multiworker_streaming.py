"""Streamed corpora under multi-worker training: each worker reads its own
share (`training.pipeline.streaming.worker_sharding`), the shares make up
the one-worker pass, two workers on loopback train a streamed corpus with
only the chief writing, and a killed worker's restart finishes the run."""

import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from training.data import shards
from training.pipeline import streaming
from training.text.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_distribute import _free_ports  # noqa: E402
from test_streaming import _pairs, _rows, _shard  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(REPO, "tests", "multiworker_stream_worker.py")


# --- the sharding policy (pure) -----------------------------------------------------


def test_file_level_sharding_when_there_are_enough_files():
    shares = [streaming.worker_sharding(5, 2, i) for i in range(2)]
    assert [s.policy for s in shares] == ["files", "files"]
    assert [s.files_per_worker for s in shares] == [3, 2]
    assert "file-level" in shares[1].describe() and "2 of the 5" in shares[1].describe()
    exact = streaming.worker_sharding(4, 4, 3)
    assert (exact.policy, exact.files_per_worker) == ("files", 1)


def test_example_level_sharding_with_fewer_files_than_workers():
    share = streaming.worker_sharding(2, 3, 2)
    assert (share.policy, share.files_per_worker) == ("examples", 2)
    assert "every 3-th line" in share.describe()


def test_one_worker_reads_everything_and_bad_positions_are_named():
    assert streaming.worker_sharding(3, 1, 0).policy == "none"
    with pytest.raises(ValueError, match="worker_index=2"):
        streaming.worker_sharding(3, 2, 2)
    with pytest.raises(ValueError, match="shard_index=2"):
        streaming.StreamOptions(num_shards=2, shard_index=2)


# --- the workers' shares make up the one-worker pass ----------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    pairs = _pairs(200)
    return WordPieceTokenizer(learn_wordpiece_vocabulary(
        [s for s, _ in pairs] + [t for _, t in pairs], 120))


def _pass(patterns, tokenizer, num_shards=1, shard_index=0):
    columns = shards.shard_columns(patterns, "train")
    corpus = (columns, streaming.compressions_of(columns, shards.is_gzip))
    options = streaming.StreamOptions(seed=3, shuffle_buffer=32, num_shards=num_shards,
                                      shard_index=shard_index)
    return streaming.make_translation_stream(
        corpus, (tokenizer, tokenizer), 16, {"tokens_per_batch": 160}, options, repeat=False)


@pytest.mark.parametrize("num_files", [4, 1])  # file-level, then example-level
def test_the_workers_shares_are_disjoint_and_make_up_the_pass(tmp_path, tokenizer, num_files):
    patterns = _shard(tmp_path, _pairs(120), num_files)
    whole = _rows(_pass(patterns, tokenizer))
    shares = [_rows(_pass(patterns, tokenizer, 2, i)) for i in range(2)]
    assert sum(whole.values()) == 120
    assert all(sum(share.values()) >= 40 for share in shares)  # no worker is left idle
    assert not set(shares[0]) & set(shares[1])
    assert shares[0] + shares[1] == whole


def test_a_streamed_dataset_is_not_sharded_again_by_tf_distribute(tmp_path, tokenizer):
    import tensorflow as tf

    patterns = _shard(tmp_path, _pairs(20), 2)
    columns = shards.shard_columns(patterns, "train")
    endless = streaming.make_translation_stream(
        (columns, streaming.compressions_of(columns, shards.is_gzip)), (tokenizer, tokenizer),
        16, {"tokens_per_batch": 160},
        streaming.StreamOptions(num_shards=2, shard_index=1), passes=streaming.PassLengths())
    off = tf.data.experimental.AutoShardPolicy.OFF
    for dataset in (_pass(patterns, tokenizer, 2, 1), endless, endless.from_step(3)):
        assert dataset.options().experimental_distribute.auto_shard_policy == off


# --- two worker processes on loopback ---------------------------------------------------


def _start_workers(run_dir, patterns, rows_dir=None):
    """Two `multiworker_stream_worker.py` processes of one cluster on loopback."""
    workers = [f"localhost:{port}" for port in _free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "CUDA_VISIBLE_DEVICES": "",
               "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONHASHSEED": "0"}
        command = [sys.executable, WORKER, str(run_dir), json.dumps(list(patterns))]
        if rows_dir is not None:
            command.append(str(rows_dir / f"rows{index}.json"))
        processes.append(subprocess.Popen(command, cwd=REPO, env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    return processes


def _finish(processes, timeout):
    """The processes' outputs; fails naming the output of one that failed."""
    deadline = time.monotonic() + timeout
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=max(deadline - time.monotonic(), 1))[0])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-3000:]
    return outputs


def _whole_pass(run_dir, patterns):
    """The one-worker pass's rows, with the vocabulary the run saved."""
    import multiworker_stream_worker as worker

    config = worker.config_for(patterns)
    return collections.Counter(
        (tuple(enc), tuple(lab)) for enc, lab in worker.share_rows(config, str(run_dir)))


@pytest.mark.slow
def test_two_workers_stream_their_shares_and_only_the_chief_writes(tmp_path):
    """Two workers train 4 gzip shards streamed, file-level.

    Compared with a one-worker run by what they read, not by their loss
    curves: each worker shuffles and batches its own share by length, so a
    step's global batch (worker 0's batch with worker 1's) holds other
    examples than the one-worker stream's batch of the same tokens, and
    the curves differ by more than rounding.  What must hold is that the
    two shares of a pass are disjoint and make up the one-worker pass.
    """
    patterns = _shard(tmp_path, _pairs(240), 4)
    run_dir = tmp_path / "run"
    processes = _start_workers(run_dir, patterns, tmp_path)
    outputs = _finish(processes, timeout=240)
    for index, output in enumerate(outputs):
        assert (f"file-level sharding, worker {index} reads 2 of the 4 shard files"
                in output), output[-2000:]
        assert "per-worker batches" in output
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 2 * metrics["steps_per_epoch"]
    losses = metrics["history"]["loss"]
    assert len(losses) == 2 and all(0 < loss < 10 for loss in losses)  # finite, ln(120)≈4.8

    shares = [collections.Counter((tuple(enc), tuple(lab)) for enc, lab in
                                  json.loads((tmp_path / f"rows{i}.json").read_text()))
              for i in range(2)]
    whole = _whole_pass(run_dir, patterns)
    # The pairs less the first shard's lines held out to validate.
    assert 220 < sum(whole.values()) < 240
    assert not set(shares[0]) & set(shares[1])
    assert shares[0] + shares[1] == whole

    # Only the chief (worker 0) wrote: one process's summaries, one pass record.
    # (A summary file's name holds the writing process's id.)
    chief, other = (f".{process.pid}." for process in processes)
    events = [name for _, _, names in os.walk(run_dir / "logs") for name in names
              if name.startswith("events.out.tfevents")]
    assert events and all(chief in name and other not in name for name in events), events
    assert json.loads((run_dir / "stream_passes.json").read_text())["batches_per_pass"]
    assert not list(run_dir.glob("**/*worker-logs*"))


@pytest.mark.slow
def test_a_worker_killed_mid_run_rejoins_from_the_last_checkpoint(tmp_path):
    """SIGKILL worker 1 after the chief's first checkpoint; the cluster then
    restarts (the survivor's collectives cannot take a new peer, so it is
    stopped too, as a cluster manager does), and the restarted workers
    resume from that checkpoint and finish the run."""
    patterns = _shard(tmp_path, _pairs(240), 4)
    run_dir = tmp_path / "run"
    processes = _start_workers(run_dir, patterns)
    pointer = run_dir / "checkpoints" / "resume" / "LATEST"
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and all(p.poll() is None for p in processes):
            if pointer.exists():
                break
            time.sleep(0.05)
        assert all(p.poll() is None for p in processes), "a worker ended before the kill"
        processes[1].send_signal(signal.SIGKILL)
        processes[1].wait()
        try:  # the survivor fails or waits on its dead peer
            processes[0].wait(timeout=5)
        except subprocess.TimeoutExpired:
            processes[0].kill()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.communicate()
    killed_at = int(pointer.read_text().strip().split("-")[1])
    assert not (run_dir / "metrics.json").exists()

    outputs = _finish(_start_workers(run_dir, patterns), timeout=240)
    assert f"from step {killed_at}." in outputs[0], outputs[0][-2000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert 0 < killed_at < metrics["steps"] == 2 * metrics["steps_per_epoch"]
