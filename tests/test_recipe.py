"""The adaptive recipe: peak learning rate, warm-up share, annealed schedule, budget plan."""

import json
import math
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from training.config import TrainingConfig
from training.loop import timing
from training.loop.time_budget import TimeBudget
from training.optimization.optimizer import build_optimizer
from training.optimization.schedule import WarmupLinearSchedule
from training.recipe import adaptive, budget
from training.tasks import get_task


def _resolve(config, *sizes):
    """`adaptive.resolve` for the config's own task."""
    return adaptive.resolve(config, get_task(config.task), *sizes)


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


def test_a_text_classifiers_peak_does_not_fall_with_short_sentences():
    """Its loss is one term per sentence: batches of short questions and of
    long reviews get the same peak; a translation batch of few target tokens
    gets a smaller one."""
    text = TrainingConfig(task="classification")
    peaks = {tokens: _resolve(text, 128, tokens, 1000)["peak_learning_rate"]
             for tokens in (96, 343, 668, 4096)}
    assert list(peaks.values()) == pytest.approx([1e-3 * math.sqrt(2)] * 4)
    assert _resolve(text, 128, 343, 1000)["batch_tokens"] == 343  # still recorded
    translation = TrainingConfig(task="translation")
    assert _resolve(translation, 128, 343, 1000)["peak_learning_rate"] == pytest.approx(
        1e-3 * math.sqrt(2) * math.sqrt(343 / 1024))
    # A given peak wins either way.
    given = text.replace(learning_rate=3e-4)
    assert _resolve(given, 128, 343, 1000)["peak_learning_rate"] == 3e-4


@pytest.mark.parametrize(
    "total, expected",
    [(20, 5), (400, 100), (1000, 100), (2000, 200), (10000, 1000), (100000, 4000)],
)
def test_warmup_is_a_share_with_floor_and_ceiling(total, expected):
    assert adaptive.warmup_steps(total) == expected


def test_resolve_fills_only_what_is_unset():
    auto = _resolve(TrainingConfig(task="translation"), 256, 4096, 1000)
    assert auto["peak_learning_rate"] == pytest.approx(1e-3)
    assert auto["warmup_steps"] == 100 and auto["weight_decay"] == 1e-4
    given = TrainingConfig(learning_rate=3e-4, warmup_steps=50, weight_decay=0.0)
    values = _resolve(given, 256, 4096, 1000)
    assert (values["peak_learning_rate"], values["warmup_steps"], values["weight_decay"]) == (
        3e-4, 50, 0.0)
    paper = _resolve(TrainingConfig(schedule="paper"), 512, 25000, 100000)
    assert paper["peak_learning_rate"] == pytest.approx(512**-0.5 * 4000**-0.5)
    assert _resolve(TrainingConfig(task="classification"), 64, 512, 100)["weight_decay"] == 0.01


def _rates(schedule, steps):
    return np.array([float(schedule(step)) for step in steps])


def test_schedule_peaks_after_warmup_and_ends_annealed():
    schedule = WarmupLinearSchedule(2e-3, warmup_steps=10, total_steps=110)
    rates = _rates(schedule, range(110))
    assert rates.argmax() == 9 and rates[9] == pytest.approx(2e-3)  # update 10 = peak
    assert np.all(np.diff(rates[:10]) > 0) and np.all(np.diff(rates[9:]) < 0)
    assert rates[0] == pytest.approx(2e-4)
    assert rates[-1] == 0.0  # the last planned update does not move the weights
    assert float(schedule(500)) == 0.0  # past the plan: still 0, never negative
    # Linear: the midpoint of the decay is half the peak.
    assert float(schedule(59)) == pytest.approx(1e-3)


def test_set_plan_changes_a_traced_schedule_without_retracing():
    schedule = WarmupLinearSchedule(1e-3, warmup_steps=10, total_steps=100)
    traces = []

    @tf.function(jit_compile=False)
    def rate(step):
        traces.append(1)
        return schedule(step)

    assert float(rate(tf.constant(49))) == pytest.approx(1e-3 * 50 / 90)  # update 50 of 100
    schedule.set_plan(5, 50)
    assert float(rate(tf.constant(49))) == 0.0
    assert float(rate(tf.constant(4))) == pytest.approx(1e-3)
    assert len(traces) == 1


def test_schedule_config_round_trip_keeps_the_plan():
    schedule = WarmupLinearSchedule(1e-3, warmup_steps=10, total_steps=100)
    schedule.set_plan(7, 70)
    optimizer = keras.optimizers.AdamW(schedule)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    copy = restored._learning_rate  # the schedule object itself
    assert (copy.warmup_steps, copy.total_steps) == (7, 70)
    np.testing.assert_allclose(_rates(copy, range(80)), _rates(schedule, range(80)))


@pytest.mark.parametrize(
    "kwargs, match",
    [({"warmup_steps": 0, "total_steps": 10}, "warmup_steps=0"),
     ({"warmup_steps": 10, "total_steps": 10}, "total_steps=10"),
     ({"warmup_steps": 1, "total_steps": 10, "peak_learning_rate": -1.0}, "peak_learning_rate=-1")],
)
def test_schedule_rejects_bad_plans(kwargs, match):
    kwargs = {"peak_learning_rate": 1e-3, **kwargs}
    with pytest.raises(ValueError, match=match):
        WarmupLinearSchedule(**kwargs)


def test_adamw_skips_biases_and_norms():
    optimizer = build_optimizer(WarmupLinearSchedule(1e-3, 1, 10), 0.1)
    dense, norm = keras.layers.Dense(2), keras.layers.LayerNormalization()
    dense.build((None, 2))
    norm.build((None, 2))
    decayed = {v.name: optimizer._use_weight_decay(v) for v in dense.weights + norm.weights}
    assert decayed == {"kernel": True, "bias": False, "gamma": False, "beta": False}
    assert isinstance(build_optimizer(WarmupLinearSchedule(1e-3, 1, 10), 0.0),
                      keras.optimizers.Adam)


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

    from training.recipe.plan import Plan

    def _replan(config, plan, schedule, timer, deadline, checkpoint, steps_per_epoch,
                max_steps):
        planner = TimeBudget(config, budget.Stopwatch(), steps_per_epoch, plan,
                                    deadline)
        planner.timer, planner.max_steps = timer, max_steps
        return planner.replan(schedule, checkpoint)

    # A stopped clock: the figures below count on no time passing between
    # the deadline's making and the plan (a loaded machine took ~0.1 s).
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)

    config = TrainingConfig(task="translation", checkpoint_every_steps=1000)
    schedule = WarmupLinearSchedule(1e-3, 10, 100)
    plan = Plan(total_steps=100, warmup_steps=10, seconds_per_validation=2.0)
    timer = timing.StepTimer()
    timer.times = list(np.cumsum([0.0] + [0.05] * 20))  # 0.05 s per update
    checkpoint = SimpleNamespace(step=50, save_seconds=[])
    deadline = timing.Deadline(time.time() + 20.0)
    deadline.keep(0.0, 2.0)  # a stop's validation is planned for by the plan itself
    assert _replan(config, plan, schedule, timer, deadline, checkpoint, 50, 10_000)
    # ~19.2 s usable at 0.05 s an update plus a 2 s validation every 50
    # updates (0.09 s an update) and one at the end: 173 more.
    assert plan.total_steps - 50 == 173
    assert plan.revisions == 1
    # The schedule now ends annealed at the new last update.
    assert float(schedule(plan.total_steps)) == 0.0
    assert float(schedule(100)) > 0.0
    # A slower machine shrinks the plan; a hopeless one leaves it to the deadline.
    timer.times = list(np.cumsum([0.0] + [0.5] * 20))
    assert _replan(config, plan, schedule, timer, deadline, checkpoint, 50, 10_000)
    assert plan.total_steps - 50 < 40
    deadline = timing.Deadline(time.time())
    assert not _replan(config, plan, schedule, timer, deadline, checkpoint, 50, 10_000)


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
    """Runs made before the plan was a dataclass resume with their plan.json:
    reading and writing it gives the same object, and what is not a field
    of the plan is what the task recorded."""
    from training.recipe.plan import Plan

    recorded = _recorded_plans()
    assert len(recorded) >= 10
    for values in recorded:
        plan = Plan.from_json(values)
        assert plan.to_json() == values
        assert plan.has_recipe() and isinstance(plan.total_steps, int)
        assert set(plan.task_entries) <= {"test_beam", "seconds_decoding_trace",
                                          "seconds_beam_trace"}, plan.task_entries
    budgeted = [Plan.from_json(v) for v in recorded if "seconds_per_step" in v]
    assert budgeted and all(p.task_entries.get("test_beam") is not None for p in budgeted)


def test_a_plan_file_keeps_what_is_set_and_only_that(tmp_path):
    from training.recipe.plan import Plan

    path = tmp_path / "plan.json"
    assert Plan.read(path) is None
    # The plan a run writes before it builds the preset's depth: no recipe.
    depth_only = Plan(planned=False, num_layers=3)
    depth_only.write(path)
    assert json.loads(path.read_text()) == {"planned": False, "num_layers": 3}
    assert Plan.read(path) == depth_only and not depth_only.has_recipe()
    plan = Plan(schedule="auto", peak_learning_rate=1e-3, warmup_steps=10, total_steps=100,
                weight_decay=0.0, batch_tokens=512.0, planned=True, dropout_off=False,
                num_layers=2, task_entries={"seconds_out_of_fold": 0.25})
    plan.write(path)
    written = json.loads(path.read_text())
    assert "revisions" not in written and "dropout_off_from_step" not in written
    assert written["seconds_out_of_fold"] == 0.25 and "task_entries" not in written
    assert Plan.read(path) == plan
    assert plan.recipe() == {"schedule": "auto", "peak_learning_rate": 1e-3,
                             "warmup_steps": 10, "total_steps": 100, "weight_decay": 0.0,
                             "batch_tokens": 512.0}
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="plan.json is not a run's plan"):
        Plan.read(path)


def test_stopwatch_marks_when_a_thing_first_happened():
    watch = budget.Stopwatch(started_at=100.0)
    watch.mark("first_update", at=112.34)
    watch.mark("first_update", at=150.0)  # later updates do not move it
    report = watch.report()
    assert report["first_update_at_second"] == 12.3
    assert report["total_seconds"] >= report["first_update_at_second"]
