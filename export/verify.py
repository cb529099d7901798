"""Check an exported SavedModel against the Keras model, outside this process.

Two independent consumers run the export: a fresh Python process that
imports only TensorFlow and tensorflow-text (`export/fresh_process.py`;
`serving_default`, and a translator's `translate_xla` too), and
TensorFlow's `saved_model_cli run` (`serving_default`), whose printed output
is parsed. Both are
compared with the outputs the Keras model computes here without the serving
module, `Serving.outputs` of the model's serving side
(`training.task_models.serving_for`: a task model's `serving()`, or a
library backbone's with its tokenizer and class names): tokenize -> cut
to `max_sequence_length` -> greedy search with max length min(S + 50,
`max_sequence_length`) -> detokenize for a translator; `model.probabilities`
for a classifier (token, numeric or image input).  The inputs are its
`probe_inputs`: in-vocabulary sentences plus `training.serving.inputs.PROBES`,
random series, or random images.
"""

import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from export import fresh_process
from export.quantize import served_model
from export.saved_model_cli import run_saved_model_cli
from export.serving_ops import read_saved_model
from export.tflite_verify import verify_tflite
from training.runs.predict import serving_for_export
from training.task_models import serving_for


def reference_outputs(model, examples, tokenizer=None, label_names=None):
    """What the export must return for `examples`, computed with Keras here.

    Its serving side's `outputs`: tokenize -> cut to `max_sequence_length` ->
    greedy search up to min(S + 50, `max_sequence_length`) tokens ->
    detokenize for a translator; `model.probabilities` for a classifier
    (token, numeric or image input); any other Keras model's own answer
    (`KerasModelServing`).

    Args:
        model: A task model (`Translator`, `TextClassifier`,
            `TimeSeriesClassifier`), a library `Transformer`, classifier
            or `VisionTransformer`, or a user's own Keras model.
        examples: Strings, series `(N, T, F)` for numeric input, or images
            `(N, H, W, C)`.
        tokenizer: A backbone's tokenizer (None for a task model, and for
            numeric and image input).
        label_names: A backbone's class names (default "0", "1", ...).

    Returns:
        `{"translations": (N,) bytes}` for translation,
        `{"probabilities": (N, K) float32, "labels": (N,) bytes}` for a
        classifier, `{"outputs", "labels"}` for another Keras model.
    """
    backbone, serving = serving_for(model, tokenizer, label_names)
    return serving.outputs(backbone, examples)


def run_in_fresh_process(
    saved_model_dir, inputs, signature="serving_default", timeout=600
):
    """Runs `signature` on `inputs` ({key: array}) in a new `python3 -I` process.

    `-I` (isolated mode) drops the current directory and PYTHONPATH from
    `sys.path`, so this project cannot be imported there even by accident.

    Args:
        saved_model_dir: The SavedModel directory.
        inputs: {signature input key: NumPy array}; strings as bytes/str.
        signature: Signature name, or a list of names run on the same
            inputs in the one process.
        timeout: Seconds before the process is killed.

    Returns:
        {output key: NumPy array}; for a list of names, {name: {output key:
        NumPy array}}.

    Raises:
        RuntimeError: If the process fails, or if it imported this project.
    """
    with tempfile.TemporaryDirectory() as scratch:
        request_path = os.path.join(scratch, "request.json")
        response_path = os.path.join(scratch, "response.json")
        request = {
            "saved_model_dir": os.path.abspath(saved_model_dir),
            "signatures": [signature] if isinstance(signature, str) else list(signature),
            "inputs": {
                key: fresh_process.encode_tensor(value) for key, value in inputs.items()
            },
        }
        with open(request_path, "w", encoding="utf-8") as f:
            json.dump(request, f)
        command = [
            sys.executable,
            "-I",
            fresh_process.__file__,
            request_path,
            response_path,
        ]
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=scratch,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"Fresh-process SavedModel run failed ({result.returncode}):\n{result.stderr[-4000:]}"
            )
        with open(response_path, encoding="utf-8") as f:
            response = json.load(f)
    if response["project_modules"]:
        raise RuntimeError(
            f"The fresh process imported this project: {response['project_modules']}."
        )
    outputs = {
        name: {key: fresh_process.decode_tensor(value) for key, value in tensors.items()}
        for name, tensors in response["outputs"].items()
    }
    return outputs[signature] if isinstance(signature, str) else outputs


def compare_outputs(actual, expected, atol=1e-5):
    """Differences between two {key: array} dicts, as a list of messages.

    Args:
        actual: {output key: array} from the export.
        expected: {output key: array} from `reference_outputs`; only these
            keys are compared.
        atol: Tolerance on numbers; strings must be equal.

    Returns:
        One message per disagreeing output; empty when they agree.
    """
    problems = []
    for key, want in expected.items():
        if key not in actual:
            problems.append(f"missing output {key!r}; got {sorted(actual)}")
            continue
        got = np.asarray(actual[key])
        if got.shape != np.shape(want):
            problems.append(f"{key}: shape {got.shape} != expected {np.shape(want)}")
        elif np.asarray(want).dtype.kind in "OSU":
            bad = [
                i
                for i, (g, w) in enumerate(zip(got.tolist(), list(want), strict=True))
                if g != w
            ]
            if bad:
                problems.append(
                    f"{key}: {len(bad)} rows differ, e.g. row {bad[0]}: {got[bad[0]]!r} != {want[bad[0]]!r}"
                )
        elif not np.allclose(got, want, atol=atol, rtol=0):
            problems.append(
                f"{key}: max |difference| {np.abs(got - want).max():.3g} > {atol}"
            )
    return problems


#: Signatures that answer as `serving_default`, compiled by XLA
#: (`training.serving.signatures.TranslatorModule.translate_xla`).
XLA_TWINS = ("translate_xla",)


def signature_names(saved_model_dir):
    """The signature names of a SavedModel, read from its `saved_model.pb`."""
    meta_graphs = read_saved_model(saved_model_dir).meta_graphs
    return {name for graph in meta_graphs for name in graph.signature_def}


def verify_saved_model(
    saved_model_dir,
    model,
    examples=None,
    tokenizer=None,
    label_names=None,
    use_saved_model_cli=True,
    atol=1e-5,
):
    """Runs `serving_default` (and `translate_xla`, where the export has it)
    outside this process and compares it with Keras.

    Args:
        saved_model_dir: A SavedModel export (`TaskModel.export`).
        model: The model it was exported from: a task model, or a library
            backbone with the `tokenizer` and `label_names` given to the
            export.
        examples: Inputs; its serving side's `probe_inputs` if None.
        tokenizer: A backbone's tokenizer (None for a task model).
        label_names: A backbone's class names (None for a task model).
        use_saved_model_cli: Also run `saved_model_cli run` and parse it.
        atol: Tolerance on probabilities (strings must match exactly).

    Returns:
        A dict: `num_examples`, `signatures` (those run), `assets` (file
        names), `fresh_process` and
        `saved_model_cli` (lists of differences, empty when they agree, or
        None when skipped) and `ok`.
    """
    backbone, serving = serving_for(model, tokenizer, label_names)
    serving = serving_for_export(serving, saved_model_dir)
    if examples is None:
        examples = serving.probe_inputs(backbone)
    inputs = serving.serving_inputs(examples)
    # `serving_default`, and its XLA twin where the export has one: both
    # answer as the Keras model does.
    signatures = ["serving_default"] + [
        name for name in XLA_TWINS if name in signature_names(saved_model_dir)
    ]
    # The two consumers are separate processes, each mostly starting
    # TensorFlow: they run side by side while Keras computes the reference.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        fresh_run = pool.submit(run_in_fresh_process, saved_model_dir, inputs, signatures)
        cli_run = (
            pool.submit(run_saved_model_cli, saved_model_dir, inputs)
            if use_saved_model_cli
            else None
        )
        # A SavedModel written with int8 tables is compared with the same copy.
        expected = serving.outputs(served_model(backbone, saved_model_dir), examples)
        fresh = [
            f"{name}: {problem}" if name != "serving_default" else problem
            for name, outputs in fresh_run.result().items()
            for problem in compare_outputs(outputs, expected, atol)
        ]
        cli = None if cli_run is None else compare_outputs(cli_run.result(), expected, atol)
    assets_dir = os.path.join(saved_model_dir, "assets")
    assets = sorted(os.listdir(assets_dir)) if os.path.isdir(assets_dir) else []
    missing = [name for name in ("config.json",) if name not in assets]
    return {
        "num_examples": len(examples),
        "signatures": signatures,
        "assets": assets,
        "fresh_process": fresh,
        "saved_model_cli": cli,
        "ok": not fresh and not cli and not missing,
    }


def verify_run_exports(run, saved_model_dir, tflite_path=None):
    """Checks a run's SavedModel (and `.tflite`) against its Keras model.

    Args:
        run: A loaded run (`training.runs.run_dir.load_run`): its
            `.task_model` (tokenizer and class names included).
        saved_model_dir: Its SavedModel export.
        tflite_path: Its `.tflite` export, or None.

    Returns:
        `{"saved_model": verify_saved_model(...), "tflite": verify_tflite(...)
        or None, "ok": both ok}`.
    """
    task_model = run.task_model
    backbone, serving = serving_for(task_model)
    examples = serving.probe_inputs(backbone)
    saved_model = verify_saved_model(saved_model_dir, task_model, examples)
    tflite = None
    if tflite_path is not None:
        tflite = verify_tflite(tflite_path, backbone, examples, tokenizer=task_model.tokenizer)
    return {
        "saved_model": saved_model,
        "tflite": tflite,
        "ok": saved_model["ok"] and (tflite is None or tflite["ok"]),
    }
