"""Models of one architecture run as one computation: their own code, vectorised over their weights.

An ensemble of k models that differ only in their weights would run each
member's code in turn: k copies of every op, forward and backward, each on
a small batch.  The same computation is one member's code mapped over the
members' weights stacked on a new leading axis, as JAX's `vmap` over
stacked parameters does (and PyTorch's `torch.func.stack_module_state`):
`keras.ops.vectorized_map` runs the first member's layers once per slice,
each slice reading, through Keras' `StatelessScope`, member i's variables
where the layers read their own.  On TensorFlow the map is `tf.vectorized_map`,
which turns each op into its batched form (a matmul into a batched matmul)
rather than looping; on JAX it is `jax.vmap`.

The members keep their own variables (checkpoints, saving and export are
theirs), gradients reach each of them through the stack, and what a
member's call writes to its state (its dropout's seed) is written back to
that member.  Every member draws what it would draw alone, each draw made
once from the seeds of before the map (`keras_transformer.layers._member_draws`),
not looped over by the map.
"""

import json

import keras
from keras import ops

from keras_transformer.layers._member_draws import mapped_member


def same_architecture(models):
    """Whether `models` differ only in their weights (and names and seeds).

    One class, one config once names and seeds are set aside (the seeds
    only choose initial weights and random streams, whose states are
    variables), and variables of the same shapes and dtypes in one order.
    """
    first = models[0]

    def signature(model):
        variables = [(tuple(v.shape), v.dtype, v.trainable) for v in model.variables]
        return type(model), _without_names(model.get_config()), variables

    return all(signature(model) == signature(first) for model in models[1:])


def _without_names(config):
    """`config` as JSON text, without its `name` and `seed` entries at any depth."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("name", "seed")}
        if isinstance(value, (list, tuple)):
            return [strip(v) for v in value]
        return value

    return json.dumps(strip(config), sort_keys=True, default=str)


def map_members(members, fn, member_inputs=None, shared_inputs=None):
    """`fn(members[0], inputs_i, shared_inputs)` for each member i, as one computation.

    Args:
        members: k models for which `same_architecture(members)` holds.
        fn: `(model, inputs, shared) -> a tensor or a structure of tensors`,
            written for one model: it calls the model's own layers.
        member_inputs: member i's inputs at index i of every tensor of this
            structure (`(k, ...)`), or None.
        shared_inputs: inputs every member reads alike, or None.

    Returns:
        `fn`'s outputs of every member, stacked on a new leading axis `(k, ...)`.
    """
    template = members[0]
    variables = template.variables
    if shared_inputs is not None:  # read inside the map: tensors, not arrays
        shared_inputs = keras.tree.map_structure(ops.convert_to_tensor, shared_inputs)
    stacked = [ops.stack([m.variables[j].value for m in members]) for j in range(len(variables))]
    state = [j for j, v in enumerate(variables) if not v.trainable]
    written = []  # the state variables a member's call assigns: known when traced
    # The seed states before the map, read inside it as tensors from outside:
    # every member's draw made once (`keras_transformer.layers._member_draws`).
    states = {id(variables[j]): stacked[j] for j in state}

    def one(elements):
        index, weights, inputs = elements if member_inputs is not None else (*elements, None)
        with (keras.StatelessScope(state_mapping=list(zip(variables, weights, strict=True)))
              as scope, mapped_member(index, dict(states))):
            outputs = fn(template, inputs, shared_inputs)
            values = {j: scope.get_current_value(variables[j]) for j in state}
        written[:] = [j for j in state if values[j] is not weights[j]]
        return outputs, [values[j] for j in written]

    indices = ops.arange(len(members), dtype="int32")
    elements = (indices, stacked) if member_inputs is None else (indices, stacked, member_inputs)
    outputs, states = ops.vectorized_map(one, elements)
    for j, value in zip(written, states, strict=True):
        for i, member in enumerate(members):
            member.variables[j].assign(value[i])
    return outputs
