"""Quality per minute of wall clock: our package vs a peer, in one run on one machine.

Translation (the default): Multi30k test_2016_flickr BLEU after N minutes of
training, for each budget N of `--budgets` (default 10 and 30).

    ours   the package as a user runs it, in a subprocess:
               python3 -m training train --config multi30k --run-dir <tmp> \\
                   --set time_budget_minutes=N [--set source_language=en
                   --set target_language=de]
           then <tmp>/metrics.json (test_bleu_greedy, test_bleu_beam,
           train_seconds, and total_seconds, vocabulary_seconds,
           eval_seconds and lowercased tokenized BLEU where the run writes
           them).  It learns its vocabulary inside the command, so the
           command's wall clock includes that (minutes on a 2-core CPU).
    peer   keras.io's KerasHub translation recipe (benchmarks/quality_peer.py
           says what is taken from it and what is changed), in a subprocess:
               python3 benchmarks/quality_peer.py --budget N --direction de-en
           Its vocabularies are learned once, before any timing, and cached in
           benchmarks/.cache/; the seconds they took are reported apart.

Both are scored with training.monitor.evaluation.corpus_bleu (cased sacreBLEU, 13a).
Reported per direction, budget and side: greedy BLEU, beam BLEU (ours),
lowercased tokenized BLEU where present, the wall clock of the whole command,
the training seconds, and ours/peer greedy BLEU.  The two sides alternate
which goes first from one budget to the next, so that a drift of the shared
machine's load does not land on one side only.  Missing figures print '-'.

Classification (`--classification`): our presets sst2, trec and timeseries
(UCR ArrowHead, OSULeaf and ACSF1 from ../shared/data/ucr) through the same
command line, test accuracy from metrics.json, each beside its reference:
Kim (2014) CNN-rand for SST-2 and TREC, and for the UCR sets the 1-nearest-
neighbour Euclidean accuracy computed in this run plus InceptionTime's
published figure (benchmarks/baselines.py gives the sources).  Without a
`trec` preset, TREC runs the sst2 preset on TREC.train.all / TREC.test.all.

    python3 benchmarks/bench_quality.py [--budgets 10 30] \\
        [--direction de-en|en-de|both] [--skip-peer] [--skip-ours] [--quick]
    python3 benchmarks/bench_quality.py --classification [--quick]

`--quick` is a smoke test of the plumbing, not a measurement: ours trains 3
steps (epochs=1, steps_per_epoch=3, eval_sentences=0) on the first 2000
training pairs and decodes 100 test sentences (dataset=files on slices
written to the work folder, so that its vocabulary is learned in seconds);
the peer trains for 0.5 minute on the whole training set and decodes 100
test sentences; classification runs 2 steps per preset.  Our side is
given `time_budget_minutes` in --quick only when TrainingConfig has it.
`--work-dir DIR` keeps the run folders and each command's log.
"""

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

import common
from baselines import (
    INCEPTION_TIME_UCR128,
    KIM_2014_CNN_RAND,
    ucr_nearest_neighbour_accuracy,
    ucr_paths,
)

SHARED = os.path.join(os.path.dirname(common.REPO_ROOT), "shared", "data")
PEER = os.path.join(common.REPO_ROOT, "benchmarks", "quality_peer.py")
UCR_SETS = ("ArrowHead", "OSULeaf", "ACSF1")
QUICK_PEER_MINUTES = 0.5
QUICK_TEST_SENTENCES = 100
QUICK_OVERRIDES = ["epochs=1", "steps_per_epoch=3", "eval_sentences=0"]


def as_typed(argv, work):
    """`argv` as a user would type it from the repository root: `python3` for
    this interpreter, repository paths relative to it and runs/bench_quality
    for the scratch folder, so that result files name no path of the machine
    that ran them."""
    root = os.path.join(common.REPO_ROOT, "")
    typed = ["python3" if arg == sys.executable else arg for arg in argv]
    typed = [arg[len(root):] if arg.startswith(root) else arg for arg in typed]
    return [arg.replace(work, os.path.join("runs", "bench_quality")) for arg in typed]


def run_command(argv, log_path):
    """Runs `argv` from the repository root; `(return code, seconds)`.

    Its output goes to `log_path`; the last lines are printed if it fails.
    """
    print("  $ " + shlex.join(as_typed(argv, os.path.dirname(log_path))), flush=True)
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        rc = subprocess.call(argv, cwd=common.REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if rc != 0:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            tail = f.read().splitlines()[-15:]
        print(f"  exit status {rc} after {seconds:.0f} s; last lines of {log_path}:\n    "
              + "\n    ".join(tail), flush=True)
    return rc, seconds


def read_json(path):
    """The dict in `path`, or {} when the run did not write it."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def lowercased_bleu(metrics):
    """The lowercased tokenized greedy BLEU of a metrics dict, or None.

    Looked up by name (a numeric key naming BLEU and lowercase or
    tokenized, greedy preferred), so that it is found whatever exact key
    the runs settle on; `bleu_lowercased` (a flag) is not a figure.
    """
    keys = [k for k, v in metrics.items()
            if "bleu" in k and ("lower" in k or "tok" in k)
            and isinstance(v, (int, float)) and not isinstance(v, bool)]
    keys.sort(key=lambda k: ("greedy" not in k, k))
    return metrics[keys[0]] if keys else None


def supports_time_budget():
    from training.config import TrainingConfig

    return "time_budget_minutes" in {f.name for f in dataclasses.fields(TrainingConfig)}


def quick_translation_files(work, source_language, target_language):
    """Slices of Multi30k for the quick run; the `--set` overrides naming them."""
    from training.data.readers import read_parallel

    folder = os.path.join(work, f"quick_{source_language}-{target_language}")
    os.makedirs(folder, exist_ok=True)
    sizes = {"train": 2000, "val": 100, "test_2016_flickr": QUICK_TEST_SENTENCES}
    overrides = ["dataset=files"]
    for split, key in zip(sizes, ("train_files", "valid_files", "test_files"), strict=True):
        pair = read_parallel(*(os.path.join(SHARED, "multi30k", f"{split}.{lang}.gz")
                               for lang in (source_language, target_language)))
        paths = [os.path.join(folder, f"{split}.{lang}")
                 for lang in (source_language, target_language)]
        for path, lines in zip(paths, pair, strict=True):
            with open(path, "w", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines[: sizes[split]]))
        overrides.append(f"{key}={json.dumps(paths)}")
    return overrides


def run_ours(budget, source_language, target_language, work, quick):
    label = f"ours_{source_language}-{target_language}_{budget:g}min"
    run_dir = os.path.join(work, label)
    overrides = [f"source_language={source_language}", f"target_language={target_language}"]
    if quick:
        overrides += QUICK_OVERRIDES + quick_translation_files(
            work, source_language, target_language)
    if not quick or supports_time_budget():
        overrides.append(f"time_budget_minutes={budget:g}")
    argv = [sys.executable, "-m", "training", "train", "--config", "multi30k",
            "--run-dir", run_dir, "--overwrite"]
    for item in overrides:
        argv += ["--set", item]
    rc, seconds = run_command(argv, os.path.join(work, label + ".log"))
    return {"command": as_typed(argv, work), "returncode": rc, "command_seconds": seconds,
            "metrics": read_json(os.path.join(run_dir, "metrics.json"))}


def run_peer(budget, source_language, target_language, work, quick):
    label = f"peer_{source_language}-{target_language}_{budget:g}min"
    out = os.path.join(work, label + ".json")
    argv = [sys.executable, PEER, "--budget", f"{budget:g}",
            "--direction", f"{source_language}-{target_language}", "--out", out]
    if quick:
        argv += ["--test-limit", str(QUICK_TEST_SENTENCES)]
    rc, seconds = run_command(argv, os.path.join(work, label + ".log"))
    return {"command": as_typed(argv, work), "returncode": rc, "command_seconds": seconds,
            "metrics": read_json(out)}


def figure(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def translation(args, work):
    directions = {"de-en": [("de", "en")], "en-de": [("en", "de")],
                  "both": [("de", "en"), ("en", "de")]}[args.direction]
    budgets = [QUICK_PEER_MINUTES] if args.quick else args.budgets
    if not args.skip_ours and not args.quick and not supports_time_budget():
        raise SystemExit("error: TrainingConfig has no `time_budget_minutes` yet, so our side "
                         "cannot be given a budget; run with --skip-ours or --quick.")
    if not args.skip_peer:  # learned (minutes) before anything is timed, then cached
        for source, target in directions:
            rc, seconds = run_command(
                [sys.executable, PEER, "--vocabulary-only", "--direction", f"{source}-{target}"],
                os.path.join(work, "peer_vocabulary.log"))
            if rc:
                raise SystemExit("error: the peer's vocabularies could not be learned.")
    sides = [s for s, skip in (("ours", args.skip_ours), ("peer", args.skip_peer)) if not skip]
    runners = {"ours": run_ours, "peer": run_peer}
    rows, turn = [], 0
    for source, target in directions:
        for budget in budgets:
            order = sides if turn % 2 == 0 else sides[::-1]
            turn += 1
            for side in order:
                print(f"{source}->{target}, {budget:g} min, {side}:", flush=True)
                result = runners[side](budget, source, target, work, args.quick)
                rows.append(dict(result, side=side, direction=f"{source}-{target}",
                                 budget_minutes=budget))
    return rows


def print_translation(rows):
    header = (f"{'direction':9s} {'budget':>6s} {'side':4s} {'greedy':>7s} {'beam':>6s} "
              f"{'lc tok':>6s} {'command s':>9s} {'train s':>8s} {'vocab s':>8s} "
              f"{'eval s':>7s} {'steps':>6s}")
    print(header)
    for row in rows:
        m = row["metrics"]
        vocab = m.get("vocabulary_seconds")
        note = " (cached)" if m.get("vocabulary_cached") else ""
        print(f"{row['direction']:9s} {row['budget_minutes']:>5g}m {row['side']:4s} "
              f"{figure(m.get('test_bleu_greedy')):>7s} {figure(m.get('test_bleu_beam')):>6s} "
              f"{figure(lowercased_bleu(m)):>6s} {figure(row['command_seconds'], 0):>9s} "
              f"{figure(m.get('train_seconds'), 0):>8s} {figure(vocab, 0):>8s} "
              f"{figure(m.get('eval_seconds'), 0):>7s} {str(m.get('steps', '-')):>6s}{note}")
    ratios = {}
    for row in rows:
        if row["side"] != "ours":
            continue
        key = (row["direction"], row["budget_minutes"])
        peer = next((r for r in rows if r["side"] == "peer"
                     and (r["direction"], r["budget_minutes"]) == key), None)
        ours_bleu = row["metrics"].get("test_bleu_greedy")
        peer_bleu = peer["metrics"].get("test_bleu_greedy") if peer else None
        ratio = ours_bleu / peer_bleu if ours_bleu is not None and peer_bleu else None
        ratios[f"{key[0]}_{key[1]:g}min"] = ratio
        print(f"ours/peer greedy BLEU, {key[0]}, {key[1]:g} min: {figure(ratio, 2)}"
              + ("x" if ratio is not None else ""))
    return ratios


def classification(args, work):
    from training.config import available_presets

    ucr = os.path.join(SHARED, "ucr")
    trec_preset, trec_overrides = "trec", []
    if "trec" not in available_presets():
        # Until the preset exists: the sst2 preset on the TREC files, so
        # that the row still measures something; the table names the preset.
        folder = os.path.join(SHARED, "sentence-classification")
        trec_preset, trec_overrides = "sst2", [
            "dataset=files", "encoding=latin-1",
            f"train_files={json.dumps([os.path.join(folder, 'TREC.train.all')])}",
            f"test_files={json.dumps([os.path.join(folder, 'TREC.test.all')])}"]
        print("no `trec` preset: TREC runs the sst2 preset on TREC.train.all / "
              "TREC.test.all (latin-1)", flush=True)
    jobs = [("sst2", "sst2", [], KIM_2014_CNN_RAND["sst2"] / 100, "Kim 2014 CNN-rand", None),
            ("trec", trec_preset, trec_overrides, KIM_2014_CNN_RAND["trec"] / 100,
             "Kim 2014 CNN-rand", None)]
    for name in UCR_SETS:
        train_path, test_path = ucr_paths(ucr, name)
        overrides = [f"train_files={json.dumps([train_path])}",
                     f"test_files={json.dumps([test_path])}"]
        one_nn = ucr_nearest_neighbour_accuracy(ucr, name)
        jobs.append((name, "timeseries", overrides, one_nn, "1-NN Euclidean (this run)",
                     INCEPTION_TIME_UCR128.get(name)))
    rows = []
    for name, preset, overrides, reference, source, inception in jobs:
        run_dir = os.path.join(work, f"ours_{name}")
        if args.quick:
            overrides = overrides + ["epochs=1", "steps_per_epoch=2"]
        argv = [sys.executable, "-m", "training", "train", "--config", preset,
                "--run-dir", run_dir, "--overwrite"]
        for item in overrides:
            argv += ["--set", item]
        print(f"{name}:", flush=True)
        rc, seconds = run_command(argv, os.path.join(work, f"ours_{name}.log"))
        rows.append({"task": name, "preset": preset, "command": as_typed(argv, work), "returncode": rc,
                     "command_seconds": seconds, "reference": reference,
                     "reference_source": source, "inception_time": inception,
                     "metrics": read_json(os.path.join(run_dir, "metrics.json"))})
    return rows


def print_classification(rows):
    print(f"{'task':10s} {'preset':10s} {'ours':>6s} {'reference':>9s}  {'(source)':27s} "
          f"{'InceptionTime':>13s} {'command s':>9s} {'train s':>8s}")
    for row in rows:
        m = row["metrics"]
        print(f"{row['task']:10s} {row['preset']:10s} {figure(m.get('test_accuracy'), 3):>6s} "
              f"{figure(row['reference'], 3):>9s}  {row['reference_source']:27s} "
              f"{figure(row['inception_time'], 3):>13s} {figure(row['command_seconds'], 0):>9s} "
              f"{figure(m.get('train_seconds'), 0):>8s}")


def main():
    args = common.parse_args(
        __doc__.splitlines()[0],
        lambda p: (
            p.add_argument("--budgets", type=float, nargs="+", default=[10.0, 30.0],
                           help="training minutes per run (default 10 30)"),
            p.add_argument("--direction", default="de-en", choices=("de-en", "en-de", "both")),
            p.add_argument("--skip-peer", action="store_true"),
            p.add_argument("--skip-ours", action="store_true"),
            p.add_argument("--classification", action="store_true",
                           help="our classification presets beside their references"),
            p.add_argument("--work-dir", default=None,
                           help="keep run folders and logs here (default: a temporary "
                                "folder, removed at the end)"),
        ),
    )
    bad = [b for b in args.budgets if b <= 0]
    if bad:
        raise ValueError(f"--budgets must be positive minutes; received budgets={args.budgets}.")
    info = common.machine_info()
    common.print_machine(info)
    temporary = None
    if args.work_dir is None:
        temporary = tempfile.TemporaryDirectory(prefix="bench_quality_")
        work = temporary.name
    else:
        work = os.path.abspath(args.work_dir)
        os.makedirs(work, exist_ok=True)
    try:
        payload = {"machine": info, "quick": args.quick}
        if args.classification:
            rows = classification(args, work)
            print_classification(rows)
            payload["tasks"] = rows
            name = "quality_classification"
        else:
            rows = translation(args, work)
            payload["ratios_ours_over_peer_greedy_bleu"] = print_translation(rows)
            payload["runs"] = rows
            # One file per direction and budgets, each run a dated row of it:
            # quality_translation_de-en_10.json
            budgets = "_".join(f"{b:g}" for b in args.budgets)
            name = f"quality_translation_{args.direction}_{budgets}"
        common.append_result(name, payload, args)
    finally:
        if temporary is not None:
            temporary.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
