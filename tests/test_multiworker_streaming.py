"""Streamed corpora under multi-worker training: each worker reads its own
share (`training.pipeline.streaming.worker_sharding`), the shares make up
the one-worker pass, two workers on loopback train a streamed corpus with
only the chief writing and the loss curve of one worker at the same global
batch, and a killed worker's restart finishes the run."""

import collections
import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from training.data import shards
from training.pipeline import streaming
from training.text.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import multiworker_stream_worker as worker  # noqa: E402
from kill_resume import checkpoint_step  # noqa: E402
from test_distribute import _free_ports  # noqa: E402
from test_streaming import WORDS, _pairs, _rows, _shard  # noqa: E402

from training.train import train  # noqa: E402

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


def _start_workers(run_dir, patterns, rows_dir=None, fields=()):
    """Two `multiworker_stream_worker.py` processes of one cluster on loopback;
    `fields`: `FIELD=VALUE` config changes beyond the worker's `OVERRIDES`."""
    workers = [f"localhost:{port}" for port in _free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "CUDA_VISIBLE_DEVICES": "",
               "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONHASHSEED": "0"}
        command = [sys.executable, WORKER, str(run_dir), json.dumps(list(patterns))]
        command.append(str(rows_dir / f"rows{index}.json") if rows_dir is not None else "")
        command.append(json.dumps(list(fields)))
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


def _whole_pass(run_dir, patterns, fields=()):
    """The one-worker pass's rows, with the vocabulary the run saved."""
    config = worker.config_for(patterns, fields)
    return collections.Counter(
        (tuple(enc), tuple(lab)) for enc, lab in worker.share_rows(config, str(run_dir)))


#: Every sentence in the first length bucket (3 words, 4 tokens with BOS / EOS;
#: lengths < 8 take 896 // 7 = 128 sentences a batch): a worker's share of a
#: pass (about 120 pairs) is one batch, and a one-worker run with twice the
#: tokens per batch takes the whole pass (about 240) as one.  An epoch is 4
#: such updates, so the 2 epochs (no dropout: fewer than `dropout_min_epochs`)
#: take 8.
PER_WORKER_TOKENS = 896
WORKER_FIELDS = (f"tokens_per_batch={PER_WORKER_TOKENS}", "steps_per_epoch=4")


def _triples(count, seed=0):
    """`count` distinct (three words, the words reversed) pairs."""
    rng = np.random.default_rng(seed)
    triples = [(a, b, c) for a in WORDS for b in WORDS for c in WORDS if len({a, b, c}) == 3]
    chosen = rng.choice(len(triples), size=count, replace=False)
    return [(" ".join(triples[i]), " ".join(reversed(triples[i]))) for i in chosen]


def _one_worker_run(run_dir, patterns):
    """The metrics of one process trained on `patterns` at the two workers'
    global batch (twice a worker's tokens per batch), otherwise as they are."""
    config = worker.config_for(patterns, [*WORKER_FIELDS, "strategy=default",
                                          f"tokens_per_batch={2 * PER_WORKER_TOKENS}"])
    return train(config, str(run_dir), verbose=0)


def _weights(run_dir):
    import keras_transformer  # noqa: F401  (registers the model's classes)
    import training.optimization.losses  # noqa: F401

    return keras.saving.load_model(run_dir / "model.keras").get_weights()


@pytest.mark.slow
def test_two_workers_stream_their_shares_and_only_the_chief_writes(tmp_path):
    """Two workers train 4 gzip shards streamed, file-level; their shares of
    a pass are disjoint and make up the one-worker pass, and they train as
    one worker does at the same global batch.

    Sentences of one length bucket, and a token budget that holds a
    worker's share of a pass, make each step's global batch (worker 0's
    batch with worker 1's) the whole pass, as one worker's batch of twice
    the tokens is.  (Sentences of many lengths would not: each worker
    shuffles and buckets its own share, so a step's global batch holds other
    examples than the one-worker step's.)  Then the runs differ only by
    rounding, which Adam's first steps (about `lr * sign(gradient)` per
    weight) amplify on weights whose gradient is near zero:

    * The plan (peak learning rate, warm-up, updates, tokens per batch) is
      the same: the recipe counts the global batch's tokens.
    * Validation loss per epoch, two workers against one (seed 0):
      4.6718 / 4.3048 against 4.6622 / 4.2894, at most 0.016 apart.  One
      worker with seeds 0, 1, 2: 4.662, 4.474, 4.246 / 4.289, 4.153, 3.885,
      a standard deviation of about 0.21 per epoch; the tolerance, 0.05, is
      a quarter of it.  At an equal learning rate of 1e-9 (weights that do
      not move) the two runs' validation losses agree to all digits.
    * The weights: at most 0.014 apart (mean 0.0013), where seeds 0 and 1
      end at most 1.2 apart (mean 0.11).
    * Training loss per epoch: 4.5399 / 4.2023 against 4.5366 / 4.1884
      (seeds: 4.537, 4.544, 4.975 / 4.188, 4.090, 4.471).
    * Every worker logs the same training loss and metrics, after each
      batch and each epoch: `fit` reduces each step's metric results with
      `strategy.reduce("MEAN", ...)`, which all-reduces a worker's plain
      scalar across the workers
      (`training.distribute._KerasMultiWorkerMirroredStrategy.reduce`), and
      an epoch's figures are read from the metrics' variables, summed over
      the workers.  The first batch (the same initial weights) logs loss
      4.5664 on both workers, the mean of their own 4.5233 and 4.6095
      (which each logs when its figure is not reduced), and 4.5988 on one
      worker; by the end of an epoch the gap is the 0.014 above.
    """
    patterns = _shard(tmp_path, _triples(240), 4)
    run_dir = tmp_path / "run"
    processes = _start_workers(run_dir, patterns, tmp_path, WORKER_FIELDS)
    outputs = _finish(processes, timeout=240)
    for index, output in enumerate(outputs):
        assert (f"file-level sharding, worker {index} reads 2 of the 4 shard files"
                in output), output[-2000:]
        assert "per-worker batches" in output
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 2 * metrics["steps_per_epoch"] == 8
    losses = metrics["history"]["loss"]
    assert len(losses) == 2 and all(0 < loss < 10 for loss in losses)  # finite
    # Both workers logged the same (global) figures after every batch and
    # every epoch, which the chief wrote (all but each one's own wall time).
    logged = [json.loads((tmp_path / f"history{i}.json").read_text()) for i in range(2)]
    assert len(logged[0]["batches"]) == len(logged[1]["batches"]) == 8
    for ours, theirs in zip(logged[0]["batches"], logged[1]["batches"], strict=True):
        assert {"loss", "masked_accuracy"} <= set(ours) == set(theirs)
        for name in ours:
            np.testing.assert_allclose(ours[name], theirs[name], atol=1e-5, err_msg=name)
    for name in set(logged[0]["epochs"]) - {"epoch_seconds"}:
        np.testing.assert_allclose(logged[0]["epochs"][name], logged[1]["epochs"][name],
                                   atol=1e-5, err_msg=name)
        np.testing.assert_allclose(logged[0]["epochs"][name], metrics["history"][name],
                                   atol=1e-6, err_msg=name)

    shares = [collections.Counter((tuple(enc), tuple(lab)) for enc, lab in
                                  json.loads((tmp_path / f"rows{i}.json").read_text()))
              for i in range(2)]
    whole = _whole_pass(run_dir, patterns, WORKER_FIELDS)
    # The pairs less the first shard's lines held out to validate.
    assert 220 < sum(whole.values()) < 240
    assert not set(shares[0]) & set(shares[1])
    assert shares[0] + shares[1] == whole
    # Each share is one batch of at most 896 // 7 sentences; the pass is one of twice that.
    assert all(sum(share.values()) <= PER_WORKER_TOKENS // 7 for share in shares)

    one = _one_worker_run(tmp_path / "one", patterns)
    assert one["plan"] == metrics["plan"]
    for name in ("loss", "val_loss"):
        two_curve, one_curve = metrics["history"][name], one["history"][name]
        assert len(two_curve) == len(one_curve) == 2
        assert two_curve[1] < two_curve[0] - 0.2 and one_curve[1] < one_curve[0] - 0.2
        assert max(abs(a - b) for a, b in zip(two_curve, one_curve, strict=True)) < 0.05, (
            name, two_curve, one_curve)
    apart = [np.abs(a - b) for a, b in zip(_weights(run_dir), _weights(tmp_path / "one"),
                                           strict=True)]
    assert max(float(np.max(d)) for d in apart) < 0.05

    # Only the chief (worker 0) wrote: one process's summaries, one pass record.
    # (A summary file's name holds the writing process's id.)
    chief, other = (f".{process.pid}." for process in processes)
    events = [name for _, _, names in os.walk(run_dir / "logs") for name in names
              if name.startswith("events.out.tfevents")]
    assert events and all(chief in name and other not in name for name in events), events
    assert json.loads((run_dir / "stream_passes.json").read_text())["batches_per_pass"]
    assert not list(run_dir.glob("**/*worker-logs*"))


@pytest.mark.slow
def test_the_chief_killed_mid_run_rejoins_from_the_last_checkpoint(tmp_path):
    """SIGKILL the chief (worker 0, the one process that writes the run
    directory) after its first checkpoint; the cluster then restarts (the
    survivor's collectives cannot take a new peer, so it is stopped too, as
    a cluster manager does), and the restarted workers resume from that
    checkpoint and finish the run.  (A killed worker that writes nothing is
    the easier case of the same restart.)"""
    killed = 0
    patterns = _shard(tmp_path, _pairs(240), 4)
    run_dir = tmp_path / "run"
    processes = _start_workers(run_dir, patterns)
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and all(p.poll() is None for p in processes):
            if checkpoint_step(run_dir) is not None:
                break
            time.sleep(0.05)
        assert all(p.poll() is None for p in processes), "a worker ended before the kill"
        processes[killed].send_signal(signal.SIGKILL)
        processes[killed].wait()
        survivor = processes[1 - killed]
        try:  # the survivor fails or waits on its dead peer
            survivor.wait(timeout=5)
        except subprocess.TimeoutExpired:
            survivor.kill()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.communicate()
    killed_at = checkpoint_step(run_dir)
    assert not (run_dir / "metrics.json").exists()

    outputs = _finish(_start_workers(run_dir, patterns), timeout=240)
    assert f"from step {killed_at}." in outputs[0], outputs[0][-2000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert 0 < killed_at < metrics["steps"] == 2 * metrics["steps_per_epoch"]
