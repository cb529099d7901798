"""Label-smoothed, padding-masked loss and token metrics (paper Section 5.4).

Every function here counts each real (non-pad) target token exactly once:
a batch's loss is the sum over its real tokens divided by their number.

Two Keras behaviours are neutralised on purpose (PEERS.md pain points 6, 8):

* Keras mask on the logits. `keras.losses.Loss.__call__` reads
  `y_pred._keras_mask` and, for `reduction="sum_over_batch_size"`, turns it
  into sample weights `total / valid` on the unmasked positions (see
  `keras.src.losses.loss.apply_mask`). Combined with a pad mask that rescales
  the loss by a batch-dependent factor. `MaskedSparseCategoricalCrossentropy`
  overrides `__call__` and builds its only mask from `y_true != pad_id`; the
  metrics subclass `keras.metrics.Metric` directly and never read the mask.
* Distribution. Under `tf.distribute`, Keras expects each replica's loss to
  be pre-divided so that the sum over replicas is the batch loss (it divides
  by `num_replicas_in_sync`, giving a mean of per-replica means). Here each
  replica divides its token sum by the number of real tokens summed over all
  replicas, so the gradient equals the single-device gradient of the global
  per-token mean, whatever the padding on each replica.
"""

import keras
import tensorflow as tf
from keras import ops


def masked_token_cross_entropy(
    y_true, y_pred, label_smoothing=0.0, pad_id=0, from_logits=True
):
    """Per-token cross-entropy against a label-smoothed target, zero at pads.

    The smoothed target is `(1 - eps) * one_hot(y) + eps / V` (Szegedy et al.
    2016; the convention of `keras.losses.CategoricalCrossentropy`): eps / V
    on every one of the V classes, the true class and the pad class included.

    Args:
        y_true: int tensor (B, T) or (B, T, 1) of target ids.
        y_pred: float tensor (B, T, V) of logits (or probabilities when
            `from_logits=False`); any float dtype, computed in float32.
        label_smoothing: float in [0, 1], eps.
        pad_id: int. Targets equal to it are padding.
        from_logits: bool. Whether `y_pred` holds logits.

    Returns:
        `(losses, mask)`: float32 (B, T) per-token losses, zero at pads, and
        the float32 (B, T) mask of real tokens.
    """
    y_pred = ops.cast(y_pred, "float32")  # float16 logits overflow in logsumexp
    y_true = ops.convert_to_tensor(y_true)
    if len(y_true.shape) == len(y_pred.shape):
        y_true = ops.squeeze(y_true, axis=-1)  # (B, T, 1) -> (B, T)
    labels = ops.cast(y_true, "int32")
    if from_logits:
        log_probs = ops.log_softmax(y_pred, axis=-1)  # (B, T, V)
    else:
        log_probs = ops.log(ops.clip(y_pred, keras.config.epsilon(), 1.0))
    nll = -ops.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    if label_smoothing:
        # -sum_k (eps / V) log p_k = eps * mean_k(-log p_k)
        uniform = -ops.mean(log_probs, axis=-1)  # (B, T)
        losses = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    else:
        losses = nll
    mask = ops.cast(ops.not_equal(labels, pad_id), "float32")  # (B, T)
    return losses * mask, mask


def _token_weights(mask, sample_weight):
    if sample_weight is None:
        return mask
    sample_weight = ops.cast(sample_weight, "float32")
    if len(sample_weight.shape) == 1:
        sample_weight = sample_weight[:, None]  # per sequence: (B,) -> (B, 1)
    return mask * sample_weight


def _sum_over_replicas(value):
    """Sums `value` over the replicas of the current `tf.distribute` step."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value  # cross-replica context or single replica: all is local
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Label-smoothed cross-entropy averaged over real target tokens.

    Section 5.4: "During training, we employed label smoothing of value
    eps_ls = 0.1". The target distribution puts `1 - eps + eps / V` on the
    true token and `eps / V` on every other class (including the pad class),
    as `keras.losses.CategoricalCrossentropy(label_smoothing=eps)` does.

    Masking: the only mask is `y_true != pad_id`. A Keras mask carried by
    `y_pred` (`_keras_mask`) is ignored: `__call__` is overridden, so Keras'
    implicit `total / valid` reweighting never applies. The value is
    `sum(loss * w) / sum(w)` over real tokens, `w` being 1 or the sample
    weight ((B,) per sequence or (B, T) per token); an all-pad batch gives 0.
    Under `tf.distribute` the denominator is summed over replicas (see the
    module docstring), so 2 replicas report and train exactly like 1 device.

    Args:
        label_smoothing: float in [0, 1]. eps_ls; 0.1 in the paper.
        pad_id: int. Target id of padding (`PAD_ID`, 0).
        from_logits: bool. Whether `y_pred` holds logits (the model's output).
        name: str. Name of the loss.

    Call arguments:
        y_true: int (B, T) target ids.
        y_pred: (B, T, V) logits in any float dtype (computed in float32).
        sample_weight: optional (B,) or (B, T) weights.

    Returns:
        A float32 scalar.

    Example:

    ```python
    model.compile(
        optimizer=training.optimization.schedule.paper_optimizer(512),
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.1),
        metrics=[MaskedAccuracy()],
    )
    ```

    References:
        Vaswani et al., "Attention Is All You Need", 2017, Section 5.4.
        Szegedy et al., "Rethinking the Inception Architecture", 2016, 7.
    """

    def __init__(
        self,
        label_smoothing=0.1,
        pad_id=0,
        from_logits=True,
        name="masked_sparse_categorical_crossentropy",
    ):
        super().__init__(name=name, dtype="float32")
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(
                "`label_smoothing` must be in [0, 1]. Received: "
                f"label_smoothing={label_smoothing}"
            )
        self.label_smoothing = float(label_smoothing)
        self.pad_id = int(pad_id)
        self.from_logits = bool(from_logits)

    def call(self, y_true, y_pred):
        losses, _ = masked_token_cross_entropy(
            y_true, y_pred, self.label_smoothing, self.pad_id, self.from_logits
        )
        return losses

    def __call__(self, y_true, y_pred, sample_weight=None):
        # Replaces Loss.__call__, which would turn y_pred._keras_mask into
        # sample weights and divide by replicas; see the module docstring.
        with tf.name_scope(self.name):
            losses, mask = masked_token_cross_entropy(
                y_true, y_pred, self.label_smoothing, self.pad_id, self.from_logits
            )
            weights = _token_weights(mask, sample_weight)
            total = ops.sum(losses * weights)
            count = _sum_over_replicas(ops.stop_gradient(ops.sum(weights)))
            return ops.divide_no_nan(total, count)

    def get_config(self):
        return {
            "label_smoothing": self.label_smoothing,
            "pad_id": self.pad_id,
            "from_logits": self.from_logits,
            "name": self.name,
        }


@keras.saving.register_keras_serializable(package="keras_transformer")
class SparseSmoothedCrossentropy(keras.losses.Loss):
    """Cross-entropy of class ids against label-smoothed targets.

    `keras.losses.SparseCategoricalCrossentropy` takes no `label_smoothing`;
    this is `keras.losses.CategoricalCrossentropy(label_smoothing=eps)` of
    the one-hot ids: `1 - eps + eps / K` on the true class and `eps / K` on
    each of the other K - 1. With eps = 0 it is the plain sparse
    cross-entropy. The classifiers' loss when `label_smoothing` > 0.

    Args:
        label_smoothing: float in [0, 1). eps.
        from_logits: bool. Whether `y_pred` holds logits.
        name: str. Name of the loss.

    Call arguments:
        y_true: int (B,) or (B, 1) class ids.
        y_pred: (B, K) logits (or probabilities), computed in float32.
    """

    def __init__(self, label_smoothing=0.1, from_logits=True,
                 name="sparse_smoothed_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(
                "`label_smoothing` must be in [0, 1). Received: "
                f"label_smoothing={label_smoothing}"
            )
        self.label_smoothing = float(label_smoothing)
        self.from_logits = bool(from_logits)

    def call(self, y_true, y_pred):
        y_pred = ops.cast(y_pred, "float32")
        y_true = ops.convert_to_tensor(y_true)
        if len(y_true.shape) == len(y_pred.shape):
            y_true = ops.squeeze(y_true, axis=-1)  # (B, 1) -> (B,)
        targets = ops.one_hot(ops.cast(y_true, "int32"), ops.shape(y_pred)[-1])
        return keras.losses.categorical_crossentropy(
            targets, y_pred, from_logits=self.from_logits,
            label_smoothing=self.label_smoothing,
        )

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing,
                "from_logits": self.from_logits}


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(keras.metrics.Metric):
    """Fraction of real target tokens whose arg-max prediction is correct.

    Counts each non-pad token once over all batches (and all replicas: the
    two counters are summed across replicas when read). Ignores any Keras
    mask on `y_pred`.

    Args:
        pad_id: int. Target id of padding.
        name: str. Name of the metric.
        dtype: Dtype of the result.

    Example:

    ```python
    model.compile(..., metrics=[MaskedAccuracy(), MaskedPerplexity()])
    ```
    """

    def __init__(self, pad_id=0, name="masked_accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.pad_id = int(pad_id)
        self.correct = self.add_variable((), "zeros", "float32", name="correct")
        self.count = self.add_variable((), "zeros", "float32", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.convert_to_tensor(y_true)
        if len(y_true.shape) == len(y_pred.shape):
            y_true = ops.squeeze(y_true, axis=-1)  # (B, T, 1) -> (B, T)
        labels = ops.cast(y_true, "int32")
        predictions = ops.cast(ops.argmax(y_pred, axis=-1), "int32")  # (B, T)
        mask = ops.cast(ops.not_equal(labels, self.pad_id), "float32")
        weights = _token_weights(mask, sample_weight)
        hits = ops.cast(ops.equal(predictions, labels), "float32")
        self.correct.assign_add(ops.sum(hits * weights))
        self.count.assign_add(ops.sum(weights))

    def result(self):
        return ops.cast(ops.divide_no_nan(self.correct, self.count), self.dtype)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedPerplexity(keras.metrics.Metric):
    """exp of the unsmoothed cross-entropy per real target token.

    Section 6.2 reports per-wordpiece perplexities; like the paper's numbers,
    this uses the plain (eps = 0) cross-entropy, summed over every real token
    seen and divided by their count, so batches with more tokens weigh more.

    Args:
        pad_id: int. Target id of padding.
        from_logits: bool. Whether `y_pred` holds logits.
        name: str. Name of the metric.
        dtype: Dtype of the result.
    """

    def __init__(self, pad_id=0, from_logits=True, name="perplexity", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.pad_id = int(pad_id)
        self.from_logits = bool(from_logits)
        self.total = self.add_variable((), "zeros", "float32", name="total")
        self.count = self.add_variable((), "zeros", "float32", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        losses, mask = masked_token_cross_entropy(
            y_true, y_pred, 0.0, self.pad_id, self.from_logits
        )
        weights = _token_weights(mask, sample_weight)
        self.total.assign_add(ops.sum(losses * weights))
        self.count.assign_add(ops.sum(weights))

    def result(self):
        mean_nll = ops.divide_no_nan(self.total, self.count)
        return ops.cast(ops.exp(mean_nll), self.dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "pad_id": self.pad_id,
            "from_logits": self.from_logits,
        }
