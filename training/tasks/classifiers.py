"""Helpers the classification tasks share (text, series).

Functions, not a base class: each task calls the ones it needs.
"""

import keras

from keras_transformer.models import TransformerClassifier
from training.tasks.common import preset_config, with_cardinality


def build_classifier(config, data, **inputs):
    """A `TransformerClassifier` of the configured preset; `inputs` pick token or series input."""
    m = preset_config(config)
    return TransformerClassifier(
        num_classes=config.num_classes or len(data.label_names), num_layers=m.num_layers,
        hidden_dim=m.hidden_dim, num_heads=m.num_heads, intermediate_dim=m.intermediate_dim,
        dropout=m.dropout, max_sequence_length=m.max_sequence_length, positions=m.positions,
        normalize_first=m.normalize_first, **inputs,
    )  # fmt: skip


def loss_and_metrics():
    """Cross-entropy on logits, and accuracy (the selection score)."""
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return loss, [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]


def accuracy_score(valid):
    """Validation accuracy, the epoch log's `val_accuracy`, to maximise."""
    return (lambda m: m.evaluate(valid, verbose=0, return_dict=True)["accuracy"],
            "val_accuracy", "max")


def test_metrics(task, config, model, data):
    """{"test_<metric>": ...} on the test split."""
    test = with_cardinality(task.make_dataset(config, data.test))
    results = model.evaluate(test, verbose=0, return_dict=True)
    return {f"test_{k}": float(v) for k, v in results.items()}
