"""Decoding latency: the key/value-cached loop vs recomputing the prefix.

What is compared, on one randomly initialised Transformer (N=3,
d_model=256, h=8, d_ff=1024, vocabulary 8000; the same weights everywhere)
translating a batch of 32 random source sentences (lengths 10..32, 0-padded):

    cached_greedy_<n>  `keras_transformer.decoding.greedy_search` in a
                       `tf.function`: encode once, project the cross-attention
                       keys/values once, then one `decode_step` per position
                       against a preallocated self-attention cache.
    recompute_greedy   what TensorFlow's "NMT with a Transformer" tutorial does
                       (batched here, which only helps it): a `tf.function`
                       loop over `tf.range` that calls the whole model
                       `model({"encoder_token_ids", "decoder_token_ids"})` on
                       the growing prefix (a `tf.TensorArray`) each step and
                       keeps the last position's argmax.  The encoder is re-run
                       every step, as in the tutorial.
    cached_beam4       `keras_transformer.decoding.beam_search`, beam 4,
                       length penalty 0.6, in a `tf.function`.
    *_batch1           greedy and beam 4 on the first sentence alone
                       (latency rather than batch throughput).
    *_xla              (full mode, for information) the cached greedy and beam
                       loops in a `tf.function(jit_compile=True)`.

Every loop is forced to its full length: `end_id=-1` (an id no model emits)
for ours, no end check in the baseline.  Both greedy loops exclude the pad
id from the argmax, so their tokens must be identical, which is checked.

Targets: cached >= 8x faster than recompute at 64 new tokens; cached
per-token cost at 128 new tokens within 1.3x of that at 32; beam 4 within
2.5x of greedy at 64 new tokens.  Graph mode, no XLA, all timings
interleaved in one process after one untimed call of each (tracing).

    python3 benchmarks/bench_decoding.py [--quick]

`--quick`: 8 sentences, 32 / 8 / 64 new tokens, 3 rounds.
"""

import common  # first: sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads
import keras
import numpy as np
import tensorflow as tf

from keras_transformer.decoding import beam_search, greedy_search
from keras_transformer.models import START_ID, Transformer

SIZES = dict(vocabulary_size=8000, num_layers=3, hidden_dim=256, num_heads=8,
             intermediate_dim=1024, max_sequence_length=256)
NEVER = -1  # an end id no model produces: every loop runs to its maximum length
IDS = tf.TensorSpec([None, None], tf.int32)


def source_batch(batch, longest=32, seed=0):
    rng = np.random.default_rng(seed)
    ids = np.zeros((batch, longest), np.int32)
    for row, length in enumerate(rng.integers(10, longest + 1, size=batch)):
        ids[row, :length] = rng.integers(4, SIZES["vocabulary_size"], size=length)
    return tf.constant(ids)


def cached_greedy(model, new_tokens, jit_compile=False):
    return tf.function(
        lambda ids: greedy_search(model, ids, max_length=new_tokens, end_id=NEVER),
        input_signature=[IDS], jit_compile=jit_compile,
    )


def cached_beam(model, new_tokens, beam_size=4, jit_compile=False):
    return tf.function(
        lambda ids: beam_search(model, ids, beam_size=beam_size, length_penalty=0.6,
                                max_length=new_tokens, end_id=NEVER)[0],
        input_signature=[IDS], jit_compile=jit_compile,
    )


def recompute_greedy(model, new_tokens):
    """The tutorial's loop: the full model on the whole prefix at every step."""

    @tf.function(input_signature=[IDS])
    def translate(encoder_token_ids):
        batch = tf.shape(encoder_token_ids)[0]
        output = tf.TensorArray(tf.int32, size=0, dynamic_size=True)
        output = output.write(0, tf.fill([batch], START_ID))
        for i in tf.range(new_tokens):
            prefix = tf.transpose(output.stack())  # (B, i + 1)
            logits = model(
                {"encoder_token_ids": encoder_token_ids, "decoder_token_ids": prefix},
                training=False,
            )  # (B, i + 1, V)
            last = logits[:, -1, 1:]  # (B, V - 1): pad (id 0) excluded, as ours
            output = output.write(i + 1, tf.argmax(last, -1, output_type=tf.int32) + 1)
        return tf.transpose(output.stack())[:, 1:]  # (B, new_tokens)

    return translate


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    info = common.machine_info()
    common.print_machine(info)
    batch = 8 if args.quick else 32
    short, mid, long = (8, 32, 64) if args.quick else (32, 64, 128)
    repeats = 3 if args.quick else 5
    keras.utils.set_random_seed(0)
    model = Transformer(**SIZES)
    source = source_batch(batch)
    print(f"{batch} sentences, new tokens {short}/{mid}/{long}, {repeats} rounds")

    fns = {
        f"cached_greedy_{mid}": cached_greedy(model, mid),
        f"recompute_greedy_{mid}": recompute_greedy(model, mid),
        f"cached_greedy_{short}": cached_greedy(model, short),
        f"cached_greedy_{long}": cached_greedy(model, long),
        f"cached_beam4_{mid}": cached_beam(model, mid),
    }
    if not args.quick:  # for information: the same loops compiled by XLA
        fns[f"cached_greedy_{mid}_xla"] = cached_greedy(model, mid, jit_compile=True)
        fns[f"cached_beam4_{mid}_xla"] = cached_beam(model, mid, jit_compile=True)
    # Latency of one sentence (the first of the batch), greedy and beam.
    one = source[:1]
    inputs = {name: source for name in fns}
    for name in [n for n in fns if n.startswith(("cached_greedy", "cached_beam4"))
                 and n.endswith((f"_{mid}", "_xla"))]:
        fns[f"{name}_batch1"] = fns[name]
        inputs[f"{name}_batch1"] = one
    first = {}  # one untimed call of each: tracing, and the equality check
    for name, fn in fns.items():
        seconds = common.timed(
            lambda fn=fn, name=name: first.setdefault(name, fn(inputs[name]).numpy()))
        print(f"  warm-up {name}: {seconds:.2f} s", flush=True)
    same = np.array_equal(first[f"cached_greedy_{mid}"], first[f"recompute_greedy_{mid}"])
    print(f"cached tokens == recomputed tokens: {same}")
    candidates = {name: (lambda f=f, x=inputs[name]: f(x).numpy()) for name, f in fns.items()}
    times = common.interleave(candidates, repeats, warmup=0)

    stats = {name: common.summarize(t) for name, t in times.items()}
    speed_up = common.compare(times, f"recompute_greedy_{mid}", f"cached_greedy_{mid}")
    per_token = {n: [t / n for t in times[f"cached_greedy_{n}"]] for n in (short, long)}
    growth = common.compare(per_token, long, short)  # per-token cost long / short
    beam = common.compare(times, f"cached_beam4_{mid}", f"cached_greedy_{mid}")
    beam1 = common.compare(times, f"cached_beam4_{mid}_batch1", f"cached_greedy_{mid}_batch1")
    if not args.quick:
        xla = {
            "greedy_xla_speed_up": common.compare(
                times, f"cached_greedy_{mid}", f"cached_greedy_{mid}_xla"),
            "beam4_over_greedy_xla": common.compare(
                times, f"cached_beam4_{mid}_xla", f"cached_greedy_{mid}_xla"),
            "beam4_over_greedy_xla_batch1": common.compare(
                times, f"cached_beam4_{mid}_xla_batch1", f"cached_greedy_{mid}_xla_batch1"),
        }
        for name, ratio in xla.items():
            print(f"  (XLA) {name}: {ratio['ratio_of_medians']:.2f}x "
                  f"(paired median {ratio['paired_ratio']['median']:.2f}x)")
    figures = {
        "cached_speed_up": speed_up["ratio_of_medians"],
        "per_token_cost_ratio": growth["ratio_of_medians"],
        "beam4_over_greedy": beam["ratio_of_medians"],
        "beam4_over_greedy_batch1": beam1["ratio_of_medians"],
    }
    targets = {"cached_speed_up": (">=", 8.0), "per_token_cost_ratio": ("<=", 1.3),
               "beam4_over_greedy": ("<=", 2.5), "beam4_over_greedy_batch1": ("<=", 2.5)}
    for name, s in stats.items():
        print(f"  {name:22s} {common.fmt(s)}")
    for name, value in figures.items():
        op, target = targets[name]
        met = value >= target if op == ">=" else value <= target
        print(f"  {name}: {value:.2f}x (target {op} {target}x: {'met' if met else 'MISSED'})")
    print(f"  speed-up per round: {common.fmt(speed_up['paired_ratio'], unit='x', digits=2)}")
    print(f"  per-token cost {long} vs {short} per round: "
          f"{common.fmt(growth['paired_ratio'], unit='x', digits=2)}")
    print(f"  beam/greedy per round: {common.fmt(beam['paired_ratio'], unit='x', digits=2)}")
    print(f"  beam/greedy, 1 sentence, per round: "
          f"{common.fmt(beam1['paired_ratio'], unit='x', digits=2)}")
    common.append_result("decoding", {
        "machine": info, "sizes": SIZES, "batch": batch, "quick": args.quick,
        "new_tokens": [short, mid, long], "tokens_identical": bool(same),
        "seconds": stats, "figures": figures,
        "paired": {"speed_up": speed_up, "per_token_long_over_short": growth,
                   "beam_over_greedy": beam, "beam_over_greedy_batch1": beam1,
                   **({} if args.quick else xla)},
        "targets": {k: {"op": v[0], "value": v[1]} for k, v in targets.items()},
    })


if __name__ == "__main__":
    main()
