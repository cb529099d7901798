"""The classifiers' input stems for numeric series: tokens of steps, patches
or random-kernel windows, projected to d_model, with their positions."""

import keras
import numpy as np

from keras_transformer.layers.position_embedding import PositionEmbedding
from keras_transformer.layers.random_kernel_stem import RandomKernelStem
from keras_transformer.layers.series_level_features import SeriesLevelFeatures
from keras_transformer.layers.series_masking import (
    SeriesStandardization,
    fill_missing,
    series_lengths,
    step_mask,
)
from keras_transformer.layers.series_patches import SeriesPatches
from keras_transformer.layers.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)
from keras_transformer.layers.token_and_position_embedding import POSITIONS
from keras_transformer.layers.validation import (
    check_bool,
    check_choice,
    check_positive_int,
)

#: A batch of `SeriesStem.stem_features`: 256 series of 512 steps of a
#: random-kernel stem's 2016 features, in float32.
FEATURE_BATCH_BYTES = 256 * 512 * 2016 * 4


def has_stem_features(inputs):
    """Whether `inputs` are series with their stem's fixed features computed:
    `{"features": x, "stem_features": ...}` (`SeriesStem.fixed_features`)."""
    return isinstance(inputs, dict) and "stem_features" in inputs


def _series(inputs):
    """The series `(B, T, F)` of `inputs` (or their shape), also where they come
    with their fixed features (`has_stem_features`)."""
    return inputs["features"] if has_stem_features(inputs) else inputs


class SeriesStem(keras.layers.Layer):
    """What the numeric stems share: series in, tokens of d_model and their mask out.

    `features` `(B, T, F)` float32 (e.g. a UCR time series, F=1): series of
    unequal lengths share a batch padded at the end with all-NaN steps, and
    a NaN inside a series is a missing value
    (`keras_transformer.layers.series_masking`).  Each series is

    1. standardized per feature over its known steps with
       `standardize_series` (instance normalization, as RevIN and PatchTST
       do: the model sees shape and not level or scale, whatever units the
       file is in), else its missing values take their feature's mean;
    2. cut into tokens (`tokens`: one per step here, patches in
       `PatchStem`, random-kernel windows in `RandomKernelSeriesStem`), the
       tokens of padding masked out;
    3. projected to `hidden_dim` by a dense layer (`feature_projection`)
       and summed with positions;
    4. with `series_level_features`, given back what standardization
       removes: each series' mean and log standard deviation per feature,
       projected (`SeriesLevelFeatures`), added to every token (set their
       standardization with `adapt` before training).

    Args:
        num_features: F, the features per step.
        hidden_dim: d_model, the tokens' width.
        max_sequence_length: longest input in tokens (learned positions only).
        positions: `"sinusoidal"` or `"learned"`.
        standardize_series: per-series, per-feature standardization first.
        series_level_features: the series' level and scale added to every
            token (needs `standardize_series`).

    Call arguments:
        inputs: `features` `(B, T, F)`, NaN-padded; or `{"features": x,
            "stem_features": fixed}`, the series with their
            `fixed_features` already computed (`stem_features`): the
            tokens come from `fixed`, the same as from `x`.

    Returns:
        `(tokens, mask)`: `(B, T', hidden_dim)` and boolean `(B, T')`, True
        at the tokens of each series' own steps.
    """

    #: The name of the model input this stem reads.
    input_name = "features"
    #: Token vocabulary: None, the input is numeric.
    vocabulary_size = None
    #: No character n-grams: numeric input.
    char_ngram_buckets = 0
    char_ngrams_per_word = 32

    def __init__(self, num_features, hidden_dim, max_sequence_length=128,
                 positions="sinusoidal", standardize_series=False,
                 series_level_features=False, **kwargs):
        kwargs.setdefault("name", "stem")  # one per model; its weights' paths begin with it
        super().__init__(**kwargs)
        self.num_features = check_positive_int("num_features", num_features)
        self.hidden_dim = check_positive_int("hidden_dim", hidden_dim)
        self.max_sequence_length = check_positive_int("max_sequence_length",
                                                      max_sequence_length)
        self.positions = check_choice("positions", positions, POSITIONS)
        self.standardize_series = check_bool("standardize_series", standardize_series)
        self.series_level_features = check_bool("series_level_features",
                                                series_level_features)
        if series_level_features and not standardize_series:
            raise ValueError(
                "`series_level_features` gives back the level and scale that "
                "`standardize_series` removes: it needs standardize_series=True; received "
                f"series_level_features={series_level_features!r}, standardize_series="
                f"{standardize_series!r}."
            )
        dtype = self.dtype_policy
        self.series_norm = (
            SeriesStandardization(epsilon=1e-5, dtype=dtype, name="series_standardization")
            if standardize_series else None
        )
        self.feature_projection = keras.layers.Dense(hidden_dim, dtype=dtype,
                                                     name="feature_projection")
        self.position_encoding = (
            SinusoidalPositionEncoding(dtype=dtype, name="position_encoding")
            if positions == "sinusoidal"
            else PositionEmbedding(max_sequence_length, dtype=dtype, name="position_embedding")
        )
        self.level_features = (
            SeriesLevelFeatures(hidden_dim, dtype=dtype, name="series_level_features")
            if series_level_features else None
        )

    @property
    def input_dtype(self):
        # The values stay float32 here (NaN marks padding, and the series'
        # statistics are taken in float32); each sub-layer casts them.
        return "float32"

    def symbolic_input(self):
        """The functional model's `features` input this stem reads."""
        return keras.Input((None, self.num_features), dtype="float32", name="features")

    def token_width(self, num_features):
        """The features of one token, before the projection: F (a step)."""
        return num_features

    def tokens(self, x, lengths):
        """Standardized or filled series `(B, T, F)` -> `(tokens (B, T', w), mask (B, T'))`:
        one token a step here."""
        return x, step_mask(lengths, x)

    def token_count(self, length):
        """T', the tokens of a series of `length` steps (None: unknown)."""
        return length

    def compute_output_spec(self, inputs):
        batch, length, _ = _series(inputs).shape
        count = self.token_count(length)
        return (keras.KerasTensor((batch, count, self.hidden_dim), dtype=self.compute_dtype),
                keras.KerasTensor((batch, count), dtype="bool"))

    def build(self, input_shape):
        input_shape = _series(input_shape)
        width = self.token_width(input_shape[-1])
        self.feature_projection.build((None, None, width))
        self.position_encoding.build((None, None, self.hidden_dim))
        if self.level_features is not None and not self.level_features.built:  # or adapted
            self.level_features.build((None, 1, 2 * input_shape[-1]))
        self.built = True

    def standardized(self, features):
        """`(x, statistics)`: the series standardized (or only filled) `(B, T, F)`,
        and with `series_level_features` their level and scale `(B, 1, 2F)`."""
        if self.level_features is not None:
            # (B, T, F) and (B, 1, 2F): the series' mean and log std, from the same moments
            return self.series_norm.standardize(features)
        if self.series_norm is not None:
            return self.series_norm(features), None  # mean 0, std 1 over T, NaN -> 0
        return fill_missing(features), None  # missing -> the feature's mean, padding -> 0

    def fixed_features(self, inputs):
        """The part of the stem without trainable weights, `features` `(B, T, F)` ->
        `{"tokens": (B, T', w), "mask": (B, T')}`, and with
        `series_level_features` `"statistics"` `(B, 1, 2F)`.

        It depends only on the series and the stem's fixed (adapted)
        weights, so a training loop can compute it once per series and
        feed it back: `call({"features": x, "stem_features": fixed})` is
        `call(x)` without recomputing it (`stem_features`).
        """
        lengths = series_lengths(inputs)  # (B,): padding is all-NaN steps at the end
        x, statistics = self.standardized(inputs)
        tokens, mask = self.tokens(x, lengths)
        fixed = {"tokens": tokens, "mask": mask}
        if statistics is not None:
            fixed["statistics"] = statistics
        return fixed

    def embed(self, fixed):
        """`fixed_features` -> `(tokens (B, T', d), mask (B, T'))`: the trainable part."""
        x = self.feature_projection(fixed["tokens"])  # (B, T', d): T' tokens
        x = x + self.position_encoding(x)
        if self.level_features is not None:
            # (B, 1, d): the series' level and scale, the same for every token
            x = x + self.level_features(fixed["statistics"])
        return x, fixed["mask"]

    def call(self, inputs):
        if has_stem_features(inputs):
            return self.embed(inputs["stem_features"])
        return self.embed(self.fixed_features(inputs))

    def stem_features(self, series, batch_size=None):
        """`fixed_features` of `series` `(N, T, F)` (NaN-padded), `batch_size`
        series at a time: what a training loop computes once.  The arrays
        are the backend's tensors, not NumPy copies: `tf.data` takes a
        TensorFlow tensor as it is, where it copies a NumPy array (1.2 s for
        the 330 MB of a thousand short series' tokens for five members).

        `batch_size` None: at least 256, and as many more as keep a batch's
        tokens before any reduction (T of `token_width` each a series,
        `FEATURE_BATCH_BYTES` in all) as large as 256 series of 512 steps
        would make them: short series go in a few large batches, whose
        eager ops cost less than many small ones.
        """
        series = np.asarray(series, np.float32)
        if batch_size is None:
            steps, width = series.shape[1], self.token_width(series.shape[2])
            batch_size = max(256, FEATURE_BATCH_BYTES // max(1, 4 * steps * width))
        parts = [self.fixed_features(series[i:i + batch_size])
                 for i in range(0, len(series), batch_size)]
        if len(parts) == 1:
            return parts[0]
        return {k: keras.ops.concatenate([p[k] for p in parts]) for k in parts[0]}

    def adapt_level_features(self, series, batch_size=256):
        """Sets the `SeriesLevelFeatures`' standardization from the statistics
        of training series `(N, T, F)` (NaN-padded)."""
        if self.level_features is None:
            raise ValueError("`adapt_level_features` needs a stem built with "
                             "`series_level_features=True`.")
        series = keras.ops.convert_to_tensor(series, "float32")
        statistics = [
            keras.ops.convert_to_numpy(self.series_norm.standardize(series[i:i + batch_size])[1])
            for i in range(0, int(series.shape[0]), batch_size)
        ]
        self.level_features.adapt(np.concatenate(statistics))

    def adapt(self, series):
        """Sets what the stem takes from training series `(N, T, F)` before
        training: the level features' standardization (when it has them)."""
        if self.level_features is not None:
            self.adapt_level_features(series)

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_features": self.num_features,
            "hidden_dim": self.hidden_dim,
            "max_sequence_length": self.max_sequence_length,
            "positions": self.positions,
            "standardize_series": self.standardize_series,
            "series_level_features": self.series_level_features,
        })
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class PatchStem(SeriesStem):
    """Series -> tokens of `patch_length` consecutive steps (PatchTST).

    A `SeriesStem` whose every p consecutive steps form one token
    (`SeriesPatches`: zero-padded to a multiple of p, reshaped to
    `(B, ceil(T/p), p*F)`), as in PatchTST (Nie et al., 2023); with a
    `patch_stride` s < p the patches overlap (a patch starts every s steps).
    p = 1 gives one token per step.  A single value per token gives
    attention little to compare; the generated task of notebook 05 is
    learned with patches of 8 steps and not with single steps.

    Args:
        num_features, hidden_dim, max_sequence_length, positions,
        standardize_series, series_level_features: as `SeriesStem`;
            `max_sequence_length` counts patches.
        patch_length: p, the time steps per token.
        patch_stride: s, the steps between patch starts; None is p (no
            overlap).

    Call arguments:
        inputs: `features` `(B, T, F)`, NaN-padded.

    Returns:
        `(tokens, mask)`: `(B, n, hidden_dim)` and boolean `(B, n)`.

    Example:
    >>> stem = keras_transformer.layers.PatchStem(1, 16, patch_length=4)
    >>> x, mask = stem(keras.ops.zeros((2, 10, 1)))
    >>> x.shape
    (2, 3, 16)
    """

    def __init__(self, num_features, hidden_dim, max_sequence_length=128,
                 positions="sinusoidal", standardize_series=False,
                 series_level_features=False, patch_length=1, patch_stride=None, **kwargs):
        super().__init__(num_features, hidden_dim, max_sequence_length, positions,
                         standardize_series, series_level_features, **kwargs)
        self.patch_length = check_positive_int("patch_length", patch_length)
        self.patch_stride = check_positive_int("patch_stride", patch_stride, allow_none=True)
        if patch_stride is not None and patch_stride > patch_length:
            raise ValueError(
                "`patch_stride` must not exceed `patch_length` (steps would be "
                f"skipped); received patch_stride={patch_stride!r}, "
                f"patch_length={patch_length!r}."
            )
        self.patches = (
            SeriesPatches(patch_length, stride=patch_stride, dtype=self.dtype_policy,
                          name="series_patches")
            if patch_length > 1 else None
        )

    def token_width(self, num_features):
        return self.patch_length * num_features

    def token_count(self, length):
        if self.patches is None:
            return length
        return self.patches.compute_output_shape((None, length, None))[1]

    def tokens(self, x, lengths):
        if self.patches is None:
            return super().tokens(x, lengths)
        x = self.patches(x)  # (B, T', p*F)
        return x, self.patches.token_mask(lengths, x)

    def get_config(self):
        config = super().get_config()
        config.update({"patch_length": self.patch_length, "patch_stride": self.patch_stride})
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class RandomKernelSeriesStem(SeriesStem):
    """Series -> one token per window: MiniRocket's features of that window.

    A `SeriesStem` whose tokens are `RandomKernelStem`'s: the series'
    `num_windows` equal windows, each the proportions of positive values
    of fixed random dilated kernels over it (Dempster et al., 2021).  Set
    the kernels' biases (and the level features' standardization) from the
    training series with `adapt` before training.

    Args:
        num_features, hidden_dim, max_sequence_length, positions,
        standardize_series, series_level_features: as `SeriesStem`.
        series_length, num_windows, num_kernel_features, max_dilations,
        max_positions, seed: as `RandomKernelStem`.

    Call arguments:
        inputs: `features` `(B, T, F)`, NaN-padded.

    Returns:
        `(tokens, mask)`: `(B, num_windows, hidden_dim)` and boolean
        `(B, num_windows)`, True at the windows that hold a step.

    Example:
    >>> stem = keras_transformer.layers.RandomKernelSeriesStem(
    ...     1, 16, series_length=64, num_windows=4)
    >>> x, mask = stem(keras.ops.zeros((2, 64, 1)))
    >>> x.shape
    (2, 4, 16)
    """

    def __init__(self, num_features, hidden_dim, max_sequence_length=128,
                 positions="sinusoidal", standardize_series=False,
                 series_level_features=False, series_length=None, num_windows=8,
                 num_kernel_features=2016, max_dilations=8, max_positions=None, seed=0,
                 **kwargs):
        super().__init__(num_features, hidden_dim, max_sequence_length, positions,
                         standardize_series, series_level_features, **kwargs)
        self.kernel_stem = RandomKernelStem(
            series_length, num_windows=num_windows, num_kernel_features=num_kernel_features,
            max_dilations=max_dilations, max_positions=max_positions, seed=seed,
            dtype=self.dtype_policy, name="random_kernel_stem",
        )

    def token_width(self, num_features):
        return self.kernel_stem.num_outputs

    def token_count(self, length):
        return self.kernel_stem.num_windows

    def build(self, input_shape):
        if not self.kernel_stem.built:  # `adapt` may have built it
            self.kernel_stem.build(_series(input_shape))
        super().build(input_shape)

    def tokens(self, x, lengths):
        mask = self.kernel_stem.token_mask(x, lengths)  # (B, W)
        return self.kernel_stem(x, lengths=lengths), mask  # a token a window

    def adapt_kernels(self, series):
        """Sets the `RandomKernelStem`'s biases from training series `(N, T, F)`,
        standardised first as the stem's input is."""
        series = keras.ops.convert_to_tensor(series, "float32")
        lengths = series_lengths(series)
        series = self.series_norm(series) if self.series_norm is not None else fill_missing(series)
        self.kernel_stem.adapt(keras.ops.convert_to_numpy(series),
                               lengths=keras.ops.convert_to_numpy(lengths))

    def adapt(self, series):
        """Sets the kernels' biases, then the level features' standardization,
        from training series `(N, T, F)`."""
        self.adapt_kernels(series)
        super().adapt(series)

    def get_config(self):
        config = super().get_config()
        stem = self.kernel_stem
        config.update({
            "series_length": stem.series_length, "num_windows": stem.num_windows,
            "num_kernel_features": stem.num_kernel_features,
            "max_dilations": stem.max_dilations, "max_positions": stem.max_positions,
            "seed": stem.seed,
        })
        return config
