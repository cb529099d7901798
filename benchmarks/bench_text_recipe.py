"""The default text recipe on sentence sets it was not chosen on, vs Kim (2014) CNN-rand.

The `sst2` and `trec` presets were chosen on SST-2 and TREC validation.
This runs the generic `text_classification` preset, exactly what a user
with their own file types, on the other four sets of Kim (2014) in
`../shared/data/sentence-classification`: MR (`rt-polarity.all`), Subj,
CR (`custrev.all`) and MPQA.  They have no split; Kim reports 10-fold
cross-validation.  Here one fold tests: every 10th line (the files are
sorted by label, so the fold keeps the class balance), and the other nine
train (every 10th of those validates, as the preset does for any file
without `valid_files`).  `--folds 0 1 ...` picks the folds (line i
tests in fold i % 10).  The fold files are written, as `label<TAB>text`, to a
temporary folder; the project keeps no copy.

Each run is what a user types:

    python3 -m training train --config text_classification --run-dir RUN \\
        --set 'train_files=["mr.train.tsv"]' --set 'test_files=["mr.test.tsv"]'

plus `--set` items given here (`--set min_word_count=3`), so that a
candidate change to the recipe is judged on these sets before it is ever
run on SST-2 or TREC test.  One JSON line per run, with its date, commit
and `--note TEXT` (what the runs change), is appended to `--out`
(benchmarks/results/text_recipe.jsonl).

Usage (from the repository root):

    python3 benchmarks/bench_text_recipe.py
    python3 benchmarks/bench_text_recipe.py --names MR CR --set min_word_count=3
"""

import argparse
import json
import os
import tempfile
import time

import common  # first: sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads
from baselines import KIM_2014_CNN_RAND

from training.data.readers import read_lines

FOLDER = os.path.join(common.REPO_ROOT, "..", "shared", "data", "sentence-classification")
DEFAULT_OUT = os.path.join(common.RESULTS_DIR, "text_recipe.jsonl")
# name: (file, encoding); SOURCE.txt there names the Latin-1 files.
SETS = {
    "MR": ("rt-polarity.all", "latin-1"),
    "Subj": ("subj.all", "latin-1"),
    "CR": ("custrev.all", "utf-8"),
    "MPQA": ("mpqa.all", "utf-8"),
}
FOLDS = 10


def fold_files(name, fold, folder, work):
    """(train path, test path): line i of the set tests when i % FOLDS == fold."""
    filename, encoding = SETS[name]
    path = os.path.join(folder, filename)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{name}: {path} not found (../shared/data is needed).")
    rows = []
    for line in read_lines(path, encoding=encoding):
        parts = line.strip().split(None, 1)
        if parts:  # custrev.all has lines holding only a label
            rows.append(f"{parts[0]}\t{parts[1] if len(parts) > 1 else ''}\n")
    paths = (os.path.join(work, f"{name}.{fold}.train.tsv"),
             os.path.join(work, f"{name}.{fold}.test.tsv"))
    for path, side in zip(paths, (False, True), strict=True):
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(r for i, r in enumerate(rows) if (i % FOLDS == fold) == side)
    return paths


def run(name, fold, train, test, config, seed, overrides):
    """{set, fold, test_accuracy, seconds, ...} of one `python3 -m training train` run."""
    metrics, seconds, cpu_seconds = common.train_on_files(config, train, test, seed, overrides)
    return {
        "set": name, "fold": fold, "seed": seed, "config": config, "overrides": overrides,
        "test_accuracy": metrics["test_accuracy"],
        "valid_accuracy": metrics["valid_accuracy"],
        "kim_2014_cnn_rand": KIM_2014_CNN_RAND[name.lower()] / 100,
        "seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds, 1),
        "steps": metrics["steps"], "from_data": metrics["from_data"],
        # Cross-fitted: each member on its own fold, and those left out of the answer.
        "member_accuracy": metrics.get("valid_member_accuracy"),
        "excluded_members": metrics.get("excluded_members"),
        "load_average": os.getloadavg(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument("--config", default="text_classification")
    parser.add_argument("--folds", nargs="+", type=int, default=[0],
                        help=f"which of the folds 0..{FOLDS - 1} test")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="passed on to every run")
    parser.add_argument("--folder", default=FOLDER)
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--note", default=None, metavar="TEXT",
                        help="what these runs change or test, stored with each row")
    args = parser.parse_args()
    dated = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": common.source_commit(),
             "note": args.note}
    for fold in args.folds:
        if not 0 <= fold < FOLDS:
            raise SystemExit(f"--folds takes folds 0..{FOLDS - 1}; received --folds {fold}.")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.names:
            for fold in args.folds:
                train, test = fold_files(name, fold, args.folder, work)
                for seed in args.seeds:
                    row = {**dated, **run(name, fold, train, test, args.config, seed,
                                          args.overrides)}
                    rows.append(row)
                    print(f"{name:5s} fold {fold} seed {seed}  test {row['test_accuracy']:.3f}  "
                          f"valid {row['valid_accuracy']:.3f}  Kim CNN-rand "
                          f"{row['kim_2014_cnn_rand']:.3f}  {row['seconds']:.0f} s "
                          f"({row['cpu_seconds']:.0f} s CPU)", flush=True)
                    with open(args.out, "a", encoding="utf-8") as f:
                        f.write(json.dumps(row) + "\n")
    for key in ("test_accuracy", "valid_accuracy"):
        mean = sum(r[key] for r in rows) / len(rows)
        print(f"mean {key} over {len(rows)} runs: {mean:.4f}")
    kim = sum(r["kim_2014_cnn_rand"] for r in rows) / len(rows)
    print(f"mean Kim 2014 CNN-rand over the same sets: {kim:.4f}")


if __name__ == "__main__":
    main()
