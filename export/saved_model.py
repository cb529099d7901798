"""Export a trained model as a SavedModel that serves raw strings.

The layout of the export, its manifest and the atomic write are
`training.serving.saved_model`'s; this module builds a run's serving module
from its task (and the int8 tables of `quantize`).  `export_model` exports
any Keras model without a task or config (`training.task_models`).  `predict --saved-model`
checks the manifest before it loads anything (`check_saved_model_export`).
"""

from export.quantize import check_saved_model_quantize, int8_tables
from training.data.atomic import check_target
from training.serving.saved_model import (  # noqa: F401 (this module's API too)
    REPLACEABLE,
    check_config,
    is_saved_model_export,
    write_saved_model,
)
from training.task_models import export_model  # noqa: F401 (any Keras model, no task)
from training.tasks.base import serving_of


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
    config = check_config(config)
    serving = serving_of(task)
    check_saved_model_quantize(quantize, model)
    if quantize == "int8":
        model = int8_tables(model)
    module = build_serving_module(model, serving)
    # A classifier's labels.txt names every class, defaults included.
    return write_saved_model(module, export_dir, config, serving.tokenizer,
                             serving.class_names(model), overwrite, quantize)
