"""A/B of a decoding step's attention: elementwise products vs batched matmuls.

`cached_attention_heads` (keras_transformer/layers/scaled_dot_product_attention.py)
computes a product of at most `ELEMENTWISE_ATTENTION_LIMIT` values
(`B * H * T * S * d_k`) as multiplies and sums with the softmax written out,
and a larger one as two batched matmuls around the backend's softmax.  This
script times both forms on the shapes of `bench_serving.py`'s model (h = 8,
d_k = d_v = 32) for query rows B, queries a row T (the beams of a sentence
against its encoder keys) and keys S: each form traced with static shapes
(so no conditional) in a `tf.function` loop of `STEPS` calls, in a TF graph
and under XLA, timed interleaved in one process.  It prints each form's
microseconds a call and the paired ratio elementwise / batched (median and
quartiles; below 1 the elementwise form is faster), checks that both forms
agree, and appends the run to benchmarks/results/ablate_step_attention.json.

    python3 benchmarks/ablate_step_attention.py [--quick]
"""

import statistics

import common  # first: sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads
import numpy as np
import tensorflow as tf

from keras_transformer.layers import elementwise_attention
from keras_transformer.layers.scaled_dot_product_attention import (
    ELEMENTWISE_ATTENTION_LIMIT,
    cached_attention_heads,
)

HEADS, WIDTH, STEPS = 8, 32, 200
# (rows B, queries a row T, keys S): greedy's self-attention over a cache of
# 80 positions and its cross-attention over 24 source pieces at batch 1 to
# 32, and beam 4's grouped cross-attention (T = 4) at batch 1 and 8.
SHAPES = ((1, 1, 80), (1, 1, 24), (4, 1, 80), (1, 4, 24), (8, 1, 80), (8, 4, 24),
          (16, 1, 80), (32, 1, 24), (32, 1, 80), (128, 1, 80))
QUICK_SHAPES = ((1, 1, 80), (32, 1, 80))
FORMS = {"batched": 0, "elementwise": 2**62}


def loop(limit, inputs, jit_compile):
    """`STEPS` calls of `cached_attention_heads` under `limit`, one per
    iteration of a while loop (each reads the last output, as a step does)."""
    query, key, value, mask = inputs

    @tf.function(jit_compile=jit_compile, autograph=False)
    def run():
        def body(i, carry):
            output, _ = cached_attention_heads(query + carry[..., :1] * 0.0, key, value, mask)
            return i + 1, output

        with elementwise_attention(limit):
            return tf.while_loop(lambda i, _: i < STEPS, body,
                                 (0, tf.zeros(query.shape[:3] + (WIDTH,))))[1]

    return run


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    common.print_machine(common.machine_info())
    rng = np.random.default_rng(0)
    rounds = 3 if args.quick else 9
    rows = []
    for jit_compile in (False, True):
        for batch, queries, keys in (QUICK_SHAPES if args.quick else SHAPES):
            inputs = [tf.constant(rng.normal(size=(batch, HEADS, t, WIDTH)), tf.float32)
                      for t in (queries, keys, keys)]
            inputs.append(tf.constant(np.ones((batch, 1, 1, keys), bool)))
            runs = {form: loop(limit, inputs, jit_compile) for form, limit in FORMS.items()}
            outputs = {form: run().numpy() for form, run in runs.items()}  # traces
            np.testing.assert_allclose(outputs["elementwise"], outputs["batched"], atol=1e-4)
            seconds = common.interleave(
                {form: (lambda run=run: run().numpy()) for form, run in runs.items()},
                rounds, warmup=0, verbose=False)
            seconds = {form: [s / STEPS for s in series] for form, series in seconds.items()}
            median, quartiles = common.paired_ratio(seconds["elementwise"], seconds["batched"])
            size = batch * HEADS * queries * keys * WIDTH
            row = {"xla": jit_compile, "rows": batch, "queries": queries, "keys": keys,
                   "product": size, "elementwise_chosen": size <= ELEMENTWISE_ATTENTION_LIMIT,
                   **{f"{form}_us": round(1e6 * statistics.median(s), 1)
                      for form, s in seconds.items()},
                   "ratio_median": median, "ratio_quartiles": quartiles}
            rows.append(row)
            print(f"{'xla  ' if jit_compile else 'graph'} B={batch:3d} T={queries} S={keys:2d} "
                  f"product {size:8d} ({'elementwise' if row['elementwise_chosen'] else 'batched'}"
                  f" in a graph)  batched {row['batched_us']:7.1f} us  elementwise "
                  f"{row['elementwise_us']:7.1f} us  ratio {row['ratio_median']:.2f} "
                  f"({row['ratio_quartiles'][0]:.2f}-{row['ratio_quartiles'][1]:.2f})",
                  flush=True)
    common.append_result("ablate_step_attention",
                         {"limit": ELEMENTWISE_ATTENTION_LIMIT, "rows": rows}, args)


if __name__ == "__main__":
    main()
