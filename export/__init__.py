"""Export trained models: SavedModel (strings in/out), TFLite/LiteRT, verification.

This file imports nothing, so that `python -m export --help` (the command
line is `cli/export_commands.py`) does not load TensorFlow.  The exporters:

- `export.saved_model.export_model`: strings-in SavedModel of any Keras
  model (a task model's own `export`), atomic.
- `export.tflite.export_model_tflite`: the `.tflite` file of any Keras
  model (a classifier, a greedy translator, a user's own).
- `export.tflite_verify.verify_tflite`: LiteRT interpreter vs Keras.
- `export.verify.verify_saved_model`: fresh process and `saved_model_cli`
  vs Keras.
- `export.ctranslate2.export_ctranslate2`: a translator as a CTranslate2
  model directory (the `ctranslate2` extra), `CTranslate2Translator` to
  run it with our tokenizer, `verify_ctranslate2` against Keras.

The exporters take a model, never a task or a config: what an export
serves follows from the model (a `Translator` or `Transformer`, a text or
series classifier, a `VisionTransformer`, or any other Keras model's typed
inputs), a backbone's preprocessing given beside it (`tokenizer`,
`label_names`).  Verification computes its reference and probe inputs
with the model's serving side (`training.task_models.serving_for`).
"""
