"""Tests for the Hugging Face vocabulary learner of training/text/tokenizers.py.

The learner must see the words that the graph tokenizer (FastBertTokenizer
over `normalize_text`) will see, so the main test is "path A equals path B":
the Hugging Face tokenizer that trained, given the learned vocabulary, cuts
every sentence into the same pieces as `WordPieceTokenizer`.
"""

import random

import pytest
import tensorflow as tf

from training.data.readers import read_lines
from training.text.tokenizers import (
    RESERVED_TOKENS,
    UNK_ID,
    WordPieceTokenizer,
    _huggingface_wordpiece,
    learn_word_vocabulary,
    learn_wordpiece_vocabulary,
    normalize_text,
)

WORDS = (
    "Der", "Hund", "läuft", "über", "die", "Straße", "Fähre", "Größe", "Ærø",
    "A", "man", "isn't", "o'clock", "rock'n'roll", "well-known", "T-Shirt",
    "New", "York", "café", "naïve", "Ünal", "EINE", "FRAU", "mIxEd", "iPhone",
    "3D", "1990er", "42", "7,5", "12:30", "€20", "100%", "C++", "x^2", "a_b",
    "e-mail", "»Hallo«", "“quoted”", "‘single’", "(Klammer)", "[eckig]",
    "¿Qué", "España", "jalapeño", "Zoë", "Ελλάδα", "ΟΔΟΣ", "Москва",
)  # fmt: skip
PUNCTUATION = (".", ",", "!", "?", ";", ":", " - ", " – ", "...", "…")
# What FastBertTokenizer does beyond whitespace: Cc and Cf become spaces
# (NUL, BEL, tab, zero-width space, soft hyphen, BOM), Unicode whitespace
# (NBSP, line separator) separates, CJK ideographs stand alone, NFC joins
# "e" + U+0301, and U+FFFD is an ordinary character.
EDGE = (
    "Null\x00Byte und\x07Glocke,\ttab\r\nnewline",
    "zero\u200bwidth soft\u00adhyphen \ufeffBOM",
    "non\u00a0breaking line\u2028separator",
    "中文字 mixed中文 und 日本語テキスト",
    "Cafe\u0301 vs Café, İstanbul, ΣΟΦΟΣ",
    "emoji😀inside 🎉 and ©®™ °C ½ ﬁne",
    "Replacement \ufffd char, and #hash ##double [UNK] [START]",
    "Full‐width，punct！ and «guillemets» · mid·dot ~tilde~ `tick` |pipe|",
)  # fmt: skip
# Characters that appear only in held-out text: their words become [UNK].
UNSEEN = ("ŋœđ unseen", "Þorn ÿes", "ᚠᚢᚦ runes", "✓ checked")


def _generated(n, seed):
    """`n` sentences of mixed case, punctuation, digits and accents."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 12))]
        words = [w.upper() if rng.random() < 0.1 else w for w in words]
        sentences.append(" ".join(words) + rng.choice(PUNCTUATION))
    return sentences


def _graph_ids(vocabulary, lower_case, sentences):
    tokenizer = WordPieceTokenizer(vocabulary, lower_case=lower_case)
    return tokenizer.tokenize(tf.constant(sentences)).to_list()


def _huggingface_ids(vocabulary, lower_case, sentences):
    texts = normalize_text(tf.constant(sentences), lower_case).numpy()
    tokenizer = _huggingface_wordpiece(vocabulary)
    return [e.ids for e in tokenizer.encode_batch([t.decode() for t in texts])]


def _assert_same_pieces(vocabulary, lower_case, sentences):
    graph = _graph_ids(vocabulary, lower_case, sentences)
    huggingface = _huggingface_ids(vocabulary, lower_case, sentences)
    for sentence, a, b in zip(sentences, graph, huggingface, strict=True):
        assert a == b, (
            sentence,
            [vocabulary[i] for i in a],
            [vocabulary[i] for i in b],
        )
    return graph


@pytest.fixture(scope="module")
def corpus():
    return _generated(600, seed=0) + list(EDGE)


@pytest.mark.parametrize("lower_case", [True, False])
def test_learned_pieces_agree_with_the_graph_tokenizer(corpus, lower_case):
    vocabulary = learn_wordpiece_vocabulary(corpus, 320, lower_case=lower_case)
    graph = _assert_same_pieces(vocabulary, lower_case, corpus)
    # Every character of the training text is in the vocabulary.
    assert not any(UNK_ID in row for row in graph)
    held_out = _generated(200, seed=1) + [s.upper() for s in EDGE] + list(UNSEEN)
    held_out += [b"bytes \xff\xfe broken", "Der Hund läuft.\u3000「引用」"]
    graph = _assert_same_pieces(vocabulary, lower_case, held_out)
    assert all(UNK_ID in row for row in graph[-len(UNSEEN) - 2 : -2])


def test_case_is_kept_or_lowered_and_accents_kept(corpus):
    cased = learn_wordpiece_vocabulary(corpus, 320, lower_case=False)
    lowered = learn_wordpiece_vocabulary(corpus, 320, lower_case=True)
    assert {"H", "Ü", "Σ", "É"} <= set(cased)
    assert not any(token != token.lower() for token in lowered[4:])
    assert {"ü", "é", "ä", "ς"} <= set(lowered) and "ß" in lowered
    # NFC: a decomposed "e" + U+0301 is learned as the one character "é".
    assert "\u0301" not in "".join(cased) + "".join(lowered)


def test_reserved_first_size_bounded_and_deterministic(corpus):
    vocabulary = learn_wordpiece_vocabulary(corpus, 320)
    assert tuple(vocabulary[:4]) == RESERVED_TOKENS
    assert len(vocabulary) == 320 and len(set(vocabulary)) == 320
    assert learn_wordpiece_vocabulary(corpus, 320) == vocabulary
    dataset = tf.data.Dataset.from_tensor_slices(corpus)
    assert learn_wordpiece_vocabulary(dataset, 320) == vocabulary
    # A small corpus runs out of pairs seen twice before the size.
    small = learn_wordpiece_vocabulary(["ein Hund", "eine Katze"], 1000)
    assert tuple(small[:4]) == RESERVED_TOKENS and len(small) < 1000
    assert "ein" in small and "hu" not in small  # "hund" is seen once.
    rarer = learn_wordpiece_vocabulary(["ein Hund", "eine Katze"], 1000, min_frequency=1)
    assert {"ein", "hund", "eine", "katze"} <= set(rarer)


def test_errors_name_the_argument_and_value():
    with pytest.raises(ValueError, match="sentences is empty"):
        learn_wordpiece_vocabulary([], 100)
    with pytest.raises(ValueError, match="sentences has no words"):
        learn_wordpiece_vocabulary(["", "  \t "], 100)
    with pytest.raises(ValueError, match="vocabulary_size=4"):
        learn_wordpiece_vocabulary(["a b"], 4)
    with pytest.raises(ValueError, match="vocabulary_size=10 .* at least 3[0-9]"):
        learn_wordpiece_vocabulary(["abcdefghijklmnopq"], 10)
    with pytest.raises(ValueError, match="min_frequency=0"):
        learn_wordpiece_vocabulary(["a b"], 100, min_frequency=0)


@pytest.mark.parametrize("lower_case", [True, False])
def test_word_vocabulary_is_the_words_seen_min_count_times(corpus, lower_case):
    """Whole words: the graph gives each kept word one id and every other
    word one [UNK] (never pieces), as the Hugging Face path does; the kept
    words are those the graph itself finds at least `min_count` times."""
    for min_count in (1, 2, 5):
        vocabulary = learn_word_vocabulary(corpus, 10_000, lower_case, min_count=min_count)
        assert tuple(vocabulary[:4]) == RESERVED_TOKENS
        assert not any(token.startswith("##") for token in vocabulary)
        graph = _assert_same_pieces(vocabulary, lower_case, corpus)
        counts = {}
        for row in graph:
            for i in row:
                counts[i] = counts.get(i, 0) + 1
        kept = [i for i in counts if i != UNK_ID]
        assert sorted(kept) == list(range(4, len(vocabulary)))  # each kept word occurs
        assert min(counts[i] for i in kept) >= min_count
        # Most frequent first.
        assert [counts[i] for i in kept] and all(
            counts[i] >= counts[i + 1] for i in range(4, len(vocabulary) - 1))
        if min_count == 1:
            assert UNK_ID not in counts  # every training word is kept
        held_out = _generated(200, seed=1) + list(UNSEEN) + ["Katzenklappe Hund"]
        ids = _assert_same_pieces(vocabulary, lower_case, held_out)
        assert ids[-1][0] == UNK_ID and len(ids[-1]) == 2  # one [UNK] per unknown word


def test_word_vocabulary_by_hand_size_and_errors():
    sentences = ["ein Hund, ein Hund!", "Eine Katze."]
    vocabulary = learn_word_vocabulary(sentences, 100)
    assert vocabulary == [*RESERVED_TOKENS, "ein", "hund"]  # ties in code-point order
    tokenizer = WordPieceTokenizer(vocabulary)
    ids = tokenizer.tokenize(tf.constant(["eine Katze, ein Hund"]))
    assert ids.to_list() == [[UNK_ID, UNK_ID, UNK_ID, 4, 5]]
    assert learn_word_vocabulary(sentences, 100, min_count=1) == [
        *RESERVED_TOKENS, "ein", "hund", "!", ",", ".", "eine", "katze"]
    assert learn_word_vocabulary(sentences, 5) == [*RESERVED_TOKENS, "ein"]  # the size caps
    dataset = tf.data.Dataset.from_tensor_slices(sentences)
    assert learn_word_vocabulary(dataset, 100) == vocabulary
    with pytest.raises(ValueError, match="min_count=0"):
        learn_word_vocabulary(sentences, 100, min_count=0)
    with pytest.raises(ValueError, match="vocabulary_size=4"):
        learn_word_vocabulary(sentences, 4)
    with pytest.raises(ValueError, match="learn_word_vocabulary: sentences is empty"):
        learn_word_vocabulary([], 100)
    with pytest.raises(ValueError, match="sentences has no words"):
        learn_word_vocabulary(["", "  \t "], 100)


@pytest.mark.data
def test_multi30k_joint_vocabulary_agrees_on_train_and_validation(shared_data):
    """The multi30k preset: one cased vocabulary of 8,000 pieces for de+en."""
    multi30k = shared_data / "multi30k"
    train = read_lines(multi30k / "train.de.gz") + read_lines(multi30k / "train.en.gz")
    valid = read_lines(multi30k / "val.de.gz") + read_lines(multi30k / "val.en.gz")
    vocabulary = learn_wordpiece_vocabulary(train, 8000, lower_case=False)
    assert tuple(vocabulary[:4]) == RESERVED_TOKENS and len(vocabulary) == 8000
    graph = _assert_same_pieces(vocabulary, False, train)
    assert not any(UNK_ID in row for row in graph)
    _assert_same_pieces(vocabulary, False, valid)
