"""The default series recipe on UCR file pairs, given only the paths, vs 1-NN and InceptionTime.

Each set runs exactly what a user types, one at a time:

    python3 -m training train --config timeseries --run-dir RUN \\
        --set 'train_files=["X_TRAIN.txt"]' --set 'test_files=["X_TEST.txt"]'

and its test accuracy (metrics.json) is printed beside the 1-nearest-
neighbour Euclidean baseline (`baselines.nearest_neighbour_accuracy`,
computed here from the same files) and InceptionTime's published accuracy
where `baselines.INCEPTION_TIME_UCR128` has it.  One JSON line per set is
appended to `--out` (benchmarks/results/series_recipe.jsonl).

Usage (from the repository root):

    python3 benchmarks/bench_series_recipe.py                  # the shared sets
    python3 benchmarks/bench_series_recipe.py --dirs ../ucr-extra --names GunPoint
"""

import argparse
import glob
import json
import os

import common  # first: sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads
from baselines import INCEPTION_TIME_UCR128, nearest_neighbour_accuracy

from training.data.readers import read_ucr

SHARED = os.path.join(common.REPO_ROOT, "..", "shared", "data", "ucr")
DEFAULT_OUT = os.path.join(common.RESULTS_DIR, "series_recipe.jsonl")


def pairs(directories, names):
    """[(name, train path, test path)] of every X_TRAIN.txt with its X_TEST.txt."""
    found = []
    for directory in directories:
        for train in sorted(glob.glob(os.path.join(directory, "*_TRAIN.txt"))):
            name = os.path.basename(train)[: -len("_TRAIN.txt")]
            test = os.path.join(directory, f"{name}_TEST.txt")
            if os.path.isfile(test) and (not names or name in names):
                found.append((name, train, test))
    if not found:
        raise ValueError(f"No X_TRAIN.txt/X_TEST.txt pairs in dirs={directories!r}, names={names!r}.")
    return found


def nearest_neighbour(train, test):
    x, y, names = read_ucr(train)
    tx, ty, test_names = read_ucr(test)
    return nearest_neighbour_accuracy(x, names[y], tx, test_names[ty])


def run(name, train, test, config, seed):
    """{set, test_accuracy, seconds, ...} of one `python3 -m training train` run."""
    metrics, seconds, cpu_seconds = common.train_on_files(config, train, test, seed)
    x, _, names = read_ucr(train)
    return {
        "set": name, "seed": seed, "config": config,
        "shape": {"N": int(x.shape[0]), "T": int(x.shape[1]), "K": len(names),
                  "F": int(x.shape[2])},
        "test_accuracy": metrics["test_accuracy"],
        "nearest_neighbour": nearest_neighbour(train, test),
        "inception_time": INCEPTION_TIME_UCR128.get(name),
        "seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds, 1),
        "steps": metrics["steps"], "from_data": metrics["from_data"],
        "load_average": os.getloadavg(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dirs", nargs="+", default=[SHARED])
    parser.add_argument("--names", nargs="*", default=None)
    parser.add_argument("--config", default="timeseries")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()
    for name, train, test in pairs(args.dirs, args.names):
        for seed in args.seeds:
            row = run(name, train, test, args.config, seed)
            inception = row["inception_time"]
            print(f"{name:18s} seed {seed}  test {row['test_accuracy']:.3f}  "
                  f"1-NN {row['nearest_neighbour']:.3f}  InceptionTime "
                  f"{'n/a' if inception is None else f'{inception:.3f}'}  "
                  f"{row['seconds']:.0f} s ({row['cpu_seconds']:.0f} s CPU)", flush=True)
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
