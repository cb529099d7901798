"""Fixed random dilated kernels whose PPV over windows become tokens (MiniRocket)."""

import itertools
import math

import keras
import numpy as np
from keras import ops

from keras_transformer.layers.series_masking import step_positions
from keras_transformer.layers.validation import check_positive_int

KERNEL_LENGTH = 9
#: The 84 kernels: weight 2 at three of the nine taps, -1 at the other six.
TAPS = tuple(itertools.combinations(range(KERNEL_LENGTH), 3))
GOLDEN_RATIO = (1 + math.sqrt(5)) / 2


def base_kernels():
    """`(9, 84)` float32: -1 everywhere, 2 at each kernel's three taps (each sums to 0)."""
    kernels = -np.ones((KERNEL_LENGTH, len(TAPS)), np.float32)
    for k, taps in enumerate(TAPS):
        kernels[list(taps), k] = 2.0
    return kernels


def kernel_dilations(series_length, max_dilations):
    """Dilations spaced exponentially from 1 to (T - 1) / 8, duplicates removed."""
    largest = max(0.0, math.log2(max(series_length - 1, 1) / (KERNEL_LENGTH - 1)))
    exponents = np.linspace(0.0, largest, max_dilations)
    return sorted({int(d) for d in np.floor(2.0 ** exponents)})


def bias_quantiles(count):
    """`count` quantiles in (0, 1) of low discrepancy: frac(i * golden ratio)."""
    return np.mod(np.arange(1, count + 1) * GOLDEN_RATIO, 1.0)


@keras.saving.register_keras_serializable(package="keras_transformer")
class RandomKernelStem(keras.layers.Layer):
    """MiniRocket's features, per window of the series, as tokens.

    The series is convolved with MiniRocket's 84 fixed kernels of length 9
    (weights -1 and 2, summing to 0, so a constant level adds nothing) at
    dilations spaced exponentially up to (T - 1) / 8 (Dempster et al.,
    2021).  Each output channel (kernel, dilation) is compared with
    `biases_per_kernel` biases, quantiles of that channel's output on a
    random training series (`adapt`), and the proportion of positive
    values (PPV) is taken over each of `num_windows` equal windows of the
    series: window w is one token of `num_outputs` PPVs in [0, 1].  The
    mean of equal windows' PPVs is MiniRocket's PPV over the whole series,
    so a mean-pooled encoder whose residual path carries the tokens can
    read MiniRocket's features.  With several channels, each (kernel,
    dilation) reads a random subset of them (as MiniRocketMultivariate).

    The kernels are drawn and the biases set from data once (`adapt`, as
    `keras.layers.Normalization.adapt`); both, and the PPVs' mean and
    standard deviation over the training windows (the output is
    standardised with them), are non-trainable weights saved with the
    model.  Without `adapt` the biases are 0 and the output is the raw PPV.

    Args:
        series_length: T the dilations are chosen for (the training series'
            length); longer or shorter series are read the same way.
        num_windows: W, the tokens per series: T is cut into W windows of
            ceil(T / W) steps (the last may be shorter).
        num_kernel_features: the PPVs per token to aim at: 84 kernels x D
            dilations x `biases_per_kernel`, where D is at most
            `max_dilations` and `biases_per_kernel` = max(1,
            num_kernel_features // (84 D)).
        max_dilations: D at most (MiniRocket: 32); every dilation costs a
            convolution of the series, every bias only a comparison.
        max_positions: None, or the outputs per channel to compare with
            the biases: with T > max_positions, every s-th output, s =
            ceil(T / max_positions) (the comparisons are the stem's cost;
            a dilated kernel's neighbouring outputs are alike).
        seed: seed of the channel subsets and of the series the biases
            come from.

    Call arguments:
        inputs: `(B, T, F)` series.

    Returns:
        `(B, W, num_outputs)`: standardised PPVs (raw PPVs: `window_ppv`).

    Example:
    >>> stem = keras_transformer.layers.RandomKernelStem(64, num_windows=4)
    >>> stem.adapt(np.random.default_rng(0).normal(size=(8, 64, 1)))
    >>> stem(keras.ops.zeros((2, 64, 1))).shape
    (2, 4, 2016)

    References:
        Dempster, Schmidt and Webb, 2021, "MiniRocket: A Very Fast (Almost)
        Deterministic Transform for Time Series Classification"
        (arXiv:2012.08791).
    """

    def __init__(self, series_length, num_windows=8, num_kernel_features=2016, max_dilations=8,
                 max_positions=None, seed=0, **kwargs):
        super().__init__(**kwargs)
        self.series_length = check_positive_int("series_length", series_length)
        self.num_windows = check_positive_int("num_windows", num_windows)
        self.num_kernel_features = check_positive_int("num_kernel_features",
                                                      num_kernel_features)
        self.max_dilations = check_positive_int("max_dilations", max_dilations)
        self.max_positions = check_positive_int("max_positions", max_positions, allow_none=True)
        # The PPVs of a series longer than max_positions count every s-th output.
        self.position_stride = (1 if max_positions is None
                                else max(1, math.ceil(series_length / max_positions)))
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"`seed` must be an integer; received seed={seed!r}.")
        self.seed = seed
        per_kernel = max(1, num_kernel_features // len(TAPS))
        self.dilations = kernel_dilations(series_length, min(per_kernel, max_dilations))
        self.biases_per_kernel = max(
            1, num_kernel_features // (len(TAPS) * len(self.dilations)))
        self.num_outputs = len(TAPS) * len(self.dilations) * self.biases_per_kernel

    def build(self, input_shape):
        channels = input_shape[-1]
        if channels is None:
            raise ValueError("RandomKernelStem needs a known number of channels (F); "
                             f"received input_shape={input_shape!r}.")
        shape = (len(self.dilations), KERNEL_LENGTH, channels, len(TAPS))
        self.kernels = self.add_weight(
            shape=shape, initializer=keras.initializers.Constant(self._draw_kernels(channels)),
            trainable=False, name="kernels")
        self.biases = self.add_weight(
            shape=(len(self.dilations), len(TAPS), self.biases_per_kernel),
            initializer="zeros", trainable=False, name="biases")
        self.feature_mean = self.add_weight(
            shape=(self.num_outputs,), initializer="zeros", trainable=False,
            name="feature_mean")
        self.feature_scale = self.add_weight(
            shape=(self.num_outputs,), initializer="ones", trainable=False,
            name="feature_scale")
        self.built = True

    def _draw_kernels(self, channels):
        """`(D, 9, F, 84)`: the base kernels, each (dilation, kernel) on a random
        subset of 1 to min(F, 9) channels (all of them when F = 1)."""
        rng = np.random.default_rng(self.seed)
        mask = np.zeros((len(self.dilations), channels, len(TAPS)), np.float32)
        most = math.log2(min(channels, KERNEL_LENGTH) + 1)
        for d in range(len(self.dilations)):
            for k in range(len(TAPS)):
                count = int(2 ** rng.uniform(0, most))
                mask[d, rng.choice(channels, min(count, channels), replace=False), k] = 1.0
        return base_kernels()[None, :, None, :] * mask[:, None, :, :]

    def _convolutions(self, inputs):
        """[(B, T, 84)] per dilation: the kernels' outputs, zero-padded ("same")."""
        x = ops.cast(inputs, self.compute_dtype)
        kernels = ops.cast(self.kernels, self.compute_dtype)
        return [ops.conv(x, kernels[i], strides=1, padding="same", dilation_rate=d)
                for i, d in enumerate(self.dilations)]

    def _windows(self, inputs, lengths):
        """`(assign (B, S, W), counts (B, W))` over the S compared positions.

        Position t of a series of L steps (in compared positions: ceil(L / s))
        falls in window floor(t / ceil(L / W)) when t < L: each series is
        cut by its own length, so padding changes no window of it.
        """
        stride = self.position_stride
        positions = step_positions(inputs[:, ::stride, 0])  # (B, S); T may be unknown
        if lengths is None:
            own = ops.max(positions, axis=1) + 1
        else:
            own = (ops.cast(lengths, "int32") + stride - 1) // stride  # (B,)
        window = ops.maximum((own + self.num_windows - 1) // self.num_windows, 1)
        index = positions // window[:, None]  # (B, S)
        real = ops.cast(positions < own[:, None], self.compute_dtype)
        assign = ops.one_hot(index, self.num_windows, dtype=self.compute_dtype) * real[..., None]
        return assign, ops.sum(assign, axis=1)

    def window_ppv(self, inputs, lengths=None):
        """`(B, W, num_outputs)`: each window's proportion of positive values.

        `lengths` `(B,)`: each series' own steps (default: all T); the steps
        past them are padding and count in no window.
        """
        assign, counts = self._windows(inputs, lengths)
        counts = ops.maximum(counts, 1.0)[..., None]  # (B, W, 1)
        biases = ops.cast(self.biases, self.compute_dtype)
        features = []
        for i, h in enumerate(self._convolutions(inputs)):
            if self.position_stride > 1:
                h = h[:, :: self.position_stride]  # every s-th output: (B, ceil(T / s), 84)
            # One bias of each kernel at a time: (B, S, 84) comparisons, summed
            # over each window, then stacked (B, W, 84, nb) -> (B, W, 84 * nb).
            # The same sums as comparing with a (B, S, 84, nb) broadcast, in
            # less than half the time (a broadcast compare and cast is most
            # of the stem's cost on short series).
            columns = [
                ops.einsum("bsw,bsc->bwc", assign,
                           ops.cast(h > biases[i][:, j], self.compute_dtype))
                for j in range(self.biases_per_kernel)
            ]
            window_sums = ops.stack(columns, axis=-1)
            shape = ops.shape(window_sums)
            features.append(ops.reshape(window_sums, (shape[0], shape[1], -1)) / counts)
        return ops.concatenate(features, axis=-1)

    def token_mask(self, inputs, lengths):
        """Boolean `(B, W)`: the windows that hold a step of each series."""
        return self._windows(inputs, lengths)[1] > 0

    def call(self, inputs, lengths=None):
        ppv = self.window_ppv(inputs, lengths)
        return (ppv - ops.cast(self.feature_mean, ppv.dtype)) / ops.cast(
            self.feature_scale, ppv.dtype)

    def adapt(self, series, batch_size=64, lengths=None):
        """Sets the biases and the output statistics from training series `(N, T, F)`.

        Each (dilation, kernel)'s biases are the `bias_quantiles` of its
        output on one training series drawn with `seed` (over that series'
        own steps); the mean and standard deviation of every PPV are then
        taken over all windows of all `series` that hold steps.  `lengths`
        `(N,)`: each series' own steps (default: all T).  The same series
        and seed give the same weights.
        """
        series = np.asarray(series, np.float32)
        if series.ndim != 3 or series.shape[0] == 0:
            raise ValueError("`adapt` needs series of shape (N, T, F) with N >= 1; received "
                             f"shape {series.shape!r}.")
        lengths = (np.full(len(series), series.shape[1], np.int32) if lengths is None
                   else np.asarray(lengths, np.int32))
        if not self.built:
            self.build(series.shape)
        rng = np.random.default_rng(self.seed + 1)
        quantiles = bias_quantiles(self.biases_per_kernel)
        biases = np.zeros(self.biases.shape, np.float32)
        picks = rng.integers(0, len(series), size=(len(self.dilations), len(TAPS)))
        chosen = np.unique(picks)
        row = {n: j for j, n in enumerate(chosen)}
        for i, output in enumerate(self._convolutions(series[chosen])):
            output = ops.convert_to_numpy(output)
            for k in range(len(TAPS)):
                n = picks[i, k]
                own = output[row[n], : max(int(lengths[n]), 1), k]
                biases[i, k] = np.quantile(own, quantiles)
        self.biases.assign(biases)
        self.feature_mean.assign(np.zeros(self.num_outputs, np.float32))
        self.feature_scale.assign(np.ones(self.num_outputs, np.float32))
        ppv, held = [], []
        for i in range(0, len(series), batch_size):
            batch, own = series[i:i + batch_size], lengths[i:i + batch_size]
            ppv.append(ops.convert_to_numpy(self.window_ppv(batch, own)))
            held.append(ops.convert_to_numpy(self.token_mask(batch, own)))
        ppv = np.concatenate(ppv)[np.concatenate(held)]  # (windows holding steps, outputs)
        self.feature_mean.assign(ppv.mean(axis=0))
        self.feature_scale.assign(np.maximum(ppv.std(axis=0), 1e-2))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_windows, self.num_outputs)

    def get_config(self):
        config = super().get_config()
        config.update({
            "series_length": self.series_length,
            "num_windows": self.num_windows,
            "num_kernel_features": self.num_kernel_features,
            "max_dilations": self.max_dilations,
            "max_positions": self.max_positions,
            "seed": self.seed,
        })
        return config
