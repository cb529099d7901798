"""Patches of consecutive time steps as tokens (Nie et al., 2023, PatchTST)."""

import keras
from keras import ops

from keras_transformer.layers.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_transformer")
class SeriesPatches(keras.layers.Layer):
    """Groups every `patch_length` consecutive time steps into one token.

    A single value per token gives attention little to compare; a patch of
    p steps gives each token a short piece of shape, and T/p tokens make
    attention p² times cheaper (PatchTST, Section 3.1). The time axis is
    zero-padded at the end to a multiple of p, then each patch's p·F values
    are laid side by side, time-major: token j holds steps jp .. jp+p-1,
    each step's F features together. The layer has no weights; it takes no
    mask (padding is not tracked inside a patch).

    Args:
        patch_length: p, the time steps per patch (1 returns the input).

    Call arguments:
        inputs: `(B, T, F)` series; T may be unknown (variable length).

    Returns:
        `(B, ceil(T / p), p * F)` patches, in the layer's compute dtype.

    Example:
    >>> layer = keras_transformer.layers.SeriesPatches(patch_length=4)
    >>> layer(keras.ops.zeros((2, 10, 3))).shape
    (2, 3, 12)

    References:
        Nie et al., 2023, "A Time Series is Worth 64 Words: Long-term
        Forecasting with Transformers" (arXiv:2211.14730).
    """

    def __init__(self, patch_length, **kwargs):
        super().__init__(**kwargs)
        self.patch_length = check_positive_int("patch_length", patch_length)
        self.built = True

    def call(self, inputs):
        batch, length, features = ops.shape(inputs)
        padding = (-length) % self.patch_length  # 0 .. p-1 steps to a multiple of p
        x = ops.pad(inputs, [[0, 0], [0, padding], [0, 0]])  # (B, ceil(T/p)*p, F)
        width = self.patch_length * features
        return ops.reshape(x, (batch, -1, width))  # (B, ceil(T/p), p*F)

    def compute_output_shape(self, input_shape):
        batch, length, features = input_shape
        p = self.patch_length
        return (
            batch,
            None if length is None else -(-length // p),
            None if features is None else p * features,
        )

    def get_config(self):
        config = super().get_config()
        config.update({"patch_length": self.patch_length})
        return config
