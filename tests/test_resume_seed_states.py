"""`ResumableCheckpoint` restores seed-generator states by position.

A generator's variable path carries a name numbered by how many generators
the process has made (`seed_generator_3/...`), so the same model built again
in one process (a test, or a run that rebuilt its model) has other paths.
"""

import os
import re

import keras
import numpy as np
import pytest

from keras_transformer.models import ClassifierEnsemble, TextCNNClassifier
from training.runs.resume import ResumableCheckpoint


def _ensemble(mixup_alpha=0.4, size=2):
    model = ClassifierEnsemble([TextCNNClassifier(
        num_classes=3, vocabulary_size=20, hidden_dim=8, dropout=0.1, max_sequence_length=8,
        ngram_widths=(2,), pooling="max", mixup_alpha=mixup_alpha, name=f"member_{i}") for i in range(size)])
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.optimizer.build(model.trainable_variables)
    return model


def _states(model):
    weights = {id(v) for v in model.weights}
    return [(v.path, np.asarray(v)) for v in model.variables if id(v) not in weights]


def test_seed_states_come_back_into_a_model_built_again(tmp_path):
    first = _ensemble()
    x = np.random.default_rng(0).integers(1, 20, (4, 6)).astype("int32")
    for _ in range(3):
        first(x, training=True)  # advances the mixup and dropout generators
    checkpoint = ResumableCheckpoint(tmp_path, every_steps=1)
    checkpoint.set_model(first)
    checkpoint.save()

    again = _ensemble()
    saved, fresh = _states(first), _states(again)
    assert [p for p, _ in saved] != [p for p, _ in fresh]  # other names, same model
    assert any(not np.array_equal(a, b) for (_, a), (_, b) in zip(saved, fresh, strict=True))
    ResumableCheckpoint(tmp_path, every_steps=1).restore(again)
    for (_, a), (_, b) in zip(saved, _states(again), strict=True):
        np.testing.assert_array_equal(a, b)
    # The same draws follow.
    np.testing.assert_allclose(np.asarray(first(x, training=True)),
                               np.asarray(again(x, training=True)), rtol=1e-6)

    other = _ensemble(mixup_alpha=0.0)  # the same weights, fewer generators: said, not skipped
    with pytest.raises(ValueError, match=re.escape("seed-generator states; the model has")):
        ResumableCheckpoint(tmp_path, every_steps=1).restore(other)


def test_only_the_latest_checkpoint_is_kept_and_it_restores(tmp_path):
    """Each folder holds the optimizer's state: the one `LATEST` names is
    all a restore reads, so the older ones go once it is complete."""
    model = _ensemble()
    checkpoint = ResumableCheckpoint(tmp_path, every_steps=1)
    checkpoint.set_model(model)
    for _ in range(3):
        checkpoint.on_train_batch_end(0)
    assert sorted(d for d in os.listdir(tmp_path) if d.startswith("step-")) == ["step-000000003"]
    assert ResumableCheckpoint(tmp_path, every_steps=1).restore(_ensemble()) == 3
