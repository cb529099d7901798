"""SavedModels with a classifier's embedding tables in int8 (`quantize="int8"`)."""

import os

import numpy as np
import pytest
from export_fixtures import LABEL_NAMES, SENTENCES, tiny_tokenizer, tiny_translator

from export.quantize import int8_tables, read_export_asset
from export.saved_model import export_model
from export.verify import reference_outputs, verify_saved_model
from keras_transformer.layers import CharNGramTokenStem
from keras_transformer.models import TransformerClassifier
from training.tasks import get_task
from training.text.tokenizers import CharNGramTokenizer

BUCKETS = 2048


def _bytes(directory):
    return sum(
        os.path.getsize(os.path.join(folder, name))
        for folder, _, names in os.walk(directory)
        for name in names
    )


@pytest.fixture(scope="module")
def ngram_classifier():
    """(model, task): a classifier whose n-gram table is most of its weights."""
    tokenizer = CharNGramTokenizer(tiny_tokenizer(), BUCKETS)
    model = TransformerClassifier(
        CharNGramTokenStem(tokenizer.vocabulary_size, hidden_dim=32, max_sequence_length=16,
                           char_ngram_buckets=BUCKETS),
        num_classes=len(LABEL_NAMES), num_layers=1, num_heads=2, intermediate_dim=32,
    )  # fmt: skip
    task = get_task("classification", tokenizer=tokenizer, label_names=list(LABEL_NAMES))
    model(tokenizer.tokenize(SENTENCES[:2]).to_tensor())
    return model, task


def test_int8_tables_are_int8_and_deterministic(ngram_classifier):
    model, task = ngram_classifier
    first, second = int8_tables(model), int8_tables(model)
    dtypes = {w.path.split("/")[-1]: str(w.dtype) for w in first.weights if "ngram" in w.path}
    assert dtypes == {"embeddings": "int8", "embeddings_scale": "float32"}
    a = reference_outputs(first, SENTENCES[:8], task.tokenizer)["probabilities"]
    b = reference_outputs(second, SENTENCES[:8], task.tokenizer)["probabilities"]
    np.testing.assert_array_equal(a, b)
    # The original model is untouched.
    assert all(str(w.dtype) == "float32" for w in model.weights)


def test_int8_saved_model_is_smaller_agrees_and_verifies(ngram_classifier, tmp_path):
    model, task = ngram_classifier
    full = export_model(model, tmp_path / "full", task.tokenizer, task.label_names)
    small = export_model(model, tmp_path / "int8", task.tokenizer, task.label_names,
                         quantize="int8")
    assert read_export_asset(full) == {"quantize": "none"}
    assert read_export_asset(small) == {"quantize": "int8"}
    # The table (2049 x 32 floats) is most of the model: int8 keeps about a quarter.
    table = (BUCKETS + 1) * 32 * 4
    assert _bytes(full) - _bytes(small) > 0.6 * table
    report = verify_saved_model(small, model, SENTENCES[:12], task.tokenizer, task.label_names,
                                use_saved_model_cli=False)
    assert report["ok"], report
    full_p = reference_outputs(model, SENTENCES, task.tokenizer)["probabilities"]
    int8_p = reference_outputs(int8_tables(model), SENTENCES, task.tokenizer)["probabilities"]
    assert np.abs(full_p - int8_p).max() < 5e-2
    assert not np.array_equal(full_p, int8_p)  # the tables really changed


def test_int8_refuses_a_transformer_and_unknown_modes(ngram_classifier, tmp_path):
    model, task = ngram_classifier
    with pytest.raises(ValueError, match="quantize must be one of"):
        export_model(model, tmp_path / "x", task.tokenizer, quantize="int4")
    translator = tiny_translator()
    with pytest.raises(ValueError, match="output projection"):
        export_model(translator, tmp_path / "y", tiny_tokenizer(), quantize="int8")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
