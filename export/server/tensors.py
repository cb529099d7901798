"""JSON values to the arrays a signature takes, and its outputs back to JSON.

TensorFlow Serving's REST API writes a tensor as nested JSON lists, a
string as a JSON string (or `{"b64": "..."}` for bytes that are not text),
and numbers as JSON numbers (`NaN` and `Infinity` too, which Python's JSON
reads and writes).  `to_array` checks a value against the signature's
input spec before anything runs: its rank and fixed sizes, that every
element has the input's type (no `true` where an integer belongs, no
number where a string belongs), that the value is not ragged, and that an
integer fits int32; the error names the input, the row and what was found.
No framework is imported here: the arrays are numpy's.
"""

import base64
import binascii
import dataclasses

import numpy as np

from export.server.errors import bad_request

_INT32 = np.iinfo(np.int32)


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One input of a signature.

    Attributes:
        name: Its key (`sentences`, `encoder_token_ids`, ...).
        dtype: "string", or a numpy dtype name ("int32", "float32", ...).
        shape: Sizes, the batch first; None where any size is taken.
    """

    name: str
    dtype: str
    shape: tuple

    @property
    def kind(self):
        """"string", "int" or "float"."""
        if self.dtype == "string":
            return "string"
        return "int" if np.dtype(self.dtype).kind in "iu" else "float"

    def describe(self):
        sizes = ", ".join("N" if size is None else str(size) for size in self.shape)
        return f"{self.name!r} ({self.dtype}, shape [{sizes}])"


def _leaf_error(spec, leaf, where):
    expected = {"string": "a string (or {\"b64\": ...})", "int": "an integer",
                "float": "a number"}[spec.kind]
    found = "true or false" if isinstance(leaf, bool) else (
        "a list" if isinstance(leaf, list) else
        "an object" if isinstance(leaf, dict) else
        "null" if leaf is None else f"{type(leaf).__name__} {leaf!r:.40}")
    return bad_request(f"{where}: every value of input {spec.describe()} must be "
                       f"{expected}; found {found}.")


def _string_bytes(leaf, spec, where):
    if isinstance(leaf, str):
        try:
            return leaf.encode("utf-8")
        except UnicodeEncodeError as error:
            raise bad_request(f"{where}: input {spec.name!r} holds text that is not valid "
                              f"UTF-8 ({error.reason} at character {error.start}).") from None
    if isinstance(leaf, dict) and set(leaf) == {"b64"} and isinstance(leaf["b64"], str):
        try:
            return base64.b64decode(leaf["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise bad_request(f"{where}: input {spec.name!r}: {{\"b64\": ...}} is not "
                              f"valid base64.") from None
    raise _leaf_error(spec, leaf, where)


def to_array(value, spec, where):
    """`value` (nested lists, the batch first) as a numpy array for `spec`.

    Args:
        value: The JSON value, batch axis included.
        spec: The `InputSpec`.
        where: How errors name the value ("instances", "inputs['sentences']").

    Raises:
        RequestError: 400, naming what is wrong.
    """
    if not isinstance(value, list):
        raise bad_request(f"{where}: input {spec.describe()} takes a list of rows; "
                          f"found {_type_name(value)}.")
    if not value:
        raise bad_request(f"{where}: input {spec.name!r} has no rows; send at least one.")
    try:
        cells = np.array(value, dtype=object)
    except ValueError:  # a shape numpy cannot build: ragged below the top
        raise _ragged(spec, where) from None
    rank = len(spec.shape)
    if cells.ndim < rank:
        raise _ragged(spec, where)
    if cells.ndim > rank:
        if spec.kind == "string":  # a list where a string belongs
            raise _leaf_error(spec, [], where)
        raise bad_request(f"{where}: input {spec.describe()} takes {rank}-dimensional "
                          f"values; found {cells.ndim}-dimensional ones.")
    for axis, (size, expected) in enumerate(zip(cells.shape, spec.shape, strict=True)):
        if expected is not None and size != expected:
            raise bad_request(f"{where}: input {spec.describe()} needs size {expected} on "
                              f"axis {axis}; found {size}.")
    flat = cells.ravel()
    if spec.kind == "string":
        data = [_string_bytes(leaf, spec, where) for leaf in flat]
        return np.array(data, dtype=object).reshape(cells.shape)
    allowed = (int,) if spec.kind == "int" else (int, float)
    for leaf_type in set(map(type, flat)):
        if leaf_type not in allowed:
            leaf = next(leaf for leaf in flat if type(leaf) is leaf_type)
            raise _leaf_error(spec, leaf, where)
    if spec.kind == "int":
        try:
            wide = cells.astype(np.int64)
        except OverflowError:
            wide = None
        if wide is None or wide.size and (wide.min() < _INT32.min or wide.max() > _INT32.max):
            raise bad_request(f"{where}: input {spec.name!r} holds an integer outside "
                              f"int32's range [{_INT32.min}, {_INT32.max}].")
        return wide.astype(spec.dtype)
    try:
        return cells.astype(spec.dtype)
    except OverflowError:
        raise bad_request(f"{where}: input {spec.name!r} holds an integer too large for "
                          f"{spec.dtype}.") from None


def _ragged(spec, where):
    return bad_request(f"{where}: input {spec.describe()} takes {len(spec.shape)}-dimensional "
                       f"values whose rows have equal lengths; found ragged or shallower "
                       f"lists.")


def _type_name(value):
    return {dict: "an object", str: "a string", bool: "true or false",
            type(None): "null"}.get(type(value), type(value).__name__)


def to_json(array):
    """A numpy output array (or one row of it) as JSON-ready Python values."""
    array = np.asarray(array)
    if array.dtype.kind in "OSU":
        return _strings(array)
    return array.tolist()


def _strings(array):
    if isinstance(array, np.ndarray) and array.ndim:
        return [_strings(row) for row in array]
    value = array.item() if isinstance(array, np.ndarray) else array
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode("ascii")}
    return str(value)
