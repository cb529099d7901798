"""Where a series run's training time goes: tracing and updates, by members and optimizer.

Not a benchmark with a target: a diagnostic for `bench_series_recipe.py`'s
seconds.  On one file pair it does what `python -m training train --config
timeseries` does up to `fit` (read, size the recipe, compute each member's
stem features once, build, compile), then fits the recipe's updates with
no callbacks and prints, for each variant, the seconds to the first update
(the train step's tracing, mostly) and the milliseconds per update after
it: the recipe's members and one, each with the preset's AdamW (fused,
`training.optimization.fused_adam`), Keras' own AdamW and plain SGD (whose
update is a few ops a variable), so that what the members and the
optimizer cost can be told apart.

    python3 benchmarks/profile_series_step.py --train runs/uea/GunPoint/GunPoint_TRAIN.ts \\
        --test runs/uea/GunPoint/GunPoint_TEST.ts

The rows are appended to benchmarks/results/profile_series_step.json
(`--change TEXT`: what the run changed).
"""

import argparse
import os
import time

import common  # first: quiets TensorFlow's start
import keras

from training.config import load_config
from training.optimization.optimizer import build_optimizer
from training.tasks import get_task


class FirstUpdates(keras.callbacks.Callback):
    """When the first update ended, and when the tenth (seconds from `start`)."""

    def __init__(self, start):
        super().__init__()
        self.start, self.ends = start, {}

    def on_train_batch_end(self, batch, logs=None):
        if batch in (0, 10):
            self.ends[batch] = time.perf_counter() - self.start


def profile(train_file, test_file, members, optimizer, seed=0):
    """{"members", "optimizer", "first_update_s", "ms_per_update", "updates"}."""
    task = get_task("timeseries")
    overrides = [f'train_files=["{train_file}"]', f'test_files=["{test_file}"]', f"seed={seed}"]
    if members is not None:
        overrides.append(f"ensemble_size={members}")
    config = load_config("timeseries", overrides)
    data = task.load_data(config, None)
    config = task.resolve_config(config, data)
    task.prepare(config, data, None, write=False)
    stream = task.make_dataset(config, data.train, shuffle=True, repeat=True, training=True)
    keras.utils.set_random_seed(seed)
    model = task.build_model(config, data)
    loss, metrics = task.loss_and_metrics(config)
    optimizers = {"sgd": lambda: keras.optimizers.SGD(1e-3),
                  "keras_adamw": lambda: keras.optimizers.AdamW(1e-3, weight_decay=0.05),
                  "adamw": lambda: build_optimizer(1e-3, 0.05)}  # the preset's, fused
    model.compile(optimizer=optimizers[optimizer](), loss=loss, metrics=metrics)
    model.optimizer.build(model.trainable_variables)
    updates = config.epochs * config.steps_per_epoch
    start = time.perf_counter()
    timer = FirstUpdates(start)
    model.fit(stream, epochs=1, steps_per_epoch=updates, verbose=0, callbacks=[timer])
    total = time.perf_counter() - start
    return {"members": config.ensemble_size or 1, "optimizer": optimizer,
            "first_update_s": round(timer.ends[0], 2),
            "ms_per_update": round(1000 * (total - timer.ends[0]) / (updates - 1), 1),
            "updates": updates}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True, help="a training file (UCR, .ts or .csv)")
    parser.add_argument("--test", required=True, help="its test file")
    parser.add_argument("--change", help="what this run changed or tests, stored with it")
    args = parser.parse_args()
    rows = []
    for members in (None, 1):
        for optimizer in ("adamw", "keras_adamw", "sgd"):
            row = profile(args.train, args.test, members, optimizer)
            rows.append(row)
            print(f"{row['members']} member(s), {row['optimizer']:5s}: first update after "
                  f"{row['first_update_s']:5.2f} s, then {row['ms_per_update']:5.1f} ms an "
                  f"update ({row['updates']} updates)", flush=True)
    data = os.path.relpath(os.path.abspath(args.train), common.REPO_ROOT)
    common.append_result("profile_series_step", {"train_file": data, "rows": rows}, args)


if __name__ == "__main__":
    main()
