"""N-gram features of a token sequence: convolutions of several widths (Kim, 2014)."""

import keras
from keras import ops

from keras_transformer.layers._dropout import Dropout
from keras_transformer.layers.validation import (
    check_bool,
    check_positive_int,
    check_rate,
)


@keras.saving.register_keras_serializable(package="keras_transformer")
class NGramConvolution(keras.layers.Layer):
    """Local mixing before attention: each token sees its n-gram neighbours.

    For each width k, a ReLU convolution over k consecutive tokens ("same"
    padding, so the length is kept); the outputs of all widths are laid
    side by side and projected back to d_model, then added to the input
    and normalised (a residual sub-layer, as the encoder's):
    `LayerNorm(x + Dropout(Dense(concat_k ReLU(Conv_k(x)))))`.

    On small classification sets a phrase ("how many", "not good") decides
    the class; self-attention must learn to find such neighbours from a
    few thousand sentences, while a convolution has them by construction
    (the sentence CNN of Kim, 2014, and ConvBERT's span mixing, Jiang et
    al., 2020).  Padding positions are zeroed before each convolution, so
    a sentence's features do not depend on how far it was padded.

    With `residual=False` the concatenated ReLU features are returned as
    they are, `(B, T, filters * len(widths))`: Kim's CNN, whose features
    are max-pooled directly.  A residual sum with the embeddings would
    hand the pooling a second, unmixed copy of every token, and the
    LayerNorm would rescale each position by its own statistics; the
    residual form exists to feed encoder blocks of width d_model.

    Args:
        widths: the n-gram widths, e.g. `(3, 4, 5)` (Kim's).
        filters: output channels per width; None is d_model.
        dropout: on the projected n-gram features (residual form only).
        layer_norm_epsilon: of the residual's LayerNorm.
        residual: the residual sub-layer (True) or the bare features.

    Call arguments:
        inputs: `(B, T, d_model)`.
        mask: optional boolean `(B, T)`, True at real tokens; a Keras mask
            is picked up automatically.
        training: enables dropout.

    Returns:
        `(B, T, d_model)`, or `(B, T, filters * len(widths))` with
        `residual=False`; the mask passes through.

    Example:
    >>> layer = keras_transformer.layers.NGramConvolution((2, 3))
    >>> layer(keras.ops.zeros((2, 5, 16))).shape
    (2, 5, 16)
    """

    def __init__(self, widths=(3, 4, 5), filters=None, dropout=0.0,
                 layer_norm_epsilon=1e-6, residual=True, **kwargs):
        super().__init__(**kwargs)
        widths = tuple(widths) if isinstance(widths, (list, tuple)) else widths
        if not isinstance(widths, tuple) or not widths:
            raise ValueError(
                f"`widths` must be a non-empty tuple of positive ints; received widths={widths!r}."
            )
        for width in widths:
            check_positive_int("widths", width)
        check_positive_int("filters", filters, allow_none=True)
        check_rate("dropout", dropout)
        check_bool("residual", residual)
        self.residual = residual
        self.widths = widths
        self.filters = filters
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.supports_masking = True

    def build(self, input_shape):
        hidden_dim = int(input_shape[-1])
        filters = self.filters or hidden_dim
        self.convolutions = []
        for width in self.widths:
            convolution = keras.layers.Conv1D(
                filters, width, padding="same", activation="relu", dtype=self.dtype_policy,
                name=f"convolution_{width}",
            )
            convolution.build(input_shape)
            self.convolutions.append(convolution)
        if not self.residual:
            self.built = True
            return
        self.projection = keras.layers.Dense(
            hidden_dim, dtype=self.dtype_policy, name="projection"
        )
        self.projection.build((*input_shape[:-1], filters * len(self.widths)))
        self.output_dropout = Dropout(self.dropout, dtype=self.dtype_policy)
        self.norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="norm"
        )
        self.norm.build(input_shape)
        self.built = True

    def call(self, inputs, mask=None, training=None):
        x = inputs
        if mask is not None:
            x = x * ops.expand_dims(ops.cast(mask, x.dtype), -1)  # padding -> 0
        features = [convolution(x) for convolution in self.convolutions]
        features = features[0] if len(features) == 1 else ops.concatenate(features, axis=-1)
        if not self.residual:
            return features
        y = self.output_dropout(self.projection(features), training=training)
        return self.norm(inputs + y)

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape):
        if not self.residual:
            filters = self.filters or input_shape[-1]
            return (*input_shape[:-1], filters * len(self.widths))
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({
            "widths": list(self.widths), "filters": self.filters, "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon, "residual": self.residual,
        })  # fmt: skip
        return config
