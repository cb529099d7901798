"""Run under KERAS_BACKEND=jax by tests/test_jax_backend.py (a fresh process).

The modeling library is written in `keras.ops` only; this checks, on the
JAX backend, the properties that would break if it were not:

* the fused attention path (`keras.ops.dot_product_attention`, taken on JAX
  when no weights or attention dropout are needed) equals the hand-written
  einsum/softmax path, in values and gradients, with padding, a fully padded
  row, a causal mask and a key/value cache;
* a tiny Transformer trains (`train_on_batch`, XLA): finite losses that fall;
* greedy search under `jax.jit` (KV cache) gives the tokens of re-running the
  full model on the growing prefix, and beam 1 equals greedy;
* beam 4 under `jax.jit`, whose beams share one row of the cross-attention
  cache per sentence, equals beam 4 over a cache tiled to every beam;
* our keras.ops ThreeFry-2x32 equals JAX's own (`jax.extend.random`) word
  for word, and a ThreeFry `Dropout` under `jax.jit` keeps 1 - rate;
* the text classifier with n-gram convolutions and max pooling ignores
  padding and trains (falling loss);
* a cross-fitted `ClassifierEnsemble` (per-member sample weights) trains,
  and with a member excluded its compiled answer is the other member's;
* word dropout by frequency replaces each word at alpha / (alpha + count),
  and a classifier with it trains.

Prints one JSON line of figures; any failed check raises (non-zero exit).
"""

import json
import os

assert os.environ.get("KERAS_BACKEND") == "jax", "run with KERAS_BACKEND=jax"

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

import keras_transformer.layers.multi_head_attention as mha  # noqa: E402
from keras_transformer.decoding import beam_search, greedy_search  # noqa: E402
from keras_transformer.layers import MultiHeadAttention, PatchStem, TokenStem  # noqa: E402
from keras_transformer.models import (  # noqa: E402
    START_ID,
    ClassifierEnsemble,
    TextCNNClassifier,
    Transformer,
    TransformerClassifier,
)

assert keras.backend.backend() == "jax"
figures = {}
rng = np.random.default_rng(0)
keras.utils.set_random_seed(0)


def both_paths(fn):
    """fn() with the fused path allowed, then forced off."""
    fused = fn()
    original = mha.fused_attention_available
    mha.fused_attention_available = lambda: False
    try:
        plain = fn()
    finally:
        mha.fused_attention_available = original
    return fused, plain


# --- fused == unfused attention, values and gradients ---
layer = MultiHeadAttention(num_heads=2)
x = rng.normal(size=(2, 6, 16)).astype("float32")
mask = np.array([[1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]], bool)  # row 2: all padding
layer(x, x)  # build
worst = 0.0
for causal in (False, True):
    def value_and_grad(causal=causal):
        def loss(inputs):
            out = layer(inputs, inputs, query_mask=mask, value_mask=mask,
                        use_causal_mask=causal)
            return ops.sum(out * out), out
        (_, out), grad = jax.value_and_grad(loss, has_aux=True)(x)
        return np.asarray(out), np.asarray(grad)

    (out_f, grad_f), (out_p, grad_p) = both_paths(value_and_grad)
    assert np.isfinite(out_f).all() and np.isfinite(grad_f).all(), "fused path gave NaN"
    worst = max(worst, float(np.abs(out_f - out_p).max()), float(np.abs(grad_f - grad_p).max()))
assert worst < 1e-5, f"fused and einsum attention differ by {worst}"
figures["fused_vs_einsum_max_abs_diff"] = worst

# --- a tiny Transformer trains on JAX ---
model = Transformer.from_preset("tiny", vocabulary_size=64, max_sequence_length=16)
features = {
    "encoder_token_ids": rng.integers(4, 64, (2, 8)).astype("int32"),
    "decoder_token_ids": rng.integers(4, 64, (2, 8)).astype("int32"),
}
features["encoder_token_ids"][1, 5:] = 0  # padding
labels = rng.integers(4, 64, (2, 8)).astype("int32")
model.compile(optimizer=keras.optimizers.Adam(3e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
losses = [float(model.train_on_batch(features, labels)) for _ in range(15)]
assert np.isfinite(losses).all(), losses
assert losses[-1] < 0.5 * losses[0], f"loss did not fall: {losses}"
figures["train_loss_first_last"] = [losses[0], losses[-1]]

# --- cached greedy under jax.jit == full-model recompute; beam 1 == greedy ---
source = features["encoder_token_ids"]
steps = 6
cached = np.asarray(jax.jit(lambda ids: greedy_search(model, ids, max_length=steps, end_id=-1))(source))
# The recompute runs the whole model on a prefix of fixed length (one
# compiled program): positions not yet decoded hold START_ID placeholders,
# which the causal mask hides from every earlier position.
full_model = jax.jit(lambda ids, prefix: model(
    {"encoder_token_ids": ids, "decoder_token_ids": prefix}))
prefix = np.full((2, steps + 1), START_ID, "int32")
for position in range(steps):
    last = np.asarray(full_model(source, prefix))[:, position].copy()
    last[:, 0] = -np.inf  # pad is never generated
    prefix[:, position + 1] = last.argmax(-1)
assert np.array_equal(cached, prefix[:, 1:]), (cached, prefix[:, 1:])
beam1 = np.asarray(jax.jit(lambda ids: beam_search(
    model, ids, beam_size=1, length_penalty=0.0, max_length=steps, end_id=-1)[0])(source))
assert np.array_equal(beam1, cached), (beam1, cached)
figures["greedy_tokens"] = cached.tolist()


# --- beam 4 under jax.jit: the sentence-shared cross cache == a tiled one ---
class TileEverything:
    """`model` with no static cache entries: beam search tiles (and reorders) all."""

    def __init__(self, model):
        self.encode, self.init_cache = model.encode, model.init_cache
        self.decode_step, self.config = model.decode_step, model.config


def beam4(m):
    return jax.jit(lambda ids: beam_search(
        m, ids, beam_size=4, max_length=steps, end_id=-1, return_all_beams=True))(source)


(shared, shared_scores), (tiled, tiled_scores) = beam4(model), beam4(TileEverything(model))
assert np.array_equal(np.asarray(shared), np.asarray(tiled)), (shared, tiled)
np.testing.assert_allclose(np.asarray(shared_scores), np.asarray(tiled_scores), atol=1e-5)


# --- keras.ops ThreeFry == JAX's ThreeFry; the ThreeFry Dropout under jit ---
import jax.extend.random as jax_random  # noqa: E402

from keras_transformer.layers._dropout import Dropout, threefry2x32, threefry_dropout  # noqa: E402

key = rng.integers(0, 2**32, size=2, dtype=np.uint64).astype(np.uint32)
words = rng.integers(0, 2**32, size=(2, 64), dtype=np.uint64).astype(np.uint32)
ours = threefry2x32((key[0], key[1]), (words[0], words[1]))
theirs = jax_random.threefry_2x32(key, words.reshape(-1))  # x0s then x1s
assert np.array_equal(np.concatenate([np.asarray(w) for w in ours]), np.asarray(theirs))
drop = Dropout(0.25, seed=1)


@jax.jit
def dropped(x):
    with threefry_dropout():
        return drop(x, training=True)


kept = float((np.asarray(dropped(np.ones((64, 64), "float32"))) != 0).mean())
assert abs(kept - 0.75) < 5 * np.sqrt(0.75 * 0.25 / 4096), kept
figures["threefry_dropout_kept"] = kept

# The text presets' classifier: n-gram convolutions, one block, max pooling.
classifier = TransformerClassifier(
    TokenStem(12, hidden_dim=8, max_sequence_length=16),
    num_classes=2, num_layers=1, num_heads=2, intermediate_dim=16, dropout=0.0,
    ngram_widths=(2, 3), pooling="max",
)
tokens = np.zeros((16, 6), "int32")
labels = rng.integers(0, 2, size=16)
for i, label in enumerate(labels):
    tokens[i, : 2 + i % 4] = 4 + label
padding_diff = float(np.abs(
    np.asarray(classifier(np.pad(tokens, ((0, 0), (0, 3))))) - np.asarray(classifier(tokens))
).max())
assert padding_diff < 1e-5, padding_diff
classifier.compile(keras.optimizers.Adam(1e-2),
                   keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = classifier.fit(tokens, labels, batch_size=8, epochs=6, verbose=0).history["loss"]
assert np.all(np.isfinite(history)) and history[-1] < 0.5 * history[0], history
figures["ngram_classifier_padding_diff"] = padding_diff
figures["ngram_classifier_loss_first_last"] = [history[0], history[-1]]

# A series classifier on NaN-padded input (keras_transformer.layers.series_masking):
# under jax.jit each series padded in a batch of others gives its own output,
# and a batch with padding and a missing value trains to finite weights.
series_model = TransformerClassifier(
    PatchStem(2, hidden_dim=8, max_sequence_length=32, patch_length=4, patch_stride=2,
              standardize_series=True),
    num_classes=2, num_layers=1, num_heads=2, intermediate_dim=16, dropout=0.0,
)
series_rows = [rng.normal(size=(n, 2)).astype("float32") for n in (7, 13, 10)]
series_rows[0][2, 1] = np.nan
series_batch = np.full((3, 16, 2), np.nan, "float32")
for i, row in enumerate(series_rows):
    series_batch[i, : len(row)] = row
series_call = jax.jit(lambda x: series_model(x, training=False))
padded_out = np.asarray(series_call(series_batch))
series_padding_diff = max(
    float(np.abs(padded_out[i] - np.asarray(series_model(row[None]))[0]).max())
    for i, row in enumerate(series_rows)
)
assert series_padding_diff < 1e-5, series_padding_diff
series_model.compile(keras.optimizers.Adam(1e-2),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True))
series_model.fit(series_batch, np.array([0, 1, 0]), epochs=2, verbose=0)
assert all(np.isfinite(np.asarray(w)).all() for w in series_model.weights)
figures["series_padding_diff"] = series_padding_diff

# Kim's form (no block), trained with mixup of its pooled features: the
# training call returns the mixed batch's logits and keeps lam for the
# loss, and the model still learns.
def kim_form(**name):
    return TextCNNClassifier(
        num_classes=2, vocabulary_size=12, hidden_dim=8, dropout=0.0,
        max_sequence_length=16, ngram_widths=(2, 3),
        pooling="max", mixup_alpha=0.4, **name,
    )


mixed = kim_form()
assert tuple(mixed(tokens, training=True).shape) == (16, 2)
assert tuple(mixed.step_outputs.take()[0].shape) == (16,)
mixed.compile(keras.optimizers.Adam(1e-2),
              keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
mixed.fit(tokens, labels, batch_size=8, epochs=10, verbose=0)
mixed_accuracy = mixed.evaluate(tokens, labels, verbose=0, return_dict=True)["accuracy"]
assert mixed_accuracy == 1.0, mixed_accuracy
figures["mixup_classifier_accuracy"] = mixed_accuracy

# A cross-fitted ensemble (member i leaves out the rows of fold i), then
# one member left out of the answer: the jitted predict step is traced
# again and answers with the other member alone.
ensemble = ClassifierEnsemble([kim_form(name=f"member_{i}") for i in range(2)])
# Its members run as one computation (jax.vmap over their stacked weights):
# each one's logits and mixup draws are those it makes alone.
assert ensemble.vectorized
states = [[np.asarray(v) for v in m.non_trainable_variables] for m in ensemble.members]
together, lams = ensemble.member_logits(tokens, training=True)
for member, values in zip(ensemble.members, states, strict=True):
    for variable, value in zip(member.non_trainable_variables, values, strict=True):
        variable.assign(value)
alone = [(member(tokens, training=True), member.step_outputs.take()[0])
         for member in ensemble.members]
vectorized_diff = max(
    float(np.abs(np.asarray(together)[:, i] - np.asarray(alone[i][0])).max())
    + float(np.abs(np.asarray(lams)[:, i] - np.asarray(alone[i][1])).max())
    for i in range(2))
assert vectorized_diff < 1e-5, vectorized_diff
figures["vectorized_members_diff"] = vectorized_diff
ensemble.compile(keras.optimizers.Adam(1e-2),
                 keras.losses.SparseCategoricalCrossentropy(from_logits=True))
folds = np.arange(16) % 2
weights = (folds[:, None] != np.arange(2)[None, :]).astype("float32")  # (B, 2)
history = ensemble.fit(tokens, labels, sample_weight=weights, batch_size=8, epochs=10,
                       verbose=0).history["loss"]
assert np.all(np.isfinite(history)) and history[-1] < history[0], history
both = np.asarray(ensemble.predict(tokens, verbose=0))
ensemble.exclude_members([1])
alone = np.asarray(ensemble.predict(tokens, verbose=0))
member_0 = np.asarray(keras.ops.log_softmax(ensemble.members[0](tokens), axis=-1))
assert np.abs(alone - member_0).max() < 1e-5, np.abs(alone - member_0).max()
assert np.abs(both - alone).max() > 1e-3  # the two members differ: the exclusion shows
figures["ensemble_excluded_member_diff"] = float(np.abs(alone - member_0).max())

print(json.dumps(figures))
