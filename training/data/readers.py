"""Readers for the plain-text corpora the training recipes use.

Every reader returns plain Python lists (or NumPy arrays for time series), so
the `tf.data` pipelines in `training.pipeline.datasets` stay independent of file
formats. Errors name the offending argument, file and line, because a silent
misalignment between a source and a target file ruins a translation model
without any other symptom.

Lines are split on "\\n" only. `str.splitlines()` also breaks on U+0085 (NEL),
which is what byte 0x85 decodes to in Latin-1 files such as `rt-polarity.all`,
and would silently change the line count.
"""

import gzip
import json
import os
import re
import zlib

import numpy as np

_GZIP_MAGIC = b"\x1f\x8b"
_UCR_SEPARATOR = re.compile(r"[,\t ]+")
#: What reading a gzip file that is cut short or damaged raises.
GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


def damaged_gzip(path, error):
    """The ValueError of gzip file `path` that ends early or is damaged (`error`)."""
    return ValueError(
        f"path={os.fspath(path)!r} is not a whole gzip file ({error}); it was probably cut "
        "short while it was copied or written: copy it again."
    )


def no_file(path, what="path"):
    """The error of `path`, which is no file: IsADirectoryError or FileNotFoundError."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return IsADirectoryError(f"{what}={path!r} is a directory, not a file.")
    return FileNotFoundError(f"{what}={path!r} does not exist.")


def read_json(path, what=None):
    """The JSON value in file `path`; errors name the file (and the line).

    Args:
        path: The file.
        what: What it belongs to (`"run_dir='runs/a'"`), put before the
            message, or None.

    Raises:
        FileNotFoundError, IsADirectoryError: `path` is no file.
        ValueError: The file is not whole JSON in UTF-8 (one cut short
            while it was written ends in the middle of a value).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise no_file(path)
    prefix = f"{what}: " if what else ""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except UnicodeDecodeError as error:
        raise ValueError(f"{prefix}path={path!r} is not UTF-8 text ({error.reason} at byte "
                         f"{error.start}); it was damaged.") from None
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{prefix}path={path!r} is not whole JSON (line {error.lineno}, column "
            f"{error.colno}: {error.msg}); it was cut short or damaged."
        ) from None


def read_lines(path, encoding="utf-8"):
    """Reads one sentence per line from a text file, gzip or not.

    Gzip is recognised by the file's magic bytes, so a compressed file without
    the `.gz` suffix (or a plain file with it) is still read correctly. A
    trailing "\\r" on each line (Windows line ends) and a UTF-8 byte-order mark
    are removed; a final newline does not produce an extra empty line.

    Args:
        path: Path of the file.
        encoding: Text encoding. Files that are not UTF-8 (Latin-1 / cp1252
            corpora) need `encoding="latin-1"`.

    Returns:
        The lines, as a list of `str` without line terminators.

    Raises:
        FileNotFoundError: If `path` does not exist.
        IsADirectoryError: If `path` is a directory.
        ValueError: If the bytes are not valid in `encoding` (the message
            names the file and the 1-based line number), or a gzip file ends
            early or is damaged.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise no_file(path, "read_lines: path")
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(_GZIP_MAGIC):
        try:
            data = gzip.decompress(data)
        except GZIP_ERRORS as error:
            raise damaged_gzip(path, error) from None
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        line_number = data.count(b"\n", 0, error.start) + 1
        bad_byte = data[error.start : error.start + 1].hex()
        raise ValueError(
            f"read_lines: path={path!r} line {line_number} is not valid "
            f"{encoding} (byte 0x{bad_byte} at offset {error.start}). If the file "
            'is Latin-1 / cp1252, pass encoding="latin-1".'
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_parallel(source_path, target_path, encoding="utf-8"):
    """Reads a sentence-aligned parallel corpus from two files.

    Line i of `source_path` must translate line i of `target_path`.

    Args:
        source_path: Source-language file (gzip accepted).
        target_path: Target-language file (gzip accepted).
        encoding: Text encoding of both files.

    Returns:
        A tuple `(source_sentences, target_sentences)` of equal-length lists.

    Raises:
        FileNotFoundError: If either file is missing.
        ValueError: If a file is empty, the line counts differ, or a line of
            either file is blank (an empty side of a pair); the message names
            the file and the 1-based line number.
    """
    sources = read_lines(source_path, encoding=encoding)
    targets = read_lines(target_path, encoding=encoding)
    for name, path, lines in (
        ("source_path", source_path, sources),
        ("target_path", target_path, targets),
    ):
        if not lines:
            raise ValueError(f"read_parallel: {name}={os.fspath(path)!r} is empty.")
    if len(sources) != len(targets):
        raise ValueError(
            "read_parallel: the files are not aligned: "
            f"source_path={os.fspath(source_path)!r} has {len(sources)} lines but "
            f"target_path={os.fspath(target_path)!r} has {len(targets)} lines."
        )
    # A blank side would train the model to translate a sentence into nothing
    # (or nothing into a sentence); it is usually a line lost or added by an
    # editor, and everything after it in that file is then shifted by one.
    for line_number, (source, target) in enumerate(zip(sources, targets, strict=True), start=1):
        for name, path, line, other in (
            ("source_path", source_path, source, target),
            ("target_path", target_path, target, source),
        ):
            if not line.strip():
                raise ValueError(
                    f"read_parallel: {name}={os.fspath(path)!r} line {line_number} "
                    f"is empty (the other side reads {other[:80]!r}); every line "
                    "must hold a sentence."
                )
    return sources, targets


def read_tsv_pairs(path, encoding="utf-8"):
    """Reads `source<TAB>target` pairs, one per line.

    Extra tab-separated columns (the attribution column of Tatoeba / Anki
    exports) are ignored; blank lines are skipped.

    Args:
        path: The tab-separated file (gzip accepted).
        encoding: Text encoding.

    Returns:
        A tuple `(source_sentences, target_sentences)`.

    Raises:
        FileNotFoundError: If `path` is missing.
        ValueError: If a non-blank line has no tab, or the file has no pairs.
    """
    sources, targets = [], []
    for line_number, line in enumerate(read_lines(path, encoding=encoding), start=1):
        if not line.strip():
            continue
        columns = line.split("\t")
        if len(columns) < 2:
            raise ValueError(
                f"read_tsv_pairs: path={os.fspath(path)!r} line {line_number} has no "
                f"tab between source and target: {line[:80]!r}"
            )
        sources.append(columns[0])
        targets.append(columns[1])
    if not sources:
        raise ValueError(f"read_tsv_pairs: path={os.fspath(path)!r} has no pairs.")
    return sources, targets


def _sort_label_names(names):
    """Numeric labels in numeric order ("2" < "10"), others alphabetically."""
    try:
        return sorted(names, key=float)
    except ValueError:
        return sorted(names)


def split_label(line):
    """A non-blank `label<TAB>text` or `label text` line -> (label, text), stripped.

    The label is everything before the first tab when the line has one
    (empty if the tab comes first), otherwise the first whitespace-separated
    token.
    """
    if "\t" in line:
        label, text = line.split("\t", 1)
        return label.strip(), text.strip()
    parts = line.strip().split(None, 1)
    return parts[0], (parts[1] if len(parts) > 1 else "").strip()


def label_ids(labels, label_names=None):
    """(int ids of `labels`, the names): `label_names`, or the distinct labels
    sorted numerically when they are all numbers, else alphabetically."""
    if label_names is None:
        label_names = _sort_label_names(set(labels))
    label_names = [str(name) for name in label_names]
    ids = {name: i for i, name in enumerate(label_names)}
    return [ids[label] for label in labels], label_names


def read_classification(path, label_names=None, encoding="utf-8"):
    """Reads `label<TAB>text` or `label text` lines (the Kim-2014 format).

    The label is everything before the first tab when the line has one,
    otherwise the first whitespace-separated token. A line holding only a
    label gives an empty text (such lines exist in `custrev.all`).

    Args:
        path: The file (gzip accepted).
        label_names: Optional list of label strings; label i gets id i. When
            omitted, the distinct labels are sorted (numerically when they are
            all numbers) and numbered in that order.
        encoding: Text encoding.

    Returns:
        A tuple `(texts, labels, label_names)`: a list of `str`, a list of
        `int` ids into `label_names`, and the list of label strings.

    Raises:
        FileNotFoundError: If `path` is missing.
        ValueError: If a label is empty or not in `label_names`, or there are
            no lines; the message names the file and the line.
    """
    rows = []
    for line_number, line in enumerate(read_lines(path, encoding=encoding), start=1):
        if not line.strip():
            continue
        label, text = split_label(line)
        if not label:
            raise ValueError(
                f"read_classification: path={os.fspath(path)!r} line {line_number} "
                f"has an empty label before the tab: {line[:80]!r}"
            )
        rows.append((line_number, label, text))
    if not rows:
        raise ValueError(
            f"read_classification: path={os.fspath(path)!r} has no examples."
        )
    if label_names is None:
        label_names = _sort_label_names({label for _, label, _ in rows})
    label_names = [str(name) for name in label_names]
    label_ids = {name: i for i, name in enumerate(label_names)}
    texts, labels = [], []
    for line_number, label, text in rows:
        if label not in label_ids:
            raise ValueError(
                f"read_classification: path={os.fspath(path)!r} line {line_number} "
                f"has label {label!r}, which is not in label_names={label_names}."
            )
        texts.append(text)
        labels.append(label_ids[label])
    return texts, labels, label_names


def read_ucr(path):
    """Reads a UCR time-series archive file (label first, then the values).

    Values may be separated by commas, tabs or spaces. Missing values written
    as `NaN` (the variable-length sets of the 2018 archive) are kept as NaN.

    Args:
        path: A `*_TRAIN.tsv` / `*_TEST.tsv` / `.txt` file (gzip accepted).

    Returns:
        A tuple `(series, labels, label_values)`: float32 array of shape
        (N, T, 1), int32 array (N,) of class ids 0..K-1, and the K original
        label values in id order (ints when they are all integral).

    Raises:
        FileNotFoundError: If `path` is missing.
        ValueError: If a value is not a number, rows have different lengths,
            or the file is empty.
    """
    rows, raw_labels = [], []
    for line_number, line in enumerate(read_lines(path), start=1):
        line = line.strip()
        if not line:
            continue
        fields = _UCR_SEPARATOR.split(line)
        try:
            numbers = [float(field) for field in fields]
        except ValueError as error:
            raise ValueError(
                f"read_ucr: path={os.fspath(path)!r} line {line_number}: {error}"
            ) from None
        if rows and len(numbers) - 1 != len(rows[0]):
            raise ValueError(
                f"read_ucr: path={os.fspath(path)!r} is ragged: line {line_number} "
                f"has {len(numbers) - 1} values but the first series has "
                f"{len(rows[0])}. Pad shorter series with NaN."
            )
        raw_labels.append(numbers[0])
        rows.append(numbers[1:])
    if not rows or not rows[0]:
        raise ValueError(f"read_ucr: path={os.fspath(path)!r} has no series.")
    series = np.asarray(rows, dtype=np.float32)[:, :, None]  # (N, T, 1)
    label_values, labels = np.unique(np.asarray(raw_labels), return_inverse=True)
    if np.all(label_values == np.round(label_values)):
        label_values = label_values.astype(np.int64)
    return series, labels.astype(np.int32), label_values
