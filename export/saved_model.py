"""Export a trained model as a SavedModel that serves raw strings.

Layout of the exported directory:

```
saved_model.pb, variables/     the inference module (weights only, no optimizer)
assets/config.json             the resolved run configuration
assets/vocab.txt               the word-piece vocabulary (token inputs)
assets/tokenizer.json          the tokenizer options (token inputs)
assets/labels.txt              one class name a line (classifiers)
manifest.json                  the format version and every file's size and SHA-256
```

`manifest.json` (`training.data.manifest`) is written inside the staged
directory before it is renamed into place; `predict --saved-model` checks it
before it loads anything (`check_saved_model_export`).  `overwrite` replaces
a SavedModel export and nothing else (`is_saved_model_export`).

`training.text.tokenizers.load_tokenizer(os.path.join(export_dir, "assets"))`
rebuilds the tokenizer from the assets alone.
"""

import json
import os
import tempfile

import tensorflow as tf

from export.quantize import EXPORT_ASSET, check_saved_model_quantize, int8_tables
from training.data.atomic import atomic_directory, check_target
from training.data.manifest import SAVED_MODEL_FILES, write_manifest, written_as
from training.tasks.base import serving_of


def is_saved_model_export(path):
    """Whether `path` is a SavedModel export of this package (its manifest
    says so, or, written before exports carried one, it holds
    `saved_model.pb` and `assets/config.json`): all `overwrite` replaces."""
    return written_as(path, "saved_model", SAVED_MODEL_FILES)


#: What `export_saved_model(overwrite=True)` may replace (`training.data.atomic.check_target`).
REPLACEABLE = ("a SavedModel export of keras-transformer", is_saved_model_export)


def build_serving_module(model, task):
    """The inference `tf.Module` for `task` (see `training.serving.signatures`).

    Args:
        model: A `Transformer` (translation), `TransformerClassifier`
            (classification, timeseries) or `VisionTransformer` (image).
        task: A `training.tasks.Task` holding the run's tokenizer (None for
            numeric and image input) and class names: `run.task` of a
            loaded run, or `get_task(name, tokenizer=..., label_names=...)`.

    Returns:
        The task's module (`Serving.serving_module`): a `TranslatorModule` or a
        `ClassifierModule`.

    Raises:
        ValueError: On an unknown task or a model that does not fit it.
    """
    serving = serving_of(task)
    serving.check_model(model)
    return serving.serving_module(model)


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


def export_saved_model(model, config, export_dir, task, overwrite=False, quantize="none"):
    """Writes a strings-in SavedModel of `model`, atomically.

    Signatures: for translation `serving_default` (`sentences` tf.string
    `(B,)` -> `translations`), `translate_ids` (`encoder_token_ids` int32
    `(B, S)` -> `token_ids`) and `translate_beam` (`sentences` ->
    `translations`, `scores`); for a token classifier `serving_default`
    (`sentences` -> `probabilities` `(B, K)`, `labels`) and `classify_ids`
    (`token_ids`); for a numeric classifier `serving_default` (`features`
    float32 `(B, T, F)`); for a `VisionTransformer` `serving_default`
    (`images` float32 `(B, H, W, C)`, H, W and C fixed by the model). Every
    classifier signature returns `probabilities` float32 `(B, K)` and
    `labels` tf.string `(B,)`.

    The export is written into a temporary directory beside `export_dir`,
    with its `manifest.json`, fsynced and renamed into place when complete;
    on any error nothing is left behind.

    Args:
        model: The trained Keras model (its optimizer is not exported).
        config: The resolved run configuration, a JSON-serialisable dict.
        export_dir: Target directory.
        task: A `training.tasks.Task` with the run's tokenizer (written to
            the assets; None for numeric and image input) and class names
            (written to labels.txt): `run.task` of a loaded run.
        overwrite: Replace an existing `export_dir` that is a SavedModel
            export (`is_saved_model_export`); any other folder is refused.
        quantize: "none", or "int8" for a classifier: its embedding tables
            stored in int8 with a float32 scale per row, the rest float32
            (`export.quantize.int8_tables`; about a quarter of the tables'
            bytes).  Recorded in `assets/export.json` for `verify`.

    Returns:
        The absolute path of the export.

    Raises:
        FileExistsError: If `export_dir` exists and `overwrite` is False,
            or it is not a SavedModel export.
        TypeError: If `task` is not a `Task`.
        ValueError: On a model that does not fit the task, or a config that
            is not JSON-serialisable.
    """
    check_target(export_dir, overwrite, REPLACEABLE)  # before any work
    try:
        config = json.loads(json.dumps(config))
    except TypeError as error:
        raise ValueError(f"config must be JSON-serialisable: {error}") from error
    serving = serving_of(task)
    check_saved_model_quantize(quantize, model)
    if quantize == "int8":
        model = int8_tables(model)
    module = build_serving_module(model, serving)
    # A classifier's labels.txt names every class, defaults included.
    label_names = serving.class_names(model)
    tokenizer = serving.tokenizer
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
