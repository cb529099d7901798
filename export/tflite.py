"""Write a trained model's `.tflite` file, atomically.

The programs themselves (static shapes, the cached greedy loop, frozen
weights, quantization) are `training.serving.tflite_programs`; the task says
which one its model needs (`Serving.tflite_model`).
"""

from training.data.atomic import atomic_write_bytes, check_target
from training.serving.tflite_programs import (  # noqa: F401 (this module's API too)
    REPLACEABLE,
    check_quantize,
    is_tflite_file,
)
from training.tasks.base import serving_of


def export_tflite(
    model,
    output_path,
    task,
    quantize="none",
    overwrite=False,
    sequence_length=None,
    batch_size=1,
):
    """Converts `model` for `task` and writes the `.tflite` file atomically.

    Args:
        model: A `Transformer` ("translation"), a `TransformerClassifier`
            ("classification" / "timeseries") or a `VisionTransformer`
            ("image").
        output_path: Target `.tflite` path.
        task: The model's `training.tasks.Task` (`run.task` of a loaded
            run, or `get_task("translation" | "classification" |
            "timeseries" | "image")`).
        quantize: "none", "float16" or "int8".
        overwrite: Replace an existing `.tflite` model (`is_tflite_file`);
            any other file is refused.
        sequence_length: Static source / input length S; the model's
            `max_sequence_length` if None. Must be None for "image".
        batch_size: Static batch size.

    Returns:
        The absolute path written.

    Raises:
        FileExistsError: If `output_path` exists and `overwrite` is False
            (checked before converting).
        ValueError: On an unknown task or quantization, a model that does not
            fit the task, or a `sequence_length` given for "image".
    """
    serving = serving_of(task)
    serving.check_model(model)
    check_quantize(quantize)
    check_target(output_path, overwrite, REPLACEABLE)
    data = serving.tflite_model(model, quantize, sequence_length, batch_size)
    return atomic_write_bytes(output_path, data, overwrite, REPLACEABLE)
