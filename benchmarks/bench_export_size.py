"""Sizes of a finished classification run and of its exports, with their test accuracy.

For a run directory of a classification preset (`trec`, `sst2`, ...):

- the run directory, `model.keras`, the epoch checkpoints and the resume
  checkpoint, in MB;
- the SavedModel (the run's task model's `export`), float32 and
  with its embedding tables in int8 (`quantize="int8"`), and the `.tflite`
  file of each weight type (its `export_tflite`: none, float16,
  int8), in MB;
- test accuracy on the run's own test split: the Keras model (as `train`
  measured it), each SavedModel reloaded and fed the raw test strings, and
  each `.tflite` file run by the LiteRT interpreter on the same tokenized
  questions, each with its label agreement with Keras.

    python3 -m training train --config trec --run-dir runs/trec
    python3 benchmarks/bench_export_size.py --run-dir runs/trec

Nothing is trained; the exports go to a temporary folder.
"""

import os
import tempfile

import common
import numpy as np

from export.tflite_verify import _model_inputs, _run
from training.config import TrainingConfig
from training.runs.run_dir import load_run
from training.serving.signatures import fill_empty_rows_numpy

MB = 1e6
QUANTIZATIONS = ("none", "float16", "int8")


def _size(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names)


def _tflite_accuracy(path, model, texts, labels, tokenizer):
    """(accuracy, agreement with Keras) of a `.tflite` on `texts`."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=path).get_signature_runner("serving_default")
    ((name, spec),) = runner.get_input_details().items()
    inputs = _model_inputs(texts, tokenizer, spec)
    probabilities = _run(runner, name, inputs, int(spec["shape"][0]))
    keras_probabilities = np.asarray(
        model.probabilities(model(fill_empty_rows_numpy(inputs), training=False)))
    answers = probabilities.argmax(-1)
    return (float((answers == labels).mean()),
            float((answers == keras_probabilities.argmax(-1)).mean()))


def _saved_model_accuracy(path, texts, labels, keras_answers):
    """(accuracy, agreement with Keras) of a reloaded SavedModel fed `texts`."""
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    answers = np.concatenate([
        serve(sentences=tf.constant(texts[i:i + 256]))["probabilities"].numpy().argmax(-1)
        for i in range(0, len(texts), 256)
    ])
    return float((answers == labels).mean()), float((answers == keras_answers).mean())


def main():
    args = common.parse_args(
        __doc__.split("\n\n")[0],
        lambda p: p.add_argument("--run-dir", required=True, help="a finished classification run"),
    )
    run = load_run(args.run_dir)
    config = TrainingConfig.from_dict(run.config)
    data = run.task.load_data(config, args.run_dir)
    texts, labels = data.test[0], np.asarray(data.test[1])
    checkpoints = os.path.join(args.run_dir, "checkpoints")
    sizes = {
        "run_dir": _size(args.run_dir),
        "model.keras": _size(os.path.join(args.run_dir, "model.keras")),
        "epoch_checkpoints": sum(_size(os.path.join(checkpoints, n))
                                 for n in os.listdir(checkpoints) if n.startswith("epoch-")),
        "resume_checkpoint": _size(os.path.join(checkpoints, "resume")),
    }
    accuracy = {"keras (metrics.json)": run.metrics.get("test_accuracy")}
    agreement = {}
    with tempfile.TemporaryDirectory() as scratch:
        keras_answers = np.asarray(run.serving.outputs(run.model, list(texts))["probabilities"]
                                   ).argmax(-1)
        for quantize in ("none", "int8"):
            name = f"saved_model_{quantize}"
            saved = run.task_model.export(os.path.join(scratch, name), quantize=quantize,
                                          config=run.config)
            sizes[name] = _size(saved)
            accuracy[name], agreement[name] = _saved_model_accuracy(
                saved, list(texts), labels, keras_answers)
        for quantize in QUANTIZATIONS:
            path = run.task_model.export_tflite(os.path.join(scratch, f"{quantize}.tflite"),
                                                quantize=quantize)
            sizes[f"tflite_{quantize}"] = _size(path)
            accuracy[f"tflite_{quantize}"], agreement[f"tflite_{quantize}"] = _tflite_accuracy(
                path, run.model, texts, labels, run.tokenizer)
    print(f"run {args.run_dir}: {len(texts)} test examples")
    for name, size in sizes.items():
        print(f"  {name:20s} {size / MB:8.1f} MB")
    for name, value in accuracy.items():
        shown = "n/a" if value is None else f"{value:.4f}"
        extra = f"  (agrees with Keras on {agreement[name]:.4f})" if name in agreement else ""
        print(f"  test accuracy {name:22s} {shown}{extra}")
    common.append_result("export_size", {
        "run_dir": os.path.basename(os.path.normpath(args.run_dir)), "task": config.task,
        "sizes_mb": {k: round(v / MB, 1) for k, v in sizes.items()},
        "test_accuracy": accuracy, "agreement_with_keras": agreement,
        "machine": common.machine_info(),
    })


if __name__ == "__main__":
    main()
