"""Mean pooling over the real (unmasked) positions of a sequence."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedMeanPooling(keras.layers.Layer):
    """Average `(B, T, d)` over the positions where `mask` is True.

    Unlike `keras.layers.GlobalAveragePooling1D`, a row with no real
    position (an empty sentence: all padding) pools to zeros instead of
    0/0 = NaN.  The sum runs in float32 under mixed precision.

    Call args:
        inputs: `(B, T, d)`.
        mask: optional boolean `(B, T)`; a Keras mask is picked up
            automatically.

    Returns:
        `(B, d)` in the layer's compute dtype.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        x = ops.cast(inputs, "float32")
        if mask is None:
            pooled = ops.mean(x, axis=1)
        else:
            weights = ops.expand_dims(ops.cast(mask, "float32"), -1)  # (B, T, 1)
            total = ops.sum(x * weights, axis=1)
            count = ops.maximum(ops.sum(weights, axis=1), 1.0)
            pooled = total / count
        return ops.cast(pooled, self.compute_dtype)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedMaxPooling(keras.layers.Layer):
    """Maximum of `(B, T, d)` over the positions where `mask` is True.

    Max-over-time pooling, as the sentence CNN of Kim (2014): each feature
    keeps its strongest position, so a short phrase anywhere in a sentence
    decides it.  Padding never wins, and a row with no real position pools
    to zeros.  Runs in float32 under mixed precision.

    Call args:
        inputs: `(B, T, d)`.
        mask: optional boolean `(B, T)`; a Keras mask is picked up
            automatically.

    Returns:
        `(B, d)` in the layer's compute dtype.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        x = ops.cast(inputs, "float32")
        if mask is None:
            pooled = ops.max(x, axis=1)
        else:
            real = ops.expand_dims(ops.cast(mask, "bool"), -1)  # (B, T, 1)
            pooled = ops.max(ops.where(real, x, float("-inf")), axis=1)
            pooled = ops.where(ops.any(real, axis=1), pooled, 0.0)
        return ops.cast(pooled, self.compute_dtype)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])
