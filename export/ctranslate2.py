"""Export a translation `Transformer` to CTranslate2, and translate with it.

CTranslate2 (OpenNMT's C++ inference engine, `pip install -e
".[ctranslate2]"`) runs a model directory of its own format.  Its converters
read OpenNMT, fairseq, Marian or Hugging Face checkpoints, none of them a
Keras model, so `export_ctranslate2` fills a `ctranslate2.specs.TransformerSpec`
from our layers itself and saves it with CTranslate2's `Converter`:

* attention: our kernels are `(in, h d)` matrices, heads side by side
  (`MultiHeadAttention.projection_weights`); CTranslate2 wants their
  transposes, `(out, in)`, self-attention's stacked as all queries, all
  keys, all values, cross-attention's as a query matrix and a fused
  key/value matrix.
* post-LN (`pre_norm=False`), or pre-LN with the final `encoder_norm` /
  `decoder_norm`; the LayerNorm epsilon goes to `config.json`
  (`layer_norm_epsilon`; without it CTranslate2 would use 1e-5).
* token embeddings times sqrt(d_model) as ours; positions as an explicit
  table, because our sinusoids interleave sin and cos by channel where
  CTranslate2's built-in ones put all sines first (learned positions are a
  table anyway).
* the output projection is the embedding table (tied) or the
  `output_projection` kernel, with a bias of `PAD_LOGIT_BIAS` at [PAD] and 0
  elsewhere: [PAD] is never generated, as in our searches, whoever loads the
  directory.  The bias is not quantized (CTranslate2 quantizes weights only;
  float16 keeps -10000 exactly).

Layout of the directory:

```
model.bin, config.json, shared_vocabulary.json   CTranslate2's (ctranslate2.Translator loads it)
vocab.txt, tokenizer.json                         our WordPiece tokenizer (load_tokenizer(directory))
keras_transformer.json                            SETTINGS_FILE: how this package serves the model
```

`CTranslate2Translator` loads such a directory and translates as the
SavedModel does: the sentences are tokenized by our tokenizer (no [START] or
[END] added to the source, as in training), cut to `max_sequence_length`
pieces, decoded from [START] up to min(S + 50, `max_sequence_length`) tokens
(S the longest source of the batch, [END] counted) and detokenized with
punctuation attached (`training.text.detokenize.detokenize_ids`).

Beam search: CTranslate2 ranks a finished hypothesis by log P(Y) / |Y|^alpha
(|Y| counts [END] here, since [END] is returned), ours by the GNMT
log P(Y) / ((5 + |Y|) / 6)^alpha; the two agree only at alpha = 0, where both
rank by log P(Y), and `verify_ctranslate2` compares beams there.  Two more
differences are bridged or bounded: CTranslate2 counts a beam cut at the
length limit as finished, ours prefers any hypothesis that ended
(`CTranslate2Translator` picks as ours does), and our log-probabilities keep
[PAD]'s share in the softmax's normaliser where CTranslate2's, with the
[PAD] logit biased away, do not: a model that gives [PAD] a visible
probability may rank beams differently (a trained one gives it next to none:
it is never a target).  Greedy search is unaffected by either.
"""

import collections
import dataclasses
import json
import os

import numpy as np
import sacrebleu
from keras import ops

from keras_transformer.layers.sinusoidal_position_encoding import sinusoids
from keras_transformer.models import Transformer
from keras_transformer.models.transformer_config import (
    END_ID,
    PAD_ID,
    RESERVED_TOKENS,
    START_ID,
    UNK_ID,
)
from training.data.atomic import atomic_directory, check_target
from training.data.manifest import check_written, write_manifest, written_as
from training.monitor.evaluation import Translator
from training.runs.predict import answer_in_batches
from training.serving.inputs import text_input, token_ids
from training.serving.signatures import EXTRA_OUTPUT_LENGTH
from training.serving.task_serving import TranslationServing
from training.task_models import Translator as TranslatorModel
from training.text.detokenize import detokenize_ids
from training.text.tokenizers import load_tokenizer

#: `--quantization` choices: CTranslate2's weight types that load on a CPU.
#: Where the build lacks the kernels, CTranslate2 converts on load, with a
#: warning: float16 to float32, int16 (Intel MKL only) to int8_float32.
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16")
#: This package's serving settings, beside CTranslate2's files.
SETTINGS_FILE = "keras_transformer.json"
#: Added to the [PAD] logit: no logit comes within 10^4 of another, so [PAD]
#: is never chosen, and the other logits are unchanged (a bias of 0).
#: exp(-10^4) is 0 in float32: the log-probabilities are those of a softmax
#: without [PAD] (see the module docstring).  Exact in float16.
PAD_LOGIT_BIAS = -1e4
#: Rows of a sinusoidal position table at least: CTranslate2's default
#: `max_input_length`, so that a caller of `ctranslate2.Translator` with its
#: default limits never runs past the table.  Learned positions stop at
#: `max_sequence_length`.
MIN_SINUSOID_POSITIONS = 1024
#: Share of identical greedy translations a float32 export must reach.
MIN_IDENTICAL = 0.99
#: Sentences per CTranslate2 call (as `python -m training predict`).
BATCH_SIZE = 64
INSTALL_HINT = 'pip install -e ".[ctranslate2]" (or pip install ctranslate2)'

# Keras activation names -> CTranslate2's `common_spec.Activation` member names.
_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "silu": "SWISH", "swish": "SWISH"}


def import_ctranslate2():
    """The `ctranslate2` module, imported on first use.

    Raises:
        ModuleNotFoundError: One line naming the install command, when
            ctranslate2 is not installed (its `name` is "ctranslate2").
    """
    try:
        # Imported on use: without the optional extra, the rest of the package
        # works and a command that needs it fails with one line.
        import ctranslate2
        import ctranslate2.converters
        import ctranslate2.specs
    except ImportError:
        raise ModuleNotFoundError(
            f"CTranslate2 export needs the ctranslate2 package: {INSTALL_HINT}",
            name="ctranslate2",
        ) from None
    return ctranslate2


def _numpy(weight):
    return np.asarray(ops.convert_to_numpy(weight), dtype=np.float32)


def _model_and_tokenizer(model, tokenizer):
    """(the `Transformer`, its word-piece tokenizer) of a `Translator` task
    model, or of a `Transformer` and the `tokenizer` given beside it."""
    if isinstance(model, TranslatorModel):
        model, tokenizer = model.backbone, (model.tokenizer if tokenizer is None else tokenizer)
    if tokenizer is None or not hasattr(tokenizer, "vocabulary") or not hasattr(tokenizer, "save"):
        raise ValueError(
            "CTranslate2 export needs a Translator or a Transformer with its WordPieceTokenizer "
            f"(its vocabulary becomes CTranslate2's); received tokenizer={type(tokenizer).__name__}."
        )
    if hasattr(tokenizer, "base"):  # CharNGramTokenizer: n-gram ids CTranslate2 cannot feed
        raise ValueError(
            "CTranslate2 export cannot represent character n-gram inputs (CharNGramTokenizer); "
            "it takes one token per position."
        )
    return model, tokenizer


def check_representable(model, tokenizer=None):
    """Raises ValueError naming the first feature of `model` CTranslate2 lacks.

    Representable: a `Transformer` with ReLU, GELU or SiLU feed-forward
    layers, post-LN or pre-LN, sinusoidal or learned positions, tied or
    untied embeddings over one shared vocabulary, d_k = d_v (any d_k:
    CTranslate2's `head_dim`), dot-product attention with biases.

    Args:
        model: The model to export.
        tokenizer: Its tokenizer, whose vocabulary must be the model's and
            hold each token once (CTranslate2 maps tokens to ids by string).
    """
    if not isinstance(model, Transformer):
        raise ValueError(
            "CTranslate2 export takes an encoder-decoder Transformer (task='translation'); "
            f"received {type(model).__name__}."
        )
    c = model.config
    if c.target_vocabulary_size not in (None, c.vocabulary_size):
        raise ValueError(
            "CTranslate2 export cannot represent a target vocabulary of its own "
            f"(target_vocabulary_size={c.target_vocabulary_size} != vocabulary_size="
            f"{c.vocabulary_size}): the run's one tokenizer is the source and target vocabulary."
        )
    if str(c.activation).lower() not in _ACTIVATIONS:
        raise ValueError(
            f"CTranslate2 export cannot represent activation={c.activation!r}; it supports "
            f"{sorted(_ACTIVATIONS)}."
        )
    for block in [*model.encoder_blocks, *model.decoder_blocks]:
        attentions = [block.self_attention, getattr(block, "cross_attention", None)]
        for attention in filter(None, attentions):
            if attention.scorer != "dot":
                raise ValueError(
                    f"CTranslate2 export cannot represent the {attention.scorer!r} attention "
                    f"scorer ({block.name}); it computes scaled dot-product attention only."
                )
            if not attention.use_bias:
                raise ValueError(
                    f"CTranslate2 export needs attention with biases ({block.name}/"
                    f"{attention.name})."
                )
            if attention.head_key_dim != attention.head_value_dim:
                raise ValueError(
                    "CTranslate2 export cannot represent key_dim != value_dim (received "
                    f"key_dim={attention.head_key_dim}, value_dim={attention.head_value_dim}): "
                    "its heads have one width."
                )
    if tokenizer is not None:
        vocabulary = list(tokenizer.vocabulary)
        if len(vocabulary) != c.vocabulary_size:
            raise ValueError(
                f"The tokenizer has {len(vocabulary)} tokens but the model vocabulary_size="
                f"{c.vocabulary_size}."
            )
        if tuple(vocabulary[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
            raise ValueError(
                f"The vocabulary must start with {RESERVED_TOKENS}; received "
                f"{tuple(vocabulary[: len(RESERVED_TOKENS)])}."
            )
        twice = [token for token, n in collections.Counter(vocabulary).items() if n > 1]
        if twice:
            raise ValueError(
                f"CTranslate2 maps tokens to ids by their text; the vocabulary holds {twice[0]!r} "
                "more than once."
            )


def _linear(spec, weight, bias=None):
    spec.weight = np.ascontiguousarray(weight, dtype=np.float32)  # (out, in)
    if bias is not None:
        spec.bias = np.ascontiguousarray(bias, dtype=np.float32)


def _layer_norm(spec, layer):
    if getattr(layer, "rms_scaling", False) or not (layer.center and layer.scale):
        raise ValueError(
            f"CTranslate2 export needs LayerNormalization with a scale and an offset ({layer.name})."
        )
    spec.gamma = _numpy(layer.gamma)
    spec.beta = _numpy(layer.beta)


def _attention(spec, attention, self_attention):
    """Our `(in, h d)` projections -> CTranslate2's `(out, in)`, heads major."""
    weights = {name: tuple(_numpy(w) for w in pair)
               for name, pair in attention.projection_weights().items()}

    def stacked(*names):  # kernels side by side -> (sum of outs, in); biases joined
        return (np.concatenate([weights[n][0] for n in names], axis=1).T,
                np.concatenate([weights[n][1] for n in names]))

    if self_attention:
        _linear(spec.linear[0], *stacked("query", "key", "value"))
    else:
        _linear(spec.linear[0], *stacked("query"))
        _linear(spec.linear[1], *stacked("key", "value"))
    _linear(spec.linear[-1], weights["output"][0].T, weights["output"][1])


def _feed_forward(spec, feed_forward):
    _linear(spec.linear_0, _numpy(feed_forward.inner_dense.kernel).T,
            _numpy(feed_forward.inner_dense.bias))
    _linear(spec.linear_1, _numpy(feed_forward.output_dense.kernel).T,
            _numpy(feed_forward.output_dense.bias))


def _positions(embedding):
    """The `(T, d_model)` table our embedding layer adds at positions 0..T-1."""
    if embedding.positions == "learned":
        return _numpy(embedding.position_encoding.position_embeddings)
    length = max(embedding.max_sequence_length, MIN_SINUSOID_POSITIONS)
    return _numpy(sinusoids(length, embedding.hidden_dim, 0,
                            embedding.position_encoding.max_wavelength))


def build_spec(model, tokenizer):
    """The `ctranslate2.specs.TransformerSpec` of `model`, vocabularies registered.

    Args:
        model: A `Transformer` that `check_representable` accepts.
        tokenizer: Its `WordPieceTokenizer` (source and target vocabulary).

    Returns:
        The filled spec (not yet validated, optimised or quantized).
    """
    ct2 = import_ctranslate2()
    specs = ct2.specs
    check_representable(model, tokenizer)
    c = model.config
    dk = model.encoder_blocks[0].self_attention.head_key_dim
    common = dict(
        pre_norm=bool(c.normalize_first),
        activation=getattr(specs.common_spec.Activation, _ACTIVATIONS[str(c.activation).lower()]),
        # Only where d_k differs from d_model / h: CTranslate2 derives it otherwise.
        head_dim=None if dk * c.num_heads == c.hidden_dim else dk,
    )
    encoder = specs.TransformerEncoderSpec(c.num_layers, c.num_heads, **common)
    decoder = specs.TransformerDecoderSpec(c.num_layers, c.num_heads, **common)

    def embed(spec, layer):
        layer_spec = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
        layer_spec.weight = _numpy(layer.embeddings)  # (V, d_model)
        spec.scale_embeddings = bool(layer.scale_embeddings)
        spec.position_encodings.encodings = _positions(layer)

    embed(encoder, model.encoder_embedding)
    embed(decoder, model.decoder_embedding)
    for block, layer in zip(model.encoder_blocks, encoder.layer, strict=True):
        _attention(layer.self_attention, block.self_attention, self_attention=True)
        _layer_norm(layer.self_attention.layer_norm, block.self_attention_norm)
        _feed_forward(layer.ffn, block.feed_forward)
        _layer_norm(layer.ffn.layer_norm, block.feed_forward_norm)
    for block, layer in zip(model.decoder_blocks, decoder.layer, strict=True):
        _attention(layer.self_attention, block.self_attention, self_attention=True)
        _layer_norm(layer.self_attention.layer_norm, block.self_attention_norm)
        _attention(layer.attention, block.cross_attention, self_attention=False)
        _layer_norm(layer.attention.layer_norm, block.cross_attention_norm)
        _feed_forward(layer.ffn, block.feed_forward)
        _layer_norm(layer.ffn.layer_norm, block.feed_forward_norm)
    if c.normalize_first:
        _layer_norm(encoder.layer_norm, model.encoder_norm)
        _layer_norm(decoder.layer_norm, model.decoder_norm)
    if model.output_projection is None:
        projection = _numpy(model.decoder_embedding.embeddings)  # x E^T: E is (out, in)
    else:
        projection = _numpy(model.output_projection.kernel).T  # (d_model, V) -> (V, d_model)
    pad_bias = np.zeros(projection.shape[0], np.float32)
    pad_bias[PAD_ID] = PAD_LOGIT_BIAS
    _linear(decoder.projection, projection, pad_bias)

    spec = specs.TransformerSpec(encoder, decoder)
    spec.config.unk_token = RESERVED_TOKENS[UNK_ID]
    spec.config.bos_token = RESERVED_TOKENS[START_ID]
    spec.config.eos_token = RESERVED_TOKENS[END_ID]
    spec.config.decoder_start_token = RESERVED_TOKENS[START_ID]
    # The training pipeline feeds sources as tokenized: no [START] / [END].
    spec.config.add_source_bos = False
    spec.config.add_source_eos = False
    spec.config.layer_norm_epsilon = float(c.layer_norm_epsilon)
    vocabulary = list(tokenizer.vocabulary)
    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    return spec


def _check_quantization(quantization):
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"quantization must be one of {QUANTIZATIONS}; received {quantization!r}."
        )


def export_ctranslate2(model, output_dir, tokenizer=None, quantization="float32",
                       overwrite=False):
    """Writes `model` as a CTranslate2 model directory, atomically.

    The directory (see the module docstring) holds CTranslate2's
    `model.bin`, `config.json` and `shared_vocabulary.json`, our tokenizer's
    `vocab.txt` and `tokenizer.json`, and `SETTINGS_FILE`.  It is written into
    a temporary sibling and renamed into place when complete; on any error
    nothing is left behind.

    Args:
        model: A trained `Translator` (`run.task_model` of a translation
            run), or a `Transformer` with its `tokenizer`.
        output_dir: Target directory.
        tokenizer: The `WordPieceTokenizer` of a bare `Transformer` (its
            vocabulary becomes CTranslate2's); None for a `Translator`.
        quantization: Weight type: "float32", "int8", "int8_float32",
            "int16" or "float16" (CTranslate2's `quantization`; embeddings
            and linear weights are quantized, biases, norms and position
            tables kept in float32, or float16 for "float16").
        overwrite: Replace an existing `output_dir`.

    Returns:
        The absolute path of the directory.

    Raises:
        FileExistsError: If `output_dir` exists and `overwrite` is False
            (checked before converting).
        ModuleNotFoundError: If ctranslate2 is not installed.
        ValueError: On an unknown quantization, or a model CTranslate2
            cannot represent (the message names the feature).
    """
    _check_quantization(quantization)
    model, tokenizer = _model_and_tokenizer(model, tokenizer)
    import_ctranslate2()
    check_representable(model, tokenizer)
    output_dir = os.path.abspath(os.fspath(output_dir))
    check_target(output_dir, overwrite, REPLACEABLE)
    spec = build_spec(model, tokenizer)
    converter = _converter(spec)
    with atomic_directory(output_dir, overwrite, REPLACEABLE) as staging:
        # `convert` validates the spec, aliases the shared embedding tables,
        # quantizes and saves (it recreates `staging`, hence force=True).
        converter.convert(staging, quantization=quantization, force=True)
        tokenizer.save(staging)
        with open(os.path.join(staging, SETTINGS_FILE), "w", encoding="utf-8") as f:
            json.dump(_settings(model, quantization), f, indent=2, sort_keys=True)
            f.write("\n")
        write_manifest(staging, "ctranslate2")  # last: it records the files above
    return output_dir


def is_ctranslate2_export(path):
    """Whether `path` is a CTranslate2 export of this package (its manifest
    says so, or, written before exports carried one, it holds `model.bin`
    and `SETTINGS_FILE`): all `overwrite` replaces."""
    return written_as(path, "ctranslate2", ("model.bin", SETTINGS_FILE))


#: What `export_ctranslate2(overwrite=True)` may replace (`training.data.atomic.check_target`).
REPLACEABLE = ("a CTranslate2 export of keras-transformer", is_ctranslate2_export)


def _settings(model, quantization):
    c = model.config
    return {
        "format": "keras_transformer.ctranslate2",
        "version": 1,
        "max_sequence_length": int(c.max_sequence_length),
        "extra_output_length": EXTRA_OUTPUT_LENGTH,
        "max_output_length": "min(S + extra_output_length, max_sequence_length), S the "
                             "longest source of a batch in pieces, [END] counted",
        "source_tokens": "as tokenized, cut to max_sequence_length; no [START] or [END]",
        "start_token": RESERVED_TOKENS[START_ID],
        "end_token": RESERVED_TOKENS[END_ID],
        "pad_token": RESERVED_TOKENS[PAD_ID],
        "unk_token": RESERVED_TOKENS[UNK_ID],
        "pad_logit_bias": PAD_LOGIT_BIAS,
        "quantization": quantization,
        "layer_norm_epsilon": float(c.layer_norm_epsilon),
        "model": dataclasses.asdict(c),
    }


def _converter(spec):
    """A `ctranslate2.converters.Converter` whose model is the filled `spec`."""

    class SpecConverter(import_ctranslate2().converters.Converter):
        def _load(self):
            return spec

    return SpecConverter()


def read_settings(model_dir):
    """`SETTINGS_FILE` of an export, as a dict.

    Raises:
        FileNotFoundError: If `model_dir` holds no `SETTINGS_FILE` (not an
            export of `export_ctranslate2`).
    """
    path = os.path.join(os.fspath(model_dir), SETTINGS_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"No {SETTINGS_FILE} in {os.fspath(model_dir)!r}; is it a directory written by "
            "`python -m export ctranslate2`?"
        )
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class CTranslate2Translator:
    """A CTranslate2 export, loaded once, translating as the SavedModel does.

    `translate` answers raw sentences: our tokenizer (from the directory's
    `vocab.txt` and `tokenizer.json`) -> pieces cut to `max_sequence_length`
    -> `ctranslate2.Translator.translate_batch` -> ids -> our detokenizer,
    in the batches of `python -m training predict` (sorted by length,
    `batch_size` at a time), so its lines are those of the run's Keras model
    up to the numerical agreement `verify_ctranslate2` measures.  An empty
    source (no pieces) is decoded as a batch of its own, a lone [PAD] piece
    up to min(1 + 50, `max_sequence_length`) tokens: what the SavedModel
    answers to a request of that sentence alone.  (In a batch of longer
    sentences our Keras model's fully masked attention averages over the
    batch's padding positions, which CTranslate2, masking by length, cannot
    reproduce.)

    Args:
        model_dir: A directory written by `export_ctranslate2`.
        device: "cpu", "cuda" or "auto" (CTranslate2's `device`).
        compute_type: CTranslate2's `compute_type`; "default" computes in
            the saved weight type where the device supports it (float16 and
            int16 weights run in float32 on a CPU without those kernels).
        **translator_options: Further `ctranslate2.Translator` arguments,
            such as `intra_threads`.

    Raises:
        FileNotFoundError: If `model_dir` is not such a directory.
        ModuleNotFoundError: If ctranslate2 is not installed.

    Example:

    ```python
    translator = CTranslate2Translator("exported/translator-ct2")
    translator.translate(["there are eight cats in the garden"])  # ['im garten sind acht katzen']
    translator.translate(sentences, beam_size=4)
    ```
    """

    def __init__(self, model_dir, device="cpu", compute_type="default", **translator_options):
        ct2 = import_ctranslate2()
        self.model_dir = os.path.abspath(os.fspath(model_dir))
        check_written(self.model_dir, "ctranslate2", f"model_dir={self.model_dir!r}",
                      "export the run again (python -m export ctranslate2)",
                      ("model.bin", SETTINGS_FILE))
        self.settings = read_settings(self.model_dir)
        self.tokenizer = load_tokenizer(self.model_dir)
        self.vocabulary = list(self.tokenizer.vocabulary)
        self._token_ids = {token: i for i, token in enumerate(self.vocabulary)}
        self.max_sequence_length = int(self.settings["max_sequence_length"])
        self.extra_output_length = int(self.settings["extra_output_length"])
        self.translator = ct2.Translator(
            self.model_dir, device=device, compute_type=compute_type, **translator_options
        )

    def max_length(self, source_length):
        """Most target tokens, [END] counted: min(S + 50, `max_sequence_length`)."""
        return min(max(int(source_length), 1) + self.extra_output_length,
                   self.max_sequence_length)

    def _pieces(self, row):
        """One row of ids -> its source pieces (trailing [PAD] dropped)."""
        row = list(row)
        while row and row[-1] == PAD_ID:
            row.pop()
        return [self.vocabulary[i] for i in row]

    def _decode(self, sources, max_length, beam_size, length_penalty):
        def search(sources, **options):
            return self.translator.translate_batch(
                sources,
                beam_size=beam_size,
                length_penalty=length_penalty,
                max_decoding_length=max_length,
                # Our searches may end at the first step (an empty
                # translation); CTranslate2 forbids [END] there by default.
                min_decoding_length=0,
                max_input_length=0,  # cut to max_sequence_length already
                return_end_token=True,  # [END] in the ids, as ours
                **options,
            )

        def ended(result):
            return [h for h in result.hypotheses if h and h[-1] == RESERVED_TOKENS[END_ID]]

        # Every kept hypothesis, best first: CTranslate2 counts a beam cut at
        # max_decoding_length as finished and may rank it first, where our
        # beam search returns a hypothesis that ended whenever one did.
        results = search(sources, num_hypotheses=beam_size)
        if beam_size > 1:
            # All `beam_size` best were cut: the best that ended, if any, is
            # among the 2 * beam_size best (only `beam_size` are cut, at the
            # last step), which a second search with patience 2 keeps.
            cut = [i for i, result in enumerate(results) if not ended(result)]
            if cut:
                again = search([sources[i] for i in cut], patience=2,
                               num_hypotheses=2 * beam_size)
                for i, result in zip(cut, again, strict=True):
                    results[i] = result
        return [[self._token_ids[token] for token in (ended(r) or r.hypotheses)[0]]
                for r in results]

    def translate_ids(self, encoder_token_ids, beam_size=1, length_penalty=0.0):
        """Source ids `(B, S)` -> target ids `(B, L)` int32, [END] included, 0 after.

        As the SavedModel's `translate_ids` signature: columns past
        `max_sequence_length` are dropped, ids outside the vocabulary read
        as [UNK], and at most L = min(S + 50, `max_sequence_length`) tokens
        are decoded, S the width of the (cut) batch.  Trailing [PAD] ends a
        row; a [PAD] between tokens is fed as a token (CTranslate2 masks by
        length only, where our model would mask it).

        Args:
            encoder_token_ids: `(B, S)` ints, or a list of rows (padded to
                the longest).
            beam_size: 1 for greedy search, else CTranslate2's beam search.
            length_penalty: CTranslate2's alpha: a finished hypothesis
                scores log P(Y) / |Y|^alpha ([END] counted in |Y|).  0 ranks
                by log P(Y), as our `beam_search` with `length_penalty=0`.

        Returns:
            `(B, L)` int32 numpy array.
        """
        _check_beam(beam_size)
        rows = [list(np.asarray(row, dtype=np.int64).reshape(-1)) for row in encoder_token_ids]
        width = min(max((len(r) for r in rows), default=1), self.max_sequence_length)
        vocabulary_size = len(self.vocabulary)
        rows = [[int(i) if 0 <= i < vocabulary_size else UNK_ID for i in r[:width]]
                for r in rows]
        pieces = [self._pieces(r) for r in rows]
        outputs = [[] for _ in rows]
        groups = [  # empty rows as a batch of their own (see the class docstring)
            ([i for i, p in enumerate(pieces) if p], self.max_length(width)),
            ([i for i, p in enumerate(pieces) if not p], self.max_length(1)),
        ]
        groups = [(members, length) for members, length in groups if members]
        for members, length in groups:
            sources = [pieces[i] or [RESERVED_TOKENS[PAD_ID]] for i in members]
            decoded = self._decode(sources, length, beam_size, length_penalty)
            for i, ids in zip(members, decoded, strict=True):
                outputs[i] = ids
        longest = max((length for _, length in groups), default=self.max_length(width))
        padded = np.full((len(rows), longest), PAD_ID, np.int32)
        for i, ids in enumerate(outputs):
            padded[i, : len(ids)] = ids
        return padded

    def translate(self, sentences, beam_size=1, length_penalty=0.0, batch_size=BATCH_SIZE):
        """Sentences -> translations (`str`), punctuation attached as served.

        Args:
            sentences: `str` (or UTF-8 `bytes`) sentences.
            beam_size: 1 for greedy search, else beam search.
            length_penalty: CTranslate2's alpha (see `translate_ids`).
            batch_size: Sentences per CTranslate2 call; the output length
                limit is set per batch (`max_length`).

        Returns:
            One translation per sentence, in order.
        """
        _check_beam(beam_size)
        serving = TranslationServing(self.tokenizer)
        examples = [serving.parse_input(sentence) for sentence in sentences]

        def answer(batch):
            ids = token_ids(self.tokenizer, batch, self.max_sequence_length)
            tokens = self.translate_ids(ids, beam_size, length_penalty)
            return {"translations": np.asarray(
                detokenize_ids(self.tokenizer, tokens).numpy(), dtype=object)}

        return answer_in_batches(serving, examples, batch_size, answer)


def _check_beam(beam_size):
    if not isinstance(beam_size, int) or isinstance(beam_size, bool) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive integer; received {beam_size!r}.")


def _trimmed(row):
    """Decoded ids up to and including [END]; the [PAD] after it dropped."""
    out = []
    for token in np.asarray(row).tolist():
        if token == PAD_ID:
            break
        out.append(token)
        if token == END_ID:
            break
    return out


def _batches(tokenizer, sentences, max_sequence_length, batch_size):
    """(sentence indices, ids) of `answer_in_batches`' batches: sorted by length."""
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        yield chunk, token_ids(tokenizer, [sentences[i] for i in chunk], max_sequence_length)


def _keras_tokens(decode_ids, ids):
    """Our search's trimmed ids per row of `ids`, empty rows decoded as a batch of their own."""
    empty = ~(ids != PAD_ID).any(axis=1)
    outputs = [None] * len(ids)
    for rows, batch in ((np.flatnonzero(~empty), ids), (np.flatnonzero(empty), ids[:, :1])):
        if len(rows):
            tokens = np.asarray(decode_ids(np.ascontiguousarray(batch[rows], np.int32)))
            for i, row in zip(rows, tokens, strict=True):
                outputs[i] = _trimmed(row)
    return outputs


def verify_ctranslate2(model, model_dir, sentences=None, references=None, tokenizer=None,
                       beam_size=4, batch_size=BATCH_SIZE, min_identical=None, translator=None):
    """Compares a CTranslate2 export's translations with the Keras model's.

    Both decode the same batches (sorted by length, `batch_size` at a time,
    empty sources on their own) up to min(S + 50, `max_sequence_length`)
    tokens: greedy search, and beam search of `beam_size` beams with length
    penalty 0 on both sides (CTranslate2's |Y|^alpha and our GNMT penalty
    only coincide there).  A sentence counts as identical when the token
    ids up to [END] are equal.

    Args:
        model: The `Translator` exported (`run.task_model`), or the
            `Transformer` with its `tokenizer`.
        model_dir: Its CTranslate2 export.
        sentences: Source sentences; in-vocabulary sentences and the
            awkward probes (`TranslationServing.probe_inputs`) if None.
        references: Optional reference translations (one per sentence):
            BLEU of both systems against them is reported too.
        tokenizer: The tokenizer of a bare `Transformer`.
        beam_size: Beams of the beam-search comparison (0 or 1: greedy only).
        batch_size: Sentences per batch.
        min_identical: Share of identical greedy translations required for
            `ok`; `MIN_IDENTICAL` for a float32 export and none (report
            only) for a quantized one if None.
        translator: A loaded `CTranslate2Translator` of `model_dir`, to reuse.

    Returns:
        A dict: `num_sentences`, `quantization`, `greedy` and `beam` (None
        without beams), each `{"identical": share, "identical_count",
        "bleu_vs_keras", "differences": up to 3 {source, keras,
        ctranslate2}}` plus `bleu_keras` / `bleu_ctranslate2` against
        `references` when given, `beam_size`, `length_penalty` (0),
        `min_identical` and `ok`.
    """
    model, tokenizer = _model_and_tokenizer(model, tokenizer)
    translator = translator or CTranslate2Translator(model_dir)
    if sentences is None:
        sentences = TranslationServing(tokenizer).probe_inputs(model)
    sentences = [text_input(s) for s in sentences]
    if references is not None and len(references) != len(sentences):
        raise ValueError(
            f"references must match sentences; received {len(references)} references for "
            f"{len(sentences)} sentences."
        )
    max_sequence_length = int(model.config.max_sequence_length)
    quantization = translator.settings.get("quantization", "float32")
    if min_identical is None:
        min_identical = MIN_IDENTICAL if quantization == "float32" else None

    def text(ids_rows):
        width = max((len(r) for r in ids_rows), default=1) or 1
        ids = np.zeros((len(ids_rows), width), np.int32)
        for i, row in enumerate(ids_rows):
            ids[i, : len(row)] = row
        return [t.decode("utf-8") for t in detokenize_ids(tokenizer, ids).numpy()]

    def compare(beams):
        keras_search = Translator(model, tokenizer, max_sequence_length, beam_size=beams,
                                  length_penalty=0.0).decode_ids
        keras_ids, ct2_ids = [None] * len(sentences), [None] * len(sentences)
        for chunk, ids in _batches(tokenizer, sentences, max_sequence_length, batch_size):
            ours = _keras_tokens(keras_search, ids)
            theirs = translator.translate_ids(ids, beam_size=beams, length_penalty=0.0)
            for i, a, b in zip(chunk, ours, theirs, strict=True):
                keras_ids[i], ct2_ids[i] = a, _trimmed(b)
        same = [a == b for a, b in zip(keras_ids, ct2_ids, strict=True)]
        keras_text, ct2_text = text(keras_ids), text(ct2_ids)
        result = {
            "identical": sum(same) / max(len(same), 1),
            "identical_count": sum(same),
            "bleu_vs_keras": sacrebleu.corpus_bleu(ct2_text, [keras_text]).score,
            "differences": [
                {"source": sentences[i], "keras": keras_text[i], "ctranslate2": ct2_text[i]}
                for i in [i for i, s in enumerate(same) if not s][:3]
            ],
        }
        if references is not None:
            result["bleu_keras"] = sacrebleu.corpus_bleu(keras_text, [list(references)]).score
            result["bleu_ctranslate2"] = sacrebleu.corpus_bleu(
                ct2_text, [list(references)]).score
        return result

    greedy = compare(1)
    beam = compare(beam_size) if beam_size and beam_size > 1 else None
    return {
        "num_sentences": len(sentences),
        "quantization": quantization,
        "greedy": greedy,
        "beam": beam,
        "beam_size": beam_size,
        "length_penalty": 0.0,
        "min_identical": min_identical,
        "ok": min_identical is None or greedy["identical"] >= min_identical,
    }
