"""Cross-fitted ensembles: member i leaves out fold i and is validated on it.

Per-member sample weights (`ClassifierEnsemble`), their column in the data
pipeline, the text task's folds (`cross_fit`), the out-of-fold score, and a
run in which a member provably never learns the labels it validates on.
"""

import json
import re
import time
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.models import (
    ClassifierEnsemble,
    TextCNNClassifier,
)
from training.config import TrainingConfig, load_config
from training.pipeline import datasets
from training.serving.inputs import token_ids
from training.task_models import TextClassifier
from training.tasks import get_task
from training.tasks.classifiers import LearnedNothingWarning, OutOfFold
from training.train import train


def _member(name, num_classes=3, mixup_alpha=0.0):
    return TextCNNClassifier(
        num_classes=num_classes, vocabulary_size=20, hidden_dim=8, dropout=0.0, max_sequence_length=8, ngram_widths=(2, 3),
        pooling="max", mixup_alpha=mixup_alpha, name=name,
    )


def _ensemble(size=2, mixup_alpha=0.0):
    model = ClassifierEnsemble([_member(f"m{i}", mixup_alpha=mixup_alpha) for i in range(size)])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _task_model(ensemble, loss=None, metrics=None):
    """The ensemble in the task model a run scores (`OutOfFold` and the task's
    hooks take the run's task model), compiled with the ensemble's loss."""
    model = TextClassifier(ensemble)
    model.compile(loss=loss or ensemble.loss, metrics=metrics or [], run_eagerly=True)
    return model


def _tokens(batch=6, seed=0):
    ids = np.random.default_rng(seed).integers(3, 20, (batch, 6)).astype("int32")
    ids[0, 4:] = 0
    return ids


def _cross_entropy(logits, y):
    z = logits - logits.max(-1, keepdims=True)
    return np.log(np.exp(z).sum(-1)) - z[np.arange(len(y)), y]


def test_per_member_weights_give_member_i_column_i():
    model = _ensemble()
    x, y = _tokens(), np.array([0, 1, 2, 0, 1, 2])
    w = np.array([[1, 0], [1, 1], [0, 1], [1, 1], [0, 0], [1, 1]], "float32")
    answer = model(x, training=True)  # (B, 3); the members' (B, 2, 3) kept for the loss
    kept = model.step_outputs.values
    member_logits = np.asarray(kept[0])
    expected = np.mean([(w[:, i] * _cross_entropy(member_logits[:, i], y)).mean()
                        for i in range(2)])
    got = float(model.compute_loss(x, y, answer, sample_weight=w, training=True))
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # (B,) weights still weigh every member alike.
    v = w[:, 0]
    expected = np.mean([(v * _cross_entropy(member_logits[:, i], y)).mean() for i in range(2)])
    model.step_outputs.keep(kept)  # as the same step's call would
    got = float(model.compute_loss(x, y, answer, sample_weight=v, training=True))
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    model.step_outputs.keep(kept)
    with pytest.raises(ValueError, match=re.escape("one column per member (2)")):
        model.compute_loss(x, y, answer, sample_weight=np.ones((6, 3), "float32"))


@pytest.mark.parametrize("mixup_alpha", [0.0, 0.4])
def test_a_member_gets_no_gradient_from_the_labels_it_leaves_out(mixup_alpha):
    """Member 0 leaves out rows 0-2: changing their labels leaves its
    gradients as they were, mixup partners included, while member 1's move."""
    model = _ensemble(mixup_alpha=mixup_alpha)
    x = _tokens()
    w = np.array([[0, 1]] * 3 + [[1, 1]] * 3, "float32")

    state = [v.numpy() for v in model.non_trainable_variables]  # the lam generator's

    def grads(y):
        for v, value in zip(model.non_trainable_variables, state, strict=True):
            v.assign(value)  # the same lam draws for both label sets
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x, y, model(x, training=True), sample_weight=w)
        grads = tape.gradient(loss, [m.trainable_variables for m in model.members])
        dense = lambda g, v: np.zeros(v.shape) if g is None else np.asarray(  # noqa: E731
            tf.convert_to_tensor(g))
        return [[dense(g, v) for g, v in zip(gs, m.trainable_variables, strict=True)]
                for gs, m in zip(grads, model.members, strict=True)]

    a = grads(np.array([0, 1, 2, 0, 1, 2]))
    b = grads(np.array([2, 2, 0, 0, 1, 2]))  # rows 0-2 relabelled
    for ga, gb in zip(a[0], b[0], strict=True):
        np.testing.assert_allclose(ga, gb, atol=1e-7)
    assert any(not np.allclose(ga, gb) for ga, gb in zip(a[1], b[1], strict=True))


def test_training_metrics_see_every_example_under_per_member_weights():
    model = ClassifierEnsemble([_member("a"), _member("b")])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    x = _tokens()
    predicted = np.asarray(model(x)).argmax(-1)
    y = np.concatenate([predicted[:3], (predicted[3:] + 1) % 3])  # half right, row 0 right
    w = np.zeros((6, 2), "float32")
    w[0] = 1.0  # weighted by either column, the accuracy would be 1.0
    logs = model.train_on_batch(x, y, sample_weight=w, return_dict=True)
    assert logs["accuracy"] == pytest.approx(0.5)


def test_the_pipeline_keeps_each_example_s_weights_through_shuffles():
    class Tok:  # sentence "s<j>" -> ids [j + 1]
        def tokenize(self, text):
            ids = tf.strings.to_number(tf.strings.substr(text, 1, 5), tf.int32) + 1
            return tf.RaggedTensor.from_tensor(ids[:, None])

    n = 23
    texts = [f"s{j}" for j in range(n)]
    weights = np.stack([np.arange(n) % 3 != i for i in range(3)], 1).astype("float32")
    stream = datasets.make_classification_dataset(
        texts, np.arange(n) % 2, tokenizer=Tok(), batch_size=4, shuffle=True, repeat=True,
        sample_weight=weights, seed=3)
    seen = []
    for x, y, w in stream.take(12):
        j = x["token_ids"].numpy()[:, 0] - 1
        np.testing.assert_array_equal(w.numpy(), weights[j])
        np.testing.assert_array_equal(y.numpy(), j % 2)
        seen += list(j)
    assert set(seen) == set(range(n))
    with pytest.raises(ValueError, match=re.escape("received shape (22, 3)")):
        datasets.make_classification_dataset(texts, np.arange(n) % 2, tokenizer=Tok(),
                                             sample_weight=weights[:-1])
    with pytest.raises(ValueError, match="token inputs only"):
        datasets.make_classification_dataset(np.zeros((n, 4)), np.arange(n) % 2,
                                             sample_weight=weights)


def _write(path, count, classes=3):
    words = ["red", "green", "blue", "cyan", "gold"]
    lines = []
    for j in range(count):
        digits = [(j // 5**p) % 5 for p in range(3)]  # a distinct sentence per j
        lines.append(f"{j % classes}\t{' '.join(words[d] for d in digits)} item\n")
    path.write_text("".join(lines))
    return str(path)


def test_text_task_cross_fits_only_an_ensemble_without_a_validation_file(tmp_path):
    task = get_task("classification")
    train_file = _write(tmp_path / "train.tsv", 120)
    config = TrainingConfig(task="classification", dataset="files", train_files=(train_file,),
                            ensemble_size=3, cross_fit=True)
    data = task.load_data(config, tmp_path)
    assert task.cross_fit_members == 3
    texts, labels, folds = data.train
    assert len(texts) == 120 and list(folds) == [j % 10 for j in range(120)]
    valid_texts, _, valid_folds = data.valid
    assert valid_texts == [t for j, t in enumerate(texts) if j % 10 < 3]
    assert set(valid_folds) == {0, 1, 2}
    assert task.data_defaults(config.replace(ensemble_size=None), data)["ensemble_size"] == 5
    # The training batches carry member i's weight 0 exactly on fold i.
    task.prepare(config, data, tmp_path, write=False)
    index = {t: j for j, t in enumerate(texts)}
    ids = {tuple(r[r > 0]): index[t] for t, r in zip(
        texts, task.tokenizer.tokenize(tf.constant(texts)).to_tensor().numpy(), strict=True)}
    assert len(ids) == 120  # every sentence tokenizes apart
    for x, _, w in task.make_dataset(config, data.train, shuffle=True, training=True):
        j = np.array([ids[tuple(r[r > 0])] for r in x.numpy()])
        np.testing.assert_array_equal(w.numpy(), (j[:, None] % 10 != np.arange(3)))
    # Validation batches are plain (inputs, labels).
    assert len(next(iter(task.make_dataset(config, data.valid)))) == 2
    # No cross-fitting: one member, or cross_fit off.
    for other in (config.replace(ensemble_size=1), config.replace(cross_fit=False)):
        plain = task.load_data(other, tmp_path)
        assert task.cross_fit_members is None and len(plain.train) == 2
    # More members than ten folds: one fold each.
    many = task.load_data(config.replace(ensemble_size=12), tmp_path)
    assert list(many.train[2][:13]) == list(range(12)) + [0] and len(many.valid[0]) == 120


def test_a_cross_fitted_validation_file_joins_the_training_pool(tmp_path):
    task = get_task("classification")
    train_file = _write(tmp_path / "train.tsv", 120)
    valid_file = tmp_path / "valid.tsv"
    valid_file.write_text("".join(f"{j % 3}\tspare words {j} here\n" for j in range(25)))
    test_file = _write(tmp_path / "test.tsv", 15)
    config = TrainingConfig(task="classification", dataset="files", train_files=(train_file,),
                            valid_files=(str(valid_file),), test_files=(test_file,),
                            ensemble_size=3, cross_fit=True)
    data = task.load_data(config, tmp_path)
    assert task.cross_fit_members == 3
    texts, labels, folds = data.train
    # The training sentences, then the validation file's, folded as one pool.
    assert len(texts) == 145 and texts[120:] == [f"spare words {j} here" for j in range(25)]
    assert list(labels[120:]) == [j % 3 for j in range(25)]
    assert list(folds) == [j % 10 for j in range(145)]
    assert data.valid[0] == [t for j, t in enumerate(texts) if j % 10 < 3]
    assert len(data.test[0]) == 15 and len(data.test) == 2  # the test file still tests
    # The vocabulary is learned from the whole pool.
    task.prepare(config, data, tmp_path, write=False)
    assert "spare" in task.tokenizer.vocabulary
    # Not cross-fitted (cross_fit off, or one member): the file validates, apart.
    for other in (config.replace(cross_fit=False), config.replace(ensemble_size=1)):
        plain = task.load_data(other, tmp_path)
        assert task.cross_fit_members is None
        assert len(plain.train[0]) == 120 and len(plain.valid[0]) == 25


def test_out_of_fold_scores_each_example_by_the_member_that_left_it_out():
    model = _ensemble(size=3)
    x = _tokens(batch=9)
    y = np.array([0, 1, 2] * 3)
    folds = np.array([0, 1, 2, 2, 1, 0, 0, 0, 1])
    oof = OutOfFold(x, y, folds)
    logits = oof.logits(_task_model(model), batch_size=2)
    for i, member in enumerate(model.members):
        rows = folds == i
        np.testing.assert_allclose(logits[rows], np.asarray(member(x[rows])), rtol=1e-5,
                                   atol=1e-6)
    scores = oof.scores(_task_model(model))
    assert scores["accuracy"] == pytest.approx((logits.argmax(-1) == y).mean())
    assert scores["loss"] == pytest.approx(_cross_entropy(logits, y).mean(), rel=1e-5)
    assert oof(_task_model(model)) == scores["accuracy"]


def _stick(member, answer, num_classes=3):
    """Kills every hidden unit of `member`'s head, so that it always answers `answer`."""
    kernel, bias = member.head_hidden.get_weights()
    member.head_hidden.set_weights([-np.abs(kernel), np.full_like(bias, -1.0)])
    out_kernel, _ = member.head_output.get_weights()
    member.head_output.set_weights(
        [out_kernel, np.where(np.arange(num_classes) == answer, 5.0, 0.0).astype("float32")])


def test_out_of_fold_names_a_member_that_learned_nothing():
    """A member stuck at one answer (its head's hidden ReLUs all dead, as
    on MR with dropout 0.5) scores its fold's majority share, and the
    per-member figures show it, where the ensemble's accuracy hides it."""
    model = _ensemble(size=3)
    x = _tokens(batch=12)
    y = np.array([0, 1, 2, 0] * 3)
    folds = np.arange(12) % 3
    _stick(model.members[1], 1)
    scores = OutOfFold(x, y, folds).scores(_task_model(model))
    rows = folds == 1
    assert scores["member_accuracy"][1] == pytest.approx((y[rows] == 1).mean())
    for i in range(3):
        rows = folds == i
        predicted = np.asarray(model.members[i](x[rows])).argmax(-1)
        assert scores["member_accuracy"][i] == pytest.approx((predicted == y[rows]).mean(), abs=1e-4)
        assert scores["fold_majority"][i] == pytest.approx(np.bincount(y[rows]).max() / rows.sum(), abs=1e-4)
    assert scores["accuracy"] == pytest.approx(
        np.mean([scores["member_accuracy"][i] for i in range(3)]), abs=1e-4)  # equal folds


def test_a_member_no_better_than_its_folds_majority_is_named_in_a_warning():
    scores = {"member_accuracy": [0.81, 0.5, 0.62, None], "fold_majority": [0.5, 0.5, 0.6, 0.0]}
    with pytest.warns(LearnedNothingWarning, match=r"member 1 scores 0\.500 .*\(0\.500\).*model\.dropout") as caught:
        OutOfFold.warn_if_a_member_learned_nothing(scores)
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        OutOfFold.warn_if_a_member_learned_nothing({"member_accuracy": [0.51], "fold_majority": [0.5]})


def test_per_member_weights_beside_the_ensembles_answer_weigh_nothing():
    """Keras' JAX trainer builds a model by tracing its loss on the inference
    answer `(B, K)`: per-member weights `(B, k)` there judge every example,
    as the metrics do, instead of failing to broadcast."""
    model = _ensemble()
    x, y = _tokens(), np.array([0, 1, 2, 0, 1, 2])
    w = np.array([[1, 0], [1, 1], [0, 1], [1, 1], [0, 0], [1, 1]], "float32")
    answer = np.asarray(model(x))  # (B, K)
    got = float(model.compute_loss(x, y, answer, sample_weight=w, training=False))
    np.testing.assert_allclose(got, _cross_entropy(answer, y).mean(), rtol=1e-5)


def test_a_member_that_learned_nothing_leaves_the_answer_unless_all_did():
    model = _ensemble(size=3)
    x = _tokens(batch=12)
    scores = {"member_accuracy": [0.75, 0.5, 0.625], "fold_majority": [0.5, 0.5, 0.5]}
    assert OutOfFold.learned_nothing(scores) == [1]
    with pytest.warns(LearnedNothingWarning, match=r"member 1 .*leaves it out") as caught:
        assert OutOfFold.exclude_members_that_learned_nothing(_task_model(model), scores) == [1]
    assert len(caught) == 1 and model.excluded_members == (1,)
    kept = np.stack([np.asarray(model.members[i](x)) for i in (0, 2)], 1)
    z = kept - kept.max(-1, keepdims=True)
    expected = (np.exp(z) / np.exp(z).sum(-1, keepdims=True)).mean(1)
    np.testing.assert_allclose(np.asarray(model.probabilities(model(x))), expected, atol=1e-6)
    # When every member learned nothing, leaving them all out is no answer: all stay.
    scores = {"member_accuracy": [0.5, 0.25, 0.5], "fold_majority": [0.5, 0.5, 0.5]}
    with pytest.warns(LearnedNothingWarning, match="averages it in") as caught:
        assert OutOfFold.exclude_members_that_learned_nothing(_task_model(model), scores) == []
    assert len(caught) == 3 and model.excluded_members == ()


def test_the_text_task_tests_without_a_member_that_learned_nothing(tmp_path):
    """The task's final evaluation leaves the stuck member out of the test
    answer (and says so in its metrics); the out-of-fold figures stay each
    member's own."""
    def write(path, count):  # the class is the first word's
        path.write_text("".join(f"{j % 3}\t{['red', 'green', 'blue'][j % 3]} {j % 7} item\n"
                                for j in range(count)))
        return str(path)

    task = get_task("classification")
    config = TrainingConfig(
        task="classification", dataset="files", train_files=(write(tmp_path / "a.tsv", 120),),
        test_files=(write(tmp_path / "t.tsv", 30),), ensemble_size=2, cross_fit=True,
        max_sequence_length=8, batch_size=8, ngram_widths=(2,), model_preset="tiny")
    data = task.load_data(config, tmp_path)
    task.prepare(config, data, tmp_path, write=False)
    config = task.resolve_config(config, data)
    keras.utils.set_random_seed(0)
    model = task.build_model(config, data)
    loss, metrics = task.loss_and_metrics(config)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss, metrics=metrics,
                  run_eagerly=True)  # no trace to wait for
    texts, labels = data.test
    ids = token_ids(task.tokenizer, texts, config.max_sequence_length)
    model.fit(ids, np.asarray(labels), epochs=10, batch_size=30, verbose=0)  # learns the word
    # Each task model compiled with metrics of its own (a compiled metric keeps its state).
    before = task.evaluate_test(config, _task_model(model, *task.loss_and_metrics(config)), data)
    _stick(model.members[1], 0)
    with pytest.warns(LearnedNothingWarning, match="member 1 .*leaves it out"):
        result = task.evaluate(config, _task_model(model, *task.loss_and_metrics(config)), data,
                               valid=None)
    assert result["excluded_members"] == [1] and model.excluded_members == (1,)
    alone = np.asarray(model.members[0](ids)).argmax(-1)
    assert result["test_accuracy"] == pytest.approx((alone == np.asarray(labels)).mean(), abs=1e-6)
    accuracy, majority = result["valid_member_accuracy"], result["valid_fold_majority"]
    assert accuracy[1] <= majority[1] and accuracy[0] > majority[0]
    assert set(before) <= set(result)


def test_out_of_fold_of_a_single_sigmoid_output():
    model = ClassifierEnsemble([_member(f"s{i}", num_classes=1) for i in range(2)])
    model.compile(loss=keras.losses.BinaryCrossentropy(from_logits=True))
    x, y = _tokens(batch=6), np.array([0, 1, 1, 0, 1, 0])
    folds = np.array([0, 1, 0, 1, 0, 1])
    oof = OutOfFold(x, y, folds)
    z = oof.logits(_task_model(model))[:, 0]
    scores = oof.scores(_task_model(model))
    assert scores["accuracy"] == pytest.approx(((z > 0) == y).mean())
    assert scores["loss"] == pytest.approx((np.logaddexp(0, z) - y * z).mean(), rel=1e-5)


def _run_config(train_file, extra=()):
    return load_config("tiny", [
        "task=classification", "dataset=files", f'train_files=["{train_file}"]',
        "batch_size=8", "max_sequence_length=8", "label_smoothing=0.0", "epochs=2",
        "ngram_widths=[2]", "pooling=max", "mixup_alpha=0.4", "ensemble_size=2",
        "cross_fit=true", "deterministic=true", "selection=last", *extra])


@pytest.mark.slow
def test_a_cross_fitted_member_never_learns_the_labels_it_validates_on(tmp_path):
    """Relabel fold 0 and train again: member 0 (which leaves fold 0 out)
    ends with the same weights, member 1 does not; the run reports the
    out-of-fold accuracy of the model it saved."""
    first = _write(tmp_path / "a.tsv", 120)
    lines = (tmp_path / "a.tsv").read_text().splitlines(keepends=True)
    relabelled = [f"{(int(line[0]) + 1) % 3}{line[1:]}" if j % 10 == 0 else line
                  for j, line in enumerate(lines)]
    (tmp_path / "b.tsv").write_text("".join(relabelled))
    weights = []
    for name, path in (("a", first), ("b", str(tmp_path / "b.tsv"))):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", LearnedNothingWarning)
            metrics = train(_run_config(path), tmp_path / name, verbose=0)
        # A warning names exactly the members no better than their fold's majority.
        named = {int(re.search(r"member (\d+) ", str(w.message)).group(1))
                 for w in seen if issubclass(w.category, LearnedNothingWarning)}
        assert named == {i for i, (a, m) in enumerate(zip(metrics["valid_member_accuracy"],
                                                          metrics["valid_fold_majority"],
                                                          strict=True))
                         if a <= m}
        model = keras.saving.load_model(tmp_path / name / "model.keras")  # the task model
        weights.append([m.get_weights() for m in model.backbone.members])
        task = get_task("classification")
        config = _run_config(path)
        data = task.load_data(config, tmp_path / name)
        task.prepare(config, data, tmp_path / name, write=False)
        model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        assert metrics["valid_accuracy"] == pytest.approx(
            task.out_of_fold(config, data)(model), abs=1e-6)
        # Each member's own fold, reported beside the ensemble's figure.
        assert len(metrics["valid_member_accuracy"]) == len(metrics["valid_fold_majority"]) == 2
        history = json.loads((tmp_path / name / "metrics.json").read_text())["history"]
        assert history["val_accuracy"][-1] == pytest.approx(metrics["valid_accuracy"], abs=1e-6)
        # No test file: the validation folds test, out-of-fold as well.
        assert metrics["test_accuracy"] == metrics["valid_accuracy"]
        assert metrics["test_loss"] == metrics["valid_loss"]
    for wa, wb in zip(weights[0][0], weights[1][0], strict=True):
        np.testing.assert_allclose(wa, wb, atol=1e-6)
    assert any(not np.allclose(wa, wb) for wa, wb in zip(weights[0][1], weights[1][1], strict=True))


class _Interrupt(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations) >= 6:
            raise KeyboardInterrupt("killed after 6 updates")


@pytest.mark.slow
def test_a_killed_cross_fitted_run_resumes_to_the_same_weights(tmp_path, monkeypatch):
    path = _write(tmp_path / "a.tsv", 120)
    config = _run_config(path, ["checkpoint_every_steps=3"])
    train(config, tmp_path / "whole", verbose=0)
    task_class = type(get_task("classification"))
    callbacks = task_class.callbacks
    monkeypatch.setattr(task_class, "callbacks",
                        lambda self, *a: [*callbacks(self, *a), _Interrupt()])
    with pytest.raises(KeyboardInterrupt):
        train(config, tmp_path / "killed", verbose=0)
    monkeypatch.undo()
    metrics = train(config, tmp_path / "killed", verbose=0)
    assert metrics["steps"] == 2 * 15  # 120 sentences, batches of 8, two epochs
    whole, resumed = (keras.saving.load_model(tmp_path / n / "model.keras")
                      for n in ("whole", "killed"))
    for a, b in zip(whole.get_weights(), resumed.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.slow
def test_a_cross_fitted_fit_makes_no_validation_pass_of_its_own(tmp_path, monkeypatch):
    """Keras' per-epoch pass of the whole ensemble over the validation folds
    was only ever replaced by the out-of-fold scores: without it the run
    ends with the same weights and the same per-epoch `val_*` history."""
    path = _write(tmp_path / "a.tsv", 120)
    config = _run_config(path)
    fit_passes = []
    evaluate = keras.Model.evaluate

    def counting(self, *args, **kwargs):
        fit_passes.append(bool(kwargs.get("_use_cached_eval_dataset")))
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(keras.Model, "evaluate", counting)
    lean = train(config, tmp_path / "lean", verbose=0)
    assert not any(fit_passes)
    task_class = type(get_task("classification"))
    monkeypatch.setattr(task_class, "fit_validates", lambda self, config: True)
    both = train(config, tmp_path / "both", verbose=0)
    assert sum(fit_passes) == 2  # the old way: one pass per epoch
    for key in ("val_accuracy", "val_loss"):
        assert len(lean["history"][key]) == 2
        np.testing.assert_allclose(lean["history"][key], both["history"][key], atol=1e-6)
    models = [keras.saving.load_model(tmp_path / n / "model.keras") for n in ("lean", "both")]
    for a, b in zip(*(m.get_weights() for m in models), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # Not cross-fitted: fit validates as before.
    assert get_task("classification").fit_validates(config)


class _Planned(Exception):
    pass


@pytest.mark.slow
def test_a_budgeted_cross_fitted_run_plans_no_validation_pass_per_epoch(tmp_path, monkeypatch):
    """Under a time budget, an epoch of a cross-fitted run is planned to cost
    its out-of-fold scores (timed, once), not the whole ensemble's pass over
    the validation folds, which its `fit` no longer makes; the end still
    keeps time for that pass (the test file's).  The ensemble's pass is made
    to take 2 s here (and checkpoint saves none): the old plan counted that
    pass in every epoch."""
    from training.loop import time_budget
    from training.recipe import budget

    evaluate, scores, planned = keras.Model.evaluate, OutOfFold.scores, []

    def slow_pass(self, *args, **kwargs):
        time.sleep(2.0)
        return evaluate(self, *args, **kwargs)

    def counted(self, model):
        planned.append("out_of_fold")
        return scores(self, model)

    def stop(seconds_left, seconds_per_step, steps_per_epoch, done_steps,
             seconds_per_validation, seconds_final, max_steps):
        planned.append((seconds_per_validation, seconds_final))
        raise _Planned

    monkeypatch.setattr(keras.Model, "evaluate", slow_pass)
    monkeypatch.setattr(OutOfFold, "scores", counted)
    monkeypatch.setattr(budget, "plan_total_steps", stop)
    monkeypatch.setattr(time_budget, "seconds_per_save", lambda checkpoint: 0.0)
    config = _run_config(_write(tmp_path / "a.tsv", 120), ["time_budget_minutes=10"])
    with pytest.raises(_Planned):
        train(config, tmp_path / "lean", verbose=0)
    assert planned[0] == "out_of_fold" and len(planned) == 2, planned  # timed once
    per_epoch, final = planned[1]
    assert per_epoch < 2.0 and final >= 5.0 + 3 * 2.0, planned
    # A task whose fit validates still plans the pass in every epoch.
    task_class = type(get_task("classification"))
    monkeypatch.setattr(task_class, "fit_validates", lambda self, config: True)
    planned.clear()
    with pytest.raises(_Planned):
        train(config, tmp_path / "both", verbose=0)
    assert planned[-1][0] >= 2.0, planned


@pytest.mark.parametrize("name", ["cross_fit", "standardize_series"])
def test_text_switches_must_be_booleans(name):
    with pytest.raises(ValueError, match=re.escape(f"{name}='yes'")):
        TrainingConfig(**{name: "yes"}).validate()
