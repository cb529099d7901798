"""Training corpora streamed from shard files (`training.data.shards`,
`training.pipeline.streaming`): the same examples as the in-memory path, a
bounded seeded sample, an epoch estimate without a counting pass, errors
that name the file and the line, and an exact resume after SIGKILL."""

import collections
import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from kill_resume import alongside, kill_at_checkpoint

from cli import training_commands
from training.config import TrainingConfig
from training.data import shards
from training.pipeline import datasets, streaming
from training.tasks import get_task
from training.text.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary
from training.train import _estimated_pass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "the a small big red dog cat runs sleeps on under green house tree".split()
MAX_LENGTH, TOKENS_PER_BATCH = 16, 160


def _pairs(count, seed=0):
    """`count` (source, target) sentences of varied lengths."""
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(count):
        words = list(rng.choice(WORDS, size=int(rng.integers(1, 12))))
        pairs.append((f"{i} " + " ".join(words), " ".join(reversed(words)) + f" {i}"))
    return pairs


def _write(path, lines, gzipped=False):
    data = ("\n".join(lines) + "\n").encode("utf-8")
    path.write_bytes(gzip.compress(data) if gzipped else data)
    return path


def _shard(tmp_path, pairs, num_shards, gzipped=True, name="train"):
    """`pairs` split into `num_shards` source and target files; their glob patterns."""
    suffix = ".gz" if gzipped else ""
    for k in range(num_shards):
        part = pairs[k::num_shards]
        _write(tmp_path / f"{name}.{k:02d}.de{suffix}", [s for s, _ in part], gzipped)
        _write(tmp_path / f"{name}.{k:02d}.en{suffix}", [t for _, t in part], gzipped)
    return (str(tmp_path / f"{name}.*.de{suffix}"), str(tmp_path / f"{name}.*.en{suffix}"))


@pytest.fixture(scope="module")
def tokenizer():
    pairs = _pairs(400)
    return WordPieceTokenizer(learn_wordpiece_vocabulary(
        [s for s, _ in pairs] + [t for _, t in pairs], 120))


def _stream(patterns, tokenizer, options=None, repeat=False):
    columns = shards.shard_columns(patterns, "train")
    corpus = (columns, streaming.compressions_of(columns, shards.is_gzip))
    return streaming.make_translation_stream(
        corpus, (tokenizer, tokenizer), MAX_LENGTH, {"tokens_per_batch": TOKENS_PER_BATCH},
        options or streaming.StreamOptions(seed=5, shuffle_buffer=64), repeat=repeat,
    )


def _rows(dataset):
    """Multiset of (encoder ids, labels) rows without padding."""
    rows = collections.Counter()
    for features, labels in dataset:
        for enc, lab in zip(features["encoder_token_ids"].numpy(), labels.numpy(), strict=True):
            rows[(tuple(enc[enc > 0]), tuple(lab[lab > 0]))] += 1
    return rows


def _batches(dataset):
    return [(f["encoder_token_ids"].numpy().tolist(), y.numpy().tolist()) for f, y in dataset]


# --- the same examples as in memory ---------------------------------------------


def test_a_streamed_pass_holds_the_in_memory_examples(tmp_path, tokenizer):
    pairs = _pairs(300)
    patterns = _shard(tmp_path, pairs, 3)
    streamed = _stream(patterns, tokenizer)
    in_memory = datasets.make_translation_dataset(
        [s for s, _ in pairs], [t for _, t in pairs], tokenizer, tokenizer, MAX_LENGTH,
        TOKENS_PER_BATCH, seed=5)
    rows = _rows(streamed)
    assert rows == _rows(in_memory)
    assert sum(rows.values()) == 300
    # Batched by length as in memory: no batch exceeds the token budget.
    for features, labels in streamed:
        longest = max(features["encoder_token_ids"].shape[1], labels.shape[1])
        assert labels.shape[0] * longest <= TOKENS_PER_BATCH


def test_gzip_shards_and_a_glob_read_what_one_plain_file_reads(tmp_path, tokenizer):
    pairs = _pairs(120)
    plain = _shard(tmp_path, pairs, 1, gzipped=False, name="one")
    sharded = _shard(tmp_path, pairs, 4, gzipped=True, name="many")
    assert len(shards.shard_columns(sharded, "train")[0]) == 4
    assert _rows(_stream(plain, tokenizer)) == _rows(_stream(sharded, tokenizer))


def test_the_stream_is_a_pure_function_of_the_seed(tmp_path, tokenizer):
    patterns = _shard(tmp_path, _pairs(200), 3)
    stream = _stream(patterns, tokenizer, repeat=True)
    first = _batches(stream.take(40))
    assert first == _batches(stream.take(40))  # a fresh iterator: the same batches
    assert _batches(stream.skip(25).take(15)) == first[25:]  # the resume
    one_pass = _batches(_stream(patterns, tokenizer))
    assert first[:len(one_pass)] == one_pass
    assert first[len(one_pass):2 * len(one_pass)] != one_pass  # pass 1 reshuffled
    other = _stream(patterns, tokenizer, streaming.StreamOptions(seed=6, shuffle_buffer=64))
    assert _batches(other) != one_pass


def test_a_resume_starts_reading_at_the_pass_of_its_step(tmp_path, tokenizer):
    patterns = _shard(tmp_path, _pairs(120), 3)
    columns = shards.shard_columns(patterns, "train")
    corpus = (columns, streaming.compressions_of(columns, shards.is_gzip))
    path = str(tmp_path / "stream_passes.json")

    def stream(passes):
        return streaming.make_translation_stream(
            corpus, (tokenizer, tokenizer), MAX_LENGTH, {"tokens_per_batch": TOKENS_PER_BATCH},
            streaming.StreamOptions(seed=5, shuffle_buffer=64), passes=passes)

    recorder = streaming.PassLengths(path)
    batches = _batches(stream(recorder).take(100))
    per_pass = len(_batches(_stream(patterns, tokenizer)))
    assert recorder.counts[:2] == [per_pass, per_pass]  # passes 0 and 1 read to their end
    reloaded = streaming.PassLengths(path)  # as a resumed run reads them
    assert reloaded.counts == recorder.counts
    for step in (0, per_pass - 1, per_pass + 3, 2 * per_pass + 5):
        assert reloaded.start(step)[0] == min(step // per_pass, len(reloaded.counts))
        assert _batches(stream(reloaded).from_step(step).take(10)) == batches[step:step + 10]


def test_held_out_lines_leave_the_first_shard_only(tmp_path, tokenizer):
    pairs = _pairs(90)
    patterns = _shard(tmp_path, pairs, 3)
    options = streaming.StreamOptions(seed=5, held_out_every=10, held_out_lines=25)
    rows = _rows(_stream(patterns, tokenizer, options))
    assert sum(rows.values()) == 90 - 3  # lines 1, 11 and 21 of shard 0
    left_out = {s for s, _ in pairs[0::3][0:25:10]}
    sources = {tuple(tokenizer.tokenize(tf.constant([s]))[0].numpy()) for s in left_out}
    assert not sources & {enc for enc, _ in rows}


# --- the sample and the estimate -------------------------------------------------------


def test_the_sample_is_seeded_bounded_and_the_whole_of_a_small_corpus(tmp_path):
    pairs = _pairs(600)
    columns = shards.shard_columns(_shard(tmp_path, pairs, 3), "train")
    sample, heads = shards.sample_rows(columns, 50, seed=1)
    again, _ = shards.sample_rows(columns, 50, seed=1)
    other, _ = shards.sample_rows(columns, 50, seed=2)
    assert len(sample) == 50 and sample == again and sample != other
    assert sum(heads.read) <= shards.READ_FACTOR * 50 and not any(heads.ended)
    # Gzip shards: their text's size (the trailer's) over the head's bytes per line.
    assert abs(heads.estimated_lines() - 600) / 600 < 0.1, heads.estimated_lines()
    assert set(sample) <= set(pairs)
    whole, heads = shards.sample_rows(columns, 1000, seed=1)
    assert sorted(whole) == sorted(pairs) and all(heads.ended)
    assert heads.estimated_lines() == 600


def _config(patterns, **overrides):
    values = dict(task="translation", dataset="files", train_files=patterns,
                  in_memory_limit_mb=0, vocabulary_size=120, max_sequence_length=MAX_LENGTH,
                  tokens_per_batch=TOKENS_PER_BATCH, model_preset="tiny")
    return TrainingConfig.from_dict({**values, **overrides})


def test_the_vocabulary_learns_from_the_seeded_sample(tmp_path):
    patterns = _shard(tmp_path, _pairs(600), 3)
    vocabularies = []
    for run, seed in (("a", 0), ("b", 0), ("c", 3)):
        config = _config(patterns, vocabulary_sample_lines=40, seed=seed)
        task = get_task("translation")
        data = task.load_data(config, str(tmp_path))
        assert isinstance(data.train, shards.StreamedCorpus)
        assert len(data.train.sample[0]) == 40
        os.makedirs(tmp_path / run)
        task.prepare(config, data, str(tmp_path / run))
        vocabularies.append(task.tokenizer.vocabulary)
    assert vocabularies[0] == vocabularies[1] != vocabularies[2]


def test_the_epoch_estimate_is_within_ten_percent_of_a_pass(tmp_path):
    patterns = _shard(tmp_path, _pairs(3000), 3, gzipped=False)
    valid = _shard(tmp_path, _pairs(20, seed=1), 1, gzipped=False, name="valid")
    config = _config(patterns, vocabulary_sample_lines=300,
                     valid_files=[v.replace("*", "00") for v in valid])
    task = get_task("translation")
    data = task.load_data(config, str(tmp_path))
    assert not data.train.exact  # a third of each shard read: sizes estimate the rest
    assert abs(data.train.num_examples - 3000) / 3000 < 0.1
    task.prepare(config, data, str(tmp_path))
    steps, batch_tokens = _estimated_pass(config, task, data.train)
    counted = sum(1 for _ in task.make_dataset(config, data.train, shuffle=True))
    assert abs(steps - counted) / counted < 0.1, (steps, counted)
    assert batch_tokens > 0


def test_the_size_limit_picks_the_path_and_small_shards_are_read_into_memory(tmp_path):
    pairs = _pairs(300)
    patterns = _shard(tmp_path, pairs, 3)
    task = get_task("translation")
    data = task.load_data(_config(patterns, in_memory_limit_mb=64), str(tmp_path))
    assert "read into memory" in data.summary
    shard_order = [p for k in range(3) for p in pairs[k::3]]
    train, valid = data.train, data.valid  # one pair in 50 held out, as for one file
    assert len(train[0]) + len(valid[0]) == 300
    assert set(zip(*train, strict=True)) | set(zip(*valid, strict=True)) == set(shard_order)
    data = task.load_data(_config(patterns), str(tmp_path))  # in_memory_limit_mb=0
    assert isinstance(data.train, shards.StreamedCorpus) and "streamed from 6 files" in data.summary
    assert data.train.num_examples == 298 and data.valid[0] == [pairs[0][0], pairs[150][0]]


def test_a_streamed_text_corpus_holds_out_and_refuses_cross_fitting(tmp_path):
    lines = [f"{'pos' if i % 2 else 'neg'}\tword {i}" for i in range(300)]
    _write(tmp_path / "a.txt", lines)
    config = TrainingConfig.from_dict(dict(
        task="classification", dataset="files", train_files=[str(tmp_path / "*.txt")],
        in_memory_limit_mb=0, ensemble_size=1))
    data = get_task("classification").load_data(config, str(tmp_path))
    assert isinstance(data.train, shards.StreamedCorpus)
    assert data.label_names == ["neg", "pos"] and data.train.num_examples == 270
    assert data.valid[0] == [f"word {i}" for i in range(0, 300, 10)]
    assert list(data.valid[1]) == [0] * 30
    # Below the limit, a glob's files are read into memory as one corpus.
    _write(tmp_path / "b.txt.gz", ["maybe\tanother class"] * 20, gzipped=True)
    data = get_task("classification").load_data(
        config.replace(in_memory_limit_mb=64, train_files=[str(tmp_path / "*.txt*")]),
        str(tmp_path))
    assert "320 examples read into memory" in data.summary
    assert data.label_names == ["maybe", "neg", "pos"]
    assert len(data.train[0]) + len(data.valid[0]) == 320
    with pytest.raises(ValueError, match="cross_fit=true with an ensemble of 5"):
        get_task("classification").load_data(
            config.replace(ensemble_size=None, cross_fit=True), str(tmp_path))


# --- errors: file and line ----------------------------------------------------------------


def _stream_error(patterns, tokenizer):
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        for _ in _stream(patterns, tokenizer):
            pass
    message = streaming.data_error_message(caught.value)
    assert message is not None, caught.value
    return message


def test_a_glob_matching_nothing_and_a_missing_file_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing"):
        shards.stream_or_read([str(tmp_path / "nothing.*.de")], "train", 0)
    with pytest.raises(FileNotFoundError, match="absent.de"):
        shards.stream_or_read([str(tmp_path / "absent.de")], "train", 0)


def test_an_encoding_the_stream_cannot_read_is_refused_by_name():
    assert streaming.StreamOptions(encoding="latin-1").encoding == "latin-1"
    with pytest.raises(ValueError, match="encoding='utf-16' cannot be streamed"):
        streaming.StreamOptions(encoding="utf-16")


def test_a_latin1_shard_streams_as_it_reads_into_memory(tmp_path, tokenizer):
    (tmp_path / "l.de").write_bytes("Café über\nnaïve\n".encode("latin-1"))
    (tmp_path / "l.en").write_bytes(b"coffee\nnaive\n")
    columns = shards.shard_columns([str(tmp_path / "l.de"), str(tmp_path / "l.en")], "train")
    lines = streaming.line_pass(columns, streaming.compressions_of(columns, shards.is_gzip),
                                streaming.StreamOptions(encoding="latin-1"),
                                tf.constant(0, tf.int64))
    (sources, _), numbers, _ = next(iter(lines))
    assert [s.decode("utf-8") for s in sources.numpy()] == ["Café über", "naïve"]
    assert numbers.numpy().tolist() == [1, 2]


def test_unpaired_and_empty_shards_are_named(tmp_path):
    patterns = _shard(tmp_path, _pairs(30), 3)
    os.remove(tmp_path / "train.02.en.gz")
    with pytest.raises(ValueError, match="3 files.*2 files"):
        shards.shard_columns(patterns, "train")
    _write(tmp_path / "train.02.en.gz", [], gzipped=True)
    (tmp_path / "train.02.en.gz").write_bytes(gzip.compress(b""))
    with pytest.raises(ValueError, match=r"train\.02\.en\.gz' is empty"):
        shards.shard_columns(patterns, "train")


def test_shards_of_different_lengths_are_named_with_the_line(tmp_path, tokenizer):
    pairs = _pairs(60)
    patterns = _shard(tmp_path, pairs, 2)
    _write(tmp_path / "train.01.en.gz", [t for _, t in pairs[1::2]][:-4], gzipped=True)
    message = _stream_error(patterns, tokenizer)
    assert "train.01.de.gz" in message and "train.01.en.gz" in message
    assert "line 27" in message  # 30 source lines, 26 target lines
    # Reading the sample reaches it too, with the same file and line.
    with pytest.raises(ValueError, match="train.01.en.gz' ends before line 27"):
        shards.read_heads(shards.shard_columns(patterns, "train"), 1000)


def test_invalid_utf8_in_the_middle_of_a_shard_is_named_with_the_line(tmp_path, tokenizer):
    pairs = _pairs(40)
    patterns = _shard(tmp_path, pairs, 2, gzipped=False)
    lines = [s.encode() for s, _ in pairs[0::2]]
    lines[13] = b"ein \xff kaputter satz"
    (tmp_path / "train.00.de").write_bytes(b"\n".join(lines) + b"\n")
    message = _stream_error(patterns, tokenizer)
    assert "train.00.de line 14 is not valid UTF-8" in message


def test_a_blank_line_of_a_pair_is_named(tmp_path, tokenizer):
    pairs = _pairs(40)
    patterns = _shard(tmp_path, pairs, 2)
    targets = [t for _, t in pairs[1::2]]
    targets[6] = "   "
    _write(tmp_path / "train.01.en.gz", targets, gzipped=True)
    assert "train.01.en.gz line 7 is empty" in _stream_error(patterns, tokenizer)


def test_a_bad_shard_stops_the_command_with_one_line_naming_it(tmp_path, capsys):
    pairs = _pairs(200)
    patterns = _shard(tmp_path, pairs, 2)
    targets = [t for _, t in pairs[1::2]]
    targets[80] = "   "  # past the sample's head: found by the stream
    _write(tmp_path / "train.01.en.gz", targets, gzipped=True)
    argv = ["train", "--config", "tiny", "--run-dir", str(tmp_path / "run"), "--verbose", "0"]
    for item in ("dataset=files", f"train_files={json.dumps(list(patterns))}",
                 "in_memory_limit_mb=0", "vocabulary_sample_lines=40", "epochs=1",
                 "eval_sentences=0", "tokens_per_batch=192"):
        argv += ["--set", item]
    assert training_commands.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "train.01.en.gz line 81 is empty" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


# --- text classification ----------------------------------------------------------------


def test_a_streamed_classification_pass_holds_the_in_memory_examples(tmp_path, tokenizer):
    rng = np.random.default_rng(0)
    lines = [f"{'pos' if i % 3 else 'neg'}\t" + " ".join(rng.choice(WORDS, size=5))
             for i in range(150)]
    lines[7] = ""  # blank lines are skipped, as in memory
    _write(tmp_path / "a.txt", lines[:70])
    _write(tmp_path / "b.txt.gz", lines[70:], gzipped=True)
    columns = shards.shard_columns([str(tmp_path / "*.txt*")], "train")
    corpus = (columns, streaming.compressions_of(columns, shards.is_gzip))
    names = ["neg", "pos"]
    streamed = streaming.make_classification_stream(
        corpus, tokenizer, names, {"max_sequence_length": 8, "batch_size": 16},
        streaming.StreamOptions(seed=1, shuffle_buffer=32), repeat=False)
    kept = [line for line in lines if line]
    in_memory = datasets.make_classification_dataset(
        [line.split("\t")[1] for line in kept],
        [names.index(line.split("\t")[0]) for line in kept], tokenizer, 8, 16, seed=1)

    def rows(dataset):
        return collections.Counter(
            (tuple(ids[ids > 0]), int(label))
            for x, y in dataset for ids, label in zip(x["token_ids"].numpy(), y.numpy(),
                                                      strict=True))

    assert rows(streamed) == rows(in_memory) and sum(rows(streamed).values()) == 149
    _write(tmp_path / "b.txt.gz", lines[70:100] + ["maybe\tan unknown class"], gzipped=True)
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        list(streaming.make_classification_stream(
            corpus, tokenizer, names, {"max_sequence_length": 8, "batch_size": 16},
            streaming.StreamOptions(seed=1), repeat=False))
    assert "b.txt.gz line 31 has a label" in streaming.data_error_message(caught.value)


# --- resume -----------------------------------------------------------------------------


def _train_command(run_dir, patterns):
    command = [sys.executable, "-m", "training", "train", "--config", "tiny",
               "--run-dir", str(run_dir), "--verbose", "0"]
    for item in ("dataset=files", f"train_files={json.dumps(list(patterns))}",
                 "in_memory_limit_mb=0", "deterministic=true", "epochs=2",
                 "eval_sentences=0", "beam_size=1", "checkpoint_every_steps=3",
                 "tokens_per_batch=192"):
        command += ["--set", item]
    return command


@pytest.mark.slow
def test_a_streamed_run_killed_mid_epoch_resumes_to_the_same_weights(tmp_path):
    """SIGKILL mid-epoch of a run streaming 3 gzip shards; the rerun's weights
    equal an uninterrupted run's."""
    from training.runs.run_dir import load_run

    patterns = _shard(tmp_path, _pairs(360), 3)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONHASHSEED="0")
    # The uninterrupted run and the one to kill are independent commands:
    # they run side by side.
    reference, interrupted = tmp_path / "reference", tmp_path / "interrupted"

    def in_the_second_epoch(step):
        """Killed in the second epoch, so that the resume starts reading at
        pass 1 (the first pass's length, recorded as the stream read past it)."""
        passes = interrupted / "stream_passes.json"
        if not passes.exists():
            return False
        first = json.loads(passes.read_text())["batches_per_pass"][0]
        return step > first + 1 and step % first

    with alongside(_train_command(reference, patterns), cwd=REPO, env=env):
        process = subprocess.Popen(_train_command(interrupted, patterns), cwd=REPO, env=env)
        killed_at = kill_at_checkpoint(process, interrupted, in_the_second_epoch)
    metrics = json.loads((reference / "metrics.json").read_text())
    steps_per_epoch = metrics["steps_per_epoch"]
    assert steps_per_epoch > 4
    # The start-up a user waits through: reading, sampling, vocabulary, estimate, model.
    assert 0 < metrics["first_update_at_second"] < metrics["total_seconds"]
    assert steps_per_epoch < killed_at < 2 * steps_per_epoch
    recorded = json.loads((interrupted / "stream_passes.json").read_text())["batches_per_pass"]
    assert recorded == [steps_per_epoch]
    subprocess.run(_train_command(interrupted, patterns), check=True, cwd=REPO, env=env,
                   timeout=300)
    assert json.loads((interrupted / "metrics.json").read_text())["steps"] == 2 * steps_per_epoch
    for a, b in zip(load_run(reference).model.weights, load_run(interrupted).model.weights,
                    strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6)


def test_the_classification_task_keeps_the_stream_s_resume_start():
    """The text task feeds the bare `token_ids`; its map must keep
    `from_step`, or a resumed run re-reads every pass before its step."""
    from training.tasks.text_classification import _bare_token_ids

    def stream_from(start):
        return tf.data.Dataset.range(start, start + 50).map(
            lambda i: ({"token_ids": tf.fill([2], i)}, i % 3))

    stream = stream_from(0)
    stream.from_step = stream_from
    bare = _bare_token_ids(stream)
    resumed = [int(x[0]) for x, _ in bare.from_step(7).take(3)]
    assert resumed == [7, 8, 9]
    assert [int(x[0]) for x, _ in bare.take(2)] == [0, 1]
    assert not hasattr(_bare_token_ids(stream_from(0)), "from_step")
