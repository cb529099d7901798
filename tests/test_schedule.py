"""Tests for training.optimization.schedule (paper Section 5.3)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from training.optimization.schedule import TransformerSchedule, paper_optimizer


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
