"""`short_run_num_layers`: short runs build a shallower model, long ones the preset's.

A budgeted run times and plans the shallower model first; when the preset's
depth, its cost estimated from the shallower model's, would make
`dropout_min_epochs` passes, it builds that depth and plans again.  Nothing
of the model it tried may remain: not its checkpoints (a resume would load
them into the wrong shape), not its updates (the run must end with the
weights of a run that built the preset's depth at once).
"""

import dataclasses
import json

import numpy as np
import pytest

from training.config import load_config
from training.loop.time_budget import TimeBudget, depth_cost_ratio
from training.recipe import budget
from training.recipe.plan import EvaluationPlan, Measured, Plan, Recipe
from training.runs.resume import ResumableCheckpoint
from training.runs.run_dir import load_run
from training.train import _short_depth_applies, train

# The toy corpus, a 2-layer model (1 is the short-run depth), a handful of
# updates per pass; `epochs` caps the plan, so a generous budget ends early.
FAST = [
    "toy_train_size=160",
    "toy_eval_size=8",
    "eval_sentences=0",
    "beam_size=1",
    "tokens_per_batch=192",
    "checkpoint_every_steps=1000",
    "deterministic=true",
    "model.num_layers=2",
]


def _layers(run_dir):
    model = load_run(run_dir).model
    return model.config.num_layers, len(model.encoder_blocks), len(model.decoder_blocks)


def test_which_runs_try_the_short_run_depth():
    def applies(*overrides, steps_per_pass=None):
        config = load_config("tiny", FAST + list(overrides))
        return _short_depth_applies(config, budget.Budget.of(config, 10, steps_per_pass))

    assert not applies("epochs=1")  # no short_run_num_layers: the preset's depth
    assert applies("short_run_num_layers=1", "epochs=2")  # 2 passes < 3: short
    assert not applies("short_run_num_layers=1", "epochs=3")
    assert not applies("short_run_num_layers=1", "epochs=2", "dropout_min_epochs=2")
    assert not applies("short_run_num_layers=2", "epochs=1")  # the preset's depth anyway
    # Passes, not epochs, where a recipe's epoch is not a pass: 2 epochs of
    # 10 updates are 4 passes of 5, and 1 epoch of 10 is 0.5 pass of 20.
    assert not applies("short_run_num_layers=1", "epochs=2", steps_per_pass=5)
    assert applies("short_run_num_layers=1", "epochs=3", steps_per_pass=20)
    # A budget's passes are known only once timed: it always tries.
    assert applies("short_run_num_layers=1", "epochs=50", "time_budget_minutes=5")


def _transformer(num_layers):
    from keras_transformer.models import Transformer
    from training.tasks.common import preset_config

    config = load_config("tiny", FAST + [f"model.num_layers={num_layers}"])
    model = Transformer.from_config_object(preset_config(config, vocabulary_size=40))
    model({"encoder_token_ids": np.ones((1, 2), "int32"),
           "decoder_token_ids": np.ones((1, 2), "int32")})
    return model


def test_depth_cost_ratio_predicts_the_deeper_models_parameters():
    """The blocks' parameters scale with depth, the embeddings do not: the
    ratio from the shallower model is the deeper one's parameter count over
    its own, exactly."""
    one, three = _transformer(1), _transformer(3)
    assert depth_cost_ratio(one, 1) == 1.0
    np.testing.assert_allclose(
        depth_cost_ratio(one, 3), three.count_params() / one.count_params(), rtol=1e-12)
    np.testing.assert_allclose(
        depth_cost_ratio(three, 1), one.count_params() / three.count_params(), rtol=1e-12)
    assert 1.0 < depth_cost_ratio(one, 3) < 3.0  # the embeddings cost at any depth


class _Clock:
    def __init__(self, elapsed):
        self._elapsed = elapsed

    def elapsed(self):
        return self._elapsed


def _shallow_plan(seconds_per_step, dropout_off=False):
    recipe = Recipe(schedule="auto", peak_learning_rate=1e-3, warmup_steps=10,
                    total_steps=100, weight_decay=0.0, batch_tokens=512.0)
    return Plan(recipe, num_layers=1, dropout_off=dropout_off, planned=False, measured=Measured(
        seconds_per_step=seconds_per_step, seconds_compiling_later=0.0,
        seconds_per_validation=0.0, seconds_reserved_for_final=0.0, planned_at_second=0.0,
        evaluation=EvaluationPlan()))


def _preset_depth_is_long(config, model, plan, num_layers, clock, steps_per_epoch, max_steps):
    """(`TimeBudget.preset_depth_is_long` of a budget at `clock` planned as
    `plan`, the plan it holds then)."""
    arithmetic = dataclasses.replace(budget.Budget.of(config, steps_per_epoch),
                                     max_steps=max_steps)
    planner = TimeBudget(arithmetic, clock, plan)
    return planner.preset_depth_is_long(model, num_layers), planner.plan


@pytest.mark.parametrize("deep_passes", [1.5, 2.9, 3.1, 6.0])
def test_preset_depth_is_built_when_it_would_make_enough_passes(deep_passes):
    """The deeper model is judged on its own estimated passes, not on the
    shallower one's: a 1+1-layer model that would make 3 passes or more
    still stays shallow unless 3+3 layers, at their cost, would make 3."""
    one = _transformer(1)
    ratio = depth_cost_ratio(one, 3)
    config = load_config("tiny", FAST + ["short_run_num_layers=1", "model.num_layers=3",
                                         "epochs=1000", "time_budget_minutes=10"])
    steps_per_epoch, usable = 100, 600 * (1 - budget.SAFETY)
    # The shallower model's pace, such that the deeper one makes `deep_passes`:
    # the shallower one makes `ratio` times as many (> 3 in every case but one).
    plan = _shallow_plan(usable / (deep_passes * ratio * steps_per_epoch))
    long, plan = _preset_depth_is_long(config, one, plan, 3, _Clock(0.0), steps_per_epoch,
                                       10**9)
    assert long is (deep_passes >= 3)
    np.testing.assert_allclose(plan.measured.preset_depth_passes, deep_passes, atol=0.02)
    # Time already spent counts: half the budget gone halves the passes.
    plan = _shallow_plan(usable / (deep_passes * ratio * steps_per_epoch))
    _, plan = _preset_depth_is_long(config, one, plan, 3, _Clock(300.0), steps_per_epoch, 10**9)
    np.testing.assert_allclose(plan.measured.preset_depth_passes, deep_passes / 2, atol=0.02)
    # A shallower model already short (dropout off) never builds the deeper one.
    short = _shallow_plan(1e-6, dropout_off=True)
    long, _ = _preset_depth_is_long(config, one, short, 3, _Clock(0.0), 100, 10**9)
    assert not long


@pytest.mark.parametrize("value", ["-1", "1.5", "true", "\"two\""])
def test_bad_short_run_num_layers_is_refused_with_its_name(value):
    with pytest.raises(ValueError, match="short_run_num_layers"):
        load_config("tiny", [f"short_run_num_layers={value}"])


def test_discarded_checkpoints_restore_nothing(tmp_path):
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    checkpoint = ResumableCheckpoint(tmp_path / "resume", every_steps=1)
    checkpoint.set_model(model)
    checkpoint.step = 3
    checkpoint.save()
    assert ResumableCheckpoint(tmp_path / "resume", 1).restore(model) == 3
    checkpoint.discard()
    assert checkpoint.step == 0
    assert ResumableCheckpoint(tmp_path / "resume", 1).restore(model) == 0
    assert not any(p.name.startswith("step-") for p in (tmp_path / "resume").iterdir())


@pytest.mark.slow
def test_budgeted_short_run_keeps_the_shallower_model(tmp_path):
    """Two passes under a budget: a short run, trained (without dropout) at
    `short_run_num_layers`, and the plan says so."""
    config = load_config("tiny", FAST + [
        "epochs=2", "time_budget_minutes=10", "short_run_num_layers=1",
    ])
    metrics = train(config, tmp_path / "run", verbose=0)
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert plan["num_layers"] == 1 and plan["dropout_off"], plan
    assert _layers(tmp_path / "run") == (1, 1, 1)
    assert metrics["steps"] == plan["total_steps"] == 2 * metrics["steps_per_epoch"]


@pytest.mark.slow
def test_budgeted_long_run_builds_the_preset_depth_as_if_never_shallower(tmp_path):
    """Four passes: even the shallower model is not short, so the preset's
    2 layers are built and planned afresh; the final weights equal those of
    a run that never tried 1 layer (its checkpoints and updates are gone)."""
    common = FAST + ["epochs=4", "time_budget_minutes=10"]
    tried = train(load_config("tiny", common + ["short_run_num_layers=1"]),
                  tmp_path / "tried", verbose=0)
    direct = train(load_config("tiny", common), tmp_path / "direct", verbose=0)
    plan = json.loads((tmp_path / "tried" / "plan.json").read_text())
    assert plan["num_layers"] == 2 and not plan["dropout_off"], plan
    assert tried["steps"] == direct["steps"] == 4 * tried["steps_per_epoch"]
    assert _layers(tmp_path / "tried") == _layers(tmp_path / "direct") == (2, 2, 2)
    tried_weights = load_run(tmp_path / "tried").model.get_weights()
    direct_weights = load_run(tmp_path / "direct").model.get_weights()
    for a, b in zip(tried_weights, direct_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_unbudgeted_short_run_builds_the_shallower_model_at_once(tmp_path):
    config = load_config("tiny", FAST + ["epochs=1", "short_run_num_layers=1"])
    train(config, tmp_path / "run", verbose=0)
    assert json.loads((tmp_path / "run" / "plan.json").read_text())["num_layers"] == 1
    assert _layers(tmp_path / "run") == (1, 1, 1)


def test_dropout_switched_off_mid_fit_trains_as_a_second_fit_without_it():
    """`DropoutOffAt(step)`: one `fit` that turns dropout off after `step`
    updates ends with the weights of a `fit` of `step` updates with dropout
    followed by a `fit` without it (the resumed-run path: a revision found
    the run short at that update)."""
    import keras

    from training.loop.dropout import DropoutOffAt, disable_dropout

    class Steps(keras.callbacks.Callback):  # the checkpoint's step counter
        step = 0

        def on_train_batch_end(self, batch, logs=None):
            self.step += 1

    x = np.random.default_rng(0).normal(size=(16, 8)).astype("float32")
    y = x @ np.arange(8.0, dtype="float32")[:, None]

    def fresh():
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dropout(0.5), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        return model

    switched = fresh()
    steps = Steps()
    switch = DropoutOffAt(steps, 3)
    switched.fit(x, y, batch_size=2, epochs=1, steps_per_epoch=7, shuffle=False,
                 callbacks=[steps, switch], verbose=0)
    assert switch.done and switched.layers[1].rate == 0.0

    two_fits = fresh()
    two_fits.fit(x[:6], y[:6], batch_size=2, epochs=1, shuffle=False, verbose=0)
    assert disable_dropout(two_fits)
    two_fits.fit(x[6:14], y[6:14], batch_size=2, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(switched.get_weights(), two_fits.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)

    # Never switched: dropout all along gives other weights.
    kept = fresh()
    kept.fit(x[:14], y[:14], batch_size=2, epochs=1, shuffle=False, verbose=0)
    assert not all(np.allclose(a, b) for a, b in zip(kept.get_weights(), switched.get_weights(),
                                                       strict=True))
