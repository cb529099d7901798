"""Multivariate time series from files: the `.ts` format and a plain CSV layout.

`training.data.readers.read_ucr` reads one channel per series.  The readers
here read several (accelerometer axes, sensors), and series of unequal
lengths:

- `read_ts`: the `.ts` format that sktime and aeon write (the UEA and UCR
  archives' multivariate sets).
- `read_series_csv`: one CSV row per series and channel.
- `write_ts`: series and labels as a `.ts` file `read_ts` reads back exactly.
- `as_series`: series a user holds in memory, in aeon's layouts (arrays
  `(N, C, T)` or `(N, T)`, lists of unequal lengths), as the readers give them.

Both return `(series, labels, label_values, lengths)`: float32 series
`(N, T_max, C)`, the shorter ones padded at the end with NaN, missing
values inside a series as NaN (the input the series models read,
`keras_transformer.layers.series_masking`; a series needs one known value); int32 class ids `(N,)` into `label_values`;
and int32 `lengths` `(N,)`, the steps each series has.  Errors name the
file and the 1-based line, and the dimension or column where it helps.
"""

import csv
import math
import os

import numpy as np

from training.data.atomic import atomic_write_text
from training.data.readers import read_lines

#: The `@` keys of a `.ts` header, lowercase (the files spell them in
#: camelCase or lowercase alike); `@dimension` and `@dimensions` both occur.
_TS_KEYS = (
    "problemname", "timestamps", "missing", "univariate", "dimension", "dimensions",
    "equallength", "serieslength", "classlabel", "targetlabel", "data",
)
_TS_BOOLEAN_KEYS = ("timestamps", "missing", "univariate", "equallength", "targetlabel")
_TS_INTEGER_KEYS = ("dimension", "dimensions", "serieslength")
# Comment lines: "#", and "%" (the ARFF comment some archive files keep).
_TS_COMMENTS = ("#", "%")
_MISSING = ("?", "nan")
_CSV_HEADER = ("series_id", "channel", "label")


def check_series_values(x, series_name, missing="NaN", infinite="an infinite value"):
    """Refuses a series `(N, T, F)` without any known value, or with an infinite one.

    NaN is a missing value or, after a series' last known step, padding; a
    series of NaN only has no step to read, and an infinite value is no
    measurement.  `series_name(i)` names series i (0-based) in the one-line
    message (a file and line, an argument and index); `missing` says how
    a missing value is written there, `infinite` what counts as infinite.
    """
    infinite_rows = np.isinf(x).any(axis=(1, 2))
    if infinite_rows.any():
        i = int(np.flatnonzero(infinite_rows)[0])
        raise ValueError(
            f"{series_name(i)} holds {infinite} ({int(infinite_rows.sum())} of {len(x)} "
            f"series hold some); write a missing value as {missing}."
        )
    empty = np.isnan(x).all(axis=(1, 2))
    if empty.any():
        i = int(np.flatnonzero(empty)[0])
        raise ValueError(
            f"{series_name(i)} has no known value (every value is {missing}; "
            f"{int(empty.sum())} of {len(x)} series are so); leave it out."
        )


def series_suffix(path):
    """The suffix that names a file's format, lowercase: ".ts" of "a.TS" and "a.ts.gz"."""
    name = os.path.basename(os.fspath(path)).lower()
    name = name[: -len(".gz")] if name.endswith(".gz") else name
    return os.path.splitext(name)[1]


def _where(reader, path, line_number):
    return f"{reader}: path={os.fspath(path)!r} line {line_number}"


def _value(text, where):
    """A float from one cell; `?`, `NaN` (any case) are missing: NaN."""
    text = text.strip()
    if text.lower() in _MISSING:
        return math.nan
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is None or not math.isfinite(number):
        raise ValueError(
            f"{where}: {text!r} is not a number (write a missing value as '?' or NaN)."
        )
    return number


def _label_values(names):
    """`names` as ints when they are all integral numbers, else as strings."""
    try:
        numbers = [float(name) for name in names]
    except ValueError:
        return np.asarray(names, dtype=str)
    if all(math.isfinite(n) and n == round(n) for n in numbers):
        integers = [int(n) for n in numbers]
        if len(set(integers)) == len(integers):
            return np.asarray(integers, dtype=np.int64)
    return np.asarray(names, dtype=str)


def _sorted_names(names):
    """Numeric labels in numeric order ("2" < "10"), others alphabetically."""
    try:
        return sorted(names, key=float)
    except ValueError:
        return sorted(names)


def pad_series(rows, length=None):
    """Series of their own lengths -> float32 `(N, T, F)`, NaN-padded at the end.

    The input the series models read (`keras_transformer.layers.series_masking`).

    Args:
        rows: Arrays `(T_i, F)` (or `(T_i,)`, one feature), one F for all.
        length: T, at least the longest row; the longest if None.
    """
    rows = [np.asarray(r, np.float32).reshape(len(r), -1) for r in rows]
    length = max(len(r) for r in rows) if length is None else length
    series = np.full((len(rows), length, rows[0].shape[1]), np.nan, np.float32)
    for i, row in enumerate(rows):
        series[i, : len(row)] = row
    return series


def _stack(cases):
    """(N, T_max, C) float32 NaN-padded at the end, and int32 lengths (N,).

    Args:
        cases: One list of C channels per series, each a list of floats.
    """
    lengths = np.asarray([max(len(c) for c in channels) for channels in cases], np.int32)
    num_channels = len(cases[0])
    series = np.full((len(cases), int(lengths.max()), num_channels), np.nan, np.float32)
    for i, channels in enumerate(cases):
        for c, values in enumerate(channels):
            series[i, : len(values), c] = values
    return series, lengths


def _check_known(channels, where):
    """Refuses a series whose every value is missing: it has no step to read."""
    if not any(not math.isnan(v) for values in channels for v in values):
        raise ValueError(
            f"{where} holds a series whose every value is missing ('?' or NaN); a series "
            "needs at least one known value (leave the series out)."
        )


def _encode_labels(raw, order):
    """(int32 ids into `label_values`, `label_values`) of the label strings `raw`."""
    index = {name: i for i, name in enumerate(order)}
    return np.asarray([index[name] for name in raw], np.int32), _label_values(order)


# --- .ts ------------------------------------------------------------------------


def _ts_header_value(key, value, where):
    """The parsed value of one `@key value` header line."""
    if key in _TS_BOOLEAN_KEYS:
        if value.lower() not in ("true", "false"):
            raise ValueError(f"{where}: @{key} must be true or false; received {value!r}.")
        return value.lower() == "true"
    if key in _TS_INTEGER_KEYS:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{where}: @{key} must be a positive integer; received {value!r}.")
        return int(value)
    if key == "classlabel":
        words = value.split()
        if not words or words[0].lower() not in ("true", "false"):
            raise ValueError(
                f"{where}: @classLabel must be 'false' or 'true' followed by the labels "
                f"('@classLabel true walk run'); received {value!r}."
            )
        if words[0].lower() == "false":
            if len(words) > 1:
                raise ValueError(f"{where}: @classLabel false lists labels {words[1:]}.")
            return None
        if len(set(words[1:])) != len(words) - 1:
            raise ValueError(f"{where}: @classLabel lists a label twice: {words[1:]}.")
        return words[1:]  # [] when the labels are not listed
    if key == "data" and value:
        raise ValueError(f"{where}: @data takes no value; received {value!r}.")
    return value


def _read_ts_header(path, lines):
    """({key: (value, line number)}, the index of the first line after `@data`)."""
    header = {}
    for index, line in enumerate(lines):
        line_number = index + 1
        text = line.strip()
        if not text or text.startswith(_TS_COMMENTS):
            continue
        where = _where("read_ts", path, line_number)
        if not text.startswith("@"):
            raise ValueError(
                f"{where} holds data before the @data line; the header (@problemName, "
                "@classLabel, ...) must end with a line '@data'."
            )
        key, _, value = text[1:].partition(" ")
        key, value = key.lower(), value.strip()
        if key not in _TS_KEYS:
            raise ValueError(
                f"{where}: unknown header key {text.split()[0]!r}; "
                f"the .ts keys are {['@' + k for k in _TS_KEYS]}."
            )
        if key in header:
            raise ValueError(f"{where} repeats @{key} (first on line {header[key][1]}).")
        header[key] = (_ts_header_value(key, value, where), line_number)
        if key == "data":
            return header, index + 1
    last = len(lines)
    if not any(line.strip() for line in lines):
        raise ValueError(f"read_ts: path={os.fspath(path)!r} is empty.")
    raise ValueError(
        f"{_where('read_ts', path, last)}: the file ends without an @data line; the "
        "header must end with '@data', followed by one series a line."
    )


def _ts_dimensions(header, where):
    """The declared number of dimensions, or None when the header does not say."""
    dimensions = header.get("dimensions", header.get("dimension", (None, 0)))[0]
    univariate = header.get("univariate", (None, 0))[0]
    if univariate and dimensions not in (None, 1):
        raise ValueError(f"{where}: @univariate true but @dimensions {dimensions}.")
    return 1 if univariate else dimensions


def _check_ts_header(path, header, data_line, labels):
    """Refuses what the reader does not read: timestamps, regression, no labels."""
    where = _where("read_ts", path, data_line)
    for key, what in (("timestamps", "timestamped series ('(time,value)' pairs)"),
                      ("targetlabel", "regression targets (@targetLabel true)")):
        if header.get(key, (False, 0))[0]:
            raise ValueError(
                f"{_where('read_ts', path, header[key][1])}: this reader does not read "
                f"{what}; write the series without them (@{key} false)."
            )
    if labels and header.get("classlabel", (None, 0))[0] is None:
        said = "says false" if "classlabel" in header else "is missing"
        raise ValueError(
            f"{where}: @classLabel {said}, but the series task needs class labels: add "
            "'@classLabel true <label> <label> ...' before @data and end each data line "
            "with ':<label>'."
        )


def _read_ts_case(text, where, num_dimensions, has_labels, declared):
    """(channels, label) of one data line; `num_dimensions` may be None (first line)."""
    parts = text.split(":")
    label = parts.pop().strip() if has_labels else None
    if num_dimensions is not None and len(parts) != num_dimensions:
        ends = " and the class label" if has_labels else ""
        raise ValueError(
            f"{where} has {len(parts)} dimension(s){ends}, but the file's series have "
            f"{num_dimensions}{ends} (dimensions are separated by ':')."
        )
    if has_labels and not label:
        raise ValueError(f"{where} ends without a class label after the last ':'.")
    if declared and label not in declared:
        raise ValueError(
            f"{where} has label {label!r}, which @classLabel does not declare: {declared}."
        )
    channels = []
    for d, part in enumerate(parts, start=1):
        cells = part.split(",") if part.strip() else []
        channels.append([_value(c, f"{where} dimension {d} value {i}")
                         for i, c in enumerate(cells, start=1)])
    if not any(channels):
        raise ValueError(f"{where} holds a series without values.")
    _check_known(channels, where)
    return channels, label


def _check_ts_lengths(header, channels, where):
    if not header.get("equallength", (False, 0))[0]:
        return
    expected = header.get("serieslength", (None, 0))[0]
    for d, values in enumerate(channels, start=1):
        if expected is None:
            expected = len(values)
        if len(values) != expected:
            raise ValueError(
                f"{where} dimension {d} has {len(values)} values, but @equalLength true "
                f"and the series have {expected}."
            )


def read_ts(path, labels=True):
    """Reads a `.ts` file, the format of sktime and aeon (the UEA archive's).

    The header, lines of `@key value` after any `#` (or `%`) comments, ends with
    `@data`.  Keys (any case): `@problemName`, `@timeStamps`, `@missing`,
    `@univariate`, `@dimensions` (or `@dimension`), `@equalLength`,
    `@seriesLength`, `@classLabel true <labels...>` (or `false`) and
    `@targetLabel`.  Then one series a line: one comma-separated list of
    values per dimension, dimensions separated by ":", the class label last
    (`0.1,0.2,0.3:1.0,0.9,0.8:walk`).  A value `?` or `NaN` is missing.

    Series may have unequal lengths (`@equalLength false`); the dimensions of
    one series too, and a series is as long as its longest dimension.  A
    missing value counts in the length: it is a step whose value is unknown.

    Not read (a clear error): timestamped series (`@timeStamps true`) and
    regression targets (`@targetLabel true`).  `@missing` is not checked.

    Args:
        path: The `.ts` file (gzip accepted).
        labels: Whether the series must have class labels.  With False a
            file with `@classLabel false` is read too; its labels come back
            as None (unlabelled series to predict).

    Returns:
        A tuple `(series, labels, label_values, lengths)`: float32 array
        (N, T_max, C), series shorter than T_max padded at the end with NaN;
        int32 class ids (N,) into `label_values`; the label values in
        `@classLabel` order when it lists them (else sorted, numbers
        numerically), as ints when they are all integral, else as strings;
        int32 lengths (N,).  `labels` and `label_values` are None for a file
        without labels.

    Raises:
        FileNotFoundError: If `path` is missing.
        ValueError: On an empty file, a header without `@data`, an unknown
            `@` key, a missing `@classLabel`, a line with another number of
            dimensions, a value that is not a number, a label `@classLabel`
            does not declare, lengths unlike `@equalLength true` declares,
            or a series whose every value is missing; the message names the
            file and the line.
    """
    lines = read_lines(path)
    header, start = _read_ts_header(path, lines)
    _check_ts_header(path, header, start, labels)
    declared = header.get("classlabel", (None, 0))[0]
    has_labels = declared is not None
    num_dimensions = _ts_dimensions(header, _where("read_ts", path, start))
    cases, raw_labels = [], []
    for index in range(start, len(lines)):
        text = lines[index].strip()
        if not text or text.startswith(_TS_COMMENTS):
            continue
        where = _where("read_ts", path, index + 1)
        if text.startswith("@"):
            raise ValueError(f"{where}: a header line after @data; the header ends at @data.")
        channels, label = _read_ts_case(text, where, num_dimensions, has_labels, declared)
        num_dimensions = len(channels)
        _check_ts_lengths(header, channels, where)
        cases.append(channels)
        raw_labels.append(label)
    if not cases:
        raise ValueError(f"read_ts: path={os.fspath(path)!r} has no series after @data.")
    series, lengths = _stack(cases)
    if not has_labels:
        return series, None, None, lengths
    ids, label_values = _encode_labels(raw_labels, declared or _sorted_names(set(raw_labels)))
    return series, ids, label_values, lengths


def ts_label(name):
    """Whether `name` can be a class label of a `.ts` data line as it is: a
    word without spaces, ":" or "," (which separate a line's parts)."""
    return bool(name) and not any(c.isspace() or c in ":," for c in name)


def write_ts(path, series, labels, label_names, problem_name="series"):
    """Writes series and their labels as a `.ts` file that `read_ts` reads back exactly.

    Each value is written as `repr` of its float (a float32 comes back the
    same float32), NaN as `?` (missing, or padding at the end of a shorter
    series: both read back as NaN).  `@classLabel` lists `label_names` in
    their order, which `read_ts` keeps: class id i reads back as i.

    Args:
        path: The file to write (whole or not at all).
        series: Float array `(N, T, C)`, NaN-padded at the end.
        labels: Class ids `(N,)` into `label_names`.
        label_names: The class labels, words `ts_label` accepts, each once.
        problem_name: The `@problemName`, one word.

    Raises:
        ValueError: On a label name `ts_label` refuses or given twice, a
            class id outside `label_names`, or series that are not `(N, T, C)`.
    """
    series = np.asarray(series, np.float32)
    labels = np.asarray(labels)
    names = [str(name) for name in label_names]
    if series.ndim != 3 or len(series) != len(labels) or not len(series):
        raise ValueError(
            f"write_ts: series must be (N, T, C) with N > 0 labels; received series of shape "
            f"{series.shape} and {len(labels)} labels."
        )
    bad = [name for name in names if not ts_label(name)]
    if bad or len(set(names)) != len(names):
        raise ValueError(
            f"write_ts: label_names must be distinct words without spaces, ':' or ','; "
            f"received label_names={names!r}."
        )
    if labels.min() < 0 or labels.max() >= len(names):
        raise ValueError(
            f"write_ts: labels must be class ids in [0, {len(names)}); received labels "
            f"from {labels.min()} to {labels.max()}."
        )
    num_series, length, channels = series.shape
    lines = [
        f"@problemName {problem_name}", "@timeStamps false",
        f"@missing {str(bool(np.isnan(series).any())).lower()}",
        f"@univariate {str(channels == 1).lower()}", f"@dimensions {channels}",
        "@equalLength true", f"@seriesLength {length}",
        f"@classLabel true {' '.join(names)}", "@data",
    ]
    for row, label in zip(series, labels, strict=True):
        dimensions = (",".join("?" if math.isnan(v) else repr(v) for v in channel.tolist())
                      for channel in row.T)
        lines.append(":".join([*dimensions, names[int(label)]]))
    atomic_write_text(path, "\n".join(lines) + "\n")


# --- CSV ------------------------------------------------------------------------


def _csv_values(cells, where, names):
    """The values of one row: trailing empty cells end it, inner ones are missing."""
    while cells and not cells[-1].strip():
        cells = cells[:-1]
    values = []
    for i, cell in enumerate(cells):
        column = f"column {i + 4} ({names[i]!r})" if i < len(names) else f"column {i + 4}"
        values.append(math.nan if not cell.strip() else _value(cell, f"{where} {column}"))
    return values


def _channel_order(channels):
    """Integer channel names numerically, others in order of first appearance."""
    try:
        return sorted(channels, key=int)
    except ValueError:
        return list(channels)


def _read_csv_rows(path, lines, labels):
    """{series id: {"line", "label", "channels": {channel: values}}}, in file order."""
    rows = list(csv.reader(lines))
    if not rows or not any(cell.strip() for row in rows for cell in row):
        raise ValueError(f"read_series_csv: path={os.fspath(path)!r} is empty.")
    head = [cell.strip().lower() for cell in rows[0][:3]]
    if tuple(head) != _CSV_HEADER:
        raise ValueError(
            f"{_where('read_series_csv', path, 1)}: the header must begin "
            f"'series_id,channel,label' (then the value columns v1,v2,...); received "
            f"{','.join(rows[0][:4])!r}."
        )
    names = [cell.strip() for cell in rows[0][3:]]
    found = {}
    for line_number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        where = _where("read_series_csv", path, line_number)
        if len(row) < 3 or not row[0].strip() or not row[1].strip():
            raise ValueError(f"{where}: a row needs a series_id, a channel and a label: {row[:3]}.")
        key, channel, label = row[0].strip(), row[1].strip(), row[2].strip()
        if labels and not label:
            raise ValueError(f"{where}: series {key!r} channel {channel!r} has no label.")
        case = found.setdefault(key, {"line": line_number, "label": label, "channels": {}})
        if label != case["label"]:
            raise ValueError(
                f"{where}: series {key!r} has label {label!r} here but {case['label']!r} "
                f"on line {case['line']}."
            )
        if channel in case["channels"]:
            raise ValueError(
                f"{where}: series {key!r} channel {channel!r} again (first on line "
                f"{case['channels'][channel][0]})."
            )
        case["channels"][channel] = (line_number, _csv_values(row[3:], where, names))
    if not found:
        raise ValueError(f"read_series_csv: path={os.fspath(path)!r} has no series.")
    return found


def read_series_csv(path, labels=True):
    """Reads series from a CSV file of one row per series and channel.

    The layout: a header row `series_id,channel,label,v1,v2,...` (the value
    columns' names are free), then one row per series and channel: the
    series' id, the channel's name, the series' class label and its values
    in time order.

    ```
    series_id,channel,label,v1,v2,v3,v4
    s1,x,walk,0.1,0.2,0.3,0.4
    s1,y,walk,1.0,,0.8,
    s2,y,run,0.5,0.4
    s2,x,run,0.3,0.2
    ```

    The rows of a series may come in any order and anywhere in the file;
    series come out in the order of their first row.  Every series must have
    every channel the file names; channels named by integers come out in
    numeric order, others in the order they first appear.  Rows may be of
    unequal length: a row ends at its last non-empty cell (trailing empty
    cells, as a spreadsheet writes them, are not steps), and a series is as
    long as its longest channel.  An empty cell before that, `?` or `NaN`,
    is a missing value (NaN).  Values are quoted as the `csv` module reads.

    Args:
        path: The CSV file (gzip accepted).
        labels: Whether the rows must have labels.  With False the label
            cells may be empty and are not read; labels come back as None.

    Returns:
        A tuple `(series, labels, label_values, lengths)` as `read_ts` gives:
        float32 (N, T_max, C) NaN-padded at the end, int32 class ids (N,),
        the label values sorted (numbers numerically; ints when all
        integral, else strings), int32 lengths (N,).

    Raises:
        FileNotFoundError: If `path` is missing.
        ValueError: On an empty file, a wrong header, a row without id,
            channel or label, a series whose rows disagree on the label, a
            channel given twice or missing, a value that is not a number, or
            a series whose every value is missing; the message names the
            file, the line and the column.
    """
    found = _read_csv_rows(path, read_lines(path), labels)
    channels = _channel_order(dict.fromkeys(c for case in found.values() for c in case["channels"]))
    cases = []
    for key, case in found.items():
        missing = [c for c in channels if c not in case["channels"]]
        if missing:
            raise ValueError(
                f"{_where('read_series_csv', path, case['line'])}: series {key!r} has no "
                f"row for channel(s) {missing}; every series needs a row for each of the "
                f"file's channels {channels}."
            )
        cases.append([case["channels"][c][1] for c in channels])
        where = f"{_where('read_series_csv', path, case['line'])}: series {key!r}"
        if not any(cases[-1]):
            raise ValueError(f"{where} has no values.")
        _check_known(cases[-1], where)
    series, lengths = _stack(cases)
    if not labels:
        return series, None, None, lengths
    raw_labels = [case["label"] for case in found.values()]
    ids, label_values = _encode_labels(raw_labels, _sorted_names(set(raw_labels)))
    return series, ids, label_values, lengths


def as_series(X, what="X"):
    """Series in aeon's layouts -> float32 `(N, T, C)`, NaN-padded at the end.

    Args:
        X: A 3-D array `(N, C, T)`, a 2-D array `(N, T)` (one channel), or a
            list of arrays `(C, T_i)` or `(T_i,)`.
        what: The argument's name, for the messages.

    Raises:
        ValueError: In one line naming `what` (and the series): another
            shape, values that are not numbers, no series or no step, channel
            counts that differ, an infinite value, a series of NaN only.
    """
    layouts = (f"{what} must be a 3-D array (n_series, n_channels, length), a 2-D array "
               "(n_series, length) or a list of (n_channels, length) arrays")
    if isinstance(X, (list, tuple)):
        if not X:
            raise ValueError(f"{what} holds no series; received {what}={X!r}.")
        rows = [_series_array(x, f"{what}[{i}]", layouts) for i, x in enumerate(X)]
        for i, row in enumerate(rows):
            if row.shape[1] != rows[0].shape[1]:
                raise ValueError(
                    f"{what}[{i}] has {row.shape[1]} channel(s) but {what}[0] has "
                    f"{rows[0].shape[1]}; every series needs the same channels."
                )
        series = pad_series(rows)
    else:
        array = _numbers(X, what)
        if array.ndim not in (2, 3):
            raise ValueError(f"{layouts}; received {what} of shape {array.shape}.")
        if array.ndim == 2:
            array = array[:, None, :]
        if 0 in array.shape:
            raise ValueError(f"{layouts}, with at least one series, channel and step; "
                             f"received {what} of shape {array.shape}.")
        series = _float32(array, what).transpose(0, 2, 1)
    # An infinite value, or one beyond float32's range; a series of NaN only.
    check_series_values(series, lambda i: f"{what}[{i}]",
                        infinite="an infinite value or one beyond float32's range")
    return series


def _numbers(x, what):
    try:
        return np.asarray(x, np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"{what} must hold numbers (NaN where a value is missing); received "
            f"{type(x).__name__} that does not convert to float"
            + (" (arrays of unequal lengths go in a list)" if isinstance(x, np.ndarray) else "")
            + "."
        ) from None


def _series_array(x, what, layouts):
    """One series of a list, `(C, T)` or `(T,)`, as float32 `(T, C)`."""
    array = _numbers(x, what)
    if array.ndim == 1:
        array = array[None]
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(f"{layouts}, each with at least one channel and step; received "
                         f"{what} of shape {array.shape}.")
    return _float32(array, what).T


def _float32(array, what):
    with np.errstate(over="ignore"):
        return array.astype(np.float32)
