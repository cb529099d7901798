# ruff: noqa: E402  (a notebook: imports follow the set-up cell)
# %% [markdown]
# # 5. Time-series classification with the Transformer encoder
#
# Nothing in the encoder of Section 3.1 is specific to words: it maps a
# sequence of d_model vectors to another. For numbers instead of tokens,
# `TransformerClassifier(PatchStem(num_features=F, ...))` replaces the embedding table by a
# dense projection of each time step's F values to d_model (the "learned
# linear transformation" that embeds inputs, Section 3.4), adds the
# sinusoidal positions, runs the encoder blocks and mean-pools.
#
# The data comes from a file in the format of the UCR time-series archive
# (one series a line: the label, then the values), read with
# `training.data.readers.read_ucr`. Give your own with `KT_UCR_TRAIN` and
# `KT_UCR_TEST`; otherwise the notebook generates a small two-class task with
# `training.data.synthetic_series` (normal heartbeat-like signals vs. the same
# with one short anomaly), writes it as UCR text and reads it back.
#
# `KT_NOTEBOOK_SIZE=small` (default, CI): 800 training series, 10 epochs;
# `full`: 2,000 series, 30 epochs, and the per-step model (10 epochs) for
# comparison.
#
# The last part trains the package's own recipe, the `timeseries`
# preset, on a UCR development set given only its two file paths, and sets it
# beside MiniRocket (Dempster et al. 2021) and 1-NN on the same files.

# %%
import json
import os
import pathlib
import shutil
import sys
from notebook_setup import DATA_DIR, REPO, SIZE, scratch_folder

WORK = scratch_folder("05")  # runs and files, never inside the repository

# %%
import keras
import matplotlib.pyplot as plt
import numpy as np
from sklearn.neighbors import KNeighborsClassifier

from keras_transformer.layers import PatchStem
from keras_transformer.models import TransformerClassifier
from training.data import synthetic_series
from training.data.readers import read_ucr
from training.optimization.schedule import paper_optimizer

keras.utils.set_random_seed(0)
plt.rcParams.update({"figure.dpi": 80})

# %% [markdown]
# ## A UCR-format file

# %%
train_path, test_path = os.environ.get("KT_UCR_TRAIN"), os.environ.get("KT_UCR_TEST")
GENERATED = not (train_path and test_path)
if GENERATED:
    num_train = 800 if SIZE == "small" else 2000
    train_path, test_path = WORK / "Synthetic_TRAIN.txt", WORK / "Synthetic_TEST.txt"
    synthetic_series.write_ucr(train_path, *synthetic_series.generate_series(num_train, seed=0))
    synthetic_series.write_ucr(test_path, *synthetic_series.generate_series(400, seed=1))
    print(
        f"generated series written as UCR text; first line starts "
        f"{pathlib.Path(train_path).read_text()[:60]!r}..."
    )
x_train, y_train, label_values = read_ucr(train_path)  # (N, T, 1), (N,), (K,)
x_test, y_test_raw, test_values = read_ucr(test_path)
y_test = np.searchsorted(label_values, test_values)[y_test_raw]  # test ids in training order
# The UCR archive pads its shorter series with NaN.
x_train, x_test = np.nan_to_num(x_train), np.nan_to_num(x_test)
num_classes, length = len(label_values), x_train.shape[1]
print(f"train {x_train.shape}, test {x_test.shape}, classes {label_values.tolist()}")

# %%
fig, axes = plt.subplots(1, num_classes, figsize=(12, 2.8), sharey=True)
for k, ax in enumerate(np.atleast_1d(axes)):
    for series in x_train[y_train == k][:3]:
        ax.plot(series[:, 0], linewidth=1)
    ax.set(title=f"class {label_values[k]}", xlabel="time step")
fig.tight_layout()

# %% [markdown]
# Class 0 is a noisy quasi-periodic signal with a drifting baseline; class 1
# is the same with one short bump of random sign, position and width. Each
# series is z-normalised, so the bump is not given away by the mean or the
# scale.
#
# ## The reference baseline: 1-nearest-neighbour
#
# The UCR archive reports 1-NN with Euclidean distance for every dataset. It
# compares whole series point by point, so random phases defeat it here.

# %%
nearest = KNeighborsClassifier(n_neighbors=1).fit(x_train[..., 0], y_train)
baseline = nearest.score(x_test[..., 0], y_test)
print(f"1-NN Euclidean test accuracy: {baseline:.3f}")

# %% [markdown]
# ## Tokens of time: patches
#
# One value per token gives the attention little to compare, and the model
# below does not learn this task from single steps in the small budget (the
# full mode trains it for comparison). Grouping `patch` consecutive values
# into one token (PatchTST, Nie et al. 2023) gives each token a short piece
# of shape: `(N, T, 1)` becomes `(N, T / patch, patch)`, and the dense
# projection maps each `patch`-vector to d_model.

# %%
patch = 8
usable = length // patch * patch  # drop a ragged tail, if any
tokens_train = x_train[:, :usable].reshape(len(x_train), -1, patch)  # (N, T/patch, patch)
tokens_test = x_test[:, :usable].reshape(len(x_test), -1, patch)
print(f"{length} steps -> {tokens_train.shape[1]} tokens of {patch} values")

# %% [markdown]
# ## Model and training
#
# The paper's Adam settings and warm-up schedule (Section 5.3). Its peak
# learning rate is $d_{model}^{-0.5} \cdot warmup^{-0.5}$; at d_model = 32
# that is 1.8e-2 with 100 warm-up steps, far more than a small model
# tolerates, so the schedule is scaled by 0.1.

# %%
width = 32
epochs = 10 if SIZE == "small" else 30


def classifier(num_features):
    model = TransformerClassifier(
        PatchStem(num_features, hidden_dim=width),
        num_classes=num_classes,
        num_layers=2,
        num_heads=4,
        intermediate_dim=2 * width,
        dropout=0.1,
    )
    model.compile(
        optimizer=paper_optimizer(width, warmup_steps=100, scale=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


model = classifier(patch)
history = model.fit(
    tokens_train,
    y_train,
    batch_size=32,
    epochs=epochs,
    verbose=0,
    validation_data=(tokens_test, y_test),
)
accuracy = history.history["val_accuracy"][-1]
print("test accuracy by epoch:", np.round(history.history["val_accuracy"], 3))

# %%
plt.figure(figsize=(6, 3))
plt.plot(history.history["accuracy"], label="train")
plt.plot(history.history["val_accuracy"], label="test")
plt.axhline(baseline, color="gray", linestyle="--", label="1-NN Euclidean")
plt.xlabel("epoch")
plt.ylabel("accuracy")
plt.legend()
plt.tight_layout()
plt.show()

# %%
if SIZE == "full":  # the per-step model: one value per token, 128 tokens
    per_step = classifier(1).fit(
        x_train, y_train, batch_size=32, epochs=10, verbose=0, validation_data=(x_test, y_test)
    )
    per_step_accuracy = per_step.history["val_accuracy"][-1]
    print(f"one value per token, 10 epochs: test accuracy {per_step_accuracy:.3f}")
    print(f"patches of {patch}, {epochs} epochs: test accuracy {accuracy:.3f}")

# %% [markdown]
# ## What the encoder looks at
#
# The last block's attention weights, averaged over heads and queries, give
# the attention each token receives. For anomalous test series the bump is
# where the largest |value| is; we mark it.


# %%
def attention_received(model, tokens):
    x = model.stem.feature_projection(tokens)  # (B, T', d_model)
    x = x + model.stem.position_encoding(x)
    for block in model.encoder_blocks:
        x, weights = block(x, return_attention_scores=True)  # (B, h, T', T')
    return np.asarray(weights).mean(axis=(1, 2))  # (B, T')


anomalous = np.flatnonzero(y_test == 1)[:3]
received = attention_received(model, tokens_test[anomalous])
fig, axes = plt.subplots(
    2,
    len(anomalous),
    figsize=(12, 4),
    sharex=True,
    gridspec_kw={"height_ratios": [2, 1]},
)
for j, i in enumerate(anomalous):
    axes[0, j].plot(x_test[i, :, 0], linewidth=1)
    axes[0, j].axvline(np.abs(x_test[i, :, 0]).argmax(), color="red", alpha=0.4)
    axes[1, j].bar(np.arange(received.shape[1]) * patch + patch / 2, received[j], width=patch)
    axes[1, j].set_xlabel("time step")
axes[0, 0].set_ylabel("series")
axes[1, 0].set_ylabel("attention received")
fig.tight_layout()

# %% [markdown]
# The weights are spread out and only sometimes peak near the bump:
# attention weights show where information flows between tokens, not why
# the model decides (Jain and Wallace, 2019, "Attention is not
# Explanation"). They still sum to 1 over the keys, which we check.
#
# ## The `timeseries` preset, given only the paths
#
# Everything above was built by hand. The package's recipe for series is the
# `timeseries` preset: its tokens are MiniRocket's features (the
# proportion of positive values of 84 fixed dilated kernels' outputs) of 8
# windows of each series (`keras_transformer.layers.RandomKernelStem`), each
# token told the series' own level and scale, which the per-series
# standardisation removed (`series_level_features`), then two encoder
# blocks, mean pooling and the head. The sizes it leaves open
# (batch, updates, and how many such classifiers vote: up to five, as many
# as a budget of stem work allows) come from the data
# (`training.recipe.series`), so a run needs only the two file paths, as on
# the command line:
#
#     python3 -m training train --config timeseries --run-dir RUN \
#         --set 'train_files=["ArrowHead_TRAIN.txt"]' --set 'test_files=["ArrowHead_TEST.txt"]'
#
# The set is ArrowHead (36 training series of 251 steps, 3 classes), one of
# the UCR development sets of `docs/results.md`, read from `../shared/data/ucr`
# beside the repository (or `$KT_DATA_DIR/ucr`) when it is there. Without it
# the notebook generates a set of a development set's size from the task
# above (100 training series, 400 test series) and says so.

# %%
from training.config import load_config
from training.train import train

UCR_DIR = DATA_DIR / "ucr"
DEV_SET = "ArrowHead"
dev_train, dev_test = UCR_DIR / f"{DEV_SET}_TRAIN.txt", UCR_DIR / f"{DEV_SET}_TEST.txt"
DEV_GENERATED = not (dev_train.is_file() and dev_test.is_file())
if DEV_GENERATED:
    DEV_SET = "generated"
    dev_train, dev_test = WORK / "Dev_TRAIN.txt", WORK / "Dev_TEST.txt"
    synthetic_series.write_ucr(dev_train, *synthetic_series.generate_series(100, seed=2))
    synthetic_series.write_ucr(dev_test, *synthetic_series.generate_series(400, seed=1))
    print("no ArrowHead files in KT_DATA_DIR/ucr: a generated set of 100 training series")
print(f"set {DEV_SET}: {dev_train.name}, {dev_test.name}")

preset = load_config(
    "timeseries",
    overrides=[f"train_files={json.dumps([str(dev_train)])}",
               f"test_files={json.dumps([str(dev_test)])}"],
)  # fmt: skip
preset_metrics = train(preset, WORK / "preset", verbose=0)
preset_accuracy = preset_metrics["test_accuracy"]
preset_seconds = preset_metrics["train_seconds"] + preset_metrics["eval_seconds"]
print(f"sized from the data: {preset_metrics['from_data']}")
print(f"test accuracy {preset_accuracy:.3f} after {preset_metrics['steps']} updates "
      f"({preset_seconds:.0f} s of training and test evaluation)")  # fmt: skip

# %% [markdown]
# ## Beside MiniRocket and 1-NN
#
# MiniRocket computes about 10,000 such features of the whole series and fits
# a ridge classifier on them: the strongest fast baseline of the UCR archive.
# `benchmarks/bench_series_recipe.py` runs it beside the preset on the same
# files, as sktime's documentation does; we import its function. When sktime
# (a benchmark-only extra, `pip install -e ".[bench]"`) is not installed, the
# notebook quotes what that benchmark stored for this set in its newest run
# over several sets in `benchmarks/results/series_recipe.json`. The 1-NN baseline
# is the benchmark's too (`benchmarks/baselines.py`). Seconds are those of
# this machine, which may be shared: a rough scale, not a measurement.

# %%
import importlib.util

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_series_recipe  # the benchmark's MiniRocket, 1-NN and file reader
from baselines import nearest_neighbour_accuracy

STORED = REPO / "benchmarks" / "results" / "series_recipe.json"  # dated runs, oldest first
stored_runs = json.loads(STORED.read_text(encoding="utf-8"))
stored_rows = [run for run in stored_runs if "per_set" in run][-1]["rows"]
(dev_x, dev_y), (dev_tx, dev_ty) = (bench_series_recipe.read_split(str(path))
                                    for path in (dev_train, dev_test))  # fmt: skip
dev_nearest = nearest_neighbour_accuracy(dev_x, dev_y, dev_tx, dev_ty)
rocket_source = None
if importlib.util.find_spec("sktime") is not None:
    rocket_accuracy, rocket_seconds = bench_series_recipe.minirocket(
        str(dev_train), str(dev_test), seed=0, threads=None
    )
    rocket_source = "run here with sktime, seed 0"
else:
    stored = [row for row in stored_rows if row["set"] == DEV_SET]
    if stored:
        rocket_accuracy = stored[0]["minirocket"]
        rocket_seconds = stored[0]["minirocket_seconds"]
        rocket_source = f"stored in {STORED.relative_to(REPO)}, seed {stored[0]['seed']}"
print(f"{DEV_SET}: preset {preset_accuracy:.3f}, 1-NN {dev_nearest:.3f}, MiniRocket "
      + (f"{rocket_accuracy:.3f}, {rocket_source}" if rocket_source else "not available"))
print(f"\nstored by the benchmark ({STORED.name}), test accuracy:")
for row in stored_rows:
    print(f"  {row['set']:17s} seed {row['seed']}  preset {row['test_accuracy']:.3f}  "
          f"MiniRocket {row['minirocket']:.3f}  1-NN {row['nearest_neighbour']:.3f}")

# %% [markdown]
# ## The same recipe from arrays: `SeriesClassifier`
#
# A user of sktime or aeon holds arrays, not files, and calls `fit` and
# `predict`. MiniRocket's own three lines in sktime (what the benchmark's
# function above runs, step by step) are
#
#     rocket = RocketClassifier(rocket_transform="minirocket")  # sktime.classification.kernel_based
#     rocket.fit(X, y)
#     rocket.predict(X_test)
#
# and the preset's are the same three, with
# `training.estimator.SeriesClassifier`, a scikit-learn estimator (so
# `clone` and `GridSearchCV` take it). `X` is aeon's layout
# `(n_series, n_channels, length)` (2-D for one channel, or a list of arrays
# of unequal lengths); `fit` trains the `timeseries` preset on the arrays
# themselves (`train(config, run_dir, data=...)`, no file written), the
# recipe the command line runs on files. In small size
# one member trains instead of the recipe's (up to five), to keep the
# notebook short; `full` runs the recipe as it is.

# %%
from training.estimator import SeriesClassifier

X, X_test = dev_x.transpose(0, 2, 1), dev_tx.transpose(0, 2, 1)  # (n_series, n_channels, length)
clf = SeriesClassifier(seed=0, ensemble_size=None if SIZE == "full" else 1)
clf.fit(X, dev_y)
estimator_accuracy = clf.score(X_test, dev_ty)
print(f"classes {clf.classes_.tolist()}; first test answers {clf.predict(X_test[:5]).tolist()}")
print(f"SeriesClassifier test accuracy {estimator_accuracy:.3f} "
      f"({clf.metrics_['from_data'].get('ensemble_size', 1)} member(s)); "
      f"the preset from files {preset_accuracy:.3f}")  # fmt: skip

# %% [markdown]
# Its model is a Keras model: `clf.task_model_` is the series task model
# (`training.task_models.TimeSeriesClassifier`, the labels inside), which
# answers arrays `(n_series, n_channels, length)` with labels and
# probabilities, saves as one `.keras` file and exports a SavedModel whose
# `serving_default` takes the series in that same layout (`clf.export` is
# the same call). The SavedModel, loaded back by TensorFlow alone, answers
# as the estimator does.

# %%
import tensorflow as tf

tf.get_logger().setLevel("ERROR")  # no "Assets written to ..." INFO lines
series_model = clf.task_model_
series_model.save(WORK / "series.keras")
reloaded_series = keras.models.load_model(WORK / "series.keras")
series_export = clf.export(WORK / "models" / "series" / "1")
serving_default = tf.saved_model.load(series_export).signatures["serving_default"]
served = serving_default(features=tf.constant(X_test[:8], tf.float32))
served_labels = [label.decode() for label in served["labels"].numpy()]
estimator_labels = [str(label) for label in clf.predict(X_test[:8])]
print(f"{type(series_model).__name__} of a {type(series_model.backbone).__name__}; "
      f"SavedModel labels {served_labels[:5]}, the estimator's {estimator_labels[:5]}")  # fmt: skip

# %%
bars_of = {"preset": (preset_accuracy, preset_seconds, "tab:blue")}
if rocket_source:
    bars_of["MiniRocket"] = (rocket_accuracy, rocket_seconds, "tab:orange")
names = list(bars_of)
colors = [bars_of[name][2] for name in names]
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
bars = left.bar(names + ["1-NN"], [bars_of[n][0] for n in names] + [dev_nearest],
                color=colors + ["tab:gray"])  # fmt: skip
left.bar_label(bars, fmt="%.3f")
left.set(ylim=(0, 1.1), ylabel="test accuracy", title=f"{DEV_SET}: test accuracy")
seconds = [bars_of[n][1] for n in names]
bars = right.bar(names, seconds, color=colors)
right.bar_label(bars, fmt="%.1f s")
right.set(ylim=(0, 1.2 * max(seconds)), ylabel="seconds",
          title="training + test (a shared machine: rough)")
fig.tight_layout()
plt.show()

# %% [markdown]
# On ArrowHead the preset is a few points above MiniRocket, both above
# 1-NN; over the seven sets of `docs/results.md` (seeds 0-2) the preset's
# mean is 0.955, MiniRocket's 0.953 and MultiRocket's 0.954.
# MiniRocket takes about a second; the preset, whose five members vote on
# ArrowHead, 7-10 s of training and test on an idle 2-core machine (15-19 s
# with TensorFlow's start): it trains networks on those features,
# and in return it is a Keras model that `python3 -m export` writes as a
# SavedModel and a `.tflite` like every other task.
#
# ## What this notebook showed (checked)
#
# The patch Transformer beats chance (50%) by at least 20 points and the
# 1-NN baseline by 10, and the file went through the UCR reader. The
# `timeseries` preset, given only the paths, beats 1-NN and
# chance on its set, and lands within 5 points of MiniRocket where
# MiniRocket's figure is known. `SeriesClassifier`, the same recipe from the arrays, beats
# 1-NN and chance too, its probabilities sum to 1 over `classes_`, in
# full size (the recipe's members) it lands within 5 points of the preset,
# and its task model answers the same from its `.keras` file and its
# SavedModel.

# %%
chance = np.bincount(y_test).max() / len(y_test)
assert accuracy >= chance + 0.20, (accuracy, chance)
assert accuracy >= baseline + 0.10, (accuracy, baseline)
assert x_train.shape[2] == 1 and x_train.dtype == np.float32  # read_ucr's (N, T, 1) float32
assert np.allclose(received.sum(-1), 1, atol=1e-5)  # attention received sums to 1 per series
if GENERATED:
    assert len(x_train) == num_train and set(np.unique(y_train)) == {0, 1}
dev_chance = max(np.mean(dev_ty == value) for value in np.unique(dev_ty))
assert preset_accuracy >= dev_chance + 0.20, (preset_accuracy, dev_chance)
assert preset_accuracy > dev_nearest, (preset_accuracy, dev_nearest)
if rocket_source:
    assert preset_accuracy >= rocket_accuracy - 0.05, (preset_accuracy, rocket_accuracy)
assert preset_metrics["from_data"]["patch_length"] == 1  # the stem's tokens are windows
assert estimator_accuracy >= dev_chance + 0.20, (estimator_accuracy, dev_chance)
assert estimator_accuracy > dev_nearest, (estimator_accuracy, dev_nearest)
assert np.allclose(clf.predict_proba(X_test[:5]).sum(axis=1), 1, atol=1e-5)
assert set(clf.predict(X_test)) <= set(clf.classes_)
# The task model answers as the estimator, from its .keras file and from its SavedModel.
assert served_labels == estimator_labels
assert list(reloaded_series.predict(X_test[:8], verbose=0)["labels"]) == estimator_labels
assert np.allclose(served["probabilities"].numpy(), clf.predict_proba(X_test[:8]), atol=1e-5)
if SIZE == "full":
    assert abs(estimator_accuracy - preset_accuracy) <= 0.05, (estimator_accuracy, preset_accuracy)
print("All checks passed.")
if not os.environ.get("KT_NOTEBOOK_KEEP"):  # KT_NOTEBOOK_KEEP=1 keeps the runs
    shutil.rmtree(WORK)
