"""Random draws of members run as one vectorised computation, made as each member alone makes them.

`keras_transformer.models.member_map.map_members` runs one member's layers
over the members' stacked weights.  A draw keyed by a member's own seed
state (its dropout's mask, its mixup weights) would then be one random op
whose seed differs from member to member, which `tf.vectorized_map` has no
batched form of: it loops over the members in a `while_loop` (and warns),
a loop per draw per step that cost a five-member series ensemble a third of
its training time.

Within `mapped_member`, `member_draw` makes the draw of every member from
the seed states as they stood before the step (tensors from outside the
map, so each draw is one op, made once, not looped), stacks them and takes
the row of the member being run; the member's own state moves on as it
does alone.  Each member draws exactly what it draws alone.
"""

import contextlib
import contextvars

import keras
from keras import ops

_MAPPED = contextvars.ContextVar("keras_transformer_mapped_member", default=None)


@contextlib.contextmanager
def mapped_member(index, states):
    """Within, `member_draw` draws for every mapped member at once.

    Args:
        index: the member being run, a scalar int32 tensor (an element of
            the map).
        states: {id(state variable): its values of every member `(k, ...)`,
            as they stood before the map}; each draw moves its entry on.
    """
    token = _MAPPED.set((index, states))
    try:
        yield
    finally:
        _MAPPED.reset(token)


def maps(seed_generator):
    """Whether `member_draw` draws from `seed_generator` for every mapped member."""
    mapped = _MAPPED.get()
    return mapped is not None and id(seed_generator.state) in mapped[1]


def member_draw(seed_generator, draw):
    """`draw(seed_generator)`, as the member being run draws it alone.

    Outside `mapped_member` (or for a generator the map does not hold) it is
    simply `draw(seed_generator)`.

    Args:
        seed_generator: the `keras.random.SeedGenerator` the draw is keyed by.
        draw: `(seed_generator) -> tensor`; it advances the generator once,
            as every `keras.random` function given a generator does.
    """
    if not maps(seed_generator):
        return draw(seed_generator)
    index, states = _MAPPED.get()
    state = seed_generator.state
    stacked = states[id(state)]
    draws, moved = [], []
    for i in range(stacked.shape[0]):
        with keras.StatelessScope(state_mapping=[(state, stacked[i])]) as scope:
            draws.append(draw(seed_generator))
            moved.append(scope.get_current_value(state))
    states[id(state)] = ops.stack(moved)  # where a second draw starts (a layer called twice)
    seed_generator.next()  # this member's own state moves on, as alone
    return ops.take(ops.stack(draws), index, axis=0)
