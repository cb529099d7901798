"""The default series recipe on file pairs, given only the paths, vs MiniRocket, MultiRocket and 1-NN.

Each (set, seed) runs exactly what a user types:

    python3 -m training train --config timeseries --run-dir RUN \\
        --set 'train_files=["X_TRAIN.txt"]' --set 'test_files=["X_TEST.txt"]'

and, on the same files in the same process, MiniRocket as sktime's
documentation runs it (sktime `MiniRocket`, or `MiniRocketMultivariate`
for several channels, then `StandardScaler(with_mean=False)` and
`RidgeClassifierCV(alphas=np.logspace(-3, 3, 10))`, seeded by the seed),
and MultiRocket as aeon's documentation runs it (aeon
`MultiRocketClassifier` with its defaults: 10,000 kernels, its own scaling
and `RidgeClassifierCV`; `random_state` the seed, `n_jobs` the threads).
aeon takes `(n_cases, n_channels, n_timepoints)` arrays of one length and
no NaN; a set of series of unequal lengths (or whose splits differ in
length) is padded with zeros to the longest series of either split, what
aeon's `Padder(fill_value=0)` does and its error for such data advises.
The three test accuracies and times are printed per set and seed, with the
1-nearest-neighbour Euclidean baseline (`baselines.nearest_neighbour_accuracy`)
and InceptionTime's published accuracy where `baselines.INCEPTION_TIME_UCR128`
has it, then the mean over seeds per set (with ours minus MultiRocket, a
set more than 3 points below it flagged) and the mean over sets.  Our time
is the run's training + test evaluation (metrics.json `train_seconds` +
`eval_seconds`: TensorFlow's start and reading the files excluded) and the
whole command's wall clock; MiniRocket's and MultiRocket's are fit + predict
(numba's first compilation included where its cache does not hold it).

A set is `NAME_TRAIN.txt` / `NAME_TEST.txt` (UCR) or `NAME_TRAIN.ts` /
`NAME_TEST.ts` in one of `--dirs` or in its `NAME/` folder (as
`write_uea_ts.py` writes GunPoint, ItalyPowerDemand or BasicMotions).
With `--jobs N` the (set, seed) pairs run in N processes at once, each
with `--threads` TensorFlow, MiniRocket and MultiRocket threads.  Each (set, seed) is
printed as it ends; the run (its rows, the means per set and over sets) is
appended with its date to benchmarks/results/series_recipe.json
(`--change TEXT`: what the run changed), and written to `--json` too.

Usage (from the repository root; sktime and aeon, the peers, come with
`pip install -e ".[bench]"`, and the benchmark stops at once, naming the
package, where one is missing):

    python3 benchmarks/bench_series_recipe.py --dirs DATA/ucr
    python3 benchmarks/write_uea_ts.py --name GunPoint --out runs/uea
    python3 benchmarks/bench_series_recipe.py --dirs DATA/ucr runs/uea \\
        --sets ArrowHead OSULeaf ACSF1 GunPoint ItalyPowerDemand \\
        --seeds 0 1 2 --jobs 8 --threads 2 --change "candidate X: ..."
    python3 benchmarks/bench_series_recipe.py --dirs DATA/ucr --set series_stem=patches \\
        --set series_level_features=false --set mixup_alpha=0.4   # the patch stem
"""

import argparse
import concurrent.futures
import glob
import importlib.util
import json
import os
import statistics
import sys
import time

import common  # first: sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads
import numpy as np
from baselines import INCEPTION_TIME_UCR128, nearest_neighbour_accuracy

from training.data import readers, series_files

SHARED = os.path.join(common.REPO_ROOT, "..", "shared", "data", "ucr")
SUFFIXES = (".txt", ".ts")
# The peers' packages: {import name: what runs on it}, all in the `bench` extra.
PEERS = {"sktime": "MiniRocket", "aeon": "MultiRocket"}
MULTIROCKET_MARGIN = 3.0  # points: a set this far below MultiRocket is flagged


def missing_peers():
    """One line per peer package that is not installed (empty: all are)."""
    return [f"{peer} needs the package {package}, which is not installed: "
            f'pip install -e ".[bench]" installs it'
            for package, peer in PEERS.items() if importlib.util.find_spec(package) is None]


def find_set(directories, name):
    """(train path, test path) of set `name`: NAME_TRAIN.txt/.ts in a
    directory or its NAME/ folder, with the NAME_TEST file beside it."""
    for directory in directories:
        for folder in (directory, os.path.join(directory, name)):
            for suffix in SUFFIXES:
                train = os.path.join(folder, f"{name}_TRAIN{suffix}")
                test = os.path.join(folder, f"{name}_TEST{suffix}")
                if os.path.isfile(train) and os.path.isfile(test):
                    return train, test
    raise ValueError(f"No {name}_TRAIN/{name}_TEST pair (.txt or .ts) in dirs={directories!r} "
                     f"or their {name}/ folders.")


def all_sets(directories):
    """The names of every X_TRAIN.txt / X_TRAIN.ts in `directories` (and one level down)."""
    names = set()
    for directory in directories:
        for suffix in SUFFIXES:
            for pattern in (f"*_TRAIN{suffix}", f"*/*_TRAIN{suffix}"):
                for path in glob.glob(os.path.join(directory, pattern)):
                    names.add(os.path.basename(path)[: -len(f"_TRAIN{suffix}")])
    if not names:
        raise ValueError(f"No X_TRAIN.txt or X_TRAIN.ts files in dirs={directories!r}.")
    return sorted(names)


def read_split(path):
    """(series (N, T, F), label values (N,)) of a UCR or `.ts` file."""
    if series_files.series_suffix(path) == ".ts":
        x, y, names, _ = series_files.read_ts(path)
    else:
        x, y, names = readers.read_ucr(path)
    return x, np.asarray(names)[y]


def minirocket(train, test, seed, threads):
    """(test accuracy, seconds of fit + predict) of MiniRocket + ridge, as sktime's docs
    (numba's first compilation included: MiniRocket's first call in a process)."""
    from sklearn.linear_model import RidgeClassifierCV
    from sklearn.preprocessing import StandardScaler
    from sktime.transformations.panel.rocket import MiniRocket, MiniRocketMultivariate

    (x, y), (tx, ty) = read_split(train), read_split(test)
    if np.isnan(x).any() or np.isnan(tx).any():  # series of their own lengths
        return _minirocket_variable(x, y, tx, ty, seed, threads)
    x, tx = np.transpose(x, (0, 2, 1)), np.transpose(tx, (0, 2, 1))  # sktime: (N, C, T)
    transform = MiniRocket if x.shape[1] == 1 else MiniRocketMultivariate
    start = time.perf_counter()
    # The steps of sktime's pipeline, one by one (scikit-learn's Pipeline of
    # recent versions does not take sktime's transformers).
    features = transform(random_state=seed, n_jobs=threads or 1)
    scaler = StandardScaler(with_mean=False)
    ridge = RidgeClassifierCV(alphas=np.logspace(-3, 3, 10))
    ridge.fit(scaler.fit_transform(features.fit_transform(x.astype(np.float64))), y)
    predicted = ridge.predict(scaler.transform(features.transform(tx.astype(np.float64))))
    return float(np.mean(predicted == ty)), time.perf_counter() - start


def multirocket(train, test, seed, threads):
    """(test accuracy, seconds of fit + predict) of aeon's `MultiRocketClassifier`
    with its defaults, seeded by `seed`, on `threads` threads (numba's first
    compilation included where its cache does not hold it)."""
    from aeon.classification.convolution_based import MultiRocketClassifier

    (x, y), (tx, ty) = read_split(train), read_split(test)
    x, tx = aeon_input(x, tx)
    start = time.perf_counter()
    classifier = MultiRocketClassifier(random_state=seed, n_jobs=threads or 1)
    predicted = classifier.fit(x, y).predict(tx)
    return float(np.mean(predicted == ty)), time.perf_counter() - start


def aeon_input(x, tx):
    """Both splits, NaN-padded (N, T, C), as aeon's float64 (N, C, T) of one length:
    series of unequal lengths (or splits of two lengths) zero-padded to the
    longest of either split, as aeon's `Padder(fill_value=0)` pads."""
    if np.isnan(x).any() or np.isnan(tx).any() or x.shape[1] != tx.shape[1]:
        x, tx = _zero_padded(x, tx)
    return tuple(np.ascontiguousarray(np.transpose(a, (0, 2, 1)), dtype=np.float64)
                 for a in (x, tx))


def _lengths(series):
    """(N,) steps of each NaN-padded series: 1 + its last step with a known value."""
    known = ~np.isnan(series).all(axis=2)  # (N, T)
    return np.where(known.any(axis=1), series.shape[1] - np.argmax(known[:, ::-1], axis=1), 0)


def _nested(series):
    """NaN-padded (N, T, C) -> sktime's nested DataFrame of each series' own steps."""
    import pandas as pd

    return pd.DataFrame([[pd.Series(row[:n, c]) for c in range(series.shape[2])]
                         for row, n in zip(series, _lengths(series), strict=True)])


def _zero_padded(x, tx):
    """Both splits NaN-padded to one length, NaN -> 0 (1-NN's Euclidean distance)."""
    length = max(x.shape[1], tx.shape[1])
    pad = [np.pad(a, ((0, 0), (0, length - a.shape[1]), (0, 0)), constant_values=np.nan)
           for a in (x, tx)]
    return tuple(np.nan_to_num(a, nan=0.0) for a in pad)


def _minirocket_variable(x, y, tx, ty, seed, threads):
    """MiniRocket for series of unequal lengths: sktime's
    `MiniRocketMultivariateVariable` on each series' own steps (one shorter
    than its kernels padded with zeros, `pad_value_short_series=0`)."""
    from sklearn.linear_model import RidgeClassifierCV
    from sklearn.preprocessing import StandardScaler
    from sktime.transformations.panel.rocket import MiniRocketMultivariateVariable

    start = time.perf_counter()
    features = MiniRocketMultivariateVariable(random_state=seed, n_jobs=threads or 1,
                                              pad_value_short_series=0.0)
    scaler = StandardScaler(with_mean=False)
    ridge = RidgeClassifierCV(alphas=np.logspace(-3, 3, 10))
    ridge.fit(scaler.fit_transform(features.fit_transform(_nested(x))), y)
    predicted = ridge.predict(scaler.transform(features.transform(_nested(tx))))
    return float(np.mean(predicted == ty)), time.perf_counter() - start


def _nearest_neighbour_padded(x, y, tx, ty):
    padded_x, padded_tx = _zero_padded(x, tx)
    return nearest_neighbour_accuracy(padded_x, y, padded_tx, ty)


def run(name, train, test, config, seed, threads, overrides=()):
    """{set, test_accuracy, seconds, minirocket, ...} of one (set, seed)."""
    env = thread_env(threads)
    metrics, seconds, cpu_seconds = common.train_on_files(config, train, test, seed, overrides,
                                                          env=env)
    x, y = read_split(train)
    tx, ty = read_split(test)
    rocket_accuracy, rocket_seconds = minirocket(train, test, seed, threads)
    multi_accuracy, multi_seconds = multirocket(train, test, seed, threads)
    return {
        "set": name, "seed": seed, "config": config, "overrides": list(overrides),
        "threads": threads,
        "shape": {"N": int(x.shape[0]), "T": int(x.shape[1]), "K": len(set(y)),
                  "F": int(x.shape[2])},
        "test_accuracy": metrics["test_accuracy"],
        "train_eval_seconds": round(metrics["train_seconds"] + metrics["eval_seconds"], 1),
        "seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds, 1),
        "minirocket": rocket_accuracy, "minirocket_seconds": round(rocket_seconds, 2),
        "multirocket": multi_accuracy, "multirocket_seconds": round(multi_seconds, 2),
        # Series of unequal lengths: zero-padded to the longest for 1-NN.
        "nearest_neighbour": _nearest_neighbour_padded(x, y, tx, ty)
        if np.isnan(x).any() or np.isnan(tx).any()
        else nearest_neighbour_accuracy(x, y, tx, ty),
        "inception_time": INCEPTION_TIME_UCR128.get(name),
        "steps": metrics["steps"], "from_data": metrics["from_data"],
        "load_average": os.getloadavg(),
    }


def thread_env(threads):
    """The environment of a training run limited to `threads` threads (None: all)."""
    env = dict(os.environ)
    if threads:
        for key in ("TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS"):
            env[key] = str(threads)
        env["TF_NUM_INTEROP_THREADS"] = "1" if threads == 1 else "2"
    return env


def print_row(row):
    inception = row["inception_time"]
    print(f"{row['set']:18s} seed {row['seed']}  ours {row['test_accuracy']:.3f} "
          f"({row['train_eval_seconds']:.0f} s train+test, {row['seconds']:.0f} s wall, "
          f"{row['cpu_seconds']:.0f} s CPU)  "
          f"MiniRocket {row['minirocket']:.3f} ({row['minirocket_seconds']:.1f} s)  "
          f"MultiRocket {row['multirocket']:.3f} ({row['multirocket_seconds']:.1f} s)  "
          f"1-NN {row['nearest_neighbour']:.3f}  InceptionTime "
          f"{'n/a' if inception is None else f'{inception:.3f}'}", flush=True)


def summary(rows):
    """{set: means over seeds} and their mean over sets."""
    per_set = {}
    for name in dict.fromkeys(r["set"] for r in rows):
        mine = [r for r in rows if r["set"] == name]
        per_set[name] = {
            key: statistics.mean(r[key] for r in mine)
            for key in ("test_accuracy", "minirocket", "multirocket", "train_eval_seconds",
                        "minirocket_seconds", "multirocket_seconds", "nearest_neighbour")
        }
        per_set[name]["seeds"] = [r["seed"] for r in mine]
    mean = {key: statistics.mean(s[key] for s in per_set.values())
            for key in ("test_accuracy", "minirocket", "multirocket", "train_eval_seconds",
                        "minirocket_seconds", "multirocket_seconds")}
    return per_set, mean


def below_multirocket(per_set, margin=MULTIROCKET_MARGIN):
    """The sets whose mean over seeds is more than `margin` points below MultiRocket's."""
    return [name for name, s in per_set.items()
            if 100 * (s["test_accuracy"] - s["multirocket"]) < -margin]


def print_summary(per_set, mean):
    below = below_multirocket(per_set)
    print("\nmean over seeds (ours minus each peer, in points):")
    for name, s in per_set.items():
        flag = f"  <- more than {MULTIROCKET_MARGIN:g} points below MultiRocket" \
            if name in below else ""
        print(f"{name:18s} ours {s['test_accuracy']:.3f} ({s['train_eval_seconds']:.0f} s)  "
              f"MiniRocket {s['minirocket']:.3f} ({s['minirocket_seconds']:.1f} s)  "
              f"MultiRocket {s['multirocket']:.3f} ({s['multirocket_seconds']:.1f} s)  "
              f"vs MiniRocket {100 * (s['test_accuracy'] - s['minirocket']):+.1f}  "
              f"vs MultiRocket {100 * (s['test_accuracy'] - s['multirocket']):+.1f}{flag}")
    print(f"{'mean over sets':18s} ours {mean['test_accuracy']:.3f} "
          f"({mean['train_eval_seconds']:.0f} s)  MiniRocket {mean['minirocket']:.3f} "
          f"({mean['minirocket_seconds']:.1f} s)  MultiRocket {mean['multirocket']:.3f} "
          f"({mean['multirocket_seconds']:.1f} s)")
    print(f"sets more than {MULTIROCKET_MARGIN:g} points below MultiRocket: "
          f"{', '.join(below) or 'none'}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dirs", nargs="+", default=[SHARED])
    parser.add_argument("--sets", nargs="*", default=None,
                        help="set names (default: every pair in --dirs)")
    parser.add_argument("--config", default="timeseries")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="a config override of every run (repeatable), e.g. "
                             "series_stem=patches")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--jobs", type=int, default=1, help="(set, seed) runs at once")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads of each run (default: all with --jobs 1, else "
                             "cores // jobs)")
    parser.add_argument("--change", default=None, metavar="TEXT",
                        help="what this run changed or tests, stored with its run")
    parser.add_argument("--json", default=None, help="also write this run alone here")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1; received --jobs {args.jobs}.")
    missing = missing_peers()
    if missing:  # before any training: a peer is never silently left out
        parser.error("; ".join(missing) + ".")
    threads = args.threads
    if threads is None and args.jobs > 1:
        threads = max(1, len(os.sched_getaffinity(0)) // args.jobs)
    names = args.sets or all_sets(args.dirs)
    work = [(name, *find_set(args.dirs, name), args.config, seed, threads, tuple(args.set))
            for name in names for seed in args.seeds]
    rows = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for row in pool.map(run, *zip(*work, strict=True)):
            print_row(row)
            rows.append(row)
    per_set, mean = summary(rows)
    print_summary(per_set, mean)
    table = {"command": " ".join(["python3", *sys.argv]), "rows": rows, "per_set": per_set,
             "mean": mean, "below_multirocket": below_multirocket(per_set),
             "machine_cores": os.cpu_count()}
    common.append_result("series_recipe", table, args)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(table, f, indent=2)


if __name__ == "__main__":
    main()
