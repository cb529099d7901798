"""A classifier's embedding tables in int8, for smaller SavedModels.

A text classifier's weights are mostly its embedding tables (TREC's
`trec` preset: five members' 16,385 x 128 character n-gram tables are 42
of its 56 MB).  `int8_tables` returns a copy of the model whose
`keras.layers.Embedding` tables hold int8 values with one float32 scale
per row (Keras' own `Embedding.quantize("int8")`: a row is rounded to
its largest magnitude / 127); every other weight and all arithmetic stay
float32.  The copy is deterministic, so `export.verify` rebuilds it from
the run's model and compares the SavedModel with it exactly.
"""

import keras

from keras_transformer.layers import sublayers
from keras_transformer.models import Transformer

#: What a SavedModel export's `quantize` accepts.
SAVED_MODEL_QUANTIZATIONS = ("none", "int8")


def check_saved_model_quantize(quantize, model):
    """Raises ValueError unless `quantize` applies to `model`."""
    if quantize not in SAVED_MODEL_QUANTIZATIONS:
        raise ValueError(
            f"quantize must be one of {SAVED_MODEL_QUANTIZATIONS}; received {quantize!r}."
        )
    if quantize != "none" and isinstance(model, Transformer):
        raise ValueError(
            f"quantize={quantize!r} applies to a classifier's embedding tables; a "
            "Transformer's embedding is also its output projection: export it "
            "with quantize='none', or use the .tflite file's quantization."
        )


def int8_tables(model):
    """A copy of `model` with every `keras.layers.Embedding` table in int8.

    Raises:
        ValueError: If the model has no such table (nothing would shrink).
    """
    copy = type(model).from_config(model.get_config())
    copy.set_weights(model.get_weights())
    tables = [
        layer for layer in sublayers(copy)
        if isinstance(layer, keras.layers.Embedding)
    ]
    if not tables:
        raise ValueError(
            f"quantize='int8': {type(model).__name__} has no keras.layers.Embedding "
            "table to store in int8."
        )
    for layer in tables:
        layer.quantize("int8")
    return copy
