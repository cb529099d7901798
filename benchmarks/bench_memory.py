"""Peak memory and step time of training at base size, by sequence length.

What is compared: one `model.train_on_batch` step (Adam, plain
SparseCategoricalCrossentropy, no XLA) of the base Transformer
(`Transformer.from_preset("base", vocabulary_size=37000)`: N=6, d_model=512,
h=8, d_ff=2048, tied embeddings, 63M parameters; with attention_dropout=0.1,
because KerasHub's layers apply their one `dropout` to the attention weights
too, and max_sequence_length=512) and of the same model built
from KerasHub's layers (`benchmarks/seq2seq_models.py`, tied through one
shared `ReversibleEmbedding`, so that both have the same parameters), on
4096 tokens per side per batch: 64 x 64, then 32 x 128, 16 x 256, 8 x 512
(random ids, no padding; the work of the weight matmuls stays constant,
attention grows linearly with the length).

Each (model, length) runs in a fresh Python subprocess so that peak RSS
(`resource.getrusage(RUSAGE_SELF).ru_maxrss`) belongs to that configuration
alone.  The child reports the peak after building and compiling (TF
runtime + weights + optimizer slots: "before step"), the peak after the
first step (tracing + one step), and the peak and duration of the following
timed steps.  The subprocesses alternate ours / KerasHub (and which goes
first) from one length to the next, to share the machine's load.

    python3 benchmarks/bench_memory.py [--quick]

`--quick`: the "small" preset sizes (N=3, d_model=256, d_ff=1024,
vocabulary 8000), lengths 64 and 256, one timed step.
"""

import json
import os
import subprocess
import sys
import time

import common

BASE = dict(vocabulary_size=37000, num_layers=6, hidden_dim=512, num_heads=8,
            intermediate_dim=2048, max_sequence_length=512)
SMALL = dict(BASE, vocabulary_size=8000, num_layers=3, hidden_dim=256,
             intermediate_dim=1024)
TOKENS = 4096


def child(model_kind, length, sizes, steps):
    """Runs in the subprocess: build, one untimed step, `steps` timed steps."""
    import keras
    import keras_hub  # noqa: F401  (imported by both, so both pay its RSS)
    import numpy as np
    import seq2seq_models

    from keras_transformer.models import get_preset

    model = seq2seq_models.build(model_kind, sizes, tied=True)
    if model_kind == "ours" and sizes == BASE:  # the paper's base model, as promised
        assert model.config == get_preset(
            "base", vocabulary_size=37000, max_sequence_length=512, attention_dropout=0.1)
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
    batch = TOKENS // length
    rng = np.random.default_rng(0)
    ids = [rng.integers(4, sizes["vocabulary_size"], (batch, length), dtype=np.int32)
           for _ in range(3)]
    features = {"encoder_token_ids": ids[0], "decoder_token_ids": ids[1]}
    model.optimizer.build(model.trainable_variables)  # slots exist before the step
    report = {"model": model_kind, "length": length, "batch": batch,
              "parameters": model.count_params(),
              "peak_rss_before_step_mib": common.peak_rss_mib()}
    start = time.perf_counter()
    model.train_on_batch(features, ids[2])
    report["first_step_seconds"] = time.perf_counter() - start
    report["peak_rss_after_first_step_mib"] = common.peak_rss_mib()
    seconds = []
    for _ in range(steps):
        seconds.append(common.timed(lambda: float(model.train_on_batch(features, ids[2]))))
    report["step_seconds"] = seconds
    report["peak_rss_mib"] = common.peak_rss_mib()
    print("RESULT " + json.dumps(report), flush=True)


def run_child(model_kind, length, quick):
    command = [sys.executable, os.path.abspath(__file__), "--child", model_kind,
               str(length)] + (["--quick"] if quick else [])
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{' '.join(command)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def main():
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        quick = "--quick" in sys.argv
        return child(sys.argv[i + 1], int(sys.argv[i + 2]), SMALL if quick else BASE,
                     steps=1 if quick else 2)
    args = common.parse_args(__doc__.splitlines()[0])
    info = common.machine_info()
    common.print_machine(info)
    sizes = SMALL if args.quick else BASE
    lengths = (64, 256) if args.quick else (64, 128, 256, 512)
    print(f"sizes {sizes}; {TOKENS} tokens per side per batch; lengths {lengths}", flush=True)
    runs = {"ours": {}, "keras_hub": {}}
    for i, length in enumerate(lengths):
        for kind in ("ours", "keras_hub") if i % 2 == 0 else ("keras_hub", "ours"):
            r = run_child(kind, length, args.quick)
            runs[kind][length] = r
            step = common.summarize(r["step_seconds"])
            print(f"  {kind:9s} {r['batch']:3d} x {length:3d}: peak RSS "
                  f"{r['peak_rss_mib']:7.0f} MiB (before step "
                  f"{r['peak_rss_before_step_mib']:.0f}), step {common.fmt(step)}",
                  flush=True)
    table = []
    for length in lengths:
        o, h = runs["ours"][length], runs["keras_hub"][length]
        row = {"length": length, "batch": o["batch"]}
        for kind, r in (("ours", o), ("keras_hub", h)):
            row[f"{kind}_peak_rss_mib"] = r["peak_rss_mib"]
            row[f"{kind}_step_growth_mib"] = r["peak_rss_mib"] - r["peak_rss_before_step_mib"]
            row[f"{kind}_step_seconds"] = common.summarize(r["step_seconds"])["median"]
        row["peak_rss_ours_over_keras_hub"] = o["peak_rss_mib"] / h["peak_rss_mib"]
        row["step_growth_ours_over_keras_hub"] = (row["ours_step_growth_mib"]
                                                  / row["keras_hub_step_growth_mib"])
        row["speed_up_ours_over_keras_hub"] = (row["keras_hub_step_seconds"]
                                               / row["ours_step_seconds"])
        table.append(row)
    first = table[0]
    print("\nlength  peak RSS ours / hub (MiB)  step growth ours / hub  "
          "step s ours / hub   x vs 64 (ours, hub)")
    for row in table:
        print(f"{row['length']:6d}  {row['ours_peak_rss_mib']:7.0f} / "
              f"{row['keras_hub_peak_rss_mib']:7.0f} ({row['peak_rss_ours_over_keras_hub']:.2f})"
              f"   {row['ours_step_growth_mib']:6.0f} / {row['keras_hub_step_growth_mib']:6.0f}"
              f"   {row['ours_step_seconds']:6.1f} / {row['keras_hub_step_seconds']:6.1f}"
              f"   time {row['ours_step_seconds'] / first['ours_step_seconds']:.2f}, "
              f"{row['keras_hub_step_seconds'] / first['keras_hub_step_seconds']:.2f}; "
              f"RSS {row['ours_peak_rss_mib'] / first['ours_peak_rss_mib']:.2f}, "
              f"{row['keras_hub_peak_rss_mib'] / first['keras_hub_peak_rss_mib']:.2f}")
    common.append_result("memory", {
        "machine": info, "quick": args.quick, "sizes": sizes, "tokens": TOKENS,
        "runs": runs, "table": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
