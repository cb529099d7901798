"""Command line of the exporters: `python -m export` or `keras-transformer-export`.

```
python -m export saved-model --run-dir runs/toy --output exports/toy/1 [--overwrite]
python -m export tflite --run-dir runs/toy --output exports/toy.tflite --quantize int8
python -m export verify --run-dir runs/toy --saved-model exports/toy/1 [--tflite exports/toy.tflite]
```

Each subcommand loads the run (`training.runs.run_dir.load_run`) and calls one
library function; `verify` prints its report as JSON and exits with 1 when
the export disagrees with the Keras model.  A missing run, an existing
output or a bad argument prints `error: <message>` and exits with 2;
`--debug` shows the traceback instead.
"""

import argparse
import json

from training.cli.errors import add_debug_flag, run_reporting_errors
from training.cli.quiet import quiet_tensorflow
from training.serving import QUANTIZATIONS


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


def build_parser():
    """The argument parser (one subparser per exporter)."""
    parser = argparse.ArgumentParser(
        prog="python -m export",
        description="Export a trained keras-transformer run to a SavedModel or TFLite, and verify it.",
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
    add_debug_flag(parser, (saved_model, tflite, verify))
    return parser


def main(argv=None):
    """Parses `argv` (default `sys.argv[1:]`) and runs the subcommand.

    Returns:
        The process exit status.
    """
    args = build_parser().parse_args(argv)
    quiet_tensorflow(args.debug)
    return run_reporting_errors(lambda: args.handler(args), debug=args.debug)
