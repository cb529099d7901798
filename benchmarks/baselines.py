"""Reference figures that bench_quality.py prints beside our classifiers.

Published accuracies are quoted with their source; the UCR nearest-neighbour
baseline is computed here, on the same files our runs read, because the
archive's own 1-NN figures are for its own copies of the splits.
"""

import os

import numpy as np

# Kim (2014), "Convolutional Neural Networks for Sentence Classification",
# Table 2, row CNN-rand (random word vectors, trained with the task): test
# accuracy in percent.
KIM_2014_CNN_RAND = {"sst2": 82.7, "trec": 91.2,
                     # 10-fold cross-validation (no standard split):
                     "mr": 76.1, "subj": 89.6, "cr": 79.8, "mpqa": 83.4}

# Ismail Fawaz et al. (2020), "InceptionTime: Finding AlexNet for Time Series
# Classification", results on the 128 sets of the UCR 2018 archive as
# published in the authors' repository: github.com/hfawaz/InceptionTime,
# results-InceptionTime-128.csv (commit 365ce4d), column `accuracy`.
INCEPTION_TIME_UCR128 = {
    "ArrowHead": 0.8457142857142858,
    "OSULeaf": 0.9421487603305784,
    "ACSF1": 0.92,
}


def nearest_neighbour_accuracy(train_x, train_y, test_x, test_y):
    """Test accuracy of 1-nearest-neighbour classification, Euclidean distance.

    The UCR archive's baseline: each test series takes the label of the
    training series closest to it in Euclidean distance over all time steps
    (no normalisation beyond the archive's own, no warping).  A tie goes to
    the training series that comes first.

    Args:
        train_x: `(N, T)` or `(N, T, F)` training series.
        train_y: `(N,)` training labels (any comparable values).
        test_x: `(M, ...)` test series, the same shape per series as `train_x`.
        test_y: `(M,)` test labels, in the same label values as `train_y`.

    Returns:
        The fraction of test series classified correctly, a float.

    Raises:
        ValueError: If the shapes do not agree or a set is empty.
    """
    train_x = np.asarray(train_x, dtype=np.float64)
    test_x = np.asarray(test_x, dtype=np.float64)
    train_y, test_y = np.asarray(train_y), np.asarray(test_y)
    if len(train_x) == 0 or len(test_x) == 0:
        raise ValueError(f"nearest_neighbour_accuracy needs series on both sides; received "
                         f"train_x of shape {train_x.shape} and test_x of shape {test_x.shape}.")
    if train_x.shape[1:] != test_x.shape[1:]:
        raise ValueError(f"train_x and test_x must hold series of one shape; received "
                         f"{train_x.shape[1:]} and {test_x.shape[1:]}.")
    if len(train_y) != len(train_x) or len(test_y) != len(test_x):
        raise ValueError(f"one label per series: train_x {len(train_x)}, train_y "
                         f"{len(train_y)}, test_x {len(test_x)}, test_y {len(test_y)}.")
    train_flat = train_x.reshape(len(train_x), -1)  # (N, T*F)
    correct = 0
    for series, label in zip(test_x.reshape(len(test_x), -1), test_y, strict=True):
        # Exact differences, not |a|^2 + |b|^2 - 2ab: near-ties must not flip.
        distances = np.sum((train_flat - series) ** 2, axis=1)  # (N,)
        correct += train_y[int(np.argmin(distances))] == label
    return correct / len(test_x)


def ucr_paths(data_dir, name):
    """`(train, test)` paths of a UCR set in `data_dir` (NAME_TRAIN.txt, NAME_TEST.txt)."""
    return tuple(os.path.join(data_dir, f"{name}_{split}.txt") for split in ("TRAIN", "TEST"))


def ucr_nearest_neighbour_accuracy(data_dir, name):
    """1-NN Euclidean test accuracy of the UCR set `name` read from `data_dir`."""
    from training.data.readers import read_ucr

    (train_x, train_ids, train_values), (test_x, test_ids, test_values) = (
        read_ucr(path) for path in ucr_paths(data_dir, name))
    # read_ucr numbers the labels of each file on its own: compare the values.
    return nearest_neighbour_accuracy(train_x, np.asarray(train_values)[train_ids],
                                      test_x, np.asarray(test_values)[test_ids])
