"""The README's main job serves its one request over HTTP when the `serve` extra is there.

`python3 -m training main` exports its SavedModel as version 1 of a base
path, starts the server of `python -m export serve` on a free loopback
port and asks it in TensorFlow Serving's columnar format; its answer must
be the reloaded SavedModel's in this process.  Without the extra it says
how to get it and answers in process.
"""

import ast

import pytest

from cli import main_job, training_commands
from training.runs.predict import SavedModelPredictor

FAST = ["toy_train_size=40", "toy_eval_size=8", "eval_sentences=0", "epochs=1"]


def _main(run_dir):
    argv = ["main", "--config", "tiny", "--run-dir", str(run_dir), "--verbose", "0"]
    for item in FAST:
        argv += ["--set", item]
    return training_commands.main(argv)


def _answers(out):
    return [line.split(" -> ", 1)[1] for line in out.splitlines() if " -> " in line]


@pytest.mark.slow
def test_the_main_job_serves_one_request_over_http(tmp_path, capsys, monkeypatch):
    run_dir = tmp_path / "main"
    assert _main(run_dir) == 0
    out = capsys.readouterr().out
    assert "== One request through the server of python -m export serve, over HTTP " \
           "(http://127.0.0.1:" in out, out
    export_dir = run_dir / "export" / "saved_model" / "1"
    assert f"Exported SavedModel to {export_dir}" in out
    served = _answers(out)
    assert len(served) >= 1
    sources = [line.split(" -> ")[0].strip() for line in out.splitlines() if " -> " in line]
    in_process = SavedModelPredictor(str(export_dir)).predict([ast.literal_eval(s) for s in sources])
    assert served == [repr(answer) for answer in in_process]

    monkeypatch.setattr(main_job, "missing_extra", lambda: "uvicorn")
    assert _main(run_dir) == 0  # the finished run reused, exported and answered again
    out = capsys.readouterr().out
    assert 'the reloaded SavedModel in process (serving_default; pip install -e ".[serve]" ' \
           "serves it over HTTP)" in out
    assert _answers(out) == served
