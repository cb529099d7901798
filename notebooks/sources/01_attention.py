# ruff: noqa: E402  (a notebook: imports follow the set-up cell)
# %% [markdown]
# # 1. Attention
#
# Section 3.2 of *Attention Is All You Need* (Vaswani et al., 2017), with the
# package's own layers: scaled dot-product attention as a soft dictionary
# look-up, why the scores are divided by $\sqrt{d_k}$, multi-head attention,
# the padding and causal masks, and the sinusoidal position encodings of
# Section 3.5.
#
# `KT_NOTEBOOK_SIZE` (environment variable) picks the size: `small` (the
# default, what CI runs) or `full` (more samples).

# %%

from notebook_setup import SIZE

# %%
import keras
import matplotlib.pyplot as plt
import numpy as np
from keras import ops

from keras_transformer.layers import (
    MultiHeadAttention,
    causal_mask,
    merge_attention_masks,
    padding_mask,
    scaled_dot_product_attention,
)
from keras_transformer.layers.sinusoidal_position_encoding import sinusoids

keras.utils.set_random_seed(0)
plt.rcParams.update({"figure.dpi": 80, "image.cmap": "viridis"})

# %% [markdown]
# ## 3.2.1 Scaled dot-product attention: a soft dictionary look-up
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right) V$$
#
# A Python `dict` returns the value whose key *equals* the query. Attention
# returns a *weighted average* of all values, weighted by how well each key
# matches the query. Below, four keys are (scaled) one-hot vectors and each
# value is a number. A query equal to a key gets mostly that key's value; a
# query halfway between two keys gets their average; a query that matches
# nothing gets the mean of all values.
#
# `scaled_dot_product_attention` takes `(batch, length, heads, d_k)` tensors
# and returns the output and the weights `(batch, heads, queries, keys)`.

# %%
words = ["apple", "banana", "cherry", "date"]
keys = 3.0 * np.eye(4, dtype="float32")  # (S=4, d_k=4)
values = np.array([[1.0], [2.0], [3.0], [4.0]], "float32")  # (S, d_v=1)
queries = np.stack([keys[0], (keys[1] + keys[2]) / 2, np.zeros(4, "float32")])  # (T=3, d_k)
query_names = ["= apple", "banana/cherry", "no match"]


def heads(x):
    """(T, d) -> (B=1, T, h=1, d), the layout of the attention functions."""
    return ops.convert_to_tensor(x[None, :, None, :])


output, weights = scaled_dot_product_attention(heads(queries), heads(keys), heads(values))
weights = ops.convert_to_numpy(weights)[0, 0]  # (T, S)
output = ops.convert_to_numpy(output)[0, :, 0, 0]  # (T,)
for name, row, value in zip(query_names, weights, output, strict=True):
    print(f"query {name:>14}: weights {np.round(row, 3)} -> value {value:.3f}")

# %% [markdown]
# Multiplying a query by a large factor makes the softmax sharper: in the
# limit the look-up becomes the hard `dict` look-up. That is also the
# problem the next section is about.

# %%
for temperature in (0.25, 1.0, 4.0):
    _, w = scaled_dot_product_attention(
        heads(temperature * queries[:1]), heads(keys), heads(values)
    )
    print(f"query x {temperature:<4}: weights {np.round(ops.convert_to_numpy(w)[0, 0, 0], 3)}")

# %% [markdown]
# ## Why divide by $\sqrt{d_k}$?
#
# "We suspect that for large values of $d_k$, the dot products grow large in
# magnitude, pushing the softmax function into regions where it has extremely
# small gradients" (footnote 4: if the components of $q$ and $k$ are
# independent with mean 0 and variance 1, $q \cdot k$ has variance $d_k$).
#
# We measure it: random queries against 32 random keys, for growing $d_k$,
# with the default scale $1/\sqrt{d_k}$ and with `scale=1.0` (no scaling).
# Saturation shows as the largest weight approaching 1, the entropy of the
# weights approaching 0 (one key takes everything), and the softmax Jacobian
# $\mathrm{diag}(p) - pp^\top$ vanishing (no gradient reaches the scores).

# %%
num_queries = 200 if SIZE == "small" else 2000
num_keys = 32
dims = [4, 16, 64, 256, 1024]
rng = np.random.default_rng(0)


def saturation(d_k, scale):
    q = rng.standard_normal((1, num_queries, 1, d_k)).astype("float32")
    k = rng.standard_normal((1, num_keys, 1, d_k)).astype("float32")
    _, w = scaled_dot_product_attention(q, k, k, scale=scale)
    p = ops.convert_to_numpy(w)[0, 0]  # (T, S)
    entropy = -(p * np.log(p + 1e-30)).sum(-1) / np.log(num_keys)  # 1 = uniform
    jacobian = np.einsum("ts,sr->tsr", p, np.eye(num_keys)) - p[:, :, None] * p[:, None, :]
    return {
        "max weight": p.max(-1).mean(),
        "entropy / log S": entropy.mean(),
        "|Jacobian|": np.linalg.norm(jacobian, axis=(1, 2)).mean(),
    }


table = {
    (label, d): saturation(d, scale)
    for label, scale in (("1/sqrt(d_k)", None), ("no scaling", 1.0))
    for d in dims
}
print(f"{'':>12} {'d_k':>5} {'max weight':>11} {'entropy':>8} {'|Jacobian|':>11}")
for (label, d), m in table.items():
    print(
        f"{label:>12} {d:>5} {m['max weight']:>11.3f} "
        f"{m['entropy / log S']:>8.3f} {m['|Jacobian|']:>11.4f}"
    )

# %%
fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
for ax, metric in zip(axes, ["max weight", "entropy / log S", "|Jacobian|"], strict=True):
    for label in ("1/sqrt(d_k)", "no scaling"):
        ax.plot(dims, [table[label, d][metric] for d in dims], "o-", label=label)
    ax.set(xscale="log", xlabel="d_k", title=metric)
axes[0].legend()
fig.tight_layout()

# %% [markdown]
# With the scaling the three measures stay where they were at $d_k = 4$;
# without it, by $d_k = 256$ one key takes almost all the weight and the
# Jacobian, hence the gradient into $Q$ and $K$, all but vanishes.
#
# ## 3.2.2 Multi-head attention
#
# $\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots,
# \mathrm{head}_h) W^O$ with $\mathrm{head}_i = \mathrm{Attention}(QW_i^Q,
# KW_i^K, VW_i^V)$. Each head projects to $d_k = d_{model}/h$, so $h$ heads
# cost about what one full-width head costs, and have the same number of
# parameters, $4\, d_{model}^2$ plus biases:

# %%
d_model = 64
x = keras.random.normal((2, 7, d_model), seed=1)  # (B, T, d_model)
parameter_counts = {}
for h in (1, 4, 8):
    layer = MultiHeadAttention(num_heads=h)
    out, w = layer(x, x, return_attention_scores=True)
    parameter_counts[h] = layer.count_params()
    print(
        f"h={h}: d_k={d_model // h:>2}, parameters={parameter_counts[h]}, "
        f"output {tuple(out.shape)}, weights {tuple(w.shape)}"
    )
print("4 d_model^2 + biases =", 4 * d_model**2 + 4 * d_model)

# %% [markdown]
# Each head has its own projections, so each head attends in its own way,
# even untrained (the 4 heads of one layer, on one random sequence):

# %%
layer = MultiHeadAttention(num_heads=4)
_, w = layer(x, x, return_attention_scores=True)
fig, axes = plt.subplots(1, 4, figsize=(12, 3))
for i, ax in enumerate(axes):
    ax.imshow(ops.convert_to_numpy(w)[0, i], vmin=0)
    ax.set(title=f"head {i}", xlabel="key", ylabel="query" if i == 0 else None)
fig.tight_layout()

# %% [markdown]
# ## Masks
#
# Two masks matter in the Transformer (both boolean, `True` = may attend):
#
# - the **padding mask**: a batch pads short sentences with id 0, and no
#   query may attend to those positions (`padding_mask(token_ids)`);
# - the **causal mask** of the decoder's self-attention (Section 3.2.3):
#   position $i$ may attend only to positions $\le i$, "to prevent leftward
#   information flow", so that training on a whole sentence at once predicts
#   each word from the words before it only (`causal_mask(T, S)`).
#
# `merge_attention_masks` ANDs them into one `(B, T, S)` mask; masked scores
# are set to the float32 minimum before the softmax, so their weights are
# exactly 0.

# %%
token_ids = np.array([[5, 8, 2, 9, 0, 0]], "int32")  # one sentence of 4 tokens + 2 pads
pad = padding_mask(token_ids)  # (B, T)
causal = causal_mask(6, 6)  # (T, S)
print("padding mask:", ops.convert_to_numpy(pad).astype(int))
print("causal mask:\n", ops.convert_to_numpy(causal).astype(int))
merged = merge_attention_masks(
    x[:1, :6], x[:1, :6], query_mask=pad, key_mask=pad, use_causal_mask=True
)
print("merged (B, T, S):\n", ops.convert_to_numpy(merged)[0].astype(int))

# %%
# Small inputs give near-uniform weights, so that what the masks remove stands out.
sequence = 0.3 * keras.random.normal((1, 6, d_model), seed=2)
layer = MultiHeadAttention(num_heads=2)
masked_weights = {}
for title, kwargs in [
    ("no mask", {}),
    ("padding", {"query_mask": pad, "value_mask": pad}),
    ("causal", {"use_causal_mask": True}),
    (
        "padding + causal",
        {"query_mask": pad, "value_mask": pad, "use_causal_mask": True},
    ),
]:
    _, w = layer(sequence, sequence, return_attention_scores=True, **kwargs)
    masked_weights[title] = ops.convert_to_numpy(w)[0, 0]  # head 0, (T, S)
fig, axes = plt.subplots(1, 4, figsize=(12, 3))
for ax, (title, w) in zip(axes, masked_weights.items(), strict=True):
    ax.imshow(w, vmin=0, vmax=1)
    ax.set(title=title, xlabel="key", ylabel="query" if ax is axes[0] else None)
fig.tight_layout()

# %% [markdown]
# The padded keys (columns 4-5) get weight 0, and so does everything above
# the diagonal under the causal mask. The rows of the padded *queries* are
# fully masked: they come out uniform (never NaN), and nothing downstream
# reads them, since the loss ignores padding.
#
# The causal mask is what makes the decoder auto-regressive: changing a later
# token cannot change an earlier output.

# %%
changed = ops.convert_to_numpy(sequence).copy()
changed[0, 4] += 10.0  # change position 4 only
before = ops.convert_to_numpy(layer(sequence, sequence, use_causal_mask=True))
after = ops.convert_to_numpy(layer(changed, changed, use_causal_mask=True))
look_ahead = np.abs(after - before).max(-1)[0]  # (T,)
print("largest change of each output position:", np.round(look_ahead, 5))

# %% [markdown]
# ## 3.5 Sinusoidal position encodings
#
# Attention is blind to order, so the model adds
# $PE_{(pos, 2i)} = \sin(pos / 10000^{2i/d_{model}})$ and
# $PE_{(pos, 2i+1)} = \cos(pos / 10000^{2i/d_{model}})$ to the embeddings:
# each pair of channels is a clock with its own wavelength, from $2\pi$ to
# $10000 \cdot 2\pi$.

# %%
length = 200 if SIZE == "small" else 400
pe = ops.convert_to_numpy(sinusoids(length, d_model))  # (T, d_model)
fig, axes = plt.subplots(1, 2, figsize=(12, 3.5))
axes[0].imshow(pe.T, aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
axes[0].set(title="PE (channels x positions)", xlabel="position", ylabel="channel")
similarity = pe @ pe.T
image = axes[1].imshow(similarity)
axes[1].set(title="PE(p) . PE(q)", xlabel="position q", ylabel="position p")
fig.colorbar(image, ax=axes[1])
fig.tight_layout()

# %% [markdown]
# The dot product depends only on the distance $|p - q|$ (bands parallel to
# the diagonal). The paper chose sinusoids "because we hypothesized it would
# allow the model to easily learn to attend by relative positions, since for
# any fixed offset $k$, $PE_{pos+k}$ can be represented as a linear function
# of $PE_{pos}$". Indeed each (sin, cos) pair at frequency $\omega_i$ moves
# by a rotation through the angle $k\omega_i$, whatever the position:
# $PE_{pos+k} = PE_{pos} M_k$ with $M_k$ block-diagonal. We build $M_k$ from
# the frequencies alone and apply it to the package's encodings.

# %%
offset = 7
omega = 1.0 / 10000 ** (np.arange(0, d_model, 2) / d_model)  # (d/2,) frequencies
cos, sin = np.cos(offset * omega), np.sin(offset * omega)
m_k = np.zeros((d_model, d_model))
m_k[0::2, 0::2] = np.diag(cos)  # sin(a + b) = sin a cos b + cos a sin b
m_k[1::2, 0::2] = np.diag(sin)
m_k[0::2, 1::2] = np.diag(-sin)  # cos(a + b) = cos a cos b - sin a sin b
m_k[1::2, 1::2] = np.diag(cos)
linear_error = np.abs(pe[:-offset] @ m_k - pe[offset:]).max()
print(
    f"max |PE(pos + {offset}) - PE(pos) M_k| over {length - offset} positions: {linear_error:.1e}"
)

# %% [markdown]
# ## What this notebook showed (checked)

# %%
assert weights[0].argmax() == 0 and weights[0, 0] > 0.8  # a matching key wins
assert abs(output[1] - 2.5) < 1e-3  # halfway between banana and cherry
assert np.allclose(weights[2], 0.25) and abs(output[2] - 2.5) < 1e-6  # no match: the mean
scaled = [table["1/sqrt(d_k)", d]["max weight"] for d in dims]
unscaled = [table["no scaling", d]["max weight"] for d in dims]
assert max(scaled) - min(scaled) < 0.1, scaled  # scaling keeps the softmax where it was
assert unscaled[-1] > 0.9 and unscaled[-1] > scaled[-1] + 0.5, unscaled  # unscaled saturates
assert table["no scaling", 1024]["|Jacobian|"] < 0.5 * table["1/sqrt(d_k)", 1024]["|Jacobian|"]
assert len(set(parameter_counts.values())) == 1  # h heads cost what one head costs
for title in ("padding", "padding + causal"):
    assert np.all(masked_weights[title][:4, 4:] == 0)  # padded keys get exactly 0
assert np.all(np.triu(masked_weights["causal"], 1) == 0)  # no look-ahead
assert np.allclose(masked_weights["padding + causal"].sum(-1), 1, atol=1e-6)
assert np.all(look_ahead[:4] < 1e-5) and look_ahead[4] > 1e-3  # only positions >= 4 change
assert np.allclose(pe[:, 0], np.sin(np.arange(length)), atol=1e-5)  # PE(pos, 0) = sin(pos)
assert np.allclose(pe[:, 1], np.cos(np.arange(length)), atol=1e-5)  # PE(pos, 1) = cos(pos)
assert linear_error < 1e-3, linear_error  # PE(pos + k) is linear in PE(pos)
print("All checks passed.")
