"""Adam and AdamW whose update is one fused TensorFlow kernel a variable.

Keras 3 writes Adam's update as about twenty small ops a variable (casts,
the two powers of the betas, the two moment updates, the step), and AdamW's
decoupled decay as a few more, each variable through its own distribution
merge.  A train step of ~165 variables traces ~3,000 such ops, which is
seconds of tracing and milliseconds an update.  On the TensorFlow backend
`tf.raw_ops.ResourceApplyAdam` updates the first moment m, the second moment
v and the variable in one kernel (tf.keras 2's Adam used it), so here a
variable's update is that one op, after two (a read and a scaled
subtraction) for the decay of the variables that decay; the step's scalars
(the learning rate, beta_1^t, beta_2^t) are computed once an update, not
once a variable.

The kernel computes Keras' Adam, epsilon-hat form included (Kingma and Ba,
the formula before Section 2.1):

    alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
    m += (g - m) * (1 - beta_1);  v += (g^2 - v) * (1 - beta_2)
    var -= alpha * m / (sqrt(v) + epsilon)

and the decay is Keras' AdamW's, `var -= var * weight_decay * lr`, applied
before the Adam step as Keras applies it.  The two differ from Keras' only
in float rounding (the kernel takes 1 - beta_2 in the variable's dtype:
1e-6 of v in float32 with beta_2 = 0.98, 1.3e-5 with 0.999).  A sparse
gradient (an embedding's `tf.IndexedSlices`) keeps Keras' own ops: Keras
squares its slices before adding up a repeated index's, which the dense
kernel cannot reproduce.  The optimizer's variables (iterations, the momentums and
velocities, their names and order) are Keras' own, so a checkpoint of
`keras.optimizers.AdamW` restores into `FusedAdamW` and back.  On another
backend (JAX) both classes are their Keras parents, unchanged.

Example:

```python
from training.optimization.fused_adam import FusedAdamW

optimizer = FusedAdamW(schedule, weight_decay=0.05, beta_2=0.98, epsilon=1e-9)
optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
model.compile(optimizer=optimizer, loss=...)
```
"""

import collections

import keras
import tensorflow as tf

_ON_TENSORFLOW = keras.backend.backend() == "tensorflow"


#: The scalars of one update: t is its number, from 1; `decay` is
#: weight_decay * lr, or None without decay.
_AdamScalars = collections.namedtuple(
    "AdamScalars", "lr beta_1_power beta_2_power beta_1 beta_2 epsilon decay")


class _StepScalars:
    """The scalars of one update, made once for each device and dtype.

    `_FusedAdamStep._backend_update_step` opens it for the variables of one
    update and closes it after them, so no tensor outlives its graph.  Held
    in a plain object: the optimizer tracks the lists and dicts set on it.
    """

    def __init__(self):
        self._made = None  # {(device, dtype): scalars} while an update runs

    def open(self):
        self._made = {}

    def close(self):
        self._made = None

    def get(self, optimizer, variable, learning_rate):
        """`_AdamScalars` in `variable`'s dtype for this update."""
        key = (variable.device, variable.dtype)
        if self._made is not None and key in self._made:
            return self._made[key]
        dtype = variable.dtype
        step = tf.cast(optimizer.iterations + 1, dtype)  # t, from 1
        beta_1 = tf.cast(optimizer.beta_1, dtype)
        beta_2 = tf.cast(optimizer.beta_2, dtype)
        lr = tf.cast(learning_rate, dtype)
        decay = None
        if optimizer.weight_decay is not None:
            decay = tf.cast(optimizer.weight_decay, dtype) * lr
        scalars = _AdamScalars(lr, tf.pow(beta_1, step), tf.pow(beta_2, step), beta_1, beta_2,
                              tf.cast(optimizer.epsilon, dtype), decay)
        if self._made is not None:
            self._made[key] = scalars
        return scalars


class _FusedAdamStep:
    """The fused update of `FusedAdam` and `FusedAdamW`: put before the Keras class.

    Keras' TensorFlow optimizer calls `update_step` for each variable inside
    `strategy.extended.update`, so under `tf.distribute` the variable it is
    given is one replica's copy, and the slots' `handle` is that replica's
    too (a distributed variable answers with the copy of the update's
    replica).  Keras increments `iterations` after the update, so this
    update's number is `iterations + 1`.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.amsgrad:
            raise ValueError(
                f"{type(self).__name__} supports amsgrad=False only (ResourceApplyAdam "
                f"has no AMSGrad); received amsgrad={self.amsgrad!r}: use "
                "keras.optimizers.Adam or AdamW for AMSGrad"
            )
        self._step_scalars = _StepScalars()

    def _apply_weight_decay(self, variables):
        if not _ON_TENSORFLOW:
            return super()._apply_weight_decay(variables)
        # Applied with each variable's Adam step, in `update_step`.

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if not _ON_TENSORFLOW:
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        self._step_scalars.open()
        try:
            super()._backend_update_step(grads, trainable_variables, learning_rate)
        finally:
            self._step_scalars.close()

    def update_step(self, gradient, variable, learning_rate):
        if not _ON_TENSORFLOW:
            return super().update_step(gradient, variable, learning_rate)
        if isinstance(variable, keras.Variable):
            variable = variable.value
        scalars = self._step_scalars.get(self, variable, learning_rate)
        if scalars.decay is not None and self._use_weight_decay(variable):
            # var -= (weight_decay * lr) * var, before the Adam step as in Keras.
            value = tf.raw_ops.ReadVariableOp(resource=variable.handle, dtype=variable.dtype)
            tf.raw_ops.ResourceApplyGradientDescent(
                var=variable.handle, alpha=scalars.decay, delta=value)
        if isinstance(gradient, tf.IndexedSlices):
            # An embedding's gradient.  Keras' Adam squares its slices before
            # adding up a repeated index's (v gets the sum of the squares, not
            # the square of the sum), and the kernel takes a dense gradient:
            # Keras' own ops keep Keras' numbers for this variable.
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self._momentums[index].handle,
            v=self._velocities[index].handle,
            beta1_power=scalars.beta_1_power,
            beta2_power=scalars.beta_2_power,
            lr=scalars.lr,
            beta1=scalars.beta_1,
            beta2=scalars.beta_2,
            epsilon=scalars.epsilon,
            grad=tf.cast(gradient, variable.dtype),
        )


@keras.saving.register_keras_serializable(package="keras_transformer")
class FusedAdam(_FusedAdamStep, keras.optimizers.Adam):
    """`keras.optimizers.Adam` with one `ResourceApplyAdam` a variable (TensorFlow).

    The arguments, the optimizer variables, the configuration and the
    numbers (to float rounding) are Keras' Adam's; `amsgrad=True` is refused.

    References:
        Kingma and Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015.
    """


@keras.saving.register_keras_serializable(package="keras_transformer")
class FusedAdamW(_FusedAdamStep, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` with one `ResourceApplyAdam` a variable (TensorFlow).

    The decoupled decay `var -= var * weight_decay * lr` is two more ops
    for the variables that decay (`exclude_from_weight_decay` names those
    that do not; Keras matches a variable's name once and keeps the answer).  The arguments, the optimizer variables, the
    configuration and the numbers (to float rounding) are Keras' AdamW's;
    `amsgrad=True` is refused.

    References:
        Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR 2019.
    """
