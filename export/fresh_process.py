"""Run one SavedModel signature in a process that imports only TensorFlow.

This file is executed as a script (`python3 -I fresh_process.py REQUEST
RESPONSE`) by `export.verify`; it imports TensorFlow, tensorflow-text (whose
import registers the tokenizer ops the graph needs) and NumPy, and nothing of
this project, so it proves that the SavedModel is self-contained: what a
server loads is exactly what was exported.

REQUEST and RESPONSE are JSON files of the form
`{"saved_model_dir": ..., "signatures": [name, ...], "inputs": {key: TENSOR}}`
and `{"outputs": {name: {key: TENSOR}}, "project_modules": [...]}`: every
signature named runs on the same inputs, in one process.  A TENSOR is
`{"dtype": ..., "shape": [...], "values": [...]}` with string values base64
encoded (so that any bytes, invalid UTF-8 included, survive JSON).
"""

import base64
import json
import sys

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  Registers FastBertTokenizer & co.

PROJECT_PACKAGES = ("keras_transformer", "training", "export", "cli")


def encode_tensor(array):
    """NumPy array (bytes/str objects or numbers) -> JSON-able TENSOR dict."""
    array = np.asarray(array)
    flat = array.reshape(-1).tolist()
    if array.dtype.kind in "OSU":
        values = [
            base64.b64encode(
                v if isinstance(v, bytes) else str(v).encode("utf-8")
            ).decode("ascii")
            for v in flat
        ]
        return {"dtype": "string", "shape": list(array.shape), "values": values}
    return {"dtype": array.dtype.name, "shape": list(array.shape), "values": flat}


def decode_tensor(tensor):
    """TENSOR dict -> NumPy array (strings become an object array of bytes)."""
    if tensor["dtype"] == "string":
        values = [base64.b64decode(v) for v in tensor["values"]]
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array.reshape(tensor["shape"])
    return np.asarray(tensor["values"], dtype=tensor["dtype"]).reshape(tensor["shape"])


def main(request_path, response_path):
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    loaded = tf.saved_model.load(request["saved_model_dir"])
    inputs = {
        key: tf.constant(decode_tensor(value))
        for key, value in request["inputs"].items()
    }
    outputs = {}
    for name in request["signatures"]:
        function = loaded.signatures[name]
        outputs[name] = {
            key: encode_tensor(value.numpy()) for key, value in function(**inputs).items()
        }
    project_modules = sorted(
        name for name in sys.modules if name.split(".")[0] in PROJECT_PACKAGES
    )
    with open(response_path, "w", encoding="utf-8") as f:
        json.dump({"outputs": outputs, "project_modules": project_modules}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
