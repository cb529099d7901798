"""Dropout switched off in a built model, at once or at a given update."""

import keras

from keras_transformer.layers import sublayers


def disable_dropout(model):
    """Sets every dropout rate of `model` to 0; its step function retraces.

    Returns whether any rate changed.  A step function already made is
    replaced: `fit` looks it up at every update, so a call from a callback
    takes effect at the next update of the `fit` running.

    The weights and the optimizer state stay; the saved config keeps the
    built rates (they only act in training).
    """
    changed = False
    for layer in sublayers(model):
        if isinstance(layer, keras.layers.Dropout) and layer.rate > 0:
            layer.rate = 0.0
            changed = True
    if changed and model.train_function is not None:
        model.make_train_function(force=True)  # traced with the old rates
    return changed


class DropoutOffAt(keras.callbacks.Callback):
    """Turns dropout off before the update after global step `step`.

    A resumed run whose plan turned dropout off at `step` (a revision found
    the run short) trains with dropout up to that update and without it
    from there, as the run it resumes did.  `fit` looks its step function
    up at every update, so the retraced one takes over at once.
    """

    def __init__(self, checkpoint, step):
        super().__init__()
        self.checkpoint = checkpoint
        self.step = int(step)
        self.done = False

    def on_train_batch_begin(self, batch, logs=None):
        if not self.done and self.checkpoint.step >= self.step:
            self.done = True
            disable_dropout(self.model)
