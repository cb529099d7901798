"""The README's main job: train a translator end to end, export it, serve it.

On a fresh machine it generates its own data (English number words ->
German number words, which needs reordering: "forty two" -> "zwei und
vierzig"), trains a small Transformer, reports BLEU, exports a SavedModel
whose signature takes raw strings, loads it back from disk and translates a
request through it.  With `--config multi30k` the same job trains on
Multi30k German->English from ../shared/data; with a classification preset
(`sst2`, `timeseries`) it exports and serves the classifier the same way.
"""

import json
import os
import reprlib
import shutil

from export.saved_model import export_saved_model
from training.data.readers import read_json
from training.runs.predict import SavedModelPredictor
from training.runs.run_dir import load_run
from training.train import train


def _print_metrics(metrics):
    shown = {k: v for k, v in metrics.items() if k not in ("history", "examples")}
    print(json.dumps(shown, indent=2))
    for example in metrics.get("examples", []):
        print(f"  source:      {example['source']}")
        print(f"  reference:   {example['reference']}")
        print(f"  translation: {example['translation']}\n")


def run_main_job(config, run_dir, overwrite=False, verbose="auto"):
    metrics_path = os.path.join(run_dir, "metrics.json")
    if os.path.isfile(metrics_path) and not overwrite:
        print(f"{run_dir} already holds a finished run; reusing it (--overwrite to retrain).")
        metrics = read_json(metrics_path)
    else:
        metrics = train(config, run_dir, overwrite=overwrite, verbose=verbose)
    print("\n== Evaluation ==")
    _print_metrics(metrics)

    run = load_run(run_dir)
    export_dir = os.path.join(run_dir, "export", "saved_model")
    if os.path.isdir(export_dir):
        shutil.rmtree(export_dir)
    export_saved_model(run.model, run.config, export_dir, run.task)
    print(f"\n== Exported SavedModel to {export_dir} ==")
    # A few test sources when the run printed examples, else the probes
    # that verification uses.
    request = [e["source"] for e in metrics.get("examples", [])][:3]
    if not request:
        request = list(run.serving.probe_inputs(run.model, num_examples=3))[:3]
    response = SavedModelPredictor(export_dir).predict(request)
    print("== One request through the reloaded SavedModel (serving_default) ==")
    shown = reprlib.Repr()
    shown.maxstring, shown.maxother = 200, 60  # sentences whole, series cut
    for example, answer in zip(request, response, strict=True):
        print(f"  {' '.join(shown.repr(example).split())} -> {answer!r}")
    return 0
