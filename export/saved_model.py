"""Export a trained model as a SavedModel that serves raw strings.

`export_model` takes the model alone: a task model (`Translator`,
`TextClassifier`, `TimeSeriesClassifier`) writes its own `export`; a
library backbone is wrapped in its task model with the `tokenizer` and
`label_names` given; any other Keras model (a user's functional one) gets
its inputs' typed signature (`training.task_models.export_model`).  The
layout, manifest and atomic write are `training.serving.saved_model`'s.
`predict --saved-model` checks the manifest before it loads anything
(`check_saved_model_export`).
"""

from training.serving.saved_model import (  # noqa: F401 (this module's API too)
    REPLACEABLE,
    check_config,
    is_saved_model_export,
    write_saved_model,
)
from training.task_models import export_model  # noqa: F401 (this module's API)
