"""Loads the splits a `TrainingConfig` names, checking them before training."""

import dataclasses
import os
import pathlib

import numpy as np

from training import synthetic_series, text_files, toy_data

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class TaskData:
    """Train/valid/test splits; `inputs` are strings or `(N, T, F)` arrays."""

    train: tuple
    valid: tuple
    test: tuple
    label_names: list | None = None


def resolve_data_dir(data_dir):
    """`data_dir` as given if it exists, else relative to the repository."""
    path = pathlib.Path(data_dir)
    if path.is_dir() or path.is_absolute():
        return path
    return REPO_ROOT / data_dir


def _require(path, what):
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what} not found: {os.fspath(path)!r}.")
    return path


def load_task_data(config, run_dir):
    """All three splits of the configured dataset, read and validated."""
    if config.task == "translation":
        return _translation(config, run_dir)
    if config.task == "classification":
        return _classification(config)
    return _timeseries(config, run_dir)


def _translation(config, run_dir):
    if config.dataset == "toy":
        paths = toy_data.write_toy_corpus(
            os.path.join(run_dir, "data"), config.toy_train_size,
            config.toy_eval_size, config.toy_eval_size, seed=config.seed,
        )
        splits = [paths["train"], paths["valid"], paths["test"]]
    elif config.dataset == "multi30k":
        folder = resolve_data_dir(config.data_dir) / "multi30k"
        src, tgt = config.source_language, config.target_language
        splits = [
            (folder / f"{name}.{src}.gz", folder / f"{name}.{tgt}.gz")
            for name in ("train", "val", "test_2016_flickr")
        ]
    elif config.dataset == "files":
        splits = [config.train_files, config.valid_files or config.train_files,
                  config.test_files or config.valid_files or config.train_files]
    else:
        raise ValueError(
            f"dataset={config.dataset!r} is not a translation dataset; use toy, multi30k or files."
        )
    read = []
    for name, pair in zip(("train", "valid", "test"), splits, strict=True):
        if len(pair) != 2:
            raise ValueError(f"{name}_files must be (source, target); received {pair!r}.")
        source, target = (_require(p, f"{name} file") for p in pair)
        read.append(text_files.read_parallel(source, target, encoding=config.encoding))
    return TaskData(*read)


def _classification(config):
    folder = resolve_data_dir(config.data_dir) / "sentence-classification"
    if config.dataset == "sst2":
        files = [folder / f"stsa.binary.{name}" for name in ("train", "dev", "test")]
    elif config.dataset == "trec":
        # No development split: every 10th training question validates.
        files = [folder / "TREC.train.all", None, folder / "TREC.test.all"]
    elif config.dataset == "files":
        files = [config.train_files[0],
                 (config.valid_files or config.train_files)[0],
                 (config.test_files or config.valid_files or config.train_files)[0]]
    else:
        raise ValueError(
            f"dataset={config.dataset!r} is not a text classification dataset; "
            "use sst2, trec or files."
        )
    texts, labels, names = text_files.read_classification(
        _require(files[0], "train file"), encoding=config.encoding
    )
    splits = [(texts, np.asarray(labels, "int32"))]
    if files[1] is None:
        held_out = np.arange(len(texts)) % 10 == 0
        splits = [
            ([t for t, h in zip(texts, held_out, strict=True) if h == side],
             splits[0][1][held_out == side])
            for side in (False, True)
        ]
    for path, what in zip(files[1:], ("valid file", "test file"), strict=True):
        if path is None:
            continue
        t, y, _ = text_files.read_classification(
            _require(path, what), label_names=names, encoding=config.encoding
        )
        splits.append((t, np.asarray(y, "int32")))
    return TaskData(*splits, label_names=[str(n) for n in names])


def _timeseries(config, run_dir):
    if config.train_files:
        x, y, names = text_files.read_ucr(_require(config.train_files[0], "train file"))
        test_path = (config.test_files or config.train_files)[0]
        tx, ty_raw, test_names = text_files.read_ucr(_require(test_path, "test file"))
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
