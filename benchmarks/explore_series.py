"""What makes the patched TransformerClassifier learn from a few dozen series.

Not a benchmark with a target: the experiments behind the time-series recipe
(`training/recipe/series.py`, and the notes it cites).  One *recipe* is a
dict of fields (model size, patches, optimisation, augmentation); this script
trains `keras_transformer.models.TransformerClassifier` on one or more UCR
file pairs with plain `model.fit` and prints, per dataset, the accuracy over
seeds.  Compare recipes in updates, never in wall-clock time: the machine is
shared.

Two modes, so that choices are made without the test split:

    val   a stratified hold-out of `val_fraction` of the training series
          (a new draw per seed) is the evaluation set; the model trains on
          the rest.  Every `eval_every` updates its accuracy is recorded.
    test  the model trains on *every* training series for the same number
          of updates, then the test file is scored once.

Usage (from the repository root):

    python3 benchmarks/explore_series.py --mode val --seeds 0 1 \\
        --set num_layers=3 --set mixup=0.2
    python3 benchmarks/explore_series.py --mode test --seeds 0 1 2 \\
        --datasets ArrowHead OSULeaf ACSF1

Without `--set`, the recipe is `training.recipe.series.series_recipe` for
each file's (N, T, K, F); `--set key=value` (JSON value) overrides a field
for every dataset.  `--baseline` starts from the old `timeseries.json`
preset instead (d_model 32, patches of 8, 50 epochs of batch 32, rsqrt
schedule with 200 warm-up updates, truncated to 256 steps).  Each run is
appended as one JSON line to `--out` (benchmarks/results/explore_series.jsonl).
"""

import json
import math
import os
import time
import warnings

import common  # first: sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads
import keras
import numpy as np
import tensorflow as tf

from keras_transformer.models import TransformerClassifier
from training.config import load_config
from training.data.readers import read_ucr
from training.optimization.schedule import WarmupLinearSchedule
from training.pipeline.series_augmentation import augment_series
from training.recipe.series import series_recipe
from training.tasks import get_task

# A functional model of one named input warns when fed the {"features": x} dict.
warnings.filterwarnings("ignore", message="The structure of `inputs`")

DATA = os.path.join(common.REPO_ROOT, "..", "shared", "data", "ucr")
DEFAULT_OUT = os.path.join(common.RESULTS_DIR, "explore_series.jsonl")

# The old preset, in the fields of a recipe (for --baseline).
BASELINE = dict(
    hidden_dim=32, num_heads=4, intermediate_dim=64, num_layers=2, dropout=0.1,
    attention_dropout=0.0, normalize_first=False, head_hidden_dim=None,
    patch_length=8, patch_stride=None, standardize_series=False, max_steps=256,
    batch_size=32, updates=None, epochs=50, schedule="rsqrt", warmup_steps=200,
    learning_rate_scale=0.2, peak_learning_rate=None, weight_decay=0.0,
    label_smoothing=0.0, crop=0.0, jitter=0.0, mixup=0.0,
    average_last=5, eval_every=None, clipnorm=None,
)


# --------------------------------------------------------------------- data
def load(name, seed, mode, val_fraction):
    """(train x, train y, eval x, eval y, K): eval is a hold-out or the test file."""
    x, y, names = read_ucr(os.path.join(DATA, f"{name}_TRAIN.txt"))
    if mode == "test":
        tx, ty_raw, test_names = read_ucr(os.path.join(DATA, f"{name}_TEST.txt"))
        index = {value: i for i, value in enumerate(names)}
        ty = np.array([index[test_names[i]] for i in ty_raw], "int32")
        return x, y, tx, ty, len(names)
    rng = np.random.default_rng(1000 + seed)
    held = np.zeros(len(y), bool)
    for k in range(len(names)):  # stratified: val_fraction of every class, at least one
        members = rng.permutation(np.flatnonzero(y == k))
        held[members[: max(1, round(val_fraction * len(members)))]] = True
    return x[~held], y[~held], x[held], y[held], len(names)


def training_stream(x, y, num_classes, recipe, seed):
    """Endless shuffled batches, transformed by `training.pipeline.series_augmentation`."""
    dataset = tf.data.Dataset.from_tensor_slices(({"features": x}, y))
    dataset = dataset.shuffle(len(x), seed=seed, reshuffle_each_iteration=True).repeat()
    dataset = dataset.batch(recipe["batch_size"], drop_remainder=True)
    dataset = augment_series(
        dataset, num_classes, mixup_alpha=recipe["mixup"], jitter_stddev=recipe["jitter"],
        max_crop=recipe["crop"], seed=seed,
    )
    return dataset.prefetch(2)


# --------------------------------------------------------------- the model
def build_model(recipe, num_classes, length):
    return TransformerClassifier(
        num_classes=num_classes, num_features=1, num_layers=recipe["num_layers"],
        hidden_dim=recipe["hidden_dim"], num_heads=recipe["num_heads"],
        intermediate_dim=recipe["intermediate_dim"], dropout=recipe["dropout"],
        attention_dropout=recipe["attention_dropout"],
        normalize_first=recipe["normalize_first"],
        head_hidden_dim=recipe["head_hidden_dim"], max_sequence_length=max(length, 2),
        patch_length=recipe["patch_length"], patch_stride=recipe["patch_stride"],
        standardize_series=recipe["standardize_series"],
    )


def learning_rate(recipe, updates):
    if recipe["schedule"] == "rsqrt":
        from training.optimization.schedule import TransformerSchedule

        return TransformerSchedule(
            recipe["hidden_dim"], recipe["warmup_steps"], recipe["learning_rate_scale"]
        )
    warmup = recipe["warmup_steps"]
    if recipe["schedule"] == "linear":
        return WarmupLinearSchedule(recipe["peak_learning_rate"], warmup, updates)
    return keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps=max(updates - warmup, 1), alpha=0.0,
        warmup_target=recipe["peak_learning_rate"], warmup_steps=warmup,
    )


class KeepLast(keras.callbacks.Callback):
    """Weights at the last `k` evaluation points, and an accuracy curve."""

    def __init__(self, k, total, evaluate):
        super().__init__()
        self.k, self.total, self.evaluate = k, total, evaluate
        self.kept, self.curve, self.losses = [], [], []

    def on_epoch_end(self, epoch, logs=None):
        self.losses.append(round(float((logs or {}).get("loss", float("nan"))), 4))
        if self.evaluate is not None:
            self.curve.append(round(self.evaluate(self.model), 4))
        if epoch >= self.total - self.k:
            self.kept.append([w.copy() for w in self.model.get_weights()])


def accuracy(model, x, y):
    logits = model.predict({"features": x}, batch_size=128, verbose=0)
    return float(np.mean(np.argmax(logits, -1) == y))


def nearest_neighbour(x, y, ex, ey):
    """Accuracy of 1-NN with the Euclidean distance: the bar to clear."""
    a, b = x[:, :, 0].astype("float64"), ex[:, :, 0].astype("float64")
    distances = (b**2).sum(1)[:, None] - 2 * b @ a.T + (a**2).sum(1)[None, :]
    return float(np.mean(y[np.argmin(distances, 1)] == ey))


def run(name, seed, mode, overrides, baseline, val_fraction):
    x, y, ex, ey, num_classes = load(name, seed, mode, val_fraction)
    recipe = recipe_for(x, num_classes, overrides, baseline)  # the rules see only x
    nn = nearest_neighbour(x, y, ex, ey)
    if recipe.get("max_steps"):
        x, ex = x[:, : recipe["max_steps"]], ex[:, : recipe["max_steps"]]
    keras.utils.set_random_seed(seed)
    recipe = dict(recipe)
    if recipe["updates"] is None:  # epochs of the old preset, as updates
        recipe["updates"] = recipe["epochs"] * math.ceil(len(x) / recipe["batch_size"])
    updates = recipe["updates"]
    every = recipe["eval_every"] or max(updates // 20, 1)
    epochs = max(updates // every, 1)
    model = build_model(recipe, num_classes, x.shape[1])
    optimizer = keras.optimizers.AdamW(
        learning_rate(recipe, updates), weight_decay=recipe["weight_decay"],
        beta_1=0.9, beta_2=0.98, epsilon=1e-9, clipnorm=recipe["clipnorm"],
    )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=recipe["label_smoothing"]
        ),
        steps_per_execution=every, jit_compile=recipe.get("jit_compile", False),
    )
    evaluate = (lambda m: accuracy(m, ex, ey)) if mode == "val" else None
    keep = KeepLast(recipe["average_last"], epochs, evaluate)
    start = time.perf_counter()
    model.fit(
        training_stream(x, y, num_classes, recipe, seed), steps_per_epoch=every,
        epochs=epochs, verbose=0, callbacks=[keep], shuffle=False,
    )
    seconds = time.perf_counter() - start
    last = accuracy(model, ex, ey)
    averaged = last
    if len(keep.kept) > 1:
        model.set_weights([np.mean(ws, axis=0) for ws in zip(*keep.kept, strict=True)])
        averaged = accuracy(model, ex, ey)
    tokens = model.get_layer("series_patches").compute_output_shape((1, x.shape[1], 1))[1] \
        if recipe["patch_length"] > 1 else x.shape[1]
    return dict(
        dataset=name, seed=seed, mode=mode, last=last, averaged=averaged, nn=nn,
        curve=keep.curve, losses=keep.losses, seconds=round(seconds, 1), train=len(x), tokens=tokens,
        updates=updates, recipe=recipe,
    )


def from_rules(rules):
    """The flat recipe of this script: `series_recipe`'s data rules, the preset's fixed part.

    The schedule is the pipeline's (warm-up over a tenth, then linear decay to
    0); the rows of explore_series.jsonl up to the port to the task pipeline
    used "cosine" (their `recipe.schedule` says which).
    """
    preset = load_config("timeseries")
    updates = rules["epochs"] * rules["steps_per_epoch"]
    recipe = dict(BASELINE, **preset.model_overrides)
    recipe.update(
        batch_size=rules["batch_size"], updates=updates, schedule="linear",
        warmup_steps=round(0.1 * updates), peak_learning_rate=preset.learning_rate,
        weight_decay=get_task("timeseries").recipe_defaults()["weight_decay"],
        label_smoothing=preset.label_smoothing, average_last=0,
        patch_length=rules["patch_length"], patch_stride=rules["patch_stride"],
        standardize_series=preset.standardize_series, mixup=preset.mixup_alpha,
        crop=0.0, jitter=0.0, max_steps=None, eval_every=rules["steps_per_epoch"],
    )
    return recipe


def recipe_for(x, num_classes, overrides, baseline):
    """The recipe for training series `x` (N, T, F): the rules, or the old preset."""
    num_train, length, features = x.shape
    if baseline:
        recipe = dict(BASELINE)
    else:
        recipe = from_rules(series_recipe(num_train, length, num_classes, features))
    overrides = dict(overrides)
    # `patches=n overlap=o`: n non-overlapping patches of the series, each
    # then started every p/o steps (about n·o tokens), whatever T is.
    if "patches" in overrides or "overlap" in overrides:
        patches, overlap = overrides.pop("patches", 32), overrides.pop("overlap", 2)
        recipe["patch_length"] = max(2, math.ceil(length / patches))
        recipe["patch_stride"] = max(1, recipe["patch_length"] // overlap)
    recipe.update(overrides)
    if "updates" in overrides and "eval_every" not in overrides:
        recipe["eval_every"] = max(recipe["updates"] // 20, 1)
    return recipe


def main():
    def extra(parser):
        parser.add_argument("--datasets", nargs="+", default=["ArrowHead", "OSULeaf", "ACSF1"])
        parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
        parser.add_argument("--mode", choices=("val", "test"), default="val")
        parser.add_argument("--val-fraction", type=float, default=0.3)
        parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
        parser.add_argument("--baseline", action="store_true")
        parser.add_argument("--tag", default="")
        parser.add_argument("--out", default=DEFAULT_OUT)

    args = common.parse_args(__doc__.splitlines()[0], extra)
    overrides = {}
    for item in args.set:
        key, raw = item.split("=", 1)
        try:
            overrides[key] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[key] = raw
    rows = []
    for name in args.datasets:
        for seed in args.seeds:
            row = run(name, seed, args.mode, overrides, args.baseline, args.val_fraction)
            row["tag"] = args.tag
            rows.append(row)
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{name:10s} seed {seed} {args.mode} last {row['last']:.3f} "
                  f"avg {row['averaged']:.3f} tokens {row['tokens']} updates "
                  f"{row['updates']} ({row['seconds']} s) {row['curve']}", flush=True)
    print(f"\n{args.tag}  {' '.join(args.set)}")
    means = []
    for name in args.datasets:
        got = [r["averaged"] for r in rows if r["dataset"] == name]
        means.append(np.mean(got))
        mine = [r for r in rows if r["dataset"] == name]
        print(f"  {name:10s} {args.mode} averaged {np.mean(got):.3f} ± {np.std(got):.3f} "
              f"(seeds {len(got)}; last {np.mean([r['last'] for r in mine]):.3f}; "
              f"1-NN {np.mean([r['nn'] for r in mine]):.3f})")
    print(f"  mean over datasets {np.mean(means):.3f}")


if __name__ == "__main__":
    main()
