"""`python -m training prepare`: a corpus tokenized once into TFRecord shards,
read by a run with `prepared_dir` as the text stream would give it."""

import collections
import json
import os

import pytest
import tensorflow as tf
from test_streaming import MAX_LENGTH, _config, _pairs, _rows, _shard, _write

from cli import training_commands
from training.config import TrainingConfig
from training.pipeline import prepared
from training.runs.prepare import prepare_corpus
from training.tasks import get_task


def _prepare_cli(patterns, output, *more):
    return training_commands.main([
        "prepare", "--config", "translation", "--set", "train_files=" + json.dumps(list(patterns)),
        "--set", "vocabulary_size=120", "--set", f"max_sequence_length={MAX_LENGTH}",
        "--output", str(output), *more,
    ])


def _records(path):
    return list(tf.data.TFRecordDataset(path).as_numpy_iterator())


def _run_data(config, run_dir):
    """(task, data) of a run: its data loaded and its vocabulary learned."""
    os.makedirs(run_dir, exist_ok=True)
    task = get_task(config.task)
    data = task.load_data(config, str(run_dir))
    task.prepare(config, data, str(run_dir))
    return task, data


def test_prepare_writes_its_shards_and_a_manifest_whose_counts_match(tmp_path, capsys):
    patterns = _shard(tmp_path, _pairs(300), 3)
    output = tmp_path / "prepared"
    assert _prepare_cli(patterns, output, "--shards", "4") == 0
    assert "Prepared" in capsys.readouterr().out
    manifest = json.loads((output / "prepared.json").read_text())
    names = sorted(p for p in os.listdir(output) if p.endswith(".tfrecord"))
    assert names == [prepared.shard_name(i, 4) for i in range(4)]
    counts = [len(_records(output / n)) for n in names]
    # 300 pairs less the 2 held out (every 50th of the first shard's 100 lines).
    assert sum(counts) == manifest["counts"]["examples"] == 298
    assert counts == [s["examples"] for s in manifest["shards"]] and max(counts) - min(counts) <= 1
    target_tokens = 0
    for name in names:
        for record in _records(output / name):
            example = tf.train.Example.FromString(record)
            target = example.features.feature["target"].int64_list.value
            assert 0 < len(target) < MAX_LENGTH
            target_tokens += len(target)
    assert target_tokens == manifest["counts"]["target_tokens"]
    assert manifest["settings"]["max_sequence_length"] == MAX_LENGTH
    assert [len(c) for c in manifest["files"]] == [3, 3]
    assert os.path.isfile(output / "vocab" / "vocab.txt")
    # Written whole: no temporary folder is left beside it.
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".prepared")]


def test_a_run_from_the_prepared_corpus_sees_the_streamed_examples(tmp_path):
    patterns = _shard(tmp_path, _pairs(300), 3)
    config = _config(patterns)
    prepare_corpus(config, tmp_path / "prepared", num_shards=3)
    task, streamed = _run_data(config, tmp_path / "a")
    text_pass = task.make_dataset(config, streamed.train, shuffle=True)
    from_text = _rows(text_pass)
    config = config.replace(prepared_dir=str(tmp_path / "prepared"))
    task, data = _run_data(config, tmp_path / "b")
    assert isinstance(data.train, prepared.PreparedCorpus)
    assert data.train.exact and data.train.num_examples == 298
    assert "3 shards of the prepared corpus" in data.summary
    assert data.valid == streamed.valid  # the same pairs held out to validate
    first = task.make_dataset(config, data.train, shuffle=True)
    assert _rows(first) == from_text and sum(from_text.values()) == 298
    # The length of a pass is counted from the manifest, not estimated.
    steps, batch_tokens = first.pass_size
    assert steps == sum(1 for _ in first)
    assert batch_tokens == pytest.approx(
        sum(int(tf.math.count_nonzero(y)) for _, y in first) / steps)
    # Each pass of the endless stream holds them all again, in another order.
    stream = task.make_dataset(config, data.train, shuffle=True, repeat=True)
    batches = [b for b, _ in zip(stream, range(200), strict=False)]
    seen, passes = collections.Counter(), []
    for features, labels in batches:
        seen.update(_rows([(features, labels)]))
        if sum(seen.values()) == 298:
            passes.append(seen)
            seen = collections.Counter()
        if len(passes) == 2:
            break
    assert passes == [from_text, from_text]


def test_a_prepared_text_classification_corpus_holds_the_streamed_examples(tmp_path):
    lines = [f"{'pos' if i % 3 else 'neg'}\tword {i} " + "x " * (i % 7) for i in range(300)]
    _write(tmp_path / "a.txt", lines)
    config = TrainingConfig.from_dict(dict(
        task="classification", dataset="files", train_files=[str(tmp_path / "*.txt")],
        in_memory_limit_mb=0, ensemble_size=1, vocabulary_size=60))
    manifest = prepare_corpus(config, tmp_path / "prepared", num_shards=2)
    assert manifest["counts"]["examples"] == 270
    assert manifest["settings"]["label_names"] == ["neg", "pos"]

    def rows(dataset):
        found = collections.Counter()
        for ids, labels in dataset:
            for row, label in zip(ids.numpy(), labels.numpy(), strict=True):
                found[(tuple(row[row > 0]), int(label))] += 1
        return found

    task, streamed = _run_data(config, tmp_path / "a")
    from_text = rows(task.make_dataset(config, streamed.train, shuffle=True))
    config = config.replace(prepared_dir=str(tmp_path / "prepared"))
    task, data = _run_data(config, tmp_path / "b")
    assert rows(task.make_dataset(config, data.train, shuffle=True)) == from_text
    assert sum(from_text.values()) == 270


def test_a_changed_file_tokenizer_or_length_does_not_match(tmp_path):
    patterns = _shard(tmp_path, _pairs(300), 3, gzipped=False)
    config = _config(patterns)
    prepare_corpus(config, tmp_path / "prepared", num_shards=2)
    config = config.replace(prepared_dir=str(tmp_path / "prepared"))
    task = get_task("translation")
    with pytest.raises(ValueError, match=r"max_sequence_length=12 where it was prepared with 16"):
        task.load_data(config.replace(max_sequence_length=12), str(tmp_path))
    with pytest.raises(ValueError, match="its tokenizer differs"):
        task, data = _run_data(config.replace(vocabulary_size=100), tmp_path / "run")
        task.make_dataset(config, data.train)
    changed = tmp_path / "train.01.en"
    changed.write_text("an edited first line " + changed.read_text())
    with pytest.raises(ValueError, match=r"train\.01\.en' changed since it was prepared"):
        get_task("translation").load_data(config, str(tmp_path))


def test_a_missing_truncated_or_corrupt_shard_is_named(tmp_path):
    patterns = _shard(tmp_path, _pairs(200), 2)
    config = _config(patterns)
    output = tmp_path / "prepared"
    prepare_corpus(config, output, num_shards=2)
    config = config.replace(prepared_dir=str(output))
    shard = output / prepared.shard_name(1, 2)
    flipped = bytearray(shard.read_bytes())
    flipped[len(flipped) // 2] ^= 0xFF  # same size, a record's CRC fails
    shard.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match=f"{shard.name}' is corrupt .*corrupted record"):
        get_task("translation").load_data(config, str(tmp_path))
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(ValueError, match=f"{shard.name}' has .* bytes where the manifest"):
        get_task("translation").load_data(config, str(tmp_path))
    shard.unlink()
    with pytest.raises(FileNotFoundError, match=f"{shard.name}' is missing"):
        get_task("translation").load_data(config, str(tmp_path))


def test_an_unfinished_prepare_leaves_nothing_a_run_takes_as_prepared(tmp_path):
    patterns = _shard(tmp_path, _pairs(200), 2)
    config = _config(patterns)
    output = tmp_path / "prepared"

    def interrupted(records):
        for i, record in enumerate(records):
            if i == 50:
                raise KeyboardInterrupt
            yield record

    task, data = _run_data(config, tmp_path / "run")
    records = interrupted(task.prepared_records(config, data.train))
    with pytest.raises(KeyboardInterrupt):
        prepared.write_prepared(output, records, {}, task.tokenizer, 2)
    assert sorted(os.listdir(tmp_path)) == sorted(
        p for p in os.listdir(tmp_path) if not p.startswith(".prepared"))
    assert not output.exists()
    # A killed prepare can leave its temporary folder (never the target):
    # a folder without its manifest is refused.
    output.mkdir()
    (output / prepared.shard_name(0, 1)).write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="holds no prepared.json"):
        get_task("translation").load_data(config.replace(prepared_dir=str(output)),
                                          str(tmp_path))


def test_the_command_line_errors_are_one_line(tmp_path, capsys):
    patterns = _shard(tmp_path, _pairs(200), 2)
    output = tmp_path / "prepared"
    output.mkdir()

    def error(argv):
        assert training_commands.main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ")
        return lines[0]

    assert "already exists; pass --overwrite" in error(
        ["prepare", "--config", "translation", "--set",
         "train_files=" + json.dumps(list(patterns)), "--output", str(output)])
    assert "dataset='files'" in error(["prepare", "--config", "toy", "--output",
                                       str(tmp_path / "other")])
    assert "--shards must be a positive integer; received 0" in error(
        ["prepare", "--config", "translation", "--set",
         "train_files=" + json.dumps(list(patterns)), "--output", str(tmp_path / "x"),
         "--shards", "0"])
    assert "holds no prepared.json" in error(
        ["train", "--config", "translation", "--run-dir", str(tmp_path / "run"), "--set",
         "train_files=" + json.dumps(list(patterns)), "--set",
         f"prepared_dir={json.dumps(str(output))}"])


@pytest.mark.slow
def test_a_run_trains_from_a_prepared_corpus(tmp_path, capsys):
    patterns = _shard(tmp_path, _pairs(300), 3)
    assert _prepare_cli(patterns, tmp_path / "prepared", "--shards", "2") == 0
    argv = ["train", "--config", "translation", "--run-dir", str(tmp_path / "run"),
            "--set", "train_files=" + json.dumps(list(patterns)), "--set", "vocabulary_size=120",
            "--set", f"max_sequence_length={MAX_LENGTH}", "--set", "model_preset=tiny",
            "--set", "steps_per_epoch=3", "--set", "eval_sentences=0",
            "--set", f"prepared_dir={json.dumps(str(tmp_path / 'prepared'))}"]
    assert training_commands.main([*argv, "--set", "epochs=2"]) == 0
    out = capsys.readouterr().out
    assert "298 examples tokenized in 2 shards of the prepared corpus" in out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["steps"] == 6 and metrics["valid_loss"] > 0


@pytest.mark.parametrize("jit_compile", [False, True])
def test_the_pass_size_is_the_batches_of_a_pass(tmp_path, jit_compile):
    patterns = _shard(tmp_path, _pairs(500, seed=3), 2)
    config = _config(patterns, max_sequence_length=32, tokens_per_batch=200,
                     jit_compile=jit_compile)
    prepare_corpus(config, tmp_path / "prepared", num_shards=3)
    config = config.replace(prepared_dir=str(tmp_path / "prepared"))
    task, data = _run_data(config, tmp_path / "run")
    # jit_compile: coarse buckets, padded to their boundary, incomplete
    # batches of the training stream dropped.
    stream = task.make_dataset(config, data.train, shuffle=True, training=True)
    assert stream.pass_size[0] == sum(1 for _ in stream)
