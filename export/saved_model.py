"""Export a trained model as a SavedModel that serves raw strings.

Every export is a task model's `export` (`training.task_models.export_model`
picks it for any Keras model); the layout, manifest and atomic write are
`training.serving.saved_model`'s.  `export_saved_model` is that call for a
model and its task (a run's).  `predict --saved-model` checks the manifest
before it loads anything (`check_saved_model_export`).
"""

from training.data.atomic import check_target
from training.serving.saved_model import (  # noqa: F401 (this module's API too)
    REPLACEABLE,
    check_config,
    is_saved_model_export,
    write_saved_model,
)
from training.task_models import export_model  # noqa: F401 (any Keras model, no task)
from training.tasks.base import serving_of


def export_saved_model(model, config, export_dir, task, overwrite=False, quantize="none"):
    """`export_model` of a model with its task's tokenizer and class names:
    the export a run makes (its whole `config` recorded in
    `assets/config.json`).

    Signatures: a `Transformer`'s `Translator.export` (`serving_default`
    `sentences` tf.string `(B,)` -> `translations`, `translate_ids`,
    `translate_xla`, `translate_beam`, `translate_beam_xla`); a token
    classifier's `TextClassifier.export` (`serving_default` `sentences` ->
    `probabilities` `(B, K)`, `labels`; `classify_ids`); a series
    classifier's `TimeSeriesClassifier.export` (`features` float32
    `(B, n_channels, length)`, as aeon and sktime lay series out); a
    `VisionTransformer`'s `images` float32 `(B, H, W, C)`.

    The export is written into a temporary directory beside `export_dir`,
    with its `manifest.json`, fsynced and renamed into place when complete;
    on any error nothing is left behind.

    Args:
        model: The trained Keras model (its optimizer is not exported).
        config: The resolved run configuration, a JSON-serialisable dict.
        export_dir: Target directory.
        task: A `training.tasks.Task` with the run's tokenizer (None for
            numeric and image input) and class names: `run.task` of a
            loaded run.
        overwrite: Replace an existing `export_dir` that is a SavedModel
            export (`is_saved_model_export`); any other folder is refused.
        quantize: "none", or "int8" for a classifier's embedding tables
            (`training.serving.quantize.int8_tables`).

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
    serving.check_model(model)
    return export_model(model, export_dir, serving.tokenizer, serving.class_names(model),
                        overwrite=overwrite, quantize=quantize, config=config)
