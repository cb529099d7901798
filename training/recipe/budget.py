"""The arithmetic of a time budget: given measurements, a run's next plan.

`Budget` is the planner: the loop (`training.loop.time_budget.TimeBudget`)
times updates, validations and the final evaluation, and passes the
figures; `Budget` returns a frozen `training.recipe.plan.Plan`, which the
loop applies.  Nothing here measures, trains or imports a framework.
`Stopwatch` counts the seconds of each phase for `metrics.json`.
"""

import dataclasses
import math
import time

from training.recipe import adaptive
from training.recipe.plan import Measured, Plan

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


# Updates re-timed after dropout is switched off (they run faster).
RETIME_STEPS = CALIBRATION_STEPS // 2


@dataclasses.dataclass(frozen=True)
class Costs:
    """What the loop timed before planning, in seconds: what a plan is made of."""

    per_step: float  # one update, a share of the checkpoint saves included
    save: float  # one checkpoint save
    compiling: float  # input shapes still to compile (XLA)
    validation: float  # what ends an epoch
    final: float  # selection, the test evaluation and saving, compiles included


@dataclasses.dataclass(frozen=True)
class Budget:
    """The arithmetic of a run's plan: given measurements, the next `Plan`.

    It never measures nor changes anything: the loop
    (`training.loop.time_budget.TimeBudget`) times updates, validations and
    the final evaluation, passes the figures here and applies the plan it
    gets back to the model, the schedule and `plan.json`.

    Attributes:
        minutes: the whole command's time budget (None: `epochs` passes).
        steps_per_epoch: updates between two validations.
        max_steps: the plan never exceeds this (`epochs` passes).
        dropout_min_epochs: a plan of fewer passes trains without dropout.
        schedule: "auto" (the warm-up follows the planned updates) or "paper".
        warmup_steps: the config's warm-up (None: a share of the updates).
        checkpoint_every_steps: a checkpoint save every this many updates.
        steps_per_pass: updates in one pass over the training data, where an
            epoch is not one (a recipe's `steps_per_epoch`); None: an epoch
            is a pass.
    """

    minutes: float | None
    steps_per_epoch: int
    max_steps: int
    dropout_min_epochs: float
    schedule: str
    warmup_steps: int | None
    checkpoint_every_steps: int
    steps_per_pass: int | None = None

    @classmethod
    def of(cls, config, steps_per_epoch, steps_per_pass=None):
        """The budget of `config` (its budget and recipe fields) at
        `steps_per_epoch`, with passes of `steps_per_pass` updates (None: an
        epoch)."""
        return cls(config.time_budget_minutes, int(steps_per_epoch),
                   config.epochs * int(steps_per_epoch), config.dropout_min_epochs,
                   config.schedule, config.warmup_steps, config.checkpoint_every_steps,
                   None if steps_per_pass is None else int(steps_per_pass))

    def passes(self, total_steps):
        """Passes over the training data that `total_steps` updates make."""
        return total_steps / (self.steps_per_pass or self.steps_per_epoch)

    def short(self, total_steps):
        """True when `total_steps` make fewer than `dropout_min_epochs` passes.

        Passes, not epochs: a recipe may size an epoch by its validations
        rather than by the data (`training.recipe.series`: all of a stem
        run's updates, 30 passes or more), and what dropout needs is the
        data seen several times.
        """
        return bool(self.passes(total_steps) < self.dropout_min_epochs)

    def calibration_steps(self):
        """Updates timed before planning."""
        return min(CALIBRATION_STEPS, max(3, self.max_steps // 4), self.steps_per_epoch)

    def per_update(self, seconds_per_step, seconds_save):
        """An update's planned cost: its timed pace plus a save every
        `checkpoint_every_steps` updates."""
        return seconds_per_step + seconds_save / self.checkpoint_every_steps

    def first_plan(self, recipe, num_layers):
        """The plan of a fresh run that has its recipe (for `epochs` passes):
        final without a budget; to be timed (`calibrated`) under one."""
        planned = self.minutes is None
        return Plan(recipe, int(num_layers), planned and self.short(recipe.total_steps),
                    planned=planned)

    def total_steps(self, costs, done_steps, elapsed):
        """The updates that fit in what is left of the budget at `costs`,
        `elapsed` seconds after the command started."""
        return plan_total_steps(60 * self.minutes - elapsed, costs.per_step,
                                self.steps_per_epoch, done_steps, costs.validation,
                                costs.final, self.max_steps)

    def retimes_without_dropout(self, total_steps, done_steps):
        """Whether a run found short is long enough to re-time its updates
        without dropout (`RETIME_STEPS` of them) before planning again."""
        return total_steps - done_steps > 4 * RETIME_STEPS

    def calibrated(self, plan, costs, total_steps, dropout_off, elapsed, evaluation):
        """`plan` for `total_steps` updates, timed at `costs` (`elapsed`
        seconds into the command), with the task's `evaluation` plan; under
        "auto" the warm-up follows the new total."""
        warmup = plan.recipe.warmup_steps
        if self.schedule == "auto":
            warmup = min(self.warmup_steps or adaptive.warmup_steps(total_steps),
                         total_steps - 1)
        measured = Measured(
            seconds_per_step=round(costs.per_step, 4),
            seconds_compiling_later=round(costs.compiling, 1),
            seconds_per_validation=round(costs.validation, 2),
            seconds_reserved_for_final=round(costs.final, 1),
            planned_at_second=round(elapsed, 1),
            evaluation=evaluation,
        )
        recipe = dataclasses.replace(plan.recipe, total_steps=int(total_steps),
                                     warmup_steps=int(warmup))
        return plan.replace(recipe=recipe, dropout_off=bool(dropout_off), measured=measured)

    def preset_depth(self, plan, cost_ratio, elapsed):
        """(whether the preset's depth makes `dropout_min_epochs` passes, the
        plan recording its estimated passes).

        `plan` was timed on a shallower model; the deeper one's plan is
        estimated from it, its times scaled by `cost_ratio` (the loop's
        `depth_cost_ratio`).  This is the rule a run of `epochs` passes
        follows: the preset's depth in a run that is not short.  Deciding on
        the shallower model's passes instead built the deeper one for runs it
        made short: Multi30k de->en in 10 minutes on a 2-core host planned
        2+2 layers for 3.0 passes, so built 3+3, which then made 2.2-2.4
        passes without dropout.  Recorded in plan.json ("preset_depth_passes").
        """
        if plan.dropout_off:  # short already at the shallower depth
            return False, plan
        measured = plan.measured
        total = plan_total_steps(
            60 * self.minutes - elapsed, measured.seconds_per_step * cost_ratio,
            self.steps_per_epoch, 0, measured.seconds_per_validation * cost_ratio,
            measured.seconds_reserved_for_final * cost_ratio, self.max_steps,
        )
        passes = round(self.passes(total), 2)
        return not self.short(total), plan.with_measured(preset_depth_passes=passes)

    def revised(self, plan, seconds_per_step, seconds_to_final, done_steps):
        """`plan` revised from an epoch's pace, or None where it stays.

        The updates left are what fits in `seconds_to_final` (the wall clock
        left before the final evaluation) at `seconds_per_step` (the plan
        counts the last validation itself); the schedule still ends
        annealed at the new last update.
        """
        if self.schedule != "auto":
            return None
        total = plan_total_steps(seconds_to_final, seconds_per_step, self.steps_per_epoch,
                                 done_steps, plan.measured.seconds_per_validation, 0.0,
                                 self.max_steps)
        # plan_total_steps gives at least 2 more: no time left is not a plan.
        if (total <= max(done_steps + 2, plan.recipe.warmup_steps + 1)
                or total == plan.total_steps):
            return None
        recipe = dataclasses.replace(plan.recipe, total_steps=int(total))
        return plan.replace(recipe=recipe).with_measured(
            seconds_per_step=round(seconds_per_step, 4),
            revisions=plan.measured.revisions + 1)

    def found_short(self, plan, done_steps):
        """`plan` without dropout from `done_steps` on where a revision made
        it short; None where it keeps dropout (or already trains without).

        Planned from its first updates, which run fast, a run may look long
        enough for dropout and be short at its measured pace.  A Multi30k
        de->en ten-minute run planned 3.3 passes, made 2.7 with dropout, and
        its validation loss after two passes was 3.35 against 3.22-3.26 for
        runs without.
        """
        if plan.dropout_off or not self.short(plan.total_steps):
            return None
        return plan.replace(dropout_off=True).with_measured(
            dropout_off_from_step=int(done_steps))

    def reserve_final(self, plan, seconds_final, evaluation):
        """`plan` with the final evaluation re-timed at `seconds_final`."""
        return plan.with_measured(seconds_reserved_for_final=round(seconds_final, 1),
                                  evaluation=evaluation)
