"""Token embeddings plus positions, reusable as the tied output projection."""

import math

import keras
from keras import ops

from keras_transformer.layers._shapes import reshape_dims
from keras_transformer.layers.position_embedding import PositionEmbedding
from keras_transformer.layers.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)
from keras_transformer.layers.validation import check_choice, check_positive_int

POSITIONS = ("sinusoidal", "learned")


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """E[x] · sqrt(d_model) + PE, and x E^T as the pre-softmax projection.

    Section 3.4: the two embedding layers and the pre-softmax linear
    transformation share one weight matrix, and the embeddings are multiplied
    by sqrt(d_model).  One instance of this layer can therefore serve the
    encoder input, the decoder input and (with `reverse=True`) the output
    logits.  The table is initialised with standard deviation d_model^-0.5 so
    that the scaled embeddings have unit variance, like the positions.

    Masking: token id 0 is padding; the output carries the mask
    `token_ids != 0`.  The reversed call returns logits with no mask, so Keras
    never rescales a loss by it.

    Args:
        vocabulary_size: number of token ids.
        hidden_dim: d_model.
        max_sequence_length: positions available (learned positions only;
            sinusoids have no limit).
        positions: `"sinusoidal"` (the paper) or `"learned"` (Table 3, row E).
        scale_embeddings: multiply the token embeddings by sqrt(d_model).
        mask_zero: treat id 0 as padding.
        embeddings_initializer: initializer of the token table.

    Call arguments:
        inputs: `(B, T)` integer ids, or with `reverse=True` `(B, T, d)` hidden
            states.
        start_index: position of the first token (for cached decoding).
        reverse: project hidden states onto the vocabulary instead.

    Returns:
        `(B, T, d)` embeddings, or `(B, T, vocabulary_size)` logits.

    Example:
    >>> embed = keras_transformer.layers.TokenAndPositionEmbedding(100, 16, 32)
    >>> x = embed(keras.ops.array([[5, 6, 0]]))
    >>> embed(x, reverse=True).shape
    (1, 3, 100)
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim,
        max_sequence_length=512,
        positions="sinusoidal",
        scale_embeddings=True,
        mask_zero=True,
        embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = check_positive_int("vocabulary_size", vocabulary_size)
        self.hidden_dim = check_positive_int("hidden_dim", hidden_dim)
        self.max_sequence_length = check_positive_int("max_sequence_length", max_sequence_length)
        self.positions = check_choice("positions", positions, POSITIONS)
        self.scale_embeddings = scale_embeddings
        self.mask_zero = mask_zero
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer
            or keras.initializers.RandomNormal(stddev=hidden_dim**-0.5)
        )
        self.supports_masking = True
        if positions == "sinusoidal":
            self.position_encoding = SinusoidalPositionEncoding(
                dtype=self.dtype_policy, name="position_encoding"
            )
        else:
            self.position_encoding = PositionEmbedding(
                max_sequence_length, dtype=self.dtype_policy, name="position_embedding"
            )

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocabulary_size, self.hidden_dim),
            initializer=self.embeddings_initializer,
        )
        self.position_encoding.build((None, None, self.hidden_dim))
        self.built = True

    def call(self, inputs, start_index=0, reverse=False):
        if reverse:
            rows = ops.reshape(inputs, (-1, inputs.shape[-1]))  # (B*T, d)
            # x E^T: TensorFlow folds the transpose into the matmul (and XLA
            # into its dot), so the table is read as it is stored; its
            # gradient is two matmuls (an einsum over broadcast rows
            # materialised (rows, V, d)).
            logits = ops.matmul(rows, ops.transpose(self.embeddings))  # (B*T, V)
            return ops.reshape(
                logits, (*reshape_dims(inputs, len(inputs.shape) - 1), self.vocabulary_size)
            )  # (B, T, V)
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        if "int" not in dtype:
            raise ValueError(
                f"`token_ids` must be an integer tensor; received dtype={dtype}."
            )
        if len(inputs.shape) != 2:
            raise ValueError(
                f"`token_ids` must have rank 2 (batch, length); received shape={inputs.shape}."
            )
        x = ops.take(self.embeddings, inputs, axis=0)  # (B, T, d)
        if self.scale_embeddings:
            x = x * ops.cast(math.sqrt(self.hidden_dim), x.dtype)
        return x + self.position_encoding(x, start_index=start_index)

    def compute_mask(self, inputs, mask=None, reverse=False, **kwargs):
        # Keras calls `compute_mask(inputs, previous_mask)` without the call's
        # keyword arguments, so `reverse` is always False here; recognise the
        # reversed call by its float hidden states instead, or the logits
        # would carry a `(B, T, d)` mask `hidden != 0` (PEERS pain point 6).
        is_token_ids = "int" in keras.backend.standardize_dtype(inputs.dtype)
        if reverse or not self.mask_zero or not is_token_ids:
            return None
        return ops.not_equal(inputs, 0)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "hidden_dim": self.hidden_dim,
                "max_sequence_length": self.max_sequence_length,
                "positions": self.positions,
                "scale_embeddings": self.scale_embeddings,
                "mask_zero": self.mask_zero,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config
