"""One worker of the multi-worker test in tests/test_distribute.py.

    TF_CONFIG='{"cluster": ..., "task": ...}' \
        python3 tests/multiworker_worker.py DATA.npz OUTPUT.npz

Trains `tiny_model` with `MultiWorkerMirroredStrategy` (one replica per
process) on the data in DATA.npz and writes the final weights and per-epoch
losses to OUTPUT.npz. `train` is shared with the single-device reference.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from training.optimization.losses import MaskedSparseCategoricalCrossentropy  # noqa: E402

EPOCHS = 2
GLOBAL_BATCH = 2


def tiny_model(vocabulary_size, width):
    return keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(vocabulary_size, width),
            keras.layers.Dense(vocabulary_size),
        ]
    )


def train(strategy, data):
    """Trains from `data["w0"], data["w1"], ...`; returns (weights, losses)."""
    initial = [data[f"w{i}"] for i in range(3)]
    with strategy.scope():
        model = tiny_model(*initial[0].shape)
        model.set_weights(initial)
        model.compile(
            optimizer=keras.optimizers.SGD(0.5),
            loss=MaskedSparseCategoricalCrossentropy(),
        )
    dataset = tf.data.Dataset.from_tensor_slices((data["inputs"], data["labels"]))
    options = tf.data.Options()
    # Worker k takes the k-th slice of every global batch.
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    dataset = dataset.batch(GLOBAL_BATCH).with_options(options)
    history = model.fit(dataset, epochs=EPOCHS, shuffle=False, verbose=0)
    return model.get_weights(), np.array(history.history["loss"])


def main(data_path, output_path):
    from training.distribute import build_strategy

    strategy = build_strategy("multi_worker")
    assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
    weights, losses = train(strategy, dict(np.load(data_path)))
    np.savez(output_path, losses=losses, **{f"w{i}": w for i, w in enumerate(weights)})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
