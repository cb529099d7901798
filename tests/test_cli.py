"""The command lines' help and errors: `python -m training`, `python -m export`."""

import dataclasses
import json
import os
import re
import subprocess
import sys
import warnings

import pytest

from cli import config_help, export_commands, training_commands
from cli.config_help import first_sentence
from cli.errors import run_reporting_errors
from tests.conftest import REPO_ROOT
from training.config import (
    CONFIG_DIR,
    TrainingConfig,
    available_presets,
    load_config,
    read_preset,
)
from training.tasks.options import OPTIONS, option_names

# The smallest toy run (as tests/test_training_run.py), for errors that come
# from training itself.
FAST = ["toy_train_size=40", "toy_eval_size=8", "eval_sentences=0", "epochs=1"]


def _train(tmp_path, *overrides, config="tiny", run="run"):
    argv = ["train", "--config", config, "--run-dir", str(tmp_path / run), "--verbose", "0"]
    for item in overrides:
        argv += ["--set", item]
    return argv


def _refused(capsys, argv, match, main=training_commands.main):
    """Runs `main(argv)`; checks exit status 2 and one `error:` line naming `match`."""
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("error: ") and match in err, err
    assert "Traceback" not in err
    return err


# --- help -------------------------------------------------------------------


def _help(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        training_commands.main(argv)
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_train_help_lists_every_config_field_with_default_and_comment(capsys):
    text = _help(capsys, ["train", "--help"])
    docs = {doc.name: doc for doc in config_help.field_docs()}
    common = [f for f in dataclasses.fields(TrainingConfig) if f.name != "task_options"]
    assert list(docs) == [f.name for f in common]
    for options in OPTIONS.values():  # without a task, every task's fields too
        docs.update({doc.name: doc for doc in config_help.field_docs(options)})
        common += dataclasses.fields(options)
    for field in common:
        default = (
            field.default_factory()
            if field.default is dataclasses.MISSING
            else field.default
        )
        assert f"  {field.name}: " in text, field.name
        assert f"= {json.dumps(default)}" in text.split(f"  {field.name}: ")[1].split("\n")[0]
    # The project's rule: a comment on every field.
    assert all(doc.comment for doc in docs.values())
    for doc in docs.values():  # each comment, wrapped, is in the help
        assert " ".join(doc.comment.split()) in " ".join(text.split())


@pytest.mark.parametrize("preset", available_presets())
def test_train_help_of_a_preset_lists_its_task_fields_only(capsys, preset):
    """`--config PRESET --help` shows the common fields and its task's, each
    with one sentence, and none of another task's."""
    task = read_preset(preset).get("task", "translation")
    text = _help(capsys, ["train", "--config", preset, "--help"])
    for name, options in OPTIONS.items():
        for doc in config_help.field_docs(options):
            shown = f"  {doc.name}: " in text
            assert shown == (doc.name in option_names(OPTIONS[task])), (preset, doc.name)
            if name == task:
                sentences = first_sentence(doc.comment)
                assert sentences == " ".join(doc.comment.split()), doc.name  # one sentence
    assert "  seed: " in text and "  epochs: " in text
    if task == "classification":
        assert "  beam_size: " not in text and "  pooling: str = \"mean\"  {mean, max}" in text
    if task == "translation":
        assert "  char_ngram_buckets: " not in text


def test_train_help_with_task_lists_that_task_fields(capsys):
    text = _help(capsys, ["train", "--task", "timeseries", "--help"])
    assert "  patch_length: " in text and "  min_word_count: " not in text
    text = _help(capsys, ["train", "--config", "trec", "--set", "task=translation", "--help"])
    assert "  beam_size: " in text and "  cross_fit: " not in text


@pytest.mark.parametrize("preset", available_presets())
def test_presets_load_and_validate_with_their_task_options(preset):
    values = read_preset(preset)
    files = '["x.src", "x.tgt"]' if values.get("task") == "translation" else '["x.txt"]'
    extra = [f"train_files={files}"] if values.get("dataset") == "files" else []
    config = load_config(preset, extra)
    assert isinstance(config.task_options, OPTIONS[config.task])
    assert set(config.to_dict()) == (
        {f.name for f in dataclasses.fields(TrainingConfig)} - {"task_options"}
        | set(option_names(OPTIONS[config.task]))
    )
    assert TrainingConfig.from_dict(config.to_dict()) == config  # config.json reads back


def test_a_field_of_another_task_is_refused_naming_it():
    with pytest.raises(ValueError, match=re.escape("beam_size=2 with task='classification'")):
        load_config("trec", ["beam_size=2"])
    with pytest.raises(ValueError, match=r"char_ngram_buckets=64 with task='translation'.*--set"):
        load_config("multi30k", ["char_ngram_buckets=64"])
    with pytest.raises(ValueError, match=r"min_word_count=2 with task='timeseries'.*--set"):
        load_config("toy", ["task=timeseries", "dataset=ucr", "min_word_count=2"])
    # The preset's own task fields go when --set changes the task; the given ones stay.
    config = load_config("tiny", ["task=classification", "dataset=sst2", "pooling=max"])
    assert config.pooling == "max" and not hasattr(config, "beam_size")
    with pytest.raises(AttributeError, match="`beam_size` is a field of task"):
        _ = config.beam_size
    assert load_config("trec", ["min_word_count=3"]).min_word_count == 3


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
    assert training_commands.main(["presets"]) == 0
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


# Runs the commands that need no model, then prints their exit statuses and
# which of TensorFlow, tensorflow-text and Keras they imported.
_LIGHT_COMMANDS = """
import contextlib, io, json, sys
from cli import export_commands, training_commands
statuses = []
for main, argv in [(training_commands.main, ["--help"]),
                   (training_commands.main, ["train", "--config", "trec", "--help"]),
                   (training_commands.main, ["presets"]),
                   (training_commands.main, ["train", "--no-such-flag"]),
                   (export_commands.main, ["--help"]),
                   (export_commands.main, ["tflite", "--help"])]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            statuses.append(main(argv))
        except SystemExit as exit:
            statuses.append(exit.code)
heavy = [m for m in ("tensorflow", "tensorflow_text", "keras") if m in sys.modules]
print(json.dumps([statuses, heavy]))
"""


def test_help_presets_and_bad_arguments_import_no_tensorflow():
    """Why the commands import their work after parsing: `--help` answers at once."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    result = subprocess.run([sys.executable, "-c", _LIGHT_COMMANDS], env=env, cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [[0, 0, 0, 2, 0, 0], []]


# --- errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["epochs=0"], "epochs=0"),
        (["no_such_key=1"], "no_such_key"),
        (["strategy=warp_drive"], "warp_drive"),
    ],
)
def test_bad_config_value_is_one_error_line(capsys, tmp_path, overrides, match):
    _refused(capsys, _train(tmp_path, *overrides), match)


def test_unknown_preset_and_missing_config_file(capsys, tmp_path):
    _refused(capsys, _train(tmp_path, config="nonexistent"), "nonexistent")
    _refused(capsys, _train(tmp_path, config=str(tmp_path / "gone.json")), "gone.json")


def test_broken_config_json_is_one_error_line(capsys, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"task": "translation",,}')
    _refused(capsys, _train(tmp_path, config=str(broken)), "line 1")


def test_bad_data_files_are_one_error_line(capsys, tmp_path):
    src, tgt = tmp_path / "a.src", tmp_path / "a.tgt"
    src.write_text("one\ntwo\nthree\n")
    tgt.write_text("eins\nzwei\n")
    files = f'train_files=["{src}", "{tgt}"]'
    _refused(capsys, _train(tmp_path, *FAST, "dataset=files", files), "has 3 lines")
    missing = f'train_files=["{tmp_path / "nope.src"}", "{tgt}"]'
    _refused(capsys, _train(tmp_path, *FAST, "dataset=files", missing, run="run2"), "nope.src")


def test_empty_label_line_is_refused_with_file_and_line(capsys, tmp_path):
    data = tmp_path / "labels.tsv"
    data.write_text("pos\tgood film\n\tno label here\n")
    argv = _train(
        tmp_path, *[f for f in FAST if not f.startswith("eval_sentences")],  # translation's
        "task=classification", "dataset=files", f'train_files=["{data}"]'
    )
    err = _refused(capsys, argv, "labels.tsv")
    assert "line 2" in err and "empty label" in err


@pytest.mark.slow  # 10-20 s: the data pipeline is traced before the model is built
def test_impossible_model_size_is_one_error_line(capsys, tmp_path):
    argv = _train(tmp_path, *FAST, "model.hidden_dim=30", "model.num_heads=4")
    _refused(capsys, argv, "hidden_dim=30")


def test_evaluate_without_a_run_is_one_error_line(capsys, tmp_path):
    _refused(capsys, ["evaluate", "--run-dir", str(tmp_path / "none")], "model.keras")


def test_an_error_is_printed_on_one_line_and_ctrl_c_is_no_traceback(capsys):
    from cli.errors import run_reporting_errors

    def fails(error):
        def command():
            raise error
        return command

    assert run_reporting_errors(fails(ValueError("first line\n  second line\n"))) == 2
    assert capsys.readouterr().err == "error: first line second line\n"
    assert run_reporting_errors(fails(OSError())) == 2
    assert capsys.readouterr().err == "error: OSError\n"
    assert run_reporting_errors(fails(KeyboardInterrupt())) == 130
    assert capsys.readouterr().err == "interrupted\n"
    with pytest.raises(KeyboardInterrupt):
        run_reporting_errors(fails(KeyboardInterrupt()), debug=True)
    with pytest.raises(TypeError):  # a bug is no user error: its traceback shows
        run_reporting_errors(fails(TypeError("a bug")))


def test_debug_lets_the_exception_through(tmp_path):
    with pytest.raises(ValueError, match="epochs=0"):
        training_commands.main(_train(tmp_path, "epochs=0") + ["--debug"])
    with pytest.raises(ValueError, match="epochs=0"):
        training_commands.main(["--debug"] + _train(tmp_path, "epochs=0"))


def test_export_errors_are_one_error_line(capsys, tmp_path):
    argv = ["saved-model", "--run-dir", str(tmp_path / "none"), "--output", str(tmp_path / "x")]
    _refused(capsys, argv, "model.keras", main=export_commands.main)
    with pytest.raises(FileNotFoundError):
        export_commands.main(argv + ["--debug"])


@pytest.mark.slow
def test_real_process_exits_2_without_traceback(tmp_path):
    """One error line, TensorFlow's start-up lines hidden (no level set);
    `--debug` gives the traceback."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    command = [sys.executable, "-m", "training", *_train(tmp_path, "epochs=0")]
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: `epochs` must be a positive integer"), \
        lines
    debug = subprocess.run(
        command + ["--debug"], env=env, capture_output=True, text=True, timeout=300,
        cwd=REPO_ROOT,
    )  # fmt: skip
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_a_real_process_writes_all_it_printed_and_ends_with_mains_status():
    """The entry points end with `os._exit` (`cli.process.exit_now`), skipping
    Python's teardown: what a command printed to a pipe, block-buffered
    here, is all there, and the status is its `main`'s."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    result = subprocess.run([sys.executable, "-m", "training", "presets"], env=env,
                            capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout == config_help.presets_help() + "\n"


def test_a_bare_path_for_a_files_field_is_one_file():
    from training.config import load_config

    # `--set train_files=data.tsv` once read as the file names "d", "a", "t", ...
    config = load_config("text_classification", ["dataset=files", "train_files=data/x.tsv",
                                                  'valid_files=["v.tsv"]'])
    assert config.train_files == ("data/x.tsv",)
    assert config.valid_files == ("v.tsv",)
    assert TrainingConfig(task="classification", dataset="files", train_files=("a", "b")).replace(
        test_files="t.tsv").test_files == ("t.tsv",)


@pytest.mark.slow
def test_commands_hide_tensorflow_start_up_lines_unless_asked(tmp_path):
    """The export process too exits 2 with only its error line; a
    TF_CPP_MIN_LOG_LEVEL the user set is theirs."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    command = [sys.executable, "-m", "export", "saved-model", "--run-dir", str(tmp_path / "none"),
               "--output", str(tmp_path / "x")]

    def run(extra_env):
        result = subprocess.run(command, env={**env, **extra_env}, capture_output=True,
                                text=True, timeout=300, cwd=REPO_ROOT)
        assert result.returncode == 2, result.stderr
        return result.stderr.splitlines()

    quiet = run({})
    assert len(quiet) == 1 and quiet[0].startswith("error: No trained model"), quiet
    # TensorFlow's own lines are there when the user sets the level.
    assert len(run({"TF_CPP_MIN_LOG_LEVEL": "0"})) > 1


def test_a_warning_is_one_line_and_the_error_after_it_too(capsys):
    def command():
        warnings.warn("run_dir='r' was written before run directories\ncarried a format version",
                      UserWarning, stacklevel=2)
        raise ValueError("a bad value")

    with warnings.catch_warnings():
        warnings.simplefilter("always")  # as a command's process shows it (pytest raises it)
        assert run_reporting_errors(command) == 2
    assert capsys.readouterr().err.splitlines() == [
        "warning: run_dir='r' was written before run directories carried a format version",
        "error: a bad value",
    ]
