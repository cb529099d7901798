"""Command line of the exporters: `python -m export` or `keras-transformer-export`.

```
python -m export saved-model --run-dir runs/toy --output exports/toy/1 [--overwrite]
python -m export tflite --run-dir runs/toy --output exports/toy.tflite --quantize int8
python -m export verify --run-dir runs/toy --saved-model exports/toy/1 [--tflite exports/toy.tflite]
python -m export ctranslate2 --run-dir runs/toy --output exports/toy-ct2 [--quantization int8]
```

Each subcommand loads the run (`training.runs.run_dir.load_run`) and calls one
library function; `verify` prints its report as JSON and exits with 1 when
the export disagrees with the Keras model; `ctranslate2` prints the path and
the share of the task's probe sentences it translates as Keras does, and
exits with 1 when a float32 export falls short.  A missing run, an existing
output or a bad argument prints `error: <message>` and exits with 2;
`--debug` shows the traceback instead.
"""

import argparse
import json

from cli.errors import add_debug_flag, run_reporting_errors
from cli.quiet import quiet_tensorflow
from training.serving import QUANTIZATIONS

#: `export.ctranslate2.QUANTIZATIONS`, repeated so that `--help` imports nothing heavy.
CT2_QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16")


def _load_run(run_dir):
    from training.runs.run_dir import load_run  # Imported late: `--help` stays fast.

    return load_run(run_dir)


def _saved_model(args):
    from export.saved_model import export_saved_model

    run = _load_run(args.run_dir)
    path = export_saved_model(run.model, run.config, args.output, run.task,
                              overwrite=args.overwrite, quantize=args.quantize)
    print(path)
    return 0


def _tflite(args):
    from export.tflite import export_tflite

    run = _load_run(args.run_dir)
    path = export_tflite(
        run.model, args.output, run.task, quantize=args.quantize, overwrite=args.overwrite,
        sequence_length=args.sequence_length, batch_size=args.batch_size,
    )  # fmt: skip
    print(path)
    return 0


def _verify(args):
    from export.verify import verify_run_exports

    report = verify_run_exports(_load_run(args.run_dir), args.saved_model, args.tflite)
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0 if report["ok"] else 1


def _ctranslate2(args):
    from export.ctranslate2 import (
        CTranslate2Translator,
        export_ctranslate2,
        import_ctranslate2,
        verify_ctranslate2,
    )

    import_ctranslate2()  # a missing extra is told before the run loads
    run = _load_run(args.run_dir)
    path = export_ctranslate2(run.model, run.task, args.output,
                              quantization=args.quantization, overwrite=args.overwrite)
    print(path)
    report = verify_ctranslate2(run, path, translator=CTranslate2Translator(path))
    shares = [f"greedy {report['greedy']['identical_count']}/{report['num_sentences']}"]
    if report["beam"] is not None:
        shares.append(f"beam {report['beam_size']} (length penalty 0) "
                      f"{report['beam']['identical_count']}/{report['num_sentences']}")
    required = report["min_identical"]
    verdict = "" if required is None else (
        f"; {'ok' if report['ok'] else 'FAILED'}: at least {required:.0%} greedy required"
    )
    print(f"identical to the Keras model on the probe sentences: {', '.join(shares)}{verdict}")
    for difference in report["greedy"]["differences"]:
        print(f"  differs: {json.dumps(difference, ensure_ascii=False)}")
    return 0 if report["ok"] else 1


def build_parser():
    """The argument parser (one subparser per exporter)."""
    parser = argparse.ArgumentParser(
        prog="python -m export",
        description="Export a trained keras-transformer run to a SavedModel, TFLite or "
        "CTranslate2, and verify it.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    saved_model = commands.add_parser(
        "saved-model", help="SavedModel with string inputs/outputs (TensorFlow Serving).",
        description="Write a SavedModel whose serving_default signature takes raw strings.",
    )  # fmt: skip
    saved_model.add_argument("--run-dir", required=True, help="Training run directory.")
    saved_model.add_argument(
        "--output", required=True, help="Export directory to create."
    )
    saved_model.add_argument(
        "--overwrite", action="store_true", help="Replace --output if it exists."
    )
    saved_model.add_argument(
        "--quantize", choices=("none", "int8"), default="none",
        help="A classifier's embedding tables in int8 (a scale per row); the rest float32.",
    )
    saved_model.set_defaults(handler=_saved_model)

    tflite = commands.add_parser(
        "tflite", help="TFLite/LiteRT flatbuffer (token ids in; tokenizer stays outside).",
        description="Convert the classifier, or the translator with its greedy loop, to .tflite.",
    )  # fmt: skip
    tflite.add_argument("--run-dir", required=True, help="Training run directory.")
    tflite.add_argument("--output", required=True, help="The .tflite file to write.")
    tflite.add_argument("--quantize", choices=QUANTIZATIONS, default="none",
                        help="Weights: float32 (none), float16, or int8 dynamic range.")  # fmt: skip
    tflite.add_argument("--sequence-length", type=int, default=None,
                        help="Static input length S (default: the model's max_sequence_length).")  # fmt: skip
    tflite.add_argument(
        "--batch-size", type=int, default=1, help="Static batch size (default 1)."
    )
    tflite.add_argument(
        "--overwrite", action="store_true", help="Replace --output if it exists."
    )
    tflite.set_defaults(handler=_tflite)

    verify = commands.add_parser(
        "verify", help="Compare exports with the run's Keras model.",
        description="Run the SavedModel in a fresh process and with saved_model_cli, "
        "and the .tflite with the LiteRT interpreter; compare with Keras.",
    )  # fmt: skip
    verify.add_argument("--run-dir", required=True, help="Training run directory.")
    verify.add_argument(
        "--saved-model", required=True, help="Export directory to check."
    )
    verify.add_argument(
        "--tflite", default=None, help="Optional .tflite file to check."
    )
    verify.set_defaults(handler=_verify)

    ct2 = commands.add_parser(
        "ctranslate2", help="CTranslate2 model directory of a translator (tokenizer beside it).",
        description="Convert the translator for CTranslate2 (pip install -e \".[ctranslate2]\"), "
        "then compare its greedy and beam translations of the task's probe sentences with Keras.",
    )  # fmt: skip
    ct2.add_argument("--run-dir", required=True, help="Training run directory.")
    ct2.add_argument("--output", required=True, help="Model directory to create.")
    ct2.add_argument("--quantization", choices=CT2_QUANTIZATIONS, default="float32",
                     help="Weight type (CTranslate2's quantization; default float32).")  # fmt: skip
    ct2.add_argument(
        "--overwrite", action="store_true", help="Replace --output if it exists."
    )
    ct2.set_defaults(handler=_ctranslate2)
    add_debug_flag(parser, (saved_model, tflite, verify, ct2))
    return parser


def main(argv=None):
    """Parses `argv` (default `sys.argv[1:]`) and runs the subcommand.

    Returns:
        The process exit status.
    """
    args = build_parser().parse_args(argv)
    quiet_tensorflow(args.debug)
    return run_reporting_errors(lambda: args.handler(args), debug=args.debug)
