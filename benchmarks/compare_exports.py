"""Two SavedModels of the serving benchmark's model, every translation signature timed in pairs.

`bench_serving.py` measures each signature against CTranslate2 in its own
run, and CTranslate2's own time moves from one run to the next by as much
as a code change moves ours; comparing two versions of the code by their
ratios in two runs then says little.  Here the two exports are loaded in
one process and each call of the one is followed by a call of the other
(the order alternating), so the paired ratio compares the code alone:

    python3 benchmarks/compare_exports.py export EXPORT_DIR [--package-root CHECKOUT]
    python3 benchmarks/compare_exports.py time BASE_DIR CANDIDATE_DIR

`export` writes the paper model of `bench_serving.py` (random weights of
seed 0, its synthetic vocabulary) with the export function of the tree it
imports the package from: this one's, or with `--package-root DIR` the
checkout at DIR (a `git worktree` of an older commit), so that the older
code's export is timed against this one's; trees before 2026-12-02 export
through a pipeline task, which `export` calls there.  `time` prints, per batch (1, then 32)
and signature, both medians, whether the translations are identical and
the candidate's paired ratio to the base (median and quartiles; below 1
is faster), and appends the rows to benchmarks/results/compare_exports.json
(`--change TEXT`: what the candidate changed).
"""

import argparse
import os
import statistics
import sys

import common  # first: quiets TensorFlow's start

SIGNATURES = ("serving_default", "translate_xla", "translate_beam", "translate_beam_xla")


def export(directory, package_root=None):
    """The benchmark's paper model, exported to `directory` by the exporter of
    this tree, or of the checkout at `package_root`."""
    if package_root is not None:  # before `common`'s repository root
        sys.path.insert(0, os.path.abspath(package_root))
    import bench_serving
    import keras

    from keras_transformer.models import Transformer

    tokenizer = bench_serving.synthetic_tokenizer()
    keras.utils.set_random_seed(0)
    model = Transformer(vocabulary_size=tokenizer.vocabulary_size, **bench_serving.SIZES)
    try:
        from export.saved_model import export_model
    except ImportError:  # a tree of before 2026-12-02: the export took a task
        from export.saved_model import export_saved_model
        from training.tasks import get_task

        export_saved_model(model, {"benchmark": True}, directory,
                           get_task("translation", tokenizer=tokenizer))
    else:
        export_model(model, directory, tokenizer, config={"benchmark": True})
    print(f"exported {directory} with the package at "
          f"{os.path.dirname(os.path.dirname(os.path.abspath(sys.modules['export'].__file__)))}")


def compare(base_dir, candidate_dir):
    """[{batch, signature, identical, base_ms, candidate_ms, ratio_median, ratio_quartiles}]."""
    import bench_serving
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizers' ops

    loaded = {"base": tf.saved_model.load(base_dir),
              "candidate": tf.saved_model.load(candidate_dir)}
    rows = []
    for batch, rounds in bench_serving.ROUNDS.items():
        sentences = tf.constant(bench_serving.sentences(batch))
        for name in SIGNATURES:
            calls = {key: model.signatures[name] for key, model in loaded.items()}
            first = {key: call(sentences=sentences)["translations"].numpy()
                     for key, call in calls.items()}  # untimed: traces and compiles
            seconds = common.interleave(
                {key: (lambda call=call, feed=sentences: call(sentences=feed))
                 for key, call in calls.items()},
                rounds, warmup=0, verbose=False, pause=bench_serving.PAUSE)
            median, quartiles = common.paired_ratio(seconds["candidate"], seconds["base"])
            row = {"batch": batch, "signature": name,
                   "identical": bool((first["base"] == first["candidate"]).all()),
                   "base_ms": round(1000 * statistics.median(seconds["base"]), 1),
                   "candidate_ms": round(1000 * statistics.median(seconds["candidate"]), 1),
                   "ratio_median": median, "ratio_quartiles": quartiles}
            rows.append(row)
            print(f"batch {batch:2d} {name:20s} base {row['base_ms']:7.1f} ms  candidate "
                  f"{row['candidate_ms']:7.1f} ms  paired {row['ratio_median']:.3f} "
                  f"(IQR {row['ratio_quartiles'][0]:.3f}-{row['ratio_quartiles'][1]:.3f})  "
                  f"translations identical: {row['identical']}", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    exporting = commands.add_parser("export", help="export the benchmark's model")
    exporting.add_argument("directory")
    exporting.add_argument("--package-root", help="the checkout whose package exports it")
    timing = commands.add_parser("time", help="time two exports in pairs")
    timing.add_argument("base")
    timing.add_argument("candidate")
    timing.add_argument("--change", help="what the candidate changed, stored with the run")
    args = parser.parse_args()
    if args.command == "export":
        export(args.directory, args.package_root)
        return
    rows = compare(args.base, args.candidate)
    common.append_result("compare_exports", {"rows": rows}, args)


if __name__ == "__main__":
    main()
