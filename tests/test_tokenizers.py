"""Tests for training/text/tokenizers.py: vocabulary, round trips, SavedModel, hostile input."""

import numpy as np
import pytest
import tensorflow as tf

from training.data.readers import read_lines
from training.data.toy import generate_pairs
from training.text.tokenizers import (
    END_ID,
    PAD_ID,
    RESERVED_TOKENS,
    START_ID,
    UNK_ID,
    SentencePieceTokenizer,
    WordPieceTokenizer,
    learn_wordpiece_vocabulary,
)

HOSTILE = [
    "",
    b"\xff\xfe\x85 broken bytes",
    "😀🎉",
    "中文 und ελληνικά mixed",
    "x" * 500,
    "[START] [END] [PAD]",
    "   \t\n  ",
]


@pytest.fixture(scope="module")
def corpus():
    german = [de for _, de in generate_pairs(400, seed=0)]
    return german + ["Ein Hund läuft schnell, sehr schnell!", "Größe und Fähre."]


@pytest.fixture(scope="module")
def tokenizer(corpus):
    vocabulary = learn_wordpiece_vocabulary(corpus, 300)
    return WordPieceTokenizer(vocabulary)


def _decode(strings):
    return [s.decode("utf-8") for s in strings.numpy()]


def test_reserved_tokens_come_first_with_architecture_ids(tokenizer):
    assert (
        tokenizer.vocabulary[:4]
        == RESERVED_TOKENS
        == ("[PAD]", "[UNK]", "[START]", "[END]")
    )
    assert (PAD_ID, UNK_ID, START_ID, END_ID) == (0, 1, 2, 3)
    assert 4 < tokenizer.vocabulary_size <= 300
    assert len(set(tokenizer.vocabulary)) == tokenizer.vocabulary_size


def test_constants_match_keras_transformer():
    config = pytest.importorskip("keras_transformer.models.transformer_config")
    assert tuple(config.RESERVED_TOKENS) == RESERVED_TOKENS
    assert (config.PAD_ID, config.UNK_ID, config.START_ID, config.END_ID) == (
        0,
        1,
        2,
        3,
    )


def test_round_trip_gives_back_lowercased_text_with_accents(tokenizer):
    sentences = ["Ich Habe DREI hundert Äpfel", "er hat gestern zwölf bücher gekauft"]
    ids = tokenizer.tokenize(tf.constant(sentences))
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    flat = ids.flat_values.numpy()
    assert not np.isin(
        flat, [PAD_ID, UNK_ID, START_ID, END_ID]
    ).any()  # No START/END added.
    assert _decode(tokenizer.detokenize(ids)) == [s.lower() for s in sentences]


def test_detokenize_cuts_at_end_and_drops_reserved_and_invalid_ids(tokenizer):
    ids = tokenizer.tokenize(tf.constant(["drei und zwanzig"]))[0].numpy().tolist()
    rows = [
        [START_ID, *ids, END_ID, *ids, PAD_ID],
        [UNK_ID, *ids, PAD_ID, PAD_ID],
        [START_ID, 10_000_000, -5, *ids],
        [END_ID, *ids],
        [],
    ]
    texts = _decode(tokenizer.detokenize(tf.ragged.constant(rows, dtype=tf.int32)))
    assert texts == ["drei und zwanzig"] * 3 + ["", ""]


def test_hostile_input_never_crashes(tokenizer):
    ids = tokenizer.tokenize(
        tf.constant([s.encode() if isinstance(s, str) else s for s in HOSTILE])
    )
    rows = ids.to_list()
    assert len(rows) == len(HOSTILE)
    assert rows[0] == [] and rows[-1] == []
    assert UNK_ID in rows[1] and rows[2] and set(rows[2]) == {UNK_ID}
    assert rows[4] == [UNK_ID]  # Longer than max_bytes_per_word.
    assert START_ID not in rows[5] and END_ID not in rows[5] and PAD_ID not in rows[5]
    assert all(0 <= i < tokenizer.vocabulary_size for row in rows for i in row)
    assert "und" in _decode(tokenizer.detokenize(ids))[3].split()


def test_save_and_load_round_trip(tokenizer, tmp_path):
    tokenizer.save(tmp_path / "tok")
    assert read_lines(tmp_path / "tok" / "vocab.txt") == list(tokenizer.vocabulary)
    reloaded = WordPieceTokenizer.load(tmp_path / "tok")
    assert reloaded.vocabulary == tokenizer.vocabulary and reloaded.lower_case
    text = tf.constant(["Ein Hund läuft schnell", "😀"])
    assert reloaded.tokenize(text).to_list() == tokenizer.tokenize(text).to_list()
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        WordPieceTokenizer.load(tmp_path / "missing")


def test_a_vocabulary_cut_short_is_refused_naming_the_file(tokenizer, tmp_path):
    from training.text.tokenizers import check_vocabulary_size, load_tokenizer

    tokenizer.save(tmp_path / "tok")
    vocab = tmp_path / "tok" / "vocab.txt"
    data = vocab.read_bytes()
    cut_at = data.rindex(b"\n", 0, len(data) // 2) + 2  # one character into a token
    vocab.write_bytes(data[:cut_at])
    with pytest.raises(ValueError, match=r"vocab.txt' ends inside token \d+ .*cut short"):
        load_tokenizer(tmp_path / "tok")
    vocab.write_bytes(data[: cut_at - 1])  # at a line break: only the model's size tells
    shorter = load_tokenizer(tmp_path / "tok")
    check_vocabulary_size(shorter, shorter.vocabulary_size, tmp_path / "tok")
    with pytest.raises(ValueError, match=rf"vocab.txt' holds {shorter.vocabulary_size} tokens "
                                         rf"where the model was trained on {len(data.split())}"):
        check_vocabulary_size(shorter, len(data.split()), tmp_path / "tok")
    with pytest.raises(FileNotFoundError, match=r"vocab.txt' is missing"):
        check_vocabulary_size(None, 300, tmp_path / "gone")
    vocab.write_bytes(data)
    settings = tmp_path / "tok" / "tokenizer.json"
    settings.write_text(settings.read_text()[:10])
    with pytest.raises(ValueError, match=r"tokenizer.json' is not whole JSON"):
        load_tokenizer(tmp_path / "tok")


def test_vocabulary_must_start_with_reserved_tokens():
    with pytest.raises(ValueError, match=r"must start with .*\[PAD\]"):
        WordPieceTokenizer(["[UNK]", "[PAD]", "[START]", "[END]", "a"])


def test_learn_rejects_empty_corpus_and_tiny_vocabulary():
    with pytest.raises(ValueError, match="sentences is empty"):
        learn_wordpiece_vocabulary([], 100)
    with pytest.raises(ValueError, match="vocabulary_size=4"):
        learn_wordpiece_vocabulary(["a b"], 4)


def test_saved_model_round_trip_and_tf_data(tokenizer, tmp_path):
    module = tf.Module()
    module.tokenizer = tokenizer
    tf.saved_model.save(module, str(tmp_path / "saved"))
    reloaded = tf.saved_model.load(str(tmp_path / "saved"))
    text = tf.constant(
        [
            "Ich habe neun und neunzig Äpfel.",
            *[s for s in HOSTILE if isinstance(s, str)],
        ]
    )
    expected = tokenizer.tokenize(text)
    assert reloaded.tokenizer.tokenize(text).to_list() == expected.to_list()
    assert _decode(reloaded.tokenizer.detokenize(expected)) == _decode(
        tokenizer.detokenize(expected)
    )
    dataset = tf.data.Dataset.from_tensor_slices(text).batch(3).map(tokenizer.tokenize)
    assert [row for batch in dataset for row in batch.to_list()] == expected.to_list()


def test_sentencepiece_wrapper(corpus, tmp_path):
    spm = pytest.importorskip("sentencepiece")
    prefix = str(tmp_path / "spm")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_prefix=prefix,
        vocab_size=80,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        minloglevel=2,
    )
    tokenizer = SentencePieceTokenizer(prefix + ".model")
    text = tf.constant(["ich habe drei und zwanzig äpfel", b"\xff", "😀"])
    ids = tokenizer.tokenize(text)
    assert ids.dtype == tf.int32 and ids.shape[0] == 3
    texts = _decode(tokenizer.detokenize(ids))
    assert texts[0] == "ich habe drei und zwanzig äpfel"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_prefix=prefix + "_default",
        vocab_size=80,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="--pad_id=0"):
        SentencePieceTokenizer(prefix + "_default.model")


@pytest.mark.data
def test_real_german_round_trip(shared_data):
    sentences = read_lines(shared_data / "multi30k" / "val.de.gz")[:300]
    vocabulary = learn_wordpiece_vocabulary(sentences, 2000)
    tokenizer = WordPieceTokenizer(vocabulary)
    ids = tokenizer.tokenize(tf.constant(sentences))
    assert UNK_ID not in ids.flat_values.numpy()
    for original, text in zip(
        sentences, _decode(tokenizer.detokenize(ids)), strict=True
    ):
        # Punctuation comes back space-separated and other whitespace (a
        # no-break space in "120\xa0cm") as a space: compare without any.
        assert "".join(text.split()) == "".join(original.lower().split())
