"""Streamed corpora under multi-worker training: each worker reads its own
share (`training.pipeline.streaming.worker_sharding`), the shares make up
the one-worker pass, two workers on loopback train a streamed corpus with
only the chief writing, and a killed worker's restart finishes the run."""

import os
import sys

import pytest

from training.data import shards
from training.pipeline import streaming
from training.text.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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
