"""FusedAdam and FusedAdamW train as Keras' Adam and AdamW, with fewer ops.

Keras' own optimizers are the reference: the same model, data and settings
trained with each must end with the same weights and the same optimizer
state (iterations, momentums, velocities), to float rounding.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from training.distribute import build_strategy
from training.optimization.fused_adam import FusedAdam, FusedAdamW

#: The two kernels differ from Keras' ops only in float rounding.
RTOL, ATOL = 1e-5, 1e-7
BATCH = 8
EXCLUDED = ["bias", "gamma", "beta"]


def _data(steps):
    rng = np.random.default_rng(0)
    return rng.integers(0, 20, (steps * BATCH, 6)), rng.integers(0, 4, (steps * BATCH,))


def _model(blocks=1):
    """Embedding (a sparse gradient), Dense and LayerNormalization layers:
    kernels and embeddings decay; biases, gammas and betas do not."""
    keras.utils.set_random_seed(7)
    inputs = keras.Input((6,), dtype="int32")
    x = keras.layers.Flatten()(keras.layers.Embedding(20, 8, name="embedding")(inputs))
    for i in range(blocks):  # named, so that two models' variables have the same names
        x = keras.layers.Dense(16, activation="relu", name=f"dense_{i}")(x)
        x = keras.layers.LayerNormalization(name=f"norm_{i}")(x)
    return keras.Model(inputs, keras.layers.Dense(4, name="logits")(x))


def _schedule():
    return keras.optimizers.schedules.CosineDecay(0.0, 30, warmup_steps=5, warmup_target=2e-2)


def _adamw(cls, **kwargs):
    optimizer = cls(_schedule(), weight_decay=0.05, beta_1=0.9, beta_2=0.98, epsilon=1e-9,
                    **kwargs)
    optimizer.exclude_from_weight_decay(var_names=EXCLUDED)
    return optimizer


def _adam(cls, **kwargs):
    return cls(_schedule(), beta_1=0.9, beta_2=0.98, epsilon=1e-9, **kwargs)


def _compiled(optimizer, strategy=None, jit_compile=False):
    with (strategy or tf.distribute.get_strategy()).scope():
        model = _model()
        model.compile(optimizer(), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=jit_compile)
        model.optimizer.build(model.trainable_variables)
    return model


def _fit(model, steps, first=0):
    x, y = _data(first + steps)
    model.fit(x[first * BATCH:], y[first * BATCH:], batch_size=BATCH, epochs=1, shuffle=False,
              verbose=0)
    return model


def _assert_same_state(model, reference, rtol=RTOL, atol=ATOL):
    """Equal weights and optimizer variables, matched by name and order."""
    ours, theirs = model.optimizer.variables, reference.optimizer.variables
    assert [v.name for v in ours] == [v.name for v in theirs]
    for mine, expected in zip(ours + model.weights, theirs + reference.weights, strict=True):
        np.testing.assert_allclose(np.asarray(mine), np.asarray(expected), rtol=rtol,
                                   atol=atol, err_msg=mine.path)


@pytest.mark.parametrize("fused, keras_optimizer, make, clipping", [
    (FusedAdamW, keras.optimizers.AdamW, _adamw, {"global_clipnorm": 0.1}),
    (FusedAdam, keras.optimizers.Adam, _adam, {"clipnorm": 0.05}),
], ids=["adamw", "adam"])
def test_thirty_steps_match_keras(fused, keras_optimizer, make, clipping):
    reference = _fit(_compiled(lambda: make(keras_optimizer, **clipping)), 30)
    model = _fit(_compiled(lambda: make(fused, **clipping)), 30)
    _assert_same_state(model, reference)
    assert int(model.optimizer.iterations) == 30
    start = _model()
    for trained, initial in zip(model.weights, start.weights, strict=True):
        assert np.abs(np.asarray(trained) - np.asarray(initial)).max() > 1e-3, trained.path


def test_the_decay_moves_kernels_beyond_the_tolerance():
    """A run without decay ends elsewhere, beyond the tolerance of the
    comparison with Keras: that comparison sees a decay skipped."""
    decayed = _fit(_compiled(lambda: _adamw(FusedAdamW)), 30)
    plain = _fit(_compiled(lambda: _adam(FusedAdam)), 30)
    for name in ("embeddings", "kernel"):
        ours = [np.asarray(w) for w in decayed.weights if w.name == name]
        theirs = [np.asarray(w) for w in plain.weights if w.name == name]
        assert ours and not all(np.allclose(a, b, rtol=RTOL, atol=ATOL)
                                for a, b in zip(ours, theirs, strict=True)), name


def test_one_update_is_the_adamw_formula():
    lr, wd, b1, b2, eps = 0.01, 0.1, 0.9, 0.98, 1e-9
    w0, g = np.array([0.5, -2.0, 0.0], "float32"), np.array([0.3, 0.01, -4.0], "float32")
    variable = keras.Variable(w0, name="kernel")
    optimizer = FusedAdamW(lr, weight_decay=wd, beta_1=b1, beta_2=b2, epsilon=eps)
    optimizer.apply_gradients([(tf.constant(g), variable)])
    m, v = (1 - b1) * g, (1 - b2) * g**2
    alpha = lr * np.sqrt(1 - b2) / (1 - b1)
    expected = w0 - lr * wd * w0 - alpha * m / (np.sqrt(v) + eps)
    # The kernel takes 1 - beta_2 in float32: 1e-6 of v, half that of the step.
    np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-6)
    slots = {slot.name: slot.numpy() for slot in optimizer.variables}
    np.testing.assert_allclose(slots["kernel_momentum"], m, rtol=1e-6)
    np.testing.assert_allclose(slots["kernel_velocity"], v, rtol=2e-6)


def _traced_ops(optimizer, blocks):
    model = _model(blocks)
    variables = model.trainable_variables
    optimizer.build(variables)
    apply = tf.function(lambda grads: optimizer.apply_gradients(zip(grads, variables, strict=True)))
    grads = [tf.zeros_like(v) for v in variables]
    return len(variables), len(apply.get_concrete_function(grads).graph.get_operations())


def test_tracing_apply_takes_a_third_of_the_ops():
    count, fused = _traced_ops(_adamw(FusedAdamW, global_clipnorm=1.0), blocks=10)
    _, reference = _traced_ops(_adamw(keras.optimizers.AdamW, global_clipnorm=1.0), blocks=10)
    assert count >= 40
    assert fused <= reference / 3, (fused, reference)


@pytest.mark.parametrize("writer, reader", [
    (keras.optimizers.AdamW, FusedAdamW),
    (FusedAdamW, keras.optimizers.AdamW),
], ids=["keras-to-fused", "fused-to-keras"])
def test_checkpoint_interchange(tmp_path, writer, reader):
    """A checkpoint of one restores into the other, variable for variable,
    and the two continue alike."""
    written = _fit(_compiled(lambda: _adamw(writer)), 10)
    path = tf.train.Checkpoint(model=written, optimizer=written.optimizer).write(
        str(tmp_path / "checkpoint"))
    restored = _compiled(lambda: _adamw(reader))
    tf.train.Checkpoint(model=restored, optimizer=restored.optimizer).read(path).assert_consumed()
    _assert_same_state(restored, written, rtol=0, atol=0)
    _assert_same_state(_fit(restored, 10, first=10), _fit(written, 10, first=10))


def test_saved_model_file_reloads_with_its_optimizer(tmp_path):
    model = _fit(_compiled(lambda: FusedAdamW(_schedule(), weight_decay=0.05)), 5)
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    assert type(loaded.optimizer) is FusedAdamW
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    _assert_same_state(loaded, model, rtol=0, atol=0)
    _assert_same_state(_fit(loaded, 5, first=5), _fit(model, 5, first=5))


def test_amsgrad_is_refused():
    with pytest.raises(ValueError, match="amsgrad=True"):
        FusedAdamW(amsgrad=True)


@pytest.mark.parametrize("replicas", [1, 2])
def test_mirrored_strategy_matches_the_default_strategy(replicas):
    """Each replica updates its own copies: the kernel is given the handles
    of the replica's copies of the variable and of its slots."""
    if replicas == 1:
        strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    else:
        strategy = build_strategy("mirrored")
    assert strategy.num_replicas_in_sync == replicas
    model = _fit(_compiled(lambda: _adamw(FusedAdamW), strategy), 10)
    _assert_same_state(model, _fit(_compiled(lambda: _adamw(FusedAdamW)), 10))
    for variable in model.weights + model.optimizer.variables:
        copies = [np.asarray(v) for v in variable.value.values]
        assert len(copies) == replicas
        for copy in copies[1:]:
            np.testing.assert_array_equal(copy, copies[0])


def test_mixed_precision_with_a_loss_scale_optimizer():
    keras.config.set_dtype_policy("mixed_float16")  # the autouse fixture restores float32

    def make(cls):
        return keras.optimizers.LossScaleOptimizer(_adamw(cls))

    model = _fit(_compiled(lambda: make(FusedAdamW)), 10)
    reference = _fit(_compiled(lambda: make(keras.optimizers.AdamW)), 10)
    assert isinstance(model.optimizer.inner_optimizer, FusedAdamW)
    assert model.weights[0].dtype == "float32"
    _assert_same_state(model, reference)


def test_xla_compiled_steps_match_keras():
    model = _fit(_compiled(lambda: _adamw(FusedAdamW), jit_compile=True), 30)
    _assert_same_state(model, _fit(_compiled(lambda: _adamw(keras.optimizers.AdamW)), 30))
