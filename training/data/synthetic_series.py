"""A small, realistic two-class time-series task, and the UCR file format.

Class 0 is a noisy quasi-periodic signal (a heartbeat-like sum of two
sinusoids with random phase, amplitude and a slow random-walk baseline);
class 1 is the same signal with one short transient anomaly (a Gaussian bump
of random sign, position and width) — the binary "normal vs. anomalous"
shape of many UCR tasks (ECG200, Wafer).  Deterministic by seed.
"""

import numpy as np


def generate_series(num_series, length=128, seed=0):
    """`(x (N, T, 1) float32, y (N,) int32)`, classes balanced."""
    rng = np.random.default_rng(seed)
    t = np.arange(length, dtype=np.float64)
    labels = np.arange(num_series) % 2
    rng.shuffle(labels)
    series = np.empty((num_series, length), dtype=np.float64)
    for i in range(num_series):
        period = rng.uniform(12, 24)
        phase = rng.uniform(0, 2 * np.pi)
        signal = rng.uniform(0.8, 1.2) * np.sin(2 * np.pi * t / period + phase)
        signal += 0.3 * np.sin(4 * np.pi * t / period + 2 * phase)
        baseline = np.cumsum(rng.normal(0, 0.03, length))
        noise = rng.normal(0, 0.15, length)
        series[i] = signal + baseline + noise
        if labels[i] == 1:
            centre = rng.uniform(0.1, 0.9) * length
            width = rng.uniform(2, 5)
            series[i] += rng.choice([-1, 1]) * rng.uniform(1.2, 2.0) * np.exp(
                -0.5 * ((t - centre) / width) ** 2
            )
    # z-normalise each series, as the UCR archive does.
    series = (series - series.mean(1, keepdims=True)) / series.std(1, keepdims=True)
    return series[..., None].astype(np.float32), labels.astype(np.int32)


def write_ucr(path, x, y):
    """Write `x (N, T[, 1])` and labels `y` as UCR text: label, then values."""
    x = np.asarray(x).reshape(len(x), -1)
    with open(path, "w", encoding="utf-8") as f:
        for label, row in zip(y, x, strict=True):
            f.write(",".join([str(int(label))] + [f"{v:.6f}" for v in row]) + "\n")
