"""Serving programs: what a SavedModel serves and what a `.tflite` runs.

`signatures` holds the inference `tf.Module`s (strings in, strings or
probabilities out, the tokenizer in the graph); `tflite_programs` converts a
model's static-shape program to `.tflite` bytes; `quantize` stores a
classifier's embedding tables in int8; `in_place` writes a search's
caches in place in a graph.  None knows of files or
tasks: the tasks choose a program for their model (`training.tasks`), and
`export` writes and verifies the files.
"""

# The `.tflite` weight types (a light constant: the command line reads it
# before TensorFlow is imported).
QUANTIZATIONS = ("none", "float16", "int8")
