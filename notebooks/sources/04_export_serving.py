# ruff: noqa: E402  (a notebook: imports follow the set-up cell)
# %% [markdown]
# # 4. Export and serving: SavedModel, TFLite and an HTTP endpoint
#
# A trained translator is a Keras model with its tokenizer inside, a task
# model (`training.task_models.Translator`): it `translate`s raw sentences,
# saves as one `.keras` file with its vocabulary, and `export`s itself. It
# leaves Python and Keras behind in two forms:
#
# - a **SavedModel** whose signatures take and return raw strings (the
#   word-piece tokenizer and the cached greedy and beam-search loops are
#   inside the graph), for TensorFlow Serving or any TensorFlow runtime;
# - a **TFLite** flatbuffer of the encoder and the greedy loop with fixed
#   shapes, run by the LiteRT interpreter (`ai_edge_litert`), in float32 or
#   with int8 weights.
#
# Only the inference module is exported, never the optimizer or the training
# graph. Each form is checked against the Keras model it came from, and the
# SavedModel is put behind the package's server (`python -m export serve`,
# TensorFlow Serving's REST API) and asked over HTTP.
#
# `KT_NOTEBOOK_SIZE=small` (default, CI) trains a one-layer translator on
# 2,000 generated number-word pairs; `full` a two-layer one on 8,000.

# %%
import os
import shutil
from notebook_setup import SIZE, scratch_folder

WORK = scratch_folder("04")  # runs and files, never inside the repository

# %%
import json
import subprocess

import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from export.saved_model_cli import run_saved_model_cli
from export.tflite_verify import verify_tflite
from export.verify import verify_saved_model
from training.config import load_config
from training.data import readers, toy
from training.monitor.evaluation import Translator
from training.runs.run_dir import load_run
from training.serving.tflite_programs import translator_output_length
from training.train import train

tf.get_logger().setLevel("ERROR")  # no "Assets written to ..." INFO lines

# %% [markdown]
# ## A trained translator
#
# The toy English -> German number-words task of notebook 3, trained here by
# the pipeline, `train(config, run_dir)` (what `python -m training train`
# runs); `load_run(...).task_model` gives back its model as the task model a
# Keras user holds after `Translator.from_texts(...)` and `fit`
# (README, "From Python"): the same class, the same export.

# %%
n_train = 2000 if SIZE == "small" else 8000
paths = toy.write_toy_corpus(WORK / "data", n_train=n_train, n_valid=20, n_test=40)
config = load_config("toy").replace(
    dataset="files",
    train_files=paths["train"],
    valid_files=paths["valid"],
    test_files=paths["test"],
    epochs=8,
    tokens_per_batch=1024,
    eval_sentences=0,
    beam_size=1,
    checkpoint_every_steps=100_000,
    model_overrides={
        **load_config("toy").model_overrides,
        "intermediate_dim": 128,
        "num_layers": 1 if SIZE == "small" else 2,
    },
)
RUN = WORK / "run"
metrics = train(config, RUN, verbose=0)
run = load_run(RUN)
model, tokenizer = run.model, run.tokenizer
translator = run.task_model  # the Transformer with its tokenizer: a training.task_models.Translator
print(f"test BLEU (greedy) {metrics['test_bleu_greedy']:.1f}; parameters {model.count_params():,}; "
      f"{type(translator).__name__} of a {type(translator.backbone).__name__}")  # fmt: skip
sentences, references = readers.read_parallel(*paths["test"])
sentences = sentences[:8]
python_greedy = translator.translate(sentences)
python_beam = translator.translate(sentences, beam_size=4)
for source, greedy, beamed in list(zip(sentences, python_greedy, python_beam, strict=True))[:3]:
    print(f"{source}\n   greedy: {greedy}\n   beam:   {beamed}")

# %% [markdown]
# One `.keras` file holds the weights and the vocabulary;
# `keras.models.load_model` gives back a translator that answers the same.

# %%
import keras

translator.save(WORK / "translator.keras")
reloaded = keras.models.load_model(WORK / "translator.keras")
reloaded_greedy = reloaded.translate(sentences)
print(f"{os.path.getsize(WORK / 'translator.keras'):,} B; reloaded translates the same: "
      f"{reloaded_greedy == python_greedy}")  # fmt: skip

# %% [markdown]
# ## SavedModel: strings in, strings out
#
# `translator.export` writes the inference `tf.Module`; its signatures
# include `serving_default` (sentences -> greedy translations),
# `translate_beam` (sentences -> beam-search translations and scores),
# `translate_ids` (token ids -> token ids) and the XLA programs of both
# searches; the vocabulary and the model's config go in `assets/`. The
# directory `translator/1` is the layout TensorFlow Serving expects: a model
# name, then a version number. The command line's batch version,
# `python -m export saved-model --run-dir RUN`, writes the same signatures
# from the run, through the same `export` (the run's task model, its whole
# config recorded).

# %%
EXPORT = WORK / "models" / "translator" / "1"
translator.export(EXPORT)
for path in sorted(EXPORT.rglob("*")):
    if path.is_file():
        print(f"{path.stat().st_size:>10,} B  {path.relative_to(EXPORT)}")
saved_model_bytes = sum(p.stat().st_size for p in EXPORT.rglob("*") if p.is_file())

# %% [markdown]
# Loaded back, it needs neither Keras nor this package, only TensorFlow and
# `tensorflow_text` (whose import registers the tokenizer's ops):

# %%
import tensorflow_text  # noqa: E402, F401  (registers the tokenizer ops)

served = tf.saved_model.load(str(EXPORT))
print("signatures:", list(served.signatures))
response = served.signatures["serving_default"](tf.constant(sentences))
saved_greedy = [t.decode() for t in response["translations"].numpy()]
beam = served.signatures["translate_beam"](tf.constant(sentences))
keras_greedy = Translator(model, tokenizer, config.max_sequence_length)(sentences)
for source, saved, beamed in list(
    zip(sentences, saved_greedy, beam["translations"].numpy(), strict=True)
)[:4]:
    print(f"{source}\n   greedy: {saved}\n   beam:   {beamed.decode()}")
print(
    "SavedModel greedy == Keras greedy for all",
    len(sentences),
    "sentences:",
    saved_greedy == keras_greedy,
)

# %% [markdown]
# ## `saved_model_cli`
#
# TensorFlow's command-line tool shows a signature's inputs and outputs:

# %%
show = subprocess.run(
    [
        "saved_model_cli",
        "show",
        "--dir",
        str(EXPORT),
        "--tag_set",
        "serve",
        "--signature_def",
        "serving_default",
    ],
    capture_output=True,
    text=True,
    check=True,
)
print(show.stdout)

# %% [markdown]
# `saved_model_cli run` feeds a signature from the command line. It only
# knows the ops linked into TensorFlow, so plain `saved_model_cli run` stops
# at "Op type not registered 'NormalizeUTF8'"; `export.saved_model_cli`
# starts the tool's own `main` from a Python that imports `tensorflow_text`
# first, with otherwise the usual command line:
#
# ```
# saved_model_cli run --dir models/translator/1 --tag_set serve \
#     --signature_def serving_default --input_exprs 'sentences=[b"..."]'
# ```

# %%
cli_output = run_saved_model_cli(EXPORT, {"sentences": np.array(sentences[:3], dtype=object)})
for source, translation in zip(sentences, cli_output["translations"], strict=False):
    print(f"{source!r} -> {translation.decode()!r}")

# %% [markdown]
# `export.verify.verify_saved_model` makes the same comparison thoroughly: a
# fresh `python3 -I` process that imports nothing of this project runs the
# export on in-vocabulary sentences and awkward probes (empty, whitespace,
# emoji, `[START]` text), and the results must equal what Keras computes
# here (`python -m export verify` is the same from the shell).

# %%
report = verify_saved_model(EXPORT, run.task_model, use_saved_model_cli=False)
print(json.dumps(report, indent=1))

# %% [markdown]
# ## Serving over HTTP (TensorFlow Serving's REST API)
#
# The package's server (`python -m export serve --model_name translator
# --model_base_path models/translator`, the `serve` extra) loads the
# newest version under the base path, warms every signature up and answers
# TensorFlow Serving's REST API, batching concurrent requests. Here it
# serves from a thread on a free loopback port, and one request goes to it
# over HTTP, as `curl -d @request.json
# http://localhost:8501/v1/models/translator:predict` would send it:

# %%
import urllib.request

from export.server.config import ModelSource, ServerOptions
from export.server.main import start_server

request = {"signature_name": "serving_default", "instances": sentences[:2]}
# warmup=False: one request here; a server left running warms every signature up first.
options = ServerOptions((ModelSource("translator", str(EXPORT.parent)),), port=0,
                        poll_seconds=-1, warmup=False)  # fmt: skip
with start_server(options) as server:
    post = urllib.request.Request(f"{server.url}/v1/models/translator:predict",
                                  data=json.dumps(request).encode(),
                                  headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(post, timeout=60) as reply:
        http_response = json.load(reply)
print("request.json:", json.dumps(request, ensure_ascii=False))
print("response:    ", json.dumps(http_response, ensure_ascii=False))
http_greedy = [p if isinstance(p, str) else p["translations"] for p in http_response["predictions"]]

# %% [markdown]
# TensorFlow Serving itself serves the same folder; it must know the
# tokenizer's tensorflow-text ops, which the official builds link (use a
# release matching TensorFlow 2.21; one that answers "Op type not
# registered" needs a build with them linked in):
#
# ```
# docker run -p 8501:8501 -v "$PWD/models/translator:/models/translator" \
#     -e MODEL_NAME=translator tensorflow/serving
# ```

# %% [markdown]
# ## TFLite / LiteRT
#
# TFLite needs fixed shapes and builtin ops. The `.tflite` holds the encoder
# and the cached greedy loop for a batch of 1 source of S ids (0-padded);
# its while-loop has a key/value cache preallocated for the output length
# L = min(S + 50, max_sequence_length), so every tensor is static. The
# tokenizer stays outside: an app tokenizes with `assets/vocab.txt` and feeds
# ids. `int8` stores the weights in 8 bits (dynamic-range quantization:
# activations are quantized on the fly).

# %%
source_length = 24
tflite_paths = {}
for quantize in ("none", "int8"):
    tflite_paths[quantize] = translator.export_tflite(
        WORK / f"translator-{quantize}.tflite", quantize=quantize, sequence_length=source_length
    )
sizes = {q: os.path.getsize(p) for q, p in tflite_paths.items()}
weights_bytes = sum(np.asarray(w).nbytes for w in model.weights)
print(f"Keras weights (float32) {weights_bytes:>9,} B")
print(f"SavedModel directory    {saved_model_bytes:>9,} B")
for quantize, size in sizes.items():
    print(f"TFLite {quantize:<4}             {size:>9,} B")

# %% [markdown]
# The LiteRT interpreter runs the `serving_default` signature: ids in, ids
# out (`[END]` included, 0 after it), detokenized here with the run's
# tokenizer.

# %%
interpreter = Interpreter(model_path=str(tflite_paths["int8"]))
runner = interpreter.get_signature_runner("serving_default")
for name, details in {
    **runner.get_input_details(),
    **runner.get_output_details(),
}.items():
    print(f"{name}: {details['dtype'].__name__} {[int(n) for n in details['shape']]}")
ids = tokenizer.tokenize([sentences[0]]).to_tensor(0, shape=[1, source_length]).numpy()
output = runner(encoder_token_ids=ids)["token_ids"]  # (1, L)
text = tokenizer.detokenize(tf.RaggedTensor.from_tensor(output))[0].numpy().decode()
print(f"{sentences[0]!r} -> {text!r}")

# %% [markdown]
# Agreement with Keras (`export.tflite_verify.verify_tflite`): the Keras
# greedy search on the same padded ids, with the `.tflite`'s output length.
# Float32 must give the very same tokens; int8 weights may flip a close
# decision now and then.

# %%
examples = list(readers.read_parallel(*paths["test"])[0][:20])
agreement = {
    q: verify_tflite(p, model, examples, tokenizer=tokenizer) for q, p in tflite_paths.items()
}
for quantize, result in agreement.items():
    print(
        f"{quantize:>4}: {result['file_bytes']:>9,} B, tokens equal "
        f"{result['token_agreement']:.1%}, whole sentences equal "
        f"{result['sequence_agreement']:.1%}"
    )

# %% [markdown]
# ## What this notebook showed (checked)

# %%
assert saved_greedy == keras_greedy  # the SavedModel translates exactly as Keras does
assert python_greedy == keras_greedy == reloaded_greedy  # the task model, and from its .keras
assert python_beam == [t.decode() for t in beam["translations"].numpy()]  # beam 4, both sides
assert http_greedy == saved_greedy[:2]  # over HTTP from the server, the same translations
assert report["ok"], report  # ... also in a fresh process that cannot import this project
assert [t.decode() for t in cli_output["translations"]] == keras_greedy[:3]  # saved_model_cli
assert {"config.json", "vocab.txt"} <= set(report["assets"])
assert agreement["none"]["token_agreement"] == 1.0  # float32 TFLite: identical tokens
assert agreement["int8"]["token_agreement"] >= 0.9, agreement["int8"]
assert sizes["int8"] < 0.45 * sizes["none"], sizes  # int8 weights: well under half the size
assert output.shape == (1, translator_output_length(model, source_length))
print("All checks passed.")
if not os.environ.get("KT_NOTEBOOK_KEEP"):  # KT_NOTEBOOK_KEEP=1 keeps the runs
    shutil.rmtree(WORK)
