"""The loop's side of a time budget: its clocks, dropout switched off, and
revisions applied to the schedule (the arithmetic is tests/test_recipe.py's)."""

import dataclasses
import json
import time

import keras
import numpy as np
import pytest

from training.config import TrainingConfig
from training.loop import timing
from training.loop.time_budget import TimeBudget
from training.optimization.schedule import WarmupLinearSchedule
from training.recipe import budget
from training.recipe.plan import EvaluationPlan, Measured, Plan, Recipe
from training.tasks.translation import TranslationEvaluationPlan


def test_step_timer_separates_compiling_steps():
    timer = timing.StepTimer()
    # A trace, two more compiles among ordinary 0.1 s steps (half compile).
    durations = [5.0, 0.1, 3.1, 0.1, 0.1, 2.1, 0.1, 0.1]
    timer.times = list(np.cumsum([0.0] + durations))
    assert timer.seconds_per_step() == pytest.approx(0.1)
    assert timer.compiles() == (3, pytest.approx(3.3))


def test_step_timer_estimates_from_the_later_steps():
    timer = timing.StepTimer()
    # Warm-up steps a third slower than the rest, then the steady pace.
    durations = [4.0, 0.13, 0.13, 0.13, 0.12, 0.11] + [0.1] * 6
    timer.times = list(np.cumsum([0.0] + durations))
    assert timer.seconds_per_step() == pytest.approx(0.1)
    # Two timed steps (a tiny run): the faster one; none is an error.
    timer.times = [0.0, 5.0, 5.2]
    assert timer.seconds_per_step() == pytest.approx(0.2)
    timer.times = [0.0]
    with pytest.raises(ValueError, match="at least 1 timed step"):
        timer.seconds_per_step()


def test_disable_dropout_turns_every_rate_off():
    from keras_transformer.models import Transformer
    from training.loop.dropout import disable_dropout

    model = Transformer(vocabulary_size=20, num_layers=1, hidden_dim=8, num_heads=2,
                        intermediate_dim=16, max_sequence_length=8, dropout=0.5)
    inputs = {"encoder_token_ids": np.array([[3, 4, 5, 6]]),
              "decoder_token_ids": np.array([[1, 7, 8, 9]])}
    first, second = (np.asarray(model(inputs, training=True)) for _ in range(2))
    assert not np.allclose(first, second)  # dropout acts
    disable_dropout(model)
    np.testing.assert_allclose(np.asarray(model(inputs, training=True)),
                               np.asarray(model(inputs, training=False)), rtol=1e-6)


def test_a_budgeted_plan_is_revised_from_the_measured_pace(monkeypatch):
    from types import SimpleNamespace

    def _replan(config, plan, schedule, timer, deadline, checkpoint, steps_per_epoch,
                max_steps):
        """(whether `TimeBudget.replan` revised `plan`, the plan it holds then)."""
        arithmetic = dataclasses.replace(budget.Budget.of(config, steps_per_epoch),
                                         max_steps=max_steps)
        planner = TimeBudget(arithmetic, budget.Stopwatch(), plan, deadline)
        planner.timer = timer
        return planner.replan(schedule, checkpoint), planner.plan

    # A stopped clock: the figures below count on no time passing between
    # the deadline's making and the plan (a loaded machine took ~0.1 s).
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)

    config = TrainingConfig(task="translation", checkpoint_every_steps=1000)
    schedule = WarmupLinearSchedule(1e-3, 10, 100)
    recipe = Recipe(schedule="auto", peak_learning_rate=1e-3, warmup_steps=10,
                    total_steps=100, weight_decay=0.0, batch_tokens=512.0)
    plan = Plan(recipe, num_layers=2, dropout_off=False, measured=Measured(
        seconds_per_step=0.1, seconds_compiling_later=0.0, seconds_per_validation=2.0,
        seconds_reserved_for_final=0.0, planned_at_second=0.0, evaluation=EvaluationPlan()))
    timer = timing.StepTimer()
    timer.times = list(np.cumsum([0.0] + [0.05] * 20))  # 0.05 s per update
    checkpoint = SimpleNamespace(step=50, save_seconds=[])
    deadline = timing.Deadline(time.time() + 20.0)
    deadline.keep(0.0, 2.0)  # a stop's validation is planned for by the plan itself
    revised, plan = _replan(config, plan, schedule, timer, deadline, checkpoint, 50, 10_000)
    assert revised
    # ~19.2 s usable at 0.05 s an update plus a 2 s validation every 50
    # updates (0.09 s an update) and one at the end: 173 more.
    assert plan.total_steps - 50 == 173
    assert plan.measured.revisions == 1
    # The schedule now ends annealed at the new last update.
    assert float(schedule(plan.total_steps)) == 0.0
    assert float(schedule(100)) > 0.0
    # A slower machine shrinks the plan; a hopeless one leaves it to the deadline.
    timer.times = list(np.cumsum([0.0] + [0.5] * 20))
    revised, plan = _replan(config, plan, schedule, timer, deadline, checkpoint, 50, 10_000)
    assert revised
    assert plan.total_steps - 50 < 40
    assert float(schedule(plan.total_steps)) == 0.0
    deadline = timing.Deadline(time.time())
    revised, _ = _replan(config, plan, schedule, timer, deadline, checkpoint, 50, 10_000)
    assert not revised


def test_the_deadline_keeps_the_final_evaluation_with_its_margin():
    """The final evaluation's estimate is kept with `FINAL_SLACK` more (a
    60-minute run's took 41.3 s against 36.7 s estimated); the end-of-epoch
    validation after a stop is kept as measured."""
    end = time.time() + 1000.0
    deadline = timing.Deadline(end)
    deadline.keep(40.0, 4.0)
    assert budget.FINAL_SLACK > 0
    assert deadline.seconds_final == pytest.approx(40.0 * (1 + budget.FINAL_SLACK))
    assert deadline.deadline == pytest.approx(end - 40.0 * (1 + budget.FINAL_SLACK) - 4.0)
    assert 999.0 - 50.0 < deadline.seconds_to_final() <= 1000.0 - 50.0
    assert not deadline.passed()
    deadline.keep(1000.0, 0.0)  # the evaluation's estimate now fills the budget
    assert deadline.passed() and deadline.hit


class _Slow(keras.callbacks.Callback):
    """Each update takes `step` seconds, each validation `validation` seconds."""

    def __init__(self, step, validation):
        super().__init__()
        self.step, self.validation = step, validation

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.step)

    def on_test_begin(self, logs=None):
        time.sleep(self.validation)


def test_a_deadline_stop_leaves_the_epoch_end_validation_inside_the_budget():
    """`fit` validates the epoch that the deadline stopped: `keep` stops it
    that validation earlier; at the end itself (the old stop) it returns late.

    Asserted on the stop point and on the tail after it, not on the wall
    clock of the whole fit: in the full suite a garbage collection or a
    first trace can add a second to the tail, and a check that the fit
    returned before `end` failed on that alone."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
    x, y = np.zeros((400, 2), "float32"), np.zeros((400, 1), "float32")
    slow = _Slow(step=0.01, validation=1.0)

    class Timed(timing.Deadline):
        stopped_at = None

        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            if self.hit and self.stopped_at is None:
                self.stopped_at = time.time()

    def stopped_fit(seconds_after_stop):
        deadline = Timed(time.time() + 2.5)
        deadline.keep(0.0, seconds_after_stop)
        model.fit(x, y, batch_size=1, epochs=1, validation_data=(x[:2], y[:2]),
                  callbacks=[deadline, slow], verbose=0)
        assert deadline.hit  # 400 updates take 4 s: the deadline stopped the epoch
        return deadline, time.time()

    kept, returned = stopped_fit(seconds_after_stop=1.5)
    # Stopped at the first update past end - 1.5 s: the validation's time kept back ...
    assert 0 <= kept.stopped_at - (kept.end - 1.5) < 1.0
    assert returned - kept.stopped_at >= 1.0  # ... and spent on it after the stop
    old, returned = stopped_fit(seconds_after_stop=0.0)
    assert old.stopped_at >= old.end
    assert returned - old.end > 0.5  # the old stop: late by the validation


def _recorded_plans():
    """Every plan that a run recorded in benchmarks/results (metrics.json's "plan")."""
    import glob
    import os

    def plans(value):
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "plan" and isinstance(item, dict):
                    yield item
                else:
                    yield from plans(item)
        elif isinstance(value, list):
            for item in value:
                yield from plans(item)

    root = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results")
    found = []
    for path in sorted(glob.glob(os.path.join(root, "*.json"))):
        with open(path, encoding="utf-8") as f:
            found.extend(plans(json.load(f)))
    return found


def test_recorded_plans_round_trip_through_the_plan_dataclass():
    """Runs made before the plan was typed resume with their plan.json:
    reading and writing it gives the same object, and what is not a field
    of the plan is the task's evaluation plan."""
    recorded = _recorded_plans()
    assert len(recorded) >= 10
    plans = []
    for values in recorded:
        if "num_layers" not in values:
            # Written before runs recorded their depth: refused, in one line.
            with pytest.raises(ValueError, match="no `num_layers`"):
                Plan.from_json(values, TranslationEvaluationPlan)
            continue
        plan = Plan.from_json(values, TranslationEvaluationPlan)
        assert plan.to_json() == values
        assert isinstance(plan.recipe, Recipe) and isinstance(plan.total_steps, int)
        plans.append(plan)
    assert len(plans) >= 10
    budgeted = [p for p in plans if p.measured is not None]
    assert budgeted and all(isinstance(p.evaluation, TranslationEvaluationPlan)
                            and p.evaluation.test_beam is not None for p in budgeted)


