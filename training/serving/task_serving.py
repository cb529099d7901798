"""The serving side of a kind of problem: parse, answer, format, export.

A `training.tasks.Task` trains (data, vocabulary, model, loss, selection,
evaluation); what a trained model then needs to be served is here, built
from the task's assets by `Task.serving()`:

```python
serving = run.task.serving()           # a TranslationServing or a ClassifierServing
examples = [serving.parse_input(line) for line in lines]
lines = serving.format_outputs(serving.outputs(run.model, examples))
```

`TranslationServing` serves a `Transformer`; one `ClassifierServing` serves
the text, series and image classifiers, which differ only in what they read
(`training.serving.inputs`).  `predict` (`training.runs.predict`) and the
exporters (`export/`) are written against `Serving` and never branch on
the kind of problem.

| hook | caller |
|---|---|
| `parse_input`, `batch_key`, `same_key_batches`, `outputs`, `format_outputs` | `training.runs.predict` (a run's Keras model) |
| `signature_name`, `serving_inputs` | `training.runs.predict` (a SavedModel), `export.verify` |
| `check_model`, `class_names`, `tflite_model`, `probe_inputs` | `export.saved_model`, `export.tflite`, `export.verify` |
"""

import numpy as np

from keras_transformer.models import (
    ClassifierEnsemble,
    TextCNNClassifier,
    Transformer,
    TransformerClassifier,
    VisionTransformer,
)
from training.monitor.evaluation import Translator
from training.serving import signatures, tflite_programs
from training.serving.inputs import (
    ImageInputs,
    SeriesInputs,
    TextInputs,
    text_input,
    text_probes,
    token_ids,
)
from training.text.detokenize import detokenize_ids


class Serving:
    """What a served model of one kind of problem reads and answers.

    Args:
        name: The task's name (`Task.name`), for messages.
        model_class: The Keras model class served, or a tuple of them.
    """

    def __init__(self, name, model_class):
        self.name = name
        self.model_class = model_class

    #: Only examples of equal `batch_key` share a batch (unmasked padding).
    same_key_batches = False

    def check_model(self, model):
        """Raises ValueError unless `model` is one of `model_class`."""
        classes = self.model_class if isinstance(self.model_class, tuple) else (self.model_class,)
        if not isinstance(model, classes):
            names = " or ".join(c.__name__ for c in classes)
            raise ValueError(
                f"task={self.name!r} needs a {names}; received model={type(model).__name__}."
            )

    def parse_input(self, example):
        """One raw input (a line of text, or already parsed) as `outputs` takes it."""
        raise NotImplementedError

    def batch_key(self, example):
        """Examples are batched in this order; a change of key for `same_key_batches`."""
        return len(example)

    def outputs(self, model, examples, beam_size=1, length_penalty=0.6):
        """What the serving signature returns for `examples`, computed with Keras.

        The verification reference, and `Run.predict`'s answer.
        """
        raise NotImplementedError

    def format_outputs(self, outputs):
        """Signature outputs {key: array} -> one line of text per example."""
        raise NotImplementedError

    def check_beam_size(self, beam_size):
        """Raises ValueError unless the model decodes with `beam_size` beams."""
        if beam_size != 1:
            raise ValueError(
                f"beam_size applies to translation; received beam_size={beam_size!r} "
                f"with task={self.name!r}."
            )

    def signature_name(self, beam_size=1):
        """The SavedModel signature that answers `outputs(..., beam_size)`."""
        self.check_beam_size(beam_size)
        return "serving_default"

    def serving_inputs(self, examples):
        """{signature input key: array} of parsed `examples`."""
        raise NotImplementedError

    def class_names(self, model):
        """The served class names (`labels.txt`), or None without classes."""
        return None

    def tflite_model(self, model, quantize="none", sequence_length=None, batch_size=1):
        """The `.tflite` flatbuffer (`export.tflite`)."""
        raise NotImplementedError

    def probe_inputs(self, model, num_examples=6, seed=0):
        """Inputs that verification runs through an export."""
        raise NotImplementedError


class TranslationServing(Serving):
    """Sentences -> translations with a `Transformer` and its word pieces.

    Args:
        tokenizer: The run's `WordPieceTokenizer` (source and target share it).
    """

    def __init__(self, tokenizer, name="translation"):
        super().__init__(name, Transformer)
        self.tokenizer = tokenizer
        self._translators = {}

    def translator(self, model, beam_size=1, length_penalty=0.6):
        """Strings -> translations: one traced `Translator` per (model, beam
        size, length penalty), shared by every call (validation BLEU,
        selection, the test and `predict` trace each loop once)."""
        key = (id(model), beam_size, float(length_penalty))
        if key not in self._translators:
            self._translators[key] = Translator(
                model, self.tokenizer, int(model.config.max_sequence_length),
                beam_size=beam_size, length_penalty=length_penalty,
            )
        return self._translators[key]

    parse_input = staticmethod(text_input)

    def check_beam_size(self, beam_size):
        if not isinstance(beam_size, int) or isinstance(beam_size, bool) or beam_size < 1:
            raise ValueError(f"beam_size must be a positive integer; received {beam_size!r}.")

    def signature_name(self, beam_size=1):
        self.check_beam_size(beam_size)
        if beam_size == 1:
            return "serving_default"
        if beam_size != signatures.BEAM_SIZE:
            raise ValueError(
                f"A SavedModel translates greedily (beam_size=1) or with its "
                f"translate_beam signature (beam_size={signatures.BEAM_SIZE}, fixed at "
                f"export); received beam_size={beam_size}."
            )
        return "translate_beam"

    def outputs(self, model, examples, beam_size=1, length_penalty=0.6):
        """{"translations": (N,) bytes}: cut to `max_sequence_length` pieces, decoded
        up to min(S + 50, `max_sequence_length`) tokens (Section 6.1) and detokenized
        with punctuation attached, as served."""
        self.check_beam_size(beam_size)
        ids = token_ids(self.tokenizer, examples, int(model.config.max_sequence_length))
        tokens = self.translator(model, beam_size, length_penalty).decode_ids(ids)  # (N, L)
        text = detokenize_ids(self.tokenizer, tokens)
        return {"translations": np.asarray(text.numpy(), dtype=object)}

    def format_outputs(self, outputs):
        return [t.decode("utf-8") for t in outputs["translations"]]

    def serving_inputs(self, examples):
        return {"sentences": np.asarray(list(examples), dtype=object)}

    def tflite_model(self, model, quantize="none", sequence_length=None, batch_size=1):
        return tflite_programs.translator_tflite(model, quantize, sequence_length, batch_size)

    def probe_inputs(self, model, num_examples=6, seed=0):
        return text_probes(self.tokenizer, num_examples, seed)


#: The classifiers a `ClassifierServing` of text or series serves.
CLASSIFIERS = (TransformerClassifier, TextCNNClassifier, ClassifierEnsemble)


class ClassifierServing(Serving):
    """Inputs -> class probabilities and label names, for every classifier.

    Served and predicted outputs are `{"probabilities": (N, K) float32,
    "labels": (N,) bytes}`, K being `num_classes` (1 for a single sigmoid
    output); a line is `label<TAB>probability`.

    Args:
        inputs: What the model reads: `TextInputs(tokenizer)`,
            `SeriesInputs()` or `ImageInputs()` (`training.serving.inputs`).
        label_names: One name per class, or None ("0", "1", ...).
        name: The task's name, for messages.
        model_class: The classifiers served (`CLASSIFIERS`, or
            `VisionTransformer` for images).
    """

    def __init__(self, inputs, label_names=None, name="classification", model_class=CLASSIFIERS):
        super().__init__(name, model_class)
        self.inputs = inputs
        self.label_names = None if label_names is None else [str(n) for n in label_names]
        self.same_key_batches = inputs.same_key_batches

    @classmethod
    def for_text(cls, tokenizer, label_names=None, name="classification"):
        return cls(TextInputs(tokenizer), label_names, name)

    @classmethod
    def for_series(cls, label_names=None, name="timeseries", channels_first=True):
        return cls(SeriesInputs(channels_first), label_names, name)

    @classmethod
    def for_images(cls, label_names=None, name="image"):
        return cls(ImageInputs(), label_names, name, VisionTransformer)

    @property
    def tokenizer(self):
        """The text tokenizer (None for series and images)."""
        return self.inputs.tokenizer

    def parse_input(self, example):
        return self.inputs.parse(example)

    def batch_key(self, example):
        return self.inputs.batch_key(example)

    def class_names(self, model):
        """`training.serving.signatures.class_names`: one name per class, as served."""
        return signatures.class_names(model, self.label_names)

    def outputs(self, model, examples, beam_size=1, length_penalty=0.6):
        """Keras probabilities and label names, as served."""
        self.check_beam_size(beam_size)
        inputs = self.inputs.model_inputs(model, examples)
        probabilities = np.asarray(model.probabilities(model(inputs, training=False)), np.float32)
        names = self.class_names(model)
        if model.num_classes == 1:
            index = (probabilities[:, 0] > 0.5).astype(int)
        else:
            index = probabilities.argmax(-1)
        labels = np.asarray([names[i].encode("utf-8") for i in index], dtype=object)
        return {"probabilities": probabilities, "labels": labels}

    def format_outputs(self, outputs):
        """`label<TAB>probability` lines: the chosen class and its probability."""
        probabilities = np.asarray(outputs["probabilities"], np.float64)
        lines = []
        for row, label in zip(probabilities, outputs["labels"], strict=True):
            # A single sigmoid output is P(class 1); the other class has 1 - p.
            p = row.max() if len(row) > 1 else (row[0] if row[0] > 0.5 else 1.0 - row[0])
            name = label.decode("utf-8") if isinstance(label, bytes) else str(label)
            lines.append(f"{name}\t{p:.4f}")
        return lines

    def serving_inputs(self, examples):
        return self.inputs.serving_inputs(examples)

    def tflite_model(self, model, quantize="none", sequence_length=None, batch_size=1):
        """`training.serving.tflite_programs.classifier_tflite`: inputs -> probabilities."""
        return tflite_programs.classifier_tflite(model, quantize, sequence_length, batch_size)

    def probe_inputs(self, model, num_examples=6, seed=0):
        return self.inputs.probes(model, num_examples, seed)
