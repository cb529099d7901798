"""Task models from a Keras user's own code: raw strings in, fit, answers, `.keras`, export.

Each test is the user's script: data it makes, `from_texts`, `compile`,
`fit` on raw strings, answers on raw strings, the `.keras` file reloaded
(`keras.models.load_model` only), `export`, and the SavedModel answered in
a fresh process that imports only TensorFlow and tensorflow-text, with the
same answers every time.
"""

import json
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from training.serving.signatures import ClassifierModule
from training.task_models import TextClassifier, TimeSeriesClassifier, Translator

# A process that imports TensorFlow, tensorflow-text and nothing of this
# project, loads a SavedModel and answers signatures (argv: dir, JSON list of
# names, input key, JSON list of strings); it prints {name: outputs} and the
# project modules it imported (none).
FRESH = """
import json, sys
import tensorflow as tf, tensorflow_text  # noqa: F401 (the tokenizer's ops)
model = tf.saved_model.load(sys.argv[1])
inputs = {sys.argv[3]: tf.constant(json.loads(sys.argv[4]))}
answers = {name: {k: v.numpy().tolist() for k, v in model.signatures[name](**inputs).items()}
           for name in json.loads(sys.argv[2])}
own = [m for m in sys.modules if m.split(".")[0] in ("keras_transformer", "training", "export")]
print(json.dumps({"own": own, **answers}, default=lambda b: b.decode("utf-8")))
"""


def _fresh(path, signatures, key, strings):
    done = subprocess.run([sys.executable, "-I", "-c", FRESH, str(path), json.dumps(signatures),
                           key, json.dumps(strings)], capture_output=True, text=True, check=True)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer.pop("own") == []
    return answer


def _sentiment(rng, n):
    good = ["good", "great", "fine", "lovely", "nice"]
    bad = ["bad", "awful", "poor", "dull", "ugly"]
    filler = ["the", "film", "was", "a", "very", "plot", "and", "story"]
    texts, labels = [], []
    for i in range(n):
        words = list(rng.choice(filler, 4)) + [rng.choice(good if i % 2 else bad)]
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append("pos" if i % 2 else "neg")
    return texts, labels


def test_text_classifier_fits_answers_saves_and_exports(tmp_path, rng):
    texts, labels = _sentiment(rng, 96)
    model = TextClassifier.from_texts(texts, labels, vocabulary_size=200, sequence_length=16,
                                      hidden_dim=16, num_layers=1, num_heads=2,
                                      intermediate_dim=32)
    model.compile(learning_rate=3e-3)
    # Validation on raw sentences too (Keras' fit hands them to evaluate prepared).
    history = model.fit(texts, labels, epochs=12, verbose=0,
                        validation_data=(texts[:32], labels[:32]))
    assert history.history["accuracy"][-1] > history.history["accuracy"][0]
    assert len(history.history["val_accuracy"]) == 12
    assert history.history["val_accuracy"][-1] == pytest.approx(
        model.evaluate(texts[:32], labels[:32], verbose=0, return_dict=True)["accuracy"])
    queries = ["a good film", "an awful plot", "", "unseen words 😀"]
    answer = model.predict(queries)
    assert answer["probabilities"].shape == (4, 2)
    assert list(answer["labels"][:2]) == ["pos", "neg"]
    assert model.evaluate(texts, labels, verbose=0, return_dict=True)["accuracy"] >= 0.9

    model.save(tmp_path / "classifier.keras")
    loaded = keras.models.load_model(tmp_path / "classifier.keras")
    assert isinstance(loaded, TextClassifier) and loaded.label_names == ["neg", "pos"]
    again = loaded.predict(queries)
    assert list(again["labels"]) == list(answer["labels"])
    np.testing.assert_allclose(again["probabilities"], answer["probabilities"], atol=1e-6)

    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=loaded.export_tflite(
        tmp_path / "classifier.tflite", batch_size=4)).get_signature_runner()
    ids = loaded.token_ids(tf.constant(queries)).numpy()
    ids = np.pad(ids, [(0, 0), (0, loaded.sequence_length - ids.shape[1])])
    np.testing.assert_allclose(runner(token_ids=ids)["probabilities"], answer["probabilities"],
                               atol=1e-5)

    exported = loaded.export(tmp_path / "savedmodel")
    served = _fresh(exported, ["serving_default"], "sentences", queries)["serving_default"]
    assert served["labels"] == list(answer["labels"])
    np.testing.assert_allclose(served["probabilities"], answer["probabilities"], atol=1e-5)


def test_text_classifier_export_is_the_command_lines_module(tmp_path, rng):
    """The same module class and assets as the command line's export of a run."""
    texts, labels = _sentiment(rng, 16)
    model = TextClassifier.from_texts(texts, labels, vocabulary_size=100, hidden_dim=8,
                                      num_layers=1, num_heads=2, intermediate_dim=16)
    path = model.export(tmp_path / "e")
    assets = tmp_path / "e" / "assets"
    assert {"config.json", "vocab.txt", "tokenizer.json", "labels.txt"} <= {
        p.name for p in assets.iterdir()}
    assert json.loads((assets / "config.json").read_text())["task"] == "classification"
    loaded = tf.saved_model.load(path)
    assert set(loaded.signatures) == {"serving_default", "classify_ids"}
    module = ClassifierModule(model.backbone, model.tokenizer, model.label_names)
    sentences = tf.constant(texts[:4])
    np.testing.assert_allclose(loaded.signatures["serving_default"](sentences=sentences)
                               ["probabilities"], module.classify(sentences)["probabilities"],
                               atol=1e-6)


def test_bad_input_is_refused_with_the_argument_named(rng):
    texts, labels = _sentiment(rng, 8)
    with pytest.raises(ValueError, match="labels must hold at least two classes"):
        TextClassifier.from_texts(texts, ["pos"] * 8)
    with pytest.raises(ValueError, match="texts must be a list of strings, not one string"):
        TextClassifier.from_texts("one sentence", labels)
    with pytest.raises(ValueError, match="texts and labels must pair up one to one; received "
                                         "8 texts and 7 labels"):
        TextClassifier.from_texts(texts, labels[:7])
    with pytest.raises(ValueError, match="sources and targets must pair up one to one"):
        Translator.from_texts(["a b", "c"], ["a b"])
    with pytest.raises(ValueError, match="X and labels must pair up one to one"):
        TimeSeriesClassifier.from_series(np.zeros((4, 1, 16)), ["a", "b", "a"])
    model = TextClassifier.from_texts(texts, labels, vocabulary_size=60, hidden_dim=8,
                                      num_layers=1, num_heads=2, intermediate_dim=16)
    with pytest.raises(ValueError, match="y holds label 'maybe', not one of the classes"):
        model.label_ids(["pos", "maybe"])
    with pytest.raises(ValueError, match=r"y holds class index 2, outside \[0, 2\)"):
        model.label_ids([0, 2])
    with pytest.raises(ValueError, match="x must be a list of strings; received an element 3"):
        model.predict(["fine", 3])
    with pytest.raises(ValueError, match="sources and targets must pair up"):
        Translator.from_texts(["a b"], ["a b"], vocabulary_size=40, hidden_dim=8,
                              num_layers=1, num_heads=2, intermediate_dim=16).fit(
            (["a", "b"], ["a"]))


@pytest.mark.slow
def test_translator_fits_translates_saves_and_exports(tmp_path, rng):
    words = ["red", "blue", "green", "cat", "dog", "big", "small", "runs"]
    sources = [" ".join(rng.choice(words, rng.integers(2, 5))) for _ in range(64)]
    targets = [" ".join(reversed(s.split())) for s in sources]
    model = Translator.from_texts(sources, targets, vocabulary_size=60, hidden_dim=16,
                                  num_layers=1, num_heads=2, intermediate_dim=32,
                                  max_sequence_length=12)
    model.compile(warmup_steps=40)
    history = model.fit((sources, targets), epochs=6, verbose=0,
                        validation_data=(sources[:8], targets[:8]))
    assert len(history.history["val_loss"]) == 6
    # Accuracy of real tokens only: padding is most of these batches' columns.
    assert history.history["accuracy"][-1] > history.history["accuracy"][0]
    queries = sources[:3] + ["", "unseen 中文 words"]
    greedy = model.translate(queries)
    beam = model.translate(queries, beam_size=4)
    assert len(greedy) == len(beam) == 5 and all(isinstance(t, str) for t in greedy)

    model.save(tmp_path / "translator.keras")
    loaded = keras.models.load_model(tmp_path / "translator.keras")
    assert loaded.translate(queries) == greedy
    assert loaded.generate(queries, beam_size=4) == beam

    exported = loaded.export(tmp_path / "savedmodel")
    served = _fresh(exported, ["serving_default", "translate_beam"], "sentences", queries)
    assert served["serving_default"]["translations"] == greedy
    assert served["translate_beam"]["translations"] == beam


@pytest.mark.slow
def test_a_runs_model_exports_as_the_command_line_exports_it(tmp_path):
    """A `Translator` around a trained model writes the SavedModel that
    `export_model` of the bare backbone and its tokenizer writes,
    and `translate` answers what it serves (the classifier's module is
    compared in `test_text_classifier_export_is_the_command_lines_module`)."""
    from tests.export_fixtures import (
        SENTENCES,
        exported_translator,
        tiny_tokenizer,
        tiny_translator,
    )

    model = Translator(tiny_translator(), tiny_tokenizer())
    ours = tf.saved_model.load(model.export(tmp_path / "translator"))
    theirs = tf.saved_model.load(exported_translator())
    assert set(ours.signatures) == set(theirs.signatures)
    queries = list(SENTENCES[:6]) + ["", "unseen 😀"]
    for name in ("serving_default", "translate_beam"):
        got = ours.signatures[name](sentences=tf.constant(queries))["translations"]
        want = theirs.signatures[name](sentences=tf.constant(queries))["translations"]
        assert got.numpy().tolist() == want.numpy().tolist()
        beam_size = 1 if name == "serving_default" else 4
        assert model.translate(queries, beam_size=beam_size) == [
            t.decode("utf-8") for t in want.numpy()]


def test_a_users_functional_classifier_exports_through_the_same_call(tmp_path, rng):
    """A functional series classifier of the library's layers (projection,
    positions, encoder blocks, pooling, a Dense head): `export_model` gives a
    typed `features` signature that a fresh process and `saved_model_cli`
    answer as Keras does (`verify_saved_model`, which tells another model's
    answers apart)."""
    from export.verify import verify_saved_model
    from keras_transformer.layers import (
        MaskedMeanPooling,
        SinusoidalPositionEncoding,
        TransformerEncoderBlock,
    )
    from training.task_models import export_model

    def functional():
        inputs = keras.Input((24, 2), name="features")
        x = keras.layers.Dense(16)(inputs)
        x = x + SinusoidalPositionEncoding()(x)
        x = TransformerEncoderBlock(32, 2)(x)
        return keras.Model(inputs, keras.layers.Dense(3)(MaskedMeanPooling()(x)))

    model, other = functional(), functional()
    series = rng.standard_normal((5, 24, 2)).astype("float32")
    path = export_model(model, tmp_path / "mine", label_names=["a", "b", "c"])
    report = verify_saved_model(path, model, label_names=["a", "b", "c"])  # seeded probes
    assert report["ok"] and report["num_examples"] == 6, report
    assert report["fresh_process"] == [] and report["saved_model_cli"] == []
    wrong = verify_saved_model(path, other, series, use_saved_model_cli=False)
    assert not wrong["ok"] and "outputs: max |difference|" in wrong["fresh_process"][0]
    signature = tf.saved_model.load(path).signatures["serving_default"]
    assert signature.structured_input_signature[1]["features"].shape.as_list() == [None, 24, 2]
    with pytest.raises(ValueError, match="label_names must name each of the 3 columns"):
        export_model(model, tmp_path / "bad", label_names=["a", "b"])
    assert not (tmp_path / "bad").exists()
    # TFLite through the same kind of call: the batch fixed, the same outputs.
    from ai_edge_litert.interpreter import Interpreter

    from training.task_models import export_model_tflite

    runner = Interpreter(model_path=export_model_tflite(model, tmp_path / "mine.tflite",
                                                        batch_size=5)).get_signature_runner()
    np.testing.assert_allclose(runner(features=series)["outputs"],
                               model.predict(series, verbose=0), atol=1e-4)


def test_a_loaded_runs_task_model_answers_as_the_run(tmp_path):
    """`load_run(...).task_model` is the run's model with its tokenizer: it
    translates what the run's `predict` answers, and saves one `.keras` file."""
    import os

    from tests.export_fixtures import SENTENCES, tiny_tokenizer, tiny_translator
    from training.config import load_config
    from training.runs import selection
    from training.runs.run_dir import (
        RunDirLock,
        finish_run,
        load_run,
        prepare_run_dir,
        write_json_atomically,
    )

    run_dir = tmp_path / "run"
    with RunDirLock(run_dir):
        prepare_run_dir(run_dir, load_config("tiny", ["max_sequence_length=24"]))
    tiny_tokenizer().save(run_dir / "vocab")
    selection.save_final_model(tiny_translator(), os.path.join(run_dir, "model.keras"))
    write_json_atomically(os.path.join(run_dir, "metrics.json"), {"steps": 1})
    (run_dir / "checkpoints" / "scores.json").write_text('{"1": 0.5}')
    finish_run(run_dir)
    run = load_run(run_dir)
    model = run.task_model
    assert isinstance(model, Translator)
    queries = list(SENTENCES[:4])
    assert model.translate(queries) == run.predict(queries)
    model.save(tmp_path / "run.keras")
    assert keras.models.load_model(tmp_path / "run.keras").translate(queries) == run.predict(
        queries)


def test_series_classifier_fits_answers_saves_and_exports(tmp_path, rng):
    steps = np.linspace(0, 6 * np.pi, 40)
    kinds = rng.integers(0, 2, 48)  # a wave or a flat line, with noise, two channels
    X = np.stack([np.stack([np.sin(steps + rng.uniform(0, 6)) * k, np.cos(steps) * k])
                  for k in kinds]) + 0.1 * rng.standard_normal((48, 2, 40))
    X[0, :, 30:] = np.nan  # a shorter series
    labels = np.where(kinds == 1, "wave", "flat")
    model = TimeSeriesClassifier.from_series(X, labels, hidden_dim=16, num_layers=1,
                                             num_heads=2, intermediate_dim=32,
                                             num_kernel_features=168)
    model.compile(learning_rate=3e-3)
    history = model.fit(X, labels, epochs=15, verbose=0, validation_data=(X[:16], labels[:16]))
    assert len(history.history["val_accuracy"]) == 15
    answer = model.predict(X)
    assert (answer["labels"] == labels).mean() >= 0.9
    model.save(tmp_path / "series.keras")
    loaded = keras.models.load_model(tmp_path / "series.keras")
    np.testing.assert_allclose(loaded.predict(X[:6])["probabilities"],
                               answer["probabilities"][:6], atol=1e-5)
    served = _fresh(loaded.export(tmp_path / "export"), ["serving_default"], "features",
                    np.nan_to_num(X[1:6], nan=0.0).tolist())["serving_default"]
    assert served["labels"] == list(model.predict(np.nan_to_num(X[1:6]))["labels"])
    with pytest.raises(ValueError, match="X has 48 series but y has 3 labels"):
        model.fit(X, labels[:3])


def _series_ensemble(mixup_alpha=0.0):
    from keras_transformer.layers import PatchStem
    from keras_transformer.models import ClassifierEnsemble, TransformerClassifier

    members = [TransformerClassifier(
        PatchStem(1, hidden_dim=8, max_sequence_length=8, patch_length=2), 3, num_layers=1,
        num_heads=2, intermediate_dim=16, dropout=0.0, mixup_alpha=mixup_alpha, name=f"m{i}")
        for i in range(2)]
    return ClassifierEnsemble(members)


@pytest.mark.parametrize("mixup_alpha", [0.0, 0.4])
def test_a_task_model_trains_its_backbone_by_the_backbones_own_loss(rng, mixup_alpha):
    """An ensemble's members each learn on their own logits and a mixed batch
    on both its labels, inside a task model as alone: the task model's loss
    of a training call is the backbone's, not its loss on the answer."""
    backbone = _series_ensemble(mixup_alpha)
    model = TimeSeriesClassifier(backbone, ["a", "b", "c"])
    model.compile(label_smoothing=0.0)
    backbone.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = rng.standard_normal((6, 8, 1)).astype("float32")
    y = np.array([0, 1, 2, 0, 1, 2], "int32")
    answer = model(x, training=True)
    kept = backbone.step_outputs.values  # the members' logits (and mixup's weights)
    ours = float(model.compute_loss(x, y, answer, training=True))
    backbone.step_outputs.keep(kept)
    alone = float(backbone.compute_loss(x, y, answer, training=True))
    on_the_answer = float(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
        y, answer))
    assert ours == pytest.approx(alone, rel=1e-6)
    assert abs(ours - on_the_answer) > 1e-4  # what a task model's loss was without the rule


def test_a_task_model_reads_the_checkpoints_of_its_backbone(tmp_path, rng):
    """A run killed before runs trained through their task models resumes:
    its backbone's checkpoint (weights and optimizer state) loads into the
    task model."""
    from training.runs.checkpoint_average import load_model_weights

    x = rng.standard_normal((6, 8, 1)).astype("float32")
    y = np.array([0, 1, 2, 0, 1, 2], "int32")
    before = _series_ensemble()
    before.compile(optimizer=keras.optimizers.Adam(1e-2),
                   loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before.fit(x, y, epochs=2, verbose=0)
    before.save_weights(tmp_path / "backbone.weights.h5")
    model = TimeSeriesClassifier(_series_ensemble(), ["a", "b", "c"])
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    model.optimizer.build(model.trainable_variables)
    load_model_weights(model, tmp_path / "backbone.weights.h5")
    for ours, theirs in zip(model.weights, before.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    moments = [np.asarray(v) for v in before.optimizer.variables]
    assert int(np.asarray(model.optimizer.iterations)) == 2
    for ours, theirs in zip(model.optimizer.variables, moments, strict=True):
        np.testing.assert_array_equal(np.asarray(ours), theirs)
    # A resumed run's epochs from before and after average alike.
    from training.runs.checkpoint_average import average_checkpoints

    model.fit(x.transpose(0, 2, 1), y, epochs=1, verbose=0)  # series as (N, C, T)
    model.save_weights(tmp_path / "task_model.weights.h5")
    after = [np.asarray(w) for w in model.weights]
    average_checkpoints([tmp_path / "backbone.weights.h5", tmp_path / "task_model.weights.h5"],
                        model)
    for ours, old, new in zip(model.weights, before.weights, after, strict=True):
        np.testing.assert_allclose(np.asarray(ours), (np.asarray(old) + new) / 2, rtol=1e-6)
