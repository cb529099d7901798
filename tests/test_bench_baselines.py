"""The reference baselines of benchmarks/bench_quality.py (benchmarks/baselines.py)."""

import pathlib
import sys

import numpy as np
import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from baselines import (  # noqa: E402
    nearest_neighbour_accuracy,
    ucr_nearest_neighbour_accuracy,
)


def _brute_force(train_x, train_y, test_x, test_y):
    """The definition, one pair at a time in plain Python."""
    correct = 0
    for series, label in zip(test_x, test_y, strict=True):
        best, best_label = None, None
        for candidate, candidate_label in zip(train_x, train_y, strict=True):
            d = sum((float(a) - float(b)) ** 2
                    for a, b in zip(np.ravel(series), np.ravel(candidate), strict=True))
            if best is None or d < best:
                best, best_label = d, candidate_label
        correct += best_label == label
    return correct / len(test_x)


def test_matches_brute_force_on_random_series(rng):
    train_x, test_x = rng.normal(size=(12, 9, 2)), rng.normal(size=(15, 9, 2))
    train_y, test_y = rng.integers(0, 3, 12), rng.integers(0, 3, 15)
    expected = _brute_force(train_x, train_y, test_x, test_y)
    assert nearest_neighbour_accuracy(train_x, train_y, test_x, test_y) == expected


def test_training_set_classifies_itself_and_order_does_not_matter(rng):
    x = rng.normal(size=(20, 7))
    y = rng.integers(0, 4, 20)
    assert nearest_neighbour_accuracy(x, y, x, y) == 1.0
    order = rng.permutation(20)
    test_x, test_y = rng.normal(size=(30, 7)), rng.integers(0, 4, 30)
    assert (nearest_neighbour_accuracy(x[order], y[order], test_x, test_y)
            == nearest_neighbour_accuracy(x, y, test_x, test_y))


def test_rejects_series_of_another_length(rng):
    with pytest.raises(ValueError, match="one shape"):
        nearest_neighbour_accuracy(rng.normal(size=(3, 5)), [0, 1, 0],
                                   rng.normal(size=(2, 6)), [0, 1])


@pytest.mark.data
@pytest.mark.parametrize("name, expected", [
    ("ArrowHead", 0.800), ("OSULeaf", 0.521), ("ACSF1", 0.540),
])
def test_ucr_figures_of_the_data_readme(shared_data, name, expected):
    """The 1-NN accuracies ucr/SOURCE.txt lists, to its 3 decimals."""
    accuracy = ucr_nearest_neighbour_accuracy(shared_data / "ucr", name)
    assert round(accuracy, 3) == expected


def test_text_folds_partition_the_file_and_keep_latin1_lines_whole(tmp_path):
    """bench_text_recipe's folds: each line tests in exactly one fold and
    trains in the other nine; a Latin-1 byte 0x85 (U+0085, which
    str.splitlines would take for a line break) stays inside its line;
    a line holding only a label keeps an empty text."""
    import bench_text_recipe

    from training.data.readers import read_classification

    lines = [f"{i % 2} sentence number {i}" for i in range(23)]
    lines[5] = "1 caf\xe9 \x85 and more"
    lines[8] = "0"
    (tmp_path / "rt-polarity.all").write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    expected = [(line.split(None, 1) + [""])[:2] for line in lines]
    tested = []
    for fold in range(bench_text_recipe.FOLDS):
        train, test = bench_text_recipe.fold_files("MR", fold, tmp_path, tmp_path)
        train_texts, train_labels, _ = read_classification(train)
        test_texts, test_labels, names = read_classification(test)
        assert len(train_texts) + len(test_texts) == len(lines)
        rows = [[names[y], t] for t, y in zip(test_texts, test_labels, strict=True)]
        assert rows == [expected[i] for i in range(fold, len(lines), bench_text_recipe.FOLDS)]
        tested += rows
    assert sorted(map(tuple, tested)) == sorted(map(tuple, expected))
    assert ["1", "caf\xe9 \x85 and more"] in tested
