"""Fuzz the exported string signatures with thousands of hostile inputs.

Whatever bytes a client sends (empty, 20k characters, invalid UTF-8, mixed
scripts, emoji, control characters, reserved-token look-alikes), the served
model must answer every row: one output per input, valid UTF-8 text, no
longer than the decoder's maximum length, and finite probabilities.
"""

import numpy as np
import pytest
import tensorflow as tf
from export_fixtures import (
    LABEL_NAMES,
    MAX_SEQUENCE_LENGTH,
    exported_classifier,
    exported_translator,
    hostile_strings,
)

NUM_INPUTS = 4000
BATCH = 250


@pytest.fixture(scope="module")
def hostile():
    return hostile_strings(NUM_INPUTS, seed=1234)


@pytest.fixture(scope="module")
def translator_signatures():
    return tf.saved_model.load(exported_translator()).signatures


@pytest.fixture(scope="module")
def classify():
    return tf.saved_model.load(exported_classifier()).signatures["serving_default"]


def _batches(items):
    for start in range(0, len(items), BATCH):
        yield items[start : start + BATCH]


def test_translator_answers_every_hostile_string(hostile, translator_signatures):
    translate = translator_signatures["serving_default"]
    answered = 0
    for batch in _batches(hostile):
        translations = translate(sentences=tf.constant(batch, tf.string))[
            "translations"
        ].numpy()
        assert translations.shape == (len(batch),)
        for text in translations:
            words = text.decode("utf-8").split()  # Valid UTF-8, or this raises.
            # Each word is at least one generated piece: at most L pieces.
            assert len(words) <= MAX_SEQUENCE_LENGTH
        answered += len(translations)
    assert answered == NUM_INPUTS


def test_translator_ids_signature_survives_out_of_range_ids():
    translate_ids = tf.saved_model.load(exported_translator()).signatures[
        "translate_ids"
    ]
    rng = np.random.default_rng(0)
    for width in (0, 1, 7, 3 * MAX_SEQUENCE_LENGTH):
        ids = rng.integers(-(2**31), 2**31 - 1, size=(5, width), dtype=np.int64).astype(
            np.int32
        )
        tokens = translate_ids(encoder_token_ids=ids)["token_ids"].numpy()
        assert tokens.shape[0] == 5 and tokens.shape[1] <= MAX_SEQUENCE_LENGTH
        assert tokens.min() >= 0


def test_classifier_answers_every_hostile_string(hostile, classify):
    names = {name.encode() for name in LABEL_NAMES}
    for batch in _batches(hostile):
        outputs = classify(sentences=tf.constant(batch, tf.string))
        probabilities = outputs["probabilities"].numpy()
        assert probabilities.shape == (len(batch), len(LABEL_NAMES))
        assert np.isfinite(probabilities).all()
        np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
        assert set(outputs["labels"].numpy()) <= names


def test_empty_batch_is_answered(translator_signatures, classify):
    empty = tf.constant([], tf.string)
    translations = translator_signatures["serving_default"](sentences=empty)[
        "translations"
    ]
    assert translations.shape == (0,)
    assert classify(sentences=empty)["probabilities"].shape == (0, len(LABEL_NAMES))
