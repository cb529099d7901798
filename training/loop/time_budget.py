"""The time budget of a run, on the loop's side: it measures and applies.

`time_budget_minutes=N` bounds the whole command, from its start to
`metrics.json`.  A run does not know beforehand how many updates fit, so
`TimeBudget` finds out, in this order (`training/train.py` calls each step).
It times the model, the task and the clock, asks the pure planner
(`training.recipe.budget.Budget`) for the plan those figures give, and
applies the plan it gets back: to the schedule, to the model's dropout and
to `plan.json`.

1. `TimeBudget.for_run` reads `plan.json` (a resumed run goes on with the
   plan it made) and, for a fresh budgeted run, starts the `Deadline`.
2. `resolve_recipe`, once the model is built: a run without a plan gets
   `adaptive.resolve`'s recipe, for `epochs` passes (final in a run
   without a budget).
3. `calibrate` (budgeted runs): times the first updates, one validation
   pass and the task's final evaluation, then plans how many updates fit in
   what is left once validation, model selection and the test are paid for;
   the schedule then anneals exactly at the last planned update.  A run
   found short (fewer than `dropout_min_epochs` passes) trains without
   dropout.  `preset_depth_is_long` says whether a run timed at its
   short-run depth should build the preset's depth instead (`start_over`);
   `finish_planning` then makes the plan final and the `Deadline` keep the
   final evaluation's time.
4. `settle`: `plan.json` is written, so a killed run resumes with the same
   schedule and ends with the same weights.
5. `revise`, after each epoch of a budgeted run: the final evaluation is
   re-timed and `total_steps` re-planned from the epoch's pace (the first
   updates run fast); the `Deadline` is the fallback that stops `fit` if
   the machine slows down after that.
"""

import dataclasses
import os
import time

import numpy as np

from training.loop.dropout import disable_dropout
from training.loop.timing import Deadline, StepTimer
from training.recipe import adaptive
from training.recipe.budget import RETIME_STEPS, SECONDS_TO_SAVE, Budget, Costs
from training.recipe.plan import DepthChoice, FinalEvaluation, Plan, read_plan


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
        budget: the run's `training.recipe.budget.Budget` (the arithmetic).
        watch: the command's `Stopwatch` (the budget counts from its start).
        plan: the `Plan` so far, or the `DepthChoice` a run recorded before
            building the preset's depth (None: none yet).
        deadline: the `Deadline` of a fresh budgeted run; None otherwise
            (a resumed run follows its plan, revises nothing, and has no
            fallback stop).
        path: where `plan.json` is written (None: nowhere).
        is_chief: whether this process writes `plan.json`.
    """

    def __init__(self, budget, watch, plan=None, deadline=None, path=None, is_chief=True):
        self.budget = budget
        self.watch = watch
        self.plan = plan
        self.deadline = deadline
        # Times each epoch of the budgeted run's `fit`: its revisions' pace.
        self.timer = StepTimer() if deadline is not None else None
        self.path = path
        self.is_chief = is_chief

    @classmethod
    def for_run(cls, config, watch, steps_per_epoch, run_dir, resumed, is_chief, task,
                steps_per_pass=None):
        """The budget of a run in `run_dir` (passes of `steps_per_pass`
        updates, None: an epoch), with the plan its `plan.json` holds (the
        task's evaluation entries read as its `evaluation_plan_type`)."""
        path = os.path.join(run_dir, "plan.json")
        deadline = None
        if config.time_budget_minutes is not None and not resumed:
            deadline = Deadline(watch.started_at + 60 * config.time_budget_minutes)
        plan = read_plan(path, task.evaluation_plan_type())
        return cls(Budget.of(config, steps_per_epoch, steps_per_pass), watch, plan, deadline,
                   path, is_chief)

    @property
    def max_steps(self):
        return self.budget.max_steps

    def write(self):
        """Writes the plan to `plan.json` (the chief only)."""
        if self.is_chief and self.path is not None:
            self.plan.write(self.path)

    # --- the recipe ---------------------------------------------------------------

    def resolve_recipe(self, config, task, hidden_dim, batch_tokens, num_layers):
        """The plan's `Recipe`; a run without a plan (none yet, or only a
        depth) gets `adaptive.resolve`'s, for `epochs` passes, planned at
        once unless the run is budgeted."""
        if not isinstance(self.plan, Plan):
            recipe = adaptive.resolve(config, task, hidden_dim, batch_tokens, self.max_steps)
            self.plan = self.budget.first_plan(recipe, num_layers)
        return self.plan.recipe

    # --- calibration --------------------------------------------------------------

    def calibrate(self, session, datasets):
        """Times a few updates and one validation, then fixes the plan.

        `datasets`: the run's endless training stream (`train`) and its
        validation dataset (`valid`).  The timed updates are the run's
        first: they count towards `total_steps`.
        """
        budget = self.budget
        costs, evaluation = self._time_calibration(session, datasets)
        total = budget.total_steps(costs, session.checkpoint.step, self.watch.elapsed())
        dropout_off = budget.short(total)
        if (dropout_off and disable_dropout(session.model)
                and budget.retimes_without_dropout(total, session.checkpoint.step)):
            # Updates without dropout are faster (~15% on a CPU): time them
            # (the first one retraces the step), then plan again.
            timer = time_updates(session, datasets.train, RETIME_STEPS)
            costs = dataclasses.replace(
                costs, per_step=budget.per_update(timer.seconds_per_step(), costs.save))
            total = budget.total_steps(costs, session.checkpoint.step, self.watch.elapsed())
        self.plan = budget.calibrated(self.plan, costs, total, dropout_off,
                                      self.watch.elapsed(), evaluation)
        if budget.schedule == "auto":
            session.schedule.set_plan(self.plan.recipe.warmup_steps, self.plan.total_steps)

    def _time_calibration(self, session, datasets):
        """(`Costs` of an update, a save, later compiles, an epoch's validation
        and the final evaluation, timed on the run's first updates; the
        task's evaluation plan)."""
        config, task, model = session.config, session.task, session.task_model
        timer = time_updates(session, datasets.train, self.budget.calibration_steps())
        self.watch.mark("first_update", timer.first_update_at)
        # Steps that saved a checkpoint are slow too: their cost is planned as
        # a save every `checkpoint_every_steps` updates, and one per epoch.
        seconds_save = seconds_per_save(session.checkpoint)
        # Shapes not met yet still compile later (XLA: one per bucket).
        compiled, seconds_per_compile = timer.compiles()
        shapes = task.training_shapes(config)
        seconds_compiling = max(0, shapes - compiled) * seconds_per_compile * config.jit_compile
        valid = model.prepared(datasets.valid)
        model.evaluate(valid, verbose=0)  # traces (compiles) the test step
        started = time.time()
        model.evaluate(valid, verbose=0)
        seconds_loss = time.time() - started
        # Selection, the test evaluation and saving, as the task estimates
        # them (it may drop a costly part of the test: its evaluation plan
        # records it).
        seconds_score, seconds_final, evaluation = task.time_evaluation(
            config, model, session.data, session.validation_score, seconds_loss, None,
        )
        # An epoch ends with Keras' pass over the validation split (unless the
        # task logs `val_*` itself: `fit_validates`), the task's score beyond
        # it, and the epoch's checkpoint saves.
        seconds_validation = seconds_score + 2 * seconds_save
        if task.fit_validates(config):
            seconds_validation += seconds_loss
        costs = Costs(
            per_step=self.budget.per_update(timer.seconds_per_step(), seconds_save),
            save=seconds_save,
            compiling=seconds_compiling,
            validation=seconds_validation,
            final=seconds_final + seconds_compiling,
        )
        return costs, evaluation

    def preset_depth_is_long(self, model, num_layers):
        """Whether the preset's `num_layers` would make `dropout_min_epochs`
        passes (`Budget.preset_depth`); `model` is the shallower model, just
        planned, whose costs scale by `depth_cost_ratio`."""
        ratio = 1.0 if self.plan.dropout_off else depth_cost_ratio(model, num_layers)
        long, self.plan = self.budget.preset_depth(self.plan, ratio, self.watch.elapsed())
        return long

    def start_over(self, num_layers):
        """Forgets the plan: the run goes on with `num_layers` layers, planned
        afresh (the caller discards the checkpoints).  `plan.json` records the
        depth alone, so that a kill from here on resumes at it.  Returns the
        passes estimated for that depth, which the new plan keeps."""
        estimate = self.plan.measured.preset_depth_passes
        self.plan = DepthChoice(int(num_layers))
        self.write()
        return estimate

    def finish_planning(self):
        """The plan is final; the deadline keeps the final evaluation's time."""
        self.plan = self.plan.replace(planned=True)
        if self.deadline is not None:
            measured = self.plan.measured
            self.deadline.keep(measured.seconds_reserved_for_final,
                               measured.seconds_per_validation)

    def settle(self):
        """Writes `plan.json`; returns the global step from which the run
        trains without dropout (0: from the start), or None when it trains
        with dropout."""
        self.write()
        return self.plan.dropout_off_at()

    # --- revisions ----------------------------------------------------------------

    def revise(self, session):
        """After an epoch of a budgeted run: re-times the final evaluation,
        revises the plan from the epoch's pace and records it; True if the
        time is up."""
        budget, measured = self.budget, self.plan.measured
        # The final evaluation's cost, re-estimated with the model as it is
        # now (an untrained one decodes to the length limit).
        _, final, evaluation = session.task.time_evaluation(
            session.config, session.task_model, session.data, session.validation_score,
            measured.seconds_per_validation, measured.evaluation,
        )
        self.deadline.keep(final, measured.seconds_per_validation)
        self.plan = budget.reserve_final(self.plan, final, evaluation)
        self.replan(session.schedule, session.checkpoint)
        short = budget.found_short(self.plan, session.checkpoint.step)
        if short is not None:
            # The step function retraces (about 25 s of a ten-minute
            # Multi30k run's first epoch without dropout).
            self.plan = short
            disable_dropout(session.model)
        self.write()
        # Not one more epoch once the time is up: it would start, make one
        # update, stop, and still validate (a 30-minute run ended 49 s late
        # that way).
        return self.deadline.passed()

    def replan(self, schedule, checkpoint):
        """Revises `total_steps` from the last epoch's pace (`Budget.revised`)
        and sets the schedule to it; True if it changed."""
        if len(self.timer.durations()) < 6:
            return False
        pace = self.budget.per_update(self.timer.seconds_per_step(),
                                      seconds_per_save(checkpoint))
        revised = self.budget.revised(self.plan, pace, self.deadline.seconds_to_final(),
                                      int(checkpoint.step))
        if revised is None:
            return False
        self.plan = revised
        schedule.set_plan(revised.recipe.warmup_steps, revised.total_steps)
        return True

    # --- the end ------------------------------------------------------------------

    def final_evaluation(self):
        """What the task's final evaluation receives: the plan's evaluation
        plan and, under a budget, `end_time`, when metrics.json is due (an
        optional part of the test that would overrun is left out).
        plan.json itself stays free of wall clocks."""
        if self.deadline is None:
            return FinalEvaluation(self.plan.evaluation)
        return FinalEvaluation(self.plan.evaluation, self.deadline.end - SECONDS_TO_SAVE)


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


def time_updates(session, stream, count):
    """`count` updates of `session.task_model` from its checkpoint's step, timed: the
    `StepTimer`."""
    timer = StepTimer()
    task_model = session.task_model
    task_model.fit(task_model.prepared(stream.skip(session.checkpoint.step)), epochs=1,
                   steps_per_epoch=count, callbacks=[session.checkpoint, timer], verbose=0,
                   shuffle=False)
    return timer
