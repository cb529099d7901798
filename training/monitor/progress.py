"""Progress of a whole run, not only of one epoch.

Keras' progress bar knows the epoch it draws; a user who started a
ten-minute (or ten-hour) run wants to know how long the *run* has left.
`RunProgress` draws, in an interactive terminal, one bar per epoch that is
redrawn in place, and otherwise (a file, a pipe, a CI log) one line per
epoch, the way `verbose="auto"` does in Keras.  Both carry the step time
and the estimated time left of the run, from the planned number of updates:

    epoch 3/30  120/253 [=======>.........]  1.07 s/step  loss 3.214  run 2:41, ~12:03 left
    epoch 3/30  253/253  1.07 s/step  loss 3.102  val_loss 2.870  val_bleu 18.31  run 4:58, ~10:02 left

The step time is the mean of the last `window` updates, so a compile or a
checkpoint save does not dominate it; the time left is that step time over
the updates left, plus what an epoch's end (validation, its BLEU) took so
far.  Place it after the callbacks that validate.
"""

import collections
import sys
import time

import keras


def format_seconds(seconds):
    """`h:mm:ss` or `m:ss`."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


def _format_logs(logs, keys):
    parts = []
    for key in keys:
        value = logs.get(key)
        if isinstance(value, (int, float)) or hasattr(value, "__float__"):
            value = float(value)
            parts.append(f"{key} {value:.4g}" if abs(value) < 1e4 else f"{key} {value:.3e}")
    return "  ".join(parts)


class RunProgress(keras.callbacks.Callback):
    """A progress line (or bar) with step time and the run's time left.

    Args:
        total_steps: The planned updates of the whole run (the global step
            it ends at).
        steps_per_epoch: Updates in one epoch.
        epochs: Epochs of the run, for the "epoch i/n" label.
        interactive: Redraw a bar in place (a terminal); None asks
            `stream.isatty()`.
        stream: Where to write (default `sys.stdout`).
        window: Updates whose mean is the reported step time.
        refresh_seconds: Least time between two redraws of the bar.
        started_at: `time.time()` of the run's start, for the elapsed time
            (default: when training begins).
    """

    def __init__(self, total_steps, steps_per_epoch, epochs, interactive=None, stream=None,
                 window=50, refresh_seconds=0.5, started_at=None):
        super().__init__()
        for name, value in (("total_steps", total_steps), ("steps_per_epoch", steps_per_epoch),
                            ("window", window)):
            if int(value) != value or value < 1:
                raise ValueError(f"`{name}` must be a positive integer; received {name}={value!r}.")
        self.total_steps = int(total_steps)
        self.steps_per_epoch = int(steps_per_epoch)
        self.epochs = int(epochs)
        self.stream = stream or sys.stdout
        if interactive is None:
            interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interactive = interactive
        self.refresh_seconds = refresh_seconds
        self.started_at = started_at
        self._times = collections.deque(maxlen=int(window))
        self._last = None
        self._last_draw = 0.0
        self._epoch = 0
        self._epoch_started = None
        self._validation_seconds = []

    def set_plan(self, total_steps):
        """The run's planned updates changed (a time budget was planned)."""
        self.total_steps = int(total_steps)

    # --- timing -------------------------------------------------------------------

    def _step(self):
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def seconds_per_step(self):
        """Mean of the last `window` update times; None before two updates."""
        return sum(self._times) / len(self._times) if self._times else None

    def seconds_left(self, step=None):
        """Estimated seconds to the end of the run from global `step`."""
        per_step = self.seconds_per_step()
        if per_step is None:
            return None
        step = self._step() if step is None else step
        steps_left = max(0, self.total_steps - step)
        epochs_left = -(-steps_left // self.steps_per_epoch)
        validation = (sum(self._validation_seconds) / len(self._validation_seconds)
                      if self._validation_seconds else 0.0)
        return steps_left * per_step + epochs_left * validation

    # --- callback hooks -------------------------------------------------------------

    def on_train_begin(self, logs=None):
        if self.started_at is None:
            self.started_at = time.time()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._epoch_started = time.time()
        self._last = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        if self._last is not None:
            self._times.append(now - self._last)
        self._last = now
        if self.interactive and time.time() - self._last_draw >= self.refresh_seconds:
            self._last_draw = time.time()
            self._write("\r" + self._line(batch + 1, logs or {}, end=False) + "\x1b[K", newline=False)

    def on_epoch_end(self, epoch, logs=None):
        # What the epoch spent after its last update: validation, its BLEU,
        # callbacks placed before this one.
        if self._last is not None:
            self._validation_seconds.append(time.perf_counter() - self._last)
        line = self._line(None, logs or {}, end=True)
        self._write(("\r" if self.interactive else "") + line + ("\x1b[K" if self.interactive else ""))

    # --- drawing ----------------------------------------------------------------------

    def _line(self, batch, logs, end):
        step = self._step()
        in_epoch = step - self._epoch * self.steps_per_epoch
        head = f"epoch {self._epoch + 1}/{self.epochs}  {in_epoch}/{self.steps_per_epoch}"
        if not end:
            width = 20
            done = min(width, int(width * in_epoch / self.steps_per_epoch))
            head += " [" + "=" * done + (">" if done < width else "") + "." * (width - done - 1) + "]"
        per_step = self.seconds_per_step()
        parts = [head]
        if per_step is not None:
            parts.append(f"{per_step:.3g} s/step")
        keys = [k for k in logs if not k.startswith("val_")] if not end else list(logs)
        keys = [k for k in keys if k not in ("learning_rate", "epoch_seconds")]
        shown = _format_logs(logs, keys)
        if shown:
            parts.append(shown)
        run = f"run {format_seconds(time.time() - self.started_at)}"
        left = self.seconds_left(step)
        if left is not None:
            run += f", ~{format_seconds(left)} left"
        parts.append(run)
        return "  ".join(parts)

    def _write(self, text, newline=True):
        self.stream.write(text + ("\n" if newline else ""))
        self.stream.flush()
