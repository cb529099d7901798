"""What one request to an exported classifier costs: Keras, SavedModel, TFLite.

The two classifiers a user gets from the presets, each built by its task's
own code (`Task.resolve_config`, `Task.prepare`, `Task.build_model`, as
`python3 -m training train` builds it) from synthetic data of a typical
set's shape, with the seeded random (untrained) weights of a fresh run:

  text    the `sst2` preset (`text_classification` is the same recipe on
          your files): SST-2's 7,792 pooled training and development
          sentences of a synthetic language (about 12,000 words, Zipf
          frequencies), so that the whole words seen twice fill the preset's
          8,000-word vocabulary (SST-2's own: 7,754 words, 3% fewer); 7,792
          sentences are under the 10,000 of `ENSEMBLE_MAX_SENTENCES`, so a
          `ClassifierEnsemble` of five `TextCNNClassifier`s (d_model 128,
          n-gram widths 3-5, each word with its hashed character 3-5-grams,
          16,384 buckets, 32 per word, at most 64 tokens).  Requests are
          sentences of the synthetic language: batch 1 one of 19 words
          (SST-2's median), batch 32 lengths 4-34 words (mean 19, as
          SST-2's 19.3).
  series  the `timeseries` preset on ArrowHead's shape (36
          training series of 251 steps, 1 channel, 3 classes; random walks):
          its recipe (`training.recipe.series.series_stem_recipe`) gives
          five voting `TransformerClassifier`s (N=2, d_model 64, d_ff 128),
          each with its own MiniRocket stem (8 windows, 2,016 kernel
          features, biases adapted to the training series) and the level
          features.  Requests are series of 251 steps.

The paths, each timed at batch 1 and batch 32 (one request of that many
examples), all after one untimed call:

  keras                         `model(inputs, training=False)` and
                                `model.probabilities` in a `tf.function`,
                                in this process (token ids / features).
  saved_model:serving_default   `export.saved_model.export_model`,
                                reloaded with `tf.saved_model.load`: raw
                                strings (tokenized in its graph) / features.
  saved_model:classify_ids      (text) the same SavedModel's token-ids
                                signature.
  tflite_float32, tflite_int8   `training.serving.tflite_programs.
                                classifier_tflite(model, "none" | "int8",
                                batch_size=B)` (int8: dynamic range), one
                                `.tflite` per batch size (static shapes), run
                                by `ai_edge_litert.interpreter.Interpreter`
                                with 2 threads (TensorFlow, for the other
                                paths, uses all the cores it is given).

Inputs as each path takes them: the id paths get the tokenizer's ids
(`CharNGramTokenizer`, tokenized before timing) 0-padded to the batch's
longest sentence, except TFLite, whose input is 0-padded to the export's
default static length S = `max_sequence_length` = 64 (padding is masked,
so the classes and probabilities are the same; the work is not).  Before
timing, every path's probabilities of the same request are compared with
`serving_default`'s (`check_parity`): within `TOLERANCE` (1e-3 float32,
0.05 int8), and the same classes except at a near-tie (its two most
probable classes closer than that tolerance); the largest absolute
difference is printed.

The paths of one classifier and batch size are timed interleaved
(`common.interleave`); the table gives the median and IQR in ms, requests/s
and examples/s, and each path's median latency over `serving_default`'s.

    python3 benchmarks/bench_serving_classifiers.py [--quick]

`--quick`: one member instead of five (what `--set ensemble_size=1` gives),
the same sizes otherwise, 15 rounds at batch 1 and 7 at batch 32.  Default:
60 and 25.  Each run is appended to `benchmarks/results/serving_classifiers.json`
(nothing with `--quick`), `latency_s` = {classifier: {path: {"batch_1": s, "batch_32": s}}} (medians).
"""

import os
import shutil
import tempfile
import time

import common
import keras
import numpy as np
import tensorflow as tf

from training.config import load_config
from training.data.common import TaskData
from training.serving.inputs import token_ids
from training.tasks import get_task

BATCHES = (1, 32)
#: SST-2's training and development sentences, pooled (cross-fitted) by the preset.
TEXT_SENTENCES = 7792
#: Words of the synthetic language: more than the 8,000 the vocabulary keeps.
TEXT_WORDS = 12000
#: Request sentences: batch 1 SST-2's median length, batch 32 drawn from [lo, hi).
TEXT_MEDIAN_WORDS, TEXT_WORDS_RANGE = 19, (4, 35)
#: ArrowHead's shape: training series, steps, channels, classes.
SERIES_SHAPE = dict(num_train=36, length=251, channels=1, classes=3)
#: Largest |probability - serving_default's| accepted: float32 paths, int8 TFLite.
#: Not 1e-6: a MiniRocket feature counts conv outputs above a bias, so a float
#: rounding at a bias moves it by a whole 1/count (6e-5 seen at batch 32).
TOLERANCE = {"float32": 1e-3, "int8": 0.05}
PATHS = {
    "text": ("keras", "saved_model:serving_default", "saved_model:classify_ids",
             "tflite_float32", "tflite_int8"),
    "series": ("keras", "saved_model:serving_default", "tflite_float32", "tflite_int8"),
}
BASELINE = "saved_model:serving_default"
TFLITE_THREADS = 2


def synthetic_language(num_words=TEXT_WORDS, seed=0):
    """(words, Zipf probabilities): distinct lower-case strings of 2-9 letters."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = set()
    while len(words) < num_words:
        words.add("".join(rng.choice(letters, rng.integers(2, 10))))
    words = sorted(words)
    rng.shuffle(words)
    p = 1.0 / np.arange(1, num_words + 1)
    return words, p / p.sum()


def sentences(language, lengths, seed):
    """Sentences of `lengths` words drawn from `language` = (words, probabilities)."""
    words, p = language
    rng = np.random.default_rng(seed)
    drawn = iter(rng.choice(len(words), int(np.sum(lengths)), p=p))
    return [" ".join(words[next(drawn)] for _ in range(int(n))) for n in lengths]


def _build(task, config, data):
    """The model a run of `config` builds on `data`, as `training.train` builds it."""
    config = task.resolve_config(config, data)
    with tempfile.TemporaryDirectory() as run_dir:
        task.prepare(config, data, run_dir, write=False)
    keras.utils.set_random_seed(config.seed)
    return config, task.build_model(config, data)


def text_classifier(num_sentences=TEXT_SENTENCES, language=None, overrides=(), seed=0):
    """(task, config, model, language): the `sst2` preset's classifier of
    `num_sentences` synthetic labelled sentences (vocabulary learned from them)."""
    language = language or synthetic_language()
    rng = np.random.default_rng(seed)
    texts = sentences(language, rng.integers(*TEXT_WORDS_RANGE, num_sentences), seed + 1)
    labels = rng.integers(0, 2, num_sentences).astype("int32")
    split = (texts, labels)
    data = TaskData(split, split, split, label_names=["0", "1"])
    task = get_task("classification")
    config, model = _build(task, load_config("sst2", overrides), data)
    return task, config, model, language


def random_walks(count, length, channels, seed):
    """`(count, length, channels)` float32 random walks."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((count, length, channels)).cumsum(axis=1).astype(np.float32)


def series_classifier(num_train, length, channels, classes, overrides=(), seed=0):
    """(task, config, model): the `timeseries` preset's classifier of
    `num_train` synthetic series (`data_defaults` sizes it; stems adapt to them)."""
    x = random_walks(num_train, length, channels, seed)
    y = (np.arange(num_train) % classes).astype("int32")
    data = TaskData((x, y), (x, y), (x, y), label_names=[str(k) for k in range(classes)])
    task = get_task("timeseries")
    # The preset reads your files; nothing is read here (the data are built above).
    preset = load_config("timeseries",
                         ['train_files=["synthetic_TRAIN.txt"]', *overrides])
    config, model = _build(task, preset, data)
    return task, config, model


def requests(kind, task, model, batch, seed, language=None):
    """Inputs of one request of `batch` examples, by what a path takes:
    text {"strings", "ids" (padded to the longest), "static_ids" (to S)};
    series {"features" (B, T, C), "channels_first" (B, C, T), the SavedModel's layout}."""
    if kind == "series":
        length = int(model.max_sequence_length)
        walks = random_walks(batch, length, int(model.num_features), seed)
        return {"features": walks, "channels_first": np.ascontiguousarray(walks.transpose(0, 2, 1))}
    lengths = [TEXT_MEDIAN_WORDS] if batch == 1 else np.random.default_rng(seed).integers(
        *TEXT_WORDS_RANGE, batch)
    texts = sentences(language, lengths, seed)
    length = int(model.max_sequence_length)
    ids = token_ids(task.tokenizer, texts, length)
    pad = [(0, 0), (0, length - ids.shape[1])] + [(0, 0)] * (ids.ndim - 2)
    return {"strings": np.asarray(texts, dtype=object), "ids": ids.astype(np.int32),
            "static_ids": np.pad(ids, pad).astype(np.int32)}


def serving_paths(kind, task, config, model, export_dir, batches, verbose=True):
    """({path: {batch: (`requests` inputs -> probabilities (B, K) float32)}},
    {export: seconds it took}, {.tflite: bytes}); `export_dir` receives the
    SavedModel (written, then reloaded)."""
    from ai_edge_litert.interpreter import Interpreter

    from export.saved_model import export_model
    from training.serving.tflite_programs import classifier_tflite

    seconds, sizes = {}, {}
    start = time.perf_counter()
    export_model(model, export_dir, task.tokenizer, task.label_names, config=config.to_dict())
    loaded = tf.saved_model.load(export_dir)
    seconds["saved_model"] = time.perf_counter() - start
    if verbose:
        print(f"  SavedModel written and reloaded in {seconds['saved_model']:.1f} s", flush=True)
    key = "ids" if kind == "text" else "features"

    @tf.function
    def in_process(inputs):
        return tf.cast(model.probabilities(model(inputs, training=False)), tf.float32)

    def signature(name, argument, input_key):
        function = loaded.signatures[name]
        return lambda r: function(**{argument: tf.constant(r[input_key])})[
            "probabilities"].numpy()

    paths = {"keras": lambda r: in_process(tf.constant(r[key])).numpy()}
    if kind == "text":
        paths[BASELINE] = signature("serving_default", "sentences", "strings")
        paths["saved_model:classify_ids"] = signature("classify_ids", "token_ids", "ids")
    else:
        paths[BASELINE] = signature("serving_default", "features", "channels_first")
    paths = {name: dict.fromkeys(batches, fn) for name, fn in paths.items()}
    tflite_key = "static_ids" if kind == "text" else "features"
    for quantize, name in (("none", "tflite_float32"), ("int8", "tflite_int8")):
        paths[name] = {}
        for batch in batches:
            start = time.perf_counter()
            data = classifier_tflite(model, quantize, batch_size=batch)
            seconds[f"{name}_batch_{batch}"] = time.perf_counter() - start
            sizes[f"{name}_batch_{batch}"] = len(data)
            interpreter = Interpreter(model_content=data, num_threads=TFLITE_THREADS)
            runner = interpreter.get_signature_runner("serving_default")
            (argument,) = runner.get_input_details()
            paths[name][batch] = (
                lambda r, run=runner, a=argument: run(**{a: r[tflite_key]})["probabilities"])
            if verbose:
                print(f"  {name} batch {batch}: {len(data) / 1e6:.1f} MB, converted in "
                      f"{seconds[f'{name}_batch_{batch}']:.1f} s", flush=True)
    return paths, seconds, sizes


def check_parity(paths, inputs, batch):
    """({path: max |p - serving_default's p|}, {path: near-ties answered with
    another class}) of one request; raises if a path
    is off by more than its `TOLERANCE`, or its classes differ from
    `serving_default`'s other than at a near-tie (the two most probable
    classes closer than that tolerance: untrained, the classes are close)."""
    reference = np.asarray(paths[BASELINE][batch](inputs), np.float32)
    top2 = np.sort(reference, axis=-1)[:, -2:] if reference.shape[-1] > 1 else None
    margin = (top2[:, 1] - top2[:, 0]) if top2 is not None else np.abs(reference[:, 0] - 0.5)
    differences, flips, problems = {}, {}, []
    for name, by_batch in paths.items():
        if name == BASELINE:
            continue
        p = np.asarray(by_batch[batch](inputs), np.float32)
        tolerance = TOLERANCE["int8" if name.endswith("int8") else "float32"]
        differences[name] = float(np.max(np.abs(p - reference)))
        if reference.shape[-1] > 1:
            differ = p.argmax(-1) != reference.argmax(-1)
        else:
            differ = (p[:, 0] > 0.5) != (reference[:, 0] > 0.5)
        flips[name] = int(differ.sum())
        if (differ & (margin >= tolerance)).any():
            problems.append(f"{name}: {int(differ.sum())} of {batch} classes differ")
        if differences[name] > tolerance:
            problems.append(f"{name}: max |dp| {differences[name]:.2e} > {tolerance:g}")
    if problems:
        raise AssertionError(f"batch {batch}: paths disagree with {BASELINE}: {problems}")
    return differences, flips


def describe(kind, config, model, language=None):
    """The sizes of a classifier, for the results."""
    members = getattr(model, "members", [model])
    sizes = {"parameters": int(model.count_params()), "members": len(members),
             "max_sequence_length": int(model.max_sequence_length),
             "num_classes": int(model.num_classes),
             "hidden_dim": config.model_overrides["hidden_dim"]}
    if kind == "text":
        sizes.update(vocabulary_size=int(model.vocabulary_size),
                     char_ngram_buckets=int(config.char_ngram_buckets),
                     training_sentences=TEXT_SENTENCES, synthetic_words=len(language[0]))
    else:
        sizes.update(num_features=int(model.num_features),
                     num_layers=config.model_overrides["num_layers"],
                     stem_windows=config.stem_windows,
                     stem_kernel_features=config.stem_kernel_features, **SERIES_SHAPE)
    return sizes


def time_classifier(kind, built, export_root, rounds):
    """Builds the paths of one classifier, checks them, times them; its results."""
    task, config, model, language = built
    print(f"== {kind}: {type(model).__name__} of {len(getattr(model, 'members', [model]))}, "
          f"{model.count_params():,} parameters; exporting ...", flush=True)
    paths, seconds, tflite_bytes = serving_paths(
        kind, task, config, model, os.path.join(export_root, kind), BATCHES)
    result = {"sizes": describe(kind, config, model, language), "tflite_bytes": tflite_bytes,
              "setup_seconds": seconds, "parity_max_abs_difference": {},
              "parity_near_tie_flips": {}, "groups": {}}
    inputs = {batch: requests(kind, task, model, batch, seed=100 + batch, language=language)
              for batch in BATCHES}
    for batch in BATCHES:
        differences, flips = check_parity(paths, inputs[batch], batch)
        result["parity_max_abs_difference"][f"batch_{batch}"] = differences
        result["parity_near_tie_flips"][f"batch_{batch}"] = flips
        shown = ", ".join(f"{n} {d:.1e}" for n, d in differences.items())
        classes = ("same classes" if not any(flips.values()) else
                   f"same classes but near-ties {flips}")
        print(f"  parity, batch {batch}: {classes}; max |p - {BASELINE}|: {shown}",
              flush=True)
    latency = {name: {} for name in paths}
    for batch in BATCHES:
        request = inputs[batch]
        tokens = ""
        if kind == "text":
            tokens = {"longest": int(request["ids"].shape[1]),
                      "mean": float(np.count_nonzero(request["ids"][..., 0]) / batch),
                      "tflite_static": int(request["static_ids"].shape[1])}
            result.setdefault("tokens", {})[f"batch_{batch}"] = tokens
            tokens = (f"; tokens a sentence {tokens['mean']:.1f}, padded to "
                      f"{tokens['longest']} (TFLite {tokens['tflite_static']})")
        candidates = {name: (lambda f=by_batch[batch], r=request: f(r))
                      for name, by_batch in paths.items()}
        times = common.interleave(candidates, rounds[batch], warmup=1, verbose=False)
        group = {name: common.summarize(t) for name, t in times.items()}
        over = {name: common.compare(times, BASELINE, name) for name in paths}
        result["groups"][f"batch_{batch}"] = {"seconds": group, "over_serving_default": over}
        print(f"  batch {batch} ({rounds[batch]} rounds{tokens}):", flush=True)
        print(f"    {'path':30s} {'median ms':>10s} {'IQR ms':>15s} {'req/s':>8s} "
              f"{'ex/s':>9s} {'x serving_default':>18s}")
        for name, stats in group.items():
            latency[name][f"batch_{batch}"] = stats["median"]
            ratio = 1.0 / over[name]["ratio_of_medians"]
            print(f"    {name:30s} {stats['median'] * 1e3:10.2f} "
                  f"{stats['q1'] * 1e3:7.2f}-{stats['q3'] * 1e3:7.2f} "
                  f"{1.0 / stats['median']:8.1f} {batch / stats['median']:9.1f} "
                  f"{ratio:17.2f}x", flush=True)
    return latency, result


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    info = common.machine_info()
    common.print_machine(info)
    try:
        import ai_edge_litert.interpreter  # noqa: F401

        import export.saved_model  # noqa: F401
    except ImportError as error:
        print(f"SKIPPED: export/ or LiteRT is not available ({error}).")
        return
    overrides = ["ensemble_size=1"] if args.quick else []
    rounds = {1: 15, 32: 7} if args.quick else {1: 60, 32: 25}
    payload = {"machine": info, "quick": args.quick, "rounds": rounds, "batches": list(BATCHES),
               "tolerance": TOLERANCE, "tflite_threads": TFLITE_THREADS,
               "tensorflow_intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads()
               or info["usable_cores"], "latency_s": {}, "classifiers": {}}
    export_root = tempfile.mkdtemp(prefix="kt_serving_classifiers_")
    try:
        start = time.perf_counter()
        built = text_classifier(overrides=overrides)
        task = built[0]
        print(f"text classifier built in {time.perf_counter() - start:.1f} s "
              f"(vocabulary {task.tokenizer.vocabulary_size})", flush=True)
        payload["latency_s"]["text"], payload["classifiers"]["text"] = time_classifier(
            "text", built, export_root, rounds)
        start = time.perf_counter()
        task, config, model = series_classifier(**SERIES_SHAPE, overrides=overrides)
        print(f"series classifier built in {time.perf_counter() - start:.1f} s", flush=True)
        payload["latency_s"]["series"], payload["classifiers"]["series"] = time_classifier(
            "series", (task, config, model, None), export_root, rounds)
    finally:
        shutil.rmtree(export_root, ignore_errors=True)
    common.append_result("serving_classifiers", payload, args)


if __name__ == "__main__":
    main()
