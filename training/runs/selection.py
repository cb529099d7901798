"""Model selection by validation: epoch scores, early stopping, averaging.

Each epoch's validation score (BLEU for translation, accuracy for
classification, minus the loss when neither is measured) is appended to
`checkpoints/scores.json` beside that epoch's weights.  Early stopping and
pruning read only that file, so a resumed run decides exactly as an
uninterrupted one.  At the end `select` compares the last weights, the
average of the last k epochs and the average of the best k on validation
and keeps the best (Vaswani et al. average the last 5 checkpoints; on a
short run whose score still climbs, older checkpoints pull the average
down, so the choice is measured, not assumed).
"""

import json
import os

import keras

from training.data.atomic import atomic_path, atomic_write_json
from training.runs.checkpoint_average import average_checkpoints, save_model_weights
from training.task_models import TaskModel

SCORES = "scores.json"


def epoch_checkpoint(run_dir, epoch):
    """Path of epoch `epoch`'s weights (1-based, as Keras names them), without
    the optimizer's state: selection and averaging need only the weights."""
    return os.path.join(run_dir, "checkpoints", f"epoch-{epoch:03d}.weights.h5")


def read_scores(run_dir):
    """{epoch (int, 1-based): score} of the epochs validated so far."""
    path = os.path.join(run_dir, "checkpoints", SCORES)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return {int(k): float(v) for k, v in json.load(f).items()}


def _write_scores(run_dir, scores):
    path = os.path.join(run_dir, "checkpoints", SCORES)
    atomic_write_json(path, {str(k): v for k, v in sorted(scores.items())}, indent=1)


def best_epochs(scores, k):
    """The k best epochs, best first (ties: the later epoch first)."""
    return sorted(scores, key=lambda e: (scores[e], e), reverse=True)[:k]


def plateaued(scores, patience):
    """True when the best epoch is `patience` or more epochs old."""
    if not patience or not scores:
        return False
    return max(scores) - best_epochs(scores, 1)[0] >= patience


class EpochScores(keras.callbacks.Callback):
    """Records the epoch's score, saves its weights, prunes, stops early.

    Place it after the callbacks that add the monitored value to the logs
    (`ValidationBleu`).  Keeps the weights of the last k and the best k
    epochs.

    Args:
        run_dir: the run directory.
        monitor: a key of the epoch logs, e.g. "val_bleu", "val_accuracy".
        mode: "max" or "min" (a "min" value is stored negated).
        keep: k; 0 saves no epoch's weights (what a run that keeps its last
            weights, `selection="last"`, does: it never reads them).
        patience: epochs without improvement before stopping (0: never).
        is_chief: only the chief writes.
    """

    def __init__(self, run_dir, monitor, mode, keep, patience, is_chief=True):
        super().__init__()
        if mode not in ("max", "min"):
            raise ValueError(f"`mode` must be 'max' or 'min'; received mode={mode!r}.")
        self.run_dir = os.fspath(run_dir)
        self.monitor = monitor
        self.sign = 1.0 if mode == "max" else -1.0
        self.keep = int(keep)
        self.patience = int(patience)
        self.is_chief = is_chief

    def on_epoch_end(self, epoch, logs=None):
        if not logs or self.monitor not in logs:
            raise ValueError(
                f"EpochScores: monitor={self.monitor!r} is not in the epoch logs "
                f"({sorted(logs or {})})."
            )
        if self.is_chief:
            if self.keep:
                save_model_weights(self.model, epoch_checkpoint(self.run_dir, epoch + 1))
            scores = read_scores(self.run_dir)
            scores[epoch + 1] = self.sign * float(logs[self.monitor])
            _write_scores(self.run_dir, scores)
            self._prune(scores)
        if plateaued(read_scores(self.run_dir), self.patience):
            self.model.stop_training = True

    def _prune(self, scores):
        kept = set(sorted(scores)[-self.keep :] if self.keep else ()) | set(
            best_epochs(scores, self.keep))
        for epoch in scores:
            path = epoch_checkpoint(self.run_dir, epoch)
            if epoch not in kept and os.path.isfile(path):
                os.remove(path)


def select(model, run_dir, k, score, selection="auto"):
    """Loads the chosen final weights into `model`; returns what was compared.

    Args:
        model: holds the last weights on entry, the chosen ones on return.
        run_dir: the run directory (epoch checkpoints and scores.json).
        k: checkpoints per average.
        score: `score(model) -> float`, higher is better (validation).
        selection: "auto" (best of the three), "last", "average_last",
            "average_best".

    Returns:
        {"selected": name, "validation": {name: score}, "epochs": {name: [..]}}.
    """
    scores = read_scores(run_dir)
    epochs = [e for e in sorted(scores) if os.path.isfile(epoch_checkpoint(run_dir, e))]
    groups = {"last": None}
    if len(epochs) > 1 and k > 1:
        groups["average_last"] = epochs[-k:]
        best = sorted(best_epochs({e: scores[e] for e in epochs}, k))
        if best != groups["average_last"]:
            groups["average_best"] = best
    if selection != "auto":
        if selection not in groups:  # too few epochs: fall back to the last
            selection = "last"
        groups = {selection: groups[selection]}
    last = [keras.ops.convert_to_numpy(w) for w in model.weights]
    results = {}
    for name, members in groups.items():
        if members is None:
            model.set_weights(last)
        else:
            average_checkpoints([epoch_checkpoint(run_dir, e) for e in members], model)
        results[name] = float(score(model)) if len(groups) > 1 else None
    chosen = max(results, key=lambda n: (results[n] or 0.0, n == "last"))
    if groups[chosen] is None:
        model.set_weights(last)
    else:
        average_checkpoints([epoch_checkpoint(run_dir, e) for e in groups[chosen]], model)
    return {
        "selected": chosen,
        "validation": results,
        "epochs": {n: m for n, m in groups.items() if m is not None},
    }


def save_final_model(model, path):
    """Writes the run's `model.keras`: the architecture and the chosen
    weights (of a task model, with its tokenizer and class names), without
    the optimizer or the training configuration.

    Nothing trains on from `model.keras` (a resumed run restores
    `checkpoints/step-*`, which keep the optimizer), and the AdamW moments
    would triple the file; `load_run` gets the model uncompiled.  A copy
    built from the model's config carries the weights, so `model` itself
    stays compiled for the caller.
    """
    copy = type(model).from_config(model.get_config())
    if isinstance(model, TaskModel):  # its tokenizer is an asset, not part of its config
        copy.tokenizer = model.tokenizer
    copy.set_weights(model.get_weights())
    with atomic_path(path) as staged:  # whole or not at all
        copy.save(staged)
