"""Export trained models: SavedModel (strings in/out), TFLite/LiteRT, verification.

This file imports nothing, so that `python -m export --help` (the command
line is `cli/export_commands.py`) does not load TensorFlow.  The exporters:

- `export.saved_model.export_saved_model`: strings-in SavedModel, atomic.
- `export.tflite.export_tflite`: classifier / greedy translator `.tflite`.
- `export.tflite_verify.verify_tflite`: LiteRT interpreter vs Keras.
- `export.verify.verify_saved_model`: fresh process and `saved_model_cli`
  vs Keras.
- `export.ctranslate2.export_ctranslate2`: a translator as a CTranslate2
  model directory (the `ctranslate2` extra), `CTranslate2Translator` to
  run it with our tokenizer, `verify_ctranslate2` against Keras.

What an export serves depends on its task, a key of `training.tasks.TASKS`
("translation", "classification", "timeseries", or "image" for a
`VisionTransformer`, exported through the library functions only since no
training run makes one); a SavedModel is the task model's `export`
(`training.task_models.export_model`); the exporters ask the task for its
TFLite program (`training.serving`) and verification inputs.
"""
