"""What a head-major key/value cache would buy decoding: interleaved ablation.

Not a benchmark with a target: the evidence behind the diff proposed in the
benchmark report, on the `bench_decoding` model (N=3, d_model=256, h=8,
random weights, 32 sentences, end_id=-1 so every loop runs its full length,
graph mode without XLA).  keras_transformer/ is untouched: the variant
replaces `init_cache` and the decoder's attention `call` on one model's
instances (same weights as the shipped model).

    shipped       the library as it is: key/value caches (B, S, h, d).
    head_major    both caches stored as (B, h, S, d): the self-attention cache
                  (S = T_max) and the cross-attention keys/values projected
                  once from the encoder.  The new key/value (B, 1, h, d) is
                  transposed once when written, and the two attention einsums
                  read the cache in the layout BatchMatMul wants.  The shipped
                  layout makes `einsum("bthd,bshd->bhts")` and
                  `einsum("bhts,bshd->bthd")` transpose every whole cache at
                  every step: O(T_max) per step for self-attention, which is
                  what makes the per-token cost grow with the length (TF
                  profiler: `Transpose` and `XlaDynamicUpdateSlice` are the op
                  types that grow from 32 to 128 steps).

(An earlier version also tried gathering only the self-attention cache in
beam search, since the cross-attention entries are equal for all beams of a
sentence: 1.00x, no gain, so it was dropped.)

Tokens of every variant are compared with the shipped ones.

    python3 benchmarks/ablate_decode_cache.py [--quick]
"""

import types

import common
import keras
import numpy as np
import tensorflow as tf
from bench_decoding import IDS, NEVER, SIZES, source_batch
from keras import ops

from keras_transformer.decoding import beam_search, greedy_search
from keras_transformer.layers.masking import causal_mask
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.scaled_dot_product_attention import masked_softmax
from keras_transformer.models import Transformer


def _init_cache_head_major(self, encoder_token_ids, encoder_output, max_length):
    cache = Transformer.init_cache(self, encoder_token_ids, encoder_output, max_length)
    for name in ("self_key", "self_value", "cross_key", "cross_value"):
        cache[name] = [ops.transpose(t, (0, 2, 1, 3)) for t in cache[name]]  # (B, h, S, d)
    return cache


def _attention_head_major(self, query, value, key=None, query_mask=None,
                          value_mask=None, key_mask=None, cache=None,
                          cache_update_index=None, **kwargs):
    """`MultiHeadAttention.call` with head-major (B, h, S, d) caches."""
    if cache is None:
        return MultiHeadAttention.call(
            self, query, value, key=key, query_mask=query_mask, value_mask=value_mask,
            key_mask=key_mask, **kwargs)
    key_mask = value_mask if key_mask is None else key_mask
    if cache_update_index is None:  # cross-attention: projected once
        q = self.project_query(query)  # (B, T, h, d)
        k, v = cache  # (B, h, S, d)
        causal = None
    else:  # self-attention: write this position, attend causally
        q, k_new, v_new = self._project_all(query, value, value)  # (B, T, h, d)
        start = [0, 0, cache_update_index, 0]
        k = ops.slice_update(cache[0], start, ops.transpose(k_new, (0, 2, 1, 3)))
        v = ops.slice_update(cache[1], start, ops.transpose(v_new, (0, 2, 1, 3)))
        causal = causal_mask(ops.shape(q)[1], ops.shape(k)[2], cache_update_index)  # (T, S)
        key_mask = None
    mask = None
    for part in (None if query_mask is None else query_mask[:, :, None],  # (B, T, 1)
                 None if key_mask is None else key_mask[:, None, :],  # (B, 1, S)
                 None if causal is None else causal[None]):  # (1, T, S)
        if part is not None:
            mask = part if mask is None else ops.logical_and(mask, part)
    q = q * ops.cast(self._head_key_dim**-0.5, q.dtype)
    scores = ops.einsum("bthd,bhsd->bhts", q, k)  # (B, h, T, S): no transpose of k
    weights = masked_softmax(scores, None if mask is None else mask[:, None])
    heads = ops.einsum("bhts,bhsd->bthd", weights, v)  # (B, T, h, d)
    output = ops.einsum("bthd,hdo->bto", heads, self.output_kernel) + self.output_bias
    if cache_update_index is None:
        return output, weights
    return output, weights, (k, v)


def head_major(model):
    model.init_cache = types.MethodType(_init_cache_head_major, model)
    for block in model.decoder_blocks:
        for layer in (block.self_attention, block.cross_attention):
            layer.call = types.MethodType(_attention_head_major, layer)
    return model


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    info = common.machine_info()
    common.print_machine(info)
    batch, short, mid, long, repeats = (8, 16, 32, 64, 3) if args.quick else (32, 32, 64, 128, 5)
    source = source_batch(batch)
    models = {}
    for layout in ("shipped", "head_major"):
        keras.utils.set_random_seed(0)  # identical weights
        models[layout] = Transformer(**SIZES)
    head_major(models["head_major"])

    def greedy_fn(model, n):
        return tf.function(lambda ids: greedy_search(model, ids, max_length=n, end_id=NEVER),
                           input_signature=[IDS])

    def beam_fn(model):
        return tf.function(lambda ids: beam_search(
            model, ids, beam_size=4, length_penalty=0.6, max_length=mid, end_id=NEVER)[0],
            input_signature=[IDS])

    fns = {}
    for layout in ("shipped", "head_major"):
        for n in (short, mid, long):
            fns[f"greedy_{n}_{layout}"] = greedy_fn(models[layout], n)
    fns["beam4_shipped"] = beam_fn(models["shipped"])
    fns["beam4_head_major"] = beam_fn(models["head_major"])
    outputs = {name: fn(source).numpy() for name, fn in fns.items()}  # tracing
    identical = {
        "greedy_head_major": all(np.array_equal(outputs[f"greedy_{n}_shipped"],
                                                outputs[f"greedy_{n}_head_major"])
                                 for n in (short, mid, long)),
        "beam4_head_major": np.array_equal(outputs["beam4_shipped"],
                                           outputs["beam4_head_major"]),
    }
    print(f"{batch} sentences; tokens identical to shipped: {identical}", flush=True)
    times = common.interleave({n: (lambda f=f: f(source).numpy()) for n, f in fns.items()},
                              repeats, warmup=0)
    result = {"machine": info, "batch": batch, "new_tokens": [short, mid, long],
              "tokens_identical": {k: bool(v) for k, v in identical.items()},
              "seconds": {n: common.summarize(t) for n, t in times.items()}, "figures": {}}
    for name, stats in result["seconds"].items():
        print(f"  {name:28s} {common.fmt(stats)}")

    def figure(label, baseline, candidate, scale=1.0):
        ratio = common.compare(times, baseline, candidate)
        value = ratio["ratio_of_medians"] * scale
        result["figures"][label] = {"value": value, "paired_median":
                                    ratio["paired_ratio"]["median"] * scale}
        print(f"  {label}: {value:.2f}x (paired median "
              f"{ratio['paired_ratio']['median'] * scale:.2f}x)")

    for layout in ("shipped", "head_major"):  # per-token cost long / short
        figure(f"per_token_{long}_over_{short}_{layout}", f"greedy_{long}_{layout}",
               f"greedy_{short}_{layout}", scale=short / long)
        figure(f"beam4_over_greedy_{mid}_{layout}",
               f"beam4_{layout}",
               f"greedy_{mid}_{layout}")
    figure(f"greedy_{mid}_speed_up_head_major", f"greedy_{mid}_shipped",
           f"greedy_{mid}_head_major")
    figure(f"greedy_{long}_speed_up_head_major", f"greedy_{long}_shipped",
           f"greedy_{long}_head_major")
    figure("beam4_speed_up_head_major", "beam4_shipped", "beam4_head_major")
    common.write_json("ablate_decode_cache" + ("_quick" if args.quick else ""), result)


if __name__ == "__main__":
    main()
