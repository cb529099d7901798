"""Answers for raw inputs, from a finished run or from its exported SavedModel.

```
python -m training predict --run-dir runs/toy "he bought forty two books"
python -m training predict --saved-model exported/translator/1 --input sentences.txt --beam 4
printf '0.1 0.5 0.2\\n0.3 0.1 0.9\\n' | python -m training predict --run-dir runs/series
```

One output line per input: a translation, or `label<TAB>probability` for a
classifier (the chosen class and its probability).  Text is one sentence a
line; a series is one line of numbers separated by commas or spaces (time
steps separated by ";" when a step has several features), or `--input` names
a series file (`.ts`, or `.csv` of `read_series_csv`'s layout), one answer
a series.

Both sources answer through the task's serving side (`Task.serving()`, a
`training.serving.task_serving.Serving`): the same parsing, the same batches
(inputs sorted by length, `batch_size` at a time) and the same formatting,
so a run and its SavedModel give the same lines.  The run computes
`Serving.outputs` with its Keras model; the SavedModel runs the signature
`Serving.signature_name` picks.  A SavedModel's beam search has the
width fixed at export (`translate_beam`: 4 beams, length penalty 0.6).
"""

import contextlib
import json
import os
import sys

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

from training.data import series_files
from training.data.manifest import check_saved_model_export
from training.data.readers import no_file, read_lines
from training.serving.inputs import SeriesInputs
from training.serving.task_serving import ClassifierServing
from training.tasks import get_task


def _check_batch_size(batch_size):
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer; received {batch_size!r}.")


def _parsed(serving, inputs):
    examples = []
    for number, example in enumerate(inputs, start=1):
        try:
            examples.append(serving.parse_input(example))
        except ValueError as error:
            raise ValueError(f"input {number}: {error}") from None
    return examples


def answer_in_batches(serving, examples, batch_size, answer):
    """Lines for `examples`, in their order, from `answer(batch) -> outputs`.

    Examples are sorted by `serving.batch_key` (stable) and cut into batches
    of at most `batch_size`; where inputs are not masked
    (`serving.same_key_batches`) a new batch also starts where the key changes.
    """
    _check_batch_size(batch_size)
    order = sorted(range(len(examples)), key=lambda i: serving.batch_key(examples[i]))
    batches, batch = [], []
    for i in order:
        if batch and (len(batch) == batch_size or (
            serving.same_key_batches
            and serving.batch_key(examples[i]) != serving.batch_key(examples[batch[0]])
        )):
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    lines = [None] * len(examples)
    for batch in batches:
        outputs = answer([examples[i] for i in batch])
        for i, line in zip(batch, serving.format_outputs(outputs), strict=True):
            lines[i] = line
    return lines


def predict_run(run, inputs, beam_size=1, batch_size=64):
    """`run.predict`: lines for `inputs` from a loaded run's Keras model.

    Args:
        run: `training.runs.run_dir.load_run(...)`.
        inputs: Sentences, or series (arrays or lines of numbers).
        beam_size: Beams of a translator (1: greedy).
        batch_size: Inputs per model call.
    """
    serving = run.task.serving()
    serving.check_beam_size(beam_size)
    length_penalty = run.config.get("length_penalty", 0.6)
    return answer_in_batches(
        serving, _parsed(serving, inputs), batch_size,
        lambda batch: serving.outputs(run.model, batch, beam_size, length_penalty),
    )


class SavedModelPredictor:
    """An exported SavedModel and its task, loaded once for many `predict` calls.

    Args:
        export_dir: A SavedModel export (`training.task_models.TaskModel.export`).
        task: The task name; by default the `task` of its `assets/config.json`.
    """

    def __init__(self, export_dir, task=None):
        self.export_dir = os.fspath(export_dir)
        check_saved_model_export(self.export_dir)  # its manifest, before anything is read
        serving = get_task(task or _exported_task(self.export_dir)).serving()
        self.serving = serving_for_export(serving, self.export_dir)
        self.loaded = load_saved_model(self.export_dir)

    def predict(self, inputs, beam_size=1, batch_size=64):
        """Lines for `inputs` from the SavedModel's signature (see `predict_run`)."""
        signature = self.loaded.signatures[self.serving.signature_name(beam_size)]

        def answer(batch):
            feeds = {k: tf.constant(v) for k, v in self.serving.serving_inputs(batch).items()}
            return {k: v.numpy() for k, v in signature(**feeds).items()}

        return answer_in_batches(self.serving, _parsed(self.serving, inputs), batch_size, answer)


#: What `tf.saved_model.load` raises for a variables file cut short or
#: damaged: an `IndexError` ("Read less bytes than requested") from the data,
#: an `OpError` ("not an sstable") from the index.  (`saved_model.pb` cut
#: short is an OSError that names it: "Cannot parse file".)
_VARIABLES_ERRORS = (IndexError, tf.errors.OpError)
_DAMAGED_CODES = (tf.errors.UNKNOWN, tf.errors.DATA_LOSS)


def load_saved_model(export_dir):
    """`tf.saved_model.load(export_dir)`; a file missing, cut short or
    damaged is an OSError or ValueError naming it."""
    export_dir = _check_saved_model_files(export_dir)
    with _saved_model_errors(export_dir):
        return tf.saved_model.load(export_dir)


def check_saved_model(export_dir):
    """Reads every variable of SavedModel `export_dir` (without its graph).

    A quick check, for a caller that hands the export to other processes:
    its manifest first (`check_saved_model_export`), then a variables file
    missing, cut short or damaged is an OSError or ValueError naming it, as
    `load_saved_model` raises.
    """
    check_saved_model_export(export_dir)
    export_dir = _check_saved_model_files(export_dir)
    variables = os.path.join(export_dir, "variables")
    if not os.path.isdir(variables):
        return
    with _saved_model_errors(export_dir):
        reader = tf.train.load_checkpoint(os.path.join(variables, "variables"))
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)


def _check_saved_model_files(export_dir):
    export_dir = os.fspath(export_dir)
    variables = os.path.join(export_dir, "variables")
    for path in (os.path.join(export_dir, "saved_model.pb"),
                 os.path.join(variables, "variables.index")):
        if not os.path.isfile(path) and (path.endswith(".pb") or os.path.isdir(variables)):
            raise FileNotFoundError(
                f"{path!r} is missing: {export_dir!r} is not a whole SavedModel; export it again."
            )
    return export_dir


@contextlib.contextmanager
def _saved_model_errors(export_dir):
    """A SavedModel file cut short or damaged, met inside, as a ValueError naming it."""
    try:
        yield
    except _VARIABLES_ERRORS as error:
        if isinstance(error, tf.errors.OpError) and error.error_code not in _DAMAGED_CODES:
            raise  # not a file's bytes (an op not registered, ...)
        where = os.path.join(export_dir, "variables")
        raise ValueError(
            f"The SavedModel {where!r} cannot be read ({getattr(error, 'message', error)}): "
            f"a file of it is cut short or damaged; export {export_dir!r} again."
        ) from None


def _exported_settings(export_dir):
    """The export's `assets/config.json` ({} where it is not a JSON object)."""
    path = os.path.join(export_dir, "assets", "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No SavedModel config at {path!r}; is {export_dir!r} an export?")
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path!r} is not a readable config ({error}); export "
                         f"{export_dir!r} again.") from None
    return values if isinstance(values, dict) else {}


def serving_for_export(serving, export_dir):
    """`serving` (a task's serving side), its series laid out as the export
    at `export_dir` takes them: channels first where its config says so,
    else `(B, T, F)`, as exports took series before (a new serving side
    where the layouts differ)."""
    inputs = getattr(serving, "inputs", None)
    if isinstance(inputs, SeriesInputs):
        channels_first = _exported_settings(export_dir).get("series_layout") == "channels_first"
        if channels_first != inputs.channels_first:
            return ClassifierServing.for_series(serving.label_names, serving.name, channels_first)
    return serving


def _exported_task(export_dir):
    name = _exported_settings(export_dir).get("task")
    if name is None:
        path = os.path.join(export_dir, "assets", "config.json")
        raise ValueError(f"{path!r} names no task; pass the task (--task).")
    return name


def read_inputs(arguments=(), input_file=None, stdin=None):
    """The raw inputs: `arguments`, else the lines of `input_file` ("-": stdin), else stdin.

    A line is one input; the line break (and a "\\r" before it) is not part
    of it, and a last line break does not start another input.

    Series files are read whole instead, one input a series, each `(T, C)`
    of its own length: a `.ts` file (`training.data.series_files.read_ts`),
    and a `.csv` file whose header begins `series_id,channel,label`
    (`read_series_csv`; another `.csv` is lines).  Their labels are not
    read, and may be left out; missing values stay NaN, which the model
    fills (`keras_transformer.layers.series_masking`).

    A text file is read as `training.data.readers.read_lines` reads it
    (gzip, a byte-order mark and "\\r\\n" line ends taken care of).

    Raises:
        ValueError: If both `arguments` and `input_file` are given, or a
            file is not UTF-8, or a series file is malformed or holds a
            series without a known value (the message names the file and
            the line).
        FileNotFoundError, IsADirectoryError: If `input_file` is no file.
    """
    if arguments and input_file is not None:
        raise ValueError(
            f"Give inputs as arguments or with --input, not both; received --input {input_file!r}."
        )
    if arguments:
        return list(arguments)
    if input_file is not None and input_file != "-":
        if not os.path.isfile(input_file):
            raise no_file(input_file, "--input")
        if _is_series_file(input_file):
            return _read_series_inputs(input_file)
        return read_lines(input_file)
    text = (stdin or sys.stdin).read()
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _is_series_file(path):
    """A `.ts` file, or a `.csv` file in `read_series_csv`'s layout (by its header)."""
    suffix = series_files.series_suffix(path)
    if suffix == ".ts":
        return True
    if suffix != ".csv" or not os.path.isfile(path):
        return False
    lines = read_lines(path)
    header = [cell.strip().lower() for cell in (lines[0] if lines else "").split(",")[:3]]
    return header == ["series_id", "channel", "label"]


def _read_series_inputs(path):
    """The series of a `.ts` / `.csv` file, each cut to its own length (NaN where missing)."""
    if series_files.series_suffix(path) == ".ts":
        x, _, _, lengths = series_files.read_ts(path, labels=False)
    else:
        x, _, _, lengths = series_files.read_series_csv(path, labels=False)
    return [x[i, : lengths[i]] for i in range(len(x))]
