"""Members of one architecture run as one network: their weights stacked on a member axis.

A `ClassifierEnsemble` of k `TransformerClassifier`s calls each member in
turn: k copies of every op of the encoder, forward and backward, each on a
small batch.  Where the members differ only in their weights, the same
computation is one network whose every weight has a leading member axis
`(k, ...)`, each matmul a batched matmul over k: the ops of one member,
each on k times the data, as ensembles are vectorized elsewhere (JAX's
`vmap` over stacked parameters, PyTorch's `torch.func.stack_module_state`).
The members keep their own variables (checkpoints, saving and export are
unchanged): the stacks are built from them inside the call, and each
member's gradient comes back through its stack.

`stacked_member_logits` runs the members from their stems' fixed features
(`SeriesStem.fixed_features`, computed once per series by a training
loop); `stackable` says which ensembles it can run.
"""

import math

import keras
from keras import ops

from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.pooling import MaskedMaxPooling, MaskedMeanPooling
from keras_transformer.layers.scaled_dot_product_attention import masked_softmax
from keras_transformer.layers.series_stem import SeriesStem
from keras_transformer.layers.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)


def _config(member):
    """What must be equal for members to stack: every size and option of the
    graph (not the weights, nor the stem's fixed kernels)."""
    from keras_transformer.models.transformer_classifier import TransformerClassifier

    if type(member) is not TransformerClassifier or not isinstance(member.stem, SeriesStem):
        return None
    stem = member.stem
    if (not isinstance(stem.position_encoding, SinusoidalPositionEncoding)
            or member.ngram_convolution is not None or member.mixup_alpha
            or not isinstance(member.pooling, (MaskedMeanPooling, MaskedMaxPooling))):
        return None
    blocks = []
    for block in member.encoder_blocks:
        attention = block.self_attention
        if (type(attention) is not MultiHeadAttention or attention.scorer != "dot"
                or attention.dropout or not attention.use_bias or not attention.fused):
            return None
        blocks.append((attention.num_heads, attention.head_key_dim,
                       attention.head_value_dim, block.normalize_first,
                       block.self_attention_norm.epsilon, block.feed_forward_norm.epsilon,
                       keras.activations.serialize(block.feed_forward.activation),
                       block.dropout))
    layers = [member, stem, *member.encoder_blocks]
    if any(layer.dtype_policy.name != "float32" for layer in layers):
        return None
    shapes = tuple(tuple(v.shape) for v in member.trainable_variables)
    return (type(stem).__name__, stem.hidden_dim, stem.level_features is not None,
            tuple(blocks), member.encoder_norm is not None, type(member.pooling).__name__,
            member.dropout, member.num_classes, shapes)


def stackable(members):
    """Whether `members` can run as one stacked network: `TransformerClassifier`s
    on series stems with sinusoidal positions, the same sizes and options
    (dot-product attention without dropout on its weights, no n-gram
    convolution, no mixup, float32), differing only in their weights."""
    configs = [_config(m) for m in members]
    return configs[0] is not None and all(c == configs[0] for c in configs)


def _stack(values):
    """Member i's `values[i]` (variables or tensors) on a new leading axis `(k, ...)`."""
    return ops.stack([v.value if isinstance(v, keras.Variable) else v for v in values])


def _dense(x, layers, activation=None):
    """`x` `(k, ..., n)` through member i's Dense `layers[i]` on slice i."""
    kernel = _stack([layer.kernel for layer in layers])  # (k, n, m)
    bias = _stack([layer.bias for layer in layers])  # (k, m)
    lead = ops.shape(x)[:-1]
    rows = ops.reshape(x, (len(layers), -1, x.shape[-1]))  # (k, rows, n)
    out = ops.matmul(rows, kernel) + ops.expand_dims(bias, 1)
    if activation is not None:
        out = activation(out)
    return ops.reshape(out, (*lead, kernel.shape[-1]))


def _layer_norm(x, layers):
    """Keras' `LayerNormalization` (last axis, as `ops.layer_normalization`) of
    member i's `layers[i]` on slice i of `x` `(k, B, T, d)`."""
    gamma = _stack([layer.gamma for layer in layers])[:, None, None, :]  # (k, 1, 1, d)
    beta = _stack([layer.beta for layer in layers])[:, None, None, :]
    mean, variance = ops.moments(x, axes=[-1], keepdims=True)
    inv = ops.rsqrt(variance + layers[0].epsilon) * gamma
    return x * inv + (beta - mean * inv)


def _attention(x, mask, layers):
    """Self-attention of `MultiHeadAttention` `layers[i]` (fused q/k/v
    projection, dot-product scores) on slice i of `x` `(k, B, T, d)`, the
    padding `mask` `(k, B, T)` on queries and keys."""
    first = layers[0]
    k, heads, dk = len(layers), first.num_heads, first.head_key_dim
    qkv_kernel = _stack([layer.qkv_kernel for layer in layers])  # (k, d, 2 h dk + h dv)
    qkv_bias = _stack([layer.qkv_bias for layer in layers])  # (k, 2 h dk + h dv)
    batch, length = ops.shape(x)[1], ops.shape(x)[2]
    rows = ops.reshape(x, (k, -1, x.shape[-1]))  # (k, B*T, d)
    qkv = ops.matmul(rows, qkv_kernel) + ops.expand_dims(qkv_bias, 1)
    q, key, value = (
        ops.reshape(t, (k, batch, length, heads, -1))
        for t in ops.split(qkv, [heads * dk, 2 * heads * dk], axis=-1)
    )  # (k, B, T, h, d)
    q = q * ops.cast(1.0 / math.sqrt(dk), q.dtype)
    scores = ops.einsum("mbthd,mbshd->mbhts", q, key)  # (k, B, h, T, S)
    allowed = ops.logical_and(mask[:, :, None, :, None], mask[:, :, None, None, :])
    weights = masked_softmax(scores, allowed)
    heads_out = ops.einsum("mbhts,mbshd->mbthd", ops.cast(weights, value.dtype), value)
    output_kernel = _stack([layer.output_kernel for layer in layers])  # (k, h dv, d)
    output_bias = _stack([layer.output_bias for layer in layers])  # (k, d)
    out = ops.matmul(ops.reshape(heads_out, (k, -1, output_kernel.shape[1])), output_kernel)
    out = out + ops.expand_dims(output_bias, 1)
    return ops.reshape(out, (k, batch, length, output_kernel.shape[-1]))


def _encoder_block(x, mask, blocks, training):
    """`TransformerEncoderBlock.call` of member i's `blocks[i]` on slice i."""
    first = blocks[0]
    dropout = first.residual_dropout  # the member's draw is a draw for every slice

    def sublayer(x, norms, apply):
        residual = x
        if first.normalize_first:
            x = _layer_norm(x, norms)
        x = residual + dropout(apply(x), training=training)
        return x if first.normalize_first else _layer_norm(x, norms)

    def feed_forward(x):
        layers = [b.feed_forward for b in blocks]
        x = _dense(x, [f.inner_dense for f in layers], layers[0].activation)
        x = layers[0].inner_dropout(x, training=training)
        return _dense(x, [f.output_dense for f in layers])

    x = sublayer(x, [b.self_attention_norm for b in blocks],
                 lambda x: _attention(x, mask, [b.self_attention for b in blocks]))
    return sublayer(x, [b.feed_forward_norm for b in blocks], feed_forward)


def _embed(stem_features, stems):
    """`SeriesStem.embed` of member i's stem on its fixed features: `(k, B, T', d)`
    tokens and their mask `(k, B, T')`."""
    tokens = _stack([f["tokens"] for f in stem_features])  # (k, B, T', w)
    mask = ops.cast(_stack([f["mask"] for f in stem_features]), "bool")
    x = _dense(tokens, [s.feature_projection for s in stems])
    x = x + stems[0].position_encoding(x)  # sinusoids of (T', d), the same for all
    if stems[0].level_features is not None:
        levels = [s.level_features for s in stems]
        statistics = _stack([f["statistics"] for f in stem_features])  # (k, B, 1, 2F)
        mean = _stack([layer.statistic_mean for layer in levels])[:, None, None, :]
        scale = _stack([layer.statistic_scale for layer in levels])[:, None, None, :]
        x = x + _dense((statistics - mean) / scale, [layer.projection for layer in levels])
    return x, mask


def _pool(x, mask, pooling):
    """`MaskedMeanPooling` or `MaskedMaxPooling` of `(k, B, T, d)` -> `(k, B, d)`."""
    k, batch = ops.shape(x)[0], ops.shape(x)[1]
    flat = ops.reshape(x, (-1, *x.shape[2:]))
    pooled = pooling(flat, mask=ops.reshape(mask, (-1, mask.shape[-1])))
    return ops.reshape(pooled, (k, batch, x.shape[-1]))


def stacked_member_logits(members, stem_features, training=None):
    """Each member's logits from its stem's fixed features, as one stacked network.

    Args:
        members: k classifiers for which `stackable(members)` holds.
        stem_features: k dicts, member i's `SeriesStem.fixed_features` of the
            batch (`tokens` `(B, T', w)`, `mask` `(B, T')`, and `statistics`
            with series level features).
        training: enables the members' dropout.

    Returns:
        float32 `(B, k, num_classes)`: what `ops.stack([m({"features": ...,
        "stem_features": f}) ...], axis=1)` returns, to float rounding (the
        dropout masks are drawn differently).
    """
    first = members[0]
    x, mask = _embed(stem_features, [m.stem for m in members])
    x = first.embedding_dropout(x, training=training)
    for blocks in zip(*(m.encoder_blocks for m in members), strict=True):
        x = _encoder_block(x, mask, list(blocks), training)  # layer i of every member
    if first.encoder_norm is not None:
        x = _layer_norm(x, [m.encoder_norm for m in members])
    x = _pool(x, mask, first.pooling)  # (k, B, d)
    x = _dense(x, [m.head_hidden for m in members], first.head_hidden.activation)
    x = first.head_dropout(x, training=training)
    logits = ops.cast(_dense(x, [m.head_output for m in members]), "float32")  # (k, B, K)
    return ops.transpose(logits, (1, 0, 2))
