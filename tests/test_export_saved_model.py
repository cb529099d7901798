"""SavedModel export: strings in/out equal Keras, outside this process too.

PEERS.md pain points 2 (string signatures, reload in a fresh process) and 3
(never export the optimizer).
"""

import json
import os
import pathlib
import subprocess
import sys
import types

import keras
import numpy as np
import pytest
import tensorflow as tf
from export_fixtures import (
    LABEL_NAMES,
    MAX_SEQUENCE_LENGTH,
    SENTENCES,
    exported_classifier,
    exported_translator,
    tiny_classifier,
    tiny_tokenizer,
    tiny_translator,
)

import training.serving.saved_model
from cli import export_commands, export_handlers
from export.saved_model import export_model
from export.saved_model_cli import input_exprs, parse_output, parse_printed_array
from export.tflite import export_model_tflite
from export.verify import compare_outputs, reference_outputs, verify_saved_model
from keras_transformer.decoding import beam_search, greedy_search
from keras_transformer.layers import PatchStem
from keras_transformer.models import TransformerClassifier
from training.data.manifest import check_saved_model_export
from training.serving.inputs import PROBES
from training.task_models import TimeSeriesClassifier
from training.text.detokenize import detokenize_punctuation
from training.text.tokenizers import WordPieceTokenizer

EXAMPLES = SENTENCES[:6] + ["the cat eats bread", "rain falls on a big dog", *PROBES]


@pytest.fixture(scope="module")
def translator():
    return tiny_translator()


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def translator_dir():
    return exported_translator()


@pytest.fixture(scope="module")
def loaded_translator(translator_dir):
    return tf.saved_model.load(translator_dir)


@pytest.mark.slow
def test_strings_match_keras_in_fresh_process_and_saved_model_cli(
    translator, tokenizer, translator_dir
):
    expected = reference_outputs(translator, EXAMPLES, tokenizer)
    # Copying its training sentences shows the decoding is real, not noise.
    copied = [
        t == s.encode()
        for t, s in zip(expected["translations"][:6], SENTENCES[:6], strict=True)
    ]
    assert sum(copied) >= 4, expected["translations"][:6]
    report = verify_saved_model(translator_dir, translator, EXAMPLES, tokenizer)
    assert report["signatures"] == ["serving_default", "translate_xla"]
    assert report["fresh_process"] == [] and report["saved_model_cli"] == []
    assert report["ok"], report


def test_signatures_declare_strings(loaded_translator):
    signatures = loaded_translator.signatures
    assert sorted(signatures) == [
        "serving_default", "translate_beam", "translate_beam_xla", "translate_ids",
        "translate_xla",
    ]  # fmt: skip
    (spec,) = signatures["serving_default"].structured_input_signature[1].values()
    assert spec.dtype == tf.string and spec.shape.as_list() == [None]
    outputs = signatures["serving_default"].structured_outputs
    assert outputs["translations"].dtype == tf.string
    assert signatures["translate_ids"].structured_outputs["token_ids"].dtype == tf.int32


def test_config_and_vocabulary_travel_as_assets(translator, tokenizer, translator_dir):
    assets = os.path.join(translator_dir, "assets")
    assert sorted(os.listdir(assets)) == ["config.json", "export.json", "tokenizer.json", "vocab.txt"]
    with open(os.path.join(assets, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["model"]["max_sequence_length"] == MAX_SEQUENCE_LENGTH
    reloaded = WordPieceTokenizer.load(assets)
    assert reloaded.vocabulary == tokenizer.vocabulary
    assert reloaded.lower_case == tokenizer.lower_case


def test_only_inference_weights_are_exported(translator, translator_dir):
    assert translator.optimizer.variables, "the fixture must have a built optimizer"
    names = [
        name
        for name, _ in tf.train.list_variables(
            os.path.join(translator_dir, "variables", "variables")
        )
    ]
    weights = [name for name in names if name.startswith("model_weights/")]
    assert len(weights) == len(translator.weights)
    assert not [
        name for name in names if "optimizer" in name.lower() or "iteration" in name
    ]


def test_ids_and_beam_signatures_match_keras(translator, tokenizer, loaded_translator):
    ids = tokenizer.tokenize(tf.constant(EXAMPLES[:8])).to_tensor(0)  # (8, S)
    max_length = min(int(ids.shape[1]) + 50, MAX_SEQUENCE_LENGTH)
    expected = greedy_search(translator, ids, max_length=max_length)
    got = loaded_translator.signatures["translate_ids"](encoder_token_ids=ids)[
        "token_ids"
    ]
    np.testing.assert_array_equal(got, expected)

    tokens, scores = beam_search(
        translator, ids, beam_size=4, length_penalty=0.6, max_length=max_length
    )
    text = tokenizer.detokenize(
        tf.RaggedTensor.from_tensor(tf.convert_to_tensor(tokens))
    )
    beam = loaded_translator.signatures["translate_beam"](
        sentences=tf.constant(EXAMPLES[:8])
    )
    # Served text has its punctuation attached by the same rules as BLEU's.
    expected_text = [detokenize_punctuation(t.decode("utf-8")) for t in text.numpy()]
    assert [t.decode("utf-8") for t in beam["translations"].numpy()] == expected_text
    np.testing.assert_allclose(beam["scores"], scores, atol=1e-5)


def test_xla_signatures_return_the_plain_signatures_translations(loaded_translator):
    signatures = loaded_translator.signatures
    for batch in (EXAMPLES[:1], EXAMPLES[:5], EXAMPLES):  # buckets 1, 8 and 16 rows
        sentences = tf.constant(batch)
        for plain, xla in (("serving_default", "translate_xla"),
                           ("translate_beam", "translate_beam_xla")):
            expected = signatures[plain](sentences=sentences)
            got = signatures[xla](sentences=sentences)
            assert got["translations"].numpy().tolist() == (
                expected["translations"].numpy().tolist()), (plain, len(batch))
            if "scores" in expected:
                np.testing.assert_allclose(got["scores"], expected["scores"], atol=1e-5)


def test_token_classifier_export(tokenizer):
    model = tiny_classifier()
    loaded = tf.saved_model.load(exported_classifier())
    assert sorted(loaded.signatures) == ["classify_ids", "serving_default"]
    got = loaded.signatures["serving_default"](sentences=tf.constant(EXAMPLES))
    expected = reference_outputs(model, EXAMPLES, tokenizer, list(LABEL_NAMES))
    assert compare_outputs({k: v.numpy() for k, v in got.items()}, expected) == []
    assert set(got["labels"].numpy()) <= {name.encode() for name in LABEL_NAMES}
    labels = pathlib.Path(exported_classifier(), "assets", "labels.txt").read_text(
        "utf-8"
    )
    assert labels.split() == list(LABEL_NAMES)


@pytest.fixture
def numeric_classifier():
    return TransformerClassifier(
        PatchStem(2, hidden_dim=8, max_sequence_length=12),
        num_classes=1, num_layers=1, num_heads=2, intermediate_dim=16,
    )  # fmt: skip


def test_numeric_classifier_export_and_overwrite(numeric_classifier, tmp_path):
    target = tmp_path / "series"
    config = {"task": "timeseries"}
    export_model(numeric_classifier, target, label_names=["no", "yes"], config=config)
    with pytest.raises(FileExistsError, match=str(target)):
        export_model(numeric_classifier, target, config=config)
    config["version"] = 2
    export_model(numeric_classifier, target, overwrite=True, config=config)
    assert json.loads((target / "assets" / "config.json").read_text())["version"] == 2
    assert sorted(os.listdir(tmp_path)) == ["series"]  # No temporary left beside it.

    series = np.random.default_rng(0).standard_normal((3, 20, 2)).astype(np.float32)
    got = tf.saved_model.load(str(target)).signatures["serving_default"](
        features=series.transpose(0, 2, 1)  # (B, F, T): channels first, as aeon's
    )
    expected = reference_outputs(numeric_classifier, series)
    assert got["probabilities"].shape == (3, 1)
    assert compare_outputs({k: v.numpy() for k, v in got.items()}, expected) == []
    # Its manifest, written inside before the rename, records every file.
    files = check_saved_model_export(target)["files"]
    assert {"saved_model.pb", "assets/config.json"} <= set(files)
    assert files["saved_model.pb"]["size"] == os.path.getsize(target / "saved_model.pb")
    # --overwrite replaces an export, never a folder of someone's files.
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="is not a SavedModel export"):
        export_model(numeric_classifier, tmp_path / "notes", overwrite=True, config=config)
    assert os.listdir(tmp_path / "notes") == ["todo.txt"]
    assert (tmp_path / "notes" / "todo.txt").read_text() == "mine"


def test_failed_export_leaves_nothing_behind(numeric_classifier, tmp_path, monkeypatch):
    # An export written before exports carried a manifest: --overwrite replaces it.
    (tmp_path / "series" / "assets").mkdir(parents=True)
    (tmp_path / "series" / "saved_model.pb").write_text("previous export")
    (tmp_path / "series" / "assets" / "config.json").write_text("{}")

    def save_half_then_fail(module, directory, signatures=None):
        with open(os.path.join(directory, "saved_model.pb"), "wb") as f:
            f.write(b"half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(training.serving.saved_model.tf.saved_model, "save", save_half_then_fail)
    for name, overwrite in (("fresh", False), ("series", True)):
        with pytest.raises(RuntimeError, match="disk full"):
            export_model(numeric_classifier, tmp_path / name, overwrite=overwrite)
    assert sorted(os.listdir(tmp_path)) == ["series"]
    assert sorted(os.listdir(tmp_path / "series")) == ["assets", "saved_model.pb"]
    assert (tmp_path / "series" / "saved_model.pb").read_text() == "previous export"


def test_bad_arguments_are_rejected_before_writing(numeric_classifier, tmp_path):
    # The exporters take the model alone; what they cannot serve is named.
    with pytest.raises(ValueError, match="A Transformer exports with its tokenizer"):
        export_model(tiny_translator(), tmp_path / "a")
    with pytest.raises(ValueError, match="sequence_length applies to the library's models"):
        export_model_tflite(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]),
                            tmp_path / "a.tflite", sequence_length=4)
    with pytest.raises(ValueError, match="JSON"):
        export_model(numeric_classifier, tmp_path / "b", config={"x": object()})
    with pytest.raises(ValueError, match="label_names"):
        export_model(numeric_classifier, tmp_path / "c", label_names=["one"])
    assert os.listdir(tmp_path) == []


def test_saved_model_cli_printout_parsing_round_trips_hostile_bytes():
    values = [b"", b"a;b=c", b"\xff\xfe'\"\\", "😀".encode(), b"\n\t"]
    expression = input_exprs({"sentences": np.asarray(values, dtype=object)})
    assert expression.count(";") == 0 and expression.count("=") == 1
    printed = np.array2string(np.asarray(values, dtype=object))
    assert list(parse_printed_array(printed)) == values
    probabilities = np.array([[0.1, 0.9], [1e-7, 1.0]])
    stdout = f"Result for output key probabilities:\n{probabilities}\nResult for output key labels:\n[b'x' b'y']\n"
    parsed = parse_output(stdout)
    np.testing.assert_allclose(parsed["probabilities"], probabilities)
    assert list(parsed["labels"]) == [b"x", b"y"]


def test_cli_help_lists_the_subcommands():
    result = subprocess.run(
        [sys.executable, "-m", "export", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    for command in ("saved-model", "tflite", "verify"):
        assert command in result.stdout


def _fake_run(model, config, run_dir, label_names=None):
    """What the export commands read of a loaded run."""
    return types.SimpleNamespace(model=model, config=config, run_dir=str(run_dir),
                                 task_model=TimeSeriesClassifier(model, label_names))


def test_cli_saved_model_is_the_task_models_export(
    numeric_classifier, tmp_path, monkeypatch, capsys
):
    """`python -m export saved-model` writes the run's task model's `export`,
    the run's config recorded: it answers as the export Python writes of the
    same model, series channels first in both."""
    run = _fake_run(numeric_classifier, {"seed": 1}, tmp_path / "run", ["no", "yes"])
    monkeypatch.setattr(export_handlers, "load_run", lambda run_dir: run)
    output = str(tmp_path / "export")
    assert export_commands.main(["saved-model", "--run-dir", run.run_dir, "--output", output]) == 0
    assert export_commands.main(["saved-model", "--run-dir", run.run_dir, "--output", output]) == 2
    assert "already exists" in capsys.readouterr().err
    with open(os.path.join(output, "assets", "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["seed"] == 1 and config["series_layout"] == "channels_first"

    python = TimeSeriesClassifier(numeric_classifier, ["no", "yes"]).export(tmp_path / "python")
    series = np.random.default_rng(1).standard_normal((4, 2, 20)).astype(np.float32)
    series[1, :, 12:] = np.nan  # a shorter series, padded
    answers = [tf.saved_model.load(path).signatures["serving_default"](features=series)
               for path in (output, python)]
    np.testing.assert_array_equal(*(a["probabilities"].numpy() for a in answers))
    assert answers[0]["labels"].numpy().tolist() == answers[1]["labels"].numpy().tolist()


@pytest.mark.slow
def test_cli_verify_checks_saved_model_and_tflite(
    numeric_classifier, tmp_path, monkeypatch, capsys
):
    run = _fake_run(numeric_classifier, {}, tmp_path / "run")
    monkeypatch.setattr(export_handlers, "load_run", lambda run_dir: run)
    saved_model, tflite = str(tmp_path / "export"), str(tmp_path / "model.tflite")
    assert (
        export_commands.main(["saved-model", "--run-dir", run.run_dir, "--output", saved_model])
        == 0
    )
    assert export_commands.main(["tflite", "--run-dir", run.run_dir, "--output", tflite]) == 0
    capsys.readouterr()
    argv = [
        "verify",
        "--run-dir",
        run.run_dir,
        "--saved-model",
        saved_model,
        "--tflite",
        tflite,
    ]
    assert export_commands.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["saved_model"]["saved_model_cli"] == []
    assert report["tflite"]["max_abs_diff"] <= 1e-5
