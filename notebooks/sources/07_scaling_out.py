# ruff: noqa: E402  (a notebook: imports follow the set-up cell)
# %% [markdown]
# # 7. Scaling out: data parallelism with `tf.distribute`
#
# The paper trained on one machine with 8 P100 GPUs (Section 5.2),
# synchronously: every GPU holds a copy of the model, takes its slice of the
# batch, and the gradients are summed before one shared update. In
# TensorFlow that is `MirroredStrategy` on one machine and
# `MultiWorkerMirroredStrategy` across machines; `training.train` picks one
# with `strategy="mirrored"` or `"multi_worker"`.
#
# Without GPUs, the CPU is split into 2 *logical* devices, so the same code
# runs 2 replicas here. That must happen before TensorFlow initialises its
# devices, so it is the first thing this notebook does.
#
# `KT_NOTEBOOK_SIZE=small` (default, CI) runs one multi-worker process;
# `full` runs a real two-worker cluster on this machine.

# %%
import os
import shutil
import sys
from notebook_setup import REPO, SIZE, scratch_folder

WORK = scratch_folder("07")  # runs and files, never inside the repository

# %%
from training.distribute import (
    build_strategy,
    configure_logical_cpus,
    global_batch_note,
)

configure_logical_cpus(2)  # 2 replicas on one CPU; before any TensorFlow op

# %%
import json
import socket
import subprocess

import keras
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf

from keras_transformer.models import TransformerClassifier
from training.data import synthetic_series
from training.optimization.schedule import TransformerSchedule, paper_optimizer

tf.get_logger().setLevel("ERROR")  # no INFO lines for every all-reduce
plt.rcParams.update({"figure.dpi": 80})
print("logical CPUs:", [d.name for d in tf.config.list_logical_devices("CPU")])

# %% [markdown]
# ## One fit, with and without `MirroredStrategy`
#
# The model is the patch Transformer of notebook 5 on generated series.
# Under a strategy, the model and optimizer must be created inside
# `strategy.scope()` (their variables are mirrored on every replica), and
# the batch given to `fit` is the **global** batch: each of the R replicas
# gets `batch / R` examples. Dropout is off and both runs start from the same
# weights, so they should take the same steps.

# %%
x, y = synthetic_series.generate_series(512, seed=0)
x = x.reshape(len(x), 16, 8)  # 16 tokens of 8 steps
GLOBAL_BATCH, EPOCHS, WIDTH = 64, 3, 32


def fit(strategy):
    with strategy.scope():
        model = TransformerClassifier(
            num_classes=2,
            num_features=8,
            num_layers=1,
            hidden_dim=WIDTH,
            num_heads=4,
            intermediate_dim=2 * WIDTH,
            dropout=0.0,
        )
        model.set_weights(initial_weights)
        model.compile(
            optimizer=paper_optimizer(WIDTH, warmup_steps=20, scale=0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    return history.history["loss"], model


keras.utils.set_random_seed(0)
initial_weights = TransformerClassifier(
    num_classes=2,
    num_features=8,
    num_layers=1,
    hidden_dim=WIDTH,
    num_heads=4,
    intermediate_dim=2 * WIDTH,
    dropout=0.0,
).get_weights()
mirrored = build_strategy("mirrored")
print(global_batch_note(GLOBAL_BATCH, mirrored))
single_loss, single_model = fit(build_strategy("default"))
mirrored_loss, mirrored_model = fit(mirrored)
print("loss per epoch, one device:", np.round(single_loss, 6))
print("loss per epoch, 2 replicas:", np.round(mirrored_loss, 6))
output_gap = float(np.abs(np.asarray(single_model(x)) - np.asarray(mirrored_model(x))).max())
print(f"largest logit difference after {EPOCHS} epochs: {output_gap:.1e}")
weight_gaps = sorted(
    (
        (float(np.abs(np.asarray(a) - np.asarray(b)).max()), a.path)
        for a, b in zip(single_model.weights, mirrored_model.weights, strict=True)
    ),
    reverse=True,
)
print(
    "largest weight differences:",
    [(path, f"{gap:.1e}") for gap, path in weight_gaps[:3]],
)

# %% [markdown]
# Same global batch, same steps: the replicas' gradients, summed, are the
# gradient of the global batch, so the losses and the model's outputs match
# to floating-point noise. (A few weights differ visibly: those whose
# gradient is zero up to rounding, such as the key bias, since adding the
# same number to every score changes no softmax. Adam divides by the
# gradient's own scale, so rounding noise there becomes full-size steps of
# random sign, which the outputs never see.) On 8 GPUs the 8 slices simply
# run at the same time.
#
# ## What changes in batch size and learning rate
#
# - **Global batch = per-replica batch x replicas.** Keeping the global
#   batch fixed (as above) changes nothing but speed. Keeping the
#   per-replica batch fixed and adding replicas (the usual choice, to keep
#   each device busy) makes the global batch R times larger, and an epoch R
#   times fewer steps.
# - **The schedule counts optimizer steps.** `TransformerSchedule` warms up
#   over `warmup_steps` *updates*. With R times larger batches each update
#   sees R times more examples, so the same `warmup_steps` spans R times
#   more data, and the run makes R times fewer updates in all. The paper's
#   4,000 warm-up steps were tuned for its ~25,000-token batches on 8 GPUs
#   (Section 5.1). When the global batch grows, keep `warmup_steps` in steps
#   and raise the rate with care (the schedule's `scale`; linear scaling
#   with the batch is an upper bound, square-root scaling a safer start).
# - **`train`'s default schedule (`schedule="auto"`) does this itself.** Its
#   peak grows as the square root of the global batch's tokens up to 1,024
#   (`training/recipe/adaptive.py`), and its warm-up is a tenth of the updates the run
#   plans (at least min(100, a quarter of them), at most 4,000), so R times
#   fewer updates get a warm-up about R times shorter.
#
# The learning rate against the number of examples seen, for one epoch of
# 128,000 examples at 32 examples per replica:

# %%
examples = 128_000
fig, ax = plt.subplots(figsize=(7, 3))
for replicas, scale in ((1, 1.0), (4, 1.0), (4, 2.0)):
    global_batch = 32 * replicas
    steps = np.arange(examples // global_batch)
    rate = np.asarray(TransformerSchedule(512, warmup_steps=400, scale=scale)(steps))
    ax.plot(
        steps * global_batch,
        rate,
        label=f"{replicas} replica(s): batch {global_batch}, {len(steps)} steps, scale {scale}",
    )
ax.set(xlabel="examples seen", ylabel="learning rate")
ax.legend(fontsize=8)
fig.tight_layout()
steps_per_epoch = {r: examples // (32 * r) for r in (1, 4)}
print("steps per epoch:", steps_per_epoch)

# %% [markdown]
# ## Several machines: `MultiWorkerMirroredStrategy` and `TF_CONFIG`
#
# Each machine (worker) runs the *same* program; the environment variable
# `TF_CONFIG` tells it the cluster and which member it is. Worker 0 is the
# chief: it writes the checkpoints, logs and model, the others only
# compute. Gradients are all-reduced across all replicas of all workers
# every step (synchronous, like the mirrored case). The strategy must be
# created when the program starts, so each worker is its own process; here
# they are `python -m training train ... --set strategy=multi_worker`
# processes on this machine, each with its own run directory.


# %%
def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


num_workers = 1 if SIZE == "small" else 2
workers = [f"localhost:{port}" for port in free_ports(num_workers)]
tf_configs = [
    {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
    for i in range(num_workers)
]
for tf_config in tf_configs:
    print("TF_CONFIG=" + json.dumps(tf_config))

# %%
steps = 10 if SIZE == "small" else 40
command = [
    sys.executable,
    "-m",
    "training",
    "train",
    "--config",
    "timeseries",
    "--set",  # the patch stem: one small model (the preset's kernel stem trains up to five)
    "series_stem=patches",
    "--set",
    "series_level_features=false",
    "--set",
    "mixup_alpha=0.4",
    "--set",
    "strategy=multi_worker",
    "--set",
    "epochs=1",
    "--set",
    f"steps_per_epoch={steps}",
    "--set",
    "batch_size=32",
    "--set",
    "model.num_layers=1",
    "--verbose",
    "0",
]
processes = [
    subprocess.Popen(
        command + ["--run-dir", str(WORK / f"worker-{i}")],
        cwd=REPO,
        env={
            **os.environ,
            "TF_CONFIG": json.dumps(tf_config),
            "CUDA_VISIBLE_DEVICES": "",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    for i, tf_config in enumerate(tf_configs)
]
outputs = [p.communicate(timeout=600)[0] for p in processes]
for i, (process, output) in enumerate(zip(processes, outputs, strict=True)):
    print(f"worker {i}: exit status {process.returncode}")
    if process.returncode:
        print(output[-3000:])
chief_metrics = json.loads((WORK / "worker-0" / "metrics.json").read_text())  # chief only
printed = [json.JSONDecoder().raw_decode(o[o.index("{\n") :])[0] for o in outputs]  # each worker
for i, metrics in enumerate(printed):
    print(
        f"worker {i}:",
        {k: metrics[k] for k in ("steps", "valid_loss", "valid_accuracy")},
    )

# %% [markdown]
# `--set strategy=multi_worker` on every machine, with its own `TF_CONFIG`,
# is all a real cluster needs; the chief's run directory holds the result.
#
# ## What this notebook showed (checked)

# %%
assert mirrored.num_replicas_in_sync == 2
assert np.allclose(single_loss, mirrored_loss, rtol=1e-4), (single_loss, mirrored_loss)
assert output_gap < 1e-3, output_gap  # 2 replicas, same global batch: the same model
assert steps_per_epoch[4] * 4 == steps_per_epoch[1]  # 4x the global batch, 1/4 the steps
assert all(p.returncode == 0 for p in processes)
assert chief_metrics["steps"] == steps  # the chief finished and wrote its run
assert len({round(m["valid_loss"], 5) for m in printed}) == 1  # workers stay in lock-step
print("All checks passed.")
if not os.environ.get("KT_NOTEBOOK_KEEP"):  # KT_NOTEBOOK_KEEP=1 keeps the runs
    shutil.rmtree(WORK)
