"""Helpers the classification tasks share (text, series, images).

Functions, not a base class: each task calls the ones it needs.  What
the classifiers share once trained (outputs, the served module, the TFLite
program) is one `training.serving.task_serving.ClassifierServing`.
"""

import warnings

import keras
import numpy as np

from keras_transformer.models import (
    ClassifierEnsemble,
    TransformerClassifier,
)
from training.optimization.losses import SparseSmoothedCrossentropy
from training.tasks.common import preset_config, with_cardinality


class LearnedNothingWarning(UserWarning):
    """A cross-fitted member no better, on the sentences it left out, than
    always answering their most common class."""


def build_classifier(config, data, member):
    """The classifier of the configured preset, or with `config.ensemble_size`
    k > 1 a `ClassifierEnsemble` of k of them, each from its own draw of the
    (seeded) initialisers.

    `member(m, num_classes, index, **name)` builds one classifier (stem first,
    then the model) of the preset `m` (`preset_config`, the config's
    overrides applied); `index` is its place in the ensemble (0 alone), for
    a stem that draws its own random kernels.
    """
    m = preset_config(config)
    if config.num_classes:
        check_num_classes(config.num_classes, data.label_names)
    num_classes = config.num_classes or len(data.label_names)
    size = config.ensemble_size or 1
    if size == 1:
        return member(m, num_classes, 0)
    return ClassifierEnsemble([member(m, num_classes, i, name=f"member_{i}")
                               for i in range(size)])


def transformer_classifier(m, num_classes, stem, **options):
    """A `TransformerClassifier` on `stem` with the encoder of the preset `m`;
    `options`: the task's head options (n-gram widths, pooling, mixup) and name."""
    return TransformerClassifier(
        stem, num_classes, num_layers=m.num_layers, num_heads=m.num_heads,
        intermediate_dim=m.intermediate_dim, dropout=m.dropout,
        normalize_first=m.normalize_first, **options,
    )


def loss_and_metrics(label_smoothing=0.0, num_classes=0):
    """Cross-entropy on logits (label-smoothed by `label_smoothing`), and
    accuracy (the selection score).

    `num_classes=1` is one sigmoid logit for two classes (ids 0 and 1):
    binary cross-entropy, whose smoothing moves the targets to eps/2 and
    1 - eps/2, and accuracy at logit 0 (probability 0.5), the threshold
    `outputs` serves.  A softmax loss on a single logit would be 0 whatever
    the weights, and the model would silently learn nothing.
    """
    if num_classes == 1:
        loss = keras.losses.BinaryCrossentropy(from_logits=True, label_smoothing=label_smoothing)
        return loss, [keras.metrics.BinaryAccuracy(name="accuracy", threshold=0.0)]
    if label_smoothing:
        loss = SparseSmoothedCrossentropy(label_smoothing, from_logits=True)
    else:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return loss, [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]


def check_num_classes(num_classes, label_names):
    """A given `num_classes` must hold the data's classes: 1 (a sigmoid)
    needs exactly two, and 2 or more at least as many as there are."""
    found = len(label_names)
    if num_classes == 1 and found != 2:
        raise ValueError(
            f"num_classes=1 (one sigmoid output) needs exactly two classes; the training "
            f"file has {found}: {list(label_names)[:10]}. Leave num_classes at 0 to count them."
        )
    if num_classes > 1 and num_classes < found:
        raise ValueError(
            f"num_classes={num_classes} is fewer than the {found} classes of the training "
            f"file ({list(label_names)[:10]}). Leave num_classes at 0 to count them."
        )


def accuracy_score(valid):
    """Validation accuracy, the epoch log's `val_accuracy`, to maximise."""
    return (lambda m: m.evaluate(m.prepared(valid), verbose=0, return_dict=True)["accuracy"],
            "val_accuracy", "max")


def test_metrics(task, config, model, data):
    """{"test_<metric>": ...} on the test split."""
    test = with_cardinality(task.make_dataset(config, data.test))
    results = model.evaluate(model.prepared(test), verbose=0, return_dict=True)
    return {f"test_{k}": float(v) for k, v in results.items()}


class OutOfFold:
    """Out-of-fold accuracy and loss of a cross-fitted `ClassifierEnsemble`.

    Member i was trained without the examples of fold i, so each of those
    is scored by member i alone: an estimate of what one member does on
    sentences it never saw, free of the other members' memory of them.

    Args:
        inputs: Model inputs of the validation examples (token ids, 0-padded).
        labels: Their class ids `(N,)`.
        folds: Their fold `(N,)`: i for the examples member i left out.
    """

    def __init__(self, inputs, labels, folds):
        self.inputs = np.asarray(inputs)
        self.labels = np.asarray(labels, "int32")
        self.folds = np.asarray(folds)

    def logits(self, model, batch_size=256):
        """`(N, K)` float32: each example's logits from the member that left it out."""
        out = None
        for i, member in enumerate(model.backbone.members):
            rows = np.flatnonzero(self.folds == i)
            for start in range(0, len(rows), batch_size):
                chunk = rows[start:start + batch_size]
                logits = keras.ops.convert_to_numpy(
                    member(self.inputs[chunk], training=False)).astype(np.float32)
                if out is None:
                    out = np.zeros((len(self.labels), logits.shape[-1]), np.float32)
                out[chunk] = logits
        return out

    def scores(self, model):
        """{"accuracy", "loss"}: the compiled loss on the out-of-fold logits;
        and per member i, "member_accuracy" (on fold i) beside "fold_majority"
        (fold i's most common class's share: what a member that learned
        nothing scores).  The ensemble's figures hide a member stuck at
        chance; these show it."""
        logits = self.logits(model)
        if logits.shape[-1] == 1:
            predicted, y = (logits[:, 0] > 0).astype("int32"), self.labels[:, None]
        else:
            predicted, y = logits.argmax(-1), self.labels
        loss = keras.ops.convert_to_numpy(model.loss(y, logits))
        correct = predicted == self.labels
        members, majority = [], []
        for i in range(len(model.backbone.members)):
            rows = self.folds == i
            members.append(round(float(correct[rows].mean()), 4) if rows.any() else None)
            counts = np.bincount(self.labels[rows]) if rows.any() else np.zeros(1)
            majority.append(round(float(counts.max() / max(rows.sum(), 1)), 4))
        return {"accuracy": float(correct.mean()), "loss": float(loss),
                "member_accuracy": members, "fold_majority": majority}

    @staticmethod
    def learned_nothing(scores):
        """The indices of the members whose accuracy on their own fold is no
        better than always answering that fold's most common class."""
        return [i for i, (accuracy, majority) in enumerate(
                    zip(scores["member_accuracy"], scores["fold_majority"], strict=True))
                if accuracy is not None and accuracy <= majority]

    @staticmethod
    def warn_if_a_member_learned_nothing(scores, excluded=()):
        """Warns, naming each member that learned nothing (`learned_nothing`)
        and whether the ensemble's answer leaves it out (`excluded`)."""
        for i in OutOfFold.learned_nothing(scores):
            accuracy, majority = scores["member_accuracy"][i], scores["fold_majority"][i]
            fate = ("so the ensemble's answer leaves it out (excluded_members)" if i in excluded
                    else "and the ensemble averages it in (no member did better)")
            warnings.warn(
                f"Cross-fitted member {i} scores {accuracy:.3f} on the sentences it left "
                f"out, no better than always answering their most common class "
                f"({majority:.3f}): it learned nothing, {fate}. "
                "On MR this was the classifier head's ReLUs, all inactive after two epochs "
                "with dropout 0.5; a lower model.dropout avoids it.",
                LearnedNothingWarning,
                stacklevel=2,
            )

    @staticmethod
    def exclude_members_that_learned_nothing(model, scores):
        """Leaves out of `model`'s answer (`ClassifierEnsemble.exclude_members`)
        the members that learned nothing, unless none learned anything; warns
        naming them.  Returns the excluded indices."""
        useless = OutOfFold.learned_nothing(scores)
        excluded = useless if len(useless) < len(model.backbone.members) else []
        model.backbone.exclude_members(excluded)
        OutOfFold.warn_if_a_member_learned_nothing(scores, excluded)
        return excluded

    def __call__(self, model):
        """The selection score: out-of-fold accuracy."""
        return self.scores(model)["accuracy"]


class OutOfFoldLogs(keras.callbacks.Callback):
    """Puts the out-of-fold scores in the epoch logs as `val_accuracy` and
    `val_loss` (the text task's `fit` makes no validation pass of its own
    when cross-fitted: the whole ensemble's members trained on most of
    those examples); place it before the callbacks that read them
    (selection, TensorBoard)."""

    def __init__(self, out_of_fold):
        super().__init__()
        self.out_of_fold = out_of_fold

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            scores = self.out_of_fold.scores(self.model)
            logs["val_accuracy"], logs["val_loss"] = scores["accuracy"], scores["loss"]
