"""Export trained models: SavedModel (strings in/out), TFLite/LiteRT, verification.

Submodules are imported on use, so `python -m export --help` does not load
TensorFlow:

- `export.saved_model.export_saved_model`: strings-in SavedModel, atomic.
- `export.tflite.export_tflite`: classifier / greedy translator `.tflite`.
- `export.tflite_verify.verify_tflite`: LiteRT interpreter vs Keras.
- `export.verify.verify_saved_model`: fresh process and `saved_model_cli`
  vs Keras.
- `export.serving`: the `TranslatorModule` and `ClassifierModule` served.
"""

# What a run can be, and the `.tflite` weight types (light constants, used by
# the command line before TensorFlow is imported).
TASKS = ("translation", "classification", "timeseries")
QUANTIZATIONS = ("none", "float16", "int8")
