"""Time-series classification: numeric series -> a `TransformerClassifier` on features."""

import math
import os

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.layers import PatchStem, RandomKernelSeriesStem
from keras_transformer.layers.series_stem import has_stem_features
from training.data import readers, series_files, synthetic_series
from training.data.common import TaskData, require_file
from training.pipeline import datasets
from training.pipeline.series_augmentation import augment_series
from training.recipe import series
from training.serving.task_serving import ClassifierServing
from training.tasks import classifiers
from training.tasks.base import Task
from training.tasks.common import preset_config
from training.tasks.options import SeriesOptions

#: The most memory one split's stem features may take (every member's, float32);
#: past it the model's stems compute them batch by batch.
STEM_CACHE_BYTES = 1024**3
#: The smallest batch a validation or test pass reads (`make_dataset`).
EVAL_BATCH_SIZE = 256

#: The readers of series files by suffix (after any ".gz"); others are UCR.
SERIES_READERS = {".ts": series_files.read_ts, ".csv": series_files.read_series_csv}


def read_series_file(path, what):
    """(series (N, T, C), class ids (N,), label values) of one data file.

    The suffix picks the reader: `.ts` `series_files.read_ts`, `.csv`
    `series_files.read_series_csv`, any other `readers.read_ucr` (one
    channel).  Series of unequal lengths come NaN-padded at the end to the
    longest, and missing values as NaN: the model masks the padding and
    fills the missing values (`keras_transformer.layers.series_masking`).

    Args:
        path: The file.
        what: What the file is ("train file"), for the messages.

    Raises:
        FileNotFoundError: If `path` is no file.
        ValueError: If a reader refuses the file, or a series has no known
            value; the message names the file and the series.
    """
    require_file(path, what)
    reader = SERIES_READERS.get(series_files.series_suffix(path))
    if reader is None:
        x, y, names = readers.read_ucr(path)
    else:
        x, y, names, _ = reader(path)
    where = f"{what} {os.fspath(path)!r}"
    series_files.check_series_values(x, lambda i: f"{where}: series {i + 1}", missing="NaN or '?'")
    return x, y, names


def series_stem(config, m, x, index=0):
    """The input stem of ensemble member `index` for training series `x` `(N, T, F)`:
    `config.series_stem`'s "patches" (`PatchStem`) or "random_kernels"
    (`RandomKernelSeriesStem`, whose kernels member i draws with seed
    `config.seed + 1000 i`), of the preset `m`'s width and positions."""
    sizes = dict(max_sequence_length=m.max_sequence_length, positions=m.positions,
                 standardize_series=config.standardize_series,
                 series_level_features=config.series_level_features)
    num_features = int(x.shape[-1])
    if config.series_stem == "random_kernels":
        return RandomKernelSeriesStem(
            num_features, m.hidden_dim, **sizes, series_length=int(x.shape[1]),
            num_windows=config.stem_windows, num_kernel_features=config.stem_kernel_features,
            max_positions=series.STEM_MAX_POSITIONS, seed=config.seed + 1000 * index,
        )
    return PatchStem(num_features, m.hidden_dim, **sizes, patch_length=config.patch_length,
                     patch_stride=config.patch_stride)


class SeriesClassification(Task):
    """Series `(T, F)` -> class, in tokens of `patch_length` steps (PatchTST).

    Data: `train_files[0]` and `test_files[0]` (one file each) in the format their suffix
    names (`read_series_file`: `.ts` and `.csv` of several channels, else
    UCR: label, then the values), of unequal lengths and with missing
    values where the files have them (NaN, `read_series_file`),
    or without files a generated two-class task (normal
    vs. anomalous, written to `RUN/data`).  Every training series trains:
    `valid_files[0]` validates when given, otherwise the training series do
    (their accuracy measures fit, not generalisation, so the presets select
    the last weights).  With 36 series a tenth held out is 4 series, too few
    to choose anything by, and a tenth fewer to learn from.
    Sizes the config leaves null come from the data
    (`training.recipe.series`).  Labels are one-hot, mixed by `mixup_alpha`
    on training batches; loss: cross-entropy with `label_smoothing`.
    Selection and test: accuracy.  The task name is the config's
    `"timeseries"`.
    """

    name = "timeseries"
    datasets = ("ucr", "files", "arrays")
    #: Paths each files field holds where it is given (`TrainingConfig.validate`):
    #: one file each (series of several files are not joined).
    file_counts = {"train_files": (1,), "valid_files": (1,), "test_files": (1,)}
    options = SeriesOptions
    data_fields = ("batch_size", "epochs", "steps_per_epoch", "max_sequence_length",
                   "patch_length", "patch_stride", "ensemble_size")
    #: Series of unequal lengths share a batch, NaN-padded (the model masks them).
    same_key_batches = False

    def recipe_defaults(self):
        # AdamW decay 0.05 (0.01 before): a few dozen series against ~70k
        # weights; the hold-out runs of the patch recipe used 0.05 (docs/experiment-log.md,
        # "The patch recipe's rules, from hold-out runs").
        return {"weight_decay": 0.05}

    def check_config(self, config):
        super().check_config(config)
        if config.num_classes == 1:
            raise ValueError(
                "num_classes=1 (one sigmoid output) does not apply to task='timeseries', "
                "whose labels are one-hot; received num_classes=1 (0 counts the classes)."
            )

    def data_defaults(self, config, data):
        """`training.recipe.series.series_recipe` of the training split's (N, T, K, F),
        T the longest series (the split is NaN-padded to it).

        `steps_per_epoch` is taken only when `epochs` is null too: an epoch
        count the user gives means passes over the data.  A given
        `patch_length` gets the half stride of its own length.
        """
        x = data.train[0]
        rules = (series.series_stem_recipe if config.series_stem == "random_kernels"
                 else series.series_recipe)
        recipe = rules(int(x.shape[0]), int(x.shape[1]), len(data.label_names), int(x.shape[2]))
        if config.epochs is not None:
            recipe.pop("steps_per_epoch")
        if config.patch_length is not None and config.series_stem == "patches":
            recipe["patch_stride"] = math.ceil(config.patch_length / 2)
        return recipe

    # --- data -------------------------------------------------------------------

    def prepare(self, config, data, run_dir, write=True):
        """The class names (`Task.prepare`), then each member's fixed stem:
        the "random_kernels" stem has no trainable weights before its
        projection (`SeriesStem.fixed_features`: the kernels, the biases
        adapted to the training series), so each split's series are turned
        into its tokens once (`FixedStems`, when `make_dataset` first
        reads the split) rather than at every update; `build_model` gives
        the model's stems the same fixed weights."""
        super().prepare(config, data, run_dir, write)
        self.fixed_stems = FixedStems.for_data(config, data)

    def load_data(self, config, run_dir):
        if config.dataset == "arrays":
            raise ValueError(
                "dataset='arrays': the run trained on series given in memory "
                "(training.train.train(data=...), as SeriesClassifier.fit does); no file holds "
                "them to read again. Give the series as train_files (and test_files) with "
                "dataset='ucr' to train or evaluate from files."
            )
        if config.train_files:
            x, y, names = read_series_file(config.train_files[0], "train file")
            test_path = (config.test_files or config.train_files)[0]
            tx, ty_raw, test_names = read_series_file(test_path, "test file")
            ty = self._label_ids(ty_raw, test_names, names, "Test")
        else:
            x, y = synthetic_series.generate_series(1200, seed=config.seed)
            tx, ty = synthetic_series.generate_series(400, seed=config.seed + 1)
            names = [0, 1]
            os.makedirs(os.path.join(run_dir, "data"), exist_ok=True)
            synthetic_series.write_ucr(os.path.join(run_dir, "data", "TRAIN.txt"), x, y)
            synthetic_series.write_ucr(os.path.join(run_dir, "data", "TEST.txt"), tx, ty)
        y = np.asarray(y)
        valid = (x, y)
        if config.valid_files:
            vx, vy_raw, valid_names = read_series_file(config.valid_files[0], "valid file")
            valid = (vx, self._label_ids(vy_raw, valid_names, names, "Validation"))
        return TaskData((x, y), valid, (tx, ty), label_names=[str(n) for n in names])

    @staticmethod
    def _label_ids(ids, file_names, names, which):
        index = {name: i for i, name in enumerate(names)}
        unknown = sorted(set(file_names) - set(index), key=str)
        if unknown:
            raise ValueError(f"{which} labels {unknown} do not occur in the training file.")
        return np.array([index[file_names[i]] for i in ids], "int32")

    def make_dataset(self, config, split, shuffle=False, repeat=False, training=False):
        length = config.max_sequence_length
        if config.series_stem == "random_kernels":
            # The stem's tokens are windows of each series' own length: a
            # longer test series is read whole, not cut to the training's T.
            length = max(length, int(np.shape(split[0])[1]))
        fixed = getattr(self, "fixed_stems", None)
        # Scoring reads batches of at least EVAL_BATCH_SIZE: nothing in the
        # model's answer to a series depends on the others in its batch, and
        # a thousand test series in batches of 16 are 65 steps where 4 do.
        batch_size = config.batch_size if training else max(config.batch_size, EVAL_BATCH_SIZE)
        dataset = datasets.make_classification_dataset(
            split[0], split[1], max_sequence_length=length,
            batch_size=batch_size, seed=config.seed, shuffle=shuffle, repeat=repeat,
            stem_features=None if fixed is None else fixed.features_of(split[0]),
        )
        num_classes = config.num_classes or len(self.label_names or ()) or int(max(split[1]) + 1)
        if training:
            # One-hot labels, mixed by mixup (series_augmentation); batch i is
            # mixed with the seed (seed, i), so a resumed stream repeats it.
            dataset = augment_series(dataset, num_classes, config.mixup_alpha, seed=config.seed)
        else:
            dataset = dataset.map(lambda x, y: (x, tf.one_hot(y, num_classes)))
        # The model reads series `(B, T, F)`, or series with their stems' fixed features.
        return dataset.map(lambda x, y: (x if has_stem_features(x) else x["features"], y))

    def batch_tokens(self, config, inputs, labels):
        rows, length = (inputs["features"] if has_stem_features(inputs) else inputs).shape[:2]
        if config.series_stem == "random_kernels":
            return rows * config.stem_windows
        p = config.patch_length
        s = config.patch_stride or p
        return rows * (-(-max(length - p, 0) // s) + 1)  # patches (SeriesPatches)

    # --- model, selection, evaluation ------------------------------------------

    def build_model(self, config, data):
        """The classifier (`classifiers.build_classifier`), each member on its
        own stem (`series_stem`), adapted to the training series: the
        "random_kernels" stem's biases, and with `series_level_features` the
        standardization of the series' level and scale."""
        x = data.train[0]
        fixed = getattr(self, "fixed_stems", None)

        def member(m, num_classes, index, **name):
            stem = series_stem(config, m, x, index)
            model = classifiers.transformer_classifier(m, num_classes, stem, **name)
            if fixed is None:
                stem.adapt(x)
            else:  # the stem its training series' tokens were computed with
                fixed.give_weights(stem, index)
            return model

        return classifiers.build_classifier(config, data, member)

    def loss_and_metrics(self, config):
        """Cross-entropy on one-hot (mixed) labels with `label_smoothing`; accuracy."""
        loss = keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=config.label_smoothing
        )
        return loss, [keras.metrics.CategoricalAccuracy(name="accuracy")]

    def validation_score(self, config, model, data, valid):
        return classifiers.accuracy_score(valid)

    def evaluate_test(self, config, model, data, plan=None):
        return classifiers.test_metrics(self, config, model, data)

    # --- serving ----------------------------------------------------------------

    def serving(self):
        return ClassifierServing.for_series(self.label_names, self.name)


class FixedStems:
    """The members' "random_kernels" stems, adapted to the training series, and
    the fixed features (`SeriesStem.fixed_features`) they make of each
    split: computed once per series, where every update used to recompute
    them for its batch (30 passes, up to five members).

    The model's own stems take these stems' fixed weights (`give_weights`):
    the same kernels, biases and statistics, so a cached token is the one
    the model computes from the raw series, as a served request does.  Not
    made for the "patches" stem (its tokens cost nothing) or with
    `mixup_alpha` (mixup mixes the raw series, whose features then differ);
    a split whose features would pass `STEM_CACHE_BYTES` is read raw.
    """

    def __init__(self, stems):
        self.stems = stems
        self._splits = []  # [(series array, features)], the arrays held

    @classmethod
    def for_data(cls, config, data):
        """The members' stems adapted to `data`'s training series, or None
        where no split is cached (above)."""
        if config.series_stem != "random_kernels" or config.mixup_alpha:
            return None
        x = data.train[0]
        m = preset_config(config)
        stems = [series_stem(config, m, x, i) for i in range(config.ensemble_size or 1)]
        for stem in stems:
            stem.adapt(x)
        return cls(stems)

    def features_of(self, series):
        """The fixed features of `series` `(N, T, F)`: a dict of arrays (one
        member) or a tuple of them, one a member (`ClassifierEnsemble.member_inputs`),
        computed once per array object; None past `STEM_CACHE_BYTES`."""
        for array, features in self._splits:
            if array is series:
                return features
        kernels = self.stems[0].kernel_stem
        size = 4 * len(series) * kernels.num_windows * kernels.num_outputs * len(self.stems)
        if size > STEM_CACHE_BYTES:
            return None
        features = tuple(stem.stem_features(series) for stem in self.stems)
        features = features[0] if len(self.stems) == 1 else features
        self._splits.append((series, features))
        return features

    def give_weights(self, stem, index):
        """Gives `stem` (member `index`'s, built) the fixed weights of this
        member's stem: the kernels, their biases and statistics, and the level
        features' standardization."""
        targets = stem.non_trainable_weights
        sources = self.stems[index].non_trainable_weights
        names = ([w.path.split("/")[-2:] for w in targets],
                 [w.path.split("/")[-2:] for w in sources])
        if names[0] != names[1]:
            raise RuntimeError(f"Stems of different layouts: {names[0]} vs {names[1]}.")
        for target, value in zip(targets, sources, strict=True):
            target.assign(value)
