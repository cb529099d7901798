"""`model.fit` of the Transformer under a 2-replica MirroredStrategy (pain point 8).

conftest.py splits the CPU into two logical devices, so this runs without GPUs.
"""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.models import Transformer

try:  # the project's padding-masked loss, when training/ provides it
    from training.optimization.losses import MaskedSparseCategoricalCrossentropy
except ImportError:  # pragma: no cover - training/ is developed separately
    MaskedSparseCategoricalCrossentropy = None


class _MirroredStrategy(tf.distribute.MirroredStrategy):
    """A plain MirroredStrategy with its own collective-key range.

    Two strategies in one process otherwise share all-reduce keys from 1 and
    the second fails with "Shape mismatch in the collective instance"
    (tensorflow/tensorflow#62790); other test files create strategies too.
    """

    _key_bases = itertools.count(start=50_000_000, step=100_000)

    def __init__(self, devices):
        self._collective_key_base = next(self._key_bases)
        super().__init__(devices)


def _copy_task(rng, n=16, length=5, vocabulary_size=20):
    """Decoder learns to copy the source: [START] x -> x [END], with padding."""
    source = np.zeros((n, length), "int32")
    for i, size in enumerate(rng.integers(2, length + 1, size=n)):
        source[i, :size] = rng.integers(4, vocabulary_size, size=size)
    decoder_in = np.pad(source, ((0, 0), (1, 0)), constant_values=2)
    labels = np.pad(source, ((0, 0), (0, 1)))
    labels[np.arange(n), (source != 0).sum(1)] = 3  # [END] after the last token
    return {"encoder_token_ids": source, "decoder_token_ids": decoder_in}, labels


@pytest.mark.slow
def test_fit_under_two_replica_mirrored_strategy_reduces_loss():
    """Build, compile and fit under MirroredStrategy over 2 logical CPUs: the
    loss is finite and falls, and the replicas end with identical weights."""
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    strategy = _MirroredStrategy(devices)
    assert strategy.num_replicas_in_sync == 2
    if MaskedSparseCategoricalCrossentropy is not None:
        loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.0)
    else:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    inputs, labels = _copy_task(np.random.default_rng(0))
    dataset = tf.data.Dataset.from_tensor_slices((inputs, labels)).repeat().batch(8)
    with strategy.scope():
        model = Transformer(
            vocabulary_size=20,
            num_layers=1,
            hidden_dim=16,
            num_heads=2,
            intermediate_dim=32,
            max_sequence_length=16,
            dropout=0.0,
        )
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    assert isinstance(model.trainable_weights[0].value, tf.distribute.DistributedValues)
    history = model.fit(
        dataset, steps_per_epoch=4, epochs=5, shuffle=False, verbose=0
    ).history["loss"]
    assert np.all(np.isfinite(history)), history
    assert history[-1] < 0.7 * history[0], history
    # Mirrored variables stay in sync across the two replicas.
    for variable in model.trainable_weights[:3]:
        first, second = (v.numpy() for v in variable.value.values)
        np.testing.assert_array_equal(first, second)
