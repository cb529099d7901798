"""The body of a `:predict` call, read as TensorFlow Serving reads it, and its answer.

Two formats (TensorFlow Serving's REST API, "Request format"):

```
{"signature_name": "translate_xla", "instances": ["a sentence", "another"]}      row
{"instances": [{"sentences": "a sentence"}, {"sentences": "another"}]}           row, named
{"signature_name": "classify_ids", "inputs": [[5, 8, 3]]}                       columnar
{"inputs": {"sentences": ["a sentence", "another"]}}                             columnar, named
```

A row request is answered `{"predictions": [...]}`: one value a row for a
signature with one output, one object `{output: value}` a row otherwise.  A
columnar one is answered `{"outputs": value}` or `{"outputs": {output:
value}}`.  `signature_name` defaults to `serving_default`.  Anything else
(another key, both formats, neither) is refused with a message naming it.
"""

import dataclasses
import json

from export.server.errors import bad_request
from export.server.tensors import to_array, to_json

DEFAULT_SIGNATURE = "serving_default"
_KEYS = ("signature_name", "instances", "inputs")


@dataclasses.dataclass(frozen=True)
class PredictRequest:
    """A predict request, checked against its signature's inputs.

    Attributes:
        inputs: {input name: numpy array}, the batch first.
        rows: The batch size (every input's first axis).
        columnar: Whether it came as `inputs` (answered as `outputs`).
    """

    inputs: dict
    rows: int
    columnar: bool


def read_json_body(body):
    """The JSON object in request body `body` (bytes).

    Raises:
        RequestError: 400 for an empty body, bytes that are not UTF-8,
            malformed or too deeply nested JSON, or a value that is not an
            object.
    """
    if not body.strip():
        raise bad_request("The request body is empty; send a JSON object such as "
                          "{\"instances\": [...]}.")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise bad_request(f"The request body is not UTF-8 ({error.reason} at byte "
                          f"{error.start}).") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise bad_request(f"The request body is not valid JSON: {error.msg} at line "
                          f"{error.lineno}, column {error.colno}.") from None
    except RecursionError:
        raise bad_request("The request body nests JSON too deeply.") from None
    if not isinstance(document, dict):
        raise bad_request(f"The request body must be a JSON object; found "
                          f"{type(document).__name__}.")
    return document


def signature_name(document):
    """The signature a predict request names (`serving_default` by default)."""
    unknown = sorted(set(document) - set(_KEYS))
    if unknown:
        raise bad_request(f"Unknown key {unknown[0]!r} in the request; a predict request "
                          f"holds \"signature_name\" and one of \"instances\" or \"inputs\".")
    name = document.get("signature_name", DEFAULT_SIGNATURE)
    if not isinstance(name, str):
        raise bad_request(f"\"signature_name\" must be a string; found {json.dumps(name)[:40]}.")
    return name


def _is_named(value, specs):
    """Whether `value` is an object of inputs by name (not a `{"b64": ...}` value)."""
    return isinstance(value, dict) and not (set(value) == {"b64"} and "b64" not in specs)


def _check_names(found, specs, where):
    missing = [name for name in specs if name not in found]
    unknown = [name for name in found if name not in specs]
    if missing or unknown:
        what = f"unknown input {unknown[0]!r}" if unknown else f"no input {missing[0]!r}"
        raise bad_request(f"{where}: {what}; the signature's inputs are "
                          f"{', '.join(spec.describe() for spec in specs.values())}.")


def read_predict(document, specs):
    """The `PredictRequest` of `document` for a signature's inputs `specs`
    ({name: `InputSpec`}, in the signature's order)."""
    has_rows, has_columns = "instances" in document, "inputs" in document
    if has_rows == has_columns:
        raise bad_request("A predict request holds exactly one of \"instances\" (row format) "
                          "or \"inputs\" (columnar format)" + ("; found both." if has_rows
                                                               else "; found neither."))
    if has_rows:
        instances = document["instances"]
        if not isinstance(instances, list) or not instances:
            raise bad_request("\"instances\" must be a non-empty list, one value per row.")
        named = [_is_named(row, specs) for row in instances]
        if any(named) and not all(named):
            raise bad_request("\"instances\": every row is an object of named inputs, or "
                              "none is; found both kinds.")
        if all(named):
            for number, row in enumerate(instances):
                _check_names(row, specs, f"instances[{number}]")
            values = {name: [row[name] for row in instances] for name in specs}
        elif len(specs) == 1:
            values = {next(iter(specs)): instances}
        else:
            raise bad_request(f"The signature has {len(specs)} inputs: each instance must be "
                              f"an object naming them ({', '.join(specs)}).")
        where = {name: "instances" for name in specs}
    else:
        columns = document["inputs"]
        if _is_named(columns, specs):
            _check_names(columns, specs, "inputs")
            values = dict(columns)
            where = {name: f"inputs[{name!r}]" for name in specs}
        elif len(specs) == 1:
            values = {next(iter(specs)): columns}
            where = {name: "inputs" for name in specs}
        else:
            raise bad_request(f"The signature has {len(specs)} inputs: \"inputs\" must be an "
                              f"object naming them ({', '.join(specs)}).")
    arrays = {name: to_array(values[name], spec, where[name]) for name, spec in specs.items()}
    sizes = {name: array.shape[0] for name, array in arrays.items()}
    if len(set(sizes.values())) > 1:
        raise bad_request(f"Every input must have the same number of rows; found {sizes}.")
    return PredictRequest(arrays, next(iter(sizes.values())), columnar=has_columns)


def predict_response(outputs, columnar):
    """TensorFlow Serving's answer for `outputs` ({name: array, batch first})."""
    if columnar:
        if len(outputs) == 1:
            return {"outputs": to_json(next(iter(outputs.values())))}
        return {"outputs": {name: to_json(value) for name, value in outputs.items()}}
    if len(outputs) == 1:
        return {"predictions": to_json(next(iter(outputs.values())))}
    names = list(outputs)
    columns = [to_json(outputs[name]) for name in names]
    return {"predictions": [dict(zip(names, row, strict=True))
                            for row in zip(*columns, strict=True)]}
