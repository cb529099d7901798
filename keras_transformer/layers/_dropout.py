"""Dropout whose mask can come from ThreeFry, a counter-based generator in keras.ops.

An internal detail of the package's layers and models, not a public
layer: `Dropout` is `keras.layers.Dropout` (the same arguments, seed
generator and masks) except while a model trains under XLA on TensorFlow,
where Keras' Philox masks cost a sixth of the base model's training step on
a CPU (`benchmarks/bench_training_throughput.py`, variant
`ours_untied_philox`) and ThreeFry's fuse into the select.
"""

import contextlib
import contextvars

import keras
from keras import ops

from keras_transformer.layers._member_draws import maps, member_draw

# Threefry-2x32 (Salmon et al., 2011, Table 4): rotation constants of the
# even and odd groups of four rounds, and the key-schedule parity constant.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA
_THREEFRY = contextvars.ContextVar("keras_transformer_threefry_dropout", default=False)


def _uint32(x):
    return ops.convert_to_tensor(x, "uint32")


def _rotate_left(x, bits):
    return ops.bitwise_or(ops.left_shift(x, bits), ops.right_shift(x, 32 - bits))


def threefry2x32(key, counter):
    """Threefry-2x32 with 20 rounds: a keyed bijection of pairs of uint32 words.

    The block function of JAX's default PRNG and of Random123 (Salmon et al.,
    2011), written in `keras.ops` uint32 arithmetic (additions wrap modulo
    2^32), so that XLA fuses it into the consumer of its bits.

    Args:
        key: two uint32 scalars `(k0, k1)`.
        counter: two uint32 tensors `(x0, x1)` of one shape.

    Returns:
        The two uint32 output words, each of the counter's shape.
    """
    k0, k1 = (_uint32(k) for k in key)
    x0, x1 = (_uint32(x) for x in counter)
    schedule = (k0, k1, ops.bitwise_xor(ops.bitwise_xor(k0, k1), _uint32(_PARITY)))
    x0, x1 = x0 + k0, x1 + k1
    for group in range(5):
        for bits in _ROTATIONS[group % 2]:
            x0 = x0 + x1
            x1 = ops.bitwise_xor(_rotate_left(x1, bits), x0)
        # Key injection after every four rounds, with the group number.
        x0 = x0 + schedule[(group + 1) % 3]
        x1 = x1 + schedule[(group + 2) % 3] + _uint32(group + 1)
    return x0, x1


def threefry_bits(key, shape):
    """One uint32 of ThreeFry output per element of `shape`: word 0 of the
    block at counter `(flat index, 0)`.  Element i depends on the key and i
    only, so any shape gets the same stream, element by element."""
    size = 1
    for dim in shape:
        size = size * dim
    index = ops.cast(ops.reshape(ops.arange(size, dtype="int32"), shape), "uint32")
    bits, _ = threefry2x32(key, (index, ops.zeros_like(index)))
    return bits


@contextlib.contextmanager
def threefry_dropout(enabled=True):
    """Within this context, `keras_transformer.layers.Dropout` layers traced in
    training draw their masks from `threefry_bits` instead of `keras.random`.

    Our models enter it around `train_step` when they train under XLA on the
    TensorFlow backend (see `Dropout`); enter it yourself around a custom
    training step compiled with `tf.function(jit_compile=True)`.
    """
    token = _THREEFRY.set(bool(enabled))
    try:
        yield
    finally:
        _THREEFRY.reset(token)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with an XLA-friendly mask generator.

    The same layer as Keras's (same arguments, same seed generator state, so
    weights and checkpoints are interchangeable), except inside
    `threefry_dropout()`: there the keep mask is `bits >= round(rate * 2^32)`
    on `threefry_bits`, keyed by the layer's seed generator (a new key each
    call, as Keras draws a new seed).  The keep probability is `1 - rate` to
    within 2^-32, and kept values are scaled by `1 / (1 - rate)`, as Keras's.

    Why: on the TensorFlow backend under XLA, `keras.random` lowers to Philox,
    built on 32x32->64-bit multiplies, which XLA's CPU code runs slowly (TF's
    own generators under XLA on this CPU: Philox 6.7 ns per element, ThreeFry
    0.9 ns); in the base-size training step (Section 5.4's residual dropout plus
    attention dropout) the masks took a sixth of the step.  ThreeFry is
    adds, rotations and xors, which XLA fuses into the select
    (`benchmarks/bench_training_throughput.py`, `ours_untied_philox`).
    Without XLA it is the other way round, one kernel per op, 4-5x slower
    than TF's Philox kernel (`benchmarks/ablate_dropout.py`), so outside the
    context the backend's generator is used.

    Args:
        rate: the fraction of inputs to drop, in [0, 1).
        noise_shape, seed: as `keras.layers.Dropout`.  With `noise_shape`
            the backend generator is always used.
    """

    def call(self, inputs, training=False):
        drops = training and self.rate > 0 and self.noise_shape is None
        if drops and not _THREEFRY.get() and maps(self.seed_generator):
            # A member run over stacked weights: every member's mask drawn
            # once, as alone (`_member_draws`); the select as Keras' own.
            shape = ops.shape(inputs)
            mask = member_draw(self.seed_generator, lambda seed: keras.random.dropout(
                ops.ones(shape, inputs.dtype), self.rate, seed=seed))
            scale = ops.cast(1.0 / (1.0 - self.rate), inputs.dtype)
            return ops.where(ops.not_equal(mask, 0), inputs * scale, ops.zeros_like(inputs))
        if not (drops and _THREEFRY.get()):
            return super().call(inputs, training=training)
        key = ops.cast(self.seed_generator.next(), "uint32")  # (2,)
        bits = threefry_bits((key[0], key[1]), ops.shape(inputs))
        keep = ops.greater_equal(bits, _uint32(min(round(self.rate * 2**32), 2**32 - 1)))
        scale = ops.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return ops.where(keep, inputs * scale, ops.zeros_like(inputs))
