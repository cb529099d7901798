"""The task registry and each task's own hooks (fast: no training).

The end-to-end contract every task keeps (train, resume, evaluate, predict,
export, verify) is tests/test_task_contract.py.
"""

import dataclasses
import inspect
import io
import math
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import TokenStem
from keras_transformer.models import (
    TextCNNClassifier,
    TransformerClassifier,
)
from training import config as config_module
from training.config import TrainingConfig, load_config
from training.data.common import TaskData
from training.recipe import adaptive
from training.runs.predict import answer_in_batches, read_inputs
from training.serving.task_serving import Serving
from training.tasks import TASKS, Task, get_task
from training.tasks.base import TASK_FIELDS
from training.tasks.translation import final_length_share, held_out_pairs

# The hooks a trained task must fill in, and those every task's serving side must.
TRAINING_HOOKS = ("load_data", "make_dataset", "batch_tokens", "build_model",
                  "loss_and_metrics", "validation_score", "evaluate_test")
SERVING_HOOKS = ("parse_input", "outputs", "format_outputs", "serving_inputs",
                 "probe_inputs")


def test_registry_keys_are_the_task_names_and_config_lists_the_trained_ones():
    assert all(name == task.name for name, task in TASKS.items())
    assert config_module.TASKS == tuple(n for n, t in TASKS.items() if t.trainable)
    assert set(TASKS) == {"translation", "classification", "timeseries", "image"}
    for task in TASKS.values():
        assert issubclass(task, Task) and task.__bases__ == (Task,)  # flat
        assert set(task.datasets) <= set(config_module.DATASETS)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_fills_in_its_hooks(name):
    """A trained task fills in the training hooks; every task has a serving
    side (`Task.serving`) that fills in the serving hooks."""
    task = TASKS[name]
    hooks = TRAINING_HOOKS if task.trainable else ()
    missing = [h for h in hooks + ("serving",) if getattr(task, h) is getattr(Task, h)]
    assert missing == [], f"{name} leaves {missing} to the base"
    serving = type(task().serving())
    missing = [h for h in SERVING_HOOKS if getattr(serving, h) is getattr(Serving, h)]
    assert missing == [], f"{name}'s {serving.__name__} leaves {missing} to the base"


def test_get_task_is_the_lookup_and_holds_assets():
    with pytest.raises(ValueError, match=r"task must be one of .*received task='summarization'"):
        get_task("summarization")
    first, second = get_task("classification", label_names=["neg", "pos"]), get_task("classification")
    assert first is not second and first.label_names == ["neg", "pos"]
    assert second.label_names is None and second.tokenizer is None


@pytest.mark.parametrize("name", [n for n, t in TASKS.items() if t.trainable])
def test_recipe_defaults_name_config_fields(name):
    defaults = get_task(name).recipe_defaults()
    fields = {f.name for f in dataclasses.fields(TrainingConfig)}
    assert set(defaults) <= fields and "weight_decay" in defaults
    config = TrainingConfig(task=name, dataset=get_task(name).datasets[0])
    assert adaptive.resolve(config, get_task(config.task), 64, 512, 100).weight_decay == defaults["weight_decay"]


def test_task_only_fields_are_refused_where_unused():
    series = dict(patch_length=4, patch_stride=1, standardize_series=True,
                  series_level_features=True)
    stem = dict(series_stem="random_kernels", stem_windows=4, stem_kernel_features=336)
    text = dict(ngram_widths=(3, 4), pooling="max", min_word_count=2, cross_fit=True,
                char_ngram_buckets=64, model="text_cnn")
    both = dict(ensemble_size=3, mixup_alpha=0.4, num_classes=3)  # the two classifier tasks
    translation = dict(source_language="fr", target_language="de", tokens_per_batch=512,
                       eval_sentences=10, beam_size=2, length_penalty=1.0, num_examples=1)
    assert set(TASK_FIELDS) == {*series, *stem, *text, *both, *translation}
    TrainingConfig(task="timeseries", dataset="ucr", **both, **series).validate()
    TrainingConfig(task="timeseries", dataset="ucr", **both, **stem).validate()
    TrainingConfig(task="classification", dataset="sst2", **both, **text).validate()
    TrainingConfig(task="translation", dataset="toy", **translation).validate()
    refused = [("translation", "toy", {**series, **stem, **text, **both}),
               ("classification", "sst2", {**series, **stem, **translation}),
               ("timeseries", "ucr", {**text, **translation})]
    for name, dataset, fields in refused:
        for field, value in fields.items():
            with pytest.raises(ValueError, match=re.escape(f"{field}={value!r} with task='{name}'")):
                TrainingConfig(task=name, dataset=dataset, **{field: value}).validate()


def test_the_text_model_is_named_in_the_config():
    """`model` picks the text classifier by name: an unknown name is refused
    naming the field and the allowed values; the text presets name
    "text_cnn" and set no field of the Transformer's encoder; "transformer"
    without encoder blocks says to name "text_cnn" instead."""
    with pytest.raises(ValueError, match=re.escape(
            "`model` must be one of ['transformer', 'text_cnn']; received model='cnn'")):
        TrainingConfig(task="classification", dataset="sst2", model="cnn").validate()
    for name, options in (("sst2", []), ("trec", []),
                          ("text_classification", ['train_files=["x.txt"]'])):
        config = load_config(name, options)
        assert config.model == "text_cnn"
        assert set(config.model_overrides) == {"hidden_dim", "dropout"}, name

    task = get_task("classification")
    task.tokenizer = type("Tokenizer", (), {"vocabulary_size": 16})()
    data = TaskData((["a"], [0]), (["a"], [0]), (["a"], [0]), label_names=["x", "y"])
    config = TrainingConfig(task="classification", dataset="trec", ensemble_size=1,
                            model_overrides={"hidden_dim": 8, "num_heads": 2})
    assert isinstance(task.build_model(config.replace(model="text_cnn"), data),
                      TextCNNClassifier)
    model = task.build_model(config, data)
    assert isinstance(model, TransformerClassifier) and isinstance(model.stem, TokenStem)
    with pytest.raises(ValueError, match=r'num_layers=0\. .*"model": "text_cnn"'):
        task.build_model(config.replace(model_overrides={"num_layers": 0}), data)


def test_classifier_losses_take_the_config_label_smoothing(rng):
    """`label_smoothing` reaches the text and series classifiers' losses: on
    the same logits, eps = 0.2 gives the smoothed target's cross-entropy and
    eps = 0 the plain one (text takes class ids, series one-hot labels)."""
    logits = rng.standard_normal((4, 3)).astype(np.float32)
    ids = np.array([0, 2, 1, 1])
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    for eps in (0.0, 0.2):
        target = (1 - eps) * np.eye(3)[ids] + eps / 3
        expected = -(target * log_p).sum(-1).mean()
        for name, labels in (("classification", ids), ("timeseries", np.eye(3)[ids])):
            config = TrainingConfig(task=name, dataset=get_task(name).datasets[0],
                                    label_smoothing=eps)
            loss, _ = get_task(name).loss_and_metrics(config)
            np.testing.assert_allclose(float(loss(labels, logits)), expected, rtol=1e-5)


def test_text_task_with_one_class_output_trains_a_sigmoid(rng):
    """`num_classes=1` gives the text task one sigmoid logit for two classes:
    binary cross-entropy (smoothed towards eps/2 and 1 - eps/2) and accuracy
    at probability 0.5.  A softmax loss over one logit is 0 whatever the
    weights: before this, such a run trained nothing, silently."""
    task = get_task("classification")
    logits = rng.standard_normal((6, 1)).astype(np.float32)
    ids = np.array([0, 1, 1, 0, 1, 0])
    for eps in (0.0, 0.2):
        config = TrainingConfig(task="classification", dataset="sst2", num_classes=1,
                                label_smoothing=eps)
        loss, (accuracy,) = task.loss_and_metrics(config)
        target = ids * (1 - eps) + eps / 2
        p = 1 / (1 + np.exp(-logits[:, 0]))
        expected = -(target * np.log(p) + (1 - target) * np.log(1 - p)).mean()
        np.testing.assert_allclose(float(loss(ids, logits)), expected, rtol=1e-5)
        accuracy.update_state(ids, logits)
        assert float(accuracy.result()) == pytest.approx(np.mean((logits[:, 0] > 0) == ids))
    # And a one-logit classifier learns two separable sentences with it.
    config = TrainingConfig(task="classification", dataset="sst2", num_classes=1)
    loss, metrics = task.loss_and_metrics(config)
    tokens = np.array([[5, 6, 7, 0], [8, 9, 10, 0]] * 4, "int32")
    labels = np.array([0, 1] * 4, "int32")
    model = TextCNNClassifier(num_classes=1, vocabulary_size=16, hidden_dim=8, ngram_widths=())
    model.compile(keras.optimizers.Adam(0.05), loss, metrics=metrics)
    history = model.fit(tokens, labels, batch_size=8, epochs=20, verbose=0).history
    assert history["loss"][-1] < 0.5 * history["loss"][0], history["loss"]
    assert history["accuracy"][-1] == 1.0


def test_a_given_num_classes_must_hold_the_data_classes():
    """`num_classes` below the classes found (or 1 for other than two) is a
    clear error naming it, not labels out of range in the loss."""

    task = get_task("classification")
    task.tokenizer = type("Tokenizer", (), {"vocabulary_size": 16})()
    three = TaskData((["a"], [0]), (["a"], [0]), (["a"], [0]), label_names=["x", "y", "z"])
    base = TrainingConfig(task="classification", dataset="trec", model="text_cnn",
                          model_overrides={"hidden_dim": 8}, ensemble_size=1)
    for bad in (1, 2):
        with pytest.raises(ValueError, match=f"num_classes={bad}"):
            task.build_model(base.replace(num_classes=bad), three)
    for good, outputs in ((0, 3), (3, 3), (4, 4)):
        model = task.build_model(base.replace(num_classes=good), three)
        assert model.num_classes == outputs


def _parallel_files(directory, count):
    paths = [directory / "train.src", directory / "train.tgt"]
    for path, prefix in zip(paths, "st", strict=True):
        path.write_text("".join(f"{prefix}{i}\n" for i in range(count)), encoding="utf-8")
    return paths


def test_translation_files_without_valid_files_hold_out_one_pair_in_50(tmp_path):
    task = get_task("translation")
    src, tgt = _parallel_files(tmp_path, 200)
    config = TrainingConfig(dataset="files", train_files=(str(src), str(tgt)))
    data = task.load_data(config, tmp_path)
    assert data.valid == (["s0", "s50", "s100", "s150"], ["t0", "t50", "t100", "t150"])
    assert data.test == data.valid  # no test_files either
    assert len(data.train[0]) == 196 and not set(data.train[0]) & set(data.valid[0])
    assert all(s[1:] == t[1:] for s, t in zip(*data.train, strict=True))  # still aligned
    # Given valid files are used as they are, and the training pairs all train.
    given = task.load_data(config.replace(valid_files=(str(src), str(tgt))), tmp_path)
    assert len(given.train[0]) == len(given.valid[0]) == 200
    assert given.test == given.valid  # read once, tested on without test_files
    # A corpus too small to spare pairs validates on its training pairs.
    small = _parallel_files(tmp_path, 99)
    tiny = task.load_data(config.replace(train_files=tuple(map(str, small))), tmp_path)
    assert tiny.train == tiny.valid and len(tiny.valid[0]) == 99
    # At most 1000 pairs validate.
    train, valid = held_out_pairs(([str(i) for i in range(100_000)],) * 2)
    assert len(valid[0]) == 1000 and len(train[0]) + len(valid[0]) == 100_000


def test_text_files_without_valid_files_hold_out_one_sentence_in_10(tmp_path):
    """A text classifier given only a training file selects its epochs on
    sentences it does not train on (it validated on its training text)."""
    task = get_task("classification")

    def write(name, count):
        path = tmp_path / name
        path.write_text("".join(f"{i % 3}\tword{i} more\n" for i in range(count)))
        return str(path)

    config = TrainingConfig(task="classification", dataset="files",
                            train_files=(write("train.tsv", 200),))
    data = task.load_data(config, tmp_path)
    assert data.valid[0] == [f"word{i} more" for i in range(0, 200, 10)]
    assert list(data.valid[1]) == [i % 3 for i in range(0, 200, 10)]
    assert len(data.train[0]) == 180 and not set(data.train[0]) & set(data.valid[0])
    assert data.test == data.valid  # no test_files either
    # Given files are used as they are, and every training sentence trains.
    given = task.load_data(config.replace(valid_files=(write("v.tsv", 30),),
                                          test_files=(write("t.tsv", 40),)), tmp_path)
    assert len(given.train[0]) == 200 and len(given.valid[0]) == 30
    assert len(given.test[0]) == 40
    held = task.load_data(config.replace(test_files=(write("t.tsv", 40),)), tmp_path)
    assert len(held.valid[0]) == 20 and len(held.test[0]) == 40
    # A file too small to spare sentences validates on its training text.
    tiny = task.load_data(config.replace(train_files=(write("tiny.tsv", 99),)), tmp_path)
    assert tiny.valid[0] == tiny.train[0] and len(tiny.train[0]) == 99


def test_text_task_with_min_word_count_learns_whole_words(tmp_path):
    """`min_word_count=2`: the vocabulary is the training words seen twice,
    and a word seen once (in training or only in the test) is one [UNK]."""
    task = get_task("classification")
    lines = ["0\tthe cat sat", "1\tthe dog ran", "0\ta cat ran", "1\tzebra dog"] * 30
    lines += ["0\tonce upon", "0\tonce upon", "1\tscatter upending"]  # seen once in training
    path = tmp_path / "train.tsv"
    path.write_text("".join(line + "\n" for line in lines))
    config = TrainingConfig(task="classification", dataset="files", train_files=(str(path),),
                            min_word_count=2)
    data = task.load_data(config, tmp_path)
    task.prepare(config, data, tmp_path, write=False)
    vocabulary = task.tokenizer.vocabulary
    assert set(vocabulary[4:]) == {"the", "cat", "sat", "dog", "ran", "a", "zebra"}
    ids = task.tokenizer.tokenize(tf.constant(["the zebra upon scattered"])).to_list()[0]
    assert [vocabulary[i] for i in ids] == ["the", "zebra", "[UNK]", "[UNK]"]
    # Word pieces (the default) would cut the unseen word into known pieces.
    task.prepare(config.replace(min_word_count=0), data, tmp_path, write=False)
    pieces = task.tokenizer.tokenize(tf.constant(["scattered"])).to_list()[0]
    assert len(pieces) > 1 and 1 not in pieces
    with pytest.raises(ValueError, match=re.escape("min_word_count=-1")):
        config.replace(min_word_count=-1)


def test_text_ensemble_size_follows_the_training_set_size():
    """A null `ensemble_size` gives five classifiers up to 10,000 training
    sentences and one above; a size the user gives is kept."""
    from training.tasks import text_classification as text

    task = get_task("classification")

    def resolved(count, ensemble_size=None):
        split = (["a b"] * count, np.zeros(count, "int32"))
        config = TrainingConfig(task="classification", dataset="sst2",
                                ensemble_size=ensemble_size)
        return task.resolve_config(config, TaskData(split, split, split, ["0"])).ensemble_size

    assert text.ENSEMBLE_MAX_SENTENCES == 10_000 and text.ENSEMBLE_SIZE == 5
    assert resolved(6_920) == resolved(10_000) == 5
    assert resolved(10_001) == 1
    assert resolved(6_920, ensemble_size=1) == 1 and resolved(20_000, ensemble_size=3) == 3


def test_final_decoding_share_is_reference_pieces_over_hypothesis_pieces():
    """A budgeted run keeps time for decoding the test set with the model it
    will end with: one that writes twice the references' pieces is planned
    at half today's decoding time, never below the floor, never above 1."""
    from training.text.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary

    references = ["a dog runs on the grass", "two men play football", "a girl sings"]
    tokenizer = WordPieceTokenizer(learn_wordpiece_vocabulary(references * 5, 60))
    assert final_length_share(tokenizer, references, references) == 1.0
    twice = [f"{r} {r}" for r in references]
    assert final_length_share(tokenizer, twice, references, floor=0.1) == pytest.approx(0.5)
    assert final_length_share(tokenizer, [" ".join([r] * 4) for r in references],
                              references, floor=0.5) == 0.5
    assert final_length_share(tokenizer, ["a", "men", "sings"], references) == 1.0
    assert final_length_share(tokenizer, ["", "", ""], references) == 1.0


@pytest.mark.parametrize(
    "name, dataset, match",
    [("translation", "sst2", "not a translation dataset"),
     ("classification", "toy", "not a text classification dataset")],
)
def test_a_dataset_of_another_task_is_refused(name, dataset, match, tmp_path):
    config = TrainingConfig(task=name, dataset=dataset)
    with pytest.raises(ValueError, match=match):
        get_task(name).load_data(config, tmp_path)


def test_image_task_is_not_trained():
    with pytest.raises(ValueError, match="task='image' is not trained"):
        get_task("image").load_data(TrainingConfig(), "unused")


def test_series_lines_parse_to_steps_and_features():
    task = get_task("timeseries").serving()
    np.testing.assert_array_equal(task.parse_input("1, 2 3\t4"), [[1], [2], [3], [4]])
    np.testing.assert_array_equal(task.parse_input("1,2; 3 4;"), [[1, 2], [3, 4]])
    assert task.parse_input([0.5, 1.5]).shape == (2, 1)
    assert task.parse_input(np.zeros((3, 2))).dtype == np.float32
    missing = task.parse_input("nan 1 ?")  # missing values are NaN
    assert missing.shape == (3, 1) and np.isnan(missing[[0, 2], 0]).all()
    for bad in ("1 two 3", "", "1,2; 3", "nan ?", "inf 1"):
        with pytest.raises(ValueError, match="series"):
            task.parse_input(bad)


def test_text_inputs_are_strings():
    task = get_task("classification").serving()
    assert task.parse_input(b"caf\xc3\xa9") == "café" and task.parse_input("") == ""
    with pytest.raises(ValueError, match="must be a string; received int"):
        task.parse_input(3)
    with pytest.raises(ValueError, match="image arrays"):
        get_task("image").serving().parse_input("a picture")


def test_classifier_lines_give_the_label_and_its_probability():
    task = get_task("classification").serving()
    softmax = {"probabilities": np.array([[0.2, 0.8], [0.9, 0.1]], np.float32),
               "labels": np.array([b"pos", b"neg"], dtype=object)}
    assert task.format_outputs(softmax) == ["pos\t0.8000", "neg\t0.9000"]
    sigmoid = {"probabilities": np.array([[0.7], [0.25]], np.float32),
               "labels": np.array([b"yes", b"no"], dtype=object)}
    assert get_task("timeseries").serving().format_outputs(sigmoid) == ["yes\t0.7000", "no\t0.7500"]
    translations = {"translations": np.array([b"zwei", "über".encode()], dtype=object)}
    assert get_task("translation").serving().format_outputs(translations) == ["zwei", "über"]


def test_beam_size_is_for_translation_and_a_saved_model_has_one_beam_width():
    translation = get_task("translation").serving()
    assert translation.signature_name(1) == "serving_default"
    assert translation.signature_name(4) == "translate_beam"
    with pytest.raises(ValueError, match="beam_size=3"):
        translation.signature_name(3)
    with pytest.raises(ValueError, match="beam_size must be a positive integer; received 0"):
        translation.check_beam_size(0)
    with pytest.raises(ValueError, match="beam_size=2 with task='classification'"):
        get_task("classification").serving().signature_name(2)


def test_batch_tokens_count_what_the_learning_rate_scales_with():
    config = TrainingConfig(task="timeseries", dataset="ucr", patch_length=4)
    ids = tf.constant([[5, 6, 0], [7, 0, 0]])
    assert get_task("translation").batch_tokens(config, None, ids) == 3
    assert get_task("classification").batch_tokens(config, ids, None) == 3
    series = tf.zeros((2, 10, 1))
    assert get_task("timeseries").batch_tokens(config, series, None) == 2 * 3  # ceil(10 / 4)
    overlapping = config.replace(patch_stride=2)
    assert get_task("timeseries").batch_tokens(overlapping, series, None) == 2 * 4  # 0,2,4,6


@pytest.mark.parametrize("same_key", [True, False], ids=["same_key", "masked"])
def test_batches_keep_order_and_unmasked_batches_share_one_length(same_key):
    """Series are masked (NaN-padded) and share batches of any lengths, sorted
    by length; a task whose inputs are not (`same_key_batches`) keeps one."""
    task = get_task("timeseries").serving()
    assert not task.same_key_batches
    task.same_key_batches = same_key
    lengths = [5, 3, 5, 5, 3, 4]
    examples = [np.full((n, 1), i, np.float32) for i, n in enumerate(lengths)]
    seen = []

    def answer(batch):
        seen.append([len(x) for x in batch])
        ids = [float(x[0, 0]) for x in batch]
        return {"probabilities": np.array([[0.5, 0.5]] * len(batch), np.float32),
                "labels": np.array([str(int(i)).encode() for i in ids], dtype=object)}

    lines = answer_in_batches(task, examples, 2, answer)
    assert [line.split("\t")[0] for line in lines] == [str(i) for i in range(len(lengths))]
    assert all(len(b) <= 2 for b in seen)
    assert all(len(set(b)) == 1 for b in seen) == same_key
    assert sum(seen, []) == sorted(lengths)
    with pytest.raises(ValueError, match="batch_size must be a positive integer; received 0"):
        answer_in_batches(task, examples, 0, answer)


def test_inputs_come_from_arguments_a_file_or_standard_input(tmp_path):
    assert read_inputs(["a b", ""]) == ["a b", ""]
    path = tmp_path / "in.txt"
    path.write_bytes("eins\r\n\nzwei über\n".encode())
    assert read_inputs(input_file=str(path)) == ["eins", "", "zwei über"]
    assert read_inputs(stdin=io.StringIO("1 2 3\n4 5 6")) == ["1 2 3", "4 5 6"]
    assert read_inputs(input_file="-", stdin=io.StringIO("")) == []
    with pytest.raises(ValueError, match="not both"):
        read_inputs(["x"], input_file=str(path))


def test_pipeline_and_exporters_do_not_branch_on_task_names():
    """The acceptance check of the Task design: no task name outside training/tasks/."""
    import cli.main_job
    import export.saved_model
    import export.tflite
    import export.verify
    import training.runs.predict
    import training.runs.run_dir
    import training.train

    modules = (training.train, training.runs.run_dir, training.runs.predict, cli.main_job,
               export.saved_model, export.tflite, export.verify)
    for module in modules:
        source = inspect.getsource(module)
        for name in TASKS:
            assert f'== "{name}"' not in source and f'!= "{name}"' not in source, module


def test_predict_errors_are_one_error_line(capsys, tmp_path):
    from cli import training_commands

    assert training_commands.main(["predict", "--run-dir", str(tmp_path / "none"), "hello"]) == 2
    assert "model.keras" in capsys.readouterr().err
    argv = ["predict", "--saved-model", str(tmp_path), "--input", "in.txt", "hello"]
    assert training_commands.main(argv) == 2
    assert "not both" in capsys.readouterr().err


def test_each_trained_task_names_the_options_class_the_config_uses():
    from training.tasks.options import OPTIONS

    assert {n: t.options for n, t in TASKS.items() if t.trainable} == OPTIONS


def _resolve(config, *sizes):
    """`adaptive.resolve` for the config's own task."""
    return adaptive.resolve(config, get_task(config.task), *sizes)


def test_a_text_classifiers_peak_does_not_fall_with_short_sentences():
    """Its loss is one term per sentence: batches of short questions and of
    long reviews get the same peak; a translation batch of few target tokens
    gets a smaller one."""
    text = TrainingConfig(task="classification")
    peaks = {tokens: _resolve(text, 128, tokens, 1000).peak_learning_rate
             for tokens in (96, 343, 668, 4096)}
    assert list(peaks.values()) == pytest.approx([1e-3 * math.sqrt(2)] * 4)
    assert _resolve(text, 128, 343, 1000).batch_tokens == 343  # still recorded
    translation = TrainingConfig(task="translation")
    assert _resolve(translation, 128, 343, 1000).peak_learning_rate == pytest.approx(
        1e-3 * math.sqrt(2) * math.sqrt(343 / 1024))
    # A given peak wins either way.
    given = text.replace(learning_rate=3e-4)
    assert _resolve(given, 128, 343, 1000).peak_learning_rate == 3e-4


def test_resolve_fills_only_what_is_unset():
    auto = _resolve(TrainingConfig(task="translation"), 256, 4096, 1000)
    assert auto.peak_learning_rate == pytest.approx(1e-3)
    assert auto.warmup_steps == 100 and auto.weight_decay == 1e-4
    given = TrainingConfig(learning_rate=3e-4, warmup_steps=50, weight_decay=0.0)
    values = _resolve(given, 256, 4096, 1000)
    assert (values.peak_learning_rate, values.warmup_steps, values.weight_decay) == (
        3e-4, 50, 0.0)
    paper = _resolve(TrainingConfig(schedule="paper"), 512, 25000, 100000)
    assert paper.peak_learning_rate == pytest.approx(512**-0.5 * 4000**-0.5)
    assert _resolve(TrainingConfig(task="classification"), 64, 512, 100).weight_decay == 0.01
