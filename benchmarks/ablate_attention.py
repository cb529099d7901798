"""What candidate changes to our attention would buy: interleaved ablations.

Not a benchmark with a target: the evidence behind the diffs proposed in the
benchmark report.  The training step of `bench_training_throughput` (N=3,
d_model=256, h=8, d_ff=1024, vocabulary 8000, untied, batch 64 x 64, Adam)
is timed, interleaved, for KerasHub's model and for ours as shipped and with
one change each, applied by replacing a method on the model's
`MultiHeadAttention` instances (keras_transformer/ itself is untouched):

    ours          as shipped.
    split_qkv     the fused projections (B, T, h, 2 d_k + d_v) in self-
                  attention and (B, S, h, d_k + d_v) in cross-attention are
                  cut by one `ops.split` instead of slices; the backward pass
                  then is one concat instead of zero-padded
                  `StridedSliceGrad`s summed by `AddN` (the TF profiler shows
                  StridedSliceGrad in ours and not in KerasHub).
    key_mask_only the (B, T, S) mask AND-s only key padding and causality
                  (no query mask): what KerasHub does; padded query rows
                  then attend instead of being uniform, and the loss
                  ignores them.
    paper_dropout ours with attention_dropout=0, the paper's setting and
                  our default (Section 5.4 drops sub-layer outputs and
                  embeddings only); KerasHub cannot turn it off alone.
    keras_hub     KerasHub's layers (the peer).

    python3 benchmarks/ablate_attention.py [--quick] [--xla]
"""

import types

import common
import keras
import seq2seq_models
from bench_training_throughput import SIZES, make_batch
from keras import ops

from keras_transformer.layers.multi_head_attention import MultiHeadAttention


def _project_all_split(self, query, value, key):
    if self._fused and query is value and key is value:
        qkv = self._project(query, self.qkv_kernel, self.qkv_bias)  # (B, T, h, 2dk+dv)
        dk = self._head_key_dim
        return ops.split(qkv, [dk, 2 * dk], axis=-1)  # 3 x (B, T, h, d)
    k, v = self.project_key_value(value, key)
    return self.project_query(query), k, v


def _project_key_value_split(self, value, key=None):
    if self._fused and (key is None or key is value):
        dk = self._head_key_dim
        bias = None if self.qkv_bias is None else self.qkv_bias[:, dk:]
        kv = self._project(value, self.qkv_kernel[:, :, dk:], bias)  # (B, S, h, dk+dv)
        return ops.split(kv, [dk], axis=-1)  # 2 x (B, S, h, d)
    return MultiHeadAttention.project_key_value(self, value, key)


def _call_key_mask_only(self, query, value, key=None, query_mask=None, **kwargs):
    return MultiHeadAttention.call(self, query, value, key=key, query_mask=None, **kwargs)


PATCHES = {
    "split_qkv": [("_project_all", _project_all_split),
                  ("project_key_value", _project_key_value_split)],
    "key_mask_only": [("call", _call_key_mask_only)],
}


def build(variant, jit_compile):
    keras.utils.set_random_seed(0)
    kind = "keras_hub" if variant == "keras_hub" else "ours"
    extra = {"attention_dropout": 0.0} if variant == "paper_dropout" else {}
    model = seq2seq_models.build(kind, SIZES, tied=False, name=variant, **extra)
    layers = [x for x in model._flatten_layers() if isinstance(x, MultiHeadAttention)]
    for attribute, function in PATCHES.get(variant, []):
        for layer in layers:
            setattr(layer, attribute, types.MethodType(function, layer))
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=jit_compile)
    return model


def main():
    args = common.parse_args(
        __doc__.splitlines()[0],
        lambda p: p.add_argument("--xla", action="store_true", help="jit_compile=True"),
    )
    info = common.machine_info()
    common.print_machine(info)
    batch, repeats = (16, 3) if args.quick else (64, 9)
    features, labels = make_batch(batch, 64, SIZES["vocabulary_size"])
    variants = ("ours", "split_qkv", "key_mask_only", "paper_dropout", "keras_hub")
    models = {v: build(v, args.xla) for v in variants}
    times = common.interleave(
        {v: (lambda m=m: float(m.train_on_batch(features, labels))) for v, m in models.items()},
        repeats, warmup=2 if args.xla else 1)
    result = {"machine": info, "xla": args.xla, "batch": batch, "variants": {}}
    for v in variants:
        ratio = common.compare(times, "ours", v)
        hub = common.compare(times, "keras_hub", v)
        result["variants"][v] = {"seconds": common.summarize(times[v]),
                                 "speed_up_over_ours": ratio, "speed_up_over_keras_hub": hub}
        print(f"  {v:14s} {common.fmt(result['variants'][v]['seconds'])}  vs ours "
              f"{ratio['ratio_of_medians']:.3f}x (paired median "
              f"{ratio['paired_ratio']['median']:.3f}x)  vs keras_hub "
              f"{hub['ratio_of_medians']:.3f}x (paired median {hub['paired_ratio']['median']:.3f}x)")
    common.write_json("ablate_attention" + ("_xla" if args.xla else "")
                      + ("_quick" if args.quick else ""), result)


if __name__ == "__main__":
    main()
