"""Sinusoidal positional encoding (Vaswani et al., 2017, Section 3.5)."""

import keras
from keras import ops

from keras_transformer.layers.validation import check_positive_int


def sinusoids(length, width, start_index=0, max_wavelength=10000):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...): `(T, d)`.

    Computed in float32 whatever the compute dtype: positions past a few
    hundred lose their low-order bits in bfloat16.
    """
    positions = ops.cast(ops.arange(length) + start_index, "float32")  # (T,)
    even = ops.cast(ops.arange(0, width, 2), "float32")  # (ceil(d/2),) = 2i
    inv_freq = ops.exp(-ops.log(float(max_wavelength)) * even / float(width))
    angles = ops.expand_dims(positions, 1) * ops.expand_dims(inv_freq, 0)  # (T, d/2)
    interleaved = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)  # (T, d/2, 2)
    return ops.reshape(interleaved, (length, -1))[:, :width]  # (T, d)


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """The fixed sinusoidal encoding of Section 3.5, broadcast to the input.

    Sines at even channels and cosines at odd ones, with wavelengths from 2π to
    `max_wavelength`·2π, so that PE(pos + k) is a linear function of PE(pos).
    The layer returns the encoding only; add it to the embeddings yourself
    (`TokenAndPositionEmbedding` does). It has no weights and keeps the mask.

    Args:
        max_wavelength: the paper's 10000.

    Call arguments:
        inputs: `(B, T, d)` embeddings whose positions are encoded.
        start_index: position of the first time step (for cached decoding).

    Returns:
        `(B, T, d)` encodings in the layer's compute dtype.

    Example:
    >>> layer = keras_transformer.layers.SinusoidalPositionEncoding()
    >>> layer(keras.ops.zeros((2, 5, 8))).shape
    (2, 5, 8)
    """

    def __init__(self, max_wavelength=10000, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = check_positive_int("max_wavelength", max_wavelength)
        self.supports_masking = True
        self.built = True

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        encoding = sinusoids(shape[-2], inputs.shape[-1], start_index, self.max_wavelength)
        return ops.broadcast_to(ops.cast(encoding, self.compute_dtype), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config
