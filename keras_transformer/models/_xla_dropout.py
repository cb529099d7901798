"""The models' training step: ThreeFry dropout masks under XLA on TensorFlow."""

import keras

from keras_transformer.layers._dropout import threefry_dropout


class XLADropoutMixin:
    """Traces `train_step` inside `threefry_dropout()` when the model trains
    under XLA on the TensorFlow backend (`compile(jit_compile=True)`).

    There Keras's Philox masks cost a sixth of the base-size training step on
    CPU (`bench_training_throughput.py`, variant `ours_untied_philox`).
    Elsewhere the backend's generator stays: without XLA it is one kernel,
    where ThreeFry in `keras.ops` is a hundred small ones, and JAX's default
    generator already is ThreeFry.  Set `threefry_dropout_under_xla = False`
    on a model before it first trains to keep Keras's masks under XLA too.
    """

    threefry_dropout_under_xla = True

    def train_step(self, *args, **kwargs):
        enabled = (
            self.threefry_dropout_under_xla
            and keras.config.backend() == "tensorflow"
            and bool(self.jit_compile)
        )
        with threefry_dropout(enabled):
            return super().train_step(*args, **kwargs)
