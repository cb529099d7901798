"""benchmarks/bench_series_recipe.py's set finding and summary (no training run)."""

import pathlib
import sys

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_series_recipe as bench  # noqa: E402


def test_sets_are_found_as_ucr_pairs_or_ts_in_their_folder(tmp_path):
    (tmp_path / "A_TRAIN.txt").write_text("1,0.5,0.2\n")
    (tmp_path / "A_TEST.txt").write_text("1,0.5,0.2\n")
    (tmp_path / "B").mkdir()
    (tmp_path / "B" / "B_TRAIN.ts").write_text("")
    (tmp_path / "B" / "B_TEST.ts").write_text("")
    (tmp_path / "C_TRAIN.txt").write_text("")  # no test file: not a set
    assert bench.find_set([str(tmp_path)], "A") == (
        str(tmp_path / "A_TRAIN.txt"), str(tmp_path / "A_TEST.txt"))
    assert bench.find_set([str(tmp_path)], "B")[1] == str(tmp_path / "B" / "B_TEST.ts")
    assert bench.all_sets([str(tmp_path)]) == ["A", "B", "C"]
    with pytest.raises(ValueError, match="No C_TRAIN/C_TEST pair"):
        bench.find_set([str(tmp_path)], "C")


def test_summary_means_over_seeds_then_over_sets():
    def row(name, seed, ours, rocket):
        return {"set": name, "seed": seed, "test_accuracy": ours, "minirocket": rocket,
                "train_eval_seconds": 10.0 * (seed + 1), "minirocket_seconds": 1.0,
                "nearest_neighbour": 0.5}

    rows = [row("A", 0, 0.8, 0.9), row("A", 1, 1.0, 0.9), row("B", 0, 0.6, 0.7)]
    per_set, mean = bench.summary(rows)
    assert per_set["A"]["test_accuracy"] == pytest.approx(0.9)
    assert per_set["A"]["seeds"] == [0, 1]
    assert mean["test_accuracy"] == pytest.approx(0.75)  # sets weigh alike, not rows
    assert mean["minirocket"] == pytest.approx(0.8)
    assert bench.thread_env(3)["TF_NUM_INTRAOP_THREADS"] == "3"
