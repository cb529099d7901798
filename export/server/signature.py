"""One signature of a loaded SavedModel, as the server calls it.

`ServedSignature` reads the signature's inputs (name, dtype, shape) once,
so that a request is checked against them before it is queued
(`export.server.predict_request`), runs a batch (numpy arrays in, numpy
arrays out: the one place a request's arrays meet TensorFlow, always in a
worker thread), splits a batch's outputs back into each request's rows,
and builds the batches that warm it up before its version is served.
"""

import numpy as np
import tensorflow as tf

from export.server.batch_keys import batch_sizes, is_xla
from export.server.tensors import InputSpec
from keras_transformer.models.transformer_config import UNK_ID


def _dtype_name(dtype):
    return "string" if dtype == tf.string else dtype.name


def input_specs(function):
    """{name: `InputSpec`} of a loaded signature's inputs, sorted by name."""
    _, keywords = function.structured_input_signature
    return {name: InputSpec(name, _dtype_name(spec.dtype), tuple(spec.shape.as_list()))
            for name, spec in sorted(keywords.items())}


class ServedSignature:
    """A signature of a served version: its inputs, its calls and its warm-up.

    Args:
        name: The signature's name (`serving_default`, `translate_xla`, ...).
        function: The loaded concrete function (`loaded.signatures[name]`).
        keys: The export's `BatchKeys`.
    """

    def __init__(self, name, function, keys):
        self.name = name
        self.function = function
        self.keys = keys
        self.inputs = input_specs(function)
        self.outputs = tuple(sorted(function.structured_outputs))

    def batch_key(self, inputs, counts=None):
        """What requests batched with this one must share (`BatchKeys.key`)."""
        return self.keys.key(self.name, inputs, counts)

    def __call__(self, inputs):
        """{name: numpy array} -> {output: numpy array}, one call of the signature."""
        feeds = {name: tf.constant(array) for name, array in inputs.items()}
        outputs = self.function(**feeds)
        return {name: outputs[name].numpy() for name in self.outputs}

    def run_batch(self, requests):
        """Runs the requests (each {name: array}) as one call; a list of their outputs.

        Every output's first axis is the batch's, so request i gets the rows
        it sent, in its order.
        """
        if len(requests) == 1:
            return [self(requests[0])]
        names = list(requests[0])
        batch = {name: np.concatenate([r[name] for r in requests], axis=0) for name in names}
        outputs = self(batch)
        bounds = np.cumsum([0] + [len(r[names[0]]) for r in requests])
        return [{name: value[start:end] for name, value in outputs.items()}
                for start, end in zip(bounds[:-1], bounds[1:], strict=True)]

    def warmup_batches(self, sentence_of, max_batch_size, all_buckets):
        """The requests that warm this signature up: one row of each input,
        and with `all_buckets` (an XLA signature of sentences) every bucket
        of rows up to `max_batch_size` and of source length.

        Args:
            sentence_of: `sentence_of(n)`: a sentence of n word pieces.
            max_batch_size: The most rows a batch holds.
            all_buckets: Compile every bucket of an XLA signature.
        """
        first = {name: _example(spec, sentence_of) for name, spec in self.inputs.items()}
        batches = [first]
        strings = [spec for spec in self.inputs.values() if spec.kind == "string"]
        if all_buckets and is_xla(self.name) and len(strings) == 1:
            for width in self.keys.warmup_widths():
                sentence = sentence_of(width)
                for rows in batch_sizes(max_batch_size):
                    batches.append({strings[0].name: np.array([sentence] * rows, object)})
        return batches


def _example(spec, sentence_of):
    """One row for input `spec`: a short sentence, [UNK] ids, zeros."""
    if spec.kind == "string":
        shape = (1,) + tuple(1 for _ in spec.shape[1:])
        return np.full(shape, sentence_of(1), dtype=object)
    shape = (1,) + tuple(8 if size is None else size for size in spec.shape[1:])
    if spec.kind == "int":
        return np.full(shape, UNK_ID, dtype=spec.dtype)
    return np.zeros(shape, dtype=spec.dtype)
