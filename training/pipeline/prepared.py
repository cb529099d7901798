"""A training corpus tokenized once, in TFRecord shards, and its manifest.

`python -m training prepare` (`training.runs.prepare`) writes a folder:

    prepared.json              the manifest (`FORMAT_VERSION`, below)
    shard-00000-of-00004.tfrecord ...
    vocab/                     the tokenizer the ids are of

Each record is a `tf.train.Example` of int64 lists: translation
`source` (source ids cut to `max_sequence_length`) and `target` (target
ids cut to one fewer, without [START] / [END], which the reader adds);
text classification `token_ids` (flattened: a `CharNGramTokenizer`'s
packed ids are reshaped on reading) and `label`.  Example i of the
text stream's first pass (`training.pipeline.streaming.line_pass`, the
held-out lines left out) goes to shard i % N.

An input file is identified by its size and the SHA-256 of its first and
last MiB, not by its modification time: a copy (`cp`, a checkout, a
download) changes the time of a file whose text is the same, and appending,
truncating or editing its head or tail changes the fingerprint.  An edit in
the middle that keeps the size is not seen; that would take reading the
whole corpus each run.

The manifest opens with the package's format record
(`training.data.manifest.format_record`: `"format": "keras-transformer
prepared corpus"`, `format_version`, `package_version`); a corpus of a
newer format is refused in one line, one prepared before the record was
added (`format_version` 1 alone) is read as it is.  `--overwrite` replaces a
prepared corpus (a folder holding `prepared.json`) and nothing else.

A run with `prepared_dir` (`open_prepared`) checks the manifest against
its own files and settings, and its tokenizer against `tokenizer_sha256`,
and refuses a mismatch with one line naming what differs.  The folder is
written into a temporary sibling and renamed into place with its manifest
in it, so a killed prepare leaves no `prepared.json` at the target.
"""

import bisect
import dataclasses
import hashlib
import json
import math
import os
import tempfile

import tensorflow as tf

from keras_transformer.models.transformer_config import END_ID, START_ID
from training.data import manifest as formats
from training.data.atomic import atomic_directory
from training.data.shards import StreamedCorpus
from training.pipeline import datasets, streaming

FORMAT_VERSION = formats.FORMAT_VERSION
MANIFEST = "prepared.json"
#: What the format record calls a prepared corpus.
KIND = "prepared corpus"


def is_prepared_corpus(path):
    """Whether `path` is a folder `write_prepared` wrote (it holds `prepared.json`)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, MANIFEST))


#: What `write_prepared(overwrite=True)` may replace (`training.data.atomic.check_target`).
REPLACEABLE = ("a prepared corpus (a folder holding prepared.json)", is_prepared_corpus)
#: Bytes of a file's head and of its tail that its fingerprint hashes.
FINGERPRINT_BYTES = 1 << 20


def file_fingerprint(path):
    """{"path", "size", "sha256_head_tail"} of an input file (see the module's docstring)."""
    size = os.path.getsize(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(FINGERPRINT_BYTES))
        if size > FINGERPRINT_BYTES:
            f.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
            digest.update(f.read())
    return {"path": os.path.abspath(path), "size": size,
            "sha256_head_tail": digest.hexdigest()}


def tokenizer_sha256(tokenizer):
    """SHA-256 of the files `tokenizer.save` writes (names and bytes, sorted)."""
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save(folder)
        for name in sorted(os.listdir(folder)):
            digest.update(name.encode() + b"\0")
            with open(os.path.join(folder, name), "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()


def shard_name(index, num_shards):
    return f"shard-{index:05d}-of-{num_shards:05d}.tfrecord"


def _int64s(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def translation_records(corpus, tokenizer, max_sequence_length, options):
    """(serialized `tf.train.Example`, its token counts, its length) of the first pass of a
    streamed translation corpus, tokenized and cut as the text stream does."""
    tokenize = datasets.translation_tokenize(tokenizer, tokenizer, max_sequence_length)
    lines = streaming.line_pass(corpus.columns, corpus.compressions, options,
                                tf.constant(0, tf.int64))
    for columns, *_ in lines:
        sources, _, labels, _ = tokenize(*columns)
        targets = labels[:, :-1]  # without [END]
        for src, tgt in zip(sources.to_list(), targets.to_list(), strict=True):
            example = tf.train.Example(features=tf.train.Features(feature={
                "source": _int64s(src), "target": _int64s(tgt)}))
            yield example.SerializeToString(), {"source_tokens": len(src),
                                                "target_tokens": len(tgt)}, max(
                len(src), len(tgt) + 1)  # the bucketing length


def classification_records(corpus, tokenizer, label_names, max_sequence_length, options):
    """(serialized `tf.train.Example`, its token counts, its length) of the first pass of a
    streamed text classification corpus, parsed and cut as the text stream does."""
    options = dataclasses.replace(options, blank_lines="skip")
    paths = tf.constant(corpus.columns[0], tf.string)
    table = streaming.label_table(label_names)
    lines = streaming.line_pass(corpus.columns, corpus.compressions, options,
                                tf.constant(0, tf.int64))
    for columns, line, shard in lines:
        text, ids = streaming.parse_labelled(columns[0], line, paths, shard, label_names,
                                             table)
        token_ids = tokenizer.tokenize(text)[:, :max_sequence_length]
        for tokens, label in zip(token_ids.to_list(), ids.numpy().tolist(), strict=True):
            flat = tf.nest.flatten(tokens)
            example = tf.train.Example(features=tf.train.Features(feature={
                "token_ids": _int64s(flat), "label": _int64s([label])}))
            yield example.SerializeToString(), {"tokens": len(tokens)}, len(tokens)


def write_prepared(target, records, manifest, tokenizer, num_shards, overwrite=False):
    """Writes `records` round-robin into `num_shards` TFRecord files, the
    tokenizer into `vocab/` and `manifest` (with the counts and the
    examples per length added) into `prepared.json`, all at once
    (`training.data.atomic.atomic_directory`).  Returns the manifest."""
    if not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"--shards must be a positive integer; received {num_shards!r}.")
    with atomic_directory(target, overwrite, REPLACEABLE) as folder:
        names = [shard_name(i, num_shards) for i in range(num_shards)]
        counts, lengths = {"examples": 0}, {}
        per_shard = [0] * num_shards
        writers = [tf.io.TFRecordWriter(os.path.join(folder, n)) for n in names]
        try:
            for index, (record, tokens, length) in enumerate(records):
                writers[index % num_shards].write(record)
                lengths[length] = lengths.get(length, 0) + 1
                per_shard[index % num_shards] += 1
                counts["examples"] += 1
                for key, value in tokens.items():
                    counts[key] = counts.get(key, 0) + value
        finally:
            for writer in writers:
                writer.close()
        tokenizer.save(os.path.join(folder, "vocab"))
        manifest = dict(formats.format_record(KIND), **manifest, counts=counts,
                        lengths={str(n): lengths[n] for n in sorted(lengths)}, shards=[
            {"file": n, "examples": c, "bytes": os.path.getsize(os.path.join(folder, n))}
            for n, c in zip(names, per_shard, strict=True)
        ])
        with open(os.path.join(folder, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2)
    return manifest


def corpus_manifest(corpus, tokenizer, settings):
    """The manifest's description of what was prepared: the input files, the
    tokenizer and `settings` ({name: value} a run must match)."""
    return {
        "files": [[file_fingerprint(p) for p in column] for column in corpus.columns],
        "tokenizer_sha256": tokenizer_sha256(tokenizer),
        "settings": settings,
    }


@dataclasses.dataclass
class PreparedCorpus(StreamedCorpus):
    """A `StreamedCorpus` whose training examples are read from a prepared folder.

    The sample (vocabulary, held-out lines) is still drawn from the text
    files; `num_examples` is the manifest's count, exact.
    """

    directory: str = ""
    manifest: dict = None

    def shard_paths(self):
        return [os.path.join(self.directory, s["file"]) for s in self.manifest["shards"]]

    def describe(self, limit_mb):
        counts = self.manifest["counts"]
        return (
            f"Training data: {counts['examples']} examples tokenized in "
            f"{len(self.manifest['shards'])} shards of the prepared corpus "
            f"{self.directory!r}; vocabulary from a sample of {len(self.sample[0])}."
        )

    def check_tokenizer(self, tokenizer):
        """Raises ValueError when `tokenizer` is not the one the ids are of."""
        if tokenizer_sha256(tokenizer) != self.manifest["tokenizer_sha256"]:
            raise ValueError(
                f"prepared_dir={self.directory!r} does not match this run: its tokenizer "
                "differs from the one this run learned (vocabulary_size, lower_case, "
                "seed, vocabulary_sample_lines or a tokenizer setting changed); run "
                "`python -m training prepare` again with this config."
            )


def _mismatch(directory, what):
    return ValueError(f"prepared_dir={directory!r} does not match this run: {what}; run "
                      "`python -m training prepare` again with this config.")


def read_manifest(directory):
    """The manifest of a prepared folder; errors name the file."""
    path = os.path.join(os.fspath(directory), MANIFEST)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"prepared_dir={os.fspath(directory)!r} holds no {MANIFEST} (not prepared, or "
            "its prepare did not finish); run `python -m training prepare --output DIR`.")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path!r} is not a valid manifest: {error}.") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{path!r} is not a valid manifest (a JSON object); prepare it again.")
    if "format" in manifest:  # older corpora carry format_version 1 alone
        formats.check_format(manifest, KIND, path, "prepare the corpus again with this one")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path!r} has format_version={manifest.get('format_version')!r}; "
                         f"this version reads {FORMAT_VERSION}: prepare it again.")
    return manifest


def differences(manifest, columns, settings):
    """What differs between a manifest and a run's files and settings (lines)."""
    found = []
    for key, value in settings.items():
        if manifest["settings"].get(key) != value:
            found.append(f"{key}={value!r} where it was prepared with "
                         f"{manifest['settings'].get(key)!r}")
    prepared = manifest["files"]
    for side, (old, new) in enumerate(zip(prepared, columns, strict=False)):
        if len(old) != len(new):
            found.append(f"train_files[{side}] matches {len(new)} files where "
                         f"{len(old)} were prepared")
            continue
        for before, path in zip(old, new, strict=True):
            now = file_fingerprint(path)
            if (now["size"], now["sha256_head_tail"]) != (before["size"],
                                                          before["sha256_head_tail"]):
                found.append(f"{path!r} changed since it was prepared (size {now['size']} "
                             f"bytes, prepared at {before['size']})")
    return found


def check_shards(directory, manifest):
    """Raises FileNotFoundError / ValueError naming a missing, resized or corrupt shard.

    Sizes are compared with the manifest's; then every record is read
    once (its CRCs checked by `tf.data`, in the graph: seconds a GB) and
    counted, since a bad record met during training would stop the run
    without naming its file.
    """
    for shard in manifest["shards"]:
        path = os.path.join(directory, shard["file"])
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Prepared shard {path!r} is missing; prepare the corpus "
                                    "again.")
        size = os.path.getsize(path)
        if size != shard["bytes"]:
            raise ValueError(f"Prepared shard {path!r} has {size} bytes where the manifest "
                             f"says {shard['bytes']}: it is truncated or corrupt; prepare "
                             "the corpus again.")
        try:
            count = int(tf.data.TFRecordDataset(path).reduce(
                tf.constant(0, tf.int64), lambda n, _: n + 1))
        except tf.errors.DataLossError as error:
            raise ValueError(f"Prepared shard {path!r} is corrupt ({error.message.strip()}); "
                             "prepare the corpus again.") from None
        if count != shard["examples"]:
            raise ValueError(f"Prepared shard {path!r} holds {count} records where the "
                             f"manifest says {shard['examples']}; prepare the corpus again.")


def open_prepared(directory, corpus, settings):
    """`PreparedCorpus` of `corpus` (the run's `StreamedCorpus`) read from `directory`.

    Raises:
        FileNotFoundError: No manifest, or a shard is missing (named).
        ValueError: The manifest does not match the run's files or
            `settings` (the first difference named), or a shard's size
            is not the manifest's.
    """
    directory = os.fspath(directory)
    manifest = read_manifest(directory)
    found = differences(manifest, corpus.columns, settings)
    if found:
        raise _mismatch(directory, found[0])
    check_shards(directory, manifest)
    fields = {f.name: getattr(corpus, f.name) for f in dataclasses.fields(StreamedCorpus)}
    fields.update(num_examples=manifest["counts"]["examples"], exact=True)
    return PreparedCorpus(**fields, directory=directory, manifest=manifest)


def _parse_translation(record):
    features = tf.io.parse_single_example(record, {
        "source": tf.io.VarLenFeature(tf.int64), "target": tf.io.VarLenFeature(tf.int64)})
    source = tf.cast(features["source"].values, tf.int32)
    target = tf.cast(features["target"].values, tf.int32)
    decoder = tf.concat([[START_ID], target], 0)
    labels = tf.concat([target, [END_ID]], 0)
    return {"encoder_token_ids": source, "decoder_token_ids": decoder}, labels


def translation_pass_size(manifest, max_sequence_length, tokens_per_batch, boundaries=None,
                          drop_remainder=False, pad_to_bucket_boundary=False):
    """(batches in one pass, mean target tokens per batch) of a prepared
    translation corpus batched as `datasets.translation_batcher` batches it.

    Exact whatever the shuffle: a pass is bucketed whole, and each length
    bucket gives ceil(examples / its batch size) batches (floor when
    incomplete batches are dropped), so the manifest's examples per length
    tell it without reading the shards.
    """
    del pad_to_bucket_boundary  # pads the batches; their number is the same
    boundaries = list(boundaries or datasets.bucket_boundaries(max_sequence_length))
    longest_per_bucket = [b - 1 for b in boundaries] + [max_sequence_length]
    batch_sizes = [max(1, tokens_per_batch // n) for n in longest_per_bucket]
    per_bucket = [0] * len(batch_sizes)
    for length, count in manifest["lengths"].items():
        per_bucket[bisect.bisect_right(boundaries, int(length))] += count
    round_batches = math.floor if drop_remainder else math.ceil
    steps = sum(round_batches(n / size) for n, size in zip(per_bucket, batch_sizes,
                                                              strict=True))
    counts = manifest["counts"]
    return max(1, steps), (counts["target_tokens"] + counts["examples"]) / max(1, steps)


def classification_pass_size(manifest, batch_size):
    """(batches in one pass, mean tokens per batch) of a prepared text
    classification corpus: exact, from the manifest's counts."""
    steps = max(1, math.ceil(manifest["counts"]["examples"] / batch_size))
    return steps, manifest["counts"]["tokens"] / steps


def translation_stream(corpus, max_sequence_length, batching, options, repeat=True,
                       passes=None):
    """`streaming.make_translation_stream`'s batches, from `corpus`'s prepared shards."""
    batch = datasets.translation_batcher(max_sequence_length, **batching)
    return streaming.make_record_stream(corpus.shard_paths(), _parse_translation, batch,
                                        options, repeat, passes)


def classification_stream(corpus, tokenizer, batch_size, options, repeat=True, passes=None):
    """`streaming.make_classification_stream`'s batches, from prepared shards."""
    per_word = getattr(tokenizer, "char_ngrams_per_word", None)

    def parse(record):
        features = tf.io.parse_single_example(record, {
            "token_ids": tf.io.VarLenFeature(tf.int64),
            "label": tf.io.FixedLenFeature([], tf.int64)})
        ids = tf.cast(features["token_ids"].values, tf.int32)
        if per_word:
            ids = tf.reshape(ids, [-1, 1 + per_word])
        return {"token_ids": ids}, tf.cast(features["label"], tf.int32)

    batch = datasets.classification_batcher(tokenizer, batch_size)
    return streaming.make_record_stream(corpus.shard_paths(), parse, batch, options,
                                        repeat, passes)
