"""The LayerNormalization of a sequence's positions, `(B, T, d)` over d."""

import keras

#: The channel axis of a `(B, T, d)` sequence, named positively: with
#: `axis=-1` Keras' LayerNormalization reshapes its scale and offset on
#: every call (its broadcast test compares `[-1]` with `[ndims - 1]`), two
#: ops per norm that a decoding step pays nine times over for N = 3.
SEQUENCE_CHANNELS = 2


def sequence_layer_norm(epsilon, dtype=None, name=None):
    """`keras.layers.LayerNormalization` over the channels of `(B, T, d)` inputs."""
    return keras.layers.LayerNormalization(
        axis=SEQUENCE_CHANNELS, epsilon=epsilon, dtype=dtype, name=name
    )
