"""Tests for training.monitor.callbacks."""

import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from training.monitor.callbacks import (
    LearningRateLogger,
    StepScalars,
    WallClockTimer,
    current_learning_rate,
)
from training.optimization.schedule import TransformerSchedule, paper_optimizer


def tiny_fit(rng, callbacks, optimizer, epochs=2):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=optimizer, loss="mse")
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    # 4 examples, batch 2: 2 optimizer steps per epoch.
    return model.fit(x, y, batch_size=2, epochs=epochs, verbose=0, callbacks=callbacks)


def read_scalars(log_dir, tag):
    values = {}
    for path in tf.io.gfile.glob(f"{log_dir}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = float(tf.make_ndarray(value.tensor))
    return values


def test_learning_rate_in_history_follows_the_schedule(rng):
    schedule = TransformerSchedule(hidden_dim=8, warmup_steps=3)
    history = tiny_fit(rng, [LearningRateLogger()], paper_optimizer(8, 3), epochs=3)
    # After epoch e, 2 * (e + 1) updates are done; the next rate is logged.
    expected = [float(schedule(2 * (epoch + 1))) for epoch in range(3)]
    np.testing.assert_allclose(history.history["learning_rate"], expected, rtol=1e-6)
    assert expected[0] != expected[1]


def test_per_step_scalars_in_tensorboard(rng, tmp_path):
    schedule = TransformerSchedule(hidden_dim=8, warmup_steps=3)
    logger = LearningRateLogger(log_dir=tmp_path, update_freq=2)
    tiny_fit(rng, [logger], paper_optimizer(8, 3), epochs=3)
    scalars = read_scalars(tmp_path, "learning_rate")
    assert sorted(scalars) == [2, 4, 6]
    for step, value in scalars.items():
        np.testing.assert_allclose(value, float(schedule(step)), rtol=1e-6)


def test_later_callbacks_see_the_rate_and_time(rng, tmp_path):
    path = tmp_path / "log.csv"
    callbacks = [
        LearningRateLogger(),
        WallClockTimer(),
        keras.callbacks.CSVLogger(path),
    ]
    tiny_fit(rng, callbacks, keras.optimizers.SGD(0.25), epochs=1)
    header, row = path.read_text().splitlines()
    logged = dict(zip(header.split(","), row.split(","), strict=True))
    assert float(logged["learning_rate"]) == 0.25
    assert float(logged["epoch_seconds"]) > 0


def test_current_learning_rate_unwraps_loss_scale_optimizer():
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.125))
    assert current_learning_rate(optimizer) == 0.125


def test_update_freq_validated():
    with pytest.raises(ValueError, match="update_freq=0"):
        LearningRateLogger(update_freq=0)


class _Sleep(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.05)


def test_wall_clock_timer_measures_epochs(rng):
    timer = WallClockTimer()
    history = tiny_fit(rng, [timer, _Sleep()], keras.optimizers.SGD(0.1), epochs=2)
    seconds = history.history["epoch_seconds"]
    assert len(seconds) == 2
    assert all(0.1 <= s < 30 for s in seconds)  # two 0.05 s sleeps per epoch
    assert timer.train_seconds >= sum(seconds)


def test_step_scalars_follow_the_global_step_across_fits(rng, tmp_path):
    # Two fits of the same model (a resume, or the pipeline's segments):
    # the points continue from optimizer.iterations, never restart at 0.
    schedule = TransformerSchedule(hidden_dim=8, warmup_steps=3)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=paper_optimizer(8, 3), loss="mse")
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    for _ in range(2):
        model.fit(x, y, batch_size=2, epochs=2, verbose=0,
                  callbacks=[StepScalars(tmp_path, update_freq=3)])
    rates = read_scalars(tmp_path, "step/learning_rate")
    losses = read_scalars(tmp_path, "step/loss")
    assert sorted(rates) == sorted(losses) == [3, 6]
    for step, value in rates.items():
        np.testing.assert_allclose(value, float(schedule(step)), rtol=1e-6)
    assert all(np.isfinite(v) and v > 0 for v in losses.values())


def test_step_scalars_update_freq_validated():
    with pytest.raises(ValueError, match="update_freq=0"):
        StepScalars("logs", update_freq=0)
