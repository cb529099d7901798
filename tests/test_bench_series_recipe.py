"""benchmarks/bench_series_recipe.py's set finding, peers' input and summary (no training run)."""

import pathlib
import sys

import numpy as np
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
    def row(name, seed, ours, rocket, multi):
        return {"set": name, "seed": seed, "test_accuracy": ours, "minirocket": rocket,
                "multirocket": multi, "train_eval_seconds": 10.0 * (seed + 1),
                "minirocket_seconds": 1.0, "multirocket_seconds": 2.0 * (seed + 1),
                "nearest_neighbour": 0.5}

    rows = [row("A", 0, 0.8, 0.9, 0.95), row("A", 1, 1.0, 0.9, 0.85),
            row("B", 0, 0.6, 0.7, 0.64)]
    per_set, mean = bench.summary(rows)
    assert per_set["A"]["test_accuracy"] == pytest.approx(0.9)
    assert per_set["A"]["multirocket"] == pytest.approx(0.9)
    assert per_set["A"]["multirocket_seconds"] == pytest.approx(3.0)
    assert per_set["A"]["seeds"] == [0, 1]
    assert mean["test_accuracy"] == pytest.approx(0.75)  # sets weigh alike, not rows
    assert mean["minirocket"] == pytest.approx(0.8)
    assert mean["multirocket"] == pytest.approx(0.77)
    # A is level with MultiRocket over its seeds (though seed 0 is 15 points
    # below); B is 4 points below: flagged, 3 points below would not be.
    assert bench.below_multirocket(per_set) == ["B"]
    assert bench.below_multirocket(per_set, margin=5.0) == []
    assert bench.thread_env(3)["TF_NUM_INTRAOP_THREADS"] == "3"


def test_aeon_input_is_channels_first_and_zero_pads_unequal_lengths():
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)  # (N, T, C), one length
    train, test = bench.aeon_input(x, x[:1])
    assert train.shape == (2, 2, 3) and train.dtype == np.float64
    np.testing.assert_array_equal(train[1, 0], [6.0, 8.0, 10.0])  # series 1, channel 0
    np.testing.assert_array_equal(test, train[:1])
    # A series of 2 steps NaN-padded in a 3-step train split; a 4-step test
    # split: both zero-padded to 4 steps, no NaN left.
    short = x.copy()
    short[0, 2] = np.nan
    longer = np.ones((1, 4, 2), np.float32)
    train, test = bench.aeon_input(short, longer)
    assert train.shape == (2, 2, 4) and test.shape == (1, 2, 4)
    np.testing.assert_array_equal(train[0, 1], [1.0, 3.0, 0.0, 0.0])
    np.testing.assert_array_equal(train[1, 1], [7.0, 9.0, 11.0, 0.0])
    np.testing.assert_array_equal(test[0, 0], [1.0, 1.0, 1.0, 1.0])


def test_a_missing_peer_is_named_with_the_extra_that_installs_it(monkeypatch):
    monkeypatch.setattr(bench.importlib.util, "find_spec",
                        lambda name: None if name == "aeon" else object())
    assert bench.missing_peers() == [
        'MultiRocket needs the package aeon, which is not installed: '
        'pip install -e ".[bench]" installs it']
