"""Word-piece and SentencePiece tokenizers that live inside the TF graph.

The tokenizers are `tf.Module`s whose methods are `tf.function`s with fixed
input signatures, so the same graph code runs eagerly, inside `tf.data`
(`dataset.map`) and inside an exported SavedModel that takes and returns
strings. Ids follow docs/architecture.md: 0 `[PAD]`, 1 `[UNK]`, 2 `[START]`,
3 `[END]`; `tokenize` never adds `[START]`/`[END]` (the pipeline does).

Text is normalised before word-piece splitting, identically when learning
the vocabulary and when tokenising: invalid UTF-8 bytes become U+FFFD (then
`[UNK]`) instead of failing the whole batch, Unicode is put in NFC form, and
with `lower_case=True` it is lowercased *without* stripping accents, because
the target side must keep "fährt" and "fahrt" apart. BERT's own
`lower_case` would strip them.
"""

import collections
import json
import os

import tensorflow as tf
import tensorflow_text as tf_text
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

from training.data.atomic import atomic_write_text
from training.data.readers import read_json, read_lines

RESERVED_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")
PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
# The piece learners' default: a pair of pieces seen once is never merged.
MIN_PAIR_FREQUENCY = 2
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


def _huggingface_wordpiece(vocabulary=None):
    """A Hugging Face `tokenizers.Tokenizer` that splits like `WordPieceTokenizer`.

    It expects text already passed through `normalize_text` (done in TF, so
    invalid bytes, NFC and lowercasing are exactly the graph's) and does what
    `FastBertTokenizer` does next: control and format characters (Unicode Cc,
    Cf) become spaces, CJK ideographs stand alone, words split on Unicode
    whitespace and on BERT's punctuation (ASCII symbols and every Unicode P*
    character), and each punctuation character is a word of its own. Accents
    and case are left alone (`lower_case_nfd_strip_accents=False`).

    Args:
        vocabulary: Optional list of tokens for the WordPiece model (to
            tokenize with); `None` gives an empty model to train.
    """
    vocab = {
        token: i for i, token in enumerate(vocabulary or [RESERVED_TOKENS[UNK_ID]])
    }
    # No word limit here: the graph's limit is in bytes (max_bytes_per_word).
    tokenizer = Tokenizer(
        models.WordPiece(
            vocab, unk_token=RESERVED_TOKENS[UNK_ID], max_input_chars_per_word=2**31 - 1
        )
    )
    tokenizer.normalizer = normalizers.Sequence(
        [
            normalizers.Replace(Regex(r"[\p{Cc}\p{Cf}]"), " "),
            # clean_text would *drop* control characters and U+FFFD instead.
            normalizers.BertNormalizer(
                clean_text=False,
                handle_chinese_chars=True,
                strip_accents=False,
                lowercase=False,
            ),
        ]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


def learn_wordpiece_vocabulary(
    sentences,
    vocabulary_size,
    lower_case=True,
    reserved_tokens=RESERVED_TOKENS,
    min_frequency=MIN_PAIR_FREQUENCY,
):
    """Learns a word-piece vocabulary with Hugging Face `tokenizers`.

    The Rust WordPiece trainer (BPE merges, "##" continuations) learns from
    the same words the graph tokenizer will see: the text goes through
    `normalize_text` and is split as `FastBertTokenizer` splits it (see
    `_huggingface_wordpiece`). Every character of `sentences` is kept as a
    word start and, unless it always stands alone (punctuation, CJK), as a
    "##" continuation, so `WordPieceTokenizer` never gives `[UNK]` on the
    training text unless a word is longer than `max_bytes_per_word`. Multi30k
    de+en (58,000 sentences, 8,000 pieces) takes about 2 s (1.4 s of CPU) on
    a shared 2-core machine (`benchmarks/bench_vocabulary.py`).

    The learner knows nothing of languages: call it once per corpus, on one
    language for separate source and target vocabularies, or on both for a
    joint one (the pipeline's choice).

    Args:
        sentences: Iterable of `str` or UTF-8 `bytes` (or a `tf.data.Dataset`
            of scalar strings).
        vocabulary_size: Largest size, reserved tokens included; a small
            corpus may give fewer tokens.
        lower_case: Must equal the `lower_case` of the `WordPieceTokenizer`
            that will use the vocabulary.
        reserved_tokens: Tokens placed first, in order (ids 0, 1, ...).
        min_frequency: A pair of pieces seen fewer times is never merged into
            a new piece; the default 2 learns no piece from a single word.

    Returns:
        The vocabulary as a list of `str`, `reserved_tokens` first.

    Raises:
        ValueError: If `sentences` has no words, `vocabulary_size` does not
            exceed the reserved tokens or cannot hold the corpus's characters,
            or `min_frequency` is below 1.
    """
    reserved_tokens = list(reserved_tokens)
    if min_frequency < 1:
        raise ValueError(
            f"min_frequency must be >= 1, received min_frequency={min_frequency}."
        )
    texts = _normalized_texts(
        "learn_wordpiece_vocabulary", sentences, vocabulary_size, lower_case, reserved_tokens
    )
    tokenizer = _huggingface_wordpiece()
    # The trainer would number the characters it finds in hash order, and
    # ties between equally frequent pairs go to the lower ids: given all of
    # them first, in a fixed order, it learns the same pieces every time.
    alphabet = _alphabet(tokenizer, texts)
    if not alphabet:
        raise ValueError(
            f"sentences has no words: its {len(texts)} sentences are blank."
        )
    if len(reserved_tokens) + len(alphabet) > vocabulary_size:
        raise ValueError(
            f"vocabulary_size={vocabulary_size} cannot hold the reserved tokens and "
            f"the characters of sentences: pass at least "
            f"{len(reserved_tokens) + len(alphabet)}."
        )
    return _train_wordpieces(tokenizer, texts, alphabet, vocabulary_size, reserved_tokens,
                             min_frequency)


def _train_wordpieces(tokenizer, texts, alphabet, vocabulary_size, reserved_tokens,
                      min_frequency):
    """Trains `tokenizer` on `texts` (already normalized) and returns its vocabulary.

    `alphabet` (`_alphabet` of `texts`, which must fit in `vocabulary_size`
    with `reserved_tokens`: the callers check, each naming its own argument)
    takes the ids after the reserved tokens.
    """
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocabulary_size,
        min_frequency=min_frequency,
        special_tokens=reserved_tokens + alphabet,  # Ids 0, 1, ... in order.
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer, length=len(texts))
    ids = tokenizer.get_vocab()
    return sorted(ids, key=ids.get)


def learn_word_vocabulary(
    sentences,
    vocabulary_size,
    lower_case=True,
    reserved_tokens=RESERVED_TOKENS,
    min_count=2,
):
    """A vocabulary of whole words: those seen at least `min_count` times.

    Words are what the graph tokenizer splits (see `_huggingface_wordpiece`:
    whitespace, and each punctuation character on its own). With no "##"
    continuations in the vocabulary `WordPieceTokenizer` cannot cut an
    unknown word into pieces, so every other word becomes one `[UNK]`:
    Kim (2014)'s word vocabulary, whose `[UNK]` embedding learns from the
    training text's rare words instead of staying untrained. On a few
    thousand labelled sentences this beats word pieces, whose rare pieces
    each train on a handful of examples (TREC, one classifier: README).

    Args:
        sentences: Iterable of `str` or UTF-8 `bytes` (or a `tf.data.Dataset`
            of scalar strings).
        vocabulary_size: Largest size, reserved tokens included; the most
            frequent words are kept (ties in code-point order).
        lower_case: Must equal the `lower_case` of the `WordPieceTokenizer`
            that will use the vocabulary.
        reserved_tokens: Tokens placed first, in order (ids 0, 1, ...).
        min_count: Fewest occurrences in `sentences` of a word kept.

    Returns:
        The vocabulary as a list of `str`, `reserved_tokens` first, then the
        kept words, most frequent first.

    Raises:
        ValueError: If `sentences` has no words, `vocabulary_size` does not
            exceed the reserved tokens, or `min_count` is below 1.
    """
    reserved_tokens = list(reserved_tokens)
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise ValueError(f"min_count must be an integer >= 1, received min_count={min_count!r}.")
    texts = _normalized_texts(
        "learn_word_vocabulary", sentences, vocabulary_size, lower_case, reserved_tokens
    )
    tokenizer = _huggingface_wordpiece()
    counts = collections.Counter()
    for text in texts:
        counts.update(_words(tokenizer, text))
    if not counts:
        raise ValueError(
            f"sentences has no words: its {len(texts)} sentences are blank."
        )
    reserved = set(reserved_tokens)
    words = sorted(
        (word for word, n in counts.items() if n >= min_count and word not in reserved),
        key=lambda word: (-counts[word], word),
    )
    return reserved_tokens + words[: vocabulary_size - len(reserved_tokens)]


def _normalized_texts(caller, sentences, vocabulary_size, lower_case, reserved_tokens):
    """`sentences` through `normalize_text`, as `str`; checks the common arguments."""
    if vocabulary_size <= len(reserved_tokens):
        raise ValueError(
            f"vocabulary_size must exceed the {len(reserved_tokens)} reserved tokens, "
            f"received vocabulary_size={vocabulary_size}."
        )
    if isinstance(sentences, tf.data.Dataset):
        sentences = sentences.as_numpy_iterator()
    sentences = list(sentences)
    if not sentences:
        raise ValueError(f"{caller}: sentences is empty (received 0 sentences).")
    normalized = normalize_text(tf.constant(sentences, tf.string), lower_case)
    return [text.decode("utf-8") for text in normalized.numpy()]


def _alphabet(tokenizer, texts):
    """The characters of `texts` that are words, then as "##c" those that join one.

    Punctuation and CJK stand alone (no "##" form); separators (whitespace,
    control characters) are neither. `tokenizer` decides, as it will when
    training: a character joins a word if "a" and it stay one word.
    """
    characters = sorted(set("".join(texts)))
    starts = [char for char in characters if _words(tokenizer, char) == [char]]
    joins = [char for char in characters if _words(tokenizer, "a" + char) == ["a" + char]]
    return starts + ["##" + char for char in joins]


def _words(tokenizer, text):
    """The words of `text` as `tokenizer` (`_huggingface_wordpiece`) splits it."""
    normalized = tokenizer.normalizer.normalize_str(text)
    return [word for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalized)]


def _text_ids(ids, vocabulary_size):
    """Cuts each row at its first `[END]` and drops reserved/invalid ids."""
    dense = ids.to_tensor(PAD_ID)  # (B, T)
    before_end = tf.math.cumsum(tf.cast(dense == END_ID, tf.int32), axis=1) == 0
    keep = before_end & (dense >= len(RESERVED_TOKENS)) & (dense < vocabulary_size)
    return tf.ragged.boolean_mask(dense, keep)  # (B, None)


def _check_reserved(vocabulary):
    if tuple(vocabulary[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
        raise ValueError(
            f"The vocabulary must start with {list(RESERVED_TOKENS)} (docs/architecture.md "
            f"token ids), received {list(vocabulary[: len(RESERVED_TOKENS)])}."
        )


def _graph_methods(module, **signatures):
    """Makes each `module.<name>` a `tf.function` of the bound `module._<name>`,
    with that one input signature and without autograph (the methods have
    no Python control flow on tensors to convert).

    Bound per instance rather than decorated on the class: a class-level
    `tf.function` method reaches `self` through a weak `TfMethodTarget`,
    and called inside another traced function (a `dataset.map`) under
    TF 2.21 it once received that target as `self` (a CI run of notebook
    02: "'TfMethodTarget' object has no attribute 'lower_case'").
    """
    for name, spec in signatures.items():
        function = tf.function(getattr(module, "_" + name), input_signature=[spec],
                               autograph=False)
        setattr(module, name, function)


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
        _graph_methods(self, tokenize=_STRINGS, detokenize=_IDS)

    @property
    def vocabulary_size(self):
        """Number of tokens, reserved ones included."""
        return len(self.vocabulary)

    def _tokenize(self, strings):
        """Strings (B,) -> word-piece ids, a `tf.RaggedTensor` (B, None) int32."""
        # FastBertTokenizer already merges the word axis: (B, None) pieces.
        return self._tokenizer.tokenize(normalize_text(strings, self.lower_case))

    def tokenize_normalized_with_offsets(self, normalized):
        """Already normalised strings (B,) -> `(ids, starts, ends)`, ragged
        `(B, None)`: each piece's id and its byte span in its string."""
        return self._tokenizer.tokenize_with_offsets(normalized)

    def _detokenize(self, ids):
        """Ids (B, None) int32 -> one string per row (B,).

        Each row is cut at its first `[END]`; `[PAD]`, `[UNK]`, `[START]` and
        out-of-range ids are dropped, pieces are joined into words, words by
        single spaces. Pass a padded (B, T) matrix as
        `tf.RaggedTensor.from_tensor(ids)`.
        """
        return self._tokenizer.detokenize(_text_ids(ids, self.vocabulary_size))

    def save(self, directory, settings=None):
        """Writes `tokenizer.json`, then `vocab.txt` (one token a line).

        Each file is written whole or not at all
        (`training.data.atomic.atomic_write_text`), `vocab.txt` last: a
        run treats a `vocab/` with `vocab.txt` as saved.  `settings`: more
        entries for `tokenizer.json` (`CharNGramTokenizer`'s).
        """
        os.makedirs(directory, exist_ok=True)
        config = {
            "lower_case": self.lower_case,
            "max_bytes_per_word": self.max_bytes_per_word,
            **(settings or {}),
        }
        atomic_write_text(os.path.join(directory, "tokenizer.json"),
                          json.dumps(config, indent=2))
        atomic_write_text(os.path.join(directory, "vocab.txt"),
                          "".join(token + "\n" for token in self.vocabulary))

    @classmethod
    def load(cls, directory):
        """Rebuilds a tokenizer written by `save` (`tokenizer.json` optional).

        Raises:
            FileNotFoundError: `vocab.txt` is missing.
            ValueError: `vocab.txt` ends inside a token (`save` ends each
                with a line break: a file cut short while it was written),
                or `tokenizer.json` is not whole JSON; the message names
                the file.
        """
        path = os.path.join(directory, "vocab.txt")
        vocabulary = read_lines(path)
        if not _ends_with_line_break(path):
            raise ValueError(
                f"{path!r} ends inside token {len(vocabulary)} ({vocabulary[-1][:40]!r}, "
                "no line break after it): it was cut short while it was written."
            )
        config = _tokenizer_json(directory)
        config.pop("char_ngrams", None)  # `CharNGramTokenizer`'s (`load_tokenizer`)
        return cls(vocabulary, **config)


def _ends_with_line_break(path):
    """Whether file `path` is empty or ends with "\\n"."""
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return True
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def _tokenizer_json(directory):
    path = os.path.join(directory, "tokenizer.json")
    if not os.path.isfile(path):
        return {}
    return read_json(path)


def check_vocabulary_size(tokenizer, expected, directory):
    """Raises unless `tokenizer`, loaded from `directory`, has the `expected`
    tokens of the model that reads its ids (nothing when `expected` is None).

    A vocabulary cut short at a line break loads without complaint, and
    maps the model's ids to the wrong tokens: only the model's size tells.

    Raises:
        FileNotFoundError: No tokenizer (`directory` was missing).
        ValueError: Another number of tokens; the message names the file.
    """
    if expected is None:
        return
    path = os.path.join(os.fspath(directory), "vocab.txt")
    if tokenizer is None:
        raise FileNotFoundError(
            f"{path!r} is missing; the model reads ids of a vocabulary of {expected} tokens."
        )
    if tokenizer.vocabulary_size != expected:
        raise ValueError(
            f"{path!r} holds {tokenizer.vocabulary_size} tokens where the model was trained "
            f"on {expected}: the file was cut short or comes from another run."
        )


def load_tokenizer(directory):
    """The tokenizer a `save` wrote to `directory`: a `WordPieceTokenizer`,
    or the `CharNGramTokenizer` around one when `tokenizer.json` holds its
    `char_ngrams` settings."""
    base = WordPieceTokenizer.load(directory)
    settings = _tokenizer_json(directory).get("char_ngrams")
    return base if settings is None else CharNGramTokenizer(base, **settings)


class SentencePieceTokenizer(tf.Module):
    """Wraps an existing SentencePiece `.model` (no training here).

    The model must have been trained with the ids of docs/architecture.md:
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
        _graph_methods(self, tokenize=_STRINGS, detokenize=_IDS)

    @property
    def vocabulary_size(self):
        """Number of pieces, reserved ones included."""
        return self._vocabulary_size

    def _tokenize(self, strings):
        """Strings (B,) -> piece ids, a `tf.RaggedTensor` (B, None) int32."""
        strings = tf.strings.unicode_transcode(
            strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        return self._tokenizer.tokenize(strings)

    def _detokenize(self, ids):
        """Ids (B, None) int32 -> strings (B,); same rules as `WordPieceTokenizer`."""
        return self._tokenizer.detokenize(_text_ids(ids, self.vocabulary_size))


class CharNGramTokenizer(tf.Module):
    """A tokenizer whose every token also carries its spelling (fastText).

    `tokenize` gives, per token of the base tokenizer, its id followed by
    the hashed ids of the character n-grams of "<token>" ("<" and ">" mark
    the word's edges; widths `widths`, the shortest first, at most
    `char_ngrams_per_word` of them, 1..`char_ngram_buckets`, 0 after the
    last): a ragged `(B, None, 1 + char_ngrams_per_word)` int32, the input of
    a `TransformerClassifier` with the same `char_ngram_buckets`.  The
    token's text is the normalised sentence's span under its offsets, so
    an `[UNK]` word keeps its spelling.  Hashing is tf's FarmHash
    (`tf.strings.to_hash_bucket_fast`), the same in training, in a
    SavedModel's graph and on any machine.

    Args:
        base: a `WordPieceTokenizer` (whole words, or word pieces).
        char_ngram_buckets: hash buckets, a positive int.
        char_ngrams_per_word: n-gram ids kept per token, a positive int.
        widths: the n-gram widths.
        name: module name.
    """

    def __init__(self, base, char_ngram_buckets, char_ngrams_per_word=32, widths=(3, 4, 5),
                 name=None):
        super().__init__(name=name)
        for arg, value in (("char_ngram_buckets", char_ngram_buckets),
                           ("char_ngrams_per_word", char_ngrams_per_word)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"`{arg}` must be a positive integer; received {arg}={value!r}.")
        if not isinstance(widths, (list, tuple)) or not widths or any(
                isinstance(w, bool) or not isinstance(w, int) or w <= 0 for w in widths):
            raise ValueError(f"`widths` must be positive integers; received widths={widths!r}.")
        self.base = base
        self.char_ngram_buckets = char_ngram_buckets
        self.char_ngrams_per_word = char_ngrams_per_word
        self.widths = tuple(sorted(widths))
        self.vocabulary = base.vocabulary
        self.lower_case = base.lower_case
        _graph_methods(self, tokenize=_STRINGS)

    @property
    def vocabulary_size(self):
        """The base tokenizer's."""
        return self.base.vocabulary_size

    def _tokenize(self, strings):
        """Strings (B,) -> ragged (B, None, 1 + char_ngrams_per_word) int32."""
        normalized = normalize_text(strings, self.lower_case)
        ids, starts, ends = self.base.tokenize_normalized_with_offsets(normalized)
        rows = tf.gather(normalized, ids.value_rowids())  # each token's sentence
        tokens = tf.strings.substr(rows, starts.flat_values, ends.flat_values - starts.flat_values)
        chars = tf.strings.unicode_split(tf.strings.join(["<", tokens, ">"]), "UTF-8",
                                         errors="replace")
        grams = tf.strings.ngrams(chars, list(self.widths), separator="")  # (N, None)
        hashed = tf.strings.to_hash_bucket_fast(grams, self.char_ngram_buckets) + 1  # 0: none
        width = self.char_ngrams_per_word
        hashed = hashed[:, :width].to_tensor(0, shape=[None, width])  # (N, G)
        packed = tf.concat([ids.flat_values[:, None], tf.cast(hashed, tf.int32)], axis=1)
        return tf.RaggedTensor.from_row_splits(packed, ids.row_splits)

    def detokenize(self, ids):
        """The base tokenizer's, of the token ids (`ids[..., 0]` of a packed input)."""
        return self.base.detokenize(ids)

    def save(self, directory):
        """The base's files, with these settings in `tokenizer.json` (`load_tokenizer`)."""
        self.base.save(directory, settings={"char_ngrams": {
            "char_ngram_buckets": self.char_ngram_buckets,
            "char_ngrams_per_word": self.char_ngrams_per_word,
            "widths": list(self.widths),
        }})

def word_ids(ids):
    """The token ids of a numpy `(N, S)` array, or the token column (a view)
    of `CharNGramTokenizer`'s packed `(N, S, 1 + G)` ids."""
    return ids if ids.ndim == 2 else ids[..., 0]
