"""`--help` text for the config fields, generated from `TrainingConfig` itself.

The comment written above each field in `training/config.py` is the field's
documentation; this module reads it from the source at run time (with `ast`)
instead of keeping a second copy that would drift.  A field added to the
dataclass shows up in `python -m training train --help` with its type,
default and comment without any change here.

Allowed values come from `training.config.CHOICES` (field name -> tuple) when
the module defines it, and from the `_choice(name, value, choices)` calls in
`TrainingConfig.validate`, so the tuples the validation checks against are
the ones the help prints.
"""

import ast
import dataclasses
import inspect
import json
import re
import textwrap

from training.config import CONFIG_DIR, TrainingConfig, available_presets, read_preset
from training.tasks.options import OPTIONS

#: Fields the help leaves out: `TrainingConfig.task_options` is shown as the
#: task's own fields (`task_fields_help`).
SKIPPED = ("task_options",)

_FIRST_SENTENCE = re.compile(r"^(.*?[.!?])(?=\s+[A-Z(]|\s*$)", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class FieldDoc:
    """One dataclass field as the help shows it.

    `comment` is the block of `#` lines written directly above the field; a
    field with none (the second of a pair under one comment) gets
    `comment=None` and `group` equal to the group of the field above it.
    """

    name: str
    type: str
    default: object
    choices: tuple | None
    comment: str | None
    group: int


def _default(field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _class_source(cls):
    """(source lines, parsed class node) of `cls`, or (None, None) without source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (frozen app, interactive class)
        return None, None
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    return source.splitlines(), node


def _comment_above(lines, lineno):
    """The `#` lines directly above 1-based `lineno`, joined, or None."""
    block = []
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        block.append(lines[i].strip()[1:].strip())
        i -= 1
    return " ".join(reversed(block)) or None


def validated_choices(cls):
    """{field: allowed values} from the `_choice(...)` calls in `cls.validate`.

    The third argument of each call is read as a tuple literal or as the
    name of a module-level tuple of `cls`'s module; other expressions (such
    as `CHOICES["task"]`) are skipped, since `CHOICES` itself is read.
    """
    module = inspect.getmodule(cls)
    found = {}
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.validate)))
    except (OSError, TypeError, AttributeError):
        return found
    for call in ast.walk(tree):
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "_choice"
            and len(call.args) == 3
            and isinstance(call.args[0], ast.Constant)
        ):
            continue
        values = call.args[2]
        if isinstance(values, ast.Name):
            values = getattr(module, values.id, None)
        else:
            try:
                values = ast.literal_eval(values)
            except ValueError:
                values = None
        if isinstance(values, (tuple, list)):
            found[call.args[0].value] = tuple(values)
    return found


def field_docs(cls=None, choices=None):
    """The `FieldDoc` of every field of `cls` (default `TrainingConfig`), in order.

    Args:
        cls: A dataclass; its source supplies the comments and type names.
        choices: {field: allowed values}; default: the module's `CHOICES`
            dict if it has one, merged over `validated_choices(cls)`.
    """
    if cls is None:
        cls = TrainingConfig
    if choices is None:
        choices = {
            **validated_choices(cls),
            **getattr(inspect.getmodule(cls), "CHOICES", {}),
        }
    annotations = {}  # {field: (source lines, statement)}, a subclass's last
    for klass in reversed(cls.__mro__):
        lines, node = _class_source(klass) if dataclasses.is_dataclass(klass) else (None, None)
        for statement in node.body if node is not None else ():
            if isinstance(statement, ast.AnnAssign) and isinstance(
                statement.target, ast.Name
            ):
                annotations[statement.target.id] = (lines, statement)
    docs, group = [], -1
    for field in dataclasses.fields(cls):
        if field.name in SKIPPED:
            continue
        lines, statement = annotations.get(field.name, (None, None))
        if statement is None:
            type_name = getattr(field.type, "__name__", str(field.type))
            comment = None
        else:
            type_name = ast.unparse(statement.annotation)
            comment = _comment_above(lines, statement.lineno)
        if comment is not None or group < 0:
            group += 1
        values = choices.get(field.name)
        docs.append(
            FieldDoc(
                field.name,
                type_name,
                _default(field),
                None if values is None else tuple(values),
                comment,
                group,
            )
        )
    return docs


def _json(value):
    if value is dataclasses.MISSING:
        return "(required)"
    try:
        return json.dumps(value, ensure_ascii=False)
    except TypeError:
        return repr(value)


def fields_help(cls=None, choices=None, width=79):
    """The config fields as help text: one line per field, its comment under its group.

    Fields under one comment (`source_language` and `target_language`) are
    listed together above it.  Defaults are printed as JSON, the syntax that
    `--set KEY=VALUE` reads.
    """
    docs = field_docs(cls, choices)
    out = [
        "config fields (set with --set KEY=VALUE, VALUE in JSON; model.FIELD sets a",
        "field of the model preset).  Defaults are the dataclass's; a preset",
        "(--config) changes some of them:",
        "",
    ]
    indent = " " * 6
    for i, doc in enumerate(docs):
        line = f"  {doc.name}: {doc.type} = {_json(doc.default)}"
        if doc.choices is not None:
            line += "  {" + ", ".join(str(c) for c in doc.choices) + "}"
        out.append(line)
        last_of_group = i + 1 == len(docs) or docs[i + 1].group != doc.group
        if last_of_group:
            comment = next(
                (d.comment for d in docs if d.group == doc.group and d.comment), None
            )
            if comment:
                out.extend(
                    textwrap.wrap(
                        comment, width, initial_indent=indent, subsequent_indent=indent
                    )
                )
    return "\n".join(out)


def task_fields_help(task=None, width=79):
    """The common config fields, then `task`'s own (every task's when None)."""
    tasks = list(OPTIONS) if task is None else [task] if task in OPTIONS else []
    parts = [fields_help(width=width)]
    for name in tasks:
        text = fields_help(OPTIONS[name], width=width).split("\n", 4)[-1]
        parts.append(f"fields of task {name!r} (refused with another task):\n\n{text}")
    return "\n\n".join(parts)


def help_task(argv):
    """The task that `argv` names (`--task`, `--set task=...`, or its `--config`
    preset's), or None where it names none or names it wrongly."""
    task, preset = None, None
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag == "--task":
            task = value
        elif flag == "--set" and value.startswith("task="):
            task = value[len("task="):].strip('"')
        elif flag == "--config":
            preset = value
    if task is None and preset is not None:
        try:
            task = read_preset(preset).get("task", "translation")
        except (OSError, ValueError):
            return None
    return task


def first_sentence(text):
    """The first sentence of `text` (up to a '.', '!' or '?' before a capital)."""
    text = " ".join(text.split())
    match = _FIRST_SENTENCE.match(text)
    return match.group(1) if match else text


def describe_presets():
    """[(name, first sentence of its "_comment")] for every preset JSON file."""
    described = []
    for name in available_presets():
        with open(CONFIG_DIR / f"{name}.json", encoding="utf-8") as f:
            comment = json.load(f).get("_comment", "")
        described.append((name, first_sentence(comment) if comment else "(no description)"))
    return described


def presets_help():
    """One line per preset: its name and the first sentence of its comment."""
    described = describe_presets()
    width = max((len(name) for name, _ in described), default=0)
    return "\n".join(f"{name:<{width}}  {text}" for name, text in described)
