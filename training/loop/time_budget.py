"""The time budget of a run: its clock, its plan and the plan's revisions.

`time_budget_minutes=N` bounds the whole command, from its start to
`metrics.json`.  A run does not know beforehand how many updates fit, so
`TimeBudget` finds out, in this order (`training/train.py` calls each step):

1. `TimeBudget.for_run` reads `plan.json` (a resumed run goes on with the
   plan it made) and, for a fresh budgeted run, starts the `Deadline`.
2. `resolve_recipe`, once the model is built: a plan without a recipe gets
   `adaptive.resolve`'s, for `epochs` passes (final in a run without a
   budget).
3. `calibrate` (budgeted runs): times `CALIBRATION_STEPS` updates, one
   validation pass and the task's final evaluation, then plans how many
   updates fit in what is left once validation, model selection and the
   test are paid for (`plan_total_steps`); the schedule then anneals
   exactly at the last planned update.  A run found short (fewer than
   `dropout_min_epochs` passes) trains without dropout.
   `preset_depth_is_long` says whether a run timed at its short-run depth
   should build the preset's depth instead (`start_over`);
   `finish_planning` then makes the plan final and the `Deadline` keep
   the final evaluation's time.
4. `settle`: the depth and dropout are recorded and `plan.json` written,
   so a killed run resumes with the same schedule and ends with the same
   weights.
5. `revise`, after each epoch of a budgeted run: the final evaluation is
   re-timed and `total_steps` re-planned from the epoch's pace (the first
   updates run fast); the `Deadline` is the fallback that stops `fit`
   if the machine slows down after that.

`training.recipe.budget.Stopwatch` counts the seconds of each phase for
`metrics.json`; `training.loop.timing.StepTimer` times the updates of an
epoch.  The plan itself is a `training.recipe.plan.Plan`.
"""

import dataclasses
import os
import time

import numpy as np

from training.loop.dropout import disable_dropout
from training.loop.timing import Deadline, StepTimer
from training.recipe import adaptive
from training.recipe.budget import (
    CALIBRATION_STEPS,
    SECONDS_TO_SAVE,
    plan_total_steps,
    seconds_per_update,
    short_run,
)
from training.recipe.plan import Plan


@dataclasses.dataclass
class _Costs:
    """What a calibration timed, in seconds: the figures a plan is made of."""

    per_step: float  # one update, a share of the checkpoint saves included
    save: float  # one checkpoint save
    compiling: float  # input shapes still to compile (XLA)
    validation: float  # what ends an epoch
    final: float  # selection, the test evaluation and saving, compiles included


class TimeBudget:
    """A run's plan, and for a budgeted run the clock that makes and revises it.

    Every run has one: without a budget it only holds the plan (recipe,
    depth, dropout) and writes it.  See the module's docstring for the
    order of its steps.

    The methods that time or change the model take `session`, what the
    loop built for one model: its `config`, `task`, `data`, `model`,
    `schedule`, `checkpoint` (whose `step` and `save_seconds` they read;
    it is one of the timed `fit`s' callbacks) and `validation_score`.

    Args:
        config: the run's `TrainingConfig` (its budget and recipe fields;
            nothing read here changes when the run changes depth).
        watch: the command's `Stopwatch` (the budget counts from its start).
        steps_per_epoch: updates between two validations.
        plan: the `Plan` so far (None: none yet).
        deadline: the `Deadline` of a fresh budgeted run; None otherwise
            (a resumed run follows its plan, revises nothing, and has no
            fallback stop).
        path: where `plan.json` is written (None: nowhere).
        is_chief: whether this process writes `plan.json`.
    """

    def __init__(self, config, watch, steps_per_epoch, plan=None, deadline=None, path=None,
                 is_chief=True):
        self.config = config
        self.watch = watch
        self.steps_per_epoch = int(steps_per_epoch)
        # The plan never exceeds `epochs` passes.
        self.max_steps = config.epochs * self.steps_per_epoch
        self.plan = plan
        self.deadline = deadline
        # Times each epoch of the budgeted run's `fit`: its revisions' pace.
        self.timer = StepTimer() if deadline is not None else None
        self.path = path
        self.is_chief = is_chief

    @classmethod
    def for_run(cls, config, watch, steps_per_epoch, run_dir, resumed, is_chief=True):
        """The budget of a run in `run_dir`, with the plan its `plan.json` holds."""
        path = os.path.join(run_dir, "plan.json")
        deadline = None
        if config.time_budget_minutes is not None and not resumed:
            deadline = Deadline(watch.started_at + 60 * config.time_budget_minutes)
        return cls(config, watch, steps_per_epoch, Plan.read(path), deadline, path, is_chief)

    def write(self):
        """Writes the plan to `plan.json` (the chief only)."""
        if self.is_chief and self.path is not None:
            self.plan.write(self.path)

    # --- the recipe ---------------------------------------------------------------

    def resolve_recipe(self, config, task, hidden_dim, batch_tokens):
        """The plan's recipe (a dict `adaptive.build_schedule` reads); a plan
        without one (none yet, or only a depth) gets `adaptive.resolve`'s,
        for `epochs` passes, planned at once unless the run is budgeted."""
        if self.plan is None or not self.plan.has_recipe():
            recipe = adaptive.resolve(config, task, hidden_dim, batch_tokens, self.max_steps)
            self.plan = Plan(**recipe, planned=config.time_budget_minutes is None)
        return self.plan.recipe()

    # --- calibration --------------------------------------------------------------

    def calibrate(self, session, datasets):
        """Times a few updates and one validation, then fixes the plan.

        `datasets`: the run's endless training stream (`train`) and its
        validation dataset (`valid`).  The timed updates are the run's
        first: they count towards `total_steps`.
        """
        config, plan = self.config, self.plan
        costs = self._time_calibration(session, datasets)
        total = self._plan_total(costs, session.checkpoint.step)
        plan.dropout_off = short_run(config, total, self.steps_per_epoch)
        retime = CALIBRATION_STEPS // 2
        if (plan.dropout_off and disable_dropout(session.model)
                and total - session.checkpoint.step > 4 * retime):
            # Updates without dropout are faster (~15% on a CPU): time them
            # (the first one retraces the step), then plan again.
            timer = _timed_updates(session, datasets.train, retime)
            costs.per_step = seconds_per_update(config, timer, costs.save)
            total = self._plan_total(costs, session.checkpoint.step)
        if config.schedule == "auto":
            plan.warmup_steps = min(config.warmup_steps or adaptive.warmup_steps(total), total - 1)
            session.schedule.set_plan(plan.warmup_steps, total)
        plan.total_steps = int(total)
        plan.seconds_per_step = round(costs.per_step, 4)
        plan.seconds_compiling_later = round(costs.compiling, 1)
        plan.seconds_per_validation = round(costs.validation, 2)
        plan.seconds_reserved_for_final = round(costs.final, 1)
        plan.planned_at_second = round(self.watch.elapsed(), 1)

    def _time_calibration(self, session, datasets):
        """Seconds of an update, a save, later compiles, an epoch's validation
        and the final evaluation, timed on the run's first updates."""
        config, task, model = session.config, session.task, session.model
        count = min(CALIBRATION_STEPS, max(3, self.max_steps // 4), self.steps_per_epoch)
        timer = _timed_updates(session, datasets.train, count)
        self.watch.mark("first_update", timer.first_update_at)
        # Steps that saved a checkpoint are slow too: their cost is planned as
        # a save every `checkpoint_every_steps` updates, and one per epoch.
        seconds_save = seconds_per_save(session.checkpoint)
        # Shapes not met yet still compile later (XLA: one per bucket).
        compiled, seconds_per_compile = timer.compiles()
        shapes = task.training_shapes(config)
        seconds_compiling = max(0, shapes - compiled) * seconds_per_compile * config.jit_compile
        model.evaluate(datasets.valid, verbose=0)  # traces (compiles) the test step
        started = time.time()
        model.evaluate(datasets.valid, verbose=0)
        seconds_loss = time.time() - started
        # Selection, the test evaluation and saving, as the task estimates
        # them (it may drop a costly part of the test from the plan: its
        # entries record it).
        seconds_score, seconds_final = task.time_evaluation(
            config, model, session.data, session.validation_score, seconds_loss,
            self.plan.task_entries,
        )
        # An epoch ends with Keras' pass over the validation split (unless the
        # task logs `val_*` itself: `fit_validates`), the task's score beyond
        # it, and the epoch's checkpoint saves.
        seconds_validation = seconds_score + 2 * seconds_save
        if task.fit_validates(config):
            seconds_validation += seconds_loss
        return _Costs(
            per_step=seconds_per_update(config, timer, seconds_save),
            save=seconds_save,
            compiling=seconds_compiling,
            validation=seconds_validation,
            final=seconds_final + seconds_compiling,
        )

    def _plan_total(self, costs, done_steps):
        """The updates that fit in what is left of the budget at `costs`."""
        return plan_total_steps(
            60 * self.config.time_budget_minutes - self.watch.elapsed(), costs.per_step,
            self.steps_per_epoch, done_steps, costs.validation, costs.final,
            self.max_steps,
        )

    def preset_depth_is_long(self, model, num_layers):
        """Whether the preset's `num_layers` would make `dropout_min_epochs` passes.

        `model` is the shallower model, just planned; the deeper one's plan is
        estimated from it, its times scaled by `depth_cost_ratio`.  This is the
        rule a run of `epochs` passes follows: the preset's depth in a run that
        is not short.  Deciding on the shallower model's passes instead built
        the deeper one for runs it made short: Multi30k de->en in 10 minutes on
        a 2-core host planned 2+2 layers for 3.0 passes, so built 3+3, which
        then made 2.2-2.4 passes without dropout.  Recorded in plan.json
        ("preset_depth_passes").
        """
        plan = self.plan
        if plan.dropout_off:  # short already at the shallower depth
            return False
        ratio = depth_cost_ratio(model, num_layers)
        total = plan_total_steps(
            60 * self.config.time_budget_minutes - self.watch.elapsed(),
            plan.seconds_per_step * ratio, self.steps_per_epoch, 0,
            plan.seconds_per_validation * ratio, plan.seconds_reserved_for_final * ratio,
            self.max_steps,
        )
        plan.preset_depth_passes = round(total / self.steps_per_epoch, 2)
        return not short_run(self.config, total, self.steps_per_epoch)

    def start_over(self, num_layers):
        """Forgets the plan: the run goes on with `num_layers` layers, planned
        afresh (the caller discards the checkpoints).  `plan.json` records the
        depth alone, so that a kill from here on resumes at it.  Returns the
        passes estimated for that depth, which the new plan keeps."""
        estimate = self.plan.preset_depth_passes
        self.plan = Plan(planned=False, num_layers=int(num_layers))
        self.write()
        self.plan = None
        return estimate

    def finish_planning(self):
        """The plan is final; the deadline keeps the final evaluation's time."""
        self.plan.planned = True
        if self.deadline is not None:
            self.deadline.keep(self.plan.seconds_reserved_for_final,
                               self.plan.seconds_per_validation)

    def settle(self, num_layers):
        """Records the depth trained and whether dropout is off; writes `plan.json`.

        Returns the global step from which the run trains without dropout
        (0: from the start), or None when it trains with dropout.
        """
        plan = self.plan
        plan.num_layers = int(num_layers)
        if plan.dropout_off is None:  # a run of `epochs` passes
            plan.dropout_off = short_run(self.config, plan.total_steps, self.steps_per_epoch)
        self.write()
        if not plan.dropout_off:
            return None
        return 0 if plan.dropout_off_from_step is None else plan.dropout_off_from_step

    # --- revisions ----------------------------------------------------------------

    def revise(self, session):
        """After an epoch of a budgeted run: re-times the final evaluation,
        revises the plan from the epoch's pace and records it; True if the
        time is up."""
        plan = self.plan
        # The final evaluation's cost, re-estimated with the model as it is
        # now (an untrained one decodes to the length limit).
        _, final = session.task.time_evaluation(
            session.config, session.model, session.data, session.validation_score,
            plan.seconds_per_validation, plan.task_entries,
        )
        self.deadline.keep(final, plan.seconds_per_validation)
        plan.seconds_reserved_for_final = round(final, 1)
        self.replan(session.schedule, session.checkpoint)
        if not plan.dropout_off and short_run(self.config, plan.total_steps,
                                              self.steps_per_epoch):
            # Planned from its first updates, which run fast, the run looked
            # long enough for dropout; at its measured pace it is short.  A
            # Multi30k de->en ten-minute run planned 3.3 passes, made 2.7 with
            # dropout, and its validation loss after two passes was 3.35
            # against 3.22-3.26 for runs without.  The step function retraces
            # (about 25 s of such a run's first epoch without dropout).
            plan.dropout_off = True
            plan.dropout_off_from_step = int(session.checkpoint.step)
            disable_dropout(session.model)
        self.write()
        # Not one more epoch once the time is up: it would start, make one
        # update, stop, and still validate (a 30-minute run ended 49 s late
        # that way).
        return self.deadline.passed()

    def replan(self, schedule, checkpoint):
        """Revises `total_steps` from the last epoch's pace; True if it changed.

        The updates left are what fits before the final evaluation's time (the
        plan counts the last validation itself) at the measured step time; the
        schedule still ends annealed at the new last update.
        """
        plan = self.plan
        if self.config.schedule != "auto" or len(self.timer.durations()) < 6:
            return False
        step = int(checkpoint.step)
        seconds_per_step = seconds_per_update(self.config, self.timer, seconds_per_save(checkpoint))
        total = plan_total_steps(
            self.deadline.seconds_to_final(), seconds_per_step, self.steps_per_epoch, step,
            plan.seconds_per_validation, 0.0, self.max_steps,
        )
        # plan_total_steps gives at least 2 more: no time left is not a plan.
        if total <= max(step + 2, plan.warmup_steps + 1) or total == plan.total_steps:
            return False
        plan.total_steps = int(total)
        plan.seconds_per_step = round(seconds_per_step, 4)
        plan.revisions = (plan.revisions or 0) + 1
        schedule.set_plan(plan.warmup_steps, plan.total_steps)
        return True

    # --- the end ------------------------------------------------------------------

    def evaluation_plan(self):
        """What the task's final evaluation receives: the plan's entries and,
        under a budget, `end_time`, when metrics.json is due (an optional part
        of the test that would overrun is left out).  plan.json itself stays
        free of wall clocks."""
        due = {} if self.deadline is None else {"end_time": self.deadline.end - SECONDS_TO_SAVE}
        return {**self.plan.to_json(), **due}


def seconds_per_save(checkpoint):
    """Mean seconds of the checkpoint saves so far (0 before the first)."""
    saves = checkpoint.save_seconds
    return float(np.mean(saves)) if saves else 0.0


def depth_cost_ratio(model, num_layers):
    """An update's estimated cost at `num_layers` over its cost for `model`.

    Parameters stand for multiply-adds per token: those of the encoder and
    decoder blocks scale with depth, the rest (embeddings, the output
    projection) do not.  The Multi30k model: 7.58M parameters at 3+3
    layers, 5.73M at 2+2, so 1.32x.
    """
    blocks = [*getattr(model, "encoder_blocks", ()), *getattr(model, "decoder_blocks", ())]
    in_blocks = sum(int(np.prod(w.shape)) for block in blocks for w in block.weights)
    rest = model.count_params() - in_blocks
    depth = len(getattr(model, "encoder_blocks", ())) or len(blocks)
    if not depth:
        return 1.0
    return (rest + in_blocks * num_layers / depth) / (rest + in_blocks)


def _timed_updates(session, stream, count):
    """`count` updates of `session.model` from its checkpoint's step, timed: the `StepTimer`."""
    timer = StepTimer()
    session.model.fit(stream.skip(session.checkpoint.step), epochs=1, steps_per_epoch=count,
                      callbacks=[session.checkpoint, timer], verbose=0, shuffle=False)
    return timer
