"""Training streams read from shard files, in bounded memory.

`make_translation_stream` and `make_classification_stream` give the
batches `training.pipeline.datasets` makes of in-memory lists, from text
files that are never held whole: each pass reads the shards (plain or gzip,
`tf.data.TextLineDataset`) in an order shuffled with a seed from
`(seed, pass)`, `cycle_length` of them interleaved, checks and tokenizes
the lines in batches (`num_parallel_calls`), and shuffles the examples in
blocks of `shuffle_buffer` examples before bucketing them by length.  What
it holds is a block, the buckets and `tf.data`'s read-ahead: nothing
that grows with the corpus.

The stream is a pure function of the seed (the pass order and each block's
shuffle are both seeded from `(seed, pass)`, never from an iterator's state),
so a fresh iterator over `stream.skip(n)` yields the batches an
uninterrupted run saw from batch n on: a killed run resumes exactly.  That
skip reads and tokenizes the n batches again (the stream does not know
where a pass ends before reading it), at the input pipeline's speed rather
than the model's.  With a `PassLengths`, the stream records each pass's
batch count as it reads it, and `stream.from_step(n)` starts reading at
the pass batch n lies in (the pass before it was recorded when the
stream's reading reached batch n's pass): a resume re-reads only the
batches of its own pass before its step.

Under multi-worker training each worker streams its own share
(`StreamOptions.num_shards` / `shard_index`, cut by `worker_sharding`: whole
shard files when there are at least as many files as workers, else every
W-th line of every file) and its batches are per-worker batches; the
streams carry `AutoShardPolicy.OFF`, so that `tf.distribute` does not shard
them again.

Bad lines are found as the stream reaches them, and stop the run with a
`tf.errors.InvalidArgumentError` whose message holds one line between
`DATA_ERROR_MARK`s naming the file and the line; `data_error_message`
gives it back to show the user.
"""

import codecs
import dataclasses
import json
import os
import re

import tensorflow as tf

from training.data.atomic import atomic_write_json
from training.pipeline.datasets import (
    classification_batcher,
    classification_tokenize,
    translation_batcher,
    translation_example,
    translation_tokenize,
)

#: Lines checked and tokenized per `tf.data` call.
_LINES_PER_CALL = 256
#: Encodings the stream reads besides UTF-8: Python's name -> ICU's.
_ICU_ENCODINGS = {"iso8859-1": "ISO-8859-1", "cp1252": "windows-1252"}
DATA_ERROR_MARK = "@@data@@"
_DATA_ERROR = re.compile(re.escape(DATA_ERROR_MARK) + "(.*?)" + re.escape(DATA_ERROR_MARK),
                         re.DOTALL)


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    """How shard files become a stream of examples.

    Attributes:
        seed: The seed of the pass order and of the shuffle.
        shuffle_buffer: Examples shuffled together (a block of the stream;
            the first batch waits for one block to be tokenized, about 3 s
            for 16,384 pairs on a 2-core CPU).
        cycle_length: Shards read at the same time.
        encoding: The files' text encoding ("utf-8", "latin-1" or "cp1252").
        held_out_every: With `held_out_lines`, every this-many-th line of the
            first shard, from its first, is left out (it validates); 0: none.
        held_out_lines: Lines of the first shard the hold-out reaches.
        blank_lines: "error" (translation: every line holds a sentence) or
            "skip" (text classification).
        num_shards, shard_index: This reader is worker `shard_index` of
            `num_shards` and reads its share of each pass (`worker_sharding`):
            the shard files `shard_index::num_shards` of the pass's order when
            there are at least `num_shards` files, else every
            `num_shards`-th line of every file.
    """

    seed: int = 0
    shuffle_buffer: int = 16384
    cycle_length: int = 4
    encoding: str = "utf-8"
    held_out_every: int = 0
    held_out_lines: int = 0
    blank_lines: str = "error"
    num_shards: int = 1
    shard_index: int = 0

    def __post_init__(self):
        if not 0 <= self.shard_index < self.num_shards:
            raise ValueError(
                f"shard_index={self.shard_index} must be in 0..num_shards-1 "
                f"(num_shards={self.num_shards})."
            )
        try:
            name = codecs.lookup(self.encoding).name
        except LookupError:
            name = None
        if name != "utf-8" and name not in _ICU_ENCODINGS:
            raise ValueError(
                f"encoding={self.encoding!r} cannot be streamed; a streamed corpus is "
                "utf-8, latin-1 or cp1252 (or set in_memory_limit_mb above its size)."
            )


@dataclasses.dataclass(frozen=True)
class WorkerSharding:
    """How one worker's share of a streamed corpus is cut (`worker_sharding`).

    Attributes:
        policy: "none" (one worker reads everything), "files" (each worker
            reads whole shard files) or "examples" (each reads every file
            and keeps every `num_workers`-th line).
        num_workers: The workers reading the corpus.
        worker_index: This worker, in 0..num_workers-1.
        files_per_worker: Shard files this worker reads in a pass.
        num_files: Shard files of the corpus.
    """

    policy: str
    num_workers: int
    worker_index: int
    files_per_worker: int
    num_files: int

    def describe(self):
        """One line saying how the workers share the corpus."""
        if self.policy == "none":
            return f"Streaming: one worker reads all {self.num_files} shard file(s)."
        if self.policy == "files":
            how = (f"file-level sharding, worker {self.worker_index} reads "
                   f"{self.files_per_worker} of the {self.num_files} shard files per pass "
                   f"(files i, i+{self.num_workers}, ... of the pass's order)")
        else:
            how = (f"example-level sharding, {self.num_files} shard file(s) < "
                   f"{self.num_workers} workers: every worker reads every file and "
                   f"worker {self.worker_index} keeps every {self.num_workers}-th line")
        return f"Streaming over {self.num_workers} workers: {how}."


def worker_sharding(num_files, num_workers, worker_index):
    """How worker `worker_index` of `num_workers` reads `num_files` shard files.

    With at least as many files as workers, each worker reads whole files
    (the files `worker_index::num_workers` of each pass's shuffled order):
    no file is read twice, though the workers' shares differ by at most one
    file.  With fewer files, every worker reads every file and keeps the
    lines whose `(line number - 1 + file) % num_workers` is its index:
    equal shares, each line kept by one worker, at the price of every
    worker decompressing and checking the whole corpus.

    Args:
        num_files: int >= 1, the shard files of a column.
        num_workers: int >= 1.
        worker_index: int in 0..num_workers-1.

    Returns:
        A `WorkerSharding`.
    """
    if num_files < 1 or num_workers < 1 or not 0 <= worker_index < num_workers:
        raise ValueError(
            "worker_sharding needs num_files >= 1, num_workers >= 1 and 0 <= worker_index "
            f"< num_workers. Received: num_files={num_files}, num_workers={num_workers}, "
            f"worker_index={worker_index}"
        )
    if num_workers == 1:
        return WorkerSharding("none", 1, 0, num_files, num_files)
    if num_files >= num_workers:
        share = len(range(worker_index, num_files, num_workers))
        return WorkerSharding("files", num_workers, worker_index, share, num_files)
    return WorkerSharding("examples", num_workers, worker_index, num_files, num_files)


def _own_sharding(dataset):
    """`dataset` with `tf.distribute`'s auto-sharding off: a streamed
    dataset is already this worker's share (`worker_sharding`)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.OFF)
    return dataset.with_options(options)


def data_error_message(error):
    """The file-and-line message a stream's check raised in `error`, or None."""
    match = _DATA_ERROR.search(str(getattr(error, "message", error)))
    return match.group(1) if match else None


def _assert_none(bad, line, shard_paths, shard, text):
    """An op that fails with `text` (a format with {path} and {line}) at the
    first row of `bad`; `line`: (B,) line numbers, `shard_paths`: (shards,)."""
    first = tf.reduce_min(tf.boolean_mask(line, bad))
    head, rest = text.split("{path}")
    middle, tail = rest.split("{line}")
    message = tf.strings.join([
        DATA_ERROR_MARK, head, tf.gather(shard_paths, shard), middle,
        tf.strings.as_string(first), tail, DATA_ERROR_MARK,
    ])
    return tf.debugging.Assert(~tf.reduce_any(bad), [message])


def _decode(lines, line, shard_paths, shard, options):
    """(B,) raw lines -> UTF-8 without "\\r" or a first line's byte-order mark,
    plus the op that checks them."""
    name = codecs.lookup(options.encoding).name
    if name == "utf-8":
        fixed = tf.strings.unicode_transcode(lines, "UTF-8", "UTF-8", errors="replace",
                                             replacement_char=0xFFFD)
        check = _assert_none(
            tf.not_equal(fixed, lines), line, shard_paths, shard,
            '{path} line {line} is not valid UTF-8; if the file is Latin-1 / cp1252, '
            'pass encoding="latin-1".',
        )
    else:
        lines = tf.strings.unicode_transcode(lines, _ICU_ENCODINGS[name], "UTF-8")
        check = tf.no_op()
    lines = tf.strings.regex_replace(lines, "\r$", "")
    lines = tf.where(line == 1, tf.strings.regex_replace(lines, "^\ufeff", ""), lines)
    return lines, check


def _check_rows(numbered, shard, paths, options):
    """One call's rows of each column -> (lines per column, line numbers).

    `numbered`: per column (line numbers (B,), raw lines (B,)), where line
    number 0 marks the row after a file's end.  Fails on files that end at
    different lines, bytes not in the encoding and (with
    `blank_lines="error"`) blank lines; leaves out the held-out lines.
    """
    numbers = tf.stack([n for n, _ in numbered])  # (C, B)
    line = tf.reduce_max(numbers, axis=0)  # (B,)
    ended = tf.equal(numbers, 0)
    checks = []
    if len(numbered) > 1:
        uneven = tf.reduce_any(ended, 0) & ~tf.reduce_all(ended, 0)
        checks.append(_assert_none(
            uneven, line, tf.strings.join([paths[0], "' and '", paths[1]]), shard,
            "The files are not aligned: '{path}' end at different lines (at line {line}); "
            "line i of each must belong together.",
        ))
    keep = ~ended[0]
    if options.held_out_every:
        held = ((line - 1) % options.held_out_every == 0) & (line <= options.held_out_lines)
        keep &= ~(held & tf.equal(shard, 0))
    line = tf.boolean_mask(line, keep)
    columns = []
    for (_, lines), column_paths in zip(numbered, paths, strict=True):
        lines, check = _decode(tf.boolean_mask(lines, keep), line, column_paths, shard, options)
        checks.append(check)
        if options.blank_lines == "error":
            checks.append(_assert_none(
                tf.equal(tf.strings.strip(lines), ""), line, column_paths, shard,
                "{path} line {line} is empty; every line must hold a sentence.",
            ))
        columns.append(lines)
    with tf.control_dependencies(checks):
        return tuple(tf.identity(c) for c in columns), tf.identity(line)


def _worker_lines(columns, line, shard, options):
    """The rows of one call that worker `options.shard_index` keeps under
    example-level sharding (`worker_sharding`)."""
    keep = tf.equal((line - 1 + shard) % options.num_shards, options.shard_index)
    return tuple(tf.boolean_mask(c, keep) for c in columns), tf.boolean_mask(line, keep), shard


def _numbered_lines(path, compression):
    """(line number from 1, line) of a file, then one (0, "") past its end."""
    lines = tf.data.TextLineDataset(path, compression_type=compression,
                                    buffer_size=1 << 20)
    end = tf.data.Dataset.from_tensors((tf.constant(0, tf.int64), tf.constant("")))
    return lines.enumerate(start=1).concatenate(end)


def line_pass(columns, compressions, options, epoch):
    """One pass of checked lines: ((lines (B,) per column), line numbers (B,), shard).

    Args:
        columns: [column][shard] paths (`training.data.shards.shard_columns`).
        compressions: [column][shard] "GZIP" or "".
        options: `StreamOptions`.
        epoch: The pass (a scalar int64 tensor): its shards' order is
            `stateless_shuffle` with the seed `(seed, epoch)`.
    """
    paths = [tf.constant(c, tf.string) for c in columns]
    kinds = [tf.constant(c, tf.string) for c in compressions]
    num_files = len(columns[0])
    order = tf.random.experimental.stateless_shuffle(
        tf.range(num_files, dtype=tf.int64), seed=tf.stack([tf.constant(options.seed, tf.int64),
                                                            epoch]))
    share = worker_sharding(num_files, options.num_shards, options.shard_index)
    if share.policy == "files":
        order = order[options.shard_index::options.num_shards]

    def shard_lines(shard):
        sides = [_numbered_lines(tf.gather(p, shard), tf.gather(k, shard))
                 for p, k in zip(paths, kinds, strict=True)]
        rows = tf.data.Dataset.zip(tuple(sides)).batch(_LINES_PER_CALL)
        rows = rows.map(lambda *numbered: (*_check_rows(numbered, shard, paths, options),
                                           shard), num_parallel_calls=tf.data.AUTOTUNE)
        if share.policy == "examples":
            rows = rows.map(lambda columns, line, shard: _worker_lines(
                columns, line, shard, options))
        return rows

    return tf.data.Dataset.from_tensor_slices(order).interleave(
        shard_lines, cycle_length=min(share.files_per_worker, options.cycle_length),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True,
    )


def record_pass(paths, options, epoch):
    """One pass of the records of prepared TFRecord shards (`training.pipeline.prepared`).

    As `line_pass` reads text shards: the shards' order is shuffled with
    the seed `(options.seed, epoch)`, this reader takes `shard_index::num_shards`
    of it, and `cycle_length` shards are interleaved.
    """
    files = tf.constant(list(paths), tf.string)
    order = tf.random.experimental.stateless_shuffle(
        tf.range(len(paths), dtype=tf.int64), seed=tf.stack([tf.constant(options.seed, tf.int64),
                                                             epoch]))
    order = order[options.shard_index::options.num_shards]
    return tf.data.Dataset.from_tensor_slices(order).interleave(
        lambda shard: tf.data.TFRecordDataset(tf.gather(files, shard), buffer_size=1 << 20),
        cycle_length=min(len(paths), options.cycle_length),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True,
    )


def make_record_stream(paths, parse, batch, options, repeat=True, passes=None):
    """Batches of prepared shards: `record_pass`, `parse` (a serialized record
    -> one example), the same block shuffle as the text streams, then `batch`.

    `repeat` and `passes` are `make_translation_stream`'s.
    """
    def one_pass(epoch):
        examples = record_pass(paths, options, epoch).map(
            parse, num_parallel_calls=tf.data.AUTOTUNE)
        return batch(_shuffled(examples, options, epoch))

    return _passes(one_pass, repeat, passes)


class PassLengths:
    """The batches in each pass of a stream, recorded as the stream reads them.

    A stream does not know where a pass ends before reading it.  This
    records a pass's batch count when the stream's reading reaches the next
    pass (`tf.data` reads a little ahead of training), in `path` (JSON,
    replaced atomically), so that a resumed run starts reading at the pass
    its step lies in (`start`) instead of re-reading every pass before it.
    The counts are facts about a stream that is a pure function of its
    seed: recorded ahead of a checkpoint, they are still right for it.

    Args:
        path: The JSON file (None: kept in memory only).
        write: Whether this process writes it (the chief only).
    """

    def __init__(self, path=None, write=True):
        self.path, self.write = path, write
        self.counts = []  # batches of passes 0, 1, ... read to their end
        if path is not None and os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                self.counts = [int(n) for n in json.load(f)["batches_per_pass"]]
        self._seen = {}

    def record(self, epoch, index):
        """Notes batch `index` of pass `epoch` (called from the stream)."""
        epoch, index = int(epoch), int(index)
        self._seen[epoch] = max(self._seen.get(epoch, 0), index + 1)
        done = epoch - 1
        if index == 0 and done == len(self.counts) and done in self._seen:
            self.counts.append(self._seen.pop(done))
            self._save()

    def _save(self):
        if self.path is None or not self.write:
            return
        atomic_write_json(self.path, {"batches_per_pass": self.counts}, indent=None)

    def start(self, step):
        """(the pass batch `step` lies in, its index in that pass), as far as
        the recorded passes tell; past them, from the first unrecorded pass."""
        for epoch, count in enumerate(self.counts):
            if step < count:
                return epoch, step
            step -= count
        return len(self.counts), step


def _recorded(passes, epoch, index, batch):
    """`batch` after `passes.record(epoch, index)` has run."""
    noted = tf.py_function(passes.record, [epoch, index], [])
    with tf.control_dependencies([noted] if noted is not None else []):
        return tf.nest.map_structure(tf.identity, batch)


def _passes(one_pass, repeat, passes=None):
    """Pass 0, or the endless stream of passes 0, 1, 2, ... (prefetched).

    The endless stream has `from_step(step)`: the same stream from batch
    `step`, read from the start of the pass that batch lies in when
    `passes` (`PassLengths`) knows it, else from pass 0 (`skip(step)`).
    """
    if not repeat:
        return _own_sharding(one_pass(tf.constant(0, tf.int64)).prefetch(tf.data.AUTOTUNE))

    def recorded_pass(epoch):
        batches = one_pass(epoch)
        if passes is None:
            return batches
        return batches.enumerate().map(lambda index, batch: _recorded(passes, epoch, index,
                                                                      batch))

    def from_step(step):
        start, offset = passes.start(int(step)) if passes is not None else (0, int(step))
        stream = tf.data.Dataset.counter(start).flat_map(recorded_pass)
        return _own_sharding(stream.skip(offset).prefetch(tf.data.AUTOTUNE))

    stream = tf.data.Dataset.counter().flat_map(recorded_pass).prefetch(tf.data.AUTOTUNE)
    stream = _own_sharding(stream)
    stream.from_step = from_step
    return stream


def _shuffled(examples, options, epoch):
    """`examples` in blocks of `shuffle_buffer`, each shuffled with a seed
    from (seed, epoch, block).

    `Dataset.shuffle` would take its seed from the process's global seed
    too, and cannot take a tensor seed when that is 0; a stateless shuffle
    of each block depends on `options.seed` and the pass alone.
    """
    seed = tf.constant(options.seed, tf.int64) * 1_000_003 + epoch

    def shuffle_block(block_index, block):
        rows = tf.shape(tf.nest.flatten(block)[0], out_type=tf.int64)[0]
        order = tf.random.experimental.stateless_shuffle(
            tf.range(rows), seed=tf.stack([seed, block_index]))
        return tf.data.Dataset.from_tensor_slices(order).map(
            lambda i: tf.nest.map_structure(lambda column: column[i], block))

    return examples.ragged_batch(options.shuffle_buffer).enumerate().flat_map(shuffle_block)


def compressions_of(columns, is_gzip):
    """[column][shard] "GZIP" or "" for `line_pass`."""
    return [["GZIP" if is_gzip(path) else "" for path in column] for column in columns]


def make_translation_stream(corpus, tokenizers, max_sequence_length, batching, options,
                            repeat=True, passes=None):
    """Translation batches, as `make_translation_dataset` gives, from shard files.

    Args:
        corpus: (columns, compressions) of the source and target shards
            (`line_pass`).
        tokenizers: (source tokenizer, target tokenizer).
        max_sequence_length: Longest encoder and decoder sequence.
        batching: {argument: value} of `translation_batcher` beyond
            `max_sequence_length` (`tokens_per_batch`, bucketing).
        options: `StreamOptions`.
        repeat: An endless stream of passes; else one pass.
        passes: A `PassLengths` that records the passes' lengths and lets
            the endless stream's `from_step` start at the step's pass.

    Returns:
        A prefetched `tf.data.Dataset`. Truncated pairs are not counted here:
        a stream is never read whole before training (the caller warns from
        its sample).
    """
    tokenize = translation_tokenize(*tokenizers, max_sequence_length)
    batch = translation_batcher(max_sequence_length, **batching)

    def one_pass(epoch):
        lines = line_pass(*corpus, options, epoch)
        examples = lines.map(lambda columns, *_: tokenize(*columns),
                             num_parallel_calls=tf.data.AUTOTUNE).unbatch()
        return batch(_shuffled(examples.map(translation_example), options, epoch))

    return _passes(one_pass, repeat, passes)


def label_table(label_names):
    """The `tf.lookup` table of class name -> id (-1 for another name)."""
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(label_names)), tf.range(len(label_names), dtype=tf.int32)),
        default_value=-1,
    )


def parse_labelled(lines, line, shard_paths, shard, label_names, table):
    """`label<TAB>text` or `label text` lines -> (texts, label ids).

    As `training.data.readers.read_classification` reads them: blank lines
    are dropped, the text is stripped, and a label that is empty before a
    tab or not in `label_names` fails naming the file and line.
    """
    keep = tf.not_equal(tf.strings.strip(lines), "")
    lines, line = tf.boolean_mask(lines, keep), tf.boolean_mask(line, keep)
    tabbed = tf.strings.regex_full_match(lines, "(?s)[^\t]*\t.*")
    by_tab = tf.strings.split(lines, "\t", maxsplit=1).to_tensor("", shape=[None, 2])
    by_space = tf.strings.split(tf.strings.strip(lines), maxsplit=1).to_tensor(
        "", shape=[None, 2])
    label = tf.where(tabbed, tf.strings.strip(by_tab[:, 0]), by_space[:, 0])
    text = tf.strings.strip(tf.where(tabbed, by_tab[:, 1], by_space[:, 1]))
    ids = table.lookup(label)
    known = ", ".join(label_names)
    checks = [
        _assert_none(tabbed & tf.equal(label, ""), line, shard_paths, shard,
                     "{path} line {line} has an empty label before the tab."),
        _assert_none(ids < 0, line, shard_paths, shard,
                     "{path} line {line} has a label that is not one of the labels "
                     f"the sample of the training files found ({known}); pass the "
                     "rare class's lines in the first lines of a file, or a larger "
                     "vocabulary_sample_lines."),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(text), tf.identity(ids)


def make_classification_stream(corpus, tokenizer, label_names, batching, options,
                               repeat=True, passes=None):
    """Text classification batches, as `make_classification_dataset` gives, from files.

    Args:
        corpus: (columns, compressions) of the one column of shards.
        tokenizer: The text tokenizer.
        label_names: The class names; label i has id i.
        batching: {"max_sequence_length", "batch_size"} and optionally
            `classification_batcher`'s `pad_to_length` and `drop_remainder`.
        options: `StreamOptions` (`blank_lines` is taken as "skip").
        repeat: An endless stream of passes; else one pass.
        passes: A `PassLengths` (`make_translation_stream`).
    """
    batching = dict(batching)
    max_sequence_length = batching.pop("max_sequence_length")
    tokenize = classification_tokenize(tokenizer, max_sequence_length)
    batch = classification_batcher(tokenizer, **batching)
    options = dataclasses.replace(options, blank_lines="skip")
    paths = tf.constant(corpus[0][0], tf.string)
    table = label_table(label_names)

    def parse_and_tokenize(columns, line, shard):
        text, ids = parse_labelled(columns[0], line, paths, shard, label_names, table)
        token_ids, label, _ = tokenize(text, ids)
        return {"token_ids": token_ids}, label

    def one_pass(epoch):
        lines = line_pass(*corpus, options, epoch)
        examples = lines.map(parse_and_tokenize, num_parallel_calls=tf.data.AUTOTUNE)
        return batch(_shuffled(examples.unbatch(), options, epoch))

    return _passes(one_pass, repeat, passes)
