"""One worker of the streamed multi-worker tests in tests/test_multiworker_streaming.py.

    TF_CONFIG='{"cluster": ..., "task": ...}' \
        python3 tests/multiworker_stream_worker.py RUN_DIR PATTERNS_JSON [ROWS.json [FIELDS_JSON]]

Trains the `tiny` preset with `strategy=multi_worker` on the shard files
PATTERNS_JSON names (a JSON list of the source and target globs), streamed
(`in_memory_limit_mb=0`), into the shared RUN_DIR.  With ROWS.json, it then
writes the rows one pass of its own share of the stream yields (this
worker's position read from `TF_CONFIG`, as the strategy reads it), as
[[encoder ids, labels], ...] without padding, and, beside it,
history{INDEX}.json (INDEX its worker index): what this worker logged,
`{"epochs": the run's per-epoch history, "batches": [the logs fit's
callbacks got after each training batch, ...]}`.  FIELDS_JSON, a JSON list of
`FIELD=VALUE`, changes the config beyond `OVERRIDES` (ROWS.json may be "" then).
"""

import json
import os
import sys
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from training.config import load_config  # noqa: E402
from training.distribute import worker_position  # noqa: E402
from training.tasks import get_task  # noqa: E402
from training.train import train  # noqa: E402

#: The run's fields beyond the `tiny` preset: small, streamed, checkpointed often.
OVERRIDES = ("dataset=files", "in_memory_limit_mb=0", "strategy=multi_worker",
             "deterministic=true", "epochs=2", "eval_sentences=0", "beam_size=1",
             "checkpoint_every_steps=2", "tokens_per_batch=192", "vocabulary_size=120")


def config_for(patterns, fields=()):
    """The test run's `TrainingConfig` reading `patterns` (source, target globs),
    `fields` (`FIELD=VALUE` strings) changed beyond `OVERRIDES`."""
    return load_config("tiny", [*OVERRIDES, f"train_files={json.dumps(list(patterns))}",
                                *fields])


def share_rows(config, run_dir):
    """Rows of one pass of this worker's share, as the run streams it (all
    its batches: `training=False` keeps a jit-compiled run's last, short one)."""
    task = get_task(config.task)
    data = task.load_data(config, run_dir)
    config = task.resolve_config(config, data)
    task.prepare(config, data, run_dir, write=False)  # the chief's saved vocabulary
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    data.train.workers = worker_position(types.SimpleNamespace(cluster_resolver=resolver))
    rows = []
    for features, labels in task.make_dataset(config, data.train, shuffle=True):
        for enc, lab in zip(features["encoder_token_ids"].numpy(), labels.numpy(),
                            strict=True):
            rows.append([enc[enc > 0].tolist(), lab[lab > 0].tolist()])
    return rows


def record_batch_logs():
    """A list that receives, from now on, the logs (name: float) every
    training batch's callbacks get (progress, step scalars, budget)."""
    batches = []
    on_batch_end = keras.callbacks.CallbackList.on_train_batch_end

    def recording(callbacks, batch, logs=None):
        batches.append({name: float(np.asarray(value)) for name, value in (logs or {}).items()
                        if np.asarray(value).dtype.kind in "fi"})
        return on_batch_end(callbacks, batch, logs)

    keras.callbacks.CallbackList.on_train_batch_end = recording
    return batches


def main(run_dir, patterns_json, rows_path=None, fields_json="[]"):
    config = config_for(json.loads(patterns_json), json.loads(fields_json))
    batches = record_batch_logs()
    metrics = train(config, run_dir, verbose="auto")
    if rows_path:
        with open(rows_path, "w", encoding="utf-8") as f:
            json.dump(share_rows(config, run_dir), f)
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        history_path = os.path.join(os.path.dirname(rows_path), f"history{index}.json")
        with open(history_path, "w", encoding="utf-8") as f:
            json.dump({"epochs": metrics["history"], "batches": batches}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
