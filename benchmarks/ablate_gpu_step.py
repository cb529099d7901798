"""Where a base-size training step's GPU time goes (Keras 3 on JAX, bfloat16).

A diagnostic for `bench_gpu.py`, not a benchmark with a target.  Times the
paper's base model (`Transformer.from_preset("base")`, mixed_bfloat16,
`train_on_batch`, B x 128 tokens) with one thing changed at a time:

    baseline      as shipped (on JAX, attention through
                  `keras.ops.dot_product_attention`: cuDNN's fused kernel)
    einsum        our hand-written einsum/float32-softmax attention instead
    no_dropout    dropout 0 (no random bits drawn: the cost of JAX's
                  threefry dropout masks)
    batch_512     baseline at twice the batch
    fit, fit_512  baseline and batch_512 through `model.fit` over the same
                  batches (no host round trip per step, as `train_on_batch`
                  has)

and, with `--trace`, writes a Perfetto/Chrome trace of two baseline steps
(`jax.profiler`) whose GPU kernels `--summarize TRACE` sums by name.

    KERAS_BACKEND=jax python3 benchmarks/ablate_gpu_step.py [--trace DIR] [--batch 256]
    python3 benchmarks/ablate_gpu_step.py --summarize DIR/.../perfetto_trace.json.gz
"""

import os

os.environ["KERAS_BACKEND"] = "jax"

import argparse  # noqa: E402
import collections  # noqa: E402
import glob  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402


def summarize_trace(path, top=40):
    """Per-kernel-name GPU time of a Chrome/Perfetto JSON trace, per step."""
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    pids = {e["pid"]: e["args"].get("name", "") for e in events
            if e.get("ph") == "M" and e.get("name") == "process_name"}
    gpu = [e for e in events if e.get("ph") == "X" and "GPU" in pids.get(e.get("pid"), "")
           and "dur" in e]
    if not gpu:  # no device tracks (a CPU run): every timed event
        gpu = [e for e in events if e.get("ph") == "X" and "dur" in e]
    by_name = collections.Counter()
    for e in gpu:
        by_name[e["name"]] += e["dur"]
    total = sum(by_name.values())
    print(f"{len(gpu)} GPU events, {total / 1e3:.1f} ms in all "
          f"(processes: {sorted(set(pids.values()))[:8]})")
    for name, dur in by_name.most_common(top):
        print(f"  {dur / 1e3:8.2f} ms {dur / total:6.1%}  {name[:110]}")
    return by_name


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trace", default=None, help="write a profiler trace here")
    parser.add_argument("--summarize", default=None, help="sum a written trace and exit")
    parser.add_argument("--variants", default="baseline,einsum,no_dropout,batch_512")
    args = parser.parse_args()
    if args.summarize:
        summarize_trace(args.summarize)
        return

    import common
    import jax
    import keras
    import numpy as np
    import seq2seq_models as models

    import keras_transformer.layers.multi_head_attention as mha
    from keras_transformer.models import Transformer

    fused = mha.fused_attention_available

    length, vocab = 128, 37000
    variants = args.variants.split(",")
    keras.config.set_dtype_policy("mixed_bfloat16")
    candidates, flops = {}, {}
    sizes = dict(vocabulary_size=vocab, num_layers=6, hidden_dim=512,
                 intermediate_dim=2048)
    for name in variants:
        batch = 512 if name.endswith("_512") else args.batch
        mha.fused_attention_available = (lambda: False) if name == "einsum" else fused
        keras.utils.set_random_seed(0)
        overrides = {"dropout": 0.0} if name == "no_dropout" else {}
        model = Transformer.from_preset("base", dtype="mixed_bfloat16", **overrides)
        model.compile(optimizer=keras.optimizers.Adam(1e-4, beta_2=0.98, epsilon=1e-9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        rng = np.random.default_rng(0)
        x = {k: rng.integers(4, vocab, (batch, length), dtype=np.int32)
             for k in ("encoder_token_ids", "decoder_token_ids")}
        y = rng.integers(4, vocab, (batch, length), dtype=np.int32)
        start = time.perf_counter()
        model.train_on_batch(x, y)
        print(f"  compiled {name}: {time.perf_counter() - start:.1f} s", flush=True)
        if name == "baseline" and args.trace:
            model.train_on_batch(x, y)
            jax.profiler.start_trace(args.trace, create_perfetto_trace=True)
            for _ in range(2):
                model.train_on_batch(x, y)
            jax.profiler.stop_trace()
            for path in glob.glob(os.path.join(args.trace, "**", "*.json.gz"), recursive=True):
                summarize_trace(path)

        def go(model=model, x=x, y=y):
            for _ in range(args.steps):
                loss = model.train_on_batch(x, y)
            return loss

        xs = {k: np.concatenate([v] * args.steps) for k, v in x.items()}
        ys = np.concatenate([y] * args.steps)

        def go_fit(model=model, xs=xs, ys=ys, batch=batch):
            history = model.fit(xs, ys, batch_size=batch, epochs=1, shuffle=False, verbose=0)
            return history.history["loss"][-1]
        candidates[name] = go_fit if name.startswith("fit") else go
        flops[name] = models.model_flops_per_step(sizes, batch, length, length)
    mha.fused_attention_available = fused
    times = common.interleave(candidates, args.rounds, warmup=1, verbose=False)
    base = statistics.median(times["baseline"]) if "baseline" in times else None
    for name, t in times.items():
        per_step = statistics.median(t) / args.steps
        rate = flops[name] / per_step
        rel = f"{base / statistics.median(t):.2f}x baseline" if base else ""
        print(f"  {name:12s} {per_step * 1e3:7.1f} ms/step  {rate / 1e12:6.1f} TFLOP/s  "
              f"MFU {rate / 790e12:.1%}  {rel}")


if __name__ == "__main__":
    main()
