"""Checkpoint averaging (paper Section 6.1).

"For the base models, we used a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals. For the big models,
we averaged the last 20 checkpoints."

Checkpoints are Keras `.weights.h5` files (`keras.callbacks.ModelCheckpoint(
save_weights_only=True)`) or `.keras` archives. Every floating-point model
variable is averaged element-wise (in float64); optimizer state and integer
variables (e.g. random seed states) are taken from the last checkpoint.

Command line (the architecture comes from a `.keras` file: `--model`, or
`RUN/model.keras`; `--run-dir` averages `RUN/checkpoints/epoch-*.weights.h5`):

    python -m training.runs.checkpoint_average --run-dir RUN --last 5 \
        --output RUN/averaged.weights.h5
    python -m training.runs.checkpoint_average --model RUN/model.keras \
        --output averaged.keras "RUN/checkpoints/epoch-00[4-8].weights.h5"
"""

import argparse
import contextlib
import glob
import os
import re
import sys
import tempfile
import zipfile

import h5py
import keras
import numpy as np
from keras.src.saving import saving_lib

import keras_transformer  # noqa: F401  registers the custom layers
from training.task_models import TaskModel

# The layout of training/runs/run_dir.py: RUN/model.keras and
# RUN/checkpoints/epoch-<e>.weights.h5.
RUN_MODEL = "model.keras"
RUN_CHECKPOINT_PATTERN = os.path.join("checkpoints", "epoch-*.weights.h5")
_OPTIMIZER_GROUP = "optimizer/"
_KERAS_ARCHIVE_WEIGHTS = "model.weights.h5"
_BACKBONE = "backbone"  # a task model's group of its backbone's weights


@contextlib.contextmanager
def _open_weights(path):
    """Opens the weights HDF5 of a `.weights.h5` file or a `.keras` archive."""
    path = str(path)
    if path.endswith(".keras"):
        with zipfile.ZipFile(path) as archive:
            with archive.open(_KERAS_ARCHIVE_WEIGHTS) as member:
                with h5py.File(member, "r") as weights_file:
                    yield weights_file
    elif path.endswith(".weights.h5"):
        with h5py.File(path, "r") as weights_file:
            yield weights_file
    else:
        raise ValueError(
            f"Expected a `.weights.h5` or `.keras` checkpoint. Received: {path}"
        )


def _model_datasets(weights_file):
    """{dataset path: dataset} of the model variables, optimizer excluded; a
    task model's paths without their `backbone/`, so that a run's epochs
    from before and after runs trained through their task models compare
    and average alike."""
    datasets = {}
    prefix = _BACKBONE + "/"

    def visit(name, item):
        if isinstance(item, h5py.Dataset) and not name.startswith(_OPTIMIZER_GROUP):
            datasets[name[len(prefix):] if name.startswith(prefix) else name] = item

    weights_file.visititems(visit)
    return datasets


def _is_float(dtype):
    return "float" in np.dtype(dtype).name


def _check_same_variables(path, datasets, reference_path, reference):
    missing = sorted(set(reference) - set(datasets))
    unexpected = sorted(set(datasets) - set(reference))
    if missing or unexpected:
        raise ValueError(
            f"Checkpoint {path} holds different variables from {reference_path}: "
            f"missing {missing}, unexpected {unexpected}."
        )
    for name, (shape, dtype) in reference.items():
        if (datasets[name].shape, datasets[name].dtype) != (shape, dtype):
            raise ValueError(
                f"Checkpoint {path}: variable {name} has shape "
                f"{datasets[name].shape} and dtype {datasets[name].dtype}, but "
                f"{reference_path} has shape {shape} and dtype {dtype}."
            )


def save_model_weights(model, path):
    """Writes `model`'s weights, and not its optimizer's, to a `.weights.h5` file.

    What selection and averaging read (`average_checkpoints`): AdamW's two
    moments per weight would triple the file for nothing.  Keras's public
    `save_weights` has no way to leave the optimizer out; this is the call
    it makes, told to skip it.
    """
    skip = [model.optimizer] if getattr(model, "optimizer", None) is not None else None
    saving_lib.save_weights_only(model, os.fspath(path), objects_to_skip=skip)


def load_model_weights(model, path):
    """Loads a `.weights.h5` file into `model`; one without optimizer state
    (`save_model_weights`) leaves the optimizer's as it is, silently.

    A task model also reads its backbone's file: the checkpoints of a run
    written before runs trained through their task models
    (`_under_backbone`), so such a run resumes and selects as it would have.
    """
    with h5py.File(path, "r") as weights_file:
        has_optimizer = _OPTIMIZER_GROUP.rstrip("/") in weights_file
        backbone_file = isinstance(model, TaskModel) and _BACKBONE not in weights_file
    with tempfile.TemporaryDirectory() if backbone_file else contextlib.nullcontext() as tmp:
        if backbone_file:
            path = _under_backbone(path, os.path.join(tmp, "task_model.weights.h5"))
        if has_optimizer or getattr(model, "optimizer", None) is None:
            model.load_weights(path)
        else:
            saving_lib.load_weights_only(model, os.fspath(path),
                                         objects_to_skip=[model.optimizer])


def _under_backbone(path, output_path):
    """A backbone's weights file laid out as its task model's: its groups
    under `backbone/`, the optimizer's state where it was (one optimizer
    trains both, on the same variables)."""
    with h5py.File(path, "r") as source, h5py.File(output_path, "w") as target:
        for key, value in source.attrs.items():
            target.attrs[key] = value
        backbone = target.create_group(_BACKBONE)
        for name in source:
            source.copy(source[name], target if name == _OPTIMIZER_GROUP.rstrip("/") else backbone,
                        name)
        target.create_group("vars")  # the task model's own: none
    return output_path


def average_weights_files(paths, output_path):
    """Writes the element-wise mean of checkpoints to a `.weights.h5` file.

    Args:
        paths: list of `.weights.h5` / `.keras` checkpoint paths, oldest first.
        output_path: path of the `.weights.h5` file to write; it has the
            layout of `paths[-1]` (so `model.load_weights` reads it).

    Returns:
        `output_path`.

    Raises:
        ValueError: if `paths` is empty, or a checkpoint's model variables
            (names, shapes, dtypes) differ from the first one's; the message
            names the file.
    """
    paths = [str(p) for p in paths]
    if not paths:
        raise ValueError("`paths` is empty: nothing to average.")
    sums, reference = {}, None
    for path in paths:
        with _open_weights(path) as weights_file:
            datasets = _model_datasets(weights_file)
            if reference is None:
                reference = {n: (d.shape, d.dtype) for n, d in datasets.items()}
            _check_same_variables(path, datasets, paths[0], reference)
            for name, dataset in datasets.items():
                if _is_float(dataset.dtype):
                    value = np.asarray(dataset[()], dtype=np.float64)
                    sums[name] = sums[name] + value if name in sums else value
    with _open_weights(paths[-1]) as last, h5py.File(output_path, "w") as output:
        output.attrs.update(last.attrs)
        for key in last:
            last.copy(last[key], output, name=key)
        prefix = _BACKBONE + "/" if _BACKBONE in last else ""
        for name, total in sums.items():
            output[prefix + name][...] = (total / len(paths)).astype(output[prefix + name].dtype)
    return output_path


def average_checkpoints(paths, model):
    """Loads the element-wise mean of checkpoints into `model`.

    Behaves like `model.load_weights(paths[-1])`, except that every
    floating-point model variable is the mean over `paths`.

    Args:
        paths: list of `.weights.h5` / `.keras` checkpoint paths of `model`'s
            architecture, oldest first.
        model: a built `keras.Model`.

    Returns:
        `model`, holding the averaged weights.

    Raises:
        ValueError: if the checkpoints differ from one another, or their
            number of model variables differs from `len(model.weights)`
            (the message names the file).
    """
    with tempfile.TemporaryDirectory() as tmp:
        averaged = average_weights_files(paths, os.path.join(tmp, "avg.weights.h5"))
        with h5py.File(averaged, "r") as weights_file:
            count = len(_model_datasets(weights_file))
        if count != len(model.weights):
            raise ValueError(
                f"Checkpoint {paths[0]} holds {count} model variables, but the "
                f"model '{model.name}' has {len(model.weights)}."
            )
        load_model_weights(model, averaged)
    return model


def _natural_key(path):
    # "ckpt-10" sorts after "ckpt-9".
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def find_checkpoints(patterns, last=None):
    """Checkpoint paths matching glob `patterns`, naturally sorted, last `last`."""
    paths = sorted(
        {p for pattern in patterns for p in glob.glob(pattern)}, key=_natural_key
    )
    if not paths:
        raise FileNotFoundError(f"No checkpoint matches {list(patterns)}.")
    return paths[-last:] if last else paths


def build_model_from_run(run_dir):
    """Loads the architecture saved as `<run_dir>/model.keras` (not compiled)."""
    path = os.path.join(run_dir, RUN_MODEL)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} does not exist; pass the architecture with --model PATH.keras."
        )
    return keras.saving.load_model(path, compile=False)


def main(argv=None):
    """Averages checkpoints from the command line (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="*", help="checkpoint paths or globs")
    parser.add_argument("--run-dir", help="directory holding the checkpoints")
    parser.add_argument(
        "--pattern",
        default=RUN_CHECKPOINT_PATTERN,
        help=f"glob in --run-dir (default {RUN_CHECKPOINT_PATTERN})",
    )
    parser.add_argument("--last", type=int, help="average only the last N")
    parser.add_argument("--model", help=".keras file with the architecture")
    parser.add_argument("--output", required=True, help=".weights.h5 or .keras")
    args = parser.parse_args(argv)
    if args.last is not None and args.last < 1:
        parser.error(f"--last must be at least 1: {args.last}")
    if not args.output.endswith((".weights.h5", ".keras")):
        parser.error(f"--output must end in .weights.h5 or .keras: {args.output}")
    patterns = list(args.checkpoints)
    if args.run_dir:
        patterns.append(os.path.join(args.run_dir, args.pattern))
    if not patterns:
        parser.error("give checkpoint paths/globs or --run-dir")
    if not args.model and not args.run_dir:
        parser.error("give --model (or --run-dir holding model.keras)")
    output = os.path.abspath(args.output)
    paths = [p for p in find_checkpoints(patterns) if os.path.abspath(p) != output]
    paths = paths[-args.last :] if args.last else paths
    if args.model:
        model = keras.saving.load_model(args.model, compile=False)
    else:
        model = build_model_from_run(args.run_dir)
    average_checkpoints(paths, model)
    if args.output.endswith(".keras"):
        model.save(args.output)
    else:
        model.save_weights(args.output)
    print(f"Averaged {len(paths)} checkpoints into {args.output}: {', '.join(paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
