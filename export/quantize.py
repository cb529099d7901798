"""What a SavedModel's weights are stored as, and the model it serves.

The int8 tables themselves are `training.serving.quantize`'s (an export
writes them; `export.verify` rebuilds the same copy to compare with).
"""

import json
import os

from training.serving.quantize import (  # noqa: F401 (this module's API too)
    SAVED_MODEL_QUANTIZATIONS,
    check_saved_model_quantize,
    int8_tables,
)
from training.serving.saved_model import EXPORT_ASSET


def read_export_asset(saved_model_dir):
    """{"quantize": ...} of a SavedModel ("none" for one written without it)."""
    path = os.path.join(os.fspath(saved_model_dir), "assets", EXPORT_ASSET)
    if not os.path.isfile(path):
        return {"quantize": "none"}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def served_model(model, saved_model_dir):
    """The model a SavedModel serves: `model`, or its int8-table copy."""
    if read_export_asset(saved_model_dir)["quantize"] == "int8":
        return int8_tables(model)
    return model
