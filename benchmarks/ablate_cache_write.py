"""A/B of the decoder cache write: scatter (shipped) vs slice_update (before).

Same model and 32 sentences as `bench_decoding.py`, graph mode (no XLA),
interleaved rounds in one process: greedy at 32/64/128 new tokens and beam 4
at 64, each traced once with `kv_cache.write_caches` as shipped
and once with the `slice_update` it replaced.  Checks that both give the
same tokens, then prints per-token cost 128 vs 32 and beam4/greedy for each.

    python3 benchmarks/ablate_cache_write.py [--quick]
"""

import common  # first: sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads
import keras
import numpy as np
from bench_decoding import SIZES, cached_beam, cached_greedy, source_batch
from keras import ops

from keras_transformer.layers import kv_cache
from keras_transformer.models import Transformer


def slice_write(cache, new, index):
    """The write before: `slice_update` (slower than the scatter in TF graphs).

    Into the head-major `(B, h, S_max, d)` cache, as the shipped write.
    """
    new = ops.transpose(ops.cast(new, cache.dtype), (0, 2, 1, 3))  # (B, h, T, d)
    return ops.slice_update(cache, [0, 0, index, 0], new)


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    common.print_machine(common.machine_info())
    keras.utils.set_random_seed(0)
    model = Transformer(**SIZES)
    source = source_batch(8 if args.quick else 32)
    shipped = kv_cache.write_caches

    def slice_writes(caches, news, index):
        return tuple(slice_write(c, n, index) for c, n in zip(caches, news, strict=True))

    fns = {}
    for tag, write in (("slice", slice_writes), ("scatter", shipped)):
        kv_cache.write_caches = write  # read when a function is traced (its first call)
        for n in (32, 64, 128):
            fns[f"{tag}_greedy_{n}"] = cached_greedy(model, n)
            fns[f"{tag}_greedy_{n}"](source)
        fns[f"{tag}_beam_64"] = cached_beam(model, 64)
        fns[f"{tag}_beam_64"](source)
    kv_cache.write_caches = shipped
    for name in ("greedy_128", "beam_64"):
        same = np.array_equal(fns[f"slice_{name}"](source).numpy(),
                              fns[f"scatter_{name}"](source).numpy())
        print(f"{name}: identical tokens {same}")
        assert same
    times = common.interleave({k: (lambda f=f: f(source).numpy()) for k, f in fns.items()},
                              3 if args.quick else 5, warmup=0, verbose=False)
    median = {k: float(np.median(v)) for k, v in times.items()}
    for name, seconds in median.items():
        print(f"  {name:20s} {seconds:.3f} s")
    for tag in ("slice", "scatter"):
        per_token = (median[f"{tag}_greedy_128"] / 128) / (median[f"{tag}_greedy_32"] / 32)
        beam = median[f"{tag}_beam_64"] / median[f"{tag}_greedy_64"]
        print(f"{tag:8s} per-token cost 128/32 {per_token:.2f}, beam4/greedy {beam:.2f}")
    for name in ("greedy_32", "greedy_64", "greedy_128", "beam_64"):
        print(f"scatter over slice, {name}: {median['slice_' + name] / median['scatter_' + name]:.2f}x")


if __name__ == "__main__":
    main()
