"""The server's flags and config files, read as `tensorflow_model_server` reads them.

TensorFlow Serving's text-format config files (`--model_config_file`,
`--batching_parameters_file`, `--monitoring_config_file`) are read into
`ServerOptions`, every mistake named with its file and line; the command
line's flags are TensorFlow Serving's, parsed without TensorFlow; a missing
`serve` extra is one error line.
"""

import importlib.util
import re
import subprocess
import sys

import pytest

from cli import export_commands
from cli.serve_command import server_options
from export.server import text_proto
from export.server.config import (
    BatchingParameters,
    ModelSource,
    read_batching_parameters,
    read_model_config,
    read_monitoring_config,
)
from tests.conftest import REPO_ROOT


def test_the_text_format_is_read_with_its_comments_quotes_and_lists():
    message = text_proto.parse(
        '# models\nmodel_config_list {\n  config { name: "a" base_path: \'/m/a\' }\n'
        '  config: { name: "b\\"q" base_path: "/m/b", model_version_policy <\n'
        '    specific { versions: [1, 3]; versions: 7 } > }\n}\n', "models.config")
    configs = message.single("model_config_list", text_proto.Message).values("config")
    assert [c.single("name", str) for c in configs] == ["a", 'b"q']
    specific = configs[1].single("model_version_policy", text_proto.Message).single(
        "specific", text_proto.Message)
    assert specific.values("versions") == [1, 3, 7]
    assert text_proto.parse("x: -1.5e3 y: true z: ENUM").fields == [
        ("x", -1500.0, 1), ("y", True, 1), ("z", "ENUM", 1)]


@pytest.mark.parametrize("text, named", [
    ("a {\n b: 1\n", "models.config:2: expected '}'; found the end of the file"),
    ("a {\n b 1 }", "models.config:2: expected ':' or '{' after field 'b'"),
    ("a: }", "models.config:1: expected a value"),
    ("a: 'unterminated\n", "models.config:1: unexpected character"),
    ("a: [1 2]", "models.config:1: expected ',' or ']'"),
    ("}", "models.config:1: expected a field name"),
])
def test_a_syntax_error_names_the_file_and_line(text, named):
    with pytest.raises(ValueError, match="^" + re.escape(named)):
        text_proto.parse(text, "models.config")


def test_a_model_config_list_is_read(tmp_path):
    path = tmp_path / "models.config"
    path.write_text('model_config_list {\n'
                    '  config { name: "translator" base_path: "exported/translator"\n'
                    '           model_platform: "tensorflow" }\n'
                    '  config { name: "sst2" base_path: "exported/sst2"\n'
                    '           model_version_policy { latest { num_versions: 2 } } }\n'
                    '  config { name: "old" base_path: "exported/old"\n'
                    '           model_version_policy { specific { versions: 1 versions: 3 } } }\n'
                    '}\n')
    translator, sst2, old = read_model_config(path)
    assert translator == ModelSource("translator", "exported/translator")
    assert sst2.num_versions == 2 and sst2.aspired([1, 2, 5, 3]) == [3, 5]
    assert old.versions == (1, 3) and old.aspired([1, 2, 3, 4]) == [1, 3]


@pytest.mark.parametrize("text, named", [
    ('model_config_list { config { name: "a" base_path: "/a" typo: 1 } }',
     ":1: unknown field 'typo' in config"),
    ('model_config_list { config { name: "a" } }', ": config needs a base_path"),
    ('model_config_list { config { name: "a" base_path: "/a" model_platform: "pytorch" } }',
     "model_platform 'pytorch' is not served"),
    ('model_config_list { config { name: 5 base_path: "/a" } }', "field 'name' must be a string"),
    ('model_config_list { }', "model_config_list holds no config"),
    ("models { }", "unknown field 'models'"),
    ('model_config_list {\n config { name: "a/b" base_path: "/a" } }',
     ":2: A model name must be a non-empty string without '/'"),
])
def test_a_bad_model_config_names_the_file_and_line(tmp_path, text, named):
    path = tmp_path / "models.config"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(named)):
        read_model_config(path)


def test_batching_parameters_are_read_with_tensorflow_servings_fields(tmp_path):
    path = tmp_path / "batching.config"
    path.write_text("max_batch_size { value: 32 }\nbatch_timeout_micros { value: 2000 }\n"
                    "max_enqueued_batches { value: 3 }\nnum_batch_threads { value: 1 }\n"
                    "allowed_batch_sizes: 8\nallowed_batch_sizes: 32\n"
                    "pad_variable_length_inputs: true\n")
    parameters = read_batching_parameters(path)
    assert parameters == BatchingParameters(32, 2000, 3, 1, ignored=(
        "allowed_batch_sizes", "pad_variable_length_inputs"))
    assert parameters.max_queued_rows == 96
    path.write_text("max_batch_size { value: 0 }\n")
    with pytest.raises(ValueError, match="max_batch_size must be an integer >= 1; received 0"):
        read_batching_parameters(path)
    path.write_text("max_batch_size: 8\n")
    with pytest.raises(ValueError, match="batching.config:1: field 'max_batch_size' must be"):
        read_batching_parameters(path)
    path.write_text("batch_timeout { value: 8 }\n")
    with pytest.raises(ValueError, match="unknown field 'batch_timeout'"):
        read_batching_parameters(path)


def test_the_monitoring_config_gives_the_metrics_path(tmp_path):
    path = tmp_path / "monitoring.config"
    path.write_text('prometheus_config { enable: true, path: "/metrics" }\n')
    assert read_monitoring_config(path) == "/metrics"
    path.write_text("prometheus_config { enable: false }\n")
    with pytest.raises(ValueError, match="enable: false is not served"):
        read_monitoring_config(path)


def _options(tmp_path, *flags):
    base = tmp_path / "translator"
    base.mkdir(exist_ok=True)
    args = export_commands.build_parser().parse_args(
        ["serve", f"--model_base_path={base}", *flags])
    return server_options(args)


def test_tensorflow_servings_flags_become_the_options(tmp_path, capsys):
    batching = tmp_path / "batching.config"
    batching.write_text("max_batch_size { value: 16 }\n")
    options = _options(tmp_path, "--model_name=translator", "--rest_api_port=9000",
                       "--enable_batching", f"--batching_parameters_file={batching}",
                       "--file_system_poll_wait_seconds=5", "--rest_api_timeout_in_ms=900",
                       "--port=8500", "--xla_cpu_compilation_enabled=true",
                       "--enable_model_warmup=false")
    assert options.models == (ModelSource("translator", str(tmp_path / "translator")),)
    assert (options.host, options.port, options.poll_seconds, options.timeout_ms) == (
        "127.0.0.1", 9000, 5.0, 900)
    assert options.batching.max_batch_size == 16 and options.warmup is False
    assert "--port 8500 is TensorFlow Serving's gRPC port" in capsys.readouterr().err
    assert _options(tmp_path).batching is None
    assert _options(tmp_path, "--enable_batching=false").batching is None
    _options(tmp_path, f"--batching_parameters_file={batching}")
    assert "read only with --enable_batching" in capsys.readouterr().err


@pytest.mark.parametrize("flags, named", [
    ([], "Nothing to serve"),
    (["--model_base_path=/no/such/folder"], "is not a folder: '/no/such/folder'"),
    (["--model_base_path=.", "--model_config_file=models.config"], "not both"),
    (["--model_base_path=.", "--rest_api_timeout_in_ms=0"], "timeout_ms must be an integer"),
])
def test_a_bad_serve_command_is_one_error_line(capsys, flags, named):
    assert export_commands.main(["serve", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and named in err and err.count("\n") == 1, err


def test_a_bad_flag_value_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_info:
        export_commands.main(["serve", "--enable_batching=maybe"])
    assert exit_info.value.code == 2
    assert "expected true or false; received 'maybe'" in capsys.readouterr().err


def test_without_the_serve_extra_one_line_says_what_to_install(tmp_path, capsys, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "uvicorn" else find_spec(name, *a))
    assert export_commands.main(["serve", f"--model_base_path={tmp_path}"]) == 2
    assert capsys.readouterr().err == ('error: The server needs the serve extra (uvicorn is '
                                       'not installed): pip install -e ".[serve]"\n')


def test_the_flags_and_files_are_read_without_tensorflow(tmp_path):
    (tmp_path / "batching.config").write_text("max_batch_size { value: 4 }\n")
    code = ("import sys\nfrom cli import export_commands\nfrom cli.serve_command import "
            "server_options\nargs = export_commands.build_parser().parse_args(['serve', "
            f"'--model_base_path={tmp_path}', '--enable_batching', "
            f"'--batching_parameters_file={tmp_path / 'batching.config'}'])\n"
            "print(server_options(args).batching.max_batch_size, 'tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, check=True, timeout=60)
    assert result.stdout.split() == ["4", "False"], result.stderr
