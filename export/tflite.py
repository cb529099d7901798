"""Write a trained model's `.tflite` file, atomically.

`export_model_tflite` takes the model alone: a task model or a library
backbone gets the command line's program (static shapes, the cached greedy
loop, frozen weights, quantization: `training.serving.tflite_programs`),
any other Keras model its inference pass on its declared input
(`training.task_models.export_model_tflite`).
"""

from training.serving.tflite_programs import (  # noqa: F401 (this module's API too)
    REPLACEABLE,
    check_quantize,
    is_tflite_file,
)
from training.task_models import export_model_tflite  # noqa: F401 (this module's API)
