"""A/B of the decoding cache cut into position chunks: 1 (one tensor) vs 2, 4, 8.

Same model and 32 sentences as `bench_decoding.py` (64 new tokens, end
never emitted), graph mode (no XLA), interleaved rounds in one process:
cached greedy and beam 4 with `Transformer.init_cache(..., chunks=n)` for
each count n.  Checks that every count gives the same tokens, then prints
each count's time over 1 chunk's, and beam 4 / greedy per count.  In a
TensorFlow graph a cache write copies the tensor written to, so chunking
trades those copies (4x larger in beam 4's 128 rows than in greedy's 32)
against one more batched matmul per chunk and layer.  What the library
ships: greedy search 1 chunk, beam search `Transformer.beam_cache_chunks`.

    python3 benchmarks/ablate_cache_chunks.py [--quick] [--xla]

`--quick`: 8 sentences, 3 rounds.  `--xla`: the loops under XLA instead
(which writes in place; for information).
"""

import common  # first: sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads
import keras
import numpy as np
from bench_decoding import SIZES, cached_beam, cached_greedy, source_batch

from keras_transformer.models import Transformer

COUNTS = (1, 2, 4, 8)


class Chunked:
    """`model` decoding with its self-attention cache in `chunks` chunks."""

    def __init__(self, model, chunks):
        self.model, self.chunks, self.config = model, chunks, model.config
        self.static_cache_entries = model.static_cache_entries

    def encode(self, *args, **kwargs):
        return self.model.encode(*args, **kwargs)

    def init_cache(self, encoder_token_ids, encoder_output, max_length):
        return self.model.init_cache(
            encoder_token_ids, encoder_output, max_length, chunks=self.chunks)

    def decode_step(self, *args):
        return self.model.decode_step(*args)


def main():
    args = common.parse_args(
        __doc__.splitlines()[0],
        lambda p: p.add_argument("--xla", action="store_true"),
    )
    info = common.machine_info()
    common.print_machine(info)
    keras.utils.set_random_seed(0)
    model = Transformer(**SIZES)
    source = source_batch(8 if args.quick else 32)
    fns, tokens = {}, {}
    for count in COUNTS:
        for kind, make in (("greedy", cached_greedy), ("beam4", cached_beam)):
            name = f"{kind}_chunks{count}"
            fns[name] = make(Chunked(model, count), 64, jit_compile=args.xla)
            tokens[name] = fns[name](source).numpy()
    for kind in ("greedy", "beam4"):
        same = all(np.array_equal(tokens[f"{kind}_chunks1"], tokens[f"{kind}_chunks{c}"])
                   for c in COUNTS)
        print(f"{kind}: identical tokens for every chunk count: {same}")
        assert same
    times = common.interleave({k: (lambda f=f: f(source).numpy()) for k, f in fns.items()},
                              3 if args.quick else 7, warmup=0, verbose=False)
    results = {"machine": info, "sizes": SIZES, "batch": int(source.shape[0]),
               "xla": args.xla, "seconds": {k: common.summarize(v) for k, v in times.items()}}
    for count in COUNTS:
        for kind in ("greedy", "beam4"):
            ratio = common.compare(times, f"{kind}_chunks1", f"{kind}_chunks{count}")
            results[f"{kind}_speed_up_chunks{count}"] = ratio
            print(f"  {kind:6s} {count} chunks: {ratio['ratio_of_medians']:.2f}x faster than 1 "
                  f"(per round {common.fmt(ratio['paired_ratio'], unit='x', digits=2)})")
        beam = common.compare(times, f"beam4_chunks{count}", f"greedy_chunks{count}")
        results[f"beam4_over_greedy_chunks{count}"] = beam
        print(f"  beam4 / greedy, {count} chunks: {beam['ratio_of_medians']:.2f}x "
              f"(per round {common.fmt(beam['paired_ratio'], unit='x', digits=2)})")
    common.append_result("ablate_cache_chunks", {"xla": args.xla, **results}, args)


if __name__ == "__main__":
    main()
