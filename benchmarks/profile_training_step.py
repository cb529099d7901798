"""Where a training step's time goes: TF profiler op breakdown, ours vs KerasHub.

Not a benchmark with a target: a diagnostic for `bench_training_throughput`.
Builds ours (`tie_embeddings=False`) and KerasHub's model at the sizes of
that benchmark (see `benchmarks/seq2seq_models.py`), runs one untimed step of
each (no XLA, so that every TF op is visible), then profiles `--steps` steps
of each with `tf.profiler.experimental` and sums the kernel time of every op
event, grouped by op type and by the part of the model its name belongs to
(attention, feed-forward, norms, embeddings and output, loss, optimizer).
The sums are per step; two inter-op threads may run ops at once, so they can
exceed the wall time.

    python3 benchmarks/profile_training_step.py [--quick] [--batch 64]
"""

import collections
import glob
import os
import re
import tempfile

import common
import keras
import numpy as np
import seq2seq_models
import tensorflow as tf
from bench_training_throughput import SIZES, make_batch

MATMUL = {"MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "_MklMatMul",
          "_FusedMatMul"}
PARTS = [  # first match wins; names are lower-cased layer paths
    ("optimizer", re.compile(r"adam|assignvariable|assignadd|assignsub")),
    ("loss", re.compile(r"sparse_categorical|crossentropy|compile_loss|loss")),
    ("attention", re.compile(r"attention")),
    ("feed_forward", re.compile(r"feed_?forward|inner_dense|output_dense")),
    ("norm", re.compile(r"norm")),
    ("embedding_output", re.compile(r"embedding|logits|output_projection")),
    ("dropout", re.compile(r"dropout")),
]


def profile(model, features, labels, steps):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    logdir = tempfile.mkdtemp(prefix="kt_profile_")
    tf.profiler.experimental.start(logdir)
    for _ in range(steps):
        float(model.train_on_batch(features, labels))
    tf.profiler.experimental.stop()
    path = sorted(glob.glob(os.path.join(logdir, "plugins/profile/*/*.xplane.pb")))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    by_type, by_part = collections.Counter(), collections.Counter()
    matmul_by_part = collections.Counter()
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" not in name or name.startswith(("ThreadpoolListener", "ExecutorState")):
                    continue
                op_name, op_type = name.rsplit(":", 1)
                seconds = event.duration_ps * 1e-12 / steps
                lowered = op_name.lower()
                part = next((p for p, pattern in PARTS if pattern.search(lowered)), "other")
                by_type[op_type] += seconds
                by_part[part] += seconds
                if op_type in MATMUL:
                    matmul_by_part[part] += seconds
    return by_type, by_part, matmul_by_part


def main():
    args = common.parse_args(
        __doc__.splitlines()[0],
        lambda p: (p.add_argument("--batch", type=int, default=None),
                   p.add_argument("--steps", type=int, default=2)),
    )
    info = common.machine_info()
    common.print_machine(info)
    batch = args.batch or (16 if args.quick else 64)
    features, labels = make_batch(batch, 64, SIZES["vocabulary_size"])
    report = {"machine": info, "batch": batch, "length": 64, "models": {}}
    for kind in ("ours", "keras_hub"):
        keras.utils.set_random_seed(0)
        model = seq2seq_models.build(kind, SIZES, tied=False)
        model.compile(optimizer=keras.optimizers.Adam(1e-4),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=False)
        model.train_on_batch(features, labels)
        wall = common.timed(lambda m=model: float(m.train_on_batch(features, labels)))
        by_type, by_part, matmul_by_part = profile(model, features, labels, args.steps)
        total = sum(by_type.values())
        matmul = sum(by_type[t] for t in MATMUL)
        print(f"\n== {kind}: wall {wall:.2f} s/step (unprofiled), op time {total:.2f} s/step, "
              f"matmul-type ops {matmul / total:.0%}")
        print("  by part:  " + ", ".join(
            f"{p} {s:.2f} s ({s / total:.0%}; matmul {matmul_by_part[p]:.2f})"
            for p, s in by_part.most_common()))
        print("  top op types: " + ", ".join(
            f"{t} {s:.2f}" for t, s in by_type.most_common(14)))
        report["models"][kind] = {
            "wall_seconds_per_step": wall, "op_seconds_per_step": total,
            "matmul_fraction": matmul / total,
            "by_part": dict(by_part), "matmul_by_part": dict(matmul_by_part),
            "by_type": dict(by_type.most_common(30)),
        }
        keras.backend.clear_session()
    common.append_result("profile_training_step", report, args)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
