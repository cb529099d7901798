"""Writes a serving module as a SavedModel export, atomically, with its assets and manifest.

Layout of the exported directory:

```
saved_model.pb, variables/     the inference module (weights only, no optimizer)
assets/config.json             the model's settings: `task`, `max_sequence_length`, ...
assets/vocab.txt               the word-piece vocabulary (token inputs)
assets/tokenizer.json          the tokenizer options (token inputs)
assets/labels.txt              one class name a line (classifiers)
assets/export.json             how the weights are stored (`quantize`)
manifest.json                  the format version and every file's size and SHA-256
```

`manifest.json` (`training.data.manifest`) is written inside the staged
directory before it is renamed into place; `predict --saved-model` checks it
before it loads anything.  `overwrite` replaces a SavedModel export and
nothing else (`is_saved_model_export`).

`training.text.tokenizers.load_tokenizer(os.path.join(export_dir, "assets"))`
rebuilds the tokenizer from the assets alone.
"""

import json
import os
import tempfile

import tensorflow as tf

from training.data.atomic import atomic_directory, check_target
from training.data.manifest import SAVED_MODEL_FILES, write_manifest, written_as

#: The asset recording how the weights are stored (`{"quantize": ...}`).
EXPORT_ASSET = "export.json"


def is_saved_model_export(path):
    """Whether `path` is a SavedModel export of this package (its manifest
    says so, or, written before exports carried one, it holds
    `saved_model.pb` and `assets/config.json`): all `overwrite` replaces."""
    return written_as(path, "saved_model", SAVED_MODEL_FILES)


#: What `write_saved_model(overwrite=True)` may replace (`training.data.atomic.check_target`).
REPLACEABLE = ("a SavedModel export of keras-transformer", is_saved_model_export)


def _write_assets(directory, config, tokenizer, label_names):
    """Writes the asset files into `directory`; returns {name: path}."""
    paths = {"config": os.path.join(directory, "config.json")}
    with open(paths["config"], "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    if tokenizer is not None and hasattr(tokenizer, "save"):
        tokenizer.save(directory)
        for name, file_name in (
            ("vocabulary", "vocab.txt"),
            ("tokenizer", "tokenizer.json"),
        ):
            if os.path.isfile(os.path.join(directory, file_name)):
                paths[name] = os.path.join(directory, file_name)
    if label_names is not None:
        paths["labels"] = os.path.join(directory, "labels.txt")
        with open(paths["labels"], "w", encoding="utf-8", newline="\n") as f:
            f.writelines(f"{name}\n" for name in label_names)
    return paths


def check_config(config):
    """`config` through JSON (a copy); ValueError if it is not JSON-serialisable."""
    try:
        return json.loads(json.dumps(config))
    except TypeError as error:
        raise ValueError(f"config must be JSON-serialisable: {error}") from error


def write_saved_model(module, export_dir, config, tokenizer=None, label_names=None,
                      overwrite=False, quantize="none"):
    """Saves `module` (its `signatures()`) with its assets as a SavedModel export.

    The export is written into a temporary directory beside `export_dir`,
    with its `manifest.json`, fsynced and renamed into place when complete;
    on any error nothing is left behind.

    Args:
        module: A serving module (`training.serving.signatures`).
        export_dir: Target directory.
        config: JSON-serialisable settings written to `assets/config.json`.
        tokenizer: Written to the assets when it has a `save` method.
        label_names: Written to `assets/labels.txt`, one a line.
        overwrite: Replace an existing `export_dir` that is a SavedModel
            export (`is_saved_model_export`); any other folder is refused.
        quantize: What `assets/export.json` records of the weights.

    Returns:
        The absolute path of the export.
    """
    check_target(export_dir, overwrite, REPLACEABLE)
    config = check_config(config)
    export_dir = os.path.abspath(os.fspath(export_dir))
    with (
        atomic_directory(export_dir, overwrite, REPLACEABLE) as staging,
        tempfile.TemporaryDirectory() as assets,
    ):
        asset_paths = _write_assets(assets, config, tokenizer, label_names)
        asset_paths["export"] = os.path.join(assets, EXPORT_ASSET)
        with open(asset_paths["export"], "w", encoding="utf-8") as f:
            json.dump({"quantize": quantize}, f)
        module.assets = {
            name: tf.saved_model.Asset(path) for name, path in asset_paths.items()
        }
        tf.saved_model.save(module, staging, signatures=module.signatures())
        write_manifest(staging, "saved_model")
    return export_dir
