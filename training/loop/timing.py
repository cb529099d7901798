"""Clocks of a budgeted run's `fit`: the updates' pace and the deadline fallback."""

import time

import keras
import numpy as np

from training.recipe.budget import FINAL_SLACK


class StepTimer(keras.callbacks.Callback):
    """Times each update of the current epoch, telling tracing/compiling
    steps from ordinary ones (a budgeted run revises its plan from the pace
    of its last epoch).

    A step that takes over three times the lower quartile traced or compiled
    a new input shape (under XLA, every bucket's shape compiles once; the
    quartile, not the median, stays an ordinary step when half of the timed
    steps compiled).
    """

    def __init__(self):
        super().__init__()
        self.times = []
        self.first_update_at = None  # the `time.time()` its first update ended

    def on_epoch_begin(self, epoch, logs=None):
        self.times = [time.perf_counter()]

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter())
        if self.first_update_at is None:
            self.first_update_at = time.time()

    def durations(self):
        return np.diff(self.times)

    def seconds_per_step(self):
        """Mean time of the later half's steps that compiled nothing.

        The first updates of a run are slower than the rest (the input
        pipeline fills its buffers, memory is first allocated): on Multi30k
        the first 12 averaged 0.55 s and the run went on at 0.50 s, a plan
        10% short.  The later half of the timed steps is the estimate.
        """
        durations = self.durations()
        if not len(durations):
            raise ValueError("seconds_per_step needs at least 1 timed step.")
        if len(durations) < 3:  # a tiny run: the fastest step (the first traced)
            return float(durations.min())
        ordinary = durations <= 3 * np.percentile(durations, 25)
        later = ordinary & (np.arange(len(durations)) >= len(durations) // 2)
        return float(durations[later if later.sum() >= 3 else ordinary].mean())

    def compiles(self):
        """(number of compiling steps, mean extra seconds of one)."""
        durations = self.durations()
        slow = durations[durations > 3 * np.percentile(durations, 25)]
        extra = float(slow.mean() - self.seconds_per_step()) if len(slow) else 0.0
        return len(slow), extra


class Deadline(keras.callbacks.Callback):
    """Stops `fit` early enough for the run to end by `end` (time.time() seconds).

    A fallback only: the plan is made to end before it.  What a run still
    pays after the stop is kept back with `keep`: the final evaluation
    (`seconds_final`) and, since `fit` validates and saves at the end of
    the epoch it stopped in, one end-of-epoch validation
    (`seconds_after_stop`).  Stopping at `end - seconds_final` alone left
    that validation outside the budget: a 60-minute run wrote its
    metrics.json 2.4 s late.  The final evaluation is kept with a margin
    (`FINAL_SLACK`), for the machine's pace between its timing and its run.
    """

    def __init__(self, end):
        super().__init__()
        self.end = float(end)
        self.seconds_final = 0.0
        self.deadline = self.end
        self.hit = False

    def keep(self, seconds_final, seconds_after_stop):
        """Stops at `end - seconds_final * (1 + FINAL_SLACK) - seconds_after_stop` from now on."""
        self.seconds_final = float(seconds_final) * (1 + FINAL_SLACK)
        self.deadline = self.end - self.seconds_final - float(seconds_after_stop)

    def seconds_to_final(self):
        """Wall clock left for training, validation included, before the final evaluation."""
        return self.end - self.seconds_final - time.time()

    def passed(self):
        """Whether the clock is past the deadline (which then counts as hit)."""
        if time.time() > self.deadline:
            self.hit = True
        return self.hit

    def on_train_batch_end(self, batch, logs=None):
        if self.passed():
            self.model.stop_training = True
