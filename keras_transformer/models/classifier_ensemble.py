"""Several classifiers trained side by side, each on its own loss, answering with their mean."""

import math
import numbers

import keras
from keras import ops

from keras_transformer.layers.series_stem import has_stem_features
from keras_transformer.models.member_map import map_members, same_architecture
from keras_transformer.models.pooled_classifier import (
    class_probabilities,
    classifier_loss,
)
from keras_transformer.models.step_outputs import StepOutputs


def mean_probability_logits(member_logits, num_classes):
    """Logits `(B, K)` whose class probabilities are the members' mean.

    Args:
        member_logits: `(B, k, K)`, the logits of k classifiers.
        num_classes: K; 1 is a single sigmoid logit, 2 or more softmax logits.

    Returns:
        float32 `(B, K)`: log(mean_i softmax(l_i)), whose softmax is that
        mean; for K = 1, the logit of the mean sigmoid,
        log(mean_i sigmoid(l_i)) - log(mean_i sigmoid(-l_i)).  Both are
        computed in log space, so confident members do not overflow.
    """
    logits = ops.cast(member_logits, "float32")
    if num_classes == 1:
        return (ops.logsumexp(ops.log_sigmoid(logits), axis=1)
                - ops.logsumexp(ops.log_sigmoid(-logits), axis=1))
    members = logits.shape[1]
    return ops.logsumexp(ops.log_softmax(logits, axis=-1), axis=1) - math.log(members)


@keras.saving.register_keras_serializable(package="keras_transformer")
class ClassifierEnsemble(keras.Model):
    """k classifiers of one input and one set of classes, averaged: a deep ensemble.

    Members are trained independently, as in deep ensembles
    (Lakshminarayanan et al., 2017) and InceptionTime (Ismail Fawaz et al.,
    2020, whose UCR accuracies are those of five networks): they start from
    their own random weights and each is trained on its own loss, in one
    model so that one `fit`, one checkpoint and one export hold them all.

    - The call returns logits `(B, K)` of the members' mean probabilities
      (`mean_probability_logits`), in training and at inference alike, so
      `probabilities`, the loss and accuracy Keras reports, the exporters
      and the verifiers see one classifier with the members' interface.
    - Training: `compute_loss` is the mean of the compiled loss of each
      member on its own logits (and its own mixup, members that mix), so
      that member i's gradients are the ones it would get alone, divided
      by k (Adam's steps do not change with that scale).  Training the
      mean prediction instead couples the members and loses most of the
      gain of an ensemble.  The training call keeps each member's logits
      for it (`step_outputs`); the training metrics see the ensemble's
      answer.
    - Sample weights `(B,)` weigh every member's loss alike; weights
      `(B, k)` give member i column i, so that members may train on
      different examples (bagging, or cross-fitting: member i leaves out
      fold i, which then validates it; `training` does this on data without
      a validation split).  The training metrics then see every example.
    - Members of one architecture (`member_map.same_architecture`: they
      differ only in their weights) run as one computation, their own
      layers mapped over their stacked weights (`member_map.map_members`)
      in training; otherwise, and at inference, each member is called in
      turn.  The same layers run either way; an inference call runs a few
      batches, where the map's trace (about a second on two cores) would
      cost more than it saves.
    - `excluded_members`: members left out of that mean (they still train).
      Training sets it for a cross-fitted member that ends no better, on the
      examples it left out, than answering their most common class: a
      member that learned nothing only pulls the mean towards the prior.

    Args:
        members: Two or more classifiers (`TransformerClassifier`), distinct
            objects, each on a stem of its own, with the same `num_classes`,
            input (`vocabulary_size` or `num_features`) and
            `max_sequence_length`.  Their other sizes may differ.
        excluded_members: Indices of members the inference answer leaves out
            (fewer than all of them); empty: every member is averaged.

    Example:
    >>> members = [keras_transformer.models.TransformerClassifier(
    ...     keras_transformer.layers.PatchStem(num_features=1, hidden_dim=16),
    ...     num_classes=3, num_layers=1, num_heads=2, intermediate_dim=32)
    ...     for _ in range(2)]
    >>> model = keras_transformer.models.ClassifierEnsemble(members)
    >>> model(keras.ops.zeros((4, 8, 1))).shape
    (4, 3)
    """

    def __init__(self, members, excluded_members=(), **kwargs):
        members = list(members) if isinstance(members, (list, tuple)) else members
        if not isinstance(members, list) or len(members) < 2:
            raise ValueError(
                f"`members` must be a list of two or more classifiers; received members={members!r}."
            )
        if len({id(m) for m in members}) != len(members):
            raise ValueError(
                "`members` must be distinct models (the same object twice would train "
                "once, under two names); received the same member more than once."
            )
        shared = ("num_classes", "vocabulary_size", "num_features", "max_sequence_length",
                  "char_ngram_buckets", "char_ngrams_per_word")  # the same input tensor
        for member in members:
            for name in shared:
                if not hasattr(member, name):
                    raise ValueError(
                        f"`members` must be classifiers with `{name}` (e.g. "
                        f"TransformerClassifier, TextCNNClassifier); received {member!r}."
                    )
                if getattr(member, name) != getattr(members[0], name):
                    raise ValueError(
                        f"`members` must share `{name}`; received {name}="
                        f"{getattr(members[0], name)!r} and {getattr(member, name)!r}."
                    )
        stems = [id(m.stem) for m in members if hasattr(m, "stem")]
        if len(set(stems)) != len(stems):
            raise ValueError(
                "`members` must each have a stem of its own (a shared stem would train "
                "one set of input weights for all of them); received one stem twice."
            )
        alphas = {float(getattr(m, "mixup_alpha", 0.0)) for m in members}
        if len(alphas) > 1:
            raise ValueError(
                "`members` must share `mixup_alpha` (their training outputs are stacked); "
                f"received mixup_alpha values {sorted(alphas)}."
            )
        super().__init__(**kwargs)
        self.members = members
        self.excluded_members = self._check_excluded(excluded_members, len(members))
        self.num_classes = members[0].num_classes
        self.vocabulary_size = members[0].vocabulary_size
        self.num_features = members[0].num_features
        self.max_sequence_length = members[0].max_sequence_length
        self.char_ngram_buckets = members[0].char_ngram_buckets
        self.char_ngrams_per_word = members[0].char_ngrams_per_word
        #: Whether the members run as one computation (`member_map`).
        self.vectorized = same_architecture(members)
        self.step_outputs = StepOutputs()
        # No weights of its own, and the members (functional models) are
        # built when made: saving and loading need no first call.
        self.built = True

    @property
    def input_name(self):
        return self.members[0].input_name

    @property
    def size(self):
        """k, the number of members."""
        return len(self.members)

    @property
    def averaged_members(self):
        """The indices of the members the inference answer averages."""
        return [i for i in range(self.size) if i not in self.excluded_members]

    @staticmethod
    def _check_excluded(excluded, size):
        """`excluded` as a sorted tuple of distinct ints in [0, size), fewer than size."""
        try:
            values = list(excluded)
        except TypeError:
            values = None
        if (values is None
                or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool)
                           for i in values)
                or len(set(values)) != len(values)
                or not all(0 <= i < size for i in values) or len(values) >= size):
            raise ValueError(
                f"`excluded_members` must be distinct member indices in [0, {size}), fewer "
                f"than the {size} members; received excluded_members={excluded!r}."
            )
        return tuple(sorted(int(i) for i in values))

    def exclude_members(self, indices):
        """Leaves the members `indices` out of the inference answer from now
        on (replacing any earlier exclusion); a change makes the compiled
        predict and evaluate steps trace again."""
        excluded = self._check_excluded(indices, self.size)
        if excluded != self.excluded_members:
            self.excluded_members = excluded
            self.predict_function = None  # traced with the members averaged then
            self.test_function = None

    def member_inputs(self, inputs, index):
        """What member `index` reads of `inputs`: the inputs themselves, or of
        series given with their stems' fixed features (one entry a member,
        `stem_features`), the series with that member's own."""
        if not has_stem_features(inputs):
            return inputs
        return {"features": inputs["features"], "stem_features": inputs["stem_features"][index]}

    def member_logits(self, inputs, training=None):
        """Each member's logits `(B, k, K)`, and from a training call of members
        that mix, each one's mixup weights `(B, k)` (None otherwise)."""
        mixes = bool(training and getattr(self.members[0], "mixup_alpha", 0.0))

        def run(member, member_inputs, shared=None):
            logits = member(member_inputs if shared is None else
                            {"features": shared, "stem_features": member_inputs},
                            training=training)
            if not mixes:
                return logits
            return logits, member.step_outputs.take()[0]  # its lam, kept by its call

        stems = has_stem_features(inputs)
        if self.vectorized and training:
            if stems:  # member i's features at index i: (k, B, ...)
                features = inputs["stem_features"]
                stacked = {key: ops.stack([f[key] for f in features]) for key in features[0]}
                outputs = map_members(self.members, run, stacked, inputs["features"])
            else:
                outputs = map_members(self.members, lambda m, _, x: run(m, x), None, inputs)
            logits, lam = outputs if mixes else (outputs, None)  # (k, B, K), (k, B)
            logits = ops.transpose(logits, (1, 0, 2))
            return logits, (None if lam is None else ops.transpose(lam))
        outputs = [run(m, self.member_inputs(inputs, i)) for i, m in enumerate(self.members)]
        if not mixes:
            return ops.stack(outputs, axis=1), None
        return (ops.stack([o[0] for o in outputs], axis=1),
                ops.stack([o[1] for o in outputs], axis=1))

    def call(self, inputs, training=None):
        logits, lam = self.member_logits(inputs, training)  # (B, k, K), (B, k)
        if training:
            # compute_loss trains each member on its own logits (and mixup).
            self.step_outputs.keep((logits, lam))
            return mean_probability_logits(logits, self.num_classes)
        if self.excluded_members:
            logits = ops.take(logits, self.averaged_members, axis=1)
        return mean_probability_logits(logits, self.num_classes)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        # Explicit super(): AutoGraph cannot resolve the zero-argument form.
        parent = super(ClassifierEnsemble, self)  # noqa: UP008
        return self.training_loss(parent.compute_loss, x, y, y_pred, sample_weight, training)

    def training_loss(self, compute_loss, x, y, y_pred, sample_weight=None, training=True):
        """The loss of this step's call through `compute_loss` (the compiled
        loss of the model `fit` runs: this one, or a task model around it):
        each member's on its own logits, averaged."""
        kept = self.step_outputs.take()
        if not training or kept is None:
            # The ensemble's answer (B, K): evaluation, or Keras' symbolic
            # build, which has no training call.  Per-member weights have no
            # member to weigh here, and the answer is judged on every example.
            if sample_weight is not None and len(sample_weight.shape) == 2:
                sample_weight = None
            return compute_loss(x, y, y_pred, sample_weight, training=training)
        logits, lam = kept
        weights = [sample_weight] * self.size
        if sample_weight is not None and len(sample_weight.shape) == 2:
            if sample_weight.shape[1] != self.size:
                raise ValueError(
                    f"Per-member sample weights must have one column per member ({self.size}); "
                    f"received sample_weight of shape {tuple(sample_weight.shape)}."
                )
            weights = [sample_weight[:, i] for i in range(self.size)]
        losses = [classifier_loss(compute_loss, x, y, logits[:, i],
                                  None if lam is None else lam[:, i], weights[i], training)
                  for i in range(self.size)]
        return ops.mean(ops.stack(losses))

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if sample_weight is not None and len(sample_weight.shape) == 2:
            sample_weight = None  # per-member weights: the metrics see every example
        return super(ClassifierEnsemble, self).compute_metrics(  # noqa: UP008 (AutoGraph)
            x, y, y_pred, sample_weight=sample_weight
        )

    def probabilities(self, logits):
        """Class probabilities of the inference logits: the members' mean."""
        return class_probabilities(logits, self.num_classes)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "members": [keras.saving.serialize_keras_object(m) for m in self.members],
            "excluded_members": list(self.excluded_members),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["members"] = [keras.saving.deserialize_keras_object(m) for m in config["members"]]
        return cls(**config)
