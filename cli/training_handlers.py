"""What each `python -m training` command does once its arguments are parsed.

`cli.training_commands.main` imports this module after parsing, so that
`--help` never loads TensorFlow; the commands' modules are imported here,
at the top.
"""

import json
import os
import sys

from cli.main_job import run_main_job
from export.ctranslate2 import CTranslate2Translator
from training.config import load_config
from training.data.common import check_data_files
from training.runs.predict import SavedModelPredictor, read_inputs
from training.runs.prepare import prepare_corpus
from training.runs.run_dir import load_run
from training.train import train


def run(args, started_at):
    """Runs the parsed command `args.command`; returns the exit status.

    Args:
        args: The parsed arguments of `cli.training_commands`.
        started_at: When the command started (`time.time()`), where a time
            budget counts from.
    """
    if args.command == "predict":
        return predict(args)
    if args.command == "evaluate":
        return evaluate(args)
    overrides = ([f"task={args.task}"] if args.task else []) + args.set
    config = load_config(args.config, overrides)
    if args.command == "prepare":
        check_data_files(config)  # before the output is written (train checks its own)
        return prepare(args, config)
    if args.command == "train":
        return train_run(args, config, started_at)
    return run_main_job(config, args.run_dir, overwrite=args.overwrite, verbose=args.verbose)


def evaluate(args):
    """Prints a finished run's metrics."""
    run = load_run(args.run_dir)
    print(json.dumps({k: v for k, v in run.metrics.items() if k != "history"}, indent=2))
    return 0


def prepare(args, config):
    """Tokenizes the config's training corpus into TFRecord shards."""
    manifest = prepare_corpus(config, args.output, args.shards, overwrite=args.overwrite)
    counts = ", ".join(f"{n} {key}" for key, n in manifest["counts"].items())
    print(f"Prepared {args.output}: {counts} in {len(manifest['shards'])} shards.")
    return 0


def train_run(args, config, started_at):
    """Trains (or resumes) a run and prints its metrics."""
    if not args.run_dir:
        print("error: --run-dir is required", file=sys.stderr)
        return 2
    if os.path.exists(args.run_dir) and not os.path.isdir(args.run_dir):
        raise NotADirectoryError(f"--run-dir {args.run_dir!r} is a file, not a directory.")
    metrics = train(config, args.run_dir, overwrite=args.overwrite,
                    verbose=args.verbose, started_at=started_at)
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}, indent=2,
                     ensure_ascii=False))
    return 0


def predict(args):
    """Prints one answer line per input, from a run, a SavedModel or a CTranslate2 export."""
    for flag, value in (("--beam", args.beam), ("--batch-size", args.batch_size)):
        if value < 1:
            raise ValueError(f"{flag} must be a positive integer; received {flag} {value}.")
    inputs = read_inputs(args.inputs, args.input)
    if not inputs:
        source = "standard input" if args.input in (None, "-") else f"--input {args.input!r}"
        raise ValueError(
            f"No inputs to answer: {source} holds no lines. Give the inputs as arguments, "
            "one a line of --input FILE, or on standard input."
        )
    if args.length_penalty is not None and not args.ctranslate2:
        raise ValueError(
            "--length-penalty is CTranslate2's (--ctranslate2); a run decodes with its "
            "config's length_penalty and a SavedModel with the one fixed at export."
        )
    if args.ctranslate2:
        lines = CTranslate2Translator(args.ctranslate2).translate(
            inputs, beam_size=args.beam, length_penalty=args.length_penalty or 0.0,
            batch_size=args.batch_size,
        )
    else:
        if args.saved_model:
            predictor = SavedModelPredictor(args.saved_model)
        else:
            predictor = load_run(args.run_dir)
        lines = predictor.predict(inputs, beam_size=args.beam, batch_size=args.batch_size)
    for line in lines:
        print(line)
    return 0
