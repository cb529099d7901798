"""A run is a directory: config, vocabulary, checkpoints, logs, model, metrics.

```
RUN/
  config.json            the resolved TrainingConfig
  vocab/                 vocab.txt + tokenizer.json (text tasks)
  labels.json            class names (classification tasks)
  checkpoints/resume/    step-<n>/ + LATEST: resumable, kill-safe
  checkpoints/epoch-<e>.weights.h5   the last k epochs, for averaging
  logs/                  TensorBoard: train/, validation/, attention/, hparams
  model.keras            the final (optionally averaged) model
  metrics.json           final validation and test figures
```
"""

import dataclasses
import json
import os
import shutil

import keras

from training.config import TrainingConfig


def prepare_run_dir(run_dir, config, overwrite=False):
    """Create or reopen `run_dir`; return True when it resumes a run.

    An existing run directory is reused only with an identical config (so a
    killed run resumes by repeating its command); otherwise nothing is
    touched unless `overwrite=True`.
    """
    run_dir = os.fspath(run_dir)
    config_path = os.path.join(run_dir, "config.json")
    if os.path.isdir(run_dir) and os.listdir(run_dir):
        if overwrite:
            shutil.rmtree(run_dir)
        elif not os.path.isfile(config_path):
            raise FileExistsError(
                f"run_dir={run_dir!r} exists and is not a run directory; "
                "choose another path or pass --overwrite."
            )
        else:
            with open(config_path, encoding="utf-8") as f:
                existing = TrainingConfig.from_dict(json.load(f))
            if existing != config:
                changed = sorted(
                    k for k, v in config.to_dict().items() if existing.to_dict().get(k) != v
                )
                raise FileExistsError(
                    f"run_dir={run_dir!r} holds a run with a different config "
                    f"(fields {changed} differ); pass --overwrite to replace it "
                    "or choose another --run-dir."
                )
            if os.path.isfile(os.path.join(run_dir, "metrics.json")):
                raise FileExistsError(
                    f"run_dir={run_dir!r} holds a finished run; pass --overwrite "
                    "to train it again."
                )
            return True
    os.makedirs(os.path.join(run_dir, "checkpoints"), exist_ok=True)
    with open(config_path, "w", encoding="utf-8") as f:
        f.write(config.to_json())
    return False


@dataclasses.dataclass
class Run:
    """What a finished run directory holds, loaded."""

    run_dir: str
    task: str
    config: dict
    model: keras.Model
    tokenizer: object | None
    label_names: list | None
    metrics: dict


def load_run(run_dir):
    """Load a finished run: model, tokenizer, labels, config and metrics."""
    import keras_transformer  # noqa: F401  (registers the serializable classes)
    import training.schedule  # noqa: F401  (the saved optimizer's TransformerSchedule)

    run_dir = os.fspath(run_dir)
    model_path = os.path.join(run_dir, "model.keras")
    if not os.path.isfile(model_path):
        raise FileNotFoundError(
            f"No trained model in run_dir={run_dir!r} (missing model.keras); "
            "has the run finished?"
        )
    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    tokenizer = None
    if os.path.isdir(os.path.join(run_dir, "vocab")):
        from training.tokenizers import WordPieceTokenizer

        tokenizer = WordPieceTokenizer.load(os.path.join(run_dir, "vocab"))
    label_names = None
    if os.path.isfile(os.path.join(run_dir, "labels.json")):
        with open(os.path.join(run_dir, "labels.json"), encoding="utf-8") as f:
            label_names = json.load(f)
    metrics = {}
    if os.path.isfile(os.path.join(run_dir, "metrics.json")):
        with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
            metrics = json.load(f)
    model = keras.saving.load_model(model_path)
    return Run(run_dir, config["task"], config, model, tokenizer, label_names, metrics)
