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
| `probe_inputs` | `export.verify` |
"""

import numpy as np

from training.monitor.evaluation import Translator
from training.serving import signatures
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
    """

    def __init__(self, name):
        self.name = name

    #: Only examples of equal `batch_key` share a batch (unmasked padding).
    same_key_batches = False

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

    def probe_inputs(self, model, num_examples=6, seed=0):
        """Inputs that verification runs through an export."""
        raise NotImplementedError


class TranslationServing(Serving):
    """Sentences -> translations with a `Transformer` and its word pieces.

    Args:
        tokenizer: The run's `WordPieceTokenizer` (source and target share it).
    """

    def __init__(self, tokenizer, name="translation"):
        super().__init__(name)
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

    def probe_inputs(self, model, num_examples=6, seed=0):
        return text_probes(self.tokenizer, num_examples, seed)


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
    """

    def __init__(self, inputs, label_names=None, name="classification"):
        super().__init__(name)
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
        return cls(ImageInputs(), label_names, name)

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

    def probe_inputs(self, model, num_examples=6, seed=0):
        return self.inputs.probes(model, num_examples, seed)


class KerasModelServing(Serving):
    """Any Keras model as `training.serving.signatures.KerasModelModule`
    serves it: its one declared input in, `outputs` (and `labels`, the name
    of each row's largest output) out; what `export.verify` checks a user's
    own functional model's export against.

    Args:
        model: A built Keras model with one declared input and one output.
        label_names: One name per output column, as given to the export.

    Raises:
        ValueError: If the model declares other than one input or output.
    """

    def __init__(self, model, label_names=None, name="keras_model"):
        super().__init__(name)
        inputs, outputs = (getattr(model, key, None) or [] for key in ("inputs", "outputs"))
        if len(inputs) != 1 or len(outputs) != 1:
            raise ValueError(
                f"model must declare one input and one output to be verified; received "
                f"{len(inputs)} inputs and {len(outputs)} outputs ({type(model).__name__}).")
        self.input_name = inputs[0].name.split(":")[0]
        self.input_shape = tuple(inputs[0].shape[1:])
        self.input_dtype = np.dtype(str(inputs[0].dtype))
        self.label_names = None if label_names is None else [str(n) for n in label_names]

    def _array(self, examples):
        return np.asarray(examples, dtype=self.input_dtype)

    def outputs(self, model, examples, beam_size=1, length_penalty=0.6):
        self.check_beam_size(beam_size)
        answer = np.asarray(model(self._array(examples), training=False))
        outputs = {"outputs": answer}
        if self.label_names is not None:
            names = np.asarray([n.encode("utf-8") for n in self.label_names], dtype=object)
            outputs["labels"] = names[answer.argmax(axis=-1)]
        return outputs

    def serving_inputs(self, examples):
        return {self.input_name: self._array(examples)}

    def probe_inputs(self, model, num_examples=6, seed=0):
        """Seeded standard-normal inputs of the declared shape (8 where an axis
        is free); a model of integer inputs (token ids) needs its own
        `examples`, since no probe knows its vocabulary."""
        if self.input_dtype.kind != "f":
            raise ValueError(
                f"examples must be given for a model whose input {self.input_name!r} is "
                f"{self.input_dtype}; random probes are drawn for float inputs only.")
        shape = (num_examples, *(8 if d is None else d for d in self.input_shape))
        return np.random.default_rng(seed).standard_normal(shape).astype(self.input_dtype)
