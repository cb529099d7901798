"""Serving a translator: every path's latency in one run, and each path's BLEU.

Speed (always): one randomly initialised Transformer (N=3, d_model=256,
h=8, d_ff=1024, max_sequence_length=64, a synthetic 8000-piece WordPiece
vocabulary, so that strings go in and out) translates sources of 20 word
pieces to min(20 + 50, 64) = 64 tokens (an untrained model almost never
emits [END], so every path runs every step; the generated lengths are
printed and checked equal).  The paths, each timed interleaved with the
others of its group (batch 1 or 32, greedy or beam 4) after one untimed
call, with a pause before each timed call (`PAUSE`):

  keras                        `greedy_search` / `beam_search` over the Keras
                               model in a `tf.function`, ids in, ids out
  saved_model:serving_default  the export (`export.saved_model`), reloaded:
                               strings in, strings out, a TF graph
  saved_model:translate_ids    the same graph, ids in, ids out
  saved_model:translate_xla    strings in and out, greedy search as one XLA
                               program (inputs padded to power-of-two buckets)
  saved_model:translate_beam   strings in and out, beam 4, length penalty 0.6
  saved_model:translate_beam_xla  the same as one XLA program
  tflite_float32, tflite_int8  `translator_tflite` in LiteRT (2 threads), ids
                               in and out, static batch and source length 20
  ctranslate2_float32, _int8   `export.ctranslate2` of the same weights in
                               `ctranslate2.Translator` (2 threads), each in
                               a process of its own (`ctranslate2_worker.py`),
                               `translate_batch` on word pieces (beam 4 with
                               its own length penalty, 0.6)

CTranslate2 and `translate_ids` take pieces or ids (no tokenizer); the
strings signatures tokenize and detokenize inside the graph.  Each row
prints the median latency, tokens a second, and the latency over
CTranslate2 float32's: the ratio of medians and the paired per-round ratio
(median and quartiles; a "within Nx" target is met when the upper quartile
is at most N).  Each run is appended to `benchmarks/results/serving.json`
(`latency_s[path]["batch_1" | "batch_32"]["greedy" | "beam4"]`: median
seconds, None where a path has no such program).

Quality (`--run-dir RUN`, a trained translation run): every path
translates the run's test set (Multi30k's test_2016_flickr, or
`--test-files SOURCE REFERENCE`), and each path's BLEU (cased sacreBLEU, as
the run's metrics) and share of translations identical to the Keras
model's (same search) are printed and stored under `quality`; the
CTranslate2 exports are also held to the Keras model by `verify_ctranslate2`
(greedy, and beam 4 at length penalty 0 on both sides, where the two
length penalties coincide).

    python3 benchmarks/bench_serving.py [--quick] [--run-dir RUN] [--model pre_ln_gelu]

`--model pre_ln_gelu`: the same sizes with pre-LN blocks and GELU (the
options a user's variant might take), which decode on the same path as the
paper's model; its rows are stored with `"model": "pre_ln_gelu"`.

`--quick`: N=1, d_model=128, d_ff=512, 5 rounds, batch 1 only.  Default: 15
rounds at batch 1, 7 at batch 32.
"""

import os
import tempfile

import common
import keras
import numpy as np
import tensorflow as tf

SIZES = dict(num_layers=3, hidden_dim=256, num_heads=8, intermediate_dim=1024,
             max_sequence_length=64)
QUICK_SIZES = dict(SIZES, num_layers=1, hidden_dim=128, intermediate_dim=512)
#: `--model`: the paper's layout, or pre-LN blocks with GELU.
MODELS = {"paper": {}, "pre_ln_gelu": {"normalize_first": True, "activation": "gelu"}}
SOURCE_PIECES = 20
BEAM = 4
LENGTH_PENALTY = 0.6
THREADS = 2
# Seconds between timed calls: longer than the OpenMP block time (200 ms) in
# which CTranslate2's threads spin after a call; without it a CTranslate2 call
# ran 4x slower interleaved (190 ms) than alone (47 ms) at batch 1.
PAUSE = 0.3
PATHS = ("keras", "saved_model:serving_default", "saved_model:translate_ids",
         "saved_model:translate_xla", "saved_model:translate_beam",
         "saved_model:translate_beam_xla",
         "tflite_float32", "tflite_int8", "ctranslate2_float32", "ctranslate2_int8")
PEER = "ctranslate2_float32"
#: Timed rounds a batch size (`--quick`: 5, batch 1 only).
ROUNDS = {1: 15, 32: 7}


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


def keras_searches(model, max_sequence_length):
    """In-process greedy and beam search over the Keras model: ids -> ids."""
    from keras_transformer.decoding import beam_search, greedy_search

    def limit(ids):
        return tf.minimum(tf.shape(ids)[1] + 50, max_sequence_length)

    spec = [tf.TensorSpec([None, None], tf.int32)]
    greedy = tf.function(lambda ids: greedy_search(model, ids, max_length=limit(ids)),
                         input_signature=spec, autograph=False)
    beam = tf.function(
        lambda ids: beam_search(model, ids, beam_size=BEAM, length_penalty=LENGTH_PENALTY,
                                max_length=limit(ids))[0],
        input_signature=spec, autograph=False)
    return greedy, beam


class CTranslate2Worker:
    """A CTranslate2 export served by `ctranslate2_worker.py` in its own process."""

    def __init__(self, model_dir):
        import subprocess
        import sys

        worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ctranslate2_worker.py")
        self.process = subprocess.Popen(
            [sys.executable, worker, model_dir, str(THREADS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )

    def __call__(self, pieces, beam_size, max_length):
        import json

        request = {"pieces": pieces, "beam_size": beam_size, "max_length": max_length,
                   "length_penalty": LENGTH_PENALTY}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())["hypotheses"]

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


def exports(model, tokenizer, directory):
    """The SavedModel (loaded) and CTranslate2 exports of `model`: the
    latter as {quantization: CTranslate2Worker}, empty where ctranslate2
    is not installed."""
    from export.saved_model import export_model

    saved = os.path.join(directory, "saved_model")
    export_model(model, saved, tokenizer, config={"benchmark": True})
    loaded = tf.saved_model.load(saved)
    workers = {}
    try:
        from export.ctranslate2 import export_ctranslate2
    except ImportError:
        return loaded, workers
    for quantization in ("float32", "int8"):
        try:
            path = export_ctranslate2(model, os.path.join(directory, f"ct2_{quantization}"),
                                      tokenizer, quantization=quantization)
        except ModuleNotFoundError as error:
            print(f"  CTranslate2 skipped: {error}")
            break
        workers[quantization] = CTranslate2Worker(path)
    return loaded, workers


def tflite_runner(model, quantize, batch, source_length):
    from ai_edge_litert.interpreter import Interpreter

    from training.serving.tflite_programs import translator_tflite

    data = translator_tflite(model, quantize, source_length=source_length, batch_size=batch)
    interpreter = Interpreter(model_content=data, num_threads=THREADS)
    run = interpreter.get_signature_runner("serving_default")
    return lambda ids: run(encoder_token_ids=np.asarray(ids, np.int32))["token_ids"]


def translator_calls(search, greedy, beam, signatures, ids, strings):
    """Zero-argument calls of the Keras searches and the SavedModel's signatures."""
    def signature(name, **feeds):
        output = "token_ids" if name == "translate_ids" else "translations"
        return lambda: signatures[name](**feeds)[output].numpy()

    if search == "beam4":
        return {"keras": lambda: beam(ids).numpy(),
                "saved_model:translate_beam": signature("translate_beam", sentences=strings),
                "saved_model:translate_beam_xla": signature("translate_beam_xla",
                                                            sentences=strings)}
    return {
        "keras": lambda: greedy(ids).numpy(),
        "saved_model:serving_default": signature("serving_default", sentences=strings),
        "saved_model:translate_ids": signature("translate_ids", encoder_token_ids=ids),
        "saved_model:translate_xla": signature("translate_xla", sentences=strings),
    }


def generated(tokens):
    """Tokens generated per row, [END] included (padding after it excluded)."""
    return [int(np.count_nonzero(row)) for row in np.asarray(tokens)]


def speed(args, info):
    from keras_transformer.models import Transformer

    sizes = QUICK_SIZES if args.quick else SIZES
    tokenizer = synthetic_tokenizer()
    keras.utils.set_random_seed(0)
    model = Transformer(vocabulary_size=tokenizer.vocabulary_size, **sizes,
                        **MODELS[args.model])
    print(f"model {args.model} {sizes}, vocabulary {tokenizer.vocabulary_size}", flush=True)
    greedy, beam = keras_searches(model, sizes["max_sequence_length"])
    loaded, ct2 = exports(model, tokenizer, tempfile.mkdtemp(prefix="kt_serving_"))
    signatures = loaded.signatures
    vocabulary = list(tokenizer.vocabulary)
    latency = {path: {} for path in PATHS}
    groups = {}
    for batch in (1,) if args.quick else (1, 32):
        repeats = 5 if args.quick else ROUNDS[batch]
        texts = sentences(batch)
        strings = tf.constant(texts)
        ids = tokenizer.tokenize(strings).to_tensor().numpy().astype(np.int32)
        pieces = [[vocabulary[i] for i in row if i] for row in ids]
        max_length = min(ids.shape[1] + 50, sizes["max_sequence_length"])
        tflite = {f"tflite_{name}": tflite_runner(model, q, batch, ids.shape[1])
                  for name, q in (("float32", "none"), ("int8", "int8"))}

        def ct2_call(quantization, beam_size, pieces=pieces, max_length=max_length):
            return lambda: ct2[quantization](pieces, beam_size, max_length)

        for search in ("greedy", "beam4"):
            candidates = translator_calls(search, greedy, beam, signatures, ids, strings)
            if search == "greedy":
                candidates.update({name: (lambda run=run, ids=ids: run(ids))
                                   for name, run in tflite.items()})
            for quantization in ct2:
                candidates[f"ctranslate2_{quantization}"] = ct2_call(
                    quantization, 1 if search == "greedy" else BEAM)
            name = f"batch_{batch}"
            print(f"== {name}, {search}: {len(candidates)} paths, {repeats} rounds", flush=True)
            agreement = check_agreement(search, candidates, tokenizer, ct2, vocabulary)
            times = common.interleave(candidates, repeats, warmup=1, verbose=False, pause=PAUSE)
            stats = {n: common.summarize(t) for n, t in times.items()}
            tokens = agreement["generated_tokens"]
            rows = {}
            for path, s in stats.items():
                row = {"seconds": s, "tokens_per_s": tokens / s["median"]}
                if PEER in times:
                    ratio = common.compare(times, path, PEER)
                    row["over_ctranslate2_float32"] = ratio["ratio_of_medians"]
                    row["paired_over_ctranslate2_float32"] = ratio["paired_ratio"]
                rows[path] = row
                latency[path].setdefault(name, {})[search] = s["median"]
                paired = row.get("paired_over_ctranslate2_float32")
                versus = "" if paired is None else (
                    f"  {row['over_ctranslate2_float32']:5.2f}x CT2 f32 (paired "
                    f"{paired['median']:.2f}, IQR {paired['q1']:.2f}-{paired['q3']:.2f})")
                print(f"  {path:28s} {s['median'] * 1e3:8.1f} ms [IQR {s['q1'] * 1e3:.1f}-"
                      f"{s['q3'] * 1e3:.1f}]  {row['tokens_per_s']:7.0f} tok/s{versus}",
                      flush=True)
            groups[f"{name}_{search}"] = {"paths": rows, **agreement}
    for worker in ct2.values():
        worker.close()
    for path in latency:
        for name in ("batch_1",) if args.quick else ("batch_1", "batch_32"):
            latency[path].setdefault(name, {}).setdefault("greedy", None)
            latency[path][name].setdefault("beam4", None)
    return {"model": args.model, "sizes": sizes, "latency_s": latency, "groups": groups}


def check_agreement(search, candidates, tokenizer, ct2, vocabulary):
    """Runs each candidate once and compares its tokens or text with Keras's."""
    from training.text.detokenize import detokenize_ids

    outputs = {name: run() for name, run in candidates.items()}
    reference = np.asarray(outputs["keras"])
    text = [t.decode() for t in detokenize_ids(tokenizer, reference).numpy()]
    ids_of = {token: i for i, token in enumerate(vocabulary)}
    same, lengths = {}, {}
    for name, output in outputs.items():
        if name.startswith("ctranslate2"):
            rows = [[ids_of[t] for t in hypothesis] for hypothesis in output]
            width = max(len(r) for r in rows)
            output = np.array([r + [0] * (width - len(r)) for r in rows], np.int32)
        output = np.asarray(output)
        if output.dtype.kind in "OSU":  # strings signatures: text, compared as text
            same[name] = float(np.mean([a.decode() == b for a, b in zip(output, text, strict=True)]))
            continue
        lengths[name] = generated(output)
        width = max(output.shape[1], reference.shape[1])
        a, b = (np.pad(x, [(0, 0), (0, width - x.shape[1])]) for x in (output, reference))
        same[name] = float(np.mean((a == b).all(axis=1)))
    print(f"  rows identical to keras ({search}): " + ", ".join(
        f"{n} {v:.0%}" for n, v in same.items()), flush=True)
    print("  tokens generated per row: " + ", ".join(
        f"{n} {min(v)}-{max(v)}" for n, v in lengths.items()), flush=True)
    return {"identical_to_keras": same, "generated_tokens": sum(lengths["keras"]),
            "generated_per_row": lengths}


def quality(args):
    """Each path's BLEU on a trained run's test set, and its agreement with Keras."""
    from export.ctranslate2 import export_ctranslate2, verify_ctranslate2
    from training.data.readers import read_lines
    from training.monitor.evaluation import Translator, bleu_scores
    from training.runs.predict import answer_in_batches
    from training.runs.run_dir import load_run
    from training.serving.inputs import token_ids

    run = load_run(args.run_dir)
    config, model, task = run.config, run.model, run.task
    if args.test_files:
        source_file, reference_file = args.test_files
    else:
        folder = os.path.join(common.REPO_ROOT, config["data_dir"], "multi30k")
        source_file, reference_file = (
            os.path.join(folder, f"test_2016_flickr.{config[key]}.gz")
            for key in ("source_language", "target_language"))
    sources, references = read_lines(source_file), read_lines(reference_file)
    language = config.get("target_language")
    msl = int(model.config.max_sequence_length)
    directory = tempfile.mkdtemp(prefix="kt_serving_quality_")
    saved = run.task_model.export(os.path.join(directory, "saved_model"), config=config)
    signatures = tf.saved_model.load(saved).signatures
    outputs = {}
    for beam_size, search in ((1, "greedy"), (BEAM, "beam4")):
        translate = Translator(model, task.tokenizer, msl, beam_size=beam_size,
                               length_penalty=LENGTH_PENALTY)
        outputs[f"keras {search}"] = translate(sources)
    for signature in ("serving_default", "translate_xla", "translate_beam",
                      "translate_beam_xla"):
        def answer(batch, run_signature=signatures[signature]):
            served = run_signature(sentences=tf.constant(batch))
            return {key: value.numpy() for key, value in served.items()}

        outputs[f"saved_model:{signature}"] = answer_in_batches(task, sources, 64, answer)
    for name, quantize in (("tflite_float32", "none"), ("tflite_int8", "int8")):
        runner = tflite_runner(model, quantize, 1, msl)
        rows = [runner(np.pad(ids, [(0, 0), (0, msl - ids.shape[1])]))
                for ids in (token_ids(task.tokenizer, [s], msl) for s in sources)]
        from training.text.detokenize import detokenize_ids

        outputs[name] = [detokenize_ids(task.tokenizer, r).numpy()[0].decode() for r in rows]
    report = {"run_dir": os.path.relpath(args.run_dir, common.REPO_ROOT),
              "test_sentences": len(sources), "bleu": {}, "identical_to_keras": {}}
    from training.text.detokenize import detokenize_punctuation

    keras_text = {s: [detokenize_punctuation(t) for t in outputs[f"keras {s}"]]
                  for s in ("greedy", "beam4")}
    for name, hypotheses in outputs.items():
        report["bleu"][name] = bleu_scores(hypotheses, references, language)["bleu"]
        against = keras_text["beam4" if "beam" in name else "greedy"]
        same = np.mean([detokenize_punctuation(h) == k for h, k in zip(hypotheses, against, strict=True)])
        report["identical_to_keras"][name] = float(same)
    report["ctranslate2"] = {}
    for quantization in ("float32", "int8"):
        path = export_ctranslate2(run.task_model, os.path.join(directory, f"ct2_{quantization}"),
                                  quantization=quantization)
        result = verify_ctranslate2(run.task_model, path, sources, references, beam_size=BEAM)
        report["ctranslate2"][quantization] = result
    print(f"== quality: {len(sources)} test sentences of {report['run_dir']}", flush=True)
    for name in outputs:
        print(f"  {name:30s} BLEU {report['bleu'][name]:5.2f}  identical to keras "
              f"{report['identical_to_keras'][name]:.1%}")
    for quantization, result in report["ctranslate2"].items():
        for search in ("greedy", "beam"):
            r = result[search]
            print(f"  ctranslate2_{quantization:8s} {search:6s} (length penalty 0) identical "
                  f"{r['identical']:.1%}, BLEU keras {r['bleu_keras']:.2f} / ctranslate2 "
                  f"{r['bleu_ctranslate2']:.2f}")
    return report


def main():
    def extra(parser):
        parser.add_argument("--run-dir", help="a trained translation run: BLEU of every path")
        parser.add_argument("--test-files", nargs=2, metavar=("SOURCE", "REFERENCE"),
                            help="test set of --run-dir (default: Multi30k test_2016_flickr)")
        parser.add_argument("--skip-speed", action="store_true",
                            help="with --run-dir: the BLEU table only")
        parser.add_argument("--model", choices=sorted(MODELS), default="paper",
                            help="the speed model's layout (default: the paper's)")

    args = common.parse_args(__doc__.splitlines()[0], extra)
    info = common.machine_info()
    common.print_machine(info)
    result = {"machine": info, "quick": args.quick}
    if not args.skip_speed:
        result.update(speed(args, info))
    if args.run_dir:
        result["quality"] = quality(args)
    common.append_result("serving_quality" if args.skip_speed else "serving", result, args)


if __name__ == "__main__":
    main()
