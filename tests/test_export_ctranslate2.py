"""CTranslate2 export: the converted model decodes the tokens our Keras model does.

Our own converter fills CTranslate2's `TransformerSpec` (fused attention
kernels split per head, post- or pre-LN, our sinusoid table, the [PAD]
bias); these tests run the written directory in `ctranslate2.Translator`
and compare its greedy and beam tokens with `greedy_search` and
`beam_search` (length penalty 0 on both sides, where the two penalties
agree).
"""

import json
import os
import sys
import types

import keras
import numpy as np
import pytest

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason='the ctranslate2 extra is not installed (pip install -e ".[ctranslate2]")'
)

from export_fixtures import SENTENCES, tiny_tokenizer, tiny_translator  # noqa: E402

import export.ctranslate2 as ct2_export  # noqa: E402
from cli import export_commands, export_handlers, training_commands  # noqa: E402
from export.ctranslate2 import (  # noqa: E402
    PAD_LOGIT_BIAS,
    QUANTIZATIONS,
    SETTINGS_FILE,
    CTranslate2Translator,
    export_ctranslate2,
    verify_ctranslate2,
)
from keras_transformer.decoding import beam_search, greedy_search  # noqa: E402
from keras_transformer.layers import TokenStem  # noqa: E402
from keras_transformer.models import Transformer, TransformerClassifier  # noqa: E402
from keras_transformer.models.transformer_config import RESERVED_TOKENS  # noqa: E402
from training.runs.predict import predict_run  # noqa: E402
from training.task_models import Translator  # noqa: E402
from training.tasks import get_task  # noqa: E402
from training.text.tokenizers import WordPieceTokenizer  # noqa: E402

VOCABULARY = [*RESERVED_TOKENS, *(f"w{i}" for i in range(56))]  # 60 tokens
MAX_SEQUENCE_LENGTH = 12


def _random_model(seed=0, **overrides):
    """A 2-layer d_model 32 Transformer with random weights, biases and norms.

    Biases and LayerNorm offsets are drawn too (initialised at zero and one
    they would hide a bias or a norm put in the wrong place), and the
    embeddings are scaled up so that the logits are peaked: random weights
    otherwise leave near-ties that any float reordering can flip.  [PAD]'s
    output row is zero, as small a share of the softmax as a trained model
    leaves it: our beam search normalises with [PAD]'s share, CTranslate2
    (its logit biased away) without, and a random [PAD] row that takes a
    tenth of the mass reorders beams.
    """
    keras.utils.set_random_seed(seed)
    config = dict(vocabulary_size=len(VOCABULARY), num_layers=2, hidden_dim=32, num_heads=4,
                  intermediate_dim=64, max_sequence_length=MAX_SEQUENCE_LENGTH, dropout=0.0)
    model = Transformer(**{**config, **overrides})
    model({"encoder_token_ids": np.ones((1, 2), "int32"),
           "decoder_token_ids": np.ones((1, 2), "int32")})
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        value = weight.numpy()
        if weight.path.endswith(("bias", "beta", "gamma")):
            value = value + rng.normal(0, 0.3, value.shape)
        elif weight.path.endswith("embeddings") and "position" not in weight.path:
            value = value * 4
        weight.assign(value.astype("float32"))
    if model.output_projection is None:
        table = model.decoder_embedding.embeddings
        table.assign(np.concatenate([np.zeros_like(table[:1]), table[1:]]))
    else:
        kernel = model.output_projection.kernel
        kernel.assign(np.concatenate([np.zeros_like(kernel[:, :1]), kernel[:, 1:]], axis=1))
    return model


def _sources(seed=1, rows=8):
    """Source ids `(rows, S)` of lengths 1..S, 0-padded."""
    rng = np.random.default_rng(seed)
    lengths = [1, 2, 3, 5, 7, 8, 4, 6][:rows]
    ids = np.zeros((rows, max(lengths)), np.int32)
    for i, length in enumerate(lengths):
        ids[i, :length] = rng.integers(4, len(VOCABULARY), length)
    return ids


@pytest.fixture(scope="module")
def synthetic_tokenizer():
    return WordPieceTokenizer(VOCABULARY)


@pytest.fixture(scope="module")
def translator_run(tmp_path_factory):
    """The shared tiny trained translator as a loaded run would hold it, and its export."""
    tokenizer = tiny_tokenizer()
    run = types.SimpleNamespace(
        model=tiny_translator(), task=get_task("translation", tokenizer=tokenizer),
        task_model=Translator(tiny_translator(), tokenizer),
        config={"length_penalty": 0.6}, run_dir=str(tmp_path_factory.mktemp("run")),
    )  # fmt: skip
    path = export_ctranslate2(run.task_model, tmp_path_factory.mktemp("ct2") / "model")
    return run, path


@pytest.mark.parametrize("overrides", [
    {},
    {"normalize_first": True},
    {"positions": "learned", "tie_embeddings": False, "key_dim": 4, "activation": "gelu"},
], ids=["post-LN", "pre-LN", "learned-untied-narrow-heads-gelu"])
def test_random_model_tokens_equal_keras(overrides, synthetic_tokenizer, tmp_path):
    model = _random_model(**overrides)
    path = export_ctranslate2(model, tmp_path / "model", synthetic_tokenizer)
    translator = CTranslate2Translator(path, intra_threads=1)
    ids = _sources()
    max_length = min(ids.shape[1] + 50, MAX_SEQUENCE_LENGTH)
    expected = np.asarray(greedy_search(model, ids, max_length=max_length))
    np.testing.assert_array_equal(translator.translate_ids(ids), expected)
    expected, _ = beam_search(model, ids, beam_size=3, length_penalty=0.0, max_length=max_length)
    np.testing.assert_array_equal(
        translator.translate_ids(ids, beam_size=3, length_penalty=0.0), np.asarray(expected)
    )


def test_trained_translator_round_trip(translator_run):
    run, path = translator_run
    tokenizer = run.task.tokenizer
    assert sorted(os.listdir(path)) == sorted([
        "config.json", "model.bin", "shared_vocabulary.json", "tokenizer.json", "vocab.txt",
        SETTINGS_FILE, "manifest.json",
    ])  # fmt: skip
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["layer_norm_epsilon"] == pytest.approx(1e-6)  # not CTranslate2's 1e-5
    assert (config["decoder_start_token"], config["eos_token"]) == ("[START]", "[END]")
    assert not config["add_source_bos"] and not config["add_source_eos"]

    translator = CTranslate2Translator(path, intra_threads=1)
    ids = tokenizer.tokenize(SENTENCES[:16]).to_tensor(0).numpy()  # 3..7 words, varied
    max_length = min(ids.shape[1] + 50, run.model.config.max_sequence_length)
    greedy = np.asarray(greedy_search(run.model, ids, max_length=max_length))
    assert (greedy == 3).any(axis=1).all()  # the copies end: [END] is compared too
    np.testing.assert_array_equal(translator.translate_ids(ids), greedy)
    # Strings through our tokenizer and detokenizer: the run's own answers.
    sentences = [*SENTENCES[16:24], "the cat eats bread."]
    assert translator.translate(sentences) == predict_run(run, sentences)


def test_verification_reports_identical_shares(translator_run, synthetic_tokenizer, tmp_path):
    run, path = translator_run
    report = verify_ctranslate2(run.task_model, path, sentences=SENTENCES[:8],
                                references=SENTENCES[:8])
    assert report["ok"] and report["greedy"]["identical"] == 1.0
    assert report["beam"]["identical"] == 1.0
    assert report["greedy"]["bleu_vs_keras"] == pytest.approx(100.0)
    assert report["greedy"]["bleu_keras"] == report["greedy"]["bleu_ctranslate2"] > 90
    # Another model's export must fail the float32 check.
    other = export_ctranslate2(_random_model(vocabulary_size=tiny_tokenizer().vocabulary_size),
                               tmp_path / "other", tiny_tokenizer())
    report = verify_ctranslate2(run.task_model, other, sentences=SENTENCES[:8], beam_size=1)
    assert not report["ok"] and report["greedy"]["identical"] < 0.99
    assert report["beam"] is None and report["greedy"]["differences"]


def test_pad_is_never_generated(synthetic_tokenizer, tmp_path):
    """[PAD]'s logit made the largest by far: the bias keeps it out, quantized too."""
    model = _random_model(tie_embeddings=False)
    norm = model.decoder_blocks[-1].feed_forward_norm  # post-LN: the decoder's output
    offset = np.linspace(0.5, 1.5, 32).astype("float32")
    norm.gamma.assign(np.zeros(32, "float32"))
    norm.beta.assign(offset)  # every position's state is `offset`
    kernel = np.zeros((32, len(VOCABULARY)), "float32")
    kernel[:, 0] = 20 * offset  # [PAD]: logit 20 |offset|^2 ~ 700, far above the rest
    kernel[:, 7] = 2 * offset  # then token 7
    model.output_projection.kernel.assign(kernel)
    ids = _sources(rows=3)
    expected = np.asarray(greedy_search(model, ids, max_length=MAX_SEQUENCE_LENGTH))
    assert (expected == 7).all()
    for quantization in ("float32", "int8", "float16"):
        path = export_ctranslate2(model, tmp_path / quantization, synthetic_tokenizer,
                                  quantization)
        translator = CTranslate2Translator(path, intra_threads=1)
        np.testing.assert_array_equal(translator.translate_ids(ids), expected)
        np.testing.assert_array_equal(translator.translate_ids(ids, beam_size=2), expected)
        with open(os.path.join(path, SETTINGS_FILE), encoding="utf-8") as f:
            settings = json.load(f)
        assert settings["quantization"] == quantization
        assert settings["pad_logit_bias"] == PAD_LOGIT_BIAS


def test_empty_source_is_decoded_on_its_own(translator_run):
    """A lone [PAD] piece, as the SavedModel answers a request of that sentence alone."""
    run, path = translator_run
    translator = CTranslate2Translator(path, intra_threads=1)
    ids = run.task.tokenizer.tokenize(["", SENTENCES[0]]).to_tensor(0).numpy()
    alone = np.asarray(greedy_search(run.model, np.zeros((1, 1), np.int32), max_length=24))
    tokens = translator.translate_ids(ids)
    assert tokens.shape == (2, min(ids.shape[1] + 50, 24))
    np.testing.assert_array_equal(tokens[0, : alone.shape[1]], alone[0])


@pytest.mark.parametrize("overrides, feature", [
    ({"activation": "elu"}, "activation='elu'"),
    ({"key_dim": 8, "value_dim": 4}, "key_dim != value_dim"),
    ({"tie_embeddings": False, "target_vocabulary_size": 70}, "target vocabulary"),
])
def test_unrepresentable_models_are_refused(overrides, feature, synthetic_tokenizer, tmp_path):
    model = Transformer(vocabulary_size=len(VOCABULARY), num_layers=1, hidden_dim=16,
                        num_heads=2, intermediate_dim=16, max_sequence_length=8, **overrides)
    with pytest.raises(ValueError, match="CTranslate2 export cannot represent") as error:
        export_ctranslate2(model, tmp_path / "model", synthetic_tokenizer)
    assert feature in str(error.value)
    assert os.listdir(tmp_path) == []


def test_classifier_and_unknown_quantization_are_refused(synthetic_tokenizer, tmp_path):
    classifier = TransformerClassifier(
        TokenStem(len(VOCABULARY), hidden_dim=16, max_sequence_length=8),
        num_classes=2, num_layers=1, num_heads=2, intermediate_dim=16)
    with pytest.raises(ValueError, match="encoder-decoder Transformer"):
        export_ctranslate2(classifier, tmp_path / "model", synthetic_tokenizer)
    with pytest.raises(ValueError, match="quantization must be one of"):
        export_ctranslate2(_random_model(), tmp_path / "model", synthetic_tokenizer, "int4")
    assert os.listdir(tmp_path) == []
    assert QUANTIZATIONS == export_commands.CT2_QUANTIZATIONS  # --help's copy


def test_missing_extra_is_one_line(monkeypatch, capsys, synthetic_tokenizer, tmp_path):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` fails
    with pytest.raises(ModuleNotFoundError) as error:
        export_ctranslate2(_random_model(), tmp_path / "model", synthetic_tokenizer)
    message = str(error.value)
    assert "\n" not in message and 'pip install -e ".[ctranslate2]"' in message
    assert os.listdir(tmp_path) == []
    argv = ["ctranslate2", "--run-dir", str(tmp_path / "run"), "--output", str(tmp_path / "o")]
    assert export_commands.main(argv) == 2
    assert training_commands.main(["predict", "--ctranslate2", str(tmp_path), "a"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {message}"] * 2


def test_write_is_atomic(monkeypatch, synthetic_tokenizer, tmp_path):
    model = _random_model()
    target = tmp_path / "model"
    path = export_ctranslate2(model, target, synthetic_tokenizer)
    before = sorted(os.listdir(path))
    with pytest.raises(FileExistsError, match="overwrite"):
        export_ctranslate2(model, target, synthetic_tokenizer)
    assert sorted(os.listdir(path)) == before

    def broken(*args):
        raise RuntimeError("disk full")

    monkeypatch.setattr(ct2_export, "_settings", broken)  # fails after the weights are written
    with pytest.raises(RuntimeError, match="disk full"):
        export_ctranslate2(model, tmp_path / "other", synthetic_tokenizer)
    with pytest.raises(RuntimeError, match="disk full"):
        export_ctranslate2(model, target, synthetic_tokenizer, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["model"]  # no temporary, no "other"
    assert sorted(os.listdir(path)) == before  # the old export kept


@pytest.mark.slow
def test_cli_export_and_predict(translator_run, monkeypatch, capsys, tmp_path):
    run, _ = translator_run
    monkeypatch.setattr(export_handlers, "load_run", lambda run_dir: run)
    output = str(tmp_path / "ct2")
    assert export_commands.main(["ctranslate2", "--run-dir", run.run_dir, "--output", output]) == 0
    lines = capsys.readouterr().out.splitlines()
    probes = len(run.task.serving().probe_inputs(run.model))
    assert lines[0] == output
    assert f"greedy {probes}/{probes}" in lines[1] and "ok" in lines[1]
    assert export_commands.main(["ctranslate2", "--run-dir", run.run_dir, "--output", output]) == 2
    assert "already exists" in capsys.readouterr().err

    sentences = SENTENCES[30:36]
    assert training_commands.main(["predict", "--ctranslate2", output, *sentences]) == 0
    assert capsys.readouterr().out.splitlines() == predict_run(run, sentences)
    assert training_commands.main(["predict", "--run-dir", run.run_dir, "--length-penalty", "1", "a"]) == 2
    assert "--length-penalty is CTranslate2's" in capsys.readouterr().err
