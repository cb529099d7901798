"""The callbacks by which a run's `fit` follows its plan."""

import keras


class FirstUpdate(keras.callbacks.Callback):
    """Marks the command's first update on its `Stopwatch` (`first_update_at_second`
    in metrics.json: the start-up a user waits through, data and vocabulary
    included); a budgeted run's first update is its calibration's, marked there."""

    def __init__(self, watch):
        super().__init__()
        self.watch = watch

    def on_train_batch_end(self, batch, logs=None):
        self.watch.mark("first_update")


class StopAtPlanEnd(keras.callbacks.Callback):
    """Ends `fit` at the update that completes the plan (its `total_steps`).

    The plan is read at every update, so a revision made after an epoch
    moves the end of the `fit` already running.  Keras still validates the
    epoch it stops in, as it does at an epoch's natural end.
    """

    def __init__(self, checkpoint, planner):
        super().__init__()
        self.checkpoint = checkpoint  # ordered before this callback: its step is current
        self.planner = planner

    def on_train_batch_end(self, batch, logs=None):
        if self.checkpoint.step >= self.planner.plan.total_steps:
            self.model.stop_training = True


class AfterEpoch(keras.callbacks.Callback):
    """Calls `revise()` at each epoch's end, last of the callbacks; stops
    `fit` when it returns True.  Nothing is revised in an epoch that already
    stops `fit` (the plan's end, the deadline, early stopping)."""

    def __init__(self, revise):
        super().__init__()
        self.revise = revise

    def on_epoch_end(self, epoch, logs=None):
        if not self.model.stop_training and self.revise():
            self.model.stop_training = True
