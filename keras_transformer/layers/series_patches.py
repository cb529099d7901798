"""Patches of consecutive time steps as tokens (Nie et al., 2023, PatchTST)."""

import keras
from keras import ops

from keras_transformer.layers.series_masking import step_mask
from keras_transformer.layers.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_transformer")
class SeriesPatches(keras.layers.Layer):
    """Groups every `patch_length` consecutive time steps into one token.

    A single value per token gives attention little to compare; a patch of
    p steps gives each token a short piece of shape, and T/p tokens make
    attention p² times cheaper (PatchTST, Section 3.1). The time axis is
    zero-padded at the end to a multiple of p, then each patch's p·F values
    are laid side by side, time-major: token j holds steps jp .. jp+p-1,
    each step's F features together. The layer has no weights and takes
    no mask; `token_mask` gives the patches a series of each length has.

    With a `stride` s < p the patches overlap (a patch starts every s steps,
    PatchTST's "stride"): a linear projection of them is then a strided
    convolution of kernel p, whose neighbouring tokens share p - s steps, so
    a shape that straddles a patch border is still seen whole by one token.
    The time axis is zero-padded to (n - 1)·s + p steps, n = ceil(max(T - p,
    0) / s) + 1 tokens; s = p gives exactly the non-overlapping patches.

    Args:
        patch_length: p, the time steps per patch (1 returns the input).
        stride: s, the steps from one patch's start to the next; None (the
            default) is p. s > p skips steps and is refused.

    Call arguments:
        inputs: `(B, T, F)` series; T may be unknown (variable length).

    Returns:
        `(B, n, p * F)` patches, n = ceil(T / p) without a stride, in the
        layer's compute dtype.

    Example:
    >>> layer = keras_transformer.layers.SeriesPatches(patch_length=4)
    >>> layer(keras.ops.zeros((2, 10, 3))).shape
    (2, 3, 12)

    References:
        Nie et al., 2023, "A Time Series is Worth 64 Words: Long-term
        Forecasting with Transformers" (arXiv:2211.14730).
    """

    def __init__(self, patch_length, stride=None, **kwargs):
        super().__init__(**kwargs)
        self.patch_length = check_positive_int("patch_length", patch_length)
        self.stride = check_positive_int("stride", stride, allow_none=True)
        if self.stride is not None and self.stride > self.patch_length:
            raise ValueError(
                "`stride` must not exceed `patch_length` (steps would be "
                f"skipped); received stride={stride!r}, patch_length={patch_length!r}."
            )
        self.built = True

    @property
    def step(self):
        """s: the steps between patch starts (p when no stride was given)."""
        return self.patch_length if self.stride is None else self.stride

    def call(self, inputs):
        if self.step != self.patch_length:
            return self._overlapping(inputs)
        batch, length, features = ops.shape(inputs)
        padding = (-length) % self.patch_length  # 0 .. p-1 steps to a multiple of p
        x = ops.pad(inputs, [[0, 0], [0, padding], [0, 0]])  # (B, ceil(T/p)*p, F)
        width = self.patch_length * features
        return ops.reshape(x, (batch, -1, width))  # (B, ceil(T/p), p*F)

    def _overlapping(self, inputs):
        batch, length, features = ops.shape(inputs)
        p, s = self.patch_length, self.step
        count = self.num_patches(length)  # n: patches that cover every step
        padding = (count - 1) * s + p - length  # >= 0 steps of zeros at the end
        x = ops.pad(inputs, [[0, 0], [0, padding], [0, 0]])  # (B, (n-1)s+p, F)
        starts = ops.arange(count) * s  # (n,)
        index = ops.expand_dims(starts, 1) + ops.arange(p)  # (n, p)
        x = ops.take(x, index, axis=1)  # (B, n, p, F)
        return ops.reshape(x, (batch, -1, p * features))  # (B, n, p*F)

    def num_patches(self, length):
        """n = ceil(max(T - p, 0) / s) + 1: the patches of a series of T steps.

        A Python int for an int T (a static shape, as under `jax.jit`, where
        padding by a traced amount is refused), else a tensor.
        """
        if isinstance(length, int):
            return -(-max(length - self.patch_length, 0) // self.step) + 1
        count = ops.maximum(length - self.patch_length, 0)
        return (count + self.step - 1) // self.step + 1

    def token_mask(self, lengths, patches):
        """Boolean `(B, n)`: the patches each series has alone.

        Patch j is real when j < n(L), L the series' own length
        (`keras_transformer.layers.series_masking.series_lengths`): those
        patches cover every step of it, and a patch partly past L holds
        zeros there, as at the end of a series of L steps.  The others
        hold padding only (or, with overlap, steps the real patches
        already cover), and masking them out of attention and pooling
        gives a padded series the output of the same series alone.
        A series of no step has none.

        Args:
            lengths: int `(B,)` steps of each series.
            patches: this layer's output `(B, n, p*F)` for the padded batch.
        """
        count = ops.where(lengths > 0, self.num_patches(lengths), 0)  # (B,)
        return step_mask(count, patches)

    def compute_output_shape(self, input_shape):
        batch, length, features = input_shape
        p, s = self.patch_length, self.step
        return (
            batch,
            None if length is None else -(-max(length - p, 0) // s) + 1,
            None if features is None else p * features,
        )

    def get_config(self):
        config = super().get_config()
        config.update({"patch_length": self.patch_length, "stride": self.stride})
        return config
