"""Serving latency: SavedModel vs in-process, TFLite float32 vs int8.

What is compared, for one randomly initialised Transformer (N=3,
d_model=256, h=8, d_ff=1024, max_sequence_length=64; the vocabulary is a
synthetic 8000-piece WordPiece vocabulary, so that strings go in and out)
translating sources of 20 word pieces to min(20 + 50, 64) = 64 tokens by
greedy search (an untrained model almost never emits [END]; the generated
lengths are printed, and equal lengths mean equal work):

  group "saved_model" (strings in, strings out; tokenizer, cached greedy
  loop and detokenizer in one graph), batch 1 and batch 32:
    in_process    `training.serving.signatures.TranslatorModule(model, tokenizer).translate`
    saved_model   the same module written by `export.saved_model.
                  export_saved_model` and reloaded with `tf.saved_model.load`
                  (its `serving_default` signature), in this process.
    joining       `training.text.detokenize.detokenize_punctuation_graph` alone
                  (a `tf.function`) on the batch's translations: the part of
                  each call that attaches punctuation, printed as a share of
                  `in_process`.

  group "tflite" (ids in, ids out, batch 1, source length fixed at 20):
    tflite_float32  `training.serving.tflite_programs.translator_tflite(model, "none")` in the
                    LiteRT `Interpreter` (2 threads)
    tflite_int8     the same with `quantize="int8"` (dynamic range)
    saved_model_ids the SavedModel's `translate_ids` signature, for reference

All candidates of a group are timed interleaved after one untimed call.

    python3 benchmarks/bench_serving.py [--quick]

`--quick`: N=1, d_model=128, d_ff=512, 7 rounds, batch 1 only.  Default: 15 rounds.
"""

import os
import tempfile

import common
import keras
import numpy as np
import tensorflow as tf

from training.tasks import get_task

SIZES = dict(num_layers=3, hidden_dim=256, num_heads=8, intermediate_dim=1024,
             max_sequence_length=64)
QUICK_SIZES = dict(SIZES, num_layers=1, hidden_dim=128, intermediate_dim=512)
SOURCE_PIECES = 20


def synthetic_tokenizer(size=8000):
    """A WordPiece tokenizer whose words `w0 .. wN` are single pieces."""
    from training.text.tokenizers import RESERVED_TOKENS, WordPieceTokenizer

    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocabulary = list(RESERVED_TOKENS) + letters + ["##" + c for c in letters]
    vocabulary += [f"w{i}" for i in range(size - len(vocabulary))]
    return WordPieceTokenizer(vocabulary, lower_case=False)


def sentences(count, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(f"w{i}" for i in rng.integers(0, 7000, SOURCE_PIECES))
            for _ in range(count)]


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    info = common.machine_info()
    common.print_machine(info)
    try:
        from ai_edge_litert.interpreter import Interpreter

        from export.saved_model import export_saved_model
        from training.serving.signatures import TranslatorModule
        from training.serving.tflite_programs import translator_tflite
    except ImportError as error:
        print(f"SKIPPED: export/ or LiteRT is not available ({error}).")
        return
    from keras_transformer.models import Transformer

    sizes = QUICK_SIZES if args.quick else SIZES
    repeats = 7 if args.quick else 15
    tokenizer = synthetic_tokenizer()
    keras.utils.set_random_seed(0)
    model = Transformer(vocabulary_size=tokenizer.vocabulary_size, **sizes)
    print(f"model {sizes}, vocabulary {tokenizer.vocabulary_size}, {repeats} rounds",
          flush=True)
    result = {"machine": info, "sizes": sizes, "quick": args.quick, "groups": {}}

    module = TranslatorModule(model, tokenizer)
    export_dir = os.path.join(tempfile.mkdtemp(prefix="kt_serving_"), "translator")
    export_saved_model(
        model,
        {"benchmark": True},
        export_dir,
        get_task("translation", tokenizer=tokenizer),
    )
    loaded = tf.saved_model.load(export_dir)
    serve = loaded.signatures["serving_default"]

    def words(texts):
        return float(np.mean([len(t.split()) for t in texts.numpy()]))

    from training.text.detokenize import detokenize_punctuation_graph

    join = tf.function(detokenize_punctuation_graph)

    for batch in (1,) if args.quick else (1, 32):
        texts = tf.constant(sentences(batch))
        translations = module.translate(texts)["translations"]
        candidates = {
            "in_process": lambda t=texts: module.translate(t)["translations"].numpy(),
            "saved_model": lambda t=texts: serve(sentences=t)["translations"].numpy(),
            "joining": lambda t=translations: join(t).numpy(),
        }
        lengths = {
            "in_process": words(module.translate(texts)["translations"]),
            "saved_model": words(serve(sentences=texts)["translations"]),
        }
        print(f"== strings, batch {batch}: output words {lengths}", flush=True)
        times = common.interleave(candidates, repeats, warmup=1)
        ratio = common.compare(times, "in_process", "saved_model")
        group = {n: common.summarize(t) for n, t in times.items()}
        for name, stats in group.items():
            print(f"  {name:12s} {common.fmt(stats, 1e3, 'ms', 1)}")
        print(
            f"  saved_model / in_process latency: {1 / ratio['ratio_of_medians']:.2f}x"
        )
        share = group["joining"]["median"] / group["in_process"]["median"]
        print(f"  punctuation joining: {share:.2%} of in_process")
        result["groups"][f"strings_batch_{batch}"] = {
            "seconds": group,
            "output_words": lengths,
            "saved_model_over_in_process": 1 / ratio["ratio_of_medians"],
            "joining_share_of_in_process": share,
            "paired_in_process_over_saved_model": ratio["paired_ratio"],
        }

    print("== ids, batch 1: converting to TFLite (float32, int8) ...", flush=True)
    ids = tokenizer.tokenize(tf.constant(sentences(1))).to_tensor()
    ids = ids.numpy().astype(np.int32)[:, :SOURCE_PIECES]
    runners, sizes_bytes = {}, {}
    for quantize, name in (("none", "tflite_float32"), ("int8", "tflite_int8")):
        data = translator_tflite(
            model, quantize, source_length=SOURCE_PIECES, batch_size=1
        )
        sizes_bytes[name] = len(data)
        interpreter = Interpreter(model_content=data, num_threads=2)
        runners[name] = interpreter.get_signature_runner("serving_default")
    translate_ids = loaded.signatures["translate_ids"]
    candidates = {
        "tflite_float32": lambda: runners["tflite_float32"](encoder_token_ids=ids)[
            "token_ids"
        ],
        "tflite_int8": lambda: runners["tflite_int8"](encoder_token_ids=ids)[
            "token_ids"
        ],
        "saved_model_ids": lambda: translate_ids(encoder_token_ids=tf.constant(ids))[
            "token_ids"
        ].numpy(),
    }
    generated = {n: int(np.count_nonzero(f())) for n, f in candidates.items()}
    agree = float(
        np.mean(candidates["tflite_float32"]() == candidates["tflite_int8"]())
    )
    print(
        f"  generated tokens {generated}; int8 == float32 tokens at {agree:.0%} "
        f"of positions; .tflite bytes {sizes_bytes}",
        flush=True,
    )
    times = common.interleave(candidates, repeats, warmup=1)
    ratio = common.compare(times, "tflite_float32", "tflite_int8")
    vs_saved = common.compare(times, "saved_model_ids", "tflite_float32")
    group = {n: common.summarize(t) for n, t in times.items()}
    for name, stats in group.items():
        print(f"  {name:15s} {common.fmt(stats, 1e3, 'ms', 1)}")
    print(
        f"  int8 speed-up over float32: {ratio['ratio_of_medians']:.2f}x "
        f"(paired {common.fmt(ratio['paired_ratio'], unit='x', digits=2)}); "
        f"tflite float32 over SavedModel ids: {vs_saved['ratio_of_medians']:.2f}x"
    )
    result["groups"]["tflite_batch_1"] = {
        "seconds": group,
        "generated_tokens": generated,
        "int8_token_agreement": agree,
        "tflite_bytes": sizes_bytes,
        "int8_over_float32_speed_up": ratio,
        "tflite_float32_over_saved_model_speed_up": vs_saved,
    }
    common.write_json("serving" + ("_quick" if args.quick else ""), result)


if __name__ == "__main__":
    main()
