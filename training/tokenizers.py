"""Word-piece and SentencePiece tokenizers that live inside the TF graph.

The tokenizers are `tf.Module`s whose methods are `tf.function`s with fixed
input signatures, so the same graph code runs eagerly, inside `tf.data`
(`dataset.map`) and inside an exported SavedModel that takes and returns
strings. Ids follow ARCHITECTURE.md: 0 `[PAD]`, 1 `[UNK]`, 2 `[START]`,
3 `[END]`; `tokenize` never adds `[START]`/`[END]` (the pipeline does).

Text is normalised before word-piece splitting, identically when learning
the vocabulary and when tokenising: invalid UTF-8 bytes become U+FFFD (then
`[UNK]`) instead of failing the whole batch, Unicode is put in NFC form, and
with `lower_case=True` it is lowercased *without* stripping accents, because
the target side must keep "fährt" and "fahrt" apart. BERT's own
`lower_case` would strip them.
"""

import json
import os

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

from training.text_files import read_lines

RESERVED_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")
PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
_STRINGS = tf.TensorSpec([None], tf.string)
_IDS = tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1)


def normalize_text(strings, lower_case=True):
    """Makes any byte string safe for word-piece splitting.

    Args:
        strings: `tf.string` tensor of any shape.
        lower_case: Whether to lowercase (accents are kept).

    Returns:
        A `tf.string` tensor of the same shape: valid UTF-8, NFC.
    """
    strings = tf.strings.unicode_transcode(
        strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )
    strings = tf_text.normalize_utf8(strings, "NFC")
    if lower_case:
        strings = tf.strings.lower(strings, encoding="utf-8")
    return strings


def learn_wordpiece_vocabulary(
    sentences,
    vocabulary_size,
    lower_case=True,
    reserved_tokens=RESERVED_TOKENS,
    learn_params=None,
):
    """Learns a word-piece vocabulary with tensorflow-text's BERT learner.

    Runs offline (`bert_vocab_from_dataset` is pure Python + TF). The learner
    drops words seen fewer than `learn_params["lower_thresh"]` (default 10)
    times before building pieces, so on a tiny corpus pass `{"lower_thresh":
    1}`. It scales with the number of distinct words, not sentences, and is
    slow: Multi30k's 29,000 training sentences took 78 s (English) and 349 s
    (German) on a busy 2-core machine, so learn once and `save` the result.

    Args:
        sentences: Iterable of `str` (or a `tf.data.Dataset` of scalar
            strings).
        vocabulary_size: Target size including the reserved tokens; the
            learner may return fewer tokens on a small corpus.
        lower_case: Must equal the `lower_case` of the `WordPieceTokenizer`
            that will use the vocabulary.
        reserved_tokens: Tokens placed first, in order (ids 0, 1, ...).
        learn_params: Optional keyword arguments for
            `wordpiece_tokenizer_learner_lib.learn`.

    Returns:
        The vocabulary as a list of `str`, `reserved_tokens` first.

    Raises:
        ValueError: If `sentences` is empty or `vocabulary_size` is too small.
    """
    reserved_tokens = list(reserved_tokens)
    if vocabulary_size <= len(reserved_tokens):
        raise ValueError(
            f"vocabulary_size must exceed the {len(reserved_tokens)} reserved tokens, "
            f"received vocabulary_size={vocabulary_size}."
        )
    if isinstance(sentences, tf.data.Dataset):
        dataset = sentences
    else:
        sentences = list(sentences)
        if not sentences:
            raise ValueError("learn_wordpiece_vocabulary: sentences is empty.")
        dataset = tf.data.Dataset.from_tensor_slices(tf.constant(sentences, tf.string))
    dataset = dataset.batch(1024).map(
        lambda strings: normalize_text(strings, lower_case),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return bert_vocab_from_dataset.bert_vocab_from_dataset(
        dataset,
        vocab_size=vocabulary_size,
        reserved_tokens=reserved_tokens,
        bert_tokenizer_params={"lower_case": False},  # Done by normalize_text.
        learn_params=dict(learn_params or {}),
    )


def _text_ids(ids, vocabulary_size):
    """Cuts each row at its first `[END]` and drops reserved/invalid ids."""
    dense = ids.to_tensor(PAD_ID)  # (B, T)
    before_end = tf.math.cumsum(tf.cast(dense == END_ID, tf.int32), axis=1) == 0
    keep = before_end & (dense >= len(RESERVED_TOKENS)) & (dense < vocabulary_size)
    return tf.ragged.boolean_mask(dense, keep)  # (B, None)


def _check_reserved(vocabulary):
    if tuple(vocabulary[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
        raise ValueError(
            f"The vocabulary must start with {list(RESERVED_TOKENS)} (ARCHITECTURE.md "
            f"token ids), received {list(vocabulary[: len(RESERVED_TOKENS)])}."
        )


class WordPieceTokenizer(tf.Module):
    """BERT-style word-piece tokenizer (`tensorflow_text.FastBertTokenizer`).

    Splits on whitespace and punctuation, then into the longest vocabulary
    pieces ("##" marks a word continuation). Unknown characters (emoji, other
    scripts, invalid bytes) become `[UNK]`; nothing raises on hostile input.
    The `[START]` text cannot produce id 2: "[" and "]" are split off first.

    Args:
        vocabulary: List of tokens, starting with `RESERVED_TOKENS`.
        lower_case: Lowercase (keeping accents) before splitting; must match
            the value used to learn the vocabulary.
        max_bytes_per_word: Longer words become one `[UNK]`.
        name: Module name.

    Example:

    ```python
    vocabulary = learn_wordpiece_vocabulary(sentences, 8000)
    tokenizer = WordPieceTokenizer(vocabulary)
    ids = tokenizer.tokenize(tf.constant(["Ein Hund läuft."]))  # (1, None) int32
    tokenizer.detokenize(ids)  # [b"ein hund läuft ."]
    ```
    """

    def __init__(self, vocabulary, lower_case=True, max_bytes_per_word=100, name=None):
        super().__init__(name=name)
        vocabulary = [str(token) for token in vocabulary]
        _check_reserved(vocabulary)
        self.vocabulary = tuple(vocabulary)
        self.lower_case = bool(lower_case)
        self.max_bytes_per_word = int(max_bytes_per_word)
        self._tokenizer = tf_text.FastBertTokenizer(
            vocab=vocabulary,
            token_out_type=tf.int32,
            unknown_token=RESERVED_TOKENS[UNK_ID],
            max_bytes_per_word=self.max_bytes_per_word,
            support_detokenization=True,
        )

    @property
    def vocabulary_size(self):
        """Number of tokens, reserved ones included."""
        return len(self.vocabulary)

    @tf.function(input_signature=[_STRINGS])
    def tokenize(self, strings):
        """Strings (B,) -> word-piece ids, a `tf.RaggedTensor` (B, None) int32."""
        # FastBertTokenizer already merges the word axis: (B, None) pieces.
        return self._tokenizer.tokenize(normalize_text(strings, self.lower_case))

    @tf.function(input_signature=[_IDS])
    def detokenize(self, ids):
        """Ids (B, None) int32 -> one string per row (B,).

        Each row is cut at its first `[END]`; `[PAD]`, `[UNK]`, `[START]` and
        out-of-range ids are dropped, pieces are joined into words, words by
        single spaces. Pass a padded (B, T) matrix as
        `tf.RaggedTensor.from_tensor(ids)`.
        """
        return self._tokenizer.detokenize(_text_ids(ids, self.vocabulary_size))

    def save(self, directory):
        """Writes `vocab.txt` (one token a line) and `tokenizer.json`."""
        os.makedirs(directory, exist_ok=True)
        with open(
            os.path.join(directory, "vocab.txt"), "w", encoding="utf-8", newline="\n"
        ) as f:
            f.writelines(token + "\n" for token in self.vocabulary)
        config = {
            "lower_case": self.lower_case,
            "max_bytes_per_word": self.max_bytes_per_word,
        }
        with open(
            os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8"
        ) as f:
            json.dump(config, f, indent=2)

    @classmethod
    def load(cls, directory):
        """Rebuilds a tokenizer written by `save` (`tokenizer.json` optional)."""
        vocabulary = read_lines(os.path.join(directory, "vocab.txt"))
        config_path = os.path.join(directory, "tokenizer.json")
        config = {}
        if os.path.isfile(config_path):
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
        return cls(vocabulary, **config)


class SentencePieceTokenizer(tf.Module):
    """Wraps an existing SentencePiece `.model` (no training here).

    The model must have been trained with the ids of ARCHITECTURE.md:
    `--pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3`.

    Args:
        model_path: Path of the serialized SentencePiece model.
        name: Module name.
    """

    def __init__(self, model_path, name=None):
        super().__init__(name=name)
        self.model_path = os.fspath(model_path)
        if not os.path.isfile(self.model_path):
            raise FileNotFoundError(f"model_path={self.model_path!r} does not exist.")
        with open(self.model_path, "rb") as f:
            model = f.read()
        self._tokenizer = tf_text.SentencepieceTokenizer(model=model, out_type=tf.int32)
        self._vocabulary_size = int(self._tokenizer.vocab_size())
        special = [
            int(self._tokenizer.string_to_id(piece))
            for piece in ("<pad>", "<unk>", "<s>", "</s>")
        ]
        if special != [PAD_ID, UNK_ID, START_ID, END_ID]:
            raise ValueError(
                f"model_path={self.model_path!r}: <pad>, <unk>, <s>, </s> have ids {special}; "
                "train with --pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3."
            )

    @property
    def vocabulary_size(self):
        """Number of pieces, reserved ones included."""
        return self._vocabulary_size

    @tf.function(input_signature=[_STRINGS])
    def tokenize(self, strings):
        """Strings (B,) -> piece ids, a `tf.RaggedTensor` (B, None) int32."""
        strings = tf.strings.unicode_transcode(
            strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        return self._tokenizer.tokenize(strings)

    @tf.function(input_signature=[_IDS])
    def detokenize(self, ids):
        """Ids (B, None) int32 -> strings (B,); same rules as `WordPieceTokenizer`."""
        return self._tokenizer.detokenize(_text_ids(ids, self.vocabulary_size))
