# ruff: noqa: E402  (a notebook: imports follow the set-up cell)
# %% [markdown]
# # 2. Text classification: n-grams, attention, and what validates
#
# `TransformerClassifier` on sentences of words: token embeddings
# plus positions, optionally n-gram convolutions (`NGramConvolution`, the
# widths 3-5 of Kim's 2014 sentence CNN), N encoder blocks of Section 3.1,
# the outputs pooled over the real (non-padding) positions, and a small
# classification head. The `sst2` preset's model is `TextCNNClassifier`
# (its `"model": "text_cnn"`), Kim's CNN: the n-gram convolutions,
# max-over-time pooling and **no** encoder block: on a few thousand
# sentences one or two blocks validated 2.5-4 points lower, and this
# notebook measures that again with one block added. The task is SST-2,
# the binary Stanford Sentiment Treebank, read from
# `../shared/data/sentence-classification/stsa.binary.*`; when those files are
# absent the notebook generates a small sentiment task instead and says so.
#
# First from Python, as a Keras user holds it: `TextClassifier`, a
# backbone of the library's layers with its word-piece tokenizer and labels
# inside, `fit` on the raw sentences, `predict` on raw sentences, saved as
# one `.keras` file and exported as a SavedModel that answers sentences.
# Then the batch version of the same thing, the package's pipeline,
# `training.train(config, run_dir)`, with the `sst2` preset: the vocabulary is learned from the
# training split (whole words seen at least twice, `min_word_count=2`;
# every other word is one `[UNK]`, whose embedding so learns from the
# training text's rare words; every word also carries the hashed ids of its
# character 3-5-grams, whose mean vector joins its embedding, so an unknown
# word keeps its spelling), batches are padded with id 0, and the paper's Adam
# settings (Section 5.3) train it, with a small AdamW weight decay and the
# recipe's learning-rate schedule: a warm-up, then a linear decay to zero
# at the last planned update (`schedule="auto"`, `training/recipe/adaptive.py`).
#
# `KT_NOTEBOOK_SIZE=small` (default, CI) trains a one-block model of width
# 32 for two epochs; `full` trains the preset (d_model 128, up to 20
# epochs, chosen by validation) and the same with one encoder block.

# %%
import os
import shutil
from notebook_setup import DATA_DIR, REPO, SIZE, scratch_folder

WORK = scratch_folder("02")  # runs and files, never inside the repository

# %%
import keras
import matplotlib.pyplot as plt
import numpy as np
from sklearn.metrics import ConfusionMatrixDisplay, confusion_matrix

from training.config import load_config
from training.data import readers
from training.pipeline import datasets
from training.runs.run_dir import load_run
from training.tasks.common import with_cardinality
from training.train import train

plt.rcParams.update({"figure.dpi": 80})

# %% [markdown]
# ## Data
#
# SST-2 comes as `label<TAB>text` lines (Kim, 2014): 6,920 training, 872
# development and 1,821 test sentences, label 1 positive, 0 negative. The
# fallback task writes files of the same format: short reviews whose label
# flips with a "not", so the model has to relate two words.

# %%
SST2 = DATA_DIR / "sentence-classification"
USE_SST2 = (SST2 / "stsa.binary.train").is_file()


def write_generated_reviews(path, n, seed):
    """`label<TAB>text` reviews; 'not' flips the label of the adjective."""
    rng = np.random.default_rng(seed)
    good = [
        "good",
        "great",
        "moving",
        "funny",
        "clever",
        "beautiful",
        "gripping",
        "charming",
    ]
    bad = ["bad", "dull", "boring", "awful", "clumsy", "tedious", "flat", "forgettable"]
    subjects = [
        "the film",
        "this movie",
        "the plot",
        "the acting",
        "the script",
        "the cast",
    ]
    adverbs = ["", "very ", "truly ", "rather "]
    endings = ["", " from start to finish", " overall", " , to be honest"]
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            positive, negated = rng.integers(2), rng.random() < 0.35
            adjective = rng.choice(good if positive != negated else bad)
            text = (
                f"{rng.choice(subjects)} is {'not ' if negated else ''}"
                f"{rng.choice(adverbs)}{adjective}{rng.choice(endings)} ."
            )
            f.write(f"{positive}\t{text}\n")
    return str(path)


if USE_SST2:
    files = {split: str(SST2 / f"stsa.binary.{split}") for split in ("train", "dev", "test")}
    print(f"SST-2 from {os.path.relpath(SST2, REPO)}")  # ../shared/data/... beside the clone
else:
    sizes = {"train": 2000, "dev": 200, "test": 500}
    files = {
        s: write_generated_reviews(WORK / f"{s}.tsv", n, seed=i)
        for i, (s, n) in enumerate(sizes.items())
    }
    print(f"SST-2 not found under {SST2}: using GENERATED reviews instead.")
texts, labels, label_names = readers.read_classification(files["train"])
print(f"{len(texts)} training sentences, labels {label_names}, {np.mean(labels):.0%} positive")
for text, label in list(zip(texts, labels, strict=True))[:4]:
    print(f"  {label}  {text}")

# %% [markdown]
# ## From Python: the task model
#
# `TextClassifier.from_texts` learns a word-piece vocabulary and the classes
# from the training sentences and builds a `TransformerClassifier` (token
# embeddings, positions, encoder blocks, pooling, a head); `compile()` gives
# the pipeline's defaults (Adam, label-smoothed cross-entropy, accuracy);
# `fit` takes the sentences and their labels as they are, and `predict`
# answers raw sentences with labels and probabilities, as KerasHub's task
# models do.

# %%
from training.task_models import TextClassifier

train_names = [label_names[i] for i in labels]  # the labels as the file writes them
dev_texts, dev_ids, _ = readers.read_classification(files["dev"], label_names=label_names)
classifier = TextClassifier.from_texts(
    texts, train_names, vocabulary_size=8000, sequence_length=96,
    hidden_dim=32 if SIZE == "small" else 64, num_layers=1, num_heads=4,
    intermediate_dim=64 if SIZE == "small" else 128,
)  # fmt: skip
classifier.compile()
history = classifier.fit(texts, train_names, epochs=2 if SIZE == "small" else 4,
                         validation_data=(dev_texts, [label_names[i] for i in dev_ids]),
                         verbose=2)  # fmt: skip
reviews = ["a gripping , beautiful film .", "the plot is not funny at all , and dull ."]
answer = classifier.predict(reviews, verbose=0)
for review, label, p in zip(reviews, answer["labels"], answer["probabilities"], strict=True):
    print(f"  {label} (p={p.max():.2f})  {review}")

# %% [markdown]
# The `.keras` file holds the vocabulary and the labels beside the weights,
# so `keras.models.load_model` gives back a model that answers sentences;
# `export` writes the SavedModel `python -m export saved-model` writes for a
# run (`serving_default`: sentences in, `labels` and `probabilities` out),
# which TensorFlow and tensorflow-text alone load and serve.

# %%
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

tf.get_logger().setLevel("ERROR")  # no "Assets written to ..." INFO lines
classifier.save(WORK / "classifier.keras")
reloaded = keras.models.load_model(WORK / "classifier.keras")
reloaded_answer = reloaded.predict(reviews, verbose=0)
classifier_export = classifier.export(WORK / "models" / "classifier" / "1")
serving_default = tf.saved_model.load(classifier_export).signatures["serving_default"]
served = serving_default(sentences=tf.constant(reviews))
served_labels = [label.decode() for label in served["labels"].numpy()]
print(f"reloaded .keras: {list(reloaded_answer['labels'])}; SavedModel: {served_labels}")

# %% [markdown]
# ## The batch version: configuration and training
#
# The `sst2` preset, pointed at these files (`dataset="files"`). In small mode
# the model shrinks to width 32 with one encoder block and trains for two
# epochs; in full mode the preset trains as it is. The schedule fields left at `None`
# (peak learning rate, warm-up, weight decay) are set by the recipe from the
# model width, the batch and the planned updates; the run records them in
# `plan.json` (and `metrics["plan"]`). While training, each sentence's pooled
# features are mixed with another's, and its loss with that sentence's label,
# by the same random share (`mixup_alpha`, Guo et al. 2019); predictions are
# made on unmixed sentences.

# %%
config = load_config("sst2").replace(
    dataset="files",
    train_files=(files["train"],),
    valid_files=(files["dev"],),
    test_files=(files["test"],),
)
if SIZE == "small":
    small_model = {"hidden_dim": 32, "num_heads": 4, "intermediate_dim": 64, "num_layers": 1}
    config = config.replace(epochs=2, vocabulary_size=4000, model="transformer",
                            model_overrides=small_model)
# On at most 10,000 training sentences the preset trains five classifiers and
# answers with their mean (`ensemble_size` null), cross-fitted on the
# training and development sentences together (`cross_fit`); this notebook
# trains one, validated on the development file, to look inside it below.
config = config.replace(checkpoint_every_steps=100_000,  # a short run: epoch checkpoints only
                        ensemble_size=1)
shown = ("model", "model_preset", "model_overrides", "vocabulary_size", "min_word_count",
         "max_sequence_length", "batch_size", "epochs", "schedule", "learning_rate", "warmup_steps",
         "weight_decay", "ngram_widths", "pooling", "mixup_alpha", "ensemble_size")  # fmt: skip
print({k: v for k, v in config.to_dict().items() if k in shown})

# %%
RUN = WORK / "sst2"
metrics = train(config, RUN, verbose=2)
print({k: round(v, 4) for k, v in metrics.items() if k.startswith(("valid_", "test_"))})
print({k: metrics["plan"][k] for k in ("peak_learning_rate", "warmup_steps", "total_steps",
                                       "weight_decay")})  # fmt: skip

# %% [markdown]
# The run directory holds everything needed later: `config.json`, the
# vocabulary, the checkpoints, TensorBoard logs (`tensorboard --logdir
# RUN/logs`), `model.keras` and `metrics.json`. `load_run` reads it back.

# %%
run = load_run(RUN)
model, tokenizer = run.model, run.tokenizer
print(f"vocabulary: {tokenizer.vocabulary_size} words; parameters: {model.count_params():,}")
# Each token is its vocabulary id followed by the hashed ids of its
# character 3-5-grams (`char_ngram_buckets`): an unknown word keeps its spelling.
packed = tokenizer.tokenize(["an unforgettable film"])[0].numpy()  # (T, 1 + G)
print("tokens of a sentence:", [tokenizer.vocabulary[i] for i in packed[:, 0]],
      f"each with up to {packed.shape[1] - 1} n-gram ids")

# %% [markdown]
# ## Accuracy and confusion matrix on the test split

# %%
test_texts, test_labels, _ = readers.read_classification(
    files["test"], label_names=run.label_names
)
test_labels = np.asarray(test_labels)
test_data = datasets.make_classification_dataset(
    test_texts,
    test_labels,
    tokenizer=tokenizer,
    max_sequence_length=config.max_sequence_length,
    batch_size=128,
    shuffle=False,
)
test_ids = test_data.map(lambda features, label: features["token_ids"])  # the model's input
test_ids = with_cardinality(test_ids)  # a pass of known length: Keras ends it without a warning
probabilities = np.asarray(model.probabilities(model.predict(test_ids, verbose=0)))
predicted = probabilities.argmax(-1)
accuracy = float(np.mean(predicted == test_labels))
majority = max(np.mean(test_labels), 1 - np.mean(test_labels))  # always guess the larger class
print(f"test accuracy {accuracy:.3f} (majority-class baseline {majority:.3f})")

# %%
names = ["negative", "positive"]
matrix = confusion_matrix(test_labels, predicted)
ConfusionMatrixDisplay(matrix, display_labels=names).plot(colorbar=False)
plt.title(f"test accuracy {accuracy:.1%}")
plt.show()
wrong = np.flatnonzero(predicted != test_labels)[:4]
for i in wrong:
    print(
        f"  true {names[test_labels[i]]:>8}, p(positive)={probabilities[i, 1]:.2f}: "
        f"{test_texts[i][:90]}"
    )

# %% [markdown]
# ## Does attention help here?
#
# The same preset with one encoder block after the n-gram convolutions
# (`model="transformer"`, `model.num_layers=1`). In full mode that is a second run, scored on the
# same test split; in small mode the model trained above already has its
# block, and is used below as it is.

# %%
if config.model == "text_cnn":
    attention_config = config.replace(
        model="transformer", model_overrides={**config.model_overrides, "num_layers": 1}
    )
    attention_metrics = train(attention_config, WORK / "sst2_attention", verbose=0)
    attention_run = load_run(WORK / "sst2_attention")
else:
    attention_metrics, attention_run = metrics, run
print(
    f"test accuracy without encoder blocks {metrics['test_accuracy']:.3f}"
    if config.model == "text_cnn"
    else "(small mode: the model above has one block)",
    f"| with one block {attention_metrics['test_accuracy']:.3f}",
)

# %% [markdown]
# ## Where the encoder attends
#
# The classifier's encoder blocks return their attention weights on request
# (`return_attention_scores=True`). We run the model's own layers over one
# sentence, block by block, exactly as the model does (its `stem`:
# the embedding scaled by $\sqrt{d_{model}}$ plus sinusoids plus the mean
# vector of the word's character n-grams; then the n-gram convolutions, then
# each block with the padding mask), and check that the last block's output
# matches the model's.

# %%
attention_model, attention_tokenizer = attention_run.model, attention_run.tokenizer
sentence = (
    "the acting is not bad , but the script is dull and the ending is forgettable ."
    if USE_SST2
    else "the plot is not very boring from start to finish ."
)
ids = attention_tokenizer.tokenize([sentence]).to_tensor(0).numpy()  # (1, T, 1 + G)
pieces = [attention_tokenizer.vocabulary[i] for i in ids[0, :, 0]]
x, mask = attention_model.stem(ids)  # (1, T, d_model), (1, T)
if attention_model.ngram_convolution is not None:
    x = attention_model.ngram_convolution(x, mask=mask)
attention = []
for block in attention_model.encoder_blocks:
    x, w = block(x, mask=mask, return_attention_scores=True)
    attention.append(np.asarray(w)[0])  # (h, T, T)
last_block = attention_model.encoder_blocks[-1].name
reference = keras.Model(attention_model.input, attention_model.get_layer(last_block).output)(ids)
replay_error = float(np.abs(np.asarray(x) - np.asarray(reference)).max())
p_positive = float(np.asarray(attention_model.probabilities(attention_model(ids)))[0, 1])
print(
    f"{sentence!r}: p(positive) = {p_positive:.2f}; "
    f"replayed blocks match the model to {replay_error:.1e}"
)

# %%
heads = attention[-1]
fig, axes = plt.subplots(1, len(heads) + 1, figsize=(4 * (len(heads) + 1), 4.2))
for ax, (title, w) in zip(
    axes,
    [(f"head {i}", h) for i, h in enumerate(heads)] + [("mean of heads", heads.mean(0))],
    strict=True,
):
    ax.imshow(w, vmin=0)
    ax.set_title(title)
    ax.set_xticks(range(len(pieces)), pieces, rotation=90, fontsize=8)
    ax.set_yticks(range(len(pieces)), pieces if ax is axes[0] else [], fontsize=8)
fig.suptitle("last encoder block, queries (rows) attending to keys (columns)")
fig.tight_layout()

# %%
received = heads.mean(0).mean(0)  # attention each token receives, averaged
plt.figure(figsize=(8, 2.5))
plt.bar(range(len(pieces)), received)
plt.xticks(range(len(pieces)), pieces, rotation=60)
plt.ylabel("mean attention received")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## What this notebook showed (checked)
#
# The model beats the majority-class baseline by a clear margin (10 points
# on SST-2, which small Transformers trained from scratch reach in a few
# epochs, about 20 on the easier generated task), the model's `predict`
# agrees with the pipeline's own test evaluation, replaying the blocks gives
# the model's output, and attention rows are distributions. The task model
# answers raw sentences the same in memory, from its `.keras` file and from
# its SavedModel.

# %%
margin = 0.10 if USE_SST2 else 0.20
assert accuracy >= majority + margin, (accuracy, majority)
assert abs(accuracy - metrics["test_accuracy"]) < 1e-3, (
    accuracy,
    metrics["test_accuracy"],
)
assert matrix.sum() == len(test_labels) and np.trace(matrix) == np.sum(predicted == test_labels)
assert replay_error < 1e-4, replay_error
# The task model answers the same from its .keras file and from its SavedModel.
assert list(reloaded_answer["labels"]) == list(answer["labels"]) == served_labels
assert np.allclose(reloaded_answer["probabilities"], answer["probabilities"], atol=1e-6)
assert np.allclose(served["probabilities"].numpy(), answer["probabilities"], atol=1e-5)
assert all(np.allclose(w.sum(-1), 1, atol=1e-5) for w in attention)
print("All checks passed.")
if not os.environ.get("KT_NOTEBOOK_KEEP"):  # KT_NOTEBOOK_KEEP=1 keeps the runs
    shutil.rmtree(WORK)
