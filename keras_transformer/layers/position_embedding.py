"""Learned position embeddings that can be resized by interpolation."""

import math

import keras
from keras import ops

from keras_transformer.layers.validation import check_positive_int


def interpolate_positions(embeddings, new_length, grid=False):
    """Resize a `(L, d)` table of position embeddings to `(new_length, d)`.

    Linear interpolation along the sequence, corners aligned: new row j is old
    position j (L - 1) / (new_length - 1), so the first and last rows are kept
    and a linear table stays exactly linear.  With `grid=True` the table is a
    square `sqrt(L) x sqrt(L)` grid of patch positions (ViT, Dosovitskiy et al.
    2021, Section 3.2) and is resized bilinearly to a `sqrt(new_length)` grid.
    """
    length, width = embeddings.shape
    if not grid:
        # Not `ops.image.resize`: its half-pixel centres move the endpoints when
        # shrinking and bend a linear table near its ends when growing.
        table = ops.cast(embeddings, "float32")
        position = ops.linspace(0.0, float(length - 1), new_length)  # (L',)
        low = ops.minimum(ops.cast(ops.floor(position), "int32"), max(length - 2, 0))
        high = ops.minimum(low + 1, length - 1)
        frac = ops.expand_dims(position - ops.cast(low, "float32"), 1)  # (L', 1)
        return (
            ops.take(table, low, axis=0) * (1.0 - frac) + ops.take(table, high, axis=0) * frac
        )  # (L', d)
    old_side, new_side = math.isqrt(length), math.isqrt(new_length)
    if old_side**2 != length or new_side**2 != new_length:
        raise ValueError(
            "With grid=True both lengths must be perfect squares; received "
            f"length={length}, new_length={new_length}."
        )
    image = ops.reshape(embeddings, (1, old_side, old_side, width))
    size = (new_side, new_side)
    resized = ops.image.resize(
        ops.cast(image, "float32"), size, interpolation="bilinear", antialias=False
    )
    return ops.reshape(resized, (new_length, width))


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionEmbedding(keras.layers.Layer):
    """A learned embedding per position (the alternative of Section 3.5).

    The paper found learned positions "nearly identical" to sinusoids (Table 3,
    row E).  Unlike sinusoids they do not extrapolate, so `resized` builds a
    copy for another length by interpolation: train at one length, serve at
    another.

    Args:
        sequence_length: the number of positions learned.
        initializer: initializer of the `(sequence_length, d)` table.

    Call arguments:
        inputs: `(B, T, d)` embeddings whose positions are looked up.
        start_index: position of the first time step (for cached decoding).

    Returns:
        `(B, T, d)` position embeddings.
    """

    def __init__(self, sequence_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.sequence_length = check_positive_int("sequence_length", sequence_length)
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, input_shape[-1]),
            initializer=self.initializer,
        )
        self.built = True

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        table = ops.convert_to_tensor(self.position_embeddings)
        positions = ops.slice(table, (start_index, 0), (shape[-2], inputs.shape[-1]))
        return ops.broadcast_to(positions, shape)  # (B, T, d)

    def compute_output_shape(self, input_shape):
        return input_shape

    def resized(self, new_sequence_length, grid=False):
        """A new built layer for `new_sequence_length` positions, interpolated."""
        new_sequence_length = check_positive_int("new_sequence_length", new_sequence_length)
        table = interpolate_positions(self.position_embeddings, new_sequence_length, grid)
        config = self.get_config()
        config["sequence_length"] = new_sequence_length
        layer = self.__class__.from_config(config)
        layer.build((None, new_sequence_length, table.shape[-1]))
        layer.position_embeddings.assign(ops.cast(table, layer.position_embeddings.dtype))
        return layer

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
