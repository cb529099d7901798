"""training.monitor.progress.RunProgress: a line per epoch (or a bar) with the run's time left."""

import io

import keras
import numpy as np
import pytest

from training.monitor.progress import RunProgress, format_seconds


class _Clock:
    """A fake `time.perf_counter` / `time.time` that advances on demand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class _Tick(keras.callbacks.Callback):
    """Advances the clock: `step` seconds per update, `end` per epoch end."""

    def __init__(self, clock, step, end):
        super().__init__()
        self.clock, self.step, self.end = clock, step, end

    def on_train_batch_end(self, batch, logs=None):
        self.clock.now += self.step

    def on_epoch_end(self, epoch, logs=None):
        self.clock.now += self.end


def _fit(progress, clock, epochs=3, step=2.0, end=5.0):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).standard_normal((8, 3))
    y = np.zeros((8, 2))
    # 8 examples, batch 2: 4 updates per epoch.  The tick runs before the
    # progress callback, as validation callbacks do.
    model.fit(x, y, batch_size=2, epochs=epochs, verbose=0, shuffle=False,
              callbacks=[_Tick(clock, step, end), progress])


@pytest.fixture
def clock(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr("training.monitor.progress.time.perf_counter", clock)
    monkeypatch.setattr("training.monitor.progress.time.time", clock)
    return clock


def test_one_line_per_epoch_with_step_time_and_time_left(clock):
    out = io.StringIO()
    progress = RunProgress(total_steps=12, steps_per_epoch=4, epochs=3, stream=out,
                           interactive=False, started_at=clock.now)
    _fit(progress, clock)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # a file or a pipe: one line per epoch, no bar
    assert "\r" not in out.getvalue()
    assert lines[0].startswith("epoch 1/3  4/4  2 s/step  loss ")
    # After epoch 1: 8 updates left at 2 s, and two epoch ends of 5 s.
    assert lines[0].endswith("run 0:13, ~0:26 left")
    assert lines[1].endswith("run 0:26, ~0:13 left")
    assert lines[2].endswith("run 0:39, ~0:00 left")


def test_a_terminal_gets_a_bar_redrawn_in_place(clock):
    out = io.StringIO()
    progress = RunProgress(total_steps=12, steps_per_epoch=4, epochs=3, stream=out,
                           interactive=True, refresh_seconds=0.0, started_at=clock.now)
    _fit(progress, clock, epochs=1)
    text = out.getvalue()
    assert text.count("\n") == 1  # the epoch's final line
    frames = text.split("\r")[1:]
    assert len(frames) == 5  # one per update, then the epoch line
    assert "2/4 [==========>.........]" in frames[1]
    assert "~0:20 left" in frames[1]  # 10 updates left at 2 s
    assert frames[-1].startswith("epoch 1/3  4/4  2 s/step")


def test_the_plan_can_change_once_a_budget_is_planned(clock):
    out = io.StringIO()
    progress = RunProgress(total_steps=400, steps_per_epoch=4, epochs=100, stream=out,
                           interactive=False, started_at=clock.now)
    progress.set_plan(8)
    _fit(progress, clock, epochs=2)
    assert out.getvalue().splitlines()[-1].endswith("~0:00 left")


def test_arguments_checked():
    with pytest.raises(ValueError, match="total_steps=0"):
        RunProgress(total_steps=0, steps_per_epoch=4, epochs=1)


def test_format_seconds():
    assert format_seconds(59.6) == "1:00"
    assert format_seconds(3725) == "1:02:05"
    assert format_seconds(-3) == "0:00"
