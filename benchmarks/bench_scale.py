"""Training on Multi30k repeated 1x, 10x and 150x: memory, start-up, input share, BLEU.

What is measured: `python3 -m training train --config multi30k` pointed at
Multi30k's 29,000 training pairs written `scale` times over into a scratch
folder (`dataset=files`, gzip shards: 1 file a side at 1x, 4 at 10x, 16 at
150x; the 150x corpus is 4.35 M pairs, about 300 MB a side uncompressed),
with Multi30k's own validation and test files, under
`--set time_budget_minutes=M`.  Whether a run reads its corpus into memory
or streams it is the run's own choice (`in_memory_limit_mb`, on the bytes on
disk); the script prints the run's "Training data:" line.  For each scale:

- peak RSS: the kernel's high-water mark (`VmHWM` of /proc/<pid>/status),
  read every 0.2 s while the training process runs (the last reading
  before it exits);
- first update: `first_update_at_second` of the run's metrics.json, the
  seconds from the command's start (its `Stopwatch`) to the end of its
  first update (the time budget's calibration makes it);
- input share: in a second process over the finished run (its config,
  vocabulary and model.keras), `train_on_batch` on `--steps` batches drawn
  from the run's training stream as it comes, then on the same batches
  again from memory, over rounds; the share is 1 - (stream rate /
  in-memory rate), medians of the rounds (below 0: the two within the
  machine's noise);
- vocabulary: `vocabulary_seconds` of the run's metrics.json (the
  vocabulary learnt from at most `vocabulary_sample_lines` pairs);
- wall: seconds of the whole command, launch to exit;
- BLEU: `test_bleu_greedy` of metrics.json (test_2016_flickr);

and each against the 1x run.  Targets printed beside them: at 150x, peak
RSS within 1.3x of 1x, first update within 60 s, input under 5% of a step,
vocabulary under 10 s, an M-minute budget ending within M + 0.5 minutes,
BLEU within 10% of 1x.

    python3 benchmarks/bench_scale.py [--scales 1 10 150] [--minutes 4]
        [--scratch benchmarks/.cache/scale] [--data-dir ../shared/data]
        [--set in_memory_limit_mb=0]

Appends its run to benchmarks/results/scale.json (`--quick`: 1x, one
minute, nothing stored).  Needs about 1.3 GB of scratch disk at 150x.
"""

import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import common

#: Shards a side at each scale (other scales: one file a side per 10x, at most 16).
SHARDS = {1: 1, 10: 4, 150: 16}
TARGETS = {"rss_ratio": 1.3, "first_update_seconds": 60.0, "input_share": 0.05,
           "vocabulary_seconds": 10.0, "bleu_ratio": 0.9}


def write_corpus(data_dir, scratch, scale):
    """Multi30k's training pairs `scale` times over in gzip shards; (source, target) globs."""
    folder = os.path.join(scratch, f"x{scale}")
    patterns = (os.path.join(folder, "train.*.de.gz"), os.path.join(folder, "train.*.en.gz"))
    if os.path.isfile(os.path.join(folder, "done")):
        return patterns
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    num_shards = SHARDS.get(scale, min(16, max(1, scale // 10)))
    for language in ("de", "en"):
        with gzip.open(os.path.join(data_dir, "multi30k", f"train.{language}.gz"), "rb") as f:
            lines = f.read().splitlines(keepends=True)
        per_shard = -(-len(lines) * scale // num_shards)
        outputs = [gzip.open(os.path.join(folder, f"train.{k:02d}.{language}.gz"), "wb",
                             compresslevel=1) for k in range(num_shards)]
        written = 0
        for _ in range(scale):  # copy by copy: never the whole repeated corpus in memory
            for start in range(0, len(lines), 1000):
                chunk = lines[start:start + 1000]
                outputs[min(written // per_shard, num_shards - 1)].writelines(chunk)
                written += len(chunk)
        for output in outputs:
            output.close()
    open(os.path.join(folder, "done"), "w").close()
    return patterns


def peak_rss_mb(pid):
    """VmHWM of `pid` in MB, or None once it has exited."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def train(patterns, data_dir, run_dir, minutes, overrides=()):
    """Runs the training command (plus `--set` of each of `overrides`); its figures."""
    multi30k = os.path.join(data_dir, "multi30k")
    command = [sys.executable, "-m", "training", "train", "--config", "multi30k",
               "--run-dir", run_dir]
    for item in ("dataset=files", f"train_files={json.dumps(list(patterns))}",
                 "valid_files=" + json.dumps([f"{multi30k}/val.de.gz", f"{multi30k}/val.en.gz"]),
                 "test_files=" + json.dumps([f"{multi30k}/test_2016_flickr.de.gz",
                                             f"{multi30k}/test_2016_flickr.en.gz"]),
                 f"time_budget_minutes={minutes}", *overrides):
        command += ["--set", item]
    log = run_dir + ".log"
    with open(log, "w", encoding="utf-8") as output:
        launched = time.time()
        process = subprocess.Popen(command, cwd=common.REPO_ROOT, stdout=output,
                                   stderr=subprocess.STDOUT)
        peak = 0.0
        try:
            while process.poll() is None:
                peak = max(peak, peak_rss_mb(process.pid) or 0.0)
                time.sleep(0.2)
        finally:
            if process.poll() is None:  # interrupted: never leave the run behind
                process.kill()
                process.wait()
        wall = time.time() - launched
    with open(log, encoding="utf-8") as f:
        text = f.read()
    if process.returncode:
        raise SystemExit(f"training failed ({process.returncode}):\n{text[-3000:]}")
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    path = next((line for line in text.splitlines() if line.startswith("Training data:")), "")
    return {
        "path": path,
        "peak_rss_mb": round(peak, 1),
        "first_update_seconds": metrics.get("first_update_at_second"),
        "vocabulary_seconds": metrics.get("vocabulary_seconds"),
        "data_seconds": metrics.get("data_seconds"),
        "wall_seconds": round(wall, 1),
        "steps": metrics["steps"],
        "steps_per_epoch": metrics["steps_per_epoch"],
        "test_bleu_greedy": metrics.get("test_bleu_greedy"),
    }


def input_share(run_dir, rounds=3, steps=30):
    """Runs `--child-input` over a finished run; its figures (dict)."""
    command = [sys.executable, os.path.abspath(__file__), "--child-input", run_dir,
               "--rounds", str(rounds), "--steps", str(steps)]
    done = subprocess.run(command, cwd=common.REPO_ROOT, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_input(run_dir, rounds, steps):
    """Updates per second from the run's stream and from batches in memory."""
    import keras

    from training.config import TrainingConfig
    from training.runs.run_dir import load_run

    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
        config = TrainingConfig.from_dict(json.load(f))
    run = load_run(run_dir)
    task, model = run.task, run.model
    data = task.load_data(config, run_dir)
    config = task.resolve_config(config, data)
    stream = iter(task.make_dataset(config, data.train, shuffle=True, repeat=True,
                                    training=True))
    loss, metrics = task.loss_and_metrics(config)
    model.compile(optimizer=keras.optimizers.Adam(1e-4), loss=loss, metrics=metrics)

    def timed(batches):
        """(updates per second, the batches trained on), `batches` an iterator."""
        seen = []
        started = time.perf_counter()
        for batch in batches:
            model.train_on_batch(*batch)
            seen.append(batch)
        return len(seen) / (time.perf_counter() - started), seen

    def from_stream():
        for _ in range(steps):
            yield next(stream)

    _, warm = timed(from_stream())  # traces the step for the shapes met first
    timed(iter(warm))
    real, memory = [], []
    for _ in range(rounds):
        # The same batches twice: as the stream makes them, then from memory.
        rate, batches = timed(from_stream())
        real.append(rate)
        memory.append(timed(iter(batches))[0])
    real, memory = statistics.median(real), statistics.median(memory)
    print(json.dumps({"updates_per_second_stream": round(real, 3),
                      "updates_per_second_in_memory": round(memory, 3),
                      "input_share": round(1 - real / memory, 4)}))


def report(results, minutes):
    base = results.get("1")
    rows = []
    for scale, r in results.items():
        row = dict(r)
        if base:
            row["rss_ratio"] = round(r["peak_rss_mb"] / base["peak_rss_mb"], 2)
            if base.get("test_bleu_greedy") and r.get("test_bleu_greedy") is not None:
                row["bleu_ratio"] = round(r["test_bleu_greedy"] / base["test_bleu_greedy"], 3)
            row["wall_ratio"] = round(r["wall_seconds"] / base["wall_seconds"], 2)
        rows.append((scale, row))
        print(f"\n{scale}x: {r['path']}")
        for key, value in row.items():
            if key != "path":
                print(f"  {key:32s} {value}")
    last = rows[-1][1]
    checks = {
        "peak RSS within 1.3x of 1x": last.get("rss_ratio", 1.0) <= TARGETS["rss_ratio"],
        "first update within 60 s": last["first_update_seconds"] <= 60,
        "input under 5% of a step": last.get("input_share", 0.0) < TARGETS["input_share"],
        "vocabulary under 10 s": (last["vocabulary_seconds"] or 0) < 10,
        f"{minutes}-minute budget ends within {minutes + 0.5} minutes":
            last["wall_seconds"] <= 60 * (minutes + 0.5),
        "BLEU within 10% of 1x": last.get("bleu_ratio", 1.0) >= TARGETS["bleu_ratio"],
    }
    print(f"\nTargets at {rows[-1][0]}x:")
    for name, met in checks.items():
        print(f"  {'met ' if met else 'MISS'} {name}")
    return checks


def main():
    if "--child-input" in sys.argv:
        index = sys.argv.index("--child-input")
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1])
        steps = int(sys.argv[sys.argv.index("--steps") + 1])
        return child_input(sys.argv[index + 1], rounds, steps)

    def extra(parser):
        parser.add_argument("--scales", type=int, nargs="+", default=[1, 10, 150])
        parser.add_argument("--minutes", type=float, default=4.0)
        parser.add_argument("--scratch", default=os.path.join(common.REPO_ROOT, "benchmarks",
                                                              ".cache", "scale"))
        parser.add_argument("--data-dir", default=os.path.join(common.REPO_ROOT, "..",
                                                               "shared", "data"))
        parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                            help="a config override for every run (e.g. in_memory_limit_mb=0 "
                                 "streams the small scales too)")
        parser.add_argument("--keep-runs", action="store_true",
                            help="keep the run directories under the scratch folder")

    args = common.parse_args(__doc__.splitlines()[0], extra)
    if args.quick:
        args.scales, args.minutes = [1], 1.0
    if not os.path.isfile(os.path.join(args.data_dir, "multi30k", "train.de.gz")):
        raise SystemExit(f"Multi30k not found under --data-dir {args.data_dir}.")
    results = {}
    for scale in args.scales:
        patterns = write_corpus(args.data_dir, args.scratch, scale)
        run_dir = os.path.join(args.scratch, f"run_x{scale}")
        shutil.rmtree(run_dir, ignore_errors=True)
        print(f"{scale}x: training for {args.minutes} minutes...", flush=True)
        results[str(scale)] = train(patterns, args.data_dir, run_dir, args.minutes, args.set)
        results[str(scale)].update(input_share(run_dir, rounds=2 if args.quick else 3))
        if not args.keep_runs:
            shutil.rmtree(run_dir, ignore_errors=True)
    checks = report(results, args.minutes)
    common.append_result("scale", {"minutes": args.minutes, "overrides": args.set,
                                   "results": results, "targets_met": checks,
                                   "machine": common.machine_info()}, args)


if __name__ == "__main__":
    main()
