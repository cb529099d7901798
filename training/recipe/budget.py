"""Wall-clock accounting and the plan of a time-budgeted run.

`time_budget_minutes=N` bounds the whole command, from its start to
`metrics.json`.  After a few updates the run knows its step time, and plans
how many updates fit in what is left once validation, model selection and
the final test evaluation are paid for; the schedule then anneals exactly
at the last planned update.  The plan is written to `plan.json`, so a
killed run resumes with the same schedule and ends with the same weights.
"""

import json
import math
import os
import time

import keras
import numpy as np

# Updates timed before planning: the first (tracing) is not counted.
CALIBRATION_STEPS = 24
# Part of the budget kept back for what the estimate misses.
SAFETY = 0.04
# The deadline keeps the final evaluation's estimate plus this share of it.
# The estimate is a decode timed at the end of the last whole epoch, and
# the machine's pace drifts: in one 60-minute run on a 2-core host the
# updates slowed from 0.348 to 0.409 s in the last two epochs, and the
# final evaluation took 41.3 s against 36.7 s kept, so metrics.json came
# 6.5 s late (the run before had kept 35.3 s and used 33.4).
FINAL_SLACK = 0.25
# What a run still does after its test evaluation: model.keras (0.5 s for a
# 3+3-layer Multi30k model on a 2-core host), metrics.json and the
# last TensorBoard events.  An optional part of the test (the beam search)
# starts only if it should end this long before the budget does.
SECONDS_TO_SAVE = 3.0
# The test set's beam search is skipped when it would cost more than this
# share of the budget (greedy BLEU is still reported).
BEAM_SHARE = 0.15


class Stopwatch:
    """Seconds spent per phase, plus the total since `started_at`."""

    def __init__(self, started_at=None):
        self.started_at = time.time() if started_at is None else float(started_at)
        self.phases = {}

    def elapsed(self):
        return time.time() - self.started_at

    def phase(self, name):
        watch = self

        class _Phase:
            def __enter__(self):
                self.start = time.time()

            def __exit__(self, *exc):
                watch.phases[name] = watch.phases.get(name, 0.0) + time.time() - self.start

        return _Phase()

    def report(self):
        seconds = {f"{k}_seconds": round(v, 1) for k, v in self.phases.items()}
        seconds["total_seconds"] = round(self.elapsed(), 1)
        return seconds


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

    def on_epoch_begin(self, epoch, logs=None):
        self.times = [time.perf_counter()]

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter())

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


def plan_total_steps(seconds_left, seconds_per_step, steps_per_epoch, done_steps,
                     seconds_per_validation, seconds_final, max_steps):
    """Updates that fit: S * t + ceil(S / spe) * v + final <= seconds_left.

    Args:
        seconds_left: wall clock left of the budget now.
        seconds_per_step: measured time of one update.
        steps_per_epoch: updates between two validations.
        done_steps: updates already made (counted in the total).
        seconds_per_validation: one end-of-epoch validation.
        seconds_final: model selection, test evaluation and saving.
        max_steps: the plan never exceeds this (e.g. `epochs` passes).

    Returns:
        The planned total number of updates, at least done_steps + 2.
    """
    usable = seconds_left * (1 - SAFETY) - seconds_final
    per_step = seconds_per_step + seconds_per_validation / steps_per_epoch
    more = max(2, int(usable / per_step))
    # The last validation happens at the run's end even mid-epoch.
    if more > 2 and usable - more * per_step < seconds_per_validation:
        more = max(2, more - math.ceil(seconds_per_validation / seconds_per_step))
    return int(min(max_steps, done_steps + more))


def write_plan(path, plan):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(plan, f, indent=2)
    os.replace(tmp, path)


def read_plan(path):
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)
