"""One version of a model: checked, loaded, described and warmed up.

`Servable.load` runs in the loader thread (`export.server.model_manager`):
the version folder's `manifest.json` first (`check_written`, as `predict --saved-model`: a
file missing, cut short or changed is named and the version refused before
TensorFlow reads it), then `tf.saved_model.load` (a damaged variables file
is a ValueError naming it), the export's tokenizer and
`max_sequence_length` for the batch keys (`export.server.batch_keys`: a
translator's read from its own `translate_ids`, a classifier's from
`assets/config.json`), and
the signature defs of `saved_model.pb` for `/metadata`.  `warm_up` runs
every signature once (and, if asked, every XLA bucket) before the version
is marked AVAILABLE, so that no client pays for a first call.
"""

import json
import os
import warnings

import tensorflow as tf
from google.protobuf import json_format
from tensorflow.core.protobuf import saved_model_pb2

from export.server.batch_keys import BatchKeys
from export.server.signature import ServedSignature
from keras_transformer.models.transformer_config import RESERVED_TOKENS, UNK_ID
from training.data.manifest import SAVED_MODEL_FILES, check_written
from training.runs.predict import load_saved_model
from training.text.tokenizers import load_tokenizer

#: Longer than any model's `max_sequence_length` (it is cut to that at once).
PROBE_SOURCE_LENGTH = 1 << 16


def _max_sequence_length(config):
    """The model's `max_sequence_length` from an export's `assets/config.json`."""
    if not isinstance(config, dict):
        return None
    model = config.get("model")
    for source in (model if isinstance(model, dict) else {}, config):
        value = source.get("max_sequence_length")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _translator_max_sequence_length(loaded):
    """A translator's `max_sequence_length`, from its own `translate_ids`.

    Its source is cut to `max_sequence_length` columns and it decodes
    min(S + 50, `max_sequence_length`) positions, all of them returned: a
    source longer than any model's limit gives back exactly the limit.
    """
    if "translate_ids" not in loaded.signatures:
        return None
    source = tf.fill([1, PROBE_SOURCE_LENGTH], UNK_ID)
    token_ids = loaded.signatures["translate_ids"](encoder_token_ids=source)["token_ids"]
    return int(token_ids.shape[1])


def _read_config(path):
    config_path = os.path.join(path, "assets", "config.json")
    try:
        with open(config_path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class _Pieces:
    """Word pieces of sentences, by the export's tokenizer (the batch keys' S)."""

    def __init__(self, tokenizer):
        base = getattr(tokenizer, "base", tokenizer)  # CharNGramTokenizer's token count
        self.vocabulary = tuple(base.vocabulary)
        self._lengths = tf.function(
            lambda sentences: base.tokenize(sentences).row_lengths(),
            input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)

    def __call__(self, sentences):
        return self._lengths(tf.constant(sentences)).numpy()

    def sentence(self, pieces):
        """A sentence of `pieces` word pieces (a repeated whole-word piece)."""
        words = [t for t in self.vocabulary[len(RESERVED_TOKENS):]
                 if t.isalnum() and not t.startswith("##")] or ["a"]
        for word in words[:20]:
            sentence = " ".join([word] * pieces).encode("utf-8")
            if int(self([sentence])[0]) == pieces:
                return sentence
        return " ".join([words[0]] * pieces).encode("utf-8")


def _signature_defs(path):
    """TensorFlow Serving's `metadata.signature_def` of `path/saved_model.pb`."""
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    signature_defs = saved_model.meta_graphs[0].signature_def
    return {name: json_format.MessageToDict(signature_defs[name],
                                            preserving_proto_field_name=True,
                                            always_print_fields_with_no_presence=True)
            for name in sorted(signature_defs)}


class Servable:
    """A loaded version of a model.

    Attributes:
        model_name, version, path: What it is and where it was read.
        signatures: {name: `ServedSignature`}.
        keys: Its `BatchKeys`.
        notes: What loading it warned of (an export without a manifest).
    """

    def __init__(self, model_name, version, path, loaded, keys, pieces, notes=()):
        self.model_name = model_name
        self.version = version
        self.path = path
        self.loaded = loaded
        self.keys = keys
        self.pieces = pieces
        self.notes = tuple(notes)
        self.signatures = {name: ServedSignature(name, function, keys)
                           for name, function in sorted(loaded.signatures.items())}
        self.signature_defs = _signature_defs(path)

    @classmethod
    def load(cls, model_name, version, path):
        """Checks and loads the export at `path` (a ValueError or OSError names
        what is wrong with it)."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_written(path, "saved_model", repr(path),
                          "export the model again, into a new version folder",
                          SAVED_MODEL_FILES)
        loaded = load_saved_model(path)
        pieces = None
        if os.path.isfile(os.path.join(path, "assets", "vocab.txt")):
            pieces = _Pieces(load_tokenizer(os.path.join(path, "assets")))
        limit = _translator_max_sequence_length(loaded) or _max_sequence_length(
            _read_config(path))
        keys = BatchKeys(pieces, limit)
        return cls(model_name, version, path, loaded, keys, pieces,
                   [str(w.message) for w in caught])

    def warm_up(self, max_batch_size=1, all_buckets=False):
        """Runs every signature on its warm-up batches (`warmup_batches`);
        returns how many calls ran."""
        def sentence_of(pieces):
            return self.pieces.sentence(pieces) if self.pieces else b"a" * pieces

        calls = 0
        for signature in self.signatures.values():
            for batch in signature.warmup_batches(sentence_of, max_batch_size, all_buckets):
                signature(batch)
                calls += 1
        return calls

    def metadata(self):
        """TensorFlow Serving's answer to `GET /v1/models/NAME/versions/N/metadata`."""
        return {
            "model_spec": {"name": self.model_name, "signature_name": "",
                           "version": str(self.version)},
            "metadata": {"signature_def": {"signature_def": self.signature_defs}},
        }
