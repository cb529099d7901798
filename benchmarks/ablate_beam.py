"""Where batch beam search's time goes beyond greedy's: rows, search, cache reorder.

Same model and 32 sentences as `bench_decoding.py` (64 new tokens, end never
emitted), interleaved rounds in one process, graph mode and XLA:

    greedy        `greedy_search`: 32 rows per decoder step.
    greedy_rows4  `greedy_search` on each sentence 4 times over: the 128
                  rows of a beam-4 step, without any of the search's work.
    beam4         `beam_search`, beam 4: 128 rows per step, plus the
                  log-softmax, three top-k and the reorder of every written
                  cache entry (`take` of the self-attention keys/values).
    beam4_keep    the same search with the reorder skipped (the cache no
                  longer follows its beams, so its translations are WRONG:
                  a timing probe only, never a decoder).

beam4 / greedy is the issue's latency ratio; greedy_rows4 / greedy is what
4x the rows cost alone; beam4 / greedy_rows4 is the search's own overhead,
and beam4 / beam4_keep the part of it that is the reorder.

    python3 benchmarks/ablate_beam.py [--quick]

`--quick`: 8 sentences, graph mode only, 3 rounds.
"""

import importlib

import common  # first: sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads
import keras
from bench_decoding import SIZES, cached_beam, cached_greedy, source_batch
from keras import ops

from keras_transformer.models import Transformer

# The module, not the function `keras_transformer.decoding.beam_search`.
beam_module = importlib.import_module("keras_transformer.decoding.beam_search")


def keep_cache(cache, rows, static_entries):
    """The probe: no reorder (wrong translations; timing only)."""
    return cache


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    info = common.machine_info()
    common.print_machine(info)
    keras.utils.set_random_seed(0)
    model = Transformer(**SIZES)
    source = source_batch(8 if args.quick else 32)
    source_rows4 = ops.repeat(source, 4, axis=0)  # (4B, S), as beam 4 tiles it
    shipped = beam_module._reorder_cache
    fns = {}
    for xla in (False,) if args.quick else (False, True):
        tag = "_xla" if xla else ""
        fns[f"greedy{tag}"] = cached_greedy(model, 64, jit_compile=xla)
        fns[f"greedy_rows4{tag}"] = cached_greedy(model, 64, jit_compile=xla)
        fns[f"beam4{tag}"] = cached_beam(model, 64, jit_compile=xla)
        beam_module._reorder_cache = keep_cache  # read when traced (first call)
        fns[f"beam4_keep{tag}"] = cached_beam(model, 64, jit_compile=xla)
        fns[f"beam4_keep{tag}"](source)
        beam_module._reorder_cache = shipped
    inputs = {name: source_rows4 if name.startswith("greedy_rows4") else source
              for name in fns}
    runs = {k: (lambda f=f, x=inputs[k]: f(x).numpy()) for k, f in fns.items()}
    for name, run in runs.items():
        print(f"  warm-up {name}: {common.timed(run):.2f} s", flush=True)
    times = common.interleave(runs,
                              3 if args.quick else 5, warmup=0, verbose=False)
    results = {"machine": info, "sizes": SIZES, "batch": int(source.shape[0]),
               "seconds": {k: common.summarize(v) for k, v in times.items()}}
    for tag in ("",) if args.quick else ("", "_xla"):
        for name, (slow, fast) in {
            f"beam4_over_greedy{tag}": (f"beam4{tag}", f"greedy{tag}"),
            f"rows4_over_greedy{tag}": (f"greedy_rows4{tag}", f"greedy{tag}"),
            f"beam4_over_rows4{tag}": (f"beam4{tag}", f"greedy_rows4{tag}"),
            f"reorder_cost{tag}": (f"beam4{tag}", f"beam4_keep{tag}"),
            f"beam4_keep_over_greedy{tag}": (f"beam4_keep{tag}", f"greedy{tag}"),
        }.items():
            ratio = common.compare(times, slow, fast)
            results[name] = ratio
            print(f"  {name:26s} {ratio['ratio_of_medians']:.2f}x  per round: "
                  f"{common.fmt(ratio['paired_ratio'], unit='x', digits=2)}")
    common.append_result("ablate_beam", results, args)


if __name__ == "__main__":
    main()
