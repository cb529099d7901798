"""The command line's help: `python -m training train --help`, `presets`."""

import dataclasses
import json

import pytest

from training import cli, config_help
from training.config import CONFIG_DIR, TrainingConfig

# --- help -------------------------------------------------------------------


def _help(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_train_help_lists_every_config_field_with_default_and_comment(capsys):
    text = _help(capsys, ["train", "--help"])
    docs = {doc.name: doc for doc in config_help.field_docs()}
    assert list(docs) == [f.name for f in dataclasses.fields(TrainingConfig)]
    for field in dataclasses.fields(TrainingConfig):
        default = (
            field.default_factory()
            if field.default is dataclasses.MISSING
            else field.default
        )
        assert f"  {field.name}: " in text, field.name
        assert f"= {json.dumps(default)}" in text.split(f"  {field.name}: ")[1].split("\n")[0]
    groups = {doc.group: doc.comment for doc in docs.values() if doc.comment}
    # The project's rule: a comment on every field (shared by a group).
    assert {doc.group for doc in docs.values()} == set(groups)
    for comment in groups.values():  # each comment, wrapped, is in the help
        assert " ".join(comment.split()) in " ".join(text.split())


def test_help_prints_the_values_validate_accepts(capsys):
    text = _help(capsys, ["train", "--help"])
    docs = {doc.name: doc for doc in config_help.field_docs()}
    for name in ("task", "strategy", "precision", "dataset"):
        line = next(li for li in text.splitlines() if li.startswith(f"  {name}: "))
        for value in docs[name].choices:
            assert value in line
            extra = {"train_files": ("a", "b")} if value == "files" else {}
            assert getattr(TrainingConfig().replace(**{name: value}, **extra), name) == value
        with pytest.raises(ValueError, match=name):
            TrainingConfig().replace(**{name: "not-a-choice"})
    assert "files" in docs["dataset"].choices  # read from the literal in validate()


@dataclasses.dataclass(frozen=True)
class _Documented:
    # First line of a two-line comment,
    # and its second line.
    alpha: int = 1
    # Two fields under one comment.
    beta: str = "b"
    gamma: tuple = ()
    delta: dict = dataclasses.field(default_factory=lambda: {"k": 1})

    def validate(self):
        _choice("beta", self.beta, ("b", "c"))  # noqa: F821 (read, never run)


def test_field_docs_read_comments_groups_types_and_choices():
    docs = config_help.field_docs(_Documented)
    assert [(d.name, d.type, d.default, d.choices, d.comment, d.group) for d in docs] == [
        ("alpha", "int", 1, None, "First line of a two-line comment, and its second line.", 0),
        ("beta", "str", "b", ("b", "c"), "Two fields under one comment.", 1),
        ("gamma", "tuple", (), None, None, 1),
        ("delta", "dict", {"k": 1}, None, None, 1),
    ]
    text = config_help.fields_help(_Documented, choices={"gamma": ("x",)})
    assert "  gamma: tuple = []  {x}" in text  # an explicit table wins
    assert "{b, c}" not in text


def test_presets_prints_one_line_per_preset_file(capsys):
    assert cli.main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    files = sorted(CONFIG_DIR.glob("*.json"))
    assert [line.split()[0] for line in lines] == [p.stem for p in files]
    for line, path in zip(lines, files, strict=True):
        comment = json.loads(path.read_text())["_comment"]
        description = line[len(path.stem) :].strip()
        assert comment.startswith(description) and description.endswith(".")


def test_first_sentence():
    assert config_help.first_sentence("One (Table 3). Two.") == "One (Table 3)."
    assert config_help.first_sentence("Path ../a.b; done. More") == "Path ../a.b; done."
    assert config_help.first_sentence("No stop") == "No stop"
