"""Time-series classification: numeric series -> a `TransformerClassifier` on features."""

import os
import re

import numpy as np

from keras_transformer.models import TransformerClassifier
from training import pipeline, synthetic_series, text_files
from training.data import TaskData, require_file
from training.tasks import classifiers
from training.tasks.base import Task

_NUMBER_SEPARATORS = re.compile(r"[,\s]+")


class SeriesClassification(Task):
    """Series `(T, F)` -> class, in tokens of `patch_length` steps (PatchTST).

    Data: a UCR-format `train_files[0]` (label, then the values; every 10th
    training series validates) and `test_files[0]`, or without files a
    generated two-class task (normal vs. anomalous, written to `RUN/data`).
    Selection and test: accuracy.  The task name is the config's
    `"timeseries"`.
    """

    name = "timeseries"
    datasets = ("ucr", "files")
    model_class = TransformerClassifier
    fields = ("patch_length",)
    #: Series are not masked: only series of one length share a batch.
    same_key_batches = True

    def recipe_defaults(self):
        return {"weight_decay": 0.01}  # small data: more decay than translation's

    # --- data -------------------------------------------------------------------

    def load_data(self, config, run_dir):
        if config.train_files:
            x, y, names = text_files.read_ucr(require_file(config.train_files[0], "train file"))
            test_path = (config.test_files or config.train_files)[0]
            tx, ty_raw, test_names = text_files.read_ucr(require_file(test_path, "test file"))
            index = {name: i for i, name in enumerate(names)}
            unknown = sorted(set(test_names) - set(index), key=str)
            if unknown:
                raise ValueError(f"Test labels {unknown} do not occur in the training file.")
            ty = np.array([index[test_names[i]] for i in ty_raw], "int32")
        else:
            x, y = synthetic_series.generate_series(1200, seed=config.seed)
            tx, ty = synthetic_series.generate_series(400, seed=config.seed + 1)
            names = [0, 1]
            os.makedirs(os.path.join(run_dir, "data"), exist_ok=True)
            synthetic_series.write_ucr(os.path.join(run_dir, "data", "TRAIN.txt"), x, y)
            synthetic_series.write_ucr(os.path.join(run_dir, "data", "TEST.txt"), tx, ty)
        # Hold out every 10th training series for validation.
        valid = np.arange(len(x)) % 10 == 0
        return TaskData(
            (x[~valid], np.asarray(y)[~valid]), (x[valid], np.asarray(y)[valid]), (tx, ty),
            label_names=[str(n) for n in names],
        )

    def make_dataset(self, config, split, shuffle=False, repeat=False, training=False):
        dataset = pipeline.make_classification_dataset(
            split[0], split[1], max_sequence_length=config.max_sequence_length,
            batch_size=config.batch_size, seed=config.seed, shuffle=shuffle, repeat=repeat,
        )
        return dataset.map(lambda x, y: (x["features"], y))

    def batch_tokens(self, config, inputs, labels):
        rows, length = inputs.shape[:2]
        return rows * -(-length // config.patch_length)  # patches

    # --- model, selection, evaluation ------------------------------------------

    def build_model(self, config, data):
        return classifiers.build_classifier(
            config, data, num_features=data.train[0].shape[-1],
            patch_length=config.patch_length,
        )

    def loss_and_metrics(self, config):
        return classifiers.loss_and_metrics()

    def validation_score(self, config, model, data, valid):
        return classifiers.accuracy_score(valid)

    def evaluate_test(self, config, model, data, plan=None):
        return classifiers.test_metrics(self, config, model, data)

    # --- inference and export ---------------------------------------------------

    def parse_input(self, example):
        """A series `(T, F)` float32: an array (`(T,)` is one feature), or a line
        of numbers separated by commas or spaces, time steps by ";" when F > 1
        ("1 2 3" is (3, 1); "1,2; 3,4" is (2, 2))."""
        if isinstance(example, (str, bytes)):
            text = example.decode() if isinstance(example, bytes) else example
            steps = [s.strip() for s in text.split(";")] if ";" in text else None
            try:
                if steps is None:
                    values = [[float(v)] for v in _NUMBER_SEPARATORS.split(text.strip()) if v]
                else:
                    values = [[float(v) for v in _NUMBER_SEPARATORS.split(s) if v]
                              for s in steps if s]
                series = np.asarray(values, np.float32)
            except ValueError as error:
                raise ValueError(
                    f"A series must be numbers, as many at every step; received {text!r}."
                ) from error
        else:
            series = np.asarray(example, np.float32)
            series = series[:, None] if series.ndim == 1 else series
        if series.ndim != 2 or series.shape[0] == 0 or not np.isfinite(series).all():
            raise ValueError(
                "A series must be finite numbers, (T,) or (T, F) with T >= 1 and one F "
                f"per step; received {example!r}."
            )
        return series

    def outputs(self, model, examples, beam_size=1, length_penalty=0.6):
        """Probabilities and labels of series cut to `max_sequence_length` steps, as served."""
        self.check_beam_size(beam_size)
        features = np.asarray(list(examples), np.float32)[:, : int(model.max_sequence_length)]
        if features.shape[-1] != model.num_features:
            raise ValueError(
                f"The model reads {model.num_features} features per step; received "
                f"series of shape {features.shape[1:]}."
            )
        return classifiers.outputs(model, features, self.label_names)

    def format_outputs(self, outputs):
        return classifiers.format_outputs(outputs)

    def serving_inputs(self, examples):
        return {"features": np.asarray(list(examples), np.float32)}

    def serving_module(self, model):
        return classifiers.serving_module(model, None, self.label_names)

    def class_names(self, model):
        return classifiers.class_names(model, self.label_names)

    def tflite_model(self, model, quantize="none", sequence_length=None, batch_size=1):
        return classifiers.tflite_model(model, quantize, sequence_length, batch_size)

    def probe_inputs(self, model, num_examples=6, seed=0):
        """Standard normal series of min(16, `max_sequence_length`) steps."""
        length = min(16, int(model.max_sequence_length))
        rng = np.random.default_rng(seed)
        return rng.standard_normal((num_examples, length, model.num_features)).astype(np.float32)
