"""Inference-only `tf.Module`s: strings in, strings or probabilities out.

These modules are what a SavedModel serves. Each holds the Keras model's
weights and the tokenizer, and nothing of training: the Keras model itself is
kept out of TensorFlow's object graph, so its optimizer (whose export broke
the peers' translators, PEERS.md pain point 3), compiled train functions and
metrics never reach the SavedModel. Every method is a `tf.function` with a
fixed input signature whose `tf.TensorSpec`s declare `tf.string` explicitly
(PEERS.md pain point 2); the argument names become the signature input keys
and the returned dict keys its output keys.
"""

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.decoding import beam_search, greedy_search
from keras_transformer.layers import elementwise_attention
from keras_transformer.models import VisionTransformer
from keras_transformer.models.transformer_config import END_ID, PAD_ID, START_ID, UNK_ID
from training.serving.in_place import graph_cache_writes
from training.text.detokenize import detokenize_ids
from training.text.tokenizers import word_ids

# Section 6.1: "maximum output length ... input length + 50".
EXTRA_OUTPUT_LENGTH = 50
# Section 6.1: "beam search with a beam size of 4 and length penalty alpha = 0.6";
# `translate_beam`'s settings, fixed at export.
BEAM_SIZE = 4
LENGTH_PENALTY = 0.6
SENTENCES = tf.TensorSpec([None], tf.string, name="sentences")


def _keep_out_of_object_graph(module, name, value):
    """Stores `value` on `module` without TensorFlow tracking it."""
    object.__setattr__(module, name, value)


def _tf_variables(model):
    """The `tf.Variable`s under the model's Keras variables, to be tracked.

    Tracking the Keras wrappers themselves gives a SavedModel that TF2's
    `tf.saved_model.load` runs but TF1-style loaders (`saved_model_cli run`,
    TensorFlow Serving) do not: "Could not find variable ...".
    """
    variables = [weight.value for weight in model.weights]
    for variable in variables:
        if not isinstance(variable, tf.Variable):
            raise TypeError(
                f"Expected tf.Variable weights (TensorFlow backend); got {type(variable)}."
            )
    return variables


def dense_ids(ragged_ids, max_length):
    """Ragged `(B, None)` ids -> `(B, S)` cut to `max_length`, 0-padded, S >= 1
    (packed ids `(B, None, 1 + G)` -> `(B, S, 1 + G)`).

    A batch of empty sentences still gets one (padding) column, so the model
    never sees a zero-length axis.
    """
    return _at_least_one_column(ragged_ids[:, :max_length].to_tensor(PAD_ID))


def _at_least_one_column(ids):
    """`(B, S)` ids, padded to `(B, max(S, 1))` (packed `(B, S, 1 + G)` alike)."""
    extra = [[0, 0]] * (ids.shape.rank - 2)
    return tf.pad(ids, [[0, 0], [0, tf.maximum(1 - tf.shape(ids)[1], 0)], *extra])


def _split_packed(ids):
    """`(B, S)` ids -> (ids, None); packed `(B, S, 1 + G)` -> (word ids, n-gram ids)."""
    return (ids, None) if ids.shape.rank == 2 else (ids[..., 0], ids[..., 1:])


def _pack(ids, grams):
    return ids if grams is None else tf.concat([ids[..., None], grams], axis=-1)


def bucket_size(size, smallest=1, largest=None):
    """The power of two at or above `size` (a scalar tensor), at least
    `smallest`, at most `largest` or `size` if that is larger."""
    size = tf.maximum(size, smallest)
    exponent = tf.math.ceil(tf.math.log(tf.cast(size, tf.float32)) / np.log(2.0))
    bucket = tf.maximum(tf.cast(tf.round(2.0**exponent), tf.int32), size)
    return bucket if largest is None else tf.minimum(bucket, tf.maximum(largest, size))


def pad_to_buckets(ids, largest_length):
    """`(B, S)` ids -> `(B', S')`, B' a power of two and S' one >= 8 (at most
    `largest_length`): rows added as copies of row 0, columns as padding.

    An XLA program is compiled once per input shape; with shapes in
    buckets a server compiles a handful of programs, not one per batch
    size and source length.  A copied row finishes decoding when row 0
    does, so it never makes the loop longer.  A batch holding a row of
    padding only (an empty sentence) keeps its own width: that row's
    attention is masked everywhere, so the model averages over all its
    columns, and more columns would change its answer.
    """
    rows, columns = tf.shape(ids)[0], tf.shape(ids)[1]
    extra_rows = bucket_size(rows) - rows
    ids = tf.concat([ids, tf.tile(ids[:1], [extra_rows, 1])], axis=0)
    has_empty_row = tf.reduce_any(tf.reduce_all(tf.equal(ids, PAD_ID), axis=1))
    width = tf.where(has_empty_row, columns, bucket_size(columns, 8, largest_length))
    return tf.pad(ids, [[0, 0], [0, width - columns]])


def fill_empty_rows(ids):
    """Rows of only padding get one `[UNK]` token at position 0.

    A row without any real token (an empty or whitespace-only sentence)
    would pool to a zero vector, an input the classifier never saw in
    training; serving reads such a sentence as one unknown word instead,
    the same in the SavedModel and in TFLite.  Packed ids (`(B, S, 1 + G)`,
    `CharNGramTokenizer`) get the `[UNK]` in their token column, with no
    n-grams (an empty word has no spelling).
    """
    ids, grams = _split_packed(ids)
    empty = tf.reduce_all(ids == PAD_ID, axis=1, keepdims=True)  # (B, 1)
    first = tf.range(tf.shape(ids)[1]) == 0  # (S,)
    return _pack(tf.where(empty & first[None, :], UNK_ID, ids), grams)  # (B, S)


def fill_empty_rows_numpy(ids):
    """`fill_empty_rows` of a numpy `(B, S)` or packed `(B, S, 1 + G)` array, as a copy."""
    ids = np.array(ids)
    words = word_ids(ids)  # a view: writes into `ids`
    words[(words == PAD_ID).all(axis=1), 0] = UNK_ID
    return ids


def replace_invalid_ids(token_ids, vocabulary_size, char_ngram_buckets=0):
    """Ids outside [0, V) become `[UNK]`: a gather must never go out of range.

    Packed ids (`(B, S, 1 + G)`): the token column as above, and n-gram ids
    outside [0, `char_ngram_buckets`] become 0 (no n-gram).
    """
    ids, grams = _split_packed(tf.cast(token_ids, tf.int32))
    bad = (ids < 0) | (ids >= vocabulary_size)
    ids = tf.where(bad, UNK_ID, ids)
    if grams is not None:
        grams = tf.where((grams < 0) | (grams > char_ngram_buckets), 0, grams)
    return _pack(ids, grams)


def token_ids_spec(model, batch_size=None, length=None):
    """The `token_ids` TensorSpec of a token classifier: `(B, S)`, or
    `(B, S, 1 + G)` with `char_ngram_buckets` (G its `char_ngrams_per_word`)."""
    shape = [batch_size, length]
    if getattr(model, "char_ngram_buckets", 0):
        shape.append(1 + int(model.char_ngrams_per_word))
    return tf.TensorSpec(shape, tf.int32, name="token_ids")


def _xla_program(search):
    """`search` as one XLA program, its cached attention in batched matmuls
    (XLA's dots beat the elementwise form at every size)."""
    def compiled(*args):
        with elementwise_attention(0):
            return search(*args)

    return tf.function(compiled, jit_compile=True, autograph=False)


class TranslatorModule(tf.Module):
    """Greedy and beam-search translation of raw strings inside the graph.

    Sentences are tokenized by the (shared source/target) tokenizer, cut to
    the model's `max_sequence_length` pieces exactly as the training pipeline
    cuts them, decoded with the key/value cache, and detokenized. The output
    length is capped at min(S + 50, `max_sequence_length`), S being the
    longest (cut) source of the batch (Section 6.1, and the decoder has no
    positions beyond `max_sequence_length`). Detokenized text has its
    punctuation attached as a person writes it ("a man's t-shirt."), by the
    rules BLEU scores with (`training.text.detokenize`).

    Args:
        model: A trained `keras_transformer.models.Transformer`.
        tokenizer: A `WordPieceTokenizer` (or any `tf.Module` with
            `tokenize`/`detokenize`), shared by source and target.
        beam_size: Beams of `translate_beam` (the paper's 4).
        length_penalty: GNMT alpha of `translate_beam` (the paper's 0.6).
        name: Module name.

    Example:

    ```python
    module = TranslatorModule(model, tokenizer)
    module.translate(tf.constant(["i have two apples"]))["translations"]
    ```
    """

    def __init__(self, model, tokenizer, beam_size=BEAM_SIZE, length_penalty=LENGTH_PENALTY,
                 name=None):
        super().__init__(name=name)
        _keep_out_of_object_graph(self, "_model", model)
        self.model_weights = _tf_variables(model)
        self.tokenizer = tokenizer
        self.max_sequence_length = int(model.config.max_sequence_length)
        self.vocabulary_size = int(model.config.vocabulary_size)
        self.beam_size = int(beam_size)
        self.length_penalty = float(length_penalty)
        _keep_out_of_object_graph(self, "_compiled_greedy", _xla_program(self._greedy))
        _keep_out_of_object_graph(self, "_compiled_beam", _xla_program(self._beam))

    def signatures(self):
        """Concrete functions to serve, by signature name (`serving_default` first)."""
        return {
            "serving_default": self.translate.get_concrete_function(),
            "translate_ids": self.translate_ids.get_concrete_function(),
            "translate_beam": self.translate_beam.get_concrete_function(),
            "translate_xla": self.translate_xla.get_concrete_function(),
            "translate_beam_xla": self.translate_beam_xla.get_concrete_function(),
        }

    def _source_ids(self, sentences):
        return dense_ids(self.tokenizer.tokenize(sentences), self.max_sequence_length)

    def _max_length(self, encoder_token_ids):
        source_length = tf.shape(encoder_token_ids)[1]
        return tf.minimum(source_length + EXTRA_OUTPUT_LENGTH, self.max_sequence_length)

    def _greedy(self, encoder_token_ids):
        return greedy_search(
            self._model,
            encoder_token_ids,
            max_length=self._max_length(encoder_token_ids),
            start_id=START_ID,
            end_id=END_ID,
            pad_id=PAD_ID,
        )  # (B, L)

    def _greedy_xla(self, encoder_token_ids):
        """`_greedy` as one XLA program, on inputs padded to shape buckets.

        Greedy decoding is causal: the tokens before position n do not
        depend on how many follow, so the program decodes up to the bucket's
        length limit and the tokens are cut to this batch's (the same as
        `_greedy`'s, up to float rounding in the padded source's sums).
        """
        rows = tf.shape(encoder_token_ids)[0]
        max_length = self._max_length(encoder_token_ids)
        padded = pad_to_buckets(encoder_token_ids, self.max_sequence_length)
        return self._compiled_greedy(padded)[:rows, :max_length]

    def _detokenize(self, token_ids):
        return detokenize_ids(self.tokenizer, token_ids)  # "a man's t-shirt."

    # The searches are keras.ops loops (they run under jax.jit too): autograph
    # would convert their Python for nothing but seconds of tracing.
    @tf.function(input_signature=[SENTENCES], autograph=False)
    def translate(self, sentences):
        """Strings `(B,)` -> `{"translations": (B,) tf.string}` by greedy search."""
        with graph_cache_writes():
            token_ids = self._greedy(self._source_ids(sentences))
        return {"translations": self._detokenize(token_ids)}

    @tf.function(input_signature=[SENTENCES], autograph=False)
    def translate_xla(self, sentences):
        """`translate` compiled by XLA: the same translations, in a fraction
        of the time at small batches.

        Needs XLA's CPU JIT where it runs: TensorFlow in Python has it;
        TensorFlow Serving runs it with `--xla_cpu_compilation_enabled=true`.
        Each new bucket of batch size and source length (powers of two) is
        compiled on its first request, in 1.5 to 3 s.
        """
        return {
            "translations": self._detokenize(
                self._greedy_xla(self._source_ids(sentences))
            )
        }

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="encoder_token_ids")
        ],
        autograph=False,
    )
    def translate_ids(self, encoder_token_ids):
        """Source ids `(B, S)` -> `{"token_ids": (B, L) int32}` (END included, 0 after).

        Columns past `max_sequence_length` are dropped; ids outside the
        vocabulary are read as `[UNK]`.
        """
        ids = replace_invalid_ids(
            encoder_token_ids[:, : self.max_sequence_length], self.vocabulary_size
        )
        with graph_cache_writes():
            return {"token_ids": self._greedy(_at_least_one_column(ids))}

    @tf.function(input_signature=[SENTENCES], autograph=False)
    def translate_beam(self, sentences):
        """Strings `(B,)` -> `{"translations": (B,), "scores": (B,) float32}`.

        Beam search with `beam_size` beams and the GNMT length penalty;
        scores are log P(Y) / lp(Y) of the returned translations.
        """
        with graph_cache_writes():
            token_ids, scores = self._beam(self._source_ids(sentences))
        return {"translations": self._detokenize(token_ids), "scores": scores}

    @tf.function(input_signature=[SENTENCES], autograph=False)
    def translate_beam_xla(self, sentences):
        """`translate_beam` compiled by XLA, as `translate_xla` is `translate`."""
        ids = self._source_ids(sentences)
        rows = tf.shape(ids)[0]
        max_length = self._max_length(ids)
        padded = pad_to_buckets(ids, self.max_sequence_length)
        token_ids, scores = self._compiled_beam(padded, max_length)
        return {
            "translations": self._detokenize(token_ids[:rows, :max_length]),
            "scores": scores[:rows],
        }

    def _beam(self, encoder_token_ids, max_length=None):
        """Beam search up to `max_length` (`_max_length` of the ids if None),
        in buffers of `_max_length` positions: a compile-time constant under
        XLA, where `max_length` is given at run time."""
        buffer_length = self._max_length(encoder_token_ids)
        return beam_search(
            self._model,
            encoder_token_ids,
            beam_size=self.beam_size,
            length_penalty=self.length_penalty,
            max_length=buffer_length if max_length is None else max_length,
            start_id=START_ID,
            end_id=END_ID,
            pad_id=PAD_ID,
            buffer_length=buffer_length,
        )


def class_names(model, label_names=None):
    """One name per class of a classifier ("0", "1", ... by default; two for a
    sigmoid output).

    Raises:
        ValueError: If `label_names` does not name every class.
    """
    count = max(int(model.num_classes), 2)
    names = [str(n) for n in (label_names or range(count))]
    if len(names) != count:
        raise ValueError(
            f"label_names must name {count} classes for num_classes="
            f"{model.num_classes}; received {len(names)}: {names}."
        )
    return names


class ClassifierModule(tf.Module):
    """Class probabilities and label names for strings, token ids, series or images.

    Token classifiers get `classify(sentences (B,) tf.string)` (tokenized in
    the graph and cut to `max_sequence_length` like the training pipeline)
    and `classify_ids(token_ids (B, S) int32)` (`(B, S, 1 + G)` for a model
    with `char_ngram_buckets`, as `CharNGramTokenizer` packs them); numeric classifiers get
    `classify_features(features (B, T, F) float32)`, shorter series NaN-padded
    at the end and NaN where a value is missing (the model masks and fills
    them, `keras_transformer.layers.series_masking`); a `VisionTransformer`
    gets `classify_images(images (B, H, W, C) float32)`, H = W = its
    `image_size` and C its `num_channels` (other shapes are refused when
    the signature is called). Each returns
    `{"probabilities": (B, K) float32, "labels": (B,) tf.string}`: K is
    `num_classes`, the label the most probable class, or with a single
    sigmoid output `label_names[p > 0.5]`. A sentence without any token
    (empty, or only whitespace) is read as one `[UNK]` (`fill_empty_rows`).

    Args:
        model: A trained `keras_transformer.models.TransformerClassifier` or
            `VisionTransformer`.
        tokenizer: Its tokenizer for token input, None otherwise.
        label_names: One name per class (two for a single sigmoid output);
            defaults to "0", "1", ...
        channels_first: Series as `(B, F, T)` (aeon's and sktime's layout,
            `training.estimator.SeriesClassifier`'s) rather than `(B, T, F)`.
        name: Module name.

    Raises:
        ValueError: If a token model comes without a tokenizer, or the number
            of label names does not match the classes.
    """

    def __init__(self, model, tokenizer=None, label_names=None, channels_first=False,
                 name=None):
        super().__init__(name=name)
        label_names = class_names(model, label_names)
        self.channels_first = bool(channels_first)
        self.image_input = isinstance(model, VisionTransformer)
        self.token_input = not self.image_input and model.vocabulary_size is not None
        if self.token_input and tokenizer is None:
            raise ValueError(
                "A token classifier needs its tokenizer; received tokenizer=None."
            )
        _keep_out_of_object_graph(self, "_model", model)
        self.model_weights = _tf_variables(model)
        self.tokenizer = tokenizer if self.token_input else None
        self.label_names = tf.constant(label_names, tf.string)
        self.num_classes = int(model.num_classes)
        if self.image_input:
            side, channels = int(model.image_size), int(model.num_channels)
            self.image_shape = [None, side, side, channels]
            spec = tf.TensorSpec(self.image_shape, tf.float32, name="images")
            self.classify_images = tf.function(
                self._classify_images, input_signature=[spec]
            )
        elif self.token_input:
            self.max_sequence_length = int(model.max_sequence_length)
            self.vocabulary_size = model.vocabulary_size
            self.char_ngram_buckets = int(getattr(model, "char_ngram_buckets", 0))
            ids_spec = token_ids_spec(model)
            self.classify = tf.function(self._classify, input_signature=[SENTENCES])
            self.classify_ids = tf.function(
                self._classify_ids, input_signature=[ids_spec]
            )
        else:
            self.max_sequence_length = int(model.max_sequence_length)
            self.num_features = model.num_features
            self.series_shape = ([None, self.num_features, None] if self.channels_first
                                 else [None, None, self.num_features])
            spec = tf.TensorSpec(self.series_shape, tf.float32, name="features")
            self.classify_features = tf.function(
                self._classify_features, input_signature=[spec]
            )

    def signatures(self):
        """Concrete functions to serve, by signature name (`serving_default` first)."""
        if self.image_input:
            return {"serving_default": self.classify_images.get_concrete_function()}
        if not self.token_input:
            return {"serving_default": self.classify_features.get_concrete_function()}
        return {
            "serving_default": self.classify.get_concrete_function(),
            "classify_ids": self.classify_ids.get_concrete_function(),
        }

    def _outputs(self, inputs):
        probabilities = self._model.probabilities(self._model(inputs, training=False))
        if self.num_classes == 1:
            index = tf.cast(probabilities[:, 0] > 0.5, tf.int32)
        else:
            index = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {
            "probabilities": tf.cast(probabilities, tf.float32),  # (B, K)
            "labels": tf.gather(self.label_names, index),  # (B,)
        }

    def _classify(self, sentences):
        ids = dense_ids(self.tokenizer.tokenize(sentences), self.max_sequence_length)
        return self._outputs(fill_empty_rows(ids))

    def _classify_ids(self, token_ids):
        ids = replace_invalid_ids(
            token_ids[:, : self.max_sequence_length], self.vocabulary_size,
            self.char_ngram_buckets,
        )
        return self._outputs(fill_empty_rows(_at_least_one_column(ids)))

    def _classify_features(self, features):
        # Checked, as images are: a series laid out the other way is refused here.
        features = tf.ensure_shape(features, self.series_shape)
        if self.channels_first:  # (B, C, T), as aeon and sktime lay series out
            features = tf.transpose(features, [0, 2, 1])
        return self._outputs(features[:, : self.max_sequence_length])

    def _classify_images(self, images):
        # A loaded signature does not check the input against its TensorSpec:
        # without this, a wrong size fails deep inside, at the patch reshape.
        return self._outputs(tf.ensure_shape(images, self.image_shape))


class KerasModelModule(tf.Module):
    """Any Keras model's inference pass as `serving_default`, typed by its inputs.

    A model built in a user's own code (a functional classifier of the
    library's layers, say) has none of the library models' serving hooks;
    its signature takes what its `inputs` declare (name, dtype, shape with
    any batch) and returns `{"outputs": ...}` (one entry per output name of
    a model with several), and, given `label_names`, `labels` `(B,)`: the
    name of each row's largest output, the same for logits and
    probabilities.

    Args:
        model: A built Keras model with declared inputs (functional or
            sequential; a subclassed model once called).
        label_names: One name per column of the (single) output, or None.
        name: Module name.

    Raises:
        ValueError: If the model declares no inputs, or `label_names` does
            not name every column of a single `(B, K)` output.
    """

    def __init__(self, model, label_names=None, name=None):
        super().__init__(name=name)
        try:
            inputs = model.inputs
        except (AttributeError, ValueError):
            inputs = None
        if not inputs:
            raise ValueError(
                f"model must declare its inputs (a functional model, or one built with "
                f"keras.Input); received model={type(model).__name__} without them."
            )
        _keep_out_of_object_graph(self, "_model", model)
        _keep_out_of_object_graph(self, "_structure", model.input)
        self.model_weights = _tf_variables(model)
        self.output_names = list(getattr(model, "output_names", None) or ["outputs"])
        if label_names is not None:
            columns = model.outputs[0].shape[-1] if len(model.outputs) == 1 else None
            if columns is None or len(model.outputs[0].shape) != 2 or len(label_names) != columns:
                raise ValueError(
                    f"label_names must name each of the {columns} columns of a single "
                    f"(B, K) output; received {len(label_names)} names for outputs "
                    f"{[tuple(o.shape) for o in model.outputs]}."
                )
            self.label_names = tf.constant([str(n) for n in label_names], tf.string)
        else:
            self.label_names = None
        specs = [
            tf.TensorSpec(tensor.shape, tensor.dtype, name=tensor.name.split(":")[0])
            for tensor in inputs
        ]
        self.serve = tf.function(self._serve, input_signature=specs, autograph=False)

    def signatures(self):
        return {"serving_default": self.serve.get_concrete_function()}

    def _serve(self, *tensors):
        outputs = self._model(keras.tree.pack_sequence_as(self._structure, list(tensors)),
                              training=False)
        flat = keras.tree.flatten(outputs)
        if len(flat) == 1:
            answer = {"outputs": flat[0]}
        else:
            answer = dict(zip(self.output_names, flat, strict=True))
        if self.label_names is not None:
            index = tf.argmax(flat[0], axis=-1, output_type=tf.int32)
            answer["labels"] = tf.gather(self.label_names, index)
        return answer
