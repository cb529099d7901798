"""What the pooled sequence classifiers share: mixup
of the pooled features, the loss of a mixed batch, and class probabilities.

A mixing training call returns the mixed batch's logits `(B, K)`, as any
call does, and keeps its weights lam for `compute_loss`
(`keras_transformer.models.step_outputs`).

`TransformerClassifier` and `TextCNNClassifier` differ only in what lies
between their input stem and their pooling; both subclass
`PooledClassifier`, which `ClassifierEnsemble` and the exporters serve alike.
"""

import keras
from keras import ops

from keras_transformer.layers._dropout import Dropout
from keras_transformer.layers._member_draws import member_draw
from keras_transformer.layers.series_stem import has_stem_features
from keras_transformer.layers.validation import check_token_ids
from keras_transformer.models._serialization import with_dtype_policy
from keras_transformer.models._xla_dropout import XLADropoutMixin
from keras_transformer.models.step_outputs import StepOutputs


def class_probabilities(logits, num_classes):
    """Float32 class probabilities `(B, K)` from a classifier head's logits.

    Sigmoid for a single logit (binary tasks), softmax over `K >= 2`; the
    rule every classifier here (and every exporter serving one) shares.
    """
    logits = ops.cast(logits, "float32")
    if num_classes == 1:
        return ops.sigmoid(logits)
    return ops.softmax(logits, axis=-1)


def mixup_lambda(batch_size, alpha, seed):
    """float32 `(B,)`: lam ~ Beta(alpha, alpha), folded to [0.5, 1] so that
    each example stays the main one of its mix."""
    lam = keras.random.beta((batch_size,), alpha, alpha, dtype="float32", seed=seed)
    return ops.maximum(lam, 1.0 - lam)


def classifier_loss(compute_loss, x, y, logits, lam=None, sample_weight=None, training=True):
    """`compute_loss` (a `Model.compute_loss`) of a classifier's logits `(B, K)`;
    of a mixed batch, with its weights `lam` `(B,)`:
    mean_i w_i lam_i L(y_i) + w_{B-1-i} (1 - lam_i) L(y_{B-1-i}): each label's
    term times the sample weight of the example that label belongs to, so
    that an example of weight 0 (one a member holds out) teaches no one its
    label, not even as another example's partner.

    Both mixup terms go through the compiled loss as sample weights; they
    are doubled and the sum halved so that the model's own losses (weight
    regularisers), which each call adds once, count once.
    """
    if lam is None:
        return compute_loss(x, y, logits, sample_weight, training=training)
    lam = ops.cast(lam, "float32")
    weight = ops.ones_like(lam) if sample_weight is None else ops.cast(sample_weight, "float32")
    own = compute_loss(x, y, logits, 2.0 * lam * weight, training=training)
    partner = compute_loss(x, ops.flip(y, axis=0), logits,
                           2.0 * (1.0 - lam) * ops.flip(weight, axis=0), training=training)
    return 0.5 * (own + partner)


def head_layers(num_classes, hidden_dim, dropout, dtype=None):
    """The classification head's layers, in the order they are applied:
    `Dense(hidden_dim, relu)`, `Dropout`, `Dense(num_classes)`, and a
    float32 cast of the logits (`PooledClassifier._head`)."""
    return (
        keras.layers.Dense(hidden_dim, activation="relu", dtype=dtype, name="head_hidden"),
        Dropout(dropout, dtype=dtype),
        keras.layers.Dense(num_classes, dtype=dtype, name="head_output"),
        keras.layers.Activation("linear", dtype="float32", name="logits"),
    )


class PooledClassifier(XLADropoutMixin, keras.Model):
    """A functional classifier whose graph is `_head(_pooled_features(x))`.

    Subclasses build their layers (the head's by `head_layers`), define
    `_pooled_features` (inputs -> `(B, d)`), set
    `vocabulary_size`, `num_classes` and `mixup_alpha`/`mixup_seed`, and
    call `keras.Model.__init__(inputs=..., outputs=...)`.  This class adds
    what every such classifier does alike: token ids checked before the
    graph casts them; with `mixup_alpha`, the training call mixes the
    pooled features of example i with those of example B-1-i and returns
    the mixed batch's logits, keeping lam in `step_outputs` for
    `compute_loss` (`classifier_loss`); the training metrics score those
    logits against each example's own label; probabilities.
    """

    def _head(self, x):
        """Pooled features `(B, d)` -> float32 logits `(B, num_classes)`."""
        x = self.head_dropout(self.head_hidden(x))
        return self.logits_cast(self.head_output(x))

    @property
    def step_outputs(self):
        """What the latest training call kept for `compute_loss`: `(lam,)` of a
        mixed batch (`keras_transformer.models.step_outputs.StepOutputs`)."""
        try:
            return self._step_outputs
        except AttributeError:
            self._step_outputs = StepOutputs()
            return self._step_outputs

    def call(self, inputs, training=None, mask=None, **kwargs):
        # Validate before the functional graph casts float ids to int32.
        if self.vocabulary_size is not None:
            check_token_ids("token_ids", inputs)
        mixes = bool(training and self.mixup_alpha)
        if mixes or has_stem_features(inputs):
            # Run by the layers themselves: the mixing sits between the
            # graph's pooling and its head, and a series stem given its
            # fixed features skips the graph's first layers.  The call
            # context carries training=True to the dropouts.
            pooled = self._pooled_features(inputs)
            if not mixes:
                return self._head(pooled)
            batch = ops.shape(pooled)[0]
            lam = member_draw(self.mixup_seed,
                              lambda seed: mixup_lambda(batch, self.mixup_alpha, seed))
            weight = ops.cast(ops.expand_dims(lam, -1), pooled.dtype)
            mixed = weight * pooled + (1 - weight) * ops.flip(pooled, axis=0)
            self.step_outputs.keep((lam,))
            return self._head(mixed)
        # Explicit class: AutoGraph cannot resolve zero-argument super().
        return super(PooledClassifier, self).call(  # noqa: UP008 (AutoGraph)
            inputs, training=training, mask=mask, **kwargs
        )

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        parent = super(PooledClassifier, self)  # noqa: UP008 (AutoGraph)
        return self.training_loss(parent.compute_loss, x, y, y_pred, sample_weight, training)

    def training_loss(self, compute_loss, x, y, y_pred, sample_weight=None, training=True):
        """The loss of this step's call through `compute_loss` (the compiled
        loss of the model `fit` runs: this one, or a task model around it):
        of a mixed batch, both labels' terms (`classifier_loss`)."""
        kept = self.step_outputs.take()  # a mixed batch's lam, from this step's call
        lam = kept[0] if training and kept is not None else None
        return classifier_loss(compute_loss, x, y, y_pred, lam, sample_weight, training)

    @property
    def input_name(self):
        return "token_ids" if self.vocabulary_size is not None else "features"

    def probabilities(self, logits):
        """Class probabilities from logits: sigmoid for 1 class, else softmax."""
        return class_probabilities(logits, self.num_classes)

    @classmethod
    def from_config(cls, config):
        return cls(**with_dtype_policy(config))
