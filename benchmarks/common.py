"""Shared helpers of the benchmarks: machine info, interleaved timing, JSON.

Import this module before TensorFlow: it sets `TF_CPP_MIN_LOG_LEVEL=3`.

The machines these run on are shared and noisy, so every comparison times
the candidates *interleaved in one process*: after a warm-up of each, round
r runs A, B, (C, ...) once each, and the order is reversed on odd rounds
(A B, B A, A B, ...) so that a slow drift of the machine's load lands on
both sides equally.  We report the median and the spread (IQR and min/max)
of each, the ratio of the medians, and the median of the per-round paired
ratios, which is the figure least sensitive to load that changes between
rounds.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(REPO_ROOT, "benchmarks", "results")
if REPO_ROOT not in sys.path:  # `python3 benchmarks/bench_x.py` from anywhere
    sys.path.insert(0, REPO_ROOT)


def parse_args(description, extra=None):
    """`--quick` (under 2 minutes), `--change` plus any `extra(parser)` arguments."""
    parser = argparse.ArgumentParser(description=description)
    add_result_args(parser)
    if extra is not None:
        extra(parser)
    return parser.parse_args()


def add_result_args(parser):
    """`--quick` and `--change`, which `append_result` reads."""
    parser.add_argument("--quick", action="store_true",
                        help="small run, < 2 min: a smoke test, its figures are not stored")
    parser.add_argument("--change", default=None, metavar="TEXT",
                        help="what this run changed or tests, stored with its row")


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info():
    """Cores, CPU model, load and library versions, as a dict."""
    import keras
    import tensorflow as tf

    try:
        import keras_hub

        hub_version = keras_hub.__version__
    except ImportError:
        hub_version = None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "keras_hub": hub_version,
        "gpus": len(tf.config.list_physical_devices("GPU")),
    }


def print_machine(info):
    print(
        f"machine: {info['usable_cores']} cores ({info['logical_cores']} logical), "
        f"{info['cpu_model']}, load {info['load_average_1_5_15']}, GPUs {info['gpus']}\n"
        f"versions: TensorFlow {info['tensorflow']}, Keras {info['keras']}, "
        f"keras-hub {info['keras_hub']}, Python {info['python']}",
        flush=True,
    )


def summarize(samples):
    """Median, quartiles, min/max and count of a list of numbers."""
    xs = sorted(samples)
    if len(xs) >= 2:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    else:
        q1 = q3 = xs[0]
    return {
        "median": statistics.median(xs),
        "q1": q1,
        "q3": q3,
        "min": xs[0],
        "max": xs[-1],
        "n": len(xs),
        "samples": list(samples),
    }


def timed(fn):
    """Seconds one call of `fn` takes (its result is discarded)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleave(candidates, repeats, warmup=1, verbose=True, pause=0.0):
    """Times each callable `repeats` times, interleaved, after `warmup` calls.

    Args:
        candidates: dict name -> zero-argument callable that runs the work
            once and blocks until it is done (return a NumPy value, or call
            `.numpy()`, so that nothing is left running asynchronously).
        repeats: rounds; each round times every candidate once.
        warmup: untimed calls of each candidate first (tracing, compiling,
            allocator and thread-pool warm-up).
        pause: seconds slept before each timed call.  Runtimes whose worker
            threads spin after a call (OpenMP's 200 ms block time in
            CTranslate2, XNNPACK's and Eigen's pools) would otherwise take
            the cores from whichever candidate runs next.

    Returns:
        dict name -> list of seconds, in round order.
    """
    names = list(candidates)
    for name in names:
        for _ in range(warmup):
            start = time.perf_counter()
            candidates[name]()
            if verbose:
                print(f"  warm-up {name}: {time.perf_counter() - start:.2f} s", flush=True)
    times = {name: [] for name in names}
    for r in range(repeats):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            if pause:
                time.sleep(pause)
            times[name].append(timed(candidates[name]))
        if verbose:
            line = ", ".join(f"{n} {times[n][-1]:.3f} s" for n in names)
            print(f"  round {r + 1}/{repeats}: {line}", flush=True)
    return times


def compare(times, baseline, candidate):
    """Speed-up of `candidate` over `baseline` from interleaved seconds.

    Returns the ratio of the medians (baseline / candidate: > 1 means the
    candidate is faster), the median and range of the per-round ratios, and
    the ratio of the minimums: on a shared machine whose load comes and goes
    the fastest run of each is the one least disturbed by other processes.
    """
    a, b = times[baseline], times[candidate]
    paired = [x / y for x, y in zip(a, b, strict=True)]
    return {
        "ratio_of_medians": statistics.median(a) / statistics.median(b),
        "paired_ratio": summarize(paired),
        "ratio_of_mins": min(a) / min(b),
    }


def paired_ratio(numerator, denominator):
    """Median and `[lower, upper]` quartiles of the per-round ratios
    `numerator[i] / denominator[i]` of two `interleave` series, each rounded
    to three digits (quartiles as `statistics.quantiles` cuts them)."""
    ratios = [n / d for n, d in zip(numerator, denominator, strict=True)]
    quartiles = statistics.quantiles(ratios, n=4)
    return round(statistics.median(ratios), 3), [round(quartiles[0], 3), round(quartiles[2], 3)]


def fmt(stats, scale=1.0, unit="s", digits=3):
    """'median [q1, q3] (min..max) unit' of a `summarize` dict."""
    s = {k: stats[k] * scale for k in ("median", "q1", "q3", "min", "max")}
    return (
        f"{s['median']:.{digits}f} {unit} [IQR {s['q1']:.{digits}f}-{s['q3']:.{digits}f}, "
        f"range {s['min']:.{digits}f}-{s['max']:.{digits}f}]"
    )


def make_matmul(n=2048):
    """A callable running one float32 n x n @ n x n matmul, and its FLOPs.

    The reference for model-FLOPs utilisation: what this machine's BLAS
    (Eigen, all intra-op threads) sustains on a large dense matmul.  Time it
    inside the same `interleave` as the models, so that it sees the same
    machine load; FLOP/s = flops / seconds.
    """
    import tensorflow as tf

    a = tf.random.normal((n, n))
    b = tf.random.normal((n, n))
    matmul = tf.function(lambda: tf.reduce_sum(tf.matmul(a, b)))
    return (lambda: matmul().numpy()), 2 * n**3


def source_commit():
    """The repository's commit (`git describe --always --dirty`), or None without git."""
    import subprocess

    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO_ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def append_result(name, payload, args):
    """Appends one dated run to benchmarks/results/<name>.json; returns the path.

    The file is one benchmark's runs, oldest first: a JSON list of
    `{"date", "commit", "change", **payload}` (`args.change`: what the run
    changed).  A `--quick` run is a smoke test: nothing is written (None).
    """
    if getattr(args, "quick", False):
        print(f"--quick: a smoke run, benchmarks/results/{name}.json left as it is", flush=True)
        return None
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, f"{name}.json")
    runs = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            runs = json.load(f)
        if not isinstance(runs, list):
            raise ValueError(f"{path} must hold a JSON list of runs; found {type(runs).__name__}.")
    runs.append({"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": source_commit(),
                 "change": getattr(args, "change", None), **payload})
    partial = path + ".partial"  # a run stopped while writing leaves the file as it was
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(runs, f, indent=2, default=float)
        f.write("\n")
    os.replace(partial, path)
    print(f"appended the run of {runs[-1]['date']} to {os.path.relpath(path, os.getcwd())}",
          flush=True)
    return path


def peak_rss_mib():
    """This process's peak resident set size so far, in MiB (Linux: KiB units)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def train_on_files(config, train, test, seed, overrides=(), env=None):
    """(metrics.json, wall seconds, CPU seconds) of the command a user types:

        python3 -m training train --config CONFIG --run-dir RUN \\
            --set 'train_files=["TRAIN"]' --set 'test_files=["TEST"]' --set seed=N

    plus `--set ITEM` for each of `overrides`, in a temporary run folder,
    with the environment `env` (None: this process's).  CPU seconds too: a shared machine's load (or a pause) stretches the wall clock.
    """
    import resource
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as run_dir:
        command = [sys.executable, "-m", "training", "train", "--config", config,
                   "--run-dir", run_dir, "--set", f"train_files={json.dumps([train])}",
                   "--set", f"test_files={json.dumps([test])}", "--set", f"seed={seed}"]
        for item in overrides:
            command += ["--set", item]
        start, cpu = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(command, check=True, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, env=env)
        seconds = time.time() - start
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_seconds = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
        with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
            return json.load(f), seconds, cpu_seconds
