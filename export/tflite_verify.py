"""Run a `.tflite` with the LiteRT interpreter and compare it with Keras.

The reference is the Keras model in this process on the very same padded
inputs: `model.probabilities(model(ids))` for a classifier, and
`keras_transformer.decoding.greedy_search` with the `.tflite`'s own fixed
output length for a translator, so float32 tokens must be identical.
"""

import os

import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from keras_transformer.decoding import greedy_search
from training.serving.signatures import fill_empty_rows_numpy
from training.task_models import TaskModel

# Largest |TFLite - Keras| class probability accepted, by weight type. The
# float32 bound is summation-order noise; the others are loose enough for
# float16 weights (~1e-4 seen) and int8 dynamic range (~1e-3 seen).
PROBABILITY_TOLERANCE = {"none": 1e-5, "float16": 5e-3, "int8": 5e-2}
# Smallest share of translator token positions that must agree with Keras.
TOKEN_AGREEMENT = {"none": 1.0, "float16": 0.9, "int8": 0.8}


def tflite_quantization(interpreter):
    """The weight type, "int8", "float16" or "none", read from the tensor types."""
    dtypes = {np.dtype(d["dtype"]) for d in interpreter.get_tensor_details()}
    if np.dtype(np.int8) in dtypes:
        return "int8"
    return "float16" if np.dtype(np.float16) in dtypes else "none"


def _fit_length(rows, length, fill=0):
    """Pads (with `fill`) or cuts a list of 1-D/2-D arrays to `length` steps each."""
    fitted = []
    for row in rows:
        row = np.asarray(row)[:length]
        padding = [(0, length - len(row))] + [(0, 0)] * (row.ndim - 1)
        fitted.append(np.pad(row, padding, constant_values=fill))
    return np.stack(fitted)


def _model_inputs(examples, tokenizer, spec):
    """Examples -> the `.tflite` input array `(N, S)`, `(N, S, F)` or `(N, H, W, C)`:
    ids 0-padded, series NaN-padded, each cut to S.

    Images are passed as they are: padding or cutting them would change
    what they show, and the interpreter rejects a wrong size.
    """
    if len(spec["shape"]) == 4:
        return np.asarray(examples, spec["dtype"])
    length = int(spec["shape"][1])
    if len(examples) and isinstance(examples[0], (str, bytes)):
        if tokenizer is None:
            raise ValueError(
                "String examples need the tokenizer; received tokenizer=None."
            )
        rows = tokenizer.tokenize(tf.constant(list(examples), tf.string)).to_list()
        # Packed ids (`CharNGramTokenizer`): an empty row is (0, 1 + G) too.
        rows = [np.asarray(row, np.int32).reshape(-1, *spec["shape"][2:]) for row in rows]
        return _fit_length(rows, length).astype(np.int32)
    # Series are NaN-padded (keras_transformer.layers.series_masking): 0 is a value.
    return _fit_length([np.asarray(e, np.float32) for e in examples], length, np.nan)


def _run(runner, name, inputs, batch_size):
    """Feeds `inputs` in static batches (the last one filled with rows of 0, whose
    answers are dropped)."""
    outputs = []
    for start in range(0, len(inputs), batch_size):
        chunk = inputs[start : start + batch_size]
        padded = (
            _fit_length([chunk], batch_size)[0] if len(chunk) < batch_size else chunk
        )
        result = runner(**{name: padded})
        (output,) = result.values()
        outputs.append(output[: len(chunk)])
    return np.concatenate(outputs)


def verify_tflite(
    tflite_path,
    model,
    examples,
    tokenizer=None,
    tolerance=None,
    min_token_agreement=None,
):
    """Compares a `.tflite` from `export.tflite` with its Keras model.

    Args:
        tflite_path: The `.tflite` file.
        model: The model it was converted from: a task model (its
            tokenizer then read from it) or a library backbone.
        examples: Strings (tokenized with `tokenizer`, then padded or cut to
            the file's static length S), id rows / feature series, or images
            `(N, H, W, C)` of exactly the file's image size.
        tokenizer: The run's tokenizer, for string examples.
        tolerance: Largest accepted probability difference (classifier);
            `PROBABILITY_TOLERANCE[quantization]` if None.
        min_token_agreement: Smallest accepted share of equal token positions
            (translator); `TOKEN_AGREEMENT[quantization]` if None.

    Returns:
        A dict: `task`, `quantization` (read from the file), `file_bytes`,
        `num_examples`, `ok`, and for a classifier `max_abs_diff`,
        `label_agreement`, `tolerance`; for a translator `token_agreement`,
        `sequence_agreement`, `min_token_agreement`.
    """
    if isinstance(model, TaskModel):
        tokenizer = model.tokenizer if tokenizer is None else tokenizer
        model = model.backbone
    interpreter = Interpreter(model_path=os.fspath(tflite_path))
    runner = interpreter.get_signature_runner("serving_default")
    ((name, spec),) = runner.get_input_details().items()
    quantization = tflite_quantization(interpreter)
    inputs = _model_inputs(examples, tokenizer, spec)
    actual = _run(runner, name, inputs, int(spec["shape"][0]))
    report = {
        "quantization": quantization,
        "file_bytes": os.path.getsize(tflite_path),
        "num_examples": len(inputs),
    }
    if name == "encoder_token_ids":
        expected = np.asarray(greedy_search(model, inputs, max_length=actual.shape[1]))
        equal = actual == expected
        limit = (
            TOKEN_AGREEMENT[quantization]
            if min_token_agreement is None
            else min_token_agreement
        )
        report.update(
            task="translation",
            token_agreement=float(equal.mean()),
            sequence_agreement=float(equal.all(axis=1).mean()),
            min_token_agreement=float(limit),
            ok=bool(equal.mean() >= limit),
        )
    else:
        if inputs.dtype == np.int32:  # Empty rows are read as one [UNK], as served.
            inputs = fill_empty_rows_numpy(inputs)
        expected = np.asarray(model.probabilities(model(inputs, training=False)))
        difference = float(np.abs(actual - expected).max())
        limit = PROBABILITY_TOLERANCE[quantization] if tolerance is None else tolerance
        report.update(
            task="classification",
            max_abs_diff=difference,
            label_agreement=float((actual.argmax(-1) == expected.argmax(-1)).mean()),
            tolerance=float(limit),
            ok=bool(difference <= limit),
        )
    return report
