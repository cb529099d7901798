"""Every model option decodes on one path: each option's SavedModel against the paper model's.

The serving benchmark (`bench_serving.py`) times one model against
CTranslate2; a model of other options (pre-LN blocks with GELU, learned
positions with untied embeddings) is timed there in another run, a few
minutes apart, on a machine whose speed drifts by more than the gap
sought.  Here the option models and the paper's model are exported
(`export.saved_model`, randomly initialised, the serving benchmark's sizes
and synthetic vocabulary) and each signature is timed with every model in
the same rounds, interleaved (`common.interleave`, a pause before each
call), so each ratio to the paper model is paired round by round:

    paper            post-LN, ReLU, sinusoidal positions, tied embeddings
    pre_ln_gelu      normalize_first=True, activation="gelu"
    learned_untied   positions="learned", tie_embeddings=False

Signatures: `serving_default` (greedy, a TF graph) and `translate_xla` at
batch 1 and 32, `translate_beam` and `translate_beam_xla` at batch 1 (64
tokens generated on every path, checked on each model's `translate_ids`).
Printed: the median latency of each and its paired ratio to the paper
model's (median and quartiles); the
target is a ratio within 1.1 (upper quartile at most 1.1) for every option,
signature and batch: no option falls back to a slower path.  Each run is
appended to `benchmarks/results/model_options.json`.

    python3 benchmarks/bench_model_options.py [--quick]

`--quick`: N=1, d_model 128, 3 rounds, batch 1 greedy only; nothing written.
"""

import os
import tempfile

import bench_serving
import common
import keras
import numpy as np
import tensorflow as tf

MODELS = {
    "paper": {},
    "pre_ln_gelu": {"normalize_first": True, "activation": "gelu"},
    "learned_untied": {"positions": "learned", "tie_embeddings": False},
}
#: (signature, batch): what is timed; rounds per batch.
CALLS = [("serving_default", 1), ("translate_xla", 1), ("translate_beam", 1),
         ("translate_beam_xla", 1), ("serving_default", 32), ("translate_xla", 32)]
ROUNDS = {1: 11, 32: 5}
TARGET = 1.1


def exported(options, sizes, tokenizer, directory):
    """The reloaded SavedModel of a seeded Transformer with `options`."""
    from export.saved_model import export_model
    from keras_transformer.models import Transformer

    keras.utils.set_random_seed(0)
    model = Transformer(vocabulary_size=tokenizer.vocabulary_size, **sizes, **options)
    export_model(model, directory, tokenizer, config={"benchmark": True})
    return tf.saved_model.load(directory)


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    info = common.machine_info()
    common.print_machine(info)
    sizes = bench_serving.QUICK_SIZES if args.quick else bench_serving.SIZES
    calls = CALLS[:1] if args.quick else CALLS
    tokenizer = bench_serving.synthetic_tokenizer()
    root = tempfile.mkdtemp(prefix="kt_options_")
    loaded = {name: exported(options, sizes, tokenizer, os.path.join(root, name))
              for name, options in MODELS.items()}
    ids = tokenizer.tokenize(tf.constant(bench_serving.sentences(32))).to_tensor()
    for name, model in loaded.items():  # random weights: no [END], every step runs
        lengths = set(bench_serving.generated(
            model.signatures["translate_ids"](encoder_token_ids=tf.cast(ids, "int32"))
            ["token_ids"]))
        if lengths != {sizes["max_sequence_length"]}:
            raise SystemExit(f"{name}: generated lengths {sorted(lengths)}, not all "
                             f"{sizes['max_sequence_length']}: the paths would not be comparable")
    rows = []
    for signature, batch in calls:
        strings = tf.constant(bench_serving.sentences(batch))
        candidates = {name: (lambda fn=model.signatures[signature], x=strings:
                             fn(sentences=x)["translations"].numpy())
                      for name, model in loaded.items()}
        print(f"== {signature}, batch {batch}", flush=True)
        times = common.interleave(candidates, 3 if args.quick else ROUNDS[batch], verbose=False,
                                  pause=bench_serving.PAUSE)
        for name in MODELS:
            median = float(np.median(times[name]))
            ratio = common.compare(times, name, "paper")["paired_ratio"]  # name / paper
            print(f"  {name:16s} {1000 * median:8.1f} ms   x paper {ratio['median']:.2f} "
                  f"(IQR {ratio['q1']:.2f}-{ratio['q3']:.2f})", flush=True)
            rows.append({"signature": signature, "batch": batch, "model": name,
                         "median_s": median, "x_paper": ratio})
    worst = max((r for r in rows if r["model"] != "paper"), key=lambda r: r["x_paper"]["q3"])
    met = worst["x_paper"]["q3"] <= TARGET
    print(f"largest upper quartile over the paper model: {worst['x_paper']['q3']:.2f} "
          f"({worst['model']}, {worst['signature']}, batch {worst['batch']}): within "
          f"{TARGET}x {'met' if met else 'NOT met'}", flush=True)
    common.append_result("model_options", {"machine": info, "sizes": sizes, "rows": rows,
                                           "target_met": met}, args)


if __name__ == "__main__":
    main()
