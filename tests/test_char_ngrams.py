"""Words that carry their spelling: `CharNGramTokenizer` and a `TextCNNClassifier`
with `char_ngram_buckets` (hashed character n-grams, fastText), trained, exported and served."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from export.tflite_verify import verify_tflite
from keras_transformer.layers import PatchStem
from keras_transformer.models import ClassifierEnsemble, TextCNNClassifier
from training.config import TrainingConfig, load_config
from training.runs.run_dir import load_run
from training.serving.inputs import token_ids
from training.serving.signatures import fill_empty_rows_numpy, replace_invalid_ids
from training.tasks import get_task
from training.text.tokenizers import (
    RESERVED_TOKENS,
    UNK_ID,
    CharNGramTokenizer,
    WordPieceTokenizer,
    load_tokenizer,
)
from training.train import train

WORDS = ["what", "is", "the", "?", "denver", "city"]
BUCKETS, PER_WORD = 1000, 12


@pytest.fixture(scope="module")
def tokenizer():
    return CharNGramTokenizer(WordPieceTokenizer([*RESERVED_TOKENS, *WORDS]), BUCKETS, PER_WORD)


def _reference_ngrams(word):
    """The ids of "<word>"'s 3-, 4- and 5-grams, enumerated here by hand."""
    marked = f"<{word}>"
    grams = [marked[i:i + n] for n in (3, 4, 5) for i in range(len(marked) - n + 1)]
    hashed = tf.strings.to_hash_bucket_fast(tf.constant(grams or [""]), BUCKETS).numpy() + 1
    row = np.zeros(PER_WORD, np.int64)
    kept = hashed[:PER_WORD] if grams else []
    row[:len(kept)] = kept
    return row


def test_each_token_carries_its_base_id_then_its_hashed_ngrams(tokenizer):
    sentences = ["What is Epilepsy ?", "the city of Denver"]
    packed = tokenizer.tokenize(tf.constant(sentences))
    base = tokenizer.base.tokenize(tf.constant(sentences))
    assert packed.shape.as_list() == [2, None, 1 + PER_WORD] and packed.dtype == tf.int32
    for packed_row, base_row, sentence in zip(packed.to_list(), base.to_list(), sentences,
                                              strict=True):
        packed_row = np.asarray(packed_row)
        np.testing.assert_array_equal(packed_row[:, 0], base_row)
        for grams, word in zip(packed_row[:, 1:], sentence.lower().split(), strict=True):
            np.testing.assert_array_equal(grams, _reference_ngrams(word), err_msg=word)


def test_unknown_words_differ_by_spelling_and_share_ngrams_with_look_alikes(tokenizer):
    (epilepsy, autism, denvers, denver), = tokenizer.tokenize(
        tf.constant(["epilepsy autism denvers denver"])).to_list()
    assert epilepsy[0] == autism[0] == denvers[0] == UNK_ID and denver[0] != UNK_ID
    assert epilepsy[1:] != autism[1:]
    shared = set(denvers[1:]) & set(denver[1:]) - {0}
    assert len(shared) >= 6  # <de den env nve ver <den ...: all but the word's end


def test_empty_and_hostile_strings_give_well_formed_rows(tokenizer):
    strings = tf.constant(["", "   ", b"\xff\xfe bad", "\U0001F600 emoji", "x" * 300])
    rows = tokenizer.tokenize(strings).to_list()
    assert rows[0] == [] and rows[1] == []
    for row in rows[2:]:
        row = np.asarray(row)
        assert row.ndim == 2 and row.shape[1] == 1 + PER_WORD and len(row) >= 1
        assert ((row[:, 1:] >= 0) & (row[:, 1:] <= BUCKETS)).all()


def test_save_and_load_give_back_the_same_tokenizer(tokenizer, tmp_path):
    tokenizer.save(tmp_path / "chars")
    loaded = load_tokenizer(tmp_path / "chars")
    assert isinstance(loaded, CharNGramTokenizer)
    assert (loaded.char_ngram_buckets, loaded.char_ngrams_per_word, loaded.widths) == (
        BUCKETS, PER_WORD, (3, 4, 5))
    strings = tf.constant(["what is the city of autism ?"])
    assert loaded.tokenize(strings).to_list() == tokenizer.tokenize(strings).to_list()
    tokenizer.base.save(tmp_path / "words")  # a plain word tokenizer loads as one
    assert isinstance(load_tokenizer(tmp_path / "words"), WordPieceTokenizer)
    assert "char_ngrams" not in json.loads((tmp_path / "words" / "tokenizer.json").read_text())


@pytest.mark.parametrize("kwargs, message", [
    ({"char_ngram_buckets": 0}, "char_ngram_buckets=0"),
    ({"char_ngrams_per_word": -1}, "char_ngrams_per_word=-1"),
    ({"widths": ()}, r"widths=\(\)"),
])
def test_bad_tokenizer_arguments_are_named(tokenizer, kwargs, message):
    arguments = {"char_ngram_buckets": BUCKETS, **kwargs}
    with pytest.raises(ValueError, match=message):
        CharNGramTokenizer(tokenizer.base, **arguments)


def _classifier(buckets=BUCKETS, per_word=PER_WORD, **kwargs):
    options = dict(num_classes=3, vocabulary_size=len(RESERVED_TOKENS) + len(WORDS),
                   hidden_dim=8, ngram_widths=(), dropout=0.0,
                   pooling="mean", char_ngram_buckets=buckets, char_ngrams_per_word=per_word)
    return TextCNNClassifier(**{**options, **kwargs})


def test_each_token_gets_the_mean_of_its_present_ngram_vectors(tokenizer):
    """Parity with numpy: pooled = mean over real tokens of (token embedding
    and position) + sqrt(d) * mean of the token's non-zero n-gram vectors."""
    keras.utils.set_random_seed(1)
    model = _classifier()
    packed = token_ids(tokenizer, ["what is denver ?", "autism"], 8)
    words, grams = packed[..., 0], packed[..., 1:]
    table = np.asarray(model.char_ngram_embedding.embeddings)
    present = (grams > 0)[..., None]
    spelling = (table[grams] * present).sum(2) / np.maximum(present.sum(2), 1)
    tokens = np.asarray(model.embedding(words)) + np.sqrt(8) * spelling
    real = (words > 0)[..., None]
    expected = (tokens * real).sum(1) / real.sum(1)
    np.testing.assert_allclose(np.asarray(model._pooled_features(packed)), expected,
                               rtol=1e-5, atol=1e-5)
    # The spelling reaches the output: other n-grams, another answer.
    moved = packed.copy()
    moved[..., 1:] = np.where(grams > 0, grams % BUCKETS + 1, 0)
    assert not np.allclose(np.asarray(model(packed)), np.asarray(model(moved)))


@pytest.mark.parametrize("kwargs, message", [
    ({"char_ngram_buckets": -1}, "char_ngram_buckets=-1"),
    ({"char_ngram_buckets": 2.5}, "char_ngram_buckets=2.5"),
    ({"char_ngram_buckets": True}, "char_ngram_buckets=True"),
    ({"char_ngrams_per_word": 0}, "char_ngrams_per_word=0"),
])
def test_bad_model_arguments_are_named(kwargs, message):
    buckets = kwargs.pop("char_ngram_buckets", BUCKETS)
    with pytest.raises(ValueError, match=message):
        _classifier(buckets=buckets, **kwargs)
    # Character n-grams belong to the token stem: a series stem refuses them.
    with pytest.raises(ValueError, match=r"PatchStem: \{'char_ngram_buckets': 1000\}"):
        PatchStem(1, hidden_dim=8, char_ngram_buckets=BUCKETS)


def test_an_ensemble_s_members_must_read_the_same_packed_ids():
    with pytest.raises(ValueError, match="must share `char_ngram_buckets`"):
        ClassifierEnsemble([_classifier(name="a"), _classifier(buckets=500, name="b")])
    ensemble = ClassifierEnsemble([_classifier(name="c"), _classifier(name="d")])
    assert (ensemble.char_ngram_buckets, ensemble.char_ngrams_per_word) == (BUCKETS, PER_WORD)


def test_serving_fills_empty_rows_and_replaces_out_of_range_ids():
    packed = np.zeros((2, 3, 1 + 2), np.int32)
    packed[0, 0] = [5, 7, 0]
    filled = fill_empty_rows_numpy(packed)
    np.testing.assert_array_equal(filled[1, 0], [UNK_ID, 0, 0])  # the empty row
    np.testing.assert_array_equal(filled[0], packed[0])
    assert packed[1, 0, 0] == 0  # a copy
    bad = np.array([[[99, 4, 11], [-1, -3, 10]]], np.int32)
    fixed = replace_invalid_ids(tf.constant(bad), vocabulary_size=10, char_ngram_buckets=10)
    np.testing.assert_array_equal(fixed.numpy(), [[[UNK_ID, 4, 0], [UNK_ID, 0, 10]]])


def _write_questions(path, count=90):
    """Three classes told apart by the spelling of made-up words (-itis,
    -ville, -ium) that are mostly seen once: [UNK] ids, distinct n-grams."""
    rng = np.random.default_rng(0)
    endings = ["itis", "ville", "ium"]
    lines = []
    for j in range(count):
        stem = "".join(rng.choice(list("bcdfgklmnprst"), 3)) + rng.choice(list("aeiou"))
        lines.append(f"{j % 3}\twhat is {stem}{endings[j % 3]} ?\n")
    path.write_text("".join(lines))
    return str(path)


@pytest.mark.slow
def test_a_run_with_char_ngrams_learns_from_spelling_reloads_exports_and_serves_the_same(tmp_path):
    """Through the pipeline: the run saves its tokenizer with the n-gram
    settings, a reload gives the same answers, and the SavedModel (strings
    in) and the TFLite file (packed ids in) agree with the Keras model."""
    train_file = _write_questions(tmp_path / "train.tsv")
    config = load_config("tiny", [
        "task=classification", "dataset=files", f'train_files=["{train_file}"]',
        "batch_size=8", "max_sequence_length=8", "epochs=6", "ngram_widths=[2]", "pooling=max",
        "min_word_count=2", "char_ngram_buckets=256", "ensemble_size=2", "cross_fit=true",
        "deterministic=true", "selection=last", "learning_rate=0.01"])
    metrics = train(config, tmp_path / "run", verbose=0)
    # The made-up words are [UNK]: their spelling alone tells the classes apart.
    assert metrics["valid_accuracy"] > 0.6
    run = load_run(tmp_path / "run")
    assert isinstance(run.tokenizer, CharNGramTokenizer)
    assert run.tokenizer.char_ngram_buckets == 256 == run.model.char_ngram_buckets
    probes = ["what is zorbitis ?", "what is lanville ?", "", "hello"]
    task = get_task("classification", tokenizer=run.tokenizer, label_names=run.label_names)
    expected = task.serving().outputs(run.model, probes)
    saved = run.task_model.export(tmp_path / "sm", config=run.config)
    served = tf.saved_model.load(saved).signatures["serving_default"](
        sentences=tf.constant(probes))
    np.testing.assert_allclose(served["probabilities"].numpy(), expected["probabilities"],
                               atol=1e-5)
    assert list(served["labels"].numpy()) == list(expected["labels"])
    assert isinstance(load_tokenizer(tmp_path / "sm" / "assets"), CharNGramTokenizer)
    tflite = run.task_model.export_tflite(tmp_path / "m.tflite")
    report = verify_tflite(tflite, run.model, probes, tokenizer=run.tokenizer)
    assert report["ok"] and report["label_agreement"] == 1.0


@pytest.mark.parametrize("value", [-1, 2.5, True])
def test_a_bad_char_ngram_buckets_setting_is_named_before_any_work(value):
    config = TrainingConfig(task="classification", dataset="sst2", char_ngram_buckets=value)
    with pytest.raises(ValueError, match=f"char_ngram_buckets={value!r}"):
        config.validate()
