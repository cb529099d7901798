"""The TFLite (LiteRT) programs: the classifiers and the greedy translator, converted.

These functions return the `.tflite` bytes and know nothing of files or
tasks; `training.task_models.export_model_tflite` writes them.

Both programs have fully static shapes, fixed when converting:

- classifier: `token_ids` int32 `(batch_size, S)` (`(batch_size, S, 1 + G)`
  with `char_ngram_buckets`) -> `probabilities`
  `(batch_size, K)` float32 (or `features` float32 `(batch_size, S, F)` for
  a numeric classifier, `images` float32 `(batch_size, H, W, C)` for a
  `VisionTransformer`, H = W = its `image_size`). Padding id 0 is masked, so
  shorter inputs are 0-padded to S on the device; an all-padding row is read
  as one `[UNK]`, as in the SavedModel.  Series are NaN-padded to S instead
  (NaN inside a series is a missing value;
  `keras_transformer.layers.series_masking`), found by `x != x`, a builtin.
- translator: `encoder_token_ids` int32 `(batch_size, S)` -> `token_ids`
  int32 `(batch_size, L)`: the encoder, then a cached greedy loop with a
  fixed maximum length L = min(S + 50, max_sequence_length). Every tensor in
  the while loop has a static shape (the key/value cache is preallocated for
  L positions), so the loop converts to a TFLite WHILE of builtin ops only,
  with no Select TF ops and no dynamic tensors (PEERS.md pain point 1).

The loop is `static_greedy_search`, the same algorithm as
`keras_transformer.decoding.greedy_search` written with `tf.argmax`:
`keras.ops.argmax` on the TensorFlow backend adds a sign-bit test
(`Bitcast` + `BitwiseAnd`, to order -0.0 before 0.0) that is no TFLite
builtin and would pull in the Select TF ops runtime.

The tokenizer stays outside the `.tflite`: tensorflow-text's FastBertTokenizer
ops are not TFLite builtins, so keeping it would need the Select TF ops
runtime plus tensorflow-text's custom-op registrations in every app, and
TFLite's string tensors cannot go through the GPU/NNAPI delegates anyway.
Apps tokenize with the SavedModel's `assets/vocab.txt` and
`assets/tokenizer.json` (BERT-style split, then WordPiece; text in NFC and
lowercased without stripping accents, see `training.text.tokenizers`) and feed ids.

Variables are frozen into constants before conversion: a while-loop body
that reads resource variables converts, but the interpreter then fails on
`READ_VARIABLE` because nothing initialises them.

Quantization: "none" (float32), "float16" (float16 weights, float32 compute
on CPU), "int8" (dynamic-range: int8 weights, activations quantized on the
fly; `optimizations=[tf.lite.Optimize.DEFAULT]` with no representative data).
"""

import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import (
    convert_variables_to_constants_v2,
)

from keras_transformer.layers import elementwise_attention
from keras_transformer.models import VisionTransformer
from keras_transformer.models.transformer_config import END_ID, PAD_ID, START_ID
from training.serving import QUANTIZATIONS
from training.serving.signatures import (
    EXTRA_OUTPUT_LENGTH,
    fill_empty_rows,
    replace_invalid_ids,
    token_ids_spec,
)


def is_tflite_file(path):
    """Whether `path` is a TFLite flatbuffer (identifier `TFL3` at byte 4):
    all `overwrite` replaces."""
    try:
        with open(path, "rb") as f:
            return f.read(8)[4:] == b"TFL3"
    except OSError:
        return False


#: What `export_model_tflite(overwrite=True)` may replace (`training.data.atomic.check_target`).
REPLACEABLE = ("a .tflite model (a TFLite flatbuffer)", is_tflite_file)


def check_quantize(quantize):
    if quantize not in QUANTIZATIONS:
        raise ValueError(
            f"quantize must be one of {QUANTIZATIONS}; received {quantize!r}."
        )


def _convert(function, input_spec, quantize):
    """Freezes `function(input)` (which returns a dict) and converts it.

    The frozen graph is wrapped in a fresh `tf.Module` so that the converter
    keeps a `serving_default` signature with the input and output names.
    """
    check_quantize(quantize)
    concrete = function.get_concrete_function(input_spec)
    frozen = convert_variables_to_constants_v2(concrete)
    structure = concrete.structured_outputs

    module = tf.Module()
    module.serve = tf.function(
        lambda inputs: tf.nest.pack_sequence_as(
            structure, tf.nest.flatten(frozen(inputs))
        ),
        input_signature=[input_spec],
    )
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [module.serve.get_concrete_function()], module
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize != "none":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    return converter.convert()


def keras_model_tflite(function, input_spec, quantize="none"):
    """The `.tflite` flatbuffer of `function` (a `tf.function` of one input
    returning a dict, `KerasModelModule.serve`) at the static `input_spec`."""
    return _convert(function, input_spec, quantize)


def _classifier_input(model, sequence_length, batch_size):
    """(static input spec, ids/features/images -> model input) of a classifier."""
    if isinstance(model, VisionTransformer):
        if sequence_length is not None:
            raise ValueError(
                "sequence_length does not apply to a VisionTransformer, whose "
                f"images are {model.image_size}x{model.image_size}; received "
                f"sequence_length={sequence_length!r}."
            )
        side, channels = int(model.image_size), int(model.num_channels)
        spec = tf.TensorSpec(
            [batch_size, side, side, channels], tf.float32, name="images"
        )
        return spec, tf.identity
    length = int(sequence_length or model.max_sequence_length)
    if model.vocabulary_size is not None:
        spec = token_ids_spec(model, batch_size, length)

        def prepare(inputs):
            return fill_empty_rows(replace_invalid_ids(
                inputs, model.vocabulary_size, getattr(model, "char_ngram_buckets", 0)))
    else:
        spec = tf.TensorSpec(
            [batch_size, length, model.num_features], tf.float32, name="features"
        )

        def prepare(inputs):
            return inputs

    return spec, prepare


def classifier_tflite(model, quantize="none", sequence_length=None, batch_size=1):
    """Converts a `TransformerClassifier` or `VisionTransformer` to TFLite bytes.

    Args:
        model: The trained classifier.
        quantize: One of `QUANTIZATIONS`.
        sequence_length: S, the static input length (the model's
            `max_sequence_length` if None). Shorter series are NaN-padded
            to S steps (the model masks them). None for a
            `VisionTransformer`: its image size is fixed.
        batch_size: Static batch size.

    Returns:
        The `.tflite` flatbuffer, with one signature `serving_default`:
        `token_ids` (or `features`, or `images`) -> `probabilities`.

    Raises:
        ValueError: If `sequence_length` is given for a `VisionTransformer`.
    """
    spec, prepare = _classifier_input(model, sequence_length, batch_size)

    @tf.function(autograph=False)  # no Python control flow on tensors to convert
    def classify(inputs):
        logits = model(prepare(inputs), training=False)
        return {"probabilities": tf.cast(model.probabilities(logits), tf.float32)}

    return _convert(classify, spec, quantize)


def static_greedy_search(model, encoder_token_ids, max_length):
    """`greedy_search` with TFLite builtins only, for a static `(B, S)` source.

    Args:
        model: A seq2seq `Transformer`.
        encoder_token_ids: `(B, S)` int32 source ids, 0-padded.
        max_length: L, a Python int: decoding steps at most.

    Returns:
        `(B, L)` int32 ids after `[START]`: `[END]` included, 0 after it.
        `[PAD]` is never generated, as in `greedy_search`.
    """
    encoder_output = model.encode(encoder_token_ids, training=False)  # (B, S, d)
    cache = model.init_cache(encoder_token_ids, encoder_output, max_length)
    batch = encoder_token_ids.shape[0]
    positions = tf.range(max_length, dtype=tf.int32)  # (L,)
    is_pad = tf.range(model.config.vocabulary_size) == PAD_ID  # (V,)

    def cond(index, last_ids, token_ids, finished, cache):
        return (index < max_length) & ~tf.reduce_all(finished)

    def body(index, last_ids, token_ids, finished, cache):
        logits, cache = model.decode_step(last_ids, cache, index)  # (B, V)
        # As greedy_search: the argmax of the logits is that of the log-softmax.
        scores = tf.where(is_pad[None, :], float("-inf"), tf.cast(logits, tf.float32))
        next_ids = tf.argmax(scores, axis=-1, output_type=tf.int32)  # (B,)
        next_ids = tf.where(finished, PAD_ID, next_ids)
        token_ids = tf.where(
            positions[None, :] == index, next_ids[:, None], token_ids
        )  # (B, L)
        finished = finished | (next_ids == END_ID)
        return index + 1, next_ids[:, None], token_ids, finished, cache

    loop_vars = (
        tf.constant(0, tf.int32),
        tf.fill([batch, 1], START_ID),  # (B, 1)
        tf.fill([batch, max_length], PAD_ID),  # (B, L)
        tf.zeros([batch], tf.bool),
        cache,
    )
    _, _, token_ids, _, _ = tf.while_loop(
        cond, body, loop_vars, maximum_iterations=max_length
    )
    return token_ids


def translator_output_length(model, source_length):
    """L = min(S + 50, max_sequence_length): the greedy loop's fixed length."""
    return min(
        int(source_length) + EXTRA_OUTPUT_LENGTH, int(model.config.max_sequence_length)
    )


def translator_tflite(model, quantize="none", source_length=None, batch_size=1):
    """Converts a seq2seq `Transformer` with its greedy decoder to TFLite bytes.

    Args:
        model: The trained Transformer.
        quantize: One of `QUANTIZATIONS`.
        source_length: S, the static source length (the model's
            `max_sequence_length` if None); pad shorter sources with 0.
        batch_size: Static batch size.

    Returns:
        The `.tflite` flatbuffer, with one signature `serving_default`:
        `encoder_token_ids` `(batch_size, S)` -> `token_ids` `(batch_size, L)`,
        L = `translator_output_length(model, S)`; `[END]` is included and
        followed by 0s, as from `greedy_search`.
    """
    length = int(source_length or model.config.max_sequence_length)
    max_length = translator_output_length(model, length)
    spec = tf.TensorSpec([batch_size, length], tf.int32, name="encoder_token_ids")

    @tf.function(autograph=False)  # an explicit tf.while_loop: nothing to convert
    def translate(encoder_token_ids):
        ids = replace_invalid_ids(encoder_token_ids, model.config.vocabulary_size)
        # Batched attention matmuls: LiteRT's kernels have none of the
        # per-op hand-off that the elementwise form saves a TF graph.
        with elementwise_attention(0):
            return {"token_ids": static_greedy_search(model, ids, max_length)}

    return _convert(translate, spec, quantize)
