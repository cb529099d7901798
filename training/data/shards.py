"""Training text too large to hold: shard files, a bounded sample, a size estimate.

A corpus is a list of columns (translation: source and target; text
classification: one), each a glob pattern or path that may match many
files (shards), plain or gzip.  Column files pair up by sorted order.  What
this module reads is bounded whatever the corpus size: each shard's first
lines, up to `2 * sample_lines / shards` of them, so a 300 MB file is read
to its end only when it is small.  The tokenizer learns from a seeded
sample of those lines, and the number of lines of the whole corpus is
estimated from each shard's bytes of text per line of its head (counted for
a shard read to its end; a gzip shard's size of text is in its trailer).
The sample favours each shard's beginning: a corpus sorted by topic or
length should be split into shards (or shuffled) beforehand.

The lines themselves are streamed by `training.pipeline.streaming`.
"""

import dataclasses
import glob
import gzip
import math
import os
import random

from training.data.readers import GZIP_ERRORS, damaged_gzip, no_file

_GZIP_MAGIC = b"\x1f\x8b"
#: The sample draws from at most this many times `sample_lines` lines read.
READ_FACTOR = 2


def expand_files(pattern, what):
    """Sorted paths a glob `pattern` (or a plain path) names.

    Raises:
        FileNotFoundError: When nothing matches, naming `what` and the pattern.
    """
    pattern = os.fspath(pattern)
    paths = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
    if not paths:
        raise FileNotFoundError(f"{what} {pattern!r} matches no file.")
    return paths


def is_gzip(path):
    """Whether `path` starts with the gzip magic bytes (whatever its suffix)."""
    with open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


def _open(path):
    """(binary text stream, the file under it), gzip or not."""
    raw = open(path, "rb")  # noqa: SIM115 (closed by the caller)
    if raw.read(2) == _GZIP_MAGIC:
        raw.seek(0)
        return gzip.GzipFile(fileobj=raw), raw
    raw.seek(0)
    return raw, raw


def _decode(raw_line, path, line_number, encoding):
    """One line of bytes as text without its line end; errors name file and line."""
    try:
        line = raw_line.decode(encoding)
    except UnicodeDecodeError as error:
        raise ValueError(
            f"path={path!r} line {line_number} is not valid {encoding} (byte "
            f"0x{raw_line[error.start:error.start + 1].hex()}). If the file is "
            'Latin-1 / cp1252, pass encoding="latin-1".'
        ) from None
    if line_number == 1 and line.startswith("\ufeff"):
        line = line[1:]
    return line.rstrip("\n").removesuffix("\r")


@dataclasses.dataclass
class ShardHeads:
    """The first lines of each shard of a corpus, as `read_heads` returns them.

    `rows[i]` is a tuple of one line per column; `read[s]` the rows read
    from shard `s`, `ended[s]` whether that was all of it, and
    `bytes_read[s]` the bytes of text (uncompressed) of its first column's
    lines.
    """

    columns: list  # [column][shard] paths
    rows: list
    read: list
    ended: list
    bytes_read: list

    def estimated_lines(self):
        """Lines of the whole corpus: counted where a shard was read to its
        end, else its text's size (`text_size`) over the bytes per line of
        its head."""
        total = 0
        for shard, path in enumerate(self.columns[0]):
            if self.ended[shard]:
                total += self.read[shard]
            else:
                per_line = self.bytes_read[shard] / max(1, self.read[shard])
                total += math.ceil(text_size(path) / per_line)
        return total


def text_size(path):
    """Bytes of text in `path`: its size, or for gzip the size its trailer
    records (exact for one gzip member under 4 GiB of text, the modulo 2**32
    beyond; a size smaller than the file itself, which only such a wrap
    gives, falls back to the compressed size times 3)."""
    size = os.path.getsize(path)
    if not is_gzip(path):
        return size
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        recorded = int.from_bytes(f.read(4), "little")
    return recorded if recorded >= size else 3 * size


def _column_files(patterns, what):
    """The paths of one column: of a pattern, or of a list of patterns in turn."""
    if isinstance(patterns, (list, tuple)):
        return [path for pattern in patterns for path in expand_files(pattern, what)]
    return expand_files(patterns, what)


def _named(patterns):
    """A column's pattern, or its list of patterns, as given."""
    if isinstance(patterns, (list, tuple)):
        return [os.fspath(p) for p in patterns]
    return os.fspath(patterns)


def shard_columns(patterns, what):
    """[column][shard] paths of `patterns`, one per column, checked to pair up.

    A column is a glob pattern (or a path), or a list of them whose files
    are read one after another.

    Raises:
        FileNotFoundError: A pattern matches nothing.
        ValueError: The columns have different numbers of files, or a file is
            empty; the message names them.
    """
    columns = [_column_files(p, f"{what} file") for p in patterns]
    if len({len(c) for c in columns}) > 1:
        counts = ", ".join(f"{_named(p)!r}: {len(c)} files"
                           for p, c in zip(patterns, columns, strict=True))
        raise ValueError(
            f"{what} files do not pair up: {counts}. Source and target shards pair "
            "by sorted order and must be as many."
        )
    for column in columns:
        for path in column:
            stream, raw = _open(path)
            with raw, stream:
                if not _read(stream.read, 1, path):
                    raise ValueError(f"{what} file {path!r} is empty.")
    return columns


def _read(read, size, path):
    """`read(size)` of file `path`'s stream; a gzip file cut short is a ValueError naming it."""
    try:
        return read(size)
    except GZIP_ERRORS as error:
        raise damaged_gzip(path, error) from None


def read_heads(columns, max_rows, encoding="utf-8"):
    """The first lines of every shard, at most `max_rows` in all (`ShardHeads`).

    Each shard gets an equal share of `max_rows`; its columns are read in
    step, so a shard whose columns end at different lines is refused when
    the read reaches that line.
    """
    num_shards = len(columns[0])
    per_shard = max(1, max_rows // num_shards)
    heads = ShardHeads(columns, [], [], [], [])
    for shard in range(num_shards):
        paths = [column[shard] for column in columns]
        opened = [_open(path) for path in paths]
        count, ended, text_bytes = 0, False, 0
        try:
            while count < per_shard:
                raw_lines = [_read(stream.readline, -1, path)
                             for (stream, _), path in zip(opened, paths, strict=True)]
                present = [bool(line) for line in raw_lines]
                if not any(present):
                    ended = True
                    break
                if not all(present):
                    raise ValueError(misaligned_message(paths, present, count + 1))
                text_bytes += len(raw_lines[0])
                heads.rows.append(tuple(
                    _decode(line, path, count + 1, encoding)
                    for line, path in zip(raw_lines, paths, strict=True)
                ))
                count += 1
            if not ended:  # a shard of exactly `per_shard` lines is all read
                ended = not any(_read(stream.peek, 1, path)
                                for (stream, _), path in zip(opened, paths, strict=True))
            heads.bytes_read.append(text_bytes)
        finally:
            for stream, raw in opened:
                stream.close()
                raw.close()
        heads.read.append(count)
        heads.ended.append(ended)
    return heads


def misaligned_message(paths, present, line_number):
    """The error of a shard whose files end at different lines."""
    ended = [p for p, has in zip(paths, present, strict=True) if not has]
    going = [p for p, has in zip(paths, present, strict=True) if has]
    return (
        f"The files are not aligned: {ended[0]!r} ends before line {line_number} but "
        f"{going[0]!r} has a line {line_number}; line i of each must belong together."
    )


def seeded_sample(rows, max_rows, seed):
    """`rows` when there are at most `max_rows`, else a seeded subset in their order."""
    if len(rows) <= max_rows:
        return list(rows)
    chosen = sorted(random.Random(seed).sample(range(len(rows)), max_rows))
    return [rows[i] for i in chosen]


def sample_rows(columns, sample_lines, seed, encoding="utf-8"):
    """(`seeded_sample` of the shards' heads, the `ShardHeads`).

    At most `READ_FACTOR * sample_lines` rows are read (see the module's
    docstring); a corpus smaller than that is read whole, and one of at
    most `sample_lines` rows is the sample itself.
    """
    heads = read_heads(columns, READ_FACTOR * sample_lines, encoding)
    return seeded_sample(heads.rows, sample_lines, seed), heads


def total_bytes(columns):
    """Bytes on disk of every file of every column."""
    return sum(os.path.getsize(path) for column in columns for path in column)


@dataclasses.dataclass
class StreamedCorpus:
    """A training split too large to read: its shards, a sample and its size.

    A task's `load_data` puts one where `TaskData.train` holds lists for a
    corpus read into memory; `training.pipeline.streaming` reads it.

    Attributes:
        columns: [column][shard] paths.
        compressions: [column][shard] "GZIP" or "" (`tf.data`'s names).
        sample: The sampled examples, as the task's in-memory split
            (e.g. `(sources, targets)`): the vocabulary learns from it and
            the size of an epoch is measured on it.
        num_examples: The examples of the whole corpus, estimated
            (`ShardHeads.estimated_lines`, less the held-out lines).
        exact: Whether `num_examples` is counted rather than estimated.
        total_bytes: Bytes on disk of all the files.
        held_out: (every, lines): every `every`-th line of the first shard's
            first `lines` validates and does not train; (0, 0): none.
        pass_lengths: The training run's record of the stream's pass
            lengths (`training.pipeline.streaming.PassLengths`), or None.
        workers: (num_workers, worker_index): the share of the corpus this
            process streams (`training.pipeline.streaming.worker_sharding`).
    """

    columns: list
    compressions: list
    sample: tuple
    num_examples: int
    exact: bool
    total_bytes: int
    held_out: tuple = (0, 0)
    pass_lengths: object = None
    workers: tuple = (1, 0)

    def describe(self, limit_mb):
        """One line saying that the split is streamed, and why."""
        files = sum(len(column) for column in self.columns)
        about = "" if self.exact else "about "
        return (
            f"Training data: streamed from {files} files ({self.total_bytes / 2**20:.1f} MB "
            f"> in_memory_limit_mb={limit_mb:g}), {about}{self.num_examples} examples; "
            f"vocabulary and epoch size from a sample of {len(self.sample[0])}."
        )


def in_memory_line(num_examples, num_bytes, limit_mb):
    """The line a run prints for training data read into memory."""
    return (
        f"Training data: {num_examples} examples read into memory "
        f"({num_bytes / 2**20:.1f} MB <= in_memory_limit_mb={limit_mb:g})."
    )


def stream_or_read(patterns, what, limit_mb):
    """([column][shard] paths of `patterns`, whether they exceed `limit_mb`).

    A column is a pattern or a list of them (`shard_columns`).  A plain path that is no file fails as `require_file` does; a pattern
    that matches nothing names the pattern.
    """
    for column in patterns:
        for pattern in column if isinstance(column, (list, tuple)) else [column]:
            if not glob.has_magic(os.fspath(pattern)) and not os.path.isfile(pattern):
                raise no_file(pattern, f"{what} file")
    columns = shard_columns(patterns, what)
    return columns, total_bytes(columns) > limit_mb * 2**20 or limit_mb == 0


def streamed_corpus(columns, sample_lines, seed, encoding="utf-8", hold_out=None):
    """(`StreamedCorpus` of `columns` with its sample as columns of lines,
    the held-out rows as columns of lines, or None).

    Args:
        columns: [column][shard] paths (`shard_columns`).
        sample_lines: Rows in the sample (`seeded_sample`); at most
            `READ_FACTOR` times as many are read.
        seed: The sample's seed.
        encoding: The files' text encoding.
        hold_out: (every, most): every `every`-th row of the first shard's
            head, at most `most` of them, validates instead of training
            (and is left out of the stream); None: nothing held out.
    """
    heads = read_heads(columns, READ_FACTOR * sample_lines, encoding)
    rows, held, held_out = heads.rows, None, (0, 0)
    if hold_out is not None:
        every, most = hold_out
        reach = min(heads.read[0], every * most)
        held = [rows[i] for i in range(0, reach, every)]
        rows = [row for i, row in enumerate(rows) if i >= reach or i % every]
        held_out = (every, reach)
    sample = seeded_sample(rows, sample_lines, seed)
    corpus = StreamedCorpus(
        columns=columns,
        compressions=[["GZIP" if is_gzip(p) else "" for p in column] for column in columns],
        sample=tuple(list(column) for column in zip(*sample, strict=True)),
        num_examples=heads.estimated_lines() - len(held or ()),
        exact=all(heads.ended),
        total_bytes=total_bytes(columns),
        held_out=held_out,
    )
    held_columns = None if held is None else tuple(
        list(column) for column in zip(*held, strict=True))
    return corpus, held_columns
