"""Tests for training.optimization.schedule (paper Section 5.3)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from training.optimization.optimizer import build_optimizer
from training.optimization.schedule import (
    TransformerSchedule,
    WarmupLinearSchedule,
    paper_optimizer,
)


def paper_lrate(step_num, d_model, warmup):
    """Equation (3) of the paper, step_num counted from 1."""
    return d_model**-0.5 * min(step_num**-0.5, step_num * warmup**-1.5)


def test_peak_golden_value_for_base_model():
    schedule = TransformerSchedule(hidden_dim=512, warmup_steps=4000)
    # Update number 4000 (paper step_num) is optimizer iteration 3999.
    peak = float(schedule(3999))
    np.testing.assert_allclose(peak, 512**-0.5 * 4000**-0.5, rtol=1e-6)
    np.testing.assert_allclose(peak, 6.9877e-4, rtol=1e-4)
    assert schedule.peak_learning_rate() == pytest.approx(peak, rel=1e-6)


def test_matches_paper_formula_and_scale():
    schedule = TransformerSchedule(hidden_dim=16, warmup_steps=10, scale=2.0)
    steps = np.array([0, 1, 5, 9, 10, 50, 1000])
    values = keras.ops.convert_to_numpy(schedule(steps))
    expected = [2.0 * paper_lrate(s + 1, 16, 10) for s in steps]
    np.testing.assert_allclose(values, expected, rtol=1e-6)


def test_step_zero_is_finite_and_positive():
    value = float(TransformerSchedule(hidden_dim=8, warmup_steps=4)(0))
    assert np.isfinite(value) and value > 0
    np.testing.assert_allclose(value, 8**-0.5 * 4**-1.5, rtol=1e-6)


def test_monotone_up_then_down():
    schedule = TransformerSchedule(hidden_dim=8, warmup_steps=20)
    values = keras.ops.convert_to_numpy(schedule(np.arange(200)))
    peak = int(np.argmax(values))
    assert peak == 19
    assert np.all(np.diff(values[: peak + 1]) > 0)
    assert np.all(np.diff(values[peak:]) < 0)


def test_config_round_trip():
    schedule = TransformerSchedule(hidden_dim=64, warmup_steps=100, scale=0.5)
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule)
    )
    assert isinstance(restored, TransformerSchedule)
    assert restored.get_config() == schedule.get_config()
    np.testing.assert_allclose(float(restored(42)), float(schedule(42)))


def test_optimizer_config_round_trip():
    optimizer = paper_optimizer(hidden_dim=64, warmup_steps=100, scale=0.5)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert (restored.beta_1, restored.beta_2, restored.epsilon) == (0.9, 0.98, 1e-9)
    assert (
        restored.get_config()["learning_rate"]
        == optimizer.get_config()["learning_rate"]
    )
    np.testing.assert_allclose(
        float(restored.learning_rate), 0.5 * paper_lrate(1, 64, 100), rtol=1e-6
    )


def test_registered_name():
    name = keras.saving.get_registered_name(TransformerSchedule)
    assert name == "keras_transformer>TransformerSchedule"


@pytest.mark.parametrize("jit_compile", [False, True])
def test_inside_compiled_tf_function(jit_compile):
    schedule = TransformerSchedule(hidden_dim=32, warmup_steps=10)
    compiled = tf.function(schedule, jit_compile=jit_compile)
    for step in (0, 9, 100):
        np.testing.assert_allclose(
            float(compiled(tf.constant(step, tf.int64))),
            paper_lrate(step + 1, 32, 10),
            rtol=1e-6,
        )


def test_first_adam_update_uses_paper_step_one():
    # Adam's first update is lr * g / (|g| + eps'), i.e. lr for |g| >> eps.
    optimizer = paper_optimizer(hidden_dim=16, warmup_steps=10)
    variable = keras.Variable(np.zeros(3, np.float32))
    optimizer.apply_gradients([(tf.constant([1.0, -2.0, 4.0]), variable)])
    step_one = paper_lrate(1, 16, 10)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(variable),
        [-step_one, step_one, -step_one],
        rtol=1e-5,
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"hidden_dim": 0},
        {"hidden_dim": 8, "warmup_steps": 0},
        {"hidden_dim": 8, "scale": 0.0},
    ],
)
def test_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError, match="Received"):
        TransformerSchedule(**kwargs)


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
