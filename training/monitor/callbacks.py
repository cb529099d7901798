"""Training callbacks: learning-rate logging, per-step scalars and wall-clock timing.

The paper reports the schedule of Section 5.3 and training times (Section
5.2: 0.4 s per step for the base model); these callbacks record both.

Example:

```python
callbacks = [
    LearningRateLogger(log_dir="runs/base/lr", update_freq=100),
    WallClockTimer(),
    keras.callbacks.TensorBoard("runs/base/tensorboard"),  # after ours
]
model.fit(dataset, epochs=10, callbacks=callbacks)
```
"""

import time

import keras
import tensorflow as tf


def current_learning_rate(optimizer):
    """The learning rate `optimizer`'s next update will use, as a float.

    Unwraps `keras.optimizers.LossScaleOptimizer` (mixed precision). For a
    schedule this is `schedule(optimizer.iterations)`.
    """
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


class LearningRateLogger(keras.callbacks.Callback):
    """Adds `learning_rate` to the epoch logs, optionally logs it per step.

    The epoch value lands in `History`, `CSVLogger` and, for callbacks listed
    after this one, `keras.callbacks.TensorBoard` as `epoch_learning_rate`.
    An epoch is coarse for the paper's 4000-step warm-up (Section 5.3), so
    with `log_dir` the callback also writes a `learning_rate` scalar every
    `update_freq` optimizer steps, against the step number. Like Keras'
    `TensorBoard`, both report `current_learning_rate`: the rate of the
    next update.

    Args:
        log_dir: str or None. TensorBoard directory for per-step scalars.
        update_freq: int. Optimizer steps between per-step scalars.

    Example:

    ```python
    history = model.fit(x, y, callbacks=[LearningRateLogger()])
    history.history["learning_rate"]
    ```
    """

    def __init__(self, log_dir=None, update_freq=100):
        super().__init__()
        if int(update_freq) != update_freq or update_freq < 1:
            raise ValueError(
                "`update_freq` must be a positive integer. Received: "
                f"update_freq={update_freq}"
            )
        self.log_dir = None if log_dir is None else str(log_dir)
        self.update_freq = int(update_freq)
        self._writer = None

    def on_train_begin(self, logs=None):
        if self.log_dir is not None and self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)

    def on_train_batch_end(self, batch, logs=None):
        if self._writer is None:
            return
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if step % self.update_freq == 0:
            with self._writer.as_default():
                tf.summary.scalar(
                    "learning_rate", current_learning_rate(self.model.optimizer), step
                )

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = current_learning_rate(self.model.optimizer)

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None


class WallClockTimer(keras.callbacks.Callback):
    """Adds `epoch_seconds`, the epoch's wall-clock duration, to the logs.

    Measured with `time.perf_counter` from `on_epoch_begin` to `on_epoch_end`
    of this callback, so it includes validation that runs before it.
    `train_seconds` holds the total once training ends.

    Example:

    ```python
    history = model.fit(x, y, callbacks=[WallClockTimer()])
    history.history["epoch_seconds"]
    ```
    """

    def __init__(self):
        super().__init__()
        self.train_seconds = None
        self._train_start = None
        self._epoch_start = None

    def on_train_begin(self, logs=None):
        self._train_start = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["epoch_seconds"] = time.perf_counter() - self._epoch_start

    def on_train_end(self, logs=None):
        self.train_seconds = time.perf_counter() - self._train_start


class StepScalars(keras.callbacks.Callback):
    """TensorBoard scalars every `update_freq` updates, against the global step.

    A Multi30k epoch lasts minutes on a CPU, so per-epoch points are too few
    to watch a run.  Every `update_freq` optimizer updates this writes
    `step/learning_rate` (the next update's rate) and each number of the
    batch logs as `step/<name>` (Keras' running means over the epoch so
    far: `step/loss`, `step/masked_accuracy`...).  The step is
    `optimizer.iterations`, so a resumed run continues the same curves
    (Keras' `TensorBoard(update_freq=N)` counts batches from each `fit`).

    Args:
        log_dir: str. TensorBoard directory.
        update_freq: int. Optimizer updates between points.
    """

    def __init__(self, log_dir, update_freq=25):
        super().__init__()
        if int(update_freq) != update_freq or update_freq < 1:
            raise ValueError(
                "`update_freq` must be a positive integer. Received: "
                f"update_freq={update_freq}"
            )
        self.log_dir = str(log_dir)
        self.update_freq = int(update_freq)
        self._writer = None

    def on_train_begin(self, logs=None):
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)

    def on_train_batch_end(self, batch, logs=None):
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if self._writer is None or step % self.update_freq:
            return
        with self._writer.as_default():
            tf.summary.scalar(
                "step/learning_rate", current_learning_rate(self.model.optimizer), step
            )
            for name, value in (logs or {}).items():
                if isinstance(value, (int, float)) or hasattr(value, "__float__"):
                    tf.summary.scalar(f"step/{name}", float(value), step)

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None
