"""Random transforms of batches of time series, for training on few series.

A Transformer trained on a few dozen series memorises them; what it then
does on new series depends on what it was shown besides.  Mixup (Zhang et
al., 2018) trains on convex pairs of series *and* of their labels, which
keeps the classifier close to linear between the training series; it is the
transform that helped on every UCR file tried (docs/experiment-log.md, "The
patch recipe's rules").  Jitter (Gaussian noise) and a random resized crop
(a shift and a small stretch in time) are here for files where they help.

Series may carry NaN, padding past their end and missing values
(`keras_transformer.layers.series_masking`): mixup and jitter keep them
where they are; `random_resized_crop` resamples the batch's padded length
and is meant for series of one length.

Every function takes a batch, `features` `(B, T, F)` float32 and `labels`
`(B, K)` one-hot (or already soft) float32, and an explicit stateless seed
`(2,)` int32, so that a run is reproducible: `augment_series` derives batch
i's seed from `(seed, i)`.  Mixed labels are soft: train with
`keras.losses.CategoricalCrossentropy`, not the sparse loss.

Example:

```python
dataset = augment_series(dataset, num_classes=3, mixup_alpha=0.2, seed=0)
model.compile(loss=keras.losses.CategoricalCrossentropy(from_logits=True), ...)
```
"""

import tensorflow as tf


def _check_rate(name, value, upper=None):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (
        upper is not None and value >= upper
    ):
        bound = f"[0, {upper})" if upper is not None else ">= 0"
        raise ValueError(f"`{name}` must be a number in {bound}; received {name}={value!r}.")
    return float(value)


def mixup(features, labels, alpha, seed):
    """Each series mixed with its mirror in the batch, lam ~ Beta(alpha, alpha).

    Series i is paired with series B-1-i (a reversal needs no second
    shuffle).  lam is folded to [0.5, 1] so that the first series stays the
    main one; the labels are mixed with the same lam.  Series of unequal
    lengths (NaN-padded) and with missing values keep the main series'
    length and missing values: at a step where only the partner has NaN,
    the main series' value stands alone.

    Args:
        features: `(B, T, F)` float32.
        labels: `(B, K)` float32, one-hot or soft.
        alpha: > 0; 0.2 is the usual small-data value.
        seed: `(2,)` int32 stateless seed.

    Returns:
        `(features, labels)` of the same shapes.
    """
    alpha = _check_rate("alpha", alpha)
    if alpha == 0:
        raise ValueError("`alpha` must be positive for mixup; received alpha=0.")
    batch = tf.shape(features)[0]
    seeds = tf.random.experimental.stateless_split(seed, 2)
    a = tf.random.stateless_gamma((batch,), seeds[0], alpha)  # Beta from two Gammas
    b = tf.random.stateless_gamma((batch,), seeds[1], alpha)
    lam = a / tf.maximum(a + b, 1e-12)
    lam = tf.maximum(lam, 1.0 - lam)  # (B,)
    partner = tf.reverse(features, [0])
    # NaN (a missing value, or padding past a shorter series' end) keeps the
    # main series' own: its NaN stays, and where only the partner has none
    # the main series' value is taken alone.
    partner = tf.where(tf.math.is_nan(partner), features, partner)
    mixed = lam[:, None, None] * features + (1 - lam[:, None, None]) * partner
    soft = lam[:, None] * labels + (1 - lam[:, None]) * tf.reverse(labels, [0])
    return mixed, soft


def jitter(features, stddev, seed):
    """Gaussian noise of standard deviation `stddev` on every value."""
    stddev = _check_rate("stddev", stddev)
    return features + stddev * tf.random.stateless_normal(tf.shape(features), seed)


def random_resized_crop(features, max_crop, seed):
    """A window of (1 - u·max_crop)·T steps, u ~ U(0, 1), resampled to T steps.

    One draw per series: a random shift and a stretch of up to
    1 / (1 - max_crop) in time, linear interpolation between steps.
    """
    max_crop = _check_rate("max_crop", max_crop, upper=1)
    batch, length = tf.shape(features)[0], tf.shape(features)[1]
    seeds = tf.random.experimental.stateless_split(seed, 2)
    size = 1.0 - max_crop * tf.random.stateless_uniform((batch,), seeds[0])
    start = (1.0 - size) * tf.random.stateless_uniform((batch,), seeds[1])
    zeros, ones = tf.zeros_like(start), tf.ones_like(start)
    boxes = tf.stack([start, zeros, start + size, ones], axis=1)  # (B, 4): y1 x1 y2 x2
    image = features[:, :, None, :]  # (B, T, 1, F): time as the image height
    # A box spans pixel centres y1·(T-1) .. y2·(T-1), sampled at T points.
    crops = tf.image.crop_and_resize(image, boxes, tf.range(batch), tf.stack([length, 1]))
    return crops[:, :, 0, :]  # (B, T, F)


def augment_series(dataset, num_classes, mixup_alpha=0.0, jitter_stddev=0.0, max_crop=0.0,
                   seed=0):
    """Applies the transforms to a batched dataset of `({"features"}, labels)`.

    Integer labels become one-hot `(B, K)` float32 (soft after mixup).
    Order: crop, jitter, then mixup (pairs of already transformed series).

    Args:
        dataset: batches `({"features": (B, T, F)}, (B,) int labels)`.
        num_classes: K.
        mixup_alpha: Beta parameter of `mixup` (0: no mixup).
        jitter_stddev: noise standard deviation of `jitter` (0: none).
        max_crop: largest share of a series `random_resized_crop` cuts (0: none).
        seed: int; batch i uses the stateless seed (seed, i).

    Returns:
        The transformed dataset.
    """
    alpha = _check_rate("mixup_alpha", mixup_alpha)
    stddev = _check_rate("jitter_stddev", jitter_stddev)
    max_crop = _check_rate("max_crop", max_crop, upper=1)

    def transform(step, batch):
        inputs, labels = batch
        x = tf.cast(inputs["features"], tf.float32)
        y = tf.one_hot(tf.cast(labels, tf.int32), num_classes)
        base = tf.stack([tf.constant(seed, tf.int64), tf.cast(step, tf.int64)])
        keys = tf.random.experimental.stateless_split(base, 3)
        if max_crop > 0:
            x = random_resized_crop(x, max_crop, keys[0])
        if stddev > 0:
            x = jitter(x, stddev, keys[1])
        if alpha > 0:
            x, y = mixup(x, y, alpha, keys[2])
        return {**inputs, "features": x}, y

    return dataset.enumerate().map(transform, num_parallel_calls=tf.data.AUTOTUNE)
