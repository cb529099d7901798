"""Command line of the training pipeline.

    python -m training main                      # the README main job
    python -m training train --config toy --run-dir runs/toy --set epochs=3
    python -m training train --config multi30k --run-dir runs/de-en
    python -m training train --config sst2 --run-dir runs/sst2 --set model=transformer --set model.num_layers=4
    python -m training evaluate --run-dir runs/toy
    python -m training predict --run-dir runs/toy "he bought forty two books" [--beam 4]
    python -m training predict --saved-model exported/translator/1 --input sentences.txt
    python -m training predict --ctranslate2 exported/translator-ct2 "two dogs" [--beam 4]
    python -m training presets
    python -m training prepare --config translation --set train_files=... --output prepared/wmt
    python -m training train --help              # every config field, documented
    python -m training train --config trec --help  # the common fields and trec's task's

A bad config value, data file or model size prints `error: <message>` and
exits with 2; `--debug` shows the traceback instead, and TensorFlow's start-up
lines, which the commands otherwise hide (`cli.quiet`).

This module parses the arguments; what each command runs is in
`cli.training_handlers`, imported only once the arguments are parsed.
"""

import argparse
import sys
import time

from cli.config_help import help_task, presets_help, task_fields_help
from cli.errors import add_debug_flag, run_reporting_errors
from cli.quiet import quiet_tensorflow

# A time budget counts from the command's start, imports included.
STARTED_AT = time.time()


def _verbosity(value):
    if value == "auto":
        return value
    if value in ("0", "1", "2"):
        return int(value)
    raise argparse.ArgumentTypeError(f"must be auto, 0, 1 or 2; received {value!r}")


def _parser(task=None):
    """The parser; `task`: whose fields `train --help` lists (None: every task's)."""
    parser = argparse.ArgumentParser(
        prog="python -m training",
        description="Train, resume and evaluate keras-transformer runs.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def add_run_args(p, default_config, default_run_dir):
        p.add_argument("--config", default=default_config,
                       help="preset name (see `presets`) or path to a JSON config")
        p.add_argument("--run-dir", default=default_run_dir, help="run directory")
        p.add_argument("--task", help="the config's task (as --set task=TASK); with "
                                      "--help, list that task's fields")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config field (JSON value); model.FIELD "
                            "overrides a model field; repeatable")
        p.add_argument("--overwrite", action="store_true",
                       help="replace an existing run directory")
        p.add_argument("--verbose", type=_verbosity, default="auto",
                       help="auto (default): a progress bar in a terminal, one line per "
                            "epoch in a file or pipe, each with the step time and the "
                            "run's time left; 0, 1 or 2: Keras' own fit output")

    # The config fields, read from the dataclasses' source, close `--help`.
    documented = dict(epilog=task_fields_help(task),
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    train = sub.add_parser("train", help="train (or resume) a run", **documented)
    add_run_args(train, "toy", None)
    main = sub.add_parser(
        "main", help="the main job: generate data, train, evaluate, export, serve one request",
        **documented,
    )  # fmt: skip
    add_run_args(main, "toy", "runs/main")
    evaluate = sub.add_parser("evaluate", help="print a finished run's metrics")
    evaluate.add_argument("--run-dir", required=True)
    presets = sub.add_parser("presets", help="list the config presets, one line each")
    prepare = sub.add_parser(
        "prepare", help="tokenize a dataset=files training corpus once, into TFRecord shards",
        description="Learns the vocabulary as `train` would with the same config, and writes "
        "the training files tokenized into --output (shards, vocab/, prepared.json). A run "
        "reads them with --set prepared_dir=OUTPUT.",
    )  # fmt: skip
    prepare.add_argument("--config", default="toy",
                         help="preset name (see `presets`) or path to a JSON config")
    prepare.add_argument("--task", help="the config's task (as --set task=TASK)")
    prepare.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config field (JSON value); repeatable")
    prepare.add_argument("--output", required=True, help="the folder to write")
    prepare.add_argument("--shards", type=int, default=8, help="TFRecord files (default 8)")
    prepare.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    predict = sub.add_parser(
        "predict", help="answer raw inputs with a finished run, an exported SavedModel or a "
        "CTranslate2 export",
        description="One output line per input: a translation, or label<TAB>probability. "
        "Inputs: the arguments, else the lines of --input, else standard input; a series "
        "is a line of numbers (commas or spaces; ';' between steps of several features).",
    )  # fmt: skip
    source = predict.add_mutually_exclusive_group(required=True)
    source.add_argument("--run-dir", help="a finished run directory")
    source.add_argument("--saved-model", help="a SavedModel of `python -m export saved-model`")
    source.add_argument("--ctranslate2", metavar="DIR",
                        help="a translator of `python -m export ctranslate2` (needs the "
                             "ctranslate2 extra)")
    predict.add_argument("inputs", nargs="*", help="sentences or series, one per argument")
    predict.add_argument("--input", help="file of inputs, one a line ('-': standard input)")
    predict.add_argument("--beam", type=int, default=1,
                         help="beams of a translator (default 1: greedy; a SavedModel has 4)")
    predict.add_argument("--length-penalty", type=float, default=None,
                         help="with --ctranslate2 and --beam: CTranslate2's alpha, a hypothesis "
                              "scoring log P / length^alpha (default 0: log P alone)")
    predict.add_argument("--batch-size", type=int, default=64, help="inputs per model call")
    add_debug_flag(parser, (train, main, evaluate, presets, predict, prepare))
    return parser


def main(argv=None):
    """Parses `argv` (default `sys.argv[1:]`) and runs the command; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser(help_task(argv)).parse_args(argv)
    if args.command == "presets":
        return run_reporting_errors(_presets, debug=args.debug)
    quiet_tensorflow(args.debug)
    # Imported once the arguments are parsed: `--help`, `presets` and a bad
    # argument stay free of TensorFlow.
    from cli import training_handlers

    return run_reporting_errors(
        lambda: training_handlers.run(args, started_at=STARTED_AT), debug=args.debug
    )


def _presets():
    print(presets_help())
    return 0
