"""A shared test harness for keras-transformer layers (STYLE.md habit 10).

`run_layer_test(cls, init_kwargs, inputs, tmp_path, ...)` runs every check a
public layer must pass and returns the layer and its eager outputs (with its
final weights), so that a test can add its own property checks on them:

1. eager call, finite outputs (and `compute_output_shape` agrees with them);
2. config round trip: `from_config(get_config())` has the same config and,
   with the weights copied, gives identical outputs;
3. symbolic call in a functional model, whose outputs equal the eager call;
4. `.keras` save and reload with `safe_mode=True`, identical outputs;
5. a call under the `mixed_bfloat16` policy: float32 variables, bfloat16
   outputs, no NaN, close to float32 with the same weights;
6. one `fit` step (graph mode, no XLA) of a tiny functional model around the
   layer: finite loss and every trainable weight of the layer moved (a weight
   that never moves is disconnected from the output).

Keep the inputs tiny: every call here is eager or traced once.
"""

import keras
import numpy as np
from keras import ops


def _as_list(inputs):
    return list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]


def _first(outputs):
    return outputs[0] if isinstance(outputs, (list, tuple)) else outputs


def _numpy_tree(outputs):
    return [np.asarray(ops.convert_to_numpy(o)) for o in keras.tree.flatten(outputs)]


def assert_trees_equal(a, b, atol=0.0, err_msg=""):
    """Every leaf of two output structures equal (exactly when `atol=0`)."""
    a, b = _numpy_tree(a), _numpy_tree(b)
    assert len(a) == len(b), f"{err_msg}: {len(a)} outputs vs {len(b)}"
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(
            x.astype("float64"), y.astype("float64"), rtol=0, atol=atol, err_msg=err_msg
        )


def _symbolic_inputs(arrays):
    return [
        keras.Input(
            shape=a.shape[1:], batch_size=None, dtype=str(a.dtype), name=f"input_{i}"
        )
        for i, a in enumerate(arrays)
    ]


def _arguments(tensors, call_args):
    """The positional call arguments: `tensors` picked (and shared) by index."""
    return [tensors[i] for i in call_args]


def check_config_round_trip(layer, tensors, call_args, call_kwargs):
    """`from_config(get_config())` keeps the config and, with copied weights, the outputs."""
    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config, "get_config() changed across from_config()"
    args = _arguments(tensors, call_args)
    clone(*args, **call_kwargs)  # build
    clone.set_weights(layer.get_weights())
    assert_trees_equal(
        layer(*args, **call_kwargs),
        clone(*args, **call_kwargs),
        err_msg="from_config() clone with copied weights",
    )


def check_saved_model_round_trip(model, inputs, tmp_path):
    """`.keras` save then `load_model(safe_mode=True)` gives identical outputs."""
    path = tmp_path / f"{model.name}.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path, safe_mode=True)
    assert_trees_equal(model(inputs), reloaded(inputs), err_msg=".keras round trip")
    return reloaded


def check_fit_step(layer, symbolic, outputs, arrays, frozen_ok=()):
    """One SGD step of `Dense(1)` on the layer: finite loss, every layer weight moves.

    `frozen_ok` names weights whose gradient is zero by construction (e.g. a
    key bias under softmax's shift invariance); they are allowed not to move.
    """
    head = keras.layers.Dense(1, name="fit_head")(_first(outputs))
    model = keras.Model(symbolic, head)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=False)
    before = {v.path: np.array(v.numpy()) for v in layer.trainable_weights}
    batch = len(arrays[0])
    target = np.ones((batch, *head.shape[1:]), "float32")
    history = model.fit(arrays, target, batch_size=batch, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0]), history.history
    for v in layer.trainable_weights:
        if any(name in v.path for name in frozen_ok):
            continue
        assert not np.array_equal(before[v.path], v.numpy()), (
            f"weight {v.path} did not move after a fit step (no gradient reaches it)"
        )


def check_mixed_bfloat16(
    layer_cls, init_kwargs, args, call_kwargs, reference_layer, rtol
):
    """`mixed_bfloat16`: float32 variables, no NaN, close to float32 outputs.

    bfloat16 keeps 8 significant bits (relative step 2**-8 ~ 0.4%); a layer
    of a few matmuls accumulates a few such roundings, so outputs must agree
    with float32 (same weights) within `rtol` of the output scale.
    """
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        layer = layer_cls(**init_kwargs)
        layer(*args, **call_kwargs)  # build
        assert layer.compute_dtype == "bfloat16"
        assert all(v.dtype == "float32" for v in layer.weights), (
            "variables must be float32"
        )
        layer.set_weights(reference_layer.get_weights())
        outputs = layer(*args, **call_kwargs)
    finally:
        keras.config.set_dtype_policy(previous)
    reference = reference_layer(*args, **call_kwargs)
    assert _first(outputs).dtype == "bfloat16", "output not in the compute dtype"
    for got, want in zip(_numpy_tree(outputs), _numpy_tree(reference), strict=True):
        got = got.astype("float32")
        assert np.all(np.isfinite(got)), "NaN/inf under mixed_bfloat16"
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=0, atol=rtol * scale)
    return outputs


def run_layer_test(
    layer_cls,
    init_kwargs,
    inputs,
    tmp_path,
    call_kwargs=None,
    call_args=None,
    expected_output_shape=None,
    frozen_ok=(),
    bfloat16_rtol=3e-2,
):
    """Runs checks 1-6 of the module docstring; returns `(layer, outputs)`.

    `outputs` is an eager call with the layer's final (post-fit) weights.

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor arguments.
        inputs: a numpy array or a list of arrays, passed positionally.
        tmp_path: a pytest `tmp_path` for the `.keras` file.
        call_kwargs: non-tensor call arguments (`use_causal_mask=True`, ...).
        call_args: indices into `inputs` giving the positional call arguments,
            e.g. `(0, 0)` passes one tensor as both query and value (the
            self-attention path); `range(len(inputs))` by default.
        expected_output_shape: the shape of the (first) output, if checked.
        frozen_ok: weight names allowed not to move in the fit step.
        bfloat16_rtol: tolerance of mixed_bfloat16 vs float32, relative to the
            largest float32 output (or 1).
    """
    call_kwargs = dict(call_kwargs or {})
    arrays = _as_list(inputs)
    call_args = tuple(range(len(arrays)) if call_args is None else call_args)
    tensors = [ops.convert_to_tensor(a) for a in arrays]
    args = _arguments(tensors, call_args)

    # 1. Eager call.
    layer = layer_cls(**init_kwargs)
    eager = layer(*args, **call_kwargs)
    for leaf in _numpy_tree(eager):
        assert np.all(np.isfinite(leaf.astype("float32"))), "non-finite eager output"
    if expected_output_shape is not None:
        assert tuple(_first(eager).shape) == tuple(expected_output_shape)
    overrides_shape = (
        type(layer).compute_output_shape is not keras.layers.Layer.compute_output_shape
    )
    if overrides_shape and not isinstance(eager, (list, tuple)) and len(args) == 1:
        declared = layer.compute_output_shape(tuple(args[0].shape))
        assert tuple(declared) == tuple(eager.shape), "compute_output_shape disagrees"

    # 2. Config round trip.
    check_config_round_trip(layer, tensors, call_args, call_kwargs)

    # 3. Symbolic call in a functional model equals the eager call.
    symbolic = _symbolic_inputs(arrays)
    outputs = layer(*_arguments(symbolic, call_args), **call_kwargs)
    model = keras.Model(symbolic, outputs, name=f"harness_{layer.name}")
    assert_trees_equal(model(arrays), eager, atol=1e-6, err_msg="functional vs eager")

    # 4. `.keras` round trip.
    check_saved_model_round_trip(model, arrays, tmp_path)

    # 5. Mixed precision (before the fit step moves the reference weights).
    check_mixed_bfloat16(
        layer_cls, init_kwargs, args, call_kwargs, layer, bfloat16_rtol
    )

    # 6. One fit step.
    check_fit_step(layer, symbolic, outputs, arrays, frozen_ok)
    return layer, layer(*args, **call_kwargs)
