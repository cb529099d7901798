"""GPU figures with Keras 3 on JAX: base-size training MFU, ours vs KerasHub, decoding.

Runs where there is a GPU and JAX but no TensorFlow (the lent H100 machine):
the modeling library is written in `keras.ops` only, so the same layers run
here on the JAX backend.  All models use the `mixed_bfloat16` policy
(bfloat16 matmuls, float32 variables; our softmax and loss in float32), and
every training step is XLA-compiled (Keras on JAX always compiles).

1. **MFU** of the paper's base model (N=6, d_model=512, h=8, d_ff=2048,
   vocabulary 37,000, shared embeddings, dropout 0.1): `model.train_on_batch`
   (forward, backward, Adam(beta_2=0.98, epsilon=1e-9)) on B sentences x 128
   source and 128 target tokens (random ids, no padding).  Model FLOPs per
   step are `seq2seq_models.model_flops_per_step` (nanoGPT's 6N + 12 L d T,
   generalised to encoder-decoder); MFU = model FLOP/s / the H100's 790
   TFLOP/s dense bfloat16 peak (the issue's figure), and also / the rate of a
   bfloat16 8192^3 matmul timed in the same rounds.  Target: >= 40 %.
2. **Ours vs KerasHub** on the GPU: the training benchmark's model (N=3,
   d=256, V=8000, 64 x 64 tokens; `bench_training_throughput.py` on the CPU)
   and the base sizes, each built by `seq2seq_models` with untied output and
   attention dropout as KerasHub has it.
3. **Decoding** (N=3, d=256, V=8000, 32 random sentences, end never
   emitted): greedy and beam 4 (length penalty 0.6) from
   `keras_transformer.decoding` under `jax.jit`; per-token cost at 128 new
   tokens / at 32, and beam 4 / greedy latency at 64 new tokens.

`base_ours_b256_fit` times the same model through `model.fit` over the same
batches: `train_on_batch` returns the loss to the host after every step, so
the GPU idles while the next step is dispatched; `fit` enqueues ahead.
Before timing, the fused attention that ours uses on JAX (cuDNN on the GPU)
is checked against the einsum path on a padded bfloat16 batch.

Timings are interleaved rounds after warm-up (`common.interleave`); each
timed call blocks until the device is done.

    KERAS_BACKEND=jax python3 benchmarks/bench_gpu.py [--quick] [--out DIR]
"""

import json
import os

os.environ["KERAS_BACKEND"] = "jax"

import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import common  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import seq2seq_models as models  # noqa: E402

from keras_transformer.decoding import beam_search, greedy_search  # noqa: E402
from keras_transformer.models import Transformer  # noqa: E402

PEAK_FLOPS = 790e12  # H100 dense bfloat16, as the issue states it
BASE = dict(vocabulary_size=37000, num_layers=6, hidden_dim=512, num_heads=8,
            intermediate_dim=2048, max_sequence_length=256)
SMALL = dict(vocabulary_size=8000, num_layers=3, hidden_dim=256, num_heads=8,
             intermediate_dim=1024, max_sequence_length=256)
NEVER = -1  # an end id no model emits: decoding runs to its full length


def machine_info():
    try:
        import keras_hub

        hub = keras_hub.__version__
    except ImportError:
        hub = None
    device = jax.devices()[0]
    return {
        "device": getattr(device, "device_kind", str(device)),
        "platform": device.platform,
        "cpu_model": common.cpu_model(),
        "logical_cores": os.cpu_count(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "keras": keras.__version__,
        "keras_hub": hub,
        "backend": keras.backend.backend(),
        "dtype_policy": "mixed_bfloat16",
    }


def make_batch(batch, length, vocabulary_size, seed=0):
    rng = np.random.default_rng(seed)

    def ids():
        return rng.integers(4, vocabulary_size, size=(batch, length), dtype=np.int32)

    return {"encoder_token_ids": ids(), "decoder_token_ids": ids()}, ids()


def compiled(model):
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    return model


def fitter(model, features, labels, steps):
    """`model.fit` over `steps` batches: the host enqueues ahead, no sync per step."""
    batch = len(labels)
    xs = {k: np.concatenate([v] * steps) for k, v in features.items()}
    ys = np.concatenate([labels] * steps)

    def go():
        history = model.fit(xs, ys, batch_size=batch, epochs=1, shuffle=False, verbose=0)
        return history.history["loss"][-1]
    return go


def padded_parity(sizes, batch=8, length=32):
    """Fused (cuDNN on a GPU) vs einsum attention on a padded bfloat16 batch.

    The base model in mixed_bfloat16, forward pass (training=False) on ids
    with 0-padding (one row entirely padding on the decoder side): relative
    error of the float32 logits at real target positions, and NaN anywhere.
    """
    import keras_transformer.layers.multi_head_attention as mha

    keras.utils.set_random_seed(0)
    model = Transformer.from_preset("base", dtype="mixed_bfloat16")
    rng = np.random.default_rng(1)
    enc = rng.integers(4, sizes["vocabulary_size"], (batch, length)).astype("int32")
    dec = rng.integers(4, sizes["vocabulary_size"], (batch, length)).astype("int32")
    for row in range(batch):
        enc[row, rng.integers(4, length):] = 0
        dec[row, rng.integers(4, length):] = 0
    dec[-1] = 0
    inputs = {"encoder_token_ids": enc, "decoder_token_ids": dec}
    fused = np.asarray(jax.jit(lambda x: model(x, training=False))(inputs), np.float32)
    original = mha.fused_attention_available
    mha.fused_attention_available = lambda: False
    try:
        plain = np.asarray(jax.jit(lambda x: model(x, training=False))(inputs), np.float32)
    finally:
        mha.fused_attention_available = original
    real = dec != 0
    error = float(np.linalg.norm(fused[real] - plain[real]) / np.linalg.norm(plain[real]))
    nan = bool(np.isnan(fused).any())
    print(f"  fused vs einsum attention, padded bf16 batch: relative error {error:.2e}, "
          f"NaN {nan}", flush=True)
    assert not nan and error < 2e-2, (error, nan)
    return {"relative_error": error, "nan": nan}


def stepper(model, features, labels, steps):
    def go():
        for _ in range(steps):
            loss = model.train_on_batch(features, labels)
        return float(loss)  # train_on_batch already returns a host float: blocks
    return go


def bf16_matmul(n=8192, repeats=10):
    keys = jax.random.split(jax.random.key(0), 2)
    a = jax.random.normal(keys[0], (n, n), jnp.bfloat16)
    b = jax.random.normal(keys[1], (n, n), jnp.bfloat16)
    mm = jax.jit(lambda a, b: a @ b)

    def go():
        out = None
        for _ in range(repeats):
            out = mm(a, b)
        out.block_until_ready()
    return go, 2 * n**3 * repeats


def training_section(quick, rounds, steps):
    """MFU of the base model, and ours vs KerasHub at two sizes."""
    length = 128
    base_batches = (32,) if quick else (128, 256)
    specs = {}  # name -> (builder, sizes, batch, length)
    for b in base_batches:
        specs[f"base_ours_b{b}"] = (
            lambda: Transformer.from_preset("base", dtype="mixed_bfloat16"), BASE, b, length)
    peer_batch = 32 if quick else 128
    for size_name, sizes, batch, seq in (("small", SMALL, 64, 64),
                                         ("base", BASE, peer_batch, length)):
        if quick and size_name == "base":
            continue
        for kind in ("ours", "keras_hub"):
            specs[f"{size_name}_{kind}_untied"] = (
                lambda kind=kind, sizes=sizes: models.build(kind, sizes, tied=False),
                sizes, batch, seq)
    keras.config.set_dtype_policy("mixed_bfloat16")
    candidates, meta = {}, {}
    for name, (build, sizes, batch, seq) in specs.items():
        keras.utils.set_random_seed(0)
        model = compiled(build())
        features, labels = make_batch(batch, seq, sizes["vocabulary_size"])
        start = time.perf_counter()
        model.train_on_batch(features, labels)  # trace + XLA compile
        print(f"  compiled {name}: {time.perf_counter() - start:.1f} s, "
              f"{model.count_params() / 1e6:.1f} M params", flush=True)
        candidates[name] = stepper(model, features, labels, steps)
        if name == f"base_ours_b{base_batches[-1]}":
            candidates[name + "_fit"] = fitter(model, features, labels, steps)
            meta[name + "_fit"] = None  # filled below, same sizes as `name`
        meta[name] = {"batch": batch, "length": seq, "parameters": model.count_params(),
                      "flops_per_step": models.model_flops_per_step(sizes, batch, seq, seq)}
    for name in [n for n, m in meta.items() if m is None]:
        meta[name] = dict(meta[name[: -len("_fit")]])
    matmul, matmul_flops = bf16_matmul(4096 if quick else 8192)
    candidates["matmul_bf16"] = matmul
    times = common.interleave(candidates, rounds, warmup=1)
    matmul_rate = [matmul_flops / t for t in times["matmul_bf16"]]
    print(f"  bf16 matmul: {statistics.median(matmul_rate) / 1e12:.0f} TFLOP/s "
          f"({statistics.median(matmul_rate) / PEAK_FLOPS:.0%} of 790)")
    result = {"matmul_bf16_flops_per_s": common.summarize(matmul_rate), "variants": {},
              "fused_attention_parity": padded_parity(BASE)}
    for name, m in meta.items():
        per_step = [t / steps for t in times[name]]
        flops = [m["flops_per_step"] / s for s in per_step]
        mfu_peak = statistics.median(f / PEAK_FLOPS for f in flops)
        mfu_matmul = statistics.median(f / r for f, r in zip(flops, matmul_rate, strict=True))
        tokens = common.summarize([m["batch"] * m["length"] / s for s in per_step])
        result["variants"][name] = dict(
            m, seconds_per_step=common.summarize(per_step), target_tokens_per_s=tokens,
            model_flops_per_s=common.summarize(flops), mfu_vs_peak=mfu_peak,
            mfu_vs_matmul=mfu_matmul)
        print(f"  {name:26s} B={m['batch']:3d} x {m['length']}: "
              f"{statistics.median(per_step) * 1e3:7.1f} ms/step, "
              f"{tokens['median']:9.0f} target tok/s, "
              f"{statistics.median(flops) / 1e12:6.1f} TFLOP/s, MFU {mfu_peak:.1%} of peak, "
              f"{mfu_matmul:.1%} of matmul")
    for size_name in ("small", "base"):
        if f"{size_name}_ours_untied" in times:
            ratio = common.compare(times, f"{size_name}_keras_hub_untied",
                                   f"{size_name}_ours_untied")
            result[f"{size_name}_ours_over_keras_hub"] = ratio
            print(f"  {size_name}: ours / KerasHub speed-up {ratio['ratio_of_medians']:.2f}x "
                  f"(paired {common.fmt(ratio['paired_ratio'], unit='x', digits=2)})")
    keras.config.set_dtype_policy("float32")
    return result


def decoding_section(quick, rounds):
    keras.config.set_dtype_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    model = Transformer(**SMALL)
    batch = 8 if quick else 32
    rng = np.random.default_rng(0)
    source = np.zeros((batch, 32), np.int32)
    for row, n in enumerate(rng.integers(10, 33, size=batch)):
        source[row, :n] = rng.integers(4, SMALL["vocabulary_size"], size=n)
    source = jnp.asarray(source)
    short, mid, long = 32, 64, 128

    def greedy(n):
        return jax.jit(lambda ids: greedy_search(model, ids, max_length=n, end_id=NEVER))

    def beam(n):
        return jax.jit(lambda ids: beam_search(
            model, ids, beam_size=4, length_penalty=0.6, max_length=n, end_id=NEVER)[0])

    fns = {f"greedy_{short}": (greedy(short), source), f"greedy_{mid}": (greedy(mid), source),
           f"greedy_{long}": (greedy(long), source), f"beam4_{mid}": (beam(mid), source),
           f"greedy_{mid}_batch1": (greedy(mid), source[:1]),
           f"beam4_{mid}_batch1": (beam(mid), source[:1])}
    candidates = {name: (lambda f=f, x=x: np.asarray(f(x))) for name, (f, x) in fns.items()}
    times = common.interleave(candidates, rounds, warmup=1)
    per_token = {n: [t / n for t in times[f"greedy_{n}"]] for n in (short, long)}
    growth = common.compare(per_token, long, short)
    beam_ratio = common.compare(times, f"beam4_{mid}", f"greedy_{mid}")
    beam1 = common.compare(times, f"beam4_{mid}_batch1", f"greedy_{mid}_batch1")
    for name, t in times.items():
        print(f"  {name:18s} {common.fmt(common.summarize(t), scale=1e3, unit='ms', digits=2)}")
    figures = {"per_token_cost_ratio": growth["ratio_of_medians"],
               "beam4_over_greedy": beam_ratio["ratio_of_medians"],
               "beam4_over_greedy_batch1": beam1["ratio_of_medians"]}
    for name, value in figures.items():
        target = 1.3 if name == "per_token_cost_ratio" else 2.5
        print(f"  {name}: {value:.2f}x (target <= {target}x: "
              f"{'met' if value <= target else 'MISSED'})")
    keras.config.set_dtype_policy("float32")
    return {"batch": batch, "new_tokens": [short, mid, long], "figures": figures,
            "seconds": {n: common.summarize(t) for n, t in times.items()},
            "paired": {"per_token_long_over_short": growth, "beam_over_greedy": beam_ratio,
                       "beam_over_greedy_batch1": beam1}}


def main():
    def extra(parser):
        parser.add_argument("--out", default=None, help="also write the JSON here")
        parser.add_argument("--only", choices=("training", "decoding"), default=None)

    args = common.parse_args(__doc__.splitlines()[0], extra)
    info = machine_info()
    print(f"machine: {info['device']} ({info['platform']}), {info['logical_cores']} CPU "
          f"cores, {info['cpu_model']}\nversions: JAX {info['jax']}, Keras {info['keras']}, "
          f"keras-hub {info['keras_hub']}, Python {info['python']}", flush=True)
    rounds = 3 if args.quick else 7
    results = {"machine": info, "quick": args.quick, "peak_flops": PEAK_FLOPS}
    if args.only in (None, "training"):
        print("\n== training (mixed_bfloat16, XLA)", flush=True)
        results["training"] = training_section(args.quick, rounds, steps=2 if args.quick else 10)
    if args.only in (None, "decoding"):
        print("\n== decoding (mixed_bfloat16, jax.jit)", flush=True)
        results["decoding"] = decoding_section(args.quick, rounds)
    name = "gpu" + (f"_{args.only}" if args.only else "")
    common.append_result(name, results, args)
    if args.out:  # this run alone, for a machine whose repository is not kept
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2, default=float)


if __name__ == "__main__":
    main()
