"""Checkpoints that survive SIGKILL and resume at step granularity.

Keras' `BackupAndRestore` overwrites one weights file in place (a kill
during the write corrupts it) and restarts an interrupted epoch from its
first batch.  `ResumableCheckpoint` instead writes each checkpoint into a
fresh folder `step-<n>/` (weights with the optimizer state, the dropout
seed-generator states, and the step), fsyncs its files and renames it into
place, then atomically swaps the `LATEST` pointer file (a temporary,
fsynced, renamed, its folder fsynced); the previous folder is removed only
after that.  A kill, or a power cut, at any instant leaves either the old or
the new checkpoint complete, and `LATEST` naming a complete one.  On restart `restore` returns the global step,
and the trainer skips exactly that many batches of the (deterministic) data
stream, so an interrupted run ends with the weights of an uninterrupted one.
"""

import json
import os
import shutil
import time

import keras
import numpy as np

from training.data.atomic import atomic_write_text, fsync_directory, fsync_tree
from training.runs.checkpoint_average import load_model_weights

POINTER = "LATEST"


def _seed_states(model):
    """[(path, variable)] of the model's state beyond its weights (seed generators), in order."""
    weights = {id(v) for v in model.weights}
    return [(v.path, v) for v in model.variables if id(v) not in weights]


class ResumableCheckpoint(keras.callbacks.Callback):
    """Save every `every_steps` batches and at each epoch end; keep `keep`.

    Args:
        directory: where the `step-<n>/` folders and `LATEST` live.
        every_steps: batches between checkpoints.
        keep: number of checkpoint folders kept.  1 (the default): `restore`
            reads only the one `LATEST` names, and an older folder is
            removed only once `LATEST` names a complete newer one, so a
            kill at any instant still leaves one whole checkpoint; each
            folder holds the optimizer's state, three times the weights.
        is_chief: only the chief writes (multi-worker training).
        on_saved: called with no argument after each checkpoint is in
            place (`LATEST` names it), or None.
    """

    def __init__(self, directory, every_steps, keep=1, is_chief=True, on_saved=None):
        super().__init__()
        self.directory = os.fspath(directory)
        self.every_steps = int(every_steps)
        self.keep = int(keep)
        self.is_chief = is_chief
        self.on_saved = on_saved
        self.step = 0
        self.save_seconds = []  # how long each save took (a time budget plans them)

    def latest(self):
        pointer = os.path.join(self.directory, POINTER)
        if not os.path.isfile(pointer):
            return None
        with open(pointer, encoding="utf-8") as f:
            return os.path.join(self.directory, f.read().strip())

    def restore(self, model):
        """Load the latest checkpoint into `model`; return its global step."""
        folder = self.latest()
        if folder is None:
            self.step = 0
            return 0
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        load_model_weights(model, os.path.join(folder, "model.weights.h5"))
        seeds = np.load(os.path.join(folder, "seeds.npz"))
        states = _seed_states(model)
        if all(key[:4].isdigit() for key in seeds.files):
            # By position: a generator's path carries a name numbered by the
            # process's count of generators, which another build changes.
            if len(seeds.files) != len(states):
                raise ValueError(
                    f"{folder} holds {len(seeds.files)} seed-generator states; the model "
                    f"has {len(states)}: it is not the model that was checkpointed."
                )
            for key, (_, variable) in zip(sorted(seeds.files), states, strict=True):
                variable.assign(seeds[key])
        else:  # checkpoints written before states were numbered
            for path, variable in states:
                key = path.replace("/", "|")
                if key in seeds:
                    variable.assign(seeds[key])
        with open(os.path.join(folder, "state.json"), encoding="utf-8") as f:
            self.step = int(json.load(f)["step"])
        return self.step

    def discard(self):
        """Forgets every saved step (a model of another shape replaces this one).

        The pointer goes first, so a kill part-way restores nothing rather
        than a half-removed folder.
        """
        self.step = 0
        if not self.is_chief or not os.path.isdir(self.directory):
            return
        pointer = os.path.join(self.directory, POINTER)
        if os.path.exists(pointer):
            os.remove(pointer)
        for name in os.listdir(self.directory):
            if name.startswith("step-"):
                shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step % self.every_steps == 0:
            self.save()

    def on_epoch_end(self, epoch, logs=None):
        self.save()

    def save(self):
        if not self.is_chief:
            return
        started = time.perf_counter()
        self._save()
        self.save_seconds.append(time.perf_counter() - started)

    def _save(self):
        name = f"step-{self.step:09d}"
        folder = os.path.join(self.directory, name)
        if os.path.isdir(folder):  # already saved at this step (epoch end)
            return
        tmp = folder + f".tmp-{os.getpid()}"
        os.makedirs(tmp, exist_ok=True)
        self.model.save_weights(os.path.join(tmp, "model.weights.h5"))
        seeds = {f"{i:04d}|{p.replace('/', '|')}": np.asarray(v)
                 for i, (p, v) in enumerate(_seed_states(self.model))}
        np.savez(os.path.join(tmp, "seeds.npz"), **seeds)
        atomic_write_text(os.path.join(tmp, "state.json"), json.dumps({"step": self.step}))
        fsync_tree(tmp)  # every file on disk before the folder gets its name
        os.replace(tmp, folder)
        fsync_directory(self.directory)
        atomic_write_text(os.path.join(self.directory, POINTER), name)
        self._prune(name)
        if self.on_saved is not None:
            self.on_saved()

    def _prune(self, current):
        folders = sorted(
            d for d in os.listdir(self.directory)
            if d.startswith("step-") and ".tmp-" not in d and d != current
        )
        for old in folders[: max(0, len(folders) - (self.keep - 1))]:
            shutil.rmtree(os.path.join(self.directory, old), ignore_errors=True)
        for stale in os.listdir(self.directory):
            if ".tmp-" in stale and stale.startswith("step-"):
                shutil.rmtree(os.path.join(self.directory, stale), ignore_errors=True)
