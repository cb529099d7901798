"""TFLite export: a fixed-length greedy loop of builtins, checked against Keras.

PEERS.md pain point 1: generation loops that do not convert, or convert and
then fill the output with junk. The `.tflite` runs in the LiteRT interpreter
(`ai_edge_litert`) and its float32 tokens must equal `greedy_search`'s.
"""

import os
import types

import pytest
from ai_edge_litert.interpreter import Interpreter
from export_fixtures import (
    MAX_SEQUENCE_LENGTH,
    SENTENCES,
    tiny_classifier,
    tiny_tokenizer,
    tiny_translator,
)

import training.data.atomic
from cli import export_commands, export_handlers
from export.tflite import export_model_tflite
from export.tflite_verify import verify_tflite
from training.serving.inputs import PROBES
from training.serving.tflite_programs import translator_output_length
from training.task_models import TextClassifier

EXAMPLES = SENTENCES[:10] + ["the cat eats bread", "rain falls on a big dog", *PROBES]
SOURCE_LENGTH = 12  # Static S of the translator: L = min(12 + 50, 24) = 24.


@pytest.fixture(scope="module")
def translator():
    return tiny_translator()


@pytest.fixture(scope="module")
def classifier():
    return tiny_classifier()


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _report(report):
    """Prints the numbers the export README quotes (visible with `pytest -s`)."""
    print({k: v for k, v in report.items() if k != "ok"})
    return report


def test_float32_translator_tokens_equal_keras(translator, tokenizer, tmp_path):
    path = export_model_tflite(
        translator, tmp_path / "translator.tflite", sequence_length=SOURCE_LENGTH)
    runner = Interpreter(model_path=path).get_signature_runner("serving_default")
    (spec,) = runner.get_input_details().values()
    assert list(spec["shape_signature"]) == [1, SOURCE_LENGTH]  # Static: no -1.
    (output,) = runner.get_output_details().values()
    assert list(output["shape_signature"]) == [
        1,
        translator_output_length(translator, SOURCE_LENGTH),
    ]

    report = _report(verify_tflite(path, translator, EXAMPLES, tokenizer=tokenizer))
    assert report["quantization"] == "none"
    assert report["token_agreement"] == 1.0 and report["sequence_agreement"] == 1.0
    assert report["ok"]


@pytest.mark.slow
@pytest.mark.parametrize("quantize", ["float16", "int8"])
def test_quantized_translator_agreement(translator, tokenizer, tmp_path, quantize):
    path = export_model_tflite(
        translator, tmp_path / f"{quantize}.tflite", quantize=quantize,
        sequence_length=SOURCE_LENGTH,
    )  # fmt: skip
    report = _report(verify_tflite(path, translator, EXAMPLES, tokenizer=tokenizer))
    assert report["quantization"] == quantize
    assert report["ok"], report


@pytest.mark.parametrize("quantize", ["none", "float16", "int8"])
def test_classifier_probabilities_within_tolerance(
    classifier, tokenizer, tmp_path, quantize
):
    path = export_model_tflite(classifier, tmp_path / "c.tflite", quantize=quantize)
    runner = Interpreter(model_path=path).get_signature_runner("serving_default")
    (spec,) = runner.get_input_details().values()
    assert list(spec["shape_signature"]) == [1, MAX_SEQUENCE_LENGTH]
    report = _report(verify_tflite(path, classifier, EXAMPLES, tokenizer=tokenizer))
    assert report["quantization"] == quantize
    assert report["ok"], report
    if quantize == "none":
        assert report["max_abs_diff"] <= 1e-5 and report["label_agreement"] == 1.0


def test_existing_file_is_kept_without_overwrite(classifier, tmp_path):
    path = tmp_path / "c.tflite"
    path.write_bytes(b"previous")
    with pytest.raises(FileExistsError, match=str(path)):
        export_model_tflite(classifier, path)
    with pytest.raises(ValueError, match="quantize"):
        export_model_tflite(classifier, tmp_path / "d.tflite", quantize="int4")
    assert path.read_bytes() == b"previous" and os.listdir(tmp_path) == ["c.tflite"]


def test_failed_write_leaves_no_temporary(tmp_path, monkeypatch):
    def fail(descriptor):
        raise OSError("device lost")

    monkeypatch.setattr(training.data.atomic.os, "fsync", fail)
    with pytest.raises(OSError, match="device lost"):
        training.data.atomic.atomic_write_bytes(tmp_path / "m.tflite", b"flatbuffer")
    assert os.listdir(tmp_path) == []


def test_cli_tflite_uses_the_run_dir(classifier, tokenizer, tmp_path, monkeypatch):
    run = types.SimpleNamespace(task_model=TextClassifier(classifier, tokenizer))
    monkeypatch.setattr(export_handlers, "load_run", lambda run_dir: run)
    output = str(tmp_path / "c.tflite")
    argv = [
        "tflite",
        "--run-dir",
        str(tmp_path),
        "--output",
        output,
        "--quantize",
        "float16",
    ]
    assert export_commands.main(argv) == 0
    assert verify_tflite(output, classifier, EXAMPLES, tokenizer=tokenizer)["ok"]


def test_tensorflows_keras_converter_takes_a_classifier_not_a_dict_input_model(
    classifier, translator
):
    """What the guide says of `tf.lite.TFLiteConverter.from_keras_model`: a
    classifier converts and answers as Keras; a model whose inputs are a
    dict, ours or a plain functional one, fails inside TensorFlow 2.21."""
    import keras
    import numpy as np
    import tensorflow as tf

    ids = np.array([[5, 6, 7, 0, 0, 0, 0, 0]], "int32")[:, :MAX_SEQUENCE_LENGTH]
    interpreter = Interpreter(
        model_content=tf.lite.TFLiteConverter.from_keras_model(classifier).convert())
    runner = interpreter.get_signature_runner()
    (name,) = runner.get_input_details()
    (got,) = runner(**{name: ids}).values()
    np.testing.assert_allclose(got, classifier(ids), atol=1e-5)
    inputs = {n: keras.Input((None,), dtype="int32", name=n)
              for n in ("encoder_token_ids", "decoder_token_ids")}
    plain = keras.Model(inputs, keras.layers.Embedding(10, 4)(inputs["decoder_token_ids"]))
    for model in (translator, plain):
        with pytest.raises(TypeError, match="'NoneType' object is not callable"):
            tf.lite.TFLiteConverter.from_keras_model(model).convert()
