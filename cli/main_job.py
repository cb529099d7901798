"""The README's main job: train a translator end to end, export it, serve it.

On a fresh machine it generates its own data (English number words ->
German number words, which needs reordering: "forty two" -> "zwei und
vierzig"), trains a small Transformer, reports BLEU, exports a SavedModel
whose signature takes raw strings as version 1 of a TensorFlow Serving base
path, and translates a request through it: with the `serve` extra, over
HTTP from the server of `python -m export serve` on a free loopback port
(TensorFlow Serving's REST API, the SavedModel loaded back from disk and
warmed up), else through the SavedModel loaded back in this process.  With `--config multi30k` the same job trains on
Multi30k German->English from ../shared/data; with a classification preset
(`sst2`, `timeseries`) it exports and serves the classifier the same way.
"""

import json
import os
import reprlib
import shutil
import urllib.request

import numpy as np

from export.server.config import ModelSource, ServerOptions
from export.server.main import INSTALL, missing_extra, start_server
from export.server.tensors import to_json
from training.data.readers import read_json
from training.runs.predict import SavedModelPredictor, answer_in_batches
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
    base_path = os.path.join(run_dir, "export", "saved_model")
    if os.path.isdir(base_path):
        shutil.rmtree(base_path)
    export_dir = run.task_model.export(os.path.join(base_path, "1"), config=run.config)
    print(f"\n== Exported SavedModel to {export_dir} ==")
    # A few test sources when the run printed examples, else the probes
    # that verification uses.
    request = [e["source"] for e in metrics.get("examples", [])][:3]
    if not request:
        request = list(run.serving.probe_inputs(run.model, num_examples=3))[:3]
    if missing_extra() is None:
        response, how = _serve_one_request(base_path, run.task.serving(), request)
    else:
        response = SavedModelPredictor(export_dir).predict(request)
        how = f"the reloaded SavedModel in process (serving_default; {INSTALL} serves it over HTTP)"
    print(f"== One request through {how} ==")
    shown = reprlib.Repr()
    shown.maxstring, shown.maxother = 200, 60  # sentences whole, series cut
    for example, answer in zip(request, response, strict=True):
        print(f"  {' '.join(shown.repr(example).split())} -> {answer!r}")
    return 0


def _serve_one_request(base_path, serving, request):
    """Lines for `request` from a server of `base_path` on a free loopback port,
    asked over HTTP in TensorFlow Serving's columnar format; and how."""
    options = ServerOptions((ModelSource("main", base_path),), port=0, poll_seconds=-1)
    with start_server(options) as server:
        url = f"{server.url}/v1/models/main"
        signature = serving.signature_name()
        with urllib.request.urlopen(f"{url}/metadata", timeout=60) as answer:
            signature_defs = json.load(answer)["metadata"]["signature_def"]["signature_def"]
        output_names = sorted(signature_defs[signature]["outputs"])

        def answer(batch):
            inputs = {name: to_json(value) for name, value in serving.serving_inputs(batch).items()}
            body = json.dumps({"signature_name": signature, "inputs": inputs}).encode()
            post = urllib.request.Request(f"{url}:predict", data=body,
                                          headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(post, timeout=60) as reply:
                outputs = json.load(reply)["outputs"]
            if len(output_names) == 1:
                outputs = {output_names[0]: outputs}
            return {name: _array(value) for name, value in outputs.items()}

        examples = [serving.parse_input(example) for example in request]
        lines = answer_in_batches(serving, examples, 64, answer)
    return lines, f"the server of python -m export serve, over HTTP ({url}:predict, {signature})"


def _array(value):
    """A JSON output as the signature's array: text as UTF-8 bytes."""
    array = np.asarray(value, dtype=object)
    if array.size and all(isinstance(v, str) for v in array.ravel()):
        return np.array([v.encode("utf-8") for v in array.ravel()], object).reshape(array.shape)
    return np.asarray(value)
