"""benchmarks/results: one file per benchmark, a list of dated runs, appended to."""

import argparse
import json
import pathlib
import re
import sys

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import common  # noqa: E402

DATE = re.compile(r"^\d{4}-\d\d-\d\d$")


def _args(**values):
    return argparse.Namespace(**{"quick": False, "change": None, **values})


def test_a_run_is_appended_with_its_date_commit_and_change(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS_DIR", str(tmp_path))
    common.append_result("bench", {"speed_up": 1.25}, _args())
    path = common.append_result("bench", {"speed_up": 1.5}, _args(change="cache in chunks"))
    runs = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    assert [run["speed_up"] for run in runs] == [1.25, 1.5]
    assert [run["change"] for run in runs] == [None, "cache in chunks"]
    assert all(DATE.match(run["date"]) for run in runs)
    assert runs[0]["commit"] == common.source_commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json"]  # no partial file left


def test_a_quick_run_stores_nothing_and_an_old_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS_DIR", str(tmp_path))
    assert common.append_result("bench", {"speed_up": 1.0}, _args(quick=True)) is None
    assert not list(tmp_path.iterdir())
    (tmp_path / "old.json").write_text('{"speed_up": 1.0}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"old.json must hold a JSON list of runs; found dict"):
        common.append_result("old", {"speed_up": 1.0}, _args())


@pytest.mark.parametrize("path", sorted(pathlib.Path(common.RESULTS_DIR).glob("*.json")),
                         ids=lambda p: p.name)
def test_every_results_file_is_a_list_of_dated_runs(path):
    runs = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(runs, list) and runs
    assert all(DATE.match(run["date"]) and "change" in run for run in runs)
    assert [run["date"] for run in runs] == sorted(run["date"] for run in runs)  # oldest first


@pytest.mark.parametrize("path", sorted(pathlib.Path(common.RESULTS_DIR).glob("*.jsonl")),
                         ids=lambda p: p.name)
def test_every_row_of_a_results_lines_file_is_dated(path):
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert rows and all(DATE.match(row["date"]) for row in rows)


def test_no_results_file_is_numbered_by_run():
    names = [p.name for p in pathlib.Path(common.RESULTS_DIR).iterdir()]
    assert not [n for n in names if re.search(r"_run\d+|_quick|_\d{4}-\d\d-\d\d", n)]
