"""Task models: a backbone with its preprocessing inside, for a Keras user's own code.

As KerasHub's task models: `fit` takes raw strings (or pairs of strings),
`predict` and `translate` answer raw strings, the tokenizer and the class
names are saved in the `.keras` file, and `export` writes the SavedModel
the command line's `export saved-model` writes (strings in, strings out,
with the fast signatures), which a process that imports only TensorFlow
and tensorflow-text serves.

```python
from training.task_models import TextClassifier, Translator

classifier = TextClassifier.from_texts(texts, labels)   # vocabulary, classes, backbone
classifier.compile()                                    # Adam, label smoothing, accuracy
classifier.fit(texts, labels, epochs=5)
classifier.predict(["a new sentence"])                  # {"labels", "probabilities"}
classifier.save("classifier.keras")                     # vocabulary and labels inside
classifier.export("classifier_savedmodel")              # serving_default: sentences -> labels

translator = Translator.from_texts(sources, targets)
translator.compile(warmup_steps=100)                    # the paper's Adam and schedule
translator.fit((sources, targets), epochs=20)
translator.translate(["ein hund"], beam_size=4)
```

`TimeSeriesClassifier` is the series one (arrays `(N, n_channels, length)`
in `fit`, `predict` and its export alike), and `export_model` /
`export_model_tflite` export any Keras model, a user's own functional one
included, without a task or a config.

The backbones are the library's `keras.ops` models (`TransformerClassifier`,
`TextCNNClassifier`, `ClassifierEnsemble`, `Transformer`); the preprocessing
is TensorFlow (`tensorflow-text` word pieces in `tf.data`), as KerasHub's
preprocessors run in `tf.data` whatever the backend.  Each task model's
`call` is its backbone's: token ids (or series) in, logits out.
"""

import os
import weakref

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.layers import RandomKernelSeriesStem, TokenStem
from keras_transformer.models import (
    ClassifierEnsemble,
    TextCNNClassifier,
    Transformer,
    TransformerClassifier,
    VisionTransformer,
    XLADropoutMixin,
)
from keras_transformer.models.transformer_config import PAD_ID
from training.data.atomic import atomic_write_bytes, check_target
from training.data.series_files import as_series
from training.optimization.losses import (
    MaskedAccuracy,
    MaskedSparseCategoricalCrossentropy,
    SparseSmoothedCrossentropy,
)
from training.optimization.schedule import paper_optimizer
from training.serving.quantize import check_saved_model_quantize, int8_tables
from training.serving.saved_model import REPLACEABLE, check_config, write_saved_model
from training.serving.signatures import (
    BEAM_SIZE,
    LENGTH_PENALTY,
    ClassifierModule,
    KerasModelModule,
    TranslatorModule,
    class_names,
    dense_ids,
    fill_empty_rows,
)
from training.serving.task_serving import (
    ClassifierServing,
    KerasModelServing,
    TranslationServing,
)
from training.serving.tflite_programs import REPLACEABLE as TFLITE_REPLACEABLE
from training.serving.tflite_programs import (
    check_quantize,
    classifier_tflite,
    keras_model_tflite,
    translator_tflite,
)
from training.text.tokenizers import (
    END_ID,
    START_ID,
    WordPieceTokenizer,
    learn_wordpiece_vocabulary,
    load_tokenizer,
)

#: The library's classifiers a `TextClassifier` wraps (on token ids).
CLASSIFIERS = (TransformerClassifier, TextCNNClassifier, ClassifierEnsemble)
#: Examples per batch of `fit` and `predict` given arrays or lists.
BATCH_SIZE = 32


def _strings(x, what):
    """A list or 1-D array of `str` (or UTF-8 `bytes`) -> `(N,)` object array."""
    if isinstance(x, (str, bytes)):
        raise ValueError(f"{what} must be a list of strings, not one string; received "
                         f"{what}={x[:40]!r}.")
    try:
        array = np.asarray(list(x), dtype=object)
    except TypeError:
        raise ValueError(f"{what} must be a list of strings; received "
                         f"{type(x).__name__}.") from None
    if array.ndim != 1 or not all(isinstance(s, (str, bytes)) for s in array):
        bad = next((s for s in array.ravel() if not isinstance(s, (str, bytes))), None)
        raise ValueError(f"{what} must be a list of strings; received an element "
                         f"{bad!r} of type {type(bad).__name__}.")
    if not len(array):
        raise ValueError(f"{what} holds no string.")
    return array


def _check_pairs(inputs, answers, inputs_name, answers_name):
    """Refuses, before any vocabulary or model is built, inputs and answers
    that do not pair up one to one."""
    if len(inputs) != len(answers):
        raise ValueError(f"{inputs_name} and {answers_name} must pair up one to one; received "
                         f"{len(inputs)} {inputs_name} and {len(answers)} {answers_name}.")


def _sentences(tensor_or_list):
    return tf.constant(_strings(tensor_or_list, "x").tolist(), tf.string)


class _Untracked:
    """A holder TensorFlow's object graph does not follow: what a task model
    keeps that is not part of what it saves (a translator's cached serving
    modules; the validation datasets `fit` prepared, which Keras' `fit`
    hands back to `evaluate` as they are)."""

    def __init__(self):
        self.modules = {}
        self.prepared = weakref.WeakSet()


class TaskModel(XLADropoutMixin, keras.Model):
    """A backbone and the tokenizer of its inputs, saved together in a `.keras` file.

    The tokenizer's files (`vocab.txt`, `tokenizer.json`) go into the `.keras`
    archive's assets (`save_assets`) and are read back by `load_assets`, so
    `keras.models.load_model(path)` returns a model that tokenizes as the
    saved one did.

    It trains as its backbone would train alone: the backbone's rule of
    its loss (`training_loss`: an ensemble's members each on their own
    logits, a mixed batch's two labels) with this model's compiled loss,
    and the backbone's dropout masks under XLA (`XLADropoutMixin`).
    """

    def __init__(self, backbone, tokenizer=None, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.tokenizer = tokenizer
        self._untracked = _Untracked()
        if backbone.built:  # a trained backbone: nothing left to build, so it saves as it is
            self.built = True

    def call(self, inputs, training=None):
        return self.backbone(inputs, training=training)

    @property
    def threefry_dropout_under_xla(self):
        return getattr(self.backbone, "threefry_dropout_under_xla", False)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        parent = super(TaskModel, self)  # noqa: UP008 (AutoGraph)
        rule = getattr(self.backbone, "training_loss", None)
        if rule is None:
            return parent.compute_loss(x, y, y_pred, sample_weight, training=training)
        return rule(parent.compute_loss, x, y, y_pred, sample_weight, training)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if sample_weight is not None and len(sample_weight.shape) == 2:
            sample_weight = None  # per-member weights: the answer's metrics see every example
        return super(TaskModel, self).compute_metrics(  # noqa: UP008 (AutoGraph)
            x, y, y_pred, sample_weight=sample_weight)

    def prepared(self, dataset):
        """`dataset`, batches of the backbone's own inputs (token ids, series
        `(B, T, C)`) and their labels, marked as prepared: `fit` and
        `evaluate` take it as it is.  What a pipeline that tokenizes and
        batches on its own passes (the command line's runs do)."""
        self._untracked.prepared.add(dataset)
        return dataset

    def save_assets(self, dir_path):
        if self.tokenizer is not None:
            self.tokenizer.save(dir_path)

    def load_assets(self, dir_path):
        if os.path.isfile(os.path.join(dir_path, "vocab.txt")):
            self.tokenizer = load_tokenizer(dir_path)

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "backbone": keras.saving.serialize_keras_object(self.backbone)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)

    def export(self, path, overwrite=False, quantize="none", config=None):
        """Writes this model's SavedModel, strings (or series) in, atomically;
        returns its absolute path.  `python -m export saved-model` writes a
        run's through this method.

        Its signatures are its `_export_module`'s; `assets/` holds the
        tokenizer, `labels.txt` and `config.json` (the export's settings:
        `task`, `max_sequence_length`, the backbone's Keras config as
        `keras_model`), read by `python -m export serve` and `predict --saved-model`.

        Args:
            path: Target directory.
            overwrite: Replace a SavedModel export there (nothing else).
            quantize: "none", or "int8" for a classifier: its embedding
                tables in int8 with a float32 scale per row
                (`training.serving.quantize.int8_tables`).
            config: Settings recorded with the export's own in
                `config.json` (a run's configuration); the export's own win.
        """
        return _write_export(self.backbone, self._export_module, path, self.tokenizer,
                             getattr(self, "label_names", None), overwrite, quantize, config)

    def _export_module(self, backbone):
        """(the serving `tf.Module` of `backbone`, the export's own settings)."""
        raise NotImplementedError

    def serving(self):
        """What this model reads and answers as served
        (`training.serving.task_serving.Serving`, built from its tokenizer
        and class names): the reference `export.verify` checks an export
        against, and the probe inputs it sends."""
        raise NotImplementedError

    def export_tflite(self, path, quantize="none", overwrite=False, sequence_length=None,
                      batch_size=1):
        """Writes the `.tflite` file `python -m export tflite` writes for this
        model (token ids in: TFLite has no word-piece op; static shapes,
        `quantize` "none", "float16" or "int8"), atomically; returns its path."""
        return export_model_tflite(self.backbone, path, quantize, overwrite, sequence_length,
                                   batch_size)

    def _keep_compile_settings(self, settings, defaults):
        """What `compile` was given, for `get_compile_config`: the settings of
        its defaults, or None where it was given its own optimizer, loss or
        metrics (Keras' own config of them is saved instead)."""
        self._compile_settings = dict(settings) if defaults else None

    def get_compile_config(self):
        settings = getattr(self, "_compile_settings", None)
        if settings is None:
            return super().get_compile_config()
        return {"task_model_settings": settings}

    def compile_from_config(self, config):
        settings = config.get("task_model_settings")
        self.compile(**(settings if settings is not None
                        else keras.saving.deserialize_keras_object(config)))
        if self.built:  # its variables exist before the saved ones are read into them
            self.optimizer.build(self.trainable_variables)

    def _is_prepared(self, x):
        return isinstance(x, tf.data.Dataset) and x in self._untracked.prepared

    def _check_tokenizer(self):
        if self.tokenizer is None:
            raise ValueError(f"{type(self).__name__} has no tokenizer: build it with "
                             "from_texts(...), or pass tokenizer=.")


class _Classifier(TaskModel):
    """What the classifier task models share: `compile`'s defaults, labels
    by name or index, `fit` / `evaluate` / `predict` through `_dataset`."""

    def compile(self, optimizer=None, loss=None, metrics=None, learning_rate=1e-3,
                label_smoothing=0.1, **kwargs):
        """Keras' `compile` with the pipeline's defaults: Adam at `learning_rate`,
        label-smoothed cross-entropy on the logits, accuracy."""
        self._keep_compile_settings(
            {"learning_rate": learning_rate, "label_smoothing": label_smoothing},
            optimizer is None and loss is None and metrics is None and not kwargs)
        if optimizer is None:
            optimizer = keras.optimizers.Adam(learning_rate)
        if loss is None:
            loss = (SparseSmoothedCrossentropy(label_smoothing, from_logits=True)
                    if label_smoothing else
                    keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        if metrics is None:
            metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def label_ids(self, labels, what="y"):
        """Labels (names, or class indices) -> `(N,)` int32 class indices."""
        values = np.asarray(labels)
        if values.ndim != 1:
            raise ValueError(f"{what} must be one label per example; received shape "
                             f"{values.shape}.")
        if values.dtype.kind in "iu":
            bad = values[(values < 0) | (values >= len(self.label_names))]
            if bad.size:
                raise ValueError(f"{what} holds class index {int(bad[0])}, outside "
                                 f"[0, {len(self.label_names)}).")
            return values.astype("int32")
        index = {name: i for i, name in enumerate(self.label_names)}
        names = values.astype(str)
        unknown = [n for n in names if n not in index]
        if unknown:
            raise ValueError(f"{what} holds label {str(unknown[0])!r}, not one of the classes "
                             f"{self.label_names}.")
        return np.asarray([index[n] for n in names], "int32")

    def fit(self, x=None, y=None, batch_size=None, validation_data=None, shuffle=True,
            **kwargs):
        """`keras.Model.fit` on raw inputs `x` and their labels `y` (names or
        indices), or `x` a `tf.data.Dataset` of batched `(inputs, indices)`."""
        if validation_data is not None and not self._is_prepared(validation_data):
            validation_data = self.prepared(
                self._dataset(validation_data) if isinstance(validation_data, tf.data.Dataset)
                else self._dataset(*validation_data, batch_size=batch_size))
        if not self._is_prepared(x):
            x = self._dataset(x, y, batch_size, shuffle)  # shuffled here: Keras' `shuffle`
        return super().fit(x, shuffle=False,              # does not apply to a dataset
                           validation_data=validation_data, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, **kwargs):
        if not self._is_prepared(x):
            x = self._dataset(x, y, batch_size)
        return super().evaluate(x, **kwargs)

    def predict(self, x, batch_size=None, **kwargs):
        """Raw inputs -> `{"labels": (N,) str, "probabilities": (N, K) float32}`,
        what the export's `serving_default` answers."""
        logits = super().predict(self._dataset(x, batch_size=batch_size), **kwargs)
        probabilities = np.asarray(self.backbone.probabilities(logits), "float32")
        if probabilities.shape[1] == 1:
            index = (probabilities[:, 0] > 0.5).astype(int)
        else:
            index = probabilities.argmax(axis=1)
        return {"labels": np.asarray(self.label_names, dtype=object)[index],
                "probabilities": probabilities}



@keras.saving.register_keras_serializable(package="keras_transformer")
class TextClassifier(_Classifier):
    """Sentences -> class labels and probabilities.

    Args:
        backbone: A `TransformerClassifier`, `TextCNNClassifier` or
            `ClassifierEnsemble` on token ids (a run's model).
        tokenizer: A `training.text.tokenizers.WordPieceTokenizer`, or None
            until `load_assets` gives it.
        label_names: One name per class, in the order of the backbone's
            outputs ("0", "1", ... by default).
        sequence_length: Sentences are cut to this many pieces (the
            backbone's `max_sequence_length` by default).
    """

    def __init__(self, backbone, tokenizer=None, label_names=None, sequence_length=None,
                 **kwargs):
        if not isinstance(backbone, CLASSIFIERS):
            raise ValueError("backbone must be a TransformerClassifier, TextCNNClassifier or "
                             f"ClassifierEnsemble; received backbone={type(backbone).__name__}.")
        if backbone.vocabulary_size is None:
            raise ValueError("backbone must read token ids (a TokenStem); received a "
                             "classifier of series.")
        super().__init__(backbone, tokenizer, **kwargs)
        self.label_names = class_names(backbone, label_names)
        self.sequence_length = int(sequence_length or backbone.max_sequence_length)

    @classmethod
    def from_texts(cls, texts, labels, vocabulary_size=4000, sequence_length=128,
                   hidden_dim=64, num_layers=2, num_heads=4, intermediate_dim=128,
                   dropout=0.1, lower_case=True, **backbone_options):
        """A classifier whose vocabulary is learned from `texts` and whose
        classes are the sorted distinct `labels` (`np.unique`), with a
        `TransformerClassifier` of the given sizes (`backbone_options`: its
        other arguments, e.g. `pooling`)."""
        texts = _strings(texts, "texts")
        _check_pairs(texts, labels, "texts", "labels")
        label_names = [str(n) for n in np.unique(np.asarray(labels).astype(str))]
        if len(label_names) < 2:
            raise ValueError(f"labels must hold at least two classes to learn; received "
                             f"only {label_names!r}.")
        vocabulary = learn_wordpiece_vocabulary(texts.tolist(), vocabulary_size,
                                                lower_case=lower_case)
        tokenizer = WordPieceTokenizer(vocabulary, lower_case=lower_case)
        stem = TokenStem(len(vocabulary), hidden_dim, max_sequence_length=sequence_length)
        backbone = TransformerClassifier(
            stem, len(label_names), num_layers=num_layers, num_heads=num_heads,
            intermediate_dim=intermediate_dim, dropout=dropout, **backbone_options)
        return cls(backbone, tokenizer, label_names)

    @property
    def num_classes(self):
        return self.backbone.num_classes

    def token_ids(self, sentences):
        """`(B,)` tf.string -> `(B, S)` int32 ids, as the export reads them."""
        self._check_tokenizer()
        return fill_empty_rows(dense_ids(self.tokenizer.tokenize(sentences),
                                         self.sequence_length))

    def _dataset(self, x, y=None, batch_size=None, shuffle=False):
        if isinstance(x, tf.data.Dataset):
            return x.map(lambda s, *rest: (self.token_ids(s), *rest))
        sentences = _sentences(x)
        columns = (sentences,) if y is None else (sentences, self.label_ids(y))
        dataset = tf.data.Dataset.from_tensor_slices(columns)
        if shuffle:
            dataset = dataset.shuffle(len(sentences))
        dataset = dataset.batch(batch_size or BATCH_SIZE)
        return dataset.map(lambda s, *rest: (self.token_ids(s), *rest))

    def _export_module(self, backbone):
        """`serving_default` (`sentences` tf.string `(B,)` -> `labels`,
        `probabilities`) and `classify_ids`."""
        self._check_tokenizer()
        module = ClassifierModule(backbone, self.tokenizer, self.label_names)
        return module, {"task": "classification", "max_sequence_length": self.sequence_length}

    def serving(self):
        self._check_tokenizer()
        return ClassifierServing.for_text(self.tokenizer, self.label_names)

    def get_config(self):
        return {**super().get_config(), "label_names": list(self.label_names),
                "sequence_length": self.sequence_length}


@keras.saving.register_keras_serializable(package="keras_transformer")
class TimeSeriesClassifier(_Classifier):
    """Series `(N, n_channels, length)` -> class labels and probabilities.

    The series task model, with the class names inside; series are laid
    out as aeon and sktime take them, in `fit`, `predict` and the export
    alike (`training.estimator.SeriesClassifier` is the scikit-learn
    estimator of the command line's whole recipe).

    Args:
        backbone: A `TransformerClassifier` on a series stem, or a
            `ClassifierEnsemble` of them (a `timeseries` run's model).
        label_names: One name per class ("0", "1", ... by default).
    """

    def __init__(self, backbone, label_names=None, **kwargs):
        if (not isinstance(backbone, (TransformerClassifier, ClassifierEnsemble))
                or backbone.vocabulary_size is not None):
            raise ValueError("backbone must be a TransformerClassifier (or ClassifierEnsemble) "
                             f"on a series stem; received backbone={type(backbone).__name__}"
                             + (" on token ids" if getattr(backbone, "vocabulary_size", None)
                                else "") + ".")
        super().__init__(backbone, None, **kwargs)
        self.label_names = class_names(backbone, label_names)

    @classmethod
    def from_series(cls, X, labels, hidden_dim=64, num_layers=2, num_heads=4,
                    intermediate_dim=128, dropout=0.1, num_windows=8,
                    num_kernel_features=2016, seed=0):
        """A classifier of the `timeseries` preset's model: MiniRocket's
        features of `num_windows` windows as tokens (`RandomKernelSeriesStem`,
        adapted to `X`) under `num_layers` encoder blocks; classes the sorted
        distinct `labels`."""
        series = as_series(X)
        _check_pairs(series, labels, "X", "labels")
        label_names = [str(n) for n in np.unique(np.asarray(labels).astype(str))]
        if len(label_names) < 2:
            raise ValueError(f"labels must hold at least two classes to learn; received "
                             f"only {label_names!r}.")
        stem = RandomKernelSeriesStem(
            series.shape[2], hidden_dim, max_sequence_length=series.shape[1],
            standardize_series=True, series_level_features=True, series_length=series.shape[1],
            num_windows=num_windows, num_kernel_features=num_kernel_features,
            max_positions=2 * num_windows, seed=seed)
        stem.adapt(tf.constant(series))
        backbone = TransformerClassifier(stem, len(label_names), num_layers=num_layers,
                                         num_heads=num_heads, intermediate_dim=intermediate_dim,
                                         dropout=dropout)
        return cls(backbone, label_names)

    def _dataset(self, X, y=None, batch_size=None, shuffle=False):
        if isinstance(X, tf.data.Dataset):
            return X.map(lambda x, *rest: (tf.transpose(x, [0, 2, 1]), *rest))
        columns = (as_series(X),) if y is None else (as_series(X), self.label_ids(y))
        if y is not None and len(columns[0]) != len(columns[1]):
            raise ValueError(f"X has {len(columns[0])} series but y has {len(columns[1])} "
                             "labels; give one label a series.")
        dataset = tf.data.Dataset.from_tensor_slices(columns)
        if shuffle:
            dataset = dataset.shuffle(len(columns[0]))
        return dataset.batch(batch_size or BATCH_SIZE)

    def _export_module(self, backbone):
        """`serving_default`: `features` float32 `(B, n_channels, length)` ->
        `labels` and `probabilities`."""
        module = ClassifierModule(backbone, None, self.label_names, channels_first=True)
        return module, {"task": "timeseries", "series_layout": "channels_first",
                        "max_sequence_length": int(backbone.max_sequence_length)}

    def serving(self):
        return ClassifierServing.for_series(self.label_names)

    def get_config(self):
        return {**super().get_config(), "label_names": list(self.label_names)}


@keras.saving.register_keras_serializable(package="keras_transformer")
class Translator(TaskModel):
    """Sentences -> translations, greedy or with beam search (Section 6.1).

    Source and target share one word-piece vocabulary (and the tied
    embeddings of Section 3.4), as the command line's translation runs do.

    Args:
        backbone: A `Transformer`.
        tokenizer: Its `WordPieceTokenizer`, or None until `load_assets` gives it.
    """

    def __init__(self, backbone, tokenizer=None, **kwargs):
        if not isinstance(backbone, Transformer):
            raise ValueError("backbone must be a Transformer; received "
                             f"backbone={type(backbone).__name__}.")
        super().__init__(backbone, tokenizer, **kwargs)

    @classmethod
    def from_texts(cls, sources, targets, vocabulary_size=4000, preset="tiny",
                   lower_case=True, **preset_overrides):
        """A translator whose joint vocabulary is learned from `sources` and
        `targets`, on `Transformer.from_preset(preset, **preset_overrides)`."""
        sources, targets = _strings(sources, "sources"), _strings(targets, "targets")
        _check_pairs(sources, targets, "sources", "targets")
        vocabulary = learn_wordpiece_vocabulary(
            sources.tolist() + targets.tolist(), vocabulary_size, lower_case=lower_case)
        backbone = Transformer.from_preset(preset, vocabulary_size=len(vocabulary),
                                           **preset_overrides)
        return cls(backbone, WordPieceTokenizer(vocabulary, lower_case=lower_case))

    @property
    def sequence_length(self):
        return int(self.backbone.config.max_sequence_length)

    def compile(self, optimizer=None, loss=None, metrics=None, warmup_steps=4000,
                label_smoothing=0.1, **kwargs):
        """Keras' `compile` with the paper's defaults (Section 5.3-5.4): Adam
        (0.9, 0.98, 1e-9) on the warm-up/rsqrt schedule of `warmup_steps`,
        cross-entropy smoothed by `label_smoothing` over real tokens only,
        and the accuracy of real tokens (padding counts in neither)."""
        self._keep_compile_settings(
            {"warmup_steps": warmup_steps, "label_smoothing": label_smoothing},
            optimizer is None and loss is None and metrics is None and not kwargs)
        if optimizer is None:
            optimizer = paper_optimizer(self.backbone.config.hidden_dim, warmup_steps)
        if loss is None:
            loss = MaskedSparseCategoricalCrossentropy(label_smoothing=label_smoothing)
        if metrics is None:
            metrics = [MaskedAccuracy(name="accuracy")]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def _pairs(self, sources, targets):
        """(B,) source and target strings -> ({encoder, decoder ids}, labels)."""
        self._check_tokenizer()
        length = self.sequence_length
        src = self.tokenizer.tokenize(sources)[:, :length]
        tgt = self.tokenizer.tokenize(targets)[:, : length - 1]
        rows = tf.ones([tgt.nrows(), 1], tf.int32)
        decoder = tf.concat([rows * START_ID, tgt], axis=1)
        labels = tf.concat([tgt, rows * END_ID], axis=1)
        return ({"encoder_token_ids": src.to_tensor(PAD_ID),
                 "decoder_token_ids": decoder.to_tensor(PAD_ID)}, labels.to_tensor(PAD_ID))

    def _dataset(self, x, batch_size=None, shuffle=False):
        if isinstance(x, tf.data.Dataset):
            return x.map(self._pairs)
        try:
            sources, targets = x
        except (TypeError, ValueError):
            raise ValueError("x must be (sources, targets): two lists of strings of one "
                             "length, or a tf.data.Dataset of batched pairs.") from None
        sources, targets = _strings(sources, "sources"), _strings(targets, "targets")
        if len(sources) != len(targets):
            raise ValueError(f"sources and targets must pair up; received {len(sources)} "
                             f"sources and {len(targets)} targets.")
        dataset = tf.data.Dataset.from_tensor_slices(
            (sources.tolist(), targets.tolist()))
        if shuffle:
            dataset = dataset.shuffle(len(sources))
        return dataset.batch(batch_size or BATCH_SIZE).map(self._pairs)

    def fit(self, x=None, batch_size=None, validation_data=None, shuffle=True, **kwargs):
        """`keras.Model.fit` on pairs of sentences: `x = (sources, targets)`, or
        a `tf.data.Dataset` of batched `(sources, targets)` strings."""
        if validation_data is not None and not self._is_prepared(validation_data):
            validation_data = self.prepared(self._dataset(validation_data, batch_size))
        if not self._is_prepared(x):
            x = self._dataset(x, batch_size, shuffle)
        return super().fit(x, shuffle=False, validation_data=validation_data, **kwargs)

    def evaluate(self, x=None, batch_size=None, **kwargs):
        if not self._is_prepared(x):
            x = self._dataset(x, batch_size)
        return super().evaluate(x, **kwargs)

    def _module(self, beam_size, length_penalty):
        """The export's module for (beam size, length penalty), kept: its
        signatures are what `translate` runs, traced once each.  Greedy
        search has no length penalty: one module answers every greedy call."""
        key = (1, LENGTH_PENALTY) if beam_size == 1 else (int(beam_size), float(length_penalty))
        modules = self._untracked.modules
        if key not in modules:
            modules[key] = TranslatorModule(self.backbone, self.tokenizer, beam_size=key[0],
                                            length_penalty=key[1])
        return modules[key]

    def translate(self, sentences, beam_size=1, length_penalty=LENGTH_PENALTY,
                  batch_size=None):
        """Sentences -> translations (a list of `str`): greedy with `beam_size=1`,
        else beam search with the GNMT `length_penalty`, through the export's
        own signatures (`serving_default`, `translate_beam`), so an export
        answers the same."""
        self._check_tokenizer()
        if not isinstance(beam_size, int) or isinstance(beam_size, bool) or beam_size < 1:
            raise ValueError(f"beam_size must be a positive integer; received {beam_size!r}.")
        sentences = _strings(sentences, "sentences").tolist()
        module = self._module(beam_size, length_penalty)
        search = module.translate if beam_size == 1 else module.translate_beam
        outputs = []
        size = batch_size or BATCH_SIZE
        for start in range(0, len(sentences), size):
            text = search(tf.constant(sentences[start:start + size]))["translations"]
            outputs += [t.decode("utf-8") for t in text.numpy()]
        return outputs

    generate = translate

    def _export_module(self, backbone):
        """`serving_default`, `translate_ids`, `translate_xla`, `translate_beam`
        with `BEAM_SIZE` beams and `translate_beam_xla`."""
        self._check_tokenizer()
        module = TranslatorModule(backbone, self.tokenizer)
        return module, {"task": "translation", "max_sequence_length": self.sequence_length,
                        "beam_size": BEAM_SIZE, "length_penalty": LENGTH_PENALTY}

    def serving(self):
        self._check_tokenizer()
        return TranslationServing(self.tokenizer)


def task_model_for(model, tokenizer=None, label_names=None):
    """The task model of a library backbone: a `Transformer` -> `Translator`;
    a classifier with a `tokenizer` -> `TextClassifier`, without one -> a
    `TimeSeriesClassifier` of series; None for an image classifier, whose
    backbone answers arrays itself.

    Raises:
        ValueError: For a `Transformer` without its tokenizer (the task
            model's strings go through it).
    """
    if isinstance(model, Transformer):
        if tokenizer is None:
            raise ValueError("A Transformer exports with its tokenizer (and is served and "
                             "verified with it); received tokenizer=None.")
        return Translator(model, tokenizer)
    if tokenizer is not None:
        return TextClassifier(model, tokenizer, label_names)
    if not isinstance(model, VisionTransformer):
        return TimeSeriesClassifier(model, label_names)
    return None


def serving_for(model, tokenizer=None, label_names=None):
    """(the backbone, its `Serving`) of a task model, of a library backbone
    with its `tokenizer` and `label_names` (`task_model_for`), or of a
    `VisionTransformer`: what `export.verify` computes its reference with.

    Any other Keras model (a user's own functional one) is served as
    `export_model` exports it: `KerasModelServing`, its one declared input
    in, `outputs` (and `labels` with `label_names`) out.
    """
    if isinstance(model, VisionTransformer):
        return model, ClassifierServing.for_images(label_names)
    if isinstance(model, CLASSIFIERS + (Transformer,)):
        model = task_model_for(model, tokenizer, label_names)
    if isinstance(model, TaskModel):
        return model.backbone, model.serving()
    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a Keras model; received {type(model).__name__}.")
    return model, KerasModelServing(model, label_names)


def export_model(model, export_dir, tokenizer=None, label_names=None, overwrite=False,
                 quantize="none", config=None):
    """Writes a SavedModel of any Keras model, atomically; returns its path.

    - a task model (`TextClassifier`, `TimeSeriesClassifier`, `Translator`):
      its own `export`;
    - a library backbone: its task model's (`task_model_for`, with
      `tokenizer` and `label_names`): a `Transformer` needs its tokenizer,
      a series classifier takes `(B, n_channels, length)`; an image
      classifier: `images` `(B, H, W, C)`;
    - any other Keras model (a user's functional classifier): its inputs'
      typed signature (`training.serving.signatures.KerasModelModule`),
      `labels` too with `label_names`.

    `quantize` and `config` as `TaskModel.export`'s.  The layout, manifest
    and atomic write are `write_saved_model`'s; `python -m export
    saved-model` writes a run's model through this function.
    """
    if isinstance(model, CLASSIFIERS + (Transformer,)):
        model = task_model_for(model, tokenizer, label_names)
    if isinstance(model, TaskModel):
        return model.export(export_dir, overwrite=overwrite, quantize=quantize, config=config)
    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a Keras model; received {type(model).__name__}.")
    if isinstance(model, VisionTransformer):
        label_names = class_names(model, label_names)  # labels.txt names every class

        def export_module(served):
            return ClassifierModule(served, None, label_names), {"task": "image"}
    else:
        def export_module(served):
            return KerasModelModule(served, label_names), {"task": "keras_model"}
    return _write_export(model, export_module, export_dir, None, label_names, overwrite,
                         quantize, config)


def _write_export(model, export_module, path, tokenizer, label_names, overwrite, quantize,
                  config):
    """The one SavedModel writer of `TaskModel.export` and `export_model`:
    `export_module(model, or its int8 tables)` -> (module, settings), the
    settings recorded over `config` with `model`'s Keras config."""
    check_target(path, overwrite, REPLACEABLE)  # before any work
    check_saved_model_quantize(quantize, model)
    module, settings = export_module(int8_tables(model) if quantize == "int8" else model)
    settings = {**check_config(config or {}), **settings,
                "keras_model": keras.saving.serialize_keras_object(model)}
    return write_saved_model(module, path, settings, tokenizer, label_names, overwrite,
                             quantize)


def export_model_tflite(model, path, quantize="none", overwrite=False, sequence_length=None,
                        batch_size=1):
    """Writes a `.tflite` file of any Keras model, atomically; returns its path.

    A task model's backbone, a library `Transformer` (the static greedy
    program) or classifier: the command line's program
    (`training.serving.tflite_programs`); any other Keras model (a user's
    functional model): its inference pass on its declared inputs, the batch
    axis fixed at `batch_size`, with the outputs of `KerasModelModule`.
    """
    check_quantize(quantize)
    check_target(path, overwrite, TFLITE_REPLACEABLE)
    if isinstance(model, TaskModel):
        model = model.backbone
    if isinstance(model, Transformer):
        data = translator_tflite(model, quantize, sequence_length, batch_size)
    elif isinstance(model, CLASSIFIERS + (VisionTransformer,)):
        data = classifier_tflite(model, quantize, sequence_length, batch_size)
    elif isinstance(model, keras.Model):
        if sequence_length is not None:
            raise ValueError("sequence_length applies to the library's models; received "
                             f"sequence_length={sequence_length!r} for {type(model).__name__}.")
        module = KerasModelModule(model)
        specs = [tf.TensorSpec([batch_size, *s.shape[1:]], s.dtype, name=s.name)
                 for s in module.serve.input_signature]
        if len(specs) != 1:
            raise ValueError(f"model must have one input for TFLite; received {len(specs)}.")
        data = keras_model_tflite(module.serve, specs[0], quantize)
    else:
        raise ValueError(f"model must be a Keras model; received {type(model).__name__}.")
    return atomic_write_bytes(path, data, overwrite, TFLITE_REPLACEABLE)


__all__ = ["TaskModel", "TextClassifier", "TimeSeriesClassifier", "Translator", "export_model",
           "export_model_tflite", "serving_for", "task_model_for"]
