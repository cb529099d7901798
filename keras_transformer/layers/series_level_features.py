"""Each series' level and scale, which standardization removes, as features
added to every token."""

import keras
import numpy as np
from keras import ops

from keras_transformer.layers.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_transformer")
class SeriesLevelFeatures(keras.layers.Layer):
    """Each series' per-feature mean and log standard deviation, projected.

    Per-series standardization (`SeriesStandardization`) lets a model read
    the shape of a series whatever its units, and erases its level and
    scale; where those tell the classes apart (the channels of a speaker's
    LPC coefficients), this layer gives them back: its output, one vector
    per series, is added to every token of the series (a series stem's
    `series_level_features=True`).  Its input is `series_statistics`, `(B, 1, 2F)`: the mean and the log standard
    deviation of each feature over the series' known steps, as
    `SeriesStandardization.standardize` returns them.  They are standardised
    by their mean and standard deviation over the training series (`adapt`;
    non-trainable weights, saved with the model, identity before it) and
    projected to `hidden_dim` by a dense layer.

    Args:
        hidden_dim: the output's width (d_model, the tokens' width).

    Call arguments:
        inputs: `(B, 1, 2F)` statistics.

    Returns:
        `(B, 1, hidden_dim)`.

    Example:
    >>> layer = keras_transformer.layers.SeriesLevelFeatures(8)
    >>> layer(keras.ops.zeros((2, 1, 6))).shape
    (2, 1, 8)
    """

    def __init__(self, hidden_dim, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = check_positive_int("hidden_dim", hidden_dim)
        self.projection = keras.layers.Dense(hidden_dim, dtype=self.dtype_policy,
                                             name="projection")

    def build(self, input_shape):
        width = input_shape[-1]
        if width is None:
            raise ValueError("SeriesLevelFeatures needs a known number of statistics (2F); "
                             f"received input_shape={input_shape!r}.")
        self.statistic_mean = self.add_weight(
            shape=(width,), initializer="zeros", trainable=False, name="statistic_mean")
        self.statistic_scale = self.add_weight(
            shape=(width,), initializer="ones", trainable=False, name="statistic_scale")
        self.projection.build(input_shape)
        self.built = True

    def call(self, inputs):
        x = ops.cast(inputs, self.compute_dtype)
        x = (x - ops.cast(self.statistic_mean, x.dtype)) / ops.cast(self.statistic_scale, x.dtype)
        return self.projection(x)

    def adapt(self, statistics):
        """Sets the standardization of the statistics from the training
        series' `(N, 1, 2F)` (or `(N, 2F)`): their mean, and their standard
        deviation, at least 1e-2 (a statistic constant over the set)."""
        statistics = np.asarray(statistics, np.float32)
        statistics = statistics.reshape(-1, statistics.shape[-1])
        if len(statistics) == 0 or not np.isfinite(statistics).all():
            raise ValueError("`adapt` needs finite statistics of at least one series; received "
                             f"shape {statistics.shape!r}.")
        if not self.built:
            self.build((None, 1, statistics.shape[-1]))
        self.statistic_mean.assign(statistics.mean(axis=0))
        self.statistic_scale.assign(np.maximum(statistics.std(axis=0), 1e-2))

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_dim": self.hidden_dim})
        return config
