"""Protocol buffers' text format, the part TensorFlow Serving's config files use.

`tensorflow_model_server` reads `--model_config_file` and
`--batching_parameters_file` as text-format messages:

```
model_config_list {
  config { name: "translator"  base_path: "/models/translator"  model_platform: "tensorflow" }
}
max_batch_size { value: 32 }   # a wrapped integer: google.protobuf.Int64Value
```

This module parses that syntax without the messages' `.proto` schemas:
fields `name: scalar`, `name { ... }` (or `name: { ... }`, `name < ... >`),
repeated fields by repetition or as a list (`versions: [1, 2]`), strings in
single or double quotes with C escapes, numbers, `true` / `false`, enum
names, `#` comments, and `,` or `;` between fields.  What the fields mean
is `export.server.config`'s; a syntax error names the file, line and what
was found there.
"""

import ast
import re

_TOKEN = re.compile(r"""
    (?P<space>[ \t\r\f\v]+) | (?P<newline>\n) | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf|nan)[fF]?\b)
  | (?P<name>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<symbol>[{}<>:,;\[\]])
""", re.VERBOSE)
_CLOSING = {"{": "}", "<": ">"}


class Message:
    """A parsed message: its fields in file order, each `(name, value, line)`.

    A value is a `str` (strings and enum names), an `int`, a `float`, a
    `bool`, or a nested `Message`.
    """

    def __init__(self, where, line):
        self.where = where
        self.line = line
        self.fields = []

    def values(self, name):
        """Every value of field `name` (a repeated field's, or [] if absent)."""
        return [value for field, value, _ in self.fields if field == name]

    def line_of(self, name):
        return next((line for field, _, line in self.fields if field == name), self.line)

    def check_fields(self, allowed, what):
        """Raises ValueError on a field not in `allowed`, naming it and its line."""
        for name, _, line in self.fields:
            if name not in allowed:
                raise ValueError(
                    f"{self.where}:{line}: unknown field {name!r} in {what}; "
                    f"expected one of {sorted(allowed)}.")

    def single(self, name, kind, default=None):
        """The one value of field `name`, checked to be a `kind`, or `default`."""
        values = self.values(name)
        if not values:
            return default
        line = self.line_of(name)
        if len(values) > 1:
            raise ValueError(f"{self.where}:{line}: field {name!r} is given "
                             f"{len(values)} times; it takes one value.")
        value = values[0]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{self.where}:{line}: field {name!r} must be "
                             f"{_KIND_NAMES.get(kind, kind.__name__)}; found {value!r}.")
        return value


_KIND_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _tokens(text, where):
    """(kind, text, line) of each token of `text`; a stray character raises."""
    line, position = 1, 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ValueError(f"{where}:{line}: unexpected character {text[position]!r}.")
        kind = match.lastgroup
        if kind == "newline":
            line += 1
        elif kind not in ("space", "comment"):
            yield kind, match.group(), line
        position = match.end()


def _scalar(kind, token, where, line):
    if kind == "string":
        try:
            return ast.literal_eval(token)
        except (SyntaxError, ValueError):
            raise ValueError(f"{where}:{line}: cannot read the string {token}.") from None
    if kind == "number":
        body = token.rstrip("fF") if not token.lower().endswith(("inf", "nan")) else token
        try:
            return int(body)
        except ValueError:
            return float(body)
    if token in ("true", "True"):
        return True
    if token in ("false", "False"):
        return False
    return token  # an enum value's name


def parse(text, where="<text>"):
    """The `Message` of text-format `text`; `where` names it in errors."""
    tokens = list(_tokens(text, where))
    position = 0

    def peek():
        return tokens[position] if position < len(tokens) else (None, None, _last_line())

    def _last_line():
        return tokens[-1][2] if tokens else 1

    def take():
        nonlocal position
        token = peek()
        position += 1
        return token

    def expected(what):
        kind, token, line = peek()
        found = "the end of the file" if kind is None else repr(token)
        return ValueError(f"{where}:{line}: expected {what}; found {found}.")

    def message(closing, line):
        result = Message(where, line)
        while True:
            kind, token, line = peek()
            if kind is None or token == closing:
                if token != closing:
                    raise expected(repr(closing))
                take()
                return result
            if kind != "name":
                raise expected("a field name")
            take()
            has_colon = peek()[1] == ":"
            if has_colon:
                take()
            _, opening, value_line = peek()
            if opening in _CLOSING:
                take()
                result.fields.append((token, message(_CLOSING[opening], value_line), line))
            elif not has_colon:
                raise expected(f"':' or '{{' after field {token!r}")
            elif opening == "[":
                take()
                for value in scalar_list():
                    result.fields.append((token, value, line))
            else:
                result.fields.append((token, scalar(), line))
            if peek()[1] in (",", ";"):
                take()

    def scalar():
        kind, token, line = peek()
        if kind not in ("string", "number", "name"):
            raise expected("a value")
        take()
        return _scalar(kind, token, where, line)

    def scalar_list():
        values = []
        while peek()[1] != "]":
            values.append(scalar())
            if peek()[1] == ",":
                take()
            elif peek()[1] != "]":
                raise expected("',' or ']'")
        take()
        return values

    return message(None, 1)


def read(path):
    """The `Message` in text-format file `path`; errors name the file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte "
                         f"{error.start}).") from None
    return parse(text, str(path))
