"""The recipe and the planner: peak learning rate, warm-up share and the
budget's arithmetic, over given measurements.  Neither TensorFlow nor Keras
is imported here (`tests/test_architecture.py` holds the package to that)."""

import dataclasses
import json
import math

import pytest

from training.config import TrainingConfig
from training.recipe import adaptive, budget
from training.recipe.plan import (
    DepthChoice,
    EvaluationPlan,
    Measured,
    Plan,
    Recipe,
    read_plan,
)


def test_peak_learning_rate_scales_with_width_and_small_batches():
    assert adaptive.peak_learning_rate(256, 4096) == pytest.approx(1e-3)
    # 1/sqrt(d_model): the paper's base-model peak (7.0e-4) at d_model 512.
    assert adaptive.peak_learning_rate(512, 4096) == pytest.approx(1e-3 / math.sqrt(2))
    assert adaptive.peak_learning_rate(64, 4096) == pytest.approx(2e-3)
    # sqrt(batch) below the reference batch (1,024 tokens), flat above it.
    assert adaptive.peak_learning_rate(256, 1024) == pytest.approx(1e-3)
    assert adaptive.peak_learning_rate(256, 256) == pytest.approx(5e-4)
    assert adaptive.peak_learning_rate(256, 25000) == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="batch_tokens=0"):
        adaptive.peak_learning_rate(256, 0)
    # No batch factor: the width rule alone.
    assert adaptive.peak_learning_rate(128, None) == pytest.approx(1e-3 * math.sqrt(2))


@pytest.mark.parametrize(
    "total, expected",
    [(20, 5), (400, 100), (1000, 100), (2000, 200), (10000, 1000), (100000, 4000)],
)
def test_warmup_is_a_share_with_floor_and_ceiling(total, expected):
    assert adaptive.warmup_steps(total) == expected


@pytest.mark.parametrize("seconds_left", [60.0, 300.0, 3600.0])
def test_plan_fits_the_budget_and_uses_most_of_it(seconds_left):
    step, spe, validation, final, done = 0.5, 40, 6.0, 30.0, 12
    total = budget.plan_total_steps(seconds_left, step, spe, done, validation, final, 10**9)
    more = total - done
    spent = more * step + math.ceil(more / spe) * validation + final
    assert spent <= seconds_left
    assert spent >= 0.85 * seconds_left - validation - step  # does not leave much unused


def test_plan_respects_the_step_cap_and_a_hopeless_budget():
    assert budget.plan_total_steps(3600, 0.1, 10, 0, 1, 1, max_steps=50) == 50
    assert budget.plan_total_steps(1.0, 10.0, 10, 4, 1, 100, max_steps=50) == 6


@dataclasses.dataclass(frozen=True)
class _OutOfFold(EvaluationPlan):
    seconds_out_of_fold: float


def _recipe(total_steps=100, warmup_steps=10, schedule="auto"):
    return Recipe(schedule=schedule, peak_learning_rate=1e-3, warmup_steps=warmup_steps,
                  total_steps=total_steps, weight_decay=0.0, batch_tokens=512.0)


def _measured(**values):
    defaults = dict(seconds_per_step=0.1, seconds_compiling_later=0.0,
                    seconds_per_validation=2.0, seconds_reserved_for_final=10.0,
                    planned_at_second=5.0, evaluation=EvaluationPlan())
    return Measured(**{**defaults, **values})


def test_a_plan_file_keeps_what_is_set_and_only_that(tmp_path):
    path = tmp_path / "plan.json"
    assert read_plan(path) is None
    # The plan a run writes before it builds the preset's depth: no recipe.
    depth_only = DepthChoice(num_layers=3)
    depth_only.write(path)
    assert json.loads(path.read_text()) == {"planned": False, "num_layers": 3}
    assert read_plan(path) == depth_only and not isinstance(depth_only, Plan)
    plan = Plan(_recipe(), num_layers=2, dropout_off=False, planned=True,
                measured=_measured(evaluation=_OutOfFold(0.25)))
    plan.write(path)
    written = json.loads(path.read_text())
    assert "revisions" not in written and "dropout_off_from_step" not in written
    assert written["seconds_out_of_fold"] == 0.25 and "evaluation" not in written
    assert "preset_depth_passes" not in written and "measured" not in written
    assert read_plan(path, _OutOfFold) == plan
    assert dataclasses.asdict(plan.recipe) == {
        "schedule": "auto", "peak_learning_rate": 1e-3, "warmup_steps": 10,
        "total_steps": 100, "weight_decay": 0.0, "batch_tokens": 512.0}
    # A plan of `epochs` passes measured nothing, and writes nothing of it.
    unbudgeted = Plan(_recipe(), num_layers=2, dropout_off=True)
    unbudgeted.write(path)
    assert set(json.loads(path.read_text())) == {
        "schedule", "peak_learning_rate", "warmup_steps", "total_steps", "weight_decay",
        "batch_tokens", "planned", "dropout_off", "num_layers"}
    assert read_plan(path) == unbudgeted and unbudgeted.evaluation is None
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="plan.json is not a run's plan"):
        read_plan(path)


@pytest.mark.parametrize("values, match", [
    # Written before runs recorded their depth.
    ({"schedule": "auto", "peak_learning_rate": 1e-3, "warmup_steps": 10,
      "total_steps": 100, "weight_decay": 0.0, "batch_tokens": 512.0, "planned": True,
      "dropout_off": False}, "no `num_layers`"),
    ({"schedule": "auto", "num_layers": 2, "planned": True}, "misses 'peak_learning_rate'"),
    ({"schedule": "auto", "peak_learning_rate": 1e-3, "warmup_steps": 10,
      "total_steps": 100, "weight_decay": 0.0, "batch_tokens": 512.0, "planned": True,
      "dropout_off": False, "num_layers": 2, "test_beam": True}, "unknown entries"),
])
def test_a_plan_file_this_code_did_not_write_is_refused_in_one_line(tmp_path, values, match):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ValueError, match=match) as caught:
        read_plan(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_plans_are_frozen():
    plan = Plan(_recipe(), num_layers=2, dropout_off=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.dropout_off = True
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.recipe.total_steps = 3


def _budget(minutes=10.0, steps_per_epoch=50, max_steps=10_000, schedule="auto"):
    config = TrainingConfig(task="translation", schedule=schedule, epochs=200,
                            time_budget_minutes=minutes, checkpoint_every_steps=1000)
    return dataclasses.replace(budget.Budget.of(config, steps_per_epoch), max_steps=max_steps)


def test_a_first_plan_is_final_only_without_a_budget():
    recipe = _recipe(total_steps=100)  # two passes of 50
    budgeted = _budget().first_plan(recipe, 3)
    assert (budgeted.planned, budgeted.dropout_off, budgeted.num_layers) == (False, False, 3)
    unbudgeted = _budget(minutes=None).first_plan(recipe, 3)
    assert unbudgeted.planned and unbudgeted.dropout_off  # 2 passes < dropout_min_epochs
    assert not _budget(minutes=None).first_plan(_recipe(total_steps=500), 3).dropout_off
    assert unbudgeted.dropout_off_at() == 0 and unbudgeted.measured is None


def test_a_plan_is_short_by_its_passes_not_its_epochs():
    """A series recipe's epoch is a share of its updates, not a pass: 300
    updates in one epoch over 9-batch passes are 33 passes and keep
    dropout; the same updates counted as one epoch would be short."""
    config = TrainingConfig(task="timeseries", epochs=1, checkpoint_every_steps=500)
    one_epoch = budget.Budget.of(config, 300, steps_per_pass=9)
    assert one_epoch.passes(300) == pytest.approx(300 / 9)
    assert not one_epoch.short(300)
    assert not one_epoch.first_plan(_recipe(total_steps=300), 2).dropout_off
    assert budget.Budget.of(config, 300).short(300)  # no pass given: an epoch is one
    assert budget.Budget.of(config, 300, steps_per_pass=120).short(300)  # 2.5 passes


def test_calibration_sets_the_total_the_warmup_and_what_was_measured():
    planner = _budget()
    plan = planner.first_plan(_recipe(total_steps=10_000, warmup_steps=1000), 2)
    costs = budget.Costs(per_step=0.123456, save=0.0, compiling=1.04, validation=2.345,
                         final=30.06)
    total = planner.total_steps(costs, 24, elapsed=12.0)
    assert total == budget.plan_total_steps(588.0, 0.123456, 50, 24, 2.345, 30.06, 10_000)
    evaluation = _OutOfFold(0.5)
    planned = planner.calibrated(plan, costs, total, False, 12.04, evaluation)
    assert planned.total_steps == total and planned.recipe.warmup_steps == (
        adaptive.warmup_steps(total))
    assert planned.measured == Measured(0.1235, 1.0, 2.35, 30.1, 12.0, evaluation)
    assert plan.total_steps == 10_000  # the plan it was given is unchanged
    # "paper": the warm-up is the recipe's, whatever the total.
    paper = _budget(schedule="paper")
    planned = paper.calibrated(paper.first_plan(_recipe(warmup_steps=4000), 2), costs, 900,
                               True, 12.0, evaluation)
    assert (planned.total_steps, planned.recipe.warmup_steps, planned.dropout_off) == (
        900, 4000, True)


def test_a_revision_follows_the_measured_pace():
    """20 s left before the final evaluation, 19.2 s usable: at 0.05 s an
    update plus a 2 s validation every 50 updates (0.09 s an update) and one
    at the end, 173 more updates."""
    planner = _budget()
    plan = Plan(_recipe(total_steps=100, warmup_steps=10), 2, False,
                measured=_measured(seconds_per_validation=2.0))
    revised = planner.revised(plan, 0.05, 20.0, done_steps=50)
    assert revised.total_steps - 50 == 173 and revised.measured.revisions == 1
    assert revised.measured.seconds_per_step == 0.05
    slower = planner.revised(revised, 0.5, 20.0, done_steps=50)
    assert slower.total_steps - 50 < 40 and slower.measured.revisions == 2
    assert planner.revised(slower, 0.5, 0.0, done_steps=50) is None  # hopeless: the deadline's
    assert _budget(schedule="paper").revised(plan, 0.05, 20.0, 50) is None


def test_a_revision_that_finds_the_run_short_turns_dropout_off_from_its_step():
    planner = _budget()  # 50 updates a pass; short below 3 passes
    long = Plan(_recipe(total_steps=400), 2, False, measured=_measured())
    assert planner.found_short(long, 120) is None
    short = planner.found_short(long.replace(recipe=_recipe(total_steps=140)), 120)
    assert short.dropout_off and short.dropout_off_at() == 120
    assert planner.found_short(short, 130) is None  # already off


def test_stopwatch_marks_when_a_thing_first_happened():
    watch = budget.Stopwatch(started_at=100.0)
    watch.mark("first_update", at=112.34)
    watch.mark("first_update", at=150.0)  # later updates do not move it
    report = watch.report()
    assert report["first_update_at_second"] == 12.3
    assert report["total_seconds"] >= report["first_update_at_second"]
