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

    def make_dataset(self, config, split, shuffle=False, repeat=False):
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

    def evaluate_test(self, config, model, data):
        return classifiers.test_metrics(self, config, model, data)
