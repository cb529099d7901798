"""Tiny trained models shared by the export tests, built once per session.

A word-piece vocabulary (at most 100 pieces; 100 here) is learned from 50 generated
sentences; a 1-layer, d_model=16 Transformer is trained for a few hundred
steps to copy them (so its greedy output is real text, not noise), and a
classifier of the same size for a few steps to tell three sentence kinds
apart. The builders are cached: each model is trained and exported once
however many test modules use it, and under pytest-xdist once for all the
workers (`background.built_once`: the others load the `.keras` file and read
the export), and the module-scoped fixtures hand them out.
"""

import functools

import background
import keras
import numpy as np
import tensorflow as tf

from export.saved_model import export_model
from keras_transformer.layers import TokenStem
from keras_transformer.models import (
    END_ID,
    START_ID,
    Transformer,
    TransformerClassifier,
)
from training.text.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary

MAX_SEQUENCE_LENGTH = 24
LABEL_NAMES = ("animals", "food", "weather")
_WORDS = {
    "animals": "cat dog bird horse fish runs sleeps jumps",
    "food": "bread apple cheese soup eats cooks bakes",
    "weather": "rain snow sun wind falls shines blows",
}
_SHARED = "the a big small red green today".split()


def _sentences(count=50, seed=0):
    """(sentences, labels): 3..7 words from one topic plus shared words."""
    rng = np.random.default_rng(seed)
    sentences, labels = [], []
    for i in range(count):
        label = i % len(LABEL_NAMES)
        words = _WORDS[LABEL_NAMES[label]].split() + _SHARED
        sentences.append(" ".join(rng.choice(words, size=rng.integers(3, 8))))
        labels.append(label)
    return sentences, np.asarray(labels, np.int32)


SENTENCES, LABELS = _sentences()


@functools.cache
def tiny_tokenizer():
    vocabulary = learn_wordpiece_vocabulary(SENTENCES, 100)
    return WordPieceTokenizer(vocabulary)


def _token_rows(tokenizer):
    return tokenizer.tokenize(tf.constant(SENTENCES)).to_list()


@functools.cache
def tiny_translator():
    """A copy-task Transformer (1 layer, d_model 16), trained with Adam."""
    return background.built_once("tiny_translator.keras",
                                 lambda path: _train_translator().save(path),
                                 keras.models.load_model)


def _train_translator(steps=300):
    tokenizer = tiny_tokenizer()
    keras.utils.set_random_seed(0)
    model = Transformer(
        vocabulary_size=tokenizer.vocabulary_size, num_layers=1, hidden_dim=16,
        num_heads=2, intermediate_dim=32, max_sequence_length=MAX_SEQUENCE_LENGTH,
        dropout=0.0,
    )  # fmt: skip
    rows = _token_rows(tokenizer)
    width = max(len(r) for r in rows) + 1
    source = np.zeros((len(rows), width), np.int32)
    decoder = np.zeros_like(source)
    labels = np.zeros_like(source)
    for i, row in enumerate(rows):
        source[i, : len(row)] = row
        decoder[i, : len(row) + 1] = [START_ID, *row]
        labels[i, : len(row) + 1] = [*row, END_ID]
    dataset = tf.data.Dataset.from_tensor_slices(
        ({"encoder_token_ids": source, "decoder_token_ids": decoder}, labels)
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=0
        ),
    )
    model.fit(
        dataset.batch(25).repeat(),
        steps_per_epoch=steps,
        epochs=1,
        shuffle=False,
        verbose=0,
    )
    return model


@functools.cache
def tiny_classifier():
    """A 3-class token classifier (1 layer, d_model 16), trained briefly."""
    return background.built_once("tiny_classifier.keras",
                                 lambda path: _train_classifier().save(path),
                                 keras.models.load_model)


def _train_classifier(steps=30):
    tokenizer = tiny_tokenizer()
    keras.utils.set_random_seed(0)
    model = TransformerClassifier(
        TokenStem(tokenizer.vocabulary_size, hidden_dim=16,
                  max_sequence_length=MAX_SEQUENCE_LENGTH),
        num_classes=len(LABEL_NAMES), num_layers=1, num_heads=2, intermediate_dim=32,
        dropout=0.0,
    )  # fmt: skip
    ids = (
        tf.ragged.constant(_token_rows(tokenizer), dtype=tf.int32).to_tensor(0).numpy()
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    dataset = tf.data.Dataset.from_tensor_slices((ids, LABELS)).batch(25).repeat()
    model.fit(dataset, steps_per_epoch=steps, epochs=1, shuffle=False, verbose=0)
    return model


@functools.cache
def exported_translator():
    """Path of a SavedModel of `tiny_translator()` (one export per run)."""
    config = {"task": "translation", "model": tiny_translator().get_config()}
    return background.built_once(
        "translator", lambda path: export_model(tiny_translator(), path, tiny_tokenizer(),
                                                config=config), str)


@functools.cache
def exported_classifier():
    """Path of a SavedModel of `tiny_classifier()` (one export per run)."""
    config = {"task": "classification", "model": tiny_classifier().get_config()}
    return background.built_once(
        "classifier", lambda path: export_model(tiny_classifier(), path, tiny_tokenizer(),
                                                list(LABEL_NAMES), config=config), str)


def hostile_strings(count, seed=0):
    """`count` seeded hostile inputs, as bytes: empty, huge, broken, mixed.

    Kinds: empty and whitespace-only strings, 1-20k character strings of
    vocabulary words, random bytes (mostly invalid UTF-8), mixed scripts,
    emoji (with ZWJ sequences and skin tones), control characters and NULs,
    and reserved-token look-alikes.
    """
    rng = np.random.default_rng(seed)
    words = " ".join(SENTENCES).split()
    scripts = [
        "中文字符",
        "ελληνικά",
        "русский",
        "العربية",
        "עברית",
        "हिन्दी",
        "日本語カタカナ",
        "한국어",
    ]
    emoji = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "\u200d", "\ufe0f", "🇩🇪"]
    controls = [chr(c) for c in [*range(0, 32), 127, 0x85, 0x2028, 0x2029, 0xFEFF]]

    def pick(pool, low, high):
        return "".join(rng.choice(pool, size=rng.integers(low, high)))

    kinds = [
        lambda: b"",
        lambda: pick([" ", "\t", "\n", "\r", "\u3000"], 1, 50).encode(),
        lambda: " ".join(rng.choice(words, size=rng.integers(200, 3000))).encode(),
        lambda: rng.integers(
            0, 256, size=rng.integers(1, 300), dtype=np.uint8
        ).tobytes(),
        lambda: " ".join(
            rng.choice(scripts + words, size=rng.integers(1, 30))
        ).encode(),
        lambda: (pick(emoji, 1, 40) + " " + str(rng.choice(words))).encode(),
        lambda: pick(controls + words, 1, 60).encode(),
        lambda: " ".join(
            rng.choice(["[START]", "[END]", "[PAD]", "[UNK]", "##"], size=5)
        ).encode(),
        lambda: b"\xed\xa0\x80 lone surrogate \xc0\xaf overlong \xf8\x88\x80\x80\x80",
    ]
    return [kinds[i % len(kinds)]() for i in range(count)]
