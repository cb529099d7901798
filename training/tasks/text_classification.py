"""Text classification: labelled sentences -> the config's `model`, a `TextCNNClassifier` (the presets) or a `TransformerClassifier` on a token stem."""

import dataclasses
import time

import numpy as np

from keras_transformer.layers import CharNGramTokenStem, TokenStem
from keras_transformer.models import TextCNNClassifier
from training.data import readers, shards
from training.data.common import TaskData, require_file, resolve_data_dir
from training.pipeline import datasets, prepared, streaming
from training.recipe.plan import EvaluationPlan, FinalEvaluation
from training.recipe.series import ENSEMBLE_SIZE
from training.serving.inputs import token_ids
from training.serving.task_serving import ClassifierServing
from training.tasks import classifiers
from training.tasks.base import Task
from training.tasks.common import (
    learn_or_load_tokenizer,
    preset_config,
    stream_options,
    training_rows,
)
from training.tasks.options import TextClassificationOptions
from training.text.tokenizers import word_ids

#: Without a validation file every HOLD_OUT_EVERY-th training sentence
#: validates instead of training; a file of fewer than
#: HOLD_OUT_MIN_SENTENCES sentences validates on its training sentences.
HOLD_OUT_EVERY, HOLD_OUT_MIN_SENTENCES = 10, 100
#: A streamed training corpus without a validation file holds out at most
#: this many sentences (every HOLD_OUT_EVERY-th of its first shard's head).
HOLD_OUT_MAX = 5000

#: A null `ensemble_size` trains `ENSEMBLE_SIZE` classifiers (the series
#: task's five) on at most this many training sentences.
ENSEMBLE_MAX_SENTENCES = 10_000


def token_stem(m, vocabulary_size, char_ngram_buckets):
    """The input stem of the preset `m`: its words, with their character
    n-grams when `char_ngram_buckets` is set."""
    sizes = dict(max_sequence_length=m.max_sequence_length, positions=m.positions)
    if char_ngram_buckets:
        return CharNGramTokenStem(vocabulary_size, m.hidden_dim,
                                  char_ngram_buckets=char_ngram_buckets, **sizes)
    return TokenStem(vocabulary_size, m.hidden_dim, **sizes)


def default_ensemble_size(num_sentences):
    """`ENSEMBLE_SIZE` members for at most `ENSEMBLE_MAX_SENTENCES` training sentences, else 1."""
    return ENSEMBLE_SIZE if num_sentences <= ENSEMBLE_MAX_SENTENCES else 1


def _read_labelled(paths, encoding):
    """`readers.read_classification` of one file, or of several as one corpus
    (class names from all of them)."""
    if not isinstance(paths, list):
        return readers.read_classification(require_file(paths, "train file"), encoding=encoding)
    parts = [readers.read_classification(p, encoding=encoding) for p in paths]
    texts = [t for part in parts for t in part[0]]
    labels = [part[2][i] for part in parts for i in part[1]]
    ids, names = readers.label_ids(labels)
    return texts, ids, names


def _labelled_lines(lines, label_names=None):
    """(texts, ids, names) of sampled `label<TAB>text` lines; blank lines, and
    lines with an empty or unknown label, are left out (the stream names
    their file and line when it reaches them)."""
    pairs = [readers.split_label(line) for line in lines if line.strip()]
    pairs = [(label, text) for label, text in pairs
             if label and (label_names is None or label in label_names)]
    ids, names = readers.label_ids([label for label, _ in pairs], label_names)
    return [text for _, text in pairs], ids, names


@dataclasses.dataclass(frozen=True)
class CrossFitEvaluationPlan(EvaluationPlan):
    """A cross-fitted run's timings, made once while planning (seconds)."""

    seconds_out_of_fold: float  # the out-of-fold scores that end an epoch
    seconds_ensemble_pass: float  # the whole ensemble's pass the end still makes


class TextClassification(Task):
    """Sentence -> class, from a word-piece vocabulary learned on the training text.

    Data: `dataset="sst2"`, `"trec"` (every 10th training question
    validates) or `"files"` (`label<TAB>text` files, every training file
    read as one corpus; class names in the
    order `readers.read_classification` gives them; without
    `valid_files` every 10th training sentence validates, as on TREC, and
    without `test_files` the validation split tests).  Selection and
    test: accuracy.  The task name is the config's `"classification"`.

    With `cross_fit` and an ensemble of k, no sentence is held out from
    all members: a validation file, if any, joins the training sentences
    (after them), sentence j of the pool is in fold j % max(10, k), member
    i trains on every fold but i (per-member sample weights,
    `ClassifierEnsemble`), and the validation split is folds 0..k-1, each
    scored by the member that left it out (`OutOfFold`).
    """

    name = "classification"
    datasets = ("sst2", "trec", "files")
    #: Paths each files field holds where it is given (`TrainingConfig.validate`):
    #: any number of training files (read as one corpus), one of the others.
    file_counts = {"valid_files": (1,), "test_files": (1,)}
    options = TextClassificationOptions
    data_fields = ("ensemble_size",)
    #: k when the loaded data is cross-fitted for k members, else None.
    cross_fit_members = None
    #: One loss term per sentence: a batch of 32 short questions is no
    #: noisier than 32 long reviews, so the peak follows the width alone
    #: (2026-11-26: Kim's four other sets +0.3 mean test; TREC's ~343-token
    #: batches had cut it from 1.41e-3 to 8.2e-4).
    peak_scales_with_batch_tokens = False

    def recipe_defaults(self):
        return {"weight_decay": 0.01}  # small data: more decay than translation's

    def data_defaults(self, config, data):
        """A null `ensemble_size`: `ENSEMBLE_SIZE` members for at most
        `ENSEMBLE_MAX_SENTENCES` training sentences, else 1.

        On a few thousand sentences one classifier's test accuracy moves by
        2-3 points with its seed (TREC 0.834-0.868 over seeds 0-2); the
        mean of five independently initialised ones is both higher and
        steadier, for five times the compute of a run that takes minutes.
        """
        train = data.train
        count = train.num_examples if isinstance(train, shards.StreamedCorpus) else len(train[1])
        return {"ensemble_size": default_ensemble_size(count)}

    # --- data -------------------------------------------------------------------

    def load_data(self, config, run_dir):
        folder = resolve_data_dir(config.data_dir) / "sentence-classification"
        if config.dataset == "sst2":
            files = [folder / f"stsa.binary.{name}" for name in ("train", "dev", "test")]
        elif config.dataset == "trec":
            # No development split: every 10th training question validates
            # (for all members, or cross-fitted: below).
            files = [folder / "TREC.train.all", None, folder / "TREC.test.all"]
        elif config.dataset == "files":
            # Every training file is read, as one corpus.  Without
            # valid_files every 10th training sentence validates (or
            # cross-fitted), as on TREC; without test_files the validation
            # split tests.
            files = [list(config.train_files),
                     config.valid_files[0] if config.valid_files else None,
                     config.test_files[0] if config.test_files else None]
        else:
            raise ValueError(
                f"dataset={config.dataset!r} is not a text classification dataset; "
                "use sst2, trec or files."
            )
        train_file, valid_file, test_file = files
        summary = None
        if config.dataset == "files":
            columns, streamed = shards.stream_or_read([train_file], "train",
                                                      config.in_memory_limit_mb)
            if streamed or config.prepared_dir:
                data = self._streamed(config, columns, valid_file, test_file)
                if config.prepared_dir:
                    data.train = prepared.open_prepared(
                        config.prepared_dir, data.train,
                        self.prepared_settings(config, data.train, data.label_names))
                    data.summary = data.train.describe(config.in_memory_limit_mb)
                return data
            summary = shards.total_bytes(columns)
            train_file = columns[0][0] if len(columns[0]) == 1 else columns[0]
        texts, labels, names = _read_labelled(train_file, config.encoding)

        def ensemble(count):
            return config.ensemble_size or default_ensemble_size(count)

        if valid_file is not None and config.cross_fit and ensemble(len(texts)) > 1:
            # Cross-fitted, a validation file joins the training pool: every
            # labelled sentence trains all members but one, which validates on it.
            more, more_labels, _ = readers.read_classification(
                require_file(valid_file, "valid file"), label_names=names,
                encoding=config.encoding,
            )
            texts, labels = list(texts) + list(more), list(labels) + list(more_labels)
            valid_file = None  # pooled: the validation split is out-of-fold (below)
        splits = [(texts, np.asarray(labels, "int32"))]
        members = ensemble(len(texts))
        self.cross_fit_members = None
        if valid_file is None and len(texts) < HOLD_OUT_MIN_SENTENCES:
            splits.append(splits[0])  # too few to spare: validate on the training text
        elif valid_file is None and config.cross_fit and members > 1:
            self.cross_fit_members = members
            folds = np.arange(len(texts)) % max(HOLD_OUT_EVERY, members)
            valid = folds < members
            splits = [
                (texts, splits[0][1], folds),
                ([t for t, v in zip(texts, valid, strict=True) if v], splits[0][1][valid],
                 folds[valid]),
            ]
        elif valid_file is None:
            held_out = np.arange(len(texts)) % HOLD_OUT_EVERY == 0
            splits = [
                ([t for t, h in zip(texts, held_out, strict=True) if h == side],
                 splits[0][1][held_out == side])
                for side in (False, True)
            ]
        for path, what in ((valid_file, "valid file"), (test_file, "test file")):
            if path is None:
                continue
            t, y, _ = readers.read_classification(
                require_file(path, what), label_names=names, encoding=config.encoding
            )
            splits.append((t, np.asarray(y, "int32")))
        if len(splits) == 2:
            splits.append(splits[1])
        if summary is not None:  # the bytes read
            summary = shards.in_memory_line(len(texts), summary, config.in_memory_limit_mb)
        return TaskData(*splits, label_names=[str(n) for n in names], summary=summary)

    def _streamed(self, config, columns, valid_file, test_file):
        """`TaskData` of a streamed training corpus (`StreamedCorpus`).

        Class names are those of the sample (a line of another class stops
        the stream, naming it); without a validation file every
        `HOLD_OUT_EVERY`-th line of the first shard's head validates (and the
        stream leaves it out); cross-fitting is refused (it weights each
        example by its index in the corpus).
        """
        corpus, held = shards.streamed_corpus(
            columns, config.vocabulary_sample_lines, config.seed, config.encoding,
            hold_out=(HOLD_OUT_EVERY, HOLD_OUT_MAX) if valid_file is None else None,
        )
        members = config.ensemble_size or default_ensemble_size(corpus.num_examples)
        if config.cross_fit and members > 1:
            raise ValueError(
                f"cross_fit=true with an ensemble of {members} needs the training file "
                "in memory; it is streamed (over in_memory_limit_mb="
                f"{config.in_memory_limit_mb:g}): set cross_fit=false or ensemble_size=1."
            )
        texts, labels, names = _labelled_lines(corpus.sample[0])
        corpus.sample = (texts, np.asarray(labels, "int32"))
        self.cross_fit_members = None
        splits = [corpus]
        if held is not None:
            held_texts, held_labels, _ = _labelled_lines(held[0], names)
            splits.append((held_texts, np.asarray(held_labels, "int32")))
        for path, what in ((valid_file, "valid file"), (test_file, "test file")):
            if path is not None:
                t, y, _ = readers.read_classification(
                    require_file(path, what), label_names=names, encoding=config.encoding)
                splits.append((t, np.asarray(y, "int32")))
        if len(splits) == 2:
            splits.append(splits[1])
        return TaskData(*splits, label_names=names,
                        summary=corpus.describe(config.in_memory_limit_mb))

    @staticmethod
    def prepared_settings(config, corpus, label_names):
        """What a prepared corpus (`training.pipeline.prepared`) must share with a run."""
        return {"task": "classification", "max_sequence_length": config.max_sequence_length,
                "encoding": config.encoding, "held_out": list(corpus.held_out),
                "label_names": [str(n) for n in label_names]}

    def prepared_records(self, config, corpus):
        """The tokenized records `python -m training prepare` writes of `corpus`."""
        return prepared.classification_records(
            corpus, self.tokenizer, self.label_names, config.max_sequence_length,
            stream_options(config, corpus))

    def prepare(self, config, data, run_dir, write=True):
        super().prepare(config, data, run_dir, write)
        rows = shards.seeded_sample(training_rows(data.train), config.vocabulary_sample_lines,
                                    config.seed)
        texts = [row[0] for row in rows]
        self.tokenizer = learn_or_load_tokenizer(config, run_dir, texts, write)

    def make_dataset(self, config, split, shuffle=False, repeat=False, training=False):
        if isinstance(split, prepared.PreparedCorpus):
            split.check_tokenizer(self.tokenizer)
            dataset = prepared.classification_stream(
                split, self.tokenizer, config.batch_size, stream_options(config, split),
                repeat=repeat, passes=split.pass_lengths)
            dataset = _bare_token_ids(dataset)
            dataset.pass_size = prepared.classification_pass_size(split.manifest,
                                                                  config.batch_size)
            return dataset
        if isinstance(split, shards.StreamedCorpus):
            dataset = streaming.make_classification_stream(
                (split.columns, split.compressions), self.tokenizer, self.label_names,
                {"max_sequence_length": config.max_sequence_length,
                 "batch_size": config.batch_size},
                stream_options(config, split), repeat=repeat, passes=split.pass_lengths,
            )
            return _bare_token_ids(dataset)
        weights = None
        if training and len(split) == 3:  # cross-fitted: member i leaves out fold i
            weights = split[2][:, None] != np.arange(self.cross_fit_members)[None, :]
        dataset = datasets.make_classification_dataset(
            split[0], split[1], tokenizer=self.tokenizer,
            max_sequence_length=config.max_sequence_length, batch_size=config.batch_size,
            seed=config.seed, shuffle=shuffle, repeat=repeat, sample_weight=weights,
        )
        # The classifier is a single-input functional model: feed the bare tensor.
        return dataset.map(lambda x, *rest: (x["token_ids"], *rest))

    def batch_tokens(self, config, inputs, labels):
        return int(np.count_nonzero(word_ids(inputs.numpy())))  # non-padding ids

    # --- model, selection, evaluation ------------------------------------------

    def build_model(self, config, data):
        """The `model` the config names, or an ensemble of them
        (`classifiers.build_classifier`): `"text_cnn"`, Kim's CNN
        (`TextCNNClassifier`), or `"transformer"`, a `TransformerClassifier`
        on a token stem with the n-gram convolutions before its encoder.
        Mixup of the pooled sentence features is in the model (`mixup_alpha`)."""
        if config.model == "transformer" and preset_config(config).num_layers == 0:
            raise ValueError(
                'model="transformer" needs encoder blocks; received model_overrides.num_layers=0. '
                'The convolutional model without attention is "model": "text_cnn".'
            )
        vocabulary_size = self.tokenizer.vocabulary_size
        head = dict(ngram_widths=config.ngram_widths, pooling=config.pooling,
                    mixup_alpha=config.mixup_alpha)

        def member(m, num_classes, index, **name):
            if config.model == "text_cnn":
                return TextCNNClassifier(
                    num_classes, vocabulary_size, hidden_dim=m.hidden_dim, dropout=m.dropout,
                    max_sequence_length=m.max_sequence_length, positions=m.positions,
                    char_ngram_buckets=config.char_ngram_buckets, **head, **name,
                )
            return classifiers.transformer_classifier(
                m, num_classes, token_stem(m, vocabulary_size, config.char_ngram_buckets),
                **head, **name,
            )

        return classifiers.build_classifier(config, data, member)

    def loss_and_metrics(self, config):
        return classifiers.loss_and_metrics(config.label_smoothing, config.num_classes)

    def out_of_fold(self, config, data):
        """`classifiers.OutOfFold` of a cross-fitted validation split (tokenized
        once per split and tokenizer: selection, the epoch logs and the final
        evaluation share it)."""
        cached = getattr(self, "_out_of_fold", None)
        if not (cached and cached[0] is data.valid and cached[1] is self.tokenizer
                and cached[2] == config.max_sequence_length):
            texts, labels, folds = data.valid
            ids = token_ids(self.tokenizer, texts, config.max_sequence_length)
            self._out_of_fold = (data.valid, self.tokenizer, config.max_sequence_length,
                                 classifiers.OutOfFold(ids, labels, folds))
        return self._out_of_fold[3]

    def validation_score(self, config, model, data, valid):
        if self.cross_fit_members:
            return self.out_of_fold(config, data), "val_accuracy", "max"
        return classifiers.accuracy_score(valid)

    def evaluation_plan_type(self):
        return CrossFitEvaluationPlan if self.cross_fit_members else EvaluationPlan

    def time_evaluation(self, config, model, data, score, seconds_loss, evaluation):
        if not self.cross_fit_members:
            return super().time_evaluation(config, model, data, score, seconds_loss, evaluation)
        # Cross-fitted, an epoch ends with the out-of-fold scores alone
        # (`fit_validates` is false): timed once, while planning, and kept in
        # plan.json with the whole ensemble's pass (`seconds_loss` then),
        # which the end still makes over the test file; a revision of the
        # plan passes the per-epoch figure as `seconds_loss` and re-times nothing.
        if evaluation is None:
            started = time.perf_counter()
            score(model)
            evaluation = CrossFitEvaluationPlan(round(time.perf_counter() - started, 3),
                                                round(seconds_loss, 3))
        per_epoch = evaluation.seconds_out_of_fold
        # The end: the default reserve, counted in the ensemble's passes.
        _, final, _ = super().time_evaluation(
            config, model, data, score, max(evaluation.seconds_ensemble_pass, per_epoch), None
        )
        return per_epoch, final, evaluation

    def callbacks(self, config, model, data, logs_dir):
        if self.cross_fit_members:
            return [classifiers.OutOfFoldLogs(self.out_of_fold(config, data))]
        return []

    def fit_validates(self, config):
        # Cross-fitted, `OutOfFoldLogs` scores each validation sentence by
        # the one member that left it out; Keras' pass of the whole ensemble
        # over the same sentences would only be replaced.
        return not self.cross_fit_members

    def evaluate(self, config, model, data, valid, plan=None):
        if not self.cross_fit_members:
            return super().evaluate(config, model, data, valid, plan)
        scores = self.out_of_fold(config, data).scores(model)
        # Out-of-fold scores are each member's own, so leaving a member out
        # of the answer changes the test figures below, not these.
        excluded = classifiers.OutOfFold.exclude_members_that_learned_nothing(model, scores)
        metrics = {f"valid_{k}": v for k, v in scores.items()}
        metrics["excluded_members"] = excluded
        if len(data.test) == 3:  # the validation folds also test: these scores, not a second pass
            metrics.update({f"test_{k}": v for k, v in scores.items()})
        else:
            metrics.update(self.evaluate_test(config, model, data, plan or FinalEvaluation()))
        return metrics

    def evaluate_test(self, config, model, data, plan=None):
        if len(data.test) == 3:
            # No test file and cross-fitted: the validation folds test, each
            # by the member that left it out (the ensemble trained on them).
            scores = self.out_of_fold(config, data).scores(model)
            return {f"test_{k}": v for k, v in scores.items()}
        return classifiers.test_metrics(self, config, model, data)

    # --- serving ----------------------------------------------------------------

    def serving(self):
        return ClassifierServing.for_text(self.tokenizer, self.label_names, self.name)


def _bare_token_ids(stream):
    """`stream` with its features' `token_ids` as the bare input (the
    classifier is a single-input model), keeping a streamed corpus's
    `from_step` (a resume starts reading at its step's pass)."""
    def bare(dataset):
        return dataset.map(lambda x, *rest: (x["token_ids"], *rest))

    result = bare(stream)
    from_step = getattr(stream, "from_step", None)
    if from_step is not None:
        result.from_step = lambda step: bare(from_step(step))
    return result
