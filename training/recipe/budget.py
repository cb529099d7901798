"""The arithmetic of a time budget: how many updates fit, and its margins.

`training.loop.time_budget.TimeBudget` times a run and plans it with
these; `Stopwatch` counts the seconds of each phase for `metrics.json`.
"""

import math
import time

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
        self.marks = {}

    def mark(self, name, at=None):
        """Notes when `name` first happened (`time.time()` `at`, default now)."""
        at = time.time() if at is None else at
        self.marks.setdefault(name, at - self.started_at)

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
        seconds.update({f"{k}_at_second": round(v, 1) for k, v in self.marks.items()})
        seconds["total_seconds"] = round(self.elapsed(), 1)
        return seconds


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


def short_run(config, total_steps, steps_per_epoch):
    """True when the run is planned for fewer than `dropout_min_epochs` passes."""
    return bool(total_steps / steps_per_epoch < config.dropout_min_epochs)


def seconds_per_update(config, timer, seconds_save):
    """An update's planned cost: the timed pace plus a save every `checkpoint_every_steps`."""
    return timer.seconds_per_step() + seconds_save / config.checkpoint_every_steps
