"""Command line of the exporters: `python -m export` or `keras-transformer-export`.

```
python -m export saved-model --run-dir runs/toy --output exports/toy/1 [--overwrite]
python -m export tflite --run-dir runs/toy --output exports/toy.tflite --quantize int8
python -m export verify --run-dir runs/toy --saved-model exports/toy/1 [--tflite exports/toy.tflite]
python -m export ctranslate2 --run-dir runs/toy --output exports/toy-ct2 [--quantization int8]
python -m export serve --model_name toy --model_base_path exports/toy [--enable_batching]
```

Each subcommand (`cli.export_handlers`, imported once the arguments are
parsed) loads the run (`training.runs.run_dir.load_run`) and calls one
library function; `verify` prints its report as JSON and exits with 1 when
the export disagrees with the Keras model; `ctranslate2` prints the path and
the share of the task's probe sentences it translates as Keras does, and
exits with 1 when a float32 export falls short; `serve` serves exports over
TensorFlow Serving's REST API until SIGTERM (`cli.serve_command`, its
flags).  A missing run, an existing
output or a bad argument prints `error: <message>` and exits with 2;
`--debug` shows the traceback instead.
"""

import argparse

from cli.errors import add_debug_flag, run_reporting_errors
from cli.quiet import quiet_tensorflow
from cli.serve_command import add_serve_parser
from training.serving import QUANTIZATIONS

#: `export.ctranslate2.QUANTIZATIONS`, repeated so that `--help` imports nothing heavy.
CT2_QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16")


def _subcommand(commands, name, help, description, output_help=None):
    """A subparser reading `--run-dir`, and writing `--output` when `output_help` is given."""
    parser = commands.add_parser(name, help=help, description=description)
    parser.add_argument("--run-dir", required=True, help="Training run directory.")
    if output_help is not None:
        parser.add_argument("--output", required=True, help=output_help)
        parser.add_argument(
            "--overwrite", action="store_true", help="Replace --output if it exists."
        )
    return parser


def build_parser():
    """The argument parser (one subparser per exporter)."""
    parser = argparse.ArgumentParser(
        prog="python -m export",
        description="Export a trained keras-transformer run to a SavedModel, TFLite or "
        "CTranslate2, and verify it.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    saved_model = _subcommand(
        commands, "saved-model", "SavedModel with string inputs/outputs (TensorFlow Serving).",
        "Write a SavedModel whose serving_default signature takes raw strings.",
        output_help="Export directory to create.",
    )  # fmt: skip
    saved_model.add_argument(
        "--quantize", choices=("none", "int8"), default="none",
        help="A classifier's embedding tables in int8 (a scale per row); the rest float32.",
    )

    tflite = _subcommand(
        commands, "tflite", "TFLite/LiteRT flatbuffer (token ids in; tokenizer stays outside).",
        "Convert the classifier, or the translator with its greedy loop, to .tflite.",
        output_help="The .tflite file to write.",
    )  # fmt: skip
    tflite.add_argument("--quantize", choices=QUANTIZATIONS, default="none",
                        help="Weights: float32 (none), float16, or int8 dynamic range.")  # fmt: skip
    tflite.add_argument("--sequence-length", type=int, default=None,
                        help="Static input length S (default: the model's max_sequence_length).")  # fmt: skip
    tflite.add_argument(
        "--batch-size", type=int, default=1, help="Static batch size (default 1)."
    )

    verify = _subcommand(
        commands, "verify", "Compare exports with the run's Keras model.",
        "Run the SavedModel in a fresh process and with saved_model_cli, "
        "and the .tflite with the LiteRT interpreter; compare with Keras.",
    )  # fmt: skip
    verify.add_argument(
        "--saved-model", required=True, help="Export directory to check."
    )
    verify.add_argument(
        "--tflite", default=None, help="Optional .tflite file to check."
    )

    ct2 = _subcommand(
        commands, "ctranslate2",
        "CTranslate2 model directory of a translator (tokenizer beside it).",
        "Convert the translator for CTranslate2 (pip install -e \".[ctranslate2]\"), "
        "then compare its greedy and beam translations of the task's probe sentences with Keras.",
        output_help="Model directory to create.",
    )  # fmt: skip
    ct2.add_argument("--quantization", choices=CT2_QUANTIZATIONS, default="float32",
                     help="Weight type (CTranslate2's quantization; default float32).")  # fmt: skip
    serve = add_serve_parser(commands)
    add_debug_flag(parser, (saved_model, tflite, verify, ct2, serve))
    return parser


def main(argv=None):
    """Parses `argv` (default `sys.argv[1:]`) and runs the subcommand.

    Returns:
        The process exit status.
    """
    args = build_parser().parse_args(argv)
    quiet_tensorflow(args.debug)
    # Imported once the arguments are parsed: `--help` and a bad argument stay
    # free of TensorFlow.
    from cli import export_handlers

    return run_reporting_errors(
        lambda: export_handlers.COMMANDS[args.command](args), debug=args.debug
    )
