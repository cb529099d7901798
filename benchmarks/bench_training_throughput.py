"""Training throughput: keras_transformer's Transformer vs KerasHub's layers.

What is compared: one training step (`model.train_on_batch`: forward,
backward, Adam update) of a seq2seq Transformer with N=3, d_model=256, h=8,
d_ff=1024, vocabulary 8000, on a batch of 64 sentences x 64 tokens on both
sides (random ids in [4, 8000), no padding; the same arrays for every model),
built three ways (see `benchmarks/seq2seq_models.py` for what is kept equal):

    ours_tied     Transformer(tie_embeddings=True): the paper's shared
                  embedding/pre-softmax matrix (2 x 2M fewer parameters).
    ours_untied   Transformer(tie_embeddings=False): the same parameters as
                  KerasHub's model; **ours_untied vs keras_hub is the headline**.
    ours_untied_philox  (XLA only) ours_untied with Keras's Philox dropout
                  masks instead of the ThreeFry ones our models draw under
                  XLA (`threefry_dropout_under_xla = False`): what ThreeFry buys.
    keras_hub     KerasHub TokenAndPositionEmbedding / TransformerEncoder /
                  TransformerDecoder + an untied Dense output.

each compiled with Adam(1e-4) and SparseCategoricalCrossentropy(from_logits),
once with `jit_compile=True` (XLA) and once with `jit_compile=False`.  The
first calls (tracing, XLA compilation) are warm-up and not timed; then the
candidates and a 2048^3 float32 matmul are timed interleaved.

Reported: target tokens/s (B x T per step; the source side is as large),
model-FLOPs utilisation = model FLOPs/s (formula in
`models.model_flops_per_step`, nanoGPT's 6N + 12 L d T generalised to
encoder-decoder) / the matmul's achieved FLOP/s in the same rounds, and the
speed-up of ours over KerasHub (target: >= 1.25x with XLA).

    python3 benchmarks/bench_training_throughput.py [--quick]

`--quick` is a smoke test: N=1, batch 16 x 64, XLA only, 7 rounds of 3 steps.

MFU is computed round by round (the model's FLOP/s over the matmul's in the
same round) and the median over rounds is reported, so that a burst of load
from other processes does not land on only one side of the ratio.
"""

import statistics

import common  # first: sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads
import keras
import numpy as np
import seq2seq_models as models

SIZES = dict(vocabulary_size=8000, num_layers=3, hidden_dim=256, num_heads=8,
             intermediate_dim=1024, max_sequence_length=64)
VARIANTS = {  # name -> (builder kind, tied, ThreeFry dropout masks under XLA)
    "ours_tied": ("ours", True, True),
    "ours_untied": ("ours", False, True),
    "ours_untied_philox": ("ours", False, False),  # XLA only: Keras's masks
    "keras_hub": ("keras_hub", False, False),
}
HEADLINE = ("keras_hub", "ours_untied")


def make_batch(batch, length, vocabulary_size, seed=0):
    rng = np.random.default_rng(seed)

    def ids():
        return rng.integers(4, vocabulary_size, size=(batch, length), dtype=np.int32)

    features = {"encoder_token_ids": ids(), "decoder_token_ids": ids()}
    return features, ids()


def compiled(name, sizes, jit_compile):
    kind, tied, threefry = VARIANTS[name]
    keras.utils.set_random_seed(0)
    model = models.build(kind, sizes, tied=tied, name=name)
    if kind == "ours":
        model.threefry_dropout_under_xla = threefry
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )
    return model


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    peer, ours = HEADLINE
    info = common.machine_info()
    common.print_machine(info)
    sizes = dict(SIZES, num_layers=1) if args.quick else SIZES
    batch, length = (16, 64) if args.quick else (64, 64)
    steps, repeats = (3, 7) if args.quick else (1, 7)
    modes = (True,) if args.quick else (True, False)
    features, labels = make_batch(batch, length, sizes["vocabulary_size"])
    step_flops = models.model_flops_per_step(sizes, batch, length, length)
    print(f"sizes {sizes}\nbatch {batch} x {length} tokens, {steps} step(s) per "
          f"timing, {repeats} interleaved rounds; model FLOPs/step "
          f"{step_flops / 1e9:.1f} G")

    results = {"machine": info, "sizes": sizes, "batch": batch, "length": length,
               "steps_per_timing": steps, "model_flops_per_step": step_flops,
               "quick": args.quick, "modes": {}}
    for jit_compile in modes:
        mode = "xla" if jit_compile else "no_xla"
        print(f"\n== jit_compile={jit_compile}", flush=True)
        # Without XLA no model draws ThreeFry masks: the Philox twin is moot.
        names = [n for n, (kind, _, threefry) in VARIANTS.items()
                 if jit_compile or threefry or kind != "ours"]
        built = {name: compiled(name, sizes, jit_compile) for name in names}
        params = {name: m.count_params() for name, m in built.items()}
        matmul, matmul_flops = common.make_matmul(2048)

        def run(model):
            def go():
                for _ in range(steps):
                    loss = model.train_on_batch(features, labels)
                return float(loss)
            return go

        candidates = {name: run(m) for name, m in built.items()}
        candidates["matmul_2048"] = matmul
        times = common.interleave(candidates, repeats, warmup=2 if jit_compile else 1)
        peak = statistics.median(matmul_flops / t for t in times["matmul_2048"])
        mode_result = {"matmul_2048_flops_per_s": common.summarize(
            [matmul_flops / t for t in times["matmul_2048"]]), "variants": {}}
        for name in names:
            per_step = [t / steps for t in times[name]]
            tokens = common.summarize([batch * length / s for s in per_step])
            mfu = statistics.median(
                (step_flops / s) / (matmul_flops / m)
                for s, m in zip(per_step, times["matmul_2048"], strict=True))
            mode_result["variants"][name] = {
                "parameters": params[name],
                "seconds_per_step": common.summarize(per_step),
                "target_tokens_per_s": tokens,
                "mfu_vs_matmul": mfu,
            }
            print(f"  {name:18s} {params[name] / 1e6:5.2f} M params  "
                  f"{common.fmt(tokens, unit='tok/s', digits=0)}  MFU {mfu:.1%}")
        print(f"  matmul 2048^3: {peak / 1e9:.1f} GFLOP/s (median)")
        for name in [n for n in names if n != peer]:
            ratio = common.compare(times, peer, name)
            mode_result[f"{name}_over_{peer}"] = ratio
            print(f"  {name} / {peer} speed-up: {ratio['ratio_of_medians']:.2f}x "
                  f"(paired {common.fmt(ratio['paired_ratio'], unit='x', digits=2)}; "
                  f"ratio of minimums {ratio['ratio_of_mins']:.2f}x)")
        if jit_compile:
            ratio = common.compare(times, "ours_untied_philox", "ours_untied")
            mode_result["threefry_over_philox_dropout"] = ratio
            print(f"  ThreeFry / Philox dropout masks (ours_untied): "
                  f"{common.fmt(ratio['paired_ratio'], unit='x', digits=2)}")
        results["modes"][mode] = mode_result
        del built, candidates
        keras.backend.clear_session()

    headline = results["modes"]["xla"][f"{ours}_over_{peer}"]["ratio_of_medians"]
    results["headline"] = {"comparison": f"{ours} vs {peer}, jit_compile=True",
                           "speed_up": headline, "target": 1.25,
                           "met": headline >= 1.25}
    print(f"\nheadline (XLA, {ours} vs {peer}): {headline:.2f}x, target 1.25x: "
          f"{'met' if headline >= 1.25 else 'MISSED'}")
    common.append_result("training_throughput", results, args)


if __name__ == "__main__":
    main()
