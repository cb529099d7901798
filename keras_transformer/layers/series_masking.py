"""Numeric series of unequal lengths and with missing values, in one batch.

The input contract of every numeric series stem: `features` `(B, T, F)`
float32 where NaN marks what is not known.

- Padding: a series shorter than the batch is padded at its end with steps
  whose every feature is NaN, as the file readers pad
  (`training.data.series_files`).  A series' length is 1 + its last step
  with any non-NaN value (`series_lengths`); the steps after it are padding
  and are masked (`step_mask`).
- Missing values: a NaN before that (one feature of a step, or a whole
  step) is a value the sensor did not give.  It is filled with the mean of
  its feature over the series' known values (`fill_missing`), which is 0
  after the per-series standardization (`SeriesStandardization`): the
  value that moves the series' statistics least.  Linear interpolation
  would keep the shape better but needs a scan along time that the TFLite
  builtins lack, and a missing-value indicator feature would change the
  input projection's weights of every model; on the archive's files, where
  missing values are rare, the mean is what the common imputers default to.

NaN is found as `x != x` (a TFLite builtin; `isnan` is not), so the same
graph runs on JAX, in a SavedModel and in a `.tflite`.  Infinite values are
not missing: the data pipeline refuses them.
"""

import keras
from keras import ops


def known_values(features):
    """Boolean `(B, T, F)`: True where `features` is not NaN."""
    return ops.equal(features, features)  # NaN != NaN; isnan is no TFLite builtin


def step_positions(sequence):
    """int32 `(B, T)`: 0, 1, ..., T-1 along axis 1 of `sequence` `(B, T, ...)`.

    A cumulative sum rather than `arange(T)`, so that it also builds on a
    symbolic input whose T is unknown (a functional model's `(None, None, F)`).
    """
    first = sequence[:, :, 0] if len(sequence.shape) > 2 else sequence
    return ops.cumsum(ops.ones_like(first, dtype="int32"), axis=1) - 1


def series_lengths(features):
    """int32 `(B,)`: 1 + each series' last step with a non-NaN value (0: none).

    Args:
        features: `(B, T, F)` float, padded at the end with all-NaN steps.
    """
    known = ops.cast(known_values(features), "int32")  # (B, T, F)
    step_known = ops.max(known, axis=-1)  # (B, T): 1 where any feature is known
    return ops.max(step_known * (step_positions(features) + 1), axis=-1)  # (B,)


def step_mask(lengths, sequence):
    """Boolean `(B, T)`: True at the steps of `sequence` `(B, T, ...)` before
    each series' length `lengths` `(B,)`."""
    return ops.less(step_positions(sequence), ops.expand_dims(lengths, -1))


def _feature_moments(features):
    """Float32 `(x, known, mean, variance)`: NaN replaced by 0, the mask of
    known values, and each series' mean and variance per feature over its
    known values `(B, 1, F)` (0 for a feature with none)."""
    x = ops.cast(features, "float32")
    known = known_values(x)
    weights = ops.cast(known, "float32")
    x = ops.where(known, x, 0.0)
    count = ops.maximum(ops.sum(weights, axis=1, keepdims=True), 1.0)  # (B, 1, F)
    mean = ops.sum(x, axis=1, keepdims=True) / count
    centred = (x - mean) * weights
    variance = ops.sum(centred * centred, axis=1, keepdims=True) / count
    return x, known, mean, variance


def series_statistics(mean, variance, epsilon=1e-5):
    """`(B, 1, 2F)`: each series' mean and log standard deviation per feature.

    What `SeriesStandardization` removes, from the moments it computes
    (`SeriesStandardization.standardize`): the level `mean` `(B, 1, F)` and
    the scale as `0.5 * log(variance + epsilon)`, the log of the standard
    deviation it divides by, finite for a constant feature (`variance` 0).
    """
    log_scale = 0.5 * ops.log(variance + epsilon)
    return ops.concatenate([mean, log_scale], axis=-1)


def fill_missing(features):
    """`features` with no NaN left, in float32.

    Each missing value (a NaN before the series' length) takes the mean of
    its feature over the series' known values, 0 if it has none; the
    padding steps after the length are 0.

    Args:
        features: `(B, T, F)` float, NaN-padded (module docstring).
    """
    x, known, mean, _ = _feature_moments(features)
    inside = ops.expand_dims(step_mask(series_lengths(features), x), -1)
    fill = ops.where(inside, mean, 0.0)  # (B, T, F)
    return ops.where(known, x, fill)


@keras.saving.register_keras_serializable(package="keras_transformer")
class SeriesStandardization(keras.layers.Layer):
    """Each series to mean 0 and standard deviation 1 per feature, over its known values.

    Instance normalization (as RevIN and PatchTST apply it) that reads the
    NaN-padded input of this module: the statistics of a feature are taken
    over the series' known values only, `(x - mean) / sqrt(variance +
    epsilon)`, and every missing value and padding step becomes 0 (the
    series' mean).  On a series without NaN it is
    `GroupNormalization(groups=-1, center=False, scale=False)`.  No weights.

    Args:
        epsilon: added to the variance (a constant feature stays finite).

    Call arguments:
        inputs: `(B, T, F)` float, NaN where a value is missing or padded.

    Returns:
        `(B, T, F)` without NaN, in the layer's compute dtype.

    Example:
    >>> x = keras.ops.array([[[1.0], [3.0], [float("nan")]]])
    >>> keras_transformer.layers.SeriesStandardization()(x)[0, :, 0]  # doctest: +SKIP
    [-1.0, 1.0, 0.0]
    """

    def __init__(self, epsilon=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)
        self.built = True

    def call(self, inputs):
        return self.standardize(inputs)[0]

    def standardize(self, inputs):
        """`(standardized, statistics)`: the layer's output and, from the same
        moments, each series' level and log scale `(B, 1, 2F)` per feature
        (`series_statistics`), both in the layer's compute dtype."""
        x, known, mean, variance = _feature_moments(inputs)
        scaled = (x - mean) * ops.rsqrt(variance + self.epsilon)
        statistics = series_statistics(mean, variance, self.epsilon)
        return (ops.cast(ops.where(known, scaled, 0.0), self.compute_dtype),
                ops.cast(statistics, self.compute_dtype))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon})
        return config
