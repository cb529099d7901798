"""What each `python -m export` subcommand does once its arguments are parsed.

`cli.export_commands.main` imports this module after parsing, so that
`--help` never loads TensorFlow; the exporters are imported here, at the top.
"""

import json

from cli.serve_command import server_options
from export.ctranslate2 import (
    CTranslate2Translator,
    export_ctranslate2,
    import_ctranslate2,
    verify_ctranslate2,
)
from export.server.main import check_extra
from export.server.main import serve as run_server
from export.verify import verify_run_exports
from training.runs.predict import check_saved_model
from training.runs.run_dir import load_run


def saved_model(args):
    """Writes the run's SavedModel and prints its path."""
    run = load_run(args.run_dir)  # the task model's own export, the run's config recorded
    path = run.task_model.export(args.output, overwrite=args.overwrite,
                                 quantize=args.quantize, config=run.config)
    print(path)
    return 0


def tflite(args):
    """Writes the run's `.tflite` file and prints its path."""
    for flag, value in (("--sequence-length", args.sequence_length),
                        ("--batch-size", args.batch_size)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be a positive integer; received {flag} {value}.")
    run = load_run(args.run_dir)
    path = run.task_model.export_tflite(
        args.output, quantize=args.quantize, overwrite=args.overwrite,
        sequence_length=args.sequence_length, batch_size=args.batch_size,
    )  # fmt: skip
    print(path)
    return 0


def verify(args):
    """Prints the verification report as JSON; 1 when an export disagrees."""
    check_saved_model(args.saved_model)  # a file cut short, named before other processes read it
    report = verify_run_exports(load_run(args.run_dir), args.saved_model, args.tflite)
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0 if report["ok"] else 1


def ctranslate2(args):
    """Writes the CTranslate2 model, prints its path and its agreement with Keras."""
    import_ctranslate2()  # a missing extra is told before the run loads
    run = load_run(args.run_dir)
    path = export_ctranslate2(run.task_model, args.output, quantization=args.quantization,
                              overwrite=args.overwrite)
    print(path)
    report = verify_ctranslate2(run.task_model, path, translator=CTranslate2Translator(path))
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


def serve(args):
    """Serves the exports until SIGTERM (exit 0) or Ctrl-C (130)."""
    check_extra()  # a missing extra is told before anything loads
    return run_server(server_options(args))


#: The function of each subcommand.
COMMANDS = {
    "saved-model": saved_model,
    "tflite": tflite,
    "verify": verify,
    "ctranslate2": ctranslate2,
    "serve": serve,
}
