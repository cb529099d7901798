"""`short_run_num_layers`: short runs build a shallower model, long ones the preset's.

A budgeted run times and plans the shallower model first; when even that
one would make `dropout_min_epochs` passes, it builds the preset's depth and
plans again.  Nothing of the model it tried may remain: not its checkpoints
(a resume would load them into the wrong shape), not its updates (the run
must end with the weights of a run that built the preset's depth at once).
"""

import json

import numpy as np
import pytest

from training.config import load_config
from training.resume import ResumableCheckpoint
from training.run_dir import load_run
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
    def applies(*overrides):
        return _short_depth_applies(load_config("tiny", FAST + list(overrides)))

    assert not applies("epochs=1")  # no short_run_num_layers: the preset's depth
    assert applies("short_run_num_layers=1", "epochs=2")  # 2 passes < 3: short
    assert not applies("short_run_num_layers=1", "epochs=3")
    assert not applies("short_run_num_layers=1", "epochs=2", "dropout_min_epochs=2")
    assert not applies("short_run_num_layers=2", "epochs=1")  # the preset's depth anyway
    # A budget's passes are known only once timed: it always tries.
    assert applies("short_run_num_layers=1", "epochs=50", "time_budget_minutes=5")


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
