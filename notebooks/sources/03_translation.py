# ruff: noqa: E402  (a notebook: imports follow the set-up cell)
# %% [markdown]
# # 3. Translation: the whole recipe
#
# The encoder-decoder Transformer trained as in Section 5 of the paper and
# evaluated as in Section 6: word-piece tokenization, batches of similar
# length, Adam with a warm-up schedule, label smoothing, then greedy and
# beam-search decoding scored with BLEU, and the cross-attention of a
# translated sentence. One change to the paper's recipe, shown beside it:
# the learning rate decays linearly to zero at the run's last update, so a
# run of a few hundred updates ends annealed.
#
# First from Python, as a Keras user holds it: `Translator`, a
# `Transformer` with its word-piece tokenizer inside, `fit` on pairs of raw
# sentences, `translate` greedily or with beam search, saved as one
# `.keras` file and exported as a SavedModel that answers sentences. Then
# the batch version of the same thing, `train(config, run_dir)`, which adds
# the recipe around `fit` (length buckets, the planned schedule, checkpoint
# averaging, time budgets), section by section of the paper.
#
# `KT_NOTEBOOK_SIZE=small` (default, CI) uses the generated English->German
# number-words task of `training.data.toy` ("he bought forty two books
# yesterday" -> "er hat gestern zwei und vierzig bücher gekauft": German puts
# units before tens and moves the verb) with a tiny model and a few epochs.
# `full` trains the `multi30k` preset on Multi30k German->English from
# `../shared/data/multi30k` when present (a 60-minute budget on a CPU), else the README's
# toy preset.

# %%
import json
import os
import pathlib
import shutil
import time
from notebook_setup import DATA_DIR, SIZE, scratch_folder

WORK = scratch_folder("03")  # runs and files, never inside the repository

# %%
import matplotlib.pyplot as plt
import numpy as np

from keras_transformer.models import END_ID, START_ID, get_preset
from training.config import load_config
from training.data import readers, toy
from training.monitor.attention_plot import attention_figure
from training.monitor.evaluation import Translator, bleu_scores
from training.optimization.schedule import TransformerSchedule, WarmupLinearSchedule
from training.pipeline import datasets
from training.runs.run_dir import load_run
from training.text.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary
from training.train import train

plt.rcParams.update({"figure.dpi": 80})

# %% [markdown]
# ## From Python: the task model
#
# `Translator.from_texts` learns one word-piece vocabulary from the source
# and target sentences and builds a `Transformer` on it (the `tiny` preset,
# narrowed here); `compile()` gives the paper's Adam ($\beta_2 = 0.98$),
# its warm-up and inverse-square-root schedule and label smoothing 0.1, over
# real tokens only (the accuracy Keras prints counts no padding); `fit`
# takes the pairs as they are. Here on number words generated in memory
# (the same English->German task as the small run below), at both sizes.

# %%
from training import task_models

pairs = toy.generate_pairs((1200 if SIZE == "small" else 6000) + 100, seed=1)
py_sources, py_targets = (list(side) for side in zip(*pairs[:-100], strict=True))
held_sources, held_targets = (list(side) for side in zip(*pairs[-100:], strict=True))
translator = task_models.Translator.from_texts(
    py_sources, py_targets, vocabulary_size=400, hidden_dim=64, num_layers=2, num_heads=4,
    intermediate_dim=128, max_sequence_length=32,
)  # fmt: skip
translator.compile(warmup_steps=100)
translator.fit((py_sources, py_targets), epochs=6 if SIZE == "small" else 8, verbose=2)
greedy_out = translator.translate(held_sources)
beam_out = translator.translate(held_sources, beam_size=4, length_penalty=0.6)
python_bleu = bleu_scores(greedy_out, held_targets, language="de")["bleu"]
print(f"{held_sources[0]}\n  greedy -> {greedy_out[0]}\n  beam 4 -> {beam_out[0]}")
print(f"greedy BLEU on {len(held_sources)} held-out pairs: {python_bleu:.1f}")

# %% [markdown]
# The `.keras` file holds the vocabulary beside the weights, so
# `keras.models.load_model` gives back a translator that answers sentences;
# `export` writes the SavedModel that `python -m export saved-model` writes
# for a run (`serving_default` greedy, `translate_beam`, and their XLA
# twins), which TensorFlow and tensorflow-text alone load and serve.

# %%
import keras
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

tf.get_logger().setLevel("ERROR")  # no "Assets written to ..." INFO lines
translator.save(WORK / "translator.keras")
reloaded_out = keras.models.load_model(WORK / "translator.keras").translate(held_sources[:8])
exported = tf.saved_model.load(translator.export(WORK / "models" / "translator" / "1"))
served = exported.signatures["serving_default"](sentences=tf.constant(held_sources[:8]))
served_out = [t.decode() for t in served["translations"].numpy()]
print(f"signatures: {sorted(exported.signatures)}")
print(f"reloaded .keras: {reloaded_out[0]!r}; SavedModel: {served_out[0]!r}")

# %% [markdown]
# ## The batch version: data on disk

# %%
MULTI30K = DATA_DIR / "multi30k"
USE_MULTI30K = SIZE == "full" and (MULTI30K / "train.de.gz").is_file()
if USE_MULTI30K:
    # The whole run (vocabulary, training, validation, test) fits in an hour.
    config = load_config("multi30k").replace(data_dir=str(DATA_DIR), time_budget_minutes=60)
    train_pair = (MULTI30K / "train.de.gz", MULTI30K / "train.en.gz")
    test_pair = (
        MULTI30K / "test_2016_flickr.de.gz",
        MULTI30K / "test_2016_flickr.en.gz",
    )
    print(f"Multi30k de->en from {MULTI30K}")
else:
    n_train = 2000 if SIZE == "small" else 20000
    paths = toy.write_toy_corpus(WORK / "data", n_train=n_train, n_valid=50, n_test=100)
    config = load_config("toy").replace(
        dataset="files",
        train_files=paths["train"],
        valid_files=paths["valid"],
        test_files=paths["test"],
    )
    if SIZE == "small":
        # A short run: 8 small epochs, about 200 updates. The recipe sizes the
        # schedule to them (warm-up, then linear decay to 0 at the last one).
        config = config.replace(
            epochs=8,
            tokens_per_batch=1024,
            model_overrides={**config.model_overrides, "intermediate_dim": 128},
        )
    train_pair, test_pair = paths["train"], paths["test"]
    print(f"generated number-words pairs ({n_train} for training) in {WORK / 'data'}")
# BLEU during training and beam search at the end are run below instead.
config = config.replace(eval_sentences=0, beam_size=1, checkpoint_every_steps=100_000)
sources, targets = readers.read_parallel(*train_pair)
for s, t in list(zip(sources, targets, strict=True))[:4]:
    print(f"  {s}\n    -> {t}")

# %% [markdown]
# ## Word pieces (Section 5.1)
#
# The paper encodes sentences with byte-pair encoding into a shared
# source-target vocabulary of about 37,000 tokens. Here it is a word-piece
# vocabulary learned from the training split by Hugging Face `tokenizers`
# (a few seconds); the tokenizer that applies it is a `tf.Module` of
# tensorflow-text ops whose `tokenize`/`detokenize` run inside `tf.data`,
# inside the exported model, and eagerly alike. Pieces that continue a word
# start with `##`.

# %%
vocabulary = learn_wordpiece_vocabulary(
    sources + targets,
    config.vocabulary_size,
    lower_case=config.lower_case,
)
print(f"{len(vocabulary)} tokens; reserved {vocabulary[:4]}; some pieces {vocabulary[40:52]}")
tokenizer = WordPieceTokenizer(vocabulary, lower_case=config.lower_case)
for text in (sources[0], targets[0]):
    ids = tokenizer.tokenize([text])[0].numpy()
    print(f"{text!r}\n  -> {[vocabulary[i] for i in ids]}\n  -> {ids.tolist()}")
round_trip = tokenizer.detokenize(tokenizer.tokenize([targets[0]]))[0].numpy().decode()
print(f"detokenized: {round_trip!r}")

# %% [markdown]
# ## Batches of similar length (Section 5.1)
#
# "Sentence pairs were batched together by approximate sequence length."
# `make_translation_dataset` buckets pairs by length and fills each batch up
# to about `tokens_per_batch` tokens, so short sentences come in many-row
# batches and little of each batch is padding. Padding every sentence to
# the longest instead wastes most of the computation:


# %%
def batches(**kwargs):
    return datasets.make_translation_dataset(
        sources,
        targets,
        tokenizer,
        tokenizer,
        config.max_sequence_length,
        config.tokens_per_batch,
        shuffle=False,
        **kwargs,
    )


bucketed = batches()
print(
    "first bucketed batch shapes (rows, source length):",
    [tuple(f["encoder_token_ids"].shape) for f, _ in bucketed.take(4)],
)
padding = {
    "bucketed": datasets.padding_fraction(bucketed),
    "fixed length": datasets.padding_fraction(batches(pad_to_length=config.max_sequence_length)),
}
print({k: f"{v:.0%} padding" for k, v in padding.items()})

# %% [markdown]
# ## Training: `train(config, run_dir)`
#
# One call runs Section 5: batches of roughly equal length holding about
# `tokens_per_batch` tokens (bucketing wastes little on padding), Adam
# ($\beta_1 = 0.9, \beta_2 = 0.98, \epsilon = 10^{-9}$; AdamW with a small
# weight decay) with the schedule below, label smoothing
# $\epsilon_{ls} = 0.1$, and dropout. It learns the same vocabulary as
# above, writes checkpoints and TensorBoard logs into the run directory,
# keeps the last weights or an average of epoch checkpoints (whichever
# validates best), and evaluates the test split with greedy decoding.
#
# The schedule fields left at `None` are decided by the recipe
# (`training/recipe/adaptive.py`) from the model, the batches and the planned number
# of updates, and written to the run's `plan.json`.

# %%
shown = ("model_preset", "model_overrides", "vocabulary_size", "tokens_per_batch", "epochs",
         "schedule", "learning_rate", "warmup_steps", "weight_decay",
         "label_smoothing", "time_budget_minutes")  # fmt: skip
print({k: v for k, v in config.to_dict().items() if k in shown})
hidden_dim = get_preset(config.model_preset, **config.model_overrides).hidden_dim

# %% [markdown]
# On Multi30k the notebook gives the run an hour (`time_budget_minutes=60`:
# the schedule is planned to end annealed inside it, test evaluation
# included). A run trained earlier with the command line (`python3 -m
# training train --config multi30k --run-dir runs/de-en --set
# time_budget_minutes=60`) can be opened instead: set `KT_TRANSLATION_RUN`
# to its directory and the cell below reads its `metrics.json` rather than
# training again (the committed full-size outputs were made that way).

# %%
FINISHED_RUN = os.environ.get("KT_TRANSLATION_RUN")
if USE_MULTI30K and FINISHED_RUN:
    RUN = pathlib.Path(FINISHED_RUN)
    metrics = json.loads((RUN / "metrics.json").read_text())
    print(f"opened the finished run {RUN} (trained in {metrics['train_seconds']:.0f} s, "
          f"{metrics['steps']} steps)")  # fmt: skip
else:
    RUN = WORK / "run"
    start = time.time()
    metrics = train(config, RUN, verbose=2)
    print(f"trained in {time.time() - start:.0f} s")
print(f"test BLEU (greedy) {metrics['test_bleu_greedy']:.1f}; kept: {metrics['selection']['selected']}")

# %% [markdown]
# ## The learning rate (Section 5.3)
#
# The paper's schedule, $lrate = d_{model}^{-0.5} \cdot \min(step^{-0.5},
# step \cdot warmup\_steps^{-1.5})$, warms up linearly for 4,000 steps, then
# decays with the inverse square root of the step: the base model (d_model
# 512) peaks at 7e-4 and is still at a fifth of that after 100,000 updates.
# It was made for 100,000 updates of 25,000-token batches. A run of a few
# hundred updates would spend all of them warming up and never anneal.
#
# `train` uses the recipe's `auto` schedule instead (`schedule="auto"`, the
# default): a linear warm-up over a tenth of the planned updates (at least
# min(100, a quarter of them), at most 4,000), then a linear decay that
# reaches 0 at the last planned update. Its peak is 1e-3 at d_model 256 and
# 1,024-token batches, scaled by $1/\sqrt{d_{model}}$ and, for smaller
# batches, by $\sqrt{tokens / 1024}$. The run's `plan.json` records the
# values it used; the dots are the rate the run logged at each epoch's end.

# %%
plan = json.loads((RUN / "plan.json").read_text())
print({k: plan[k] for k in ("schedule", "peak_learning_rate", "warmup_steps", "total_steps",
                            "batch_tokens", "weight_decay")})  # fmt: skip
paper = TransformerSchedule(512, warmup_steps=4000)
auto = WarmupLinearSchedule(plan["peak_learning_rate"], plan["warmup_steps"], plan["total_steps"])
# The learning rate logged at each epoch's end is the next update's: schedule(updates done).
epoch_ends = np.minimum(
    np.arange(1, len(metrics["history"]["learning_rate"]) + 1) * metrics["steps_per_epoch"],
    metrics["steps"],
)
fig, axes = plt.subplots(1, 2, figsize=(11, 3.2))
steps = np.arange(100_000)
axes[0].plot(steps + 1, np.asarray(paper(steps)))
axes[0].set(title="the paper: base model, rsqrt decay", xlabel="update", ylabel="learning rate")
steps = np.arange(plan["total_steps"])
axes[1].plot(steps + 1, np.asarray(auto(steps)), label=f"this run: auto (d_model {hidden_dim})")
revised = f", plan revised {plan['revisions']}x" if plan.get("revisions") else ""
axes[1].plot(epoch_ends, metrics["history"]["learning_rate"], "o",
             label=f"logged at epoch ends{revised}")  # fmt: skip
axes[1].plot(steps + 1, np.asarray(TransformerSchedule(hidden_dim, 4000)(steps)), "--",
             label=f"the paper's schedule at d_model {hidden_dim}")  # fmt: skip
axes[1].set(title="this run: warm-up, then linear decay to 0", xlabel="update")
axes[1].legend(fontsize=8)
fig.tight_layout()

# %% [markdown]
# The run directory now holds `config.json`, `plan.json`, `vocab/`,
# `checkpoints/`, `logs/`, `model.keras` and `metrics.json`. Watch training
# (loss, accuracy, learning rate, cross-attention heatmaps labelled with the
# word pieces, hyper-parameters) with TensorBoard
# (the notebook deletes its scratch directory at the end unless
# `KT_NOTEBOOK_KEEP=1` is set):

# %%
print(f"tensorboard --logdir {RUN / 'logs'}")
print(sorted(p.name for p in (RUN / "logs").iterdir()))
history = metrics["history"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3))
for key in ("loss", "val_loss"):
    axes[0].plot(history[key], "o-", label=key)
for key in ("masked_accuracy", "val_masked_accuracy"):
    axes[1].plot(history[key], "o-", label=key)
for ax in axes:
    ax.set_xlabel("epoch")
    ax.legend()
fig.tight_layout()

# %% [markdown]
# ## Decoding: greedy and beam search (Section 6.1)
#
# Both decoders encode the source once and run the decoder one position at a
# time against a key/value cache. Beam search keeps 4 hypotheses and ranks
# finished ones by $\log P(Y) / lp(Y)$ with the length penalty
# $lp(Y) = ((5 + |Y|)/6)^{\alpha}$, $\alpha = 0.6$.
#
# `bleu_scores` gives two corpus BLEU figures: the headline, cased sacreBLEU
# of the detokenized translations against the raw references (what
# `metrics.json` calls `test_bleu_greedy`), and beside it the lowercased,
# Moses-tokenized BLEU that Multi30k papers quote. A model trained on
# lowercased text loses every capital in the first.

# %%
run = load_run(RUN)
model, tokenizer = run.model, run.tokenizer
test_sources, test_references = readers.read_parallel(*test_pair)
translations, bleu, bleu_lowercase_tokenized, seconds = {}, {}, {}, {}
for name, beam_size in (("greedy", 1), ("beam 4", 4)):
    translator = Translator(
        model,
        tokenizer,
        config.max_sequence_length,
        beam_size=beam_size,
        length_penalty=config.length_penalty,
    )
    start = time.time()
    translations[name] = translator(test_sources)
    seconds[name] = time.time() - start
    scores = bleu_scores(translations[name], test_references, language=config.target_language)
    bleu[name] = scores["bleu"]
    bleu_lowercase_tokenized[name] = scores["bleu_lowercase_tokenized"]
    print(
        f"{name:>6}: BLEU {bleu[name]:5.1f} (lowercased tokenized "
        f"{bleu_lowercase_tokenized[name]:5.1f}) on {len(test_sources)} sentences "
        f"({seconds[name]:.1f} s, tracing included)"
    )

# %%
for i in range(5):
    print(f"source    {test_sources[i]}\nreference {test_references[i]}")
    for name in translations:
        print(f"{name:>9} {translations[name][i]}")
    print()
differ = [i for i, (g, b) in enumerate(zip(*translations.values(), strict=True)) if g != b]
print(f"beam search changed {len(differ)} of {len(test_sources)} translations")

# %% [markdown]
# ## Cross-attention of a translated sentence
#
# `model.attention_weights(source_ids, decoder_ids)` returns every layer's
# weights. `attention_figure` draws the last layer's mean over heads as one
# large heatmap: each row a target position (labelled by the piece predicted
# there), each column a source piece; rows sum to 1 over the source. The
# heads are the small panels below it, on the same axes. TensorBoard's
# attention images are the same figure.

# %%
sentence = test_sources[0] if USE_MULTI30K else "he bought forty two books yesterday"
greedy = Translator(model, tokenizer, config.max_sequence_length)
source_ids = greedy.encode([sentence]).numpy()  # (1, S)
output_ids = greedy.decode_ids(source_ids).numpy()[0]  # (L,) ends with [END], then 0s
if END_ID in output_ids:
    output_ids = output_ids[: list(output_ids).index(END_ID) + 1]
decoder_ids = np.concatenate([[START_ID], output_ids[:-1]])[None]  # (1, T): [START] y1..
weights = model.attention_weights(source_ids, decoder_ids)
cross = np.asarray(weights["cross"][-1])[0]  # last layer, (h, T, S)
source_pieces = [tokenizer.vocabulary[i] for i in source_ids[0]]
output_pieces = [tokenizer.vocabulary[i] for i in output_ids]
print(f"{sentence}\n -> {greedy([sentence])[0]}")

attention_figure(cross, source_pieces, output_pieces, heads="all",
                 title="cross-attention of the last decoder layer, mean of heads")  # fmt: skip

# %% [markdown]
# In the number-words task the German units come before the tens: the row of
# "zwei" attends to "two" and the row of "vierzig" to "forty", a crossing
# the model learned from data.
#
# ## What this notebook showed (checked)

# %%
# The task model learned the number words, and its .keras file and SavedModel
# answer as it does.
assert python_bleu >= 30.0, python_bleu
assert reloaded_out == greedy_out[:8] and served_out == greedy_out[:8], (reloaded_out, served_out)
# Floors well above what an untrained or broken model scores (under 2 BLEU):
# on Multi30k the preset reaches about 28 greedy in a ten-minute budget (README).
floor = 15.0 if USE_MULTI30K else (30.0 if SIZE == "small" else 50.0)
assert bleu["greedy"] >= floor and bleu["beam 4"] >= floor, (bleu, floor)
# The notebook's greedy decoding and BLEU are the ones train() evaluated the test split with.
assert abs(bleu["greedy"] - metrics["test_bleu_greedy"]) < 1e-6, (bleu, metrics)
assert abs(
    bleu_lowercase_tokenized["greedy"] - metrics["test_bleu_greedy_lowercase_tokenized"]
) < 1e-6, (bleu_lowercase_tokenized, metrics)
# The plotted schedule is the one the optimizer followed, and it ended annealed.
# A budgeted run re-plans its last update after each epoch (plan.json
# "revisions"), so only the epochs after the last revision lie on this line.
logged = np.asarray(metrics["history"]["learning_rate"])
if plan.get("revisions"):
    assert np.isclose(auto(epoch_ends[-1]), logged[-1], rtol=1e-5, atol=1e-9), logged
else:
    assert np.allclose(auto(epoch_ends), logged, rtol=1e-5, atol=1e-9), logged
assert plan["schedule"] == "auto" and float(auto(plan["total_steps"] - 1)) == 0.0
assert list(run.tokenizer.vocabulary) == list(vocabulary)  # train() learned the same pieces
assert history["loss"][-1] < 0.7 * history["loss"][0], history["loss"]
assert padding["bucketed"] < padding["fixed length"] / 2, padding  # bucketing pays
assert np.allclose(cross.sum(-1), 1, atol=1e-5)  # attention over the source is a distribution
print("All checks passed.")
if not os.environ.get("KT_NOTEBOOK_KEEP"):  # KT_NOTEBOOK_KEEP=1 keeps the runs
    shutil.rmtree(WORK)
