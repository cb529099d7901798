"""A `Transformer`'s decoding step in few, large TensorFlow ops, for serving.

In a TensorFlow graph a decoding loop pays the executor for every op of
every step, and at batch 1 that is nearly the whole cost: the Keras layers'
`decode_step` traces to about 1,370 ops a step (shape arithmetic, casts,
per-layer mask merging, weight reads), about 4.4 ms a step on two cores
where the arithmetic is a fraction of a millisecond.  `FusedDecoder` runs
the same functions with the weights laid out once per request, outside the
loop: one matmul for a layer's query, key and value, the scale and the
causal mask as single ops, and the embedding's position row gathered from a
table instead of recomputed.  It is an object with the `Transformer`'s
decoding interface (`encode`, `init_cache`, `decode_step`,
`static_cache_entries`), so `greedy_search` and `beam_search` run it
unchanged, and it reads the model's own variables: a SavedModel holds one
copy of the weights.  `tests/test_fused_decoder.py` holds its logits and
tokens to the model's.

Only the decoding step is rewritten: the encoder, and the cross-attention
keys and values, run once a request through the model's own layers.
"""

import math

import tensorflow as tf

# Masked scores are filled as the layers' `masked_softmax` fills them.
from keras_transformer.layers.scaled_dot_product_attention import MASKED_SCORE


def fused_decoder_unsupported(model):
    """Why `FusedDecoder` cannot run `model`, or None when it can.

    It covers the paper's model and its options the presets use: post- or
    pre-LN, tied or untied output projection, sinusoidal or learned
    positions, dot-product attention, float32 weights.
    """
    if getattr(model, "decoder_blocks", None) is None or not hasattr(model, "config"):
        return f"{type(model).__name__} is not a Transformer"
    for layer in (model.decoder_embedding, *model.decoder_blocks):
        if layer.compute_dtype != "float32" or layer.variable_dtype != "float32":
            return f"dtype policy {layer.dtype_policy.name!r} (float32 only)"
    for block in model.decoder_blocks:
        activation = getattr(block.feed_forward.activation, "__name__", "")
        if activation != "relu":
            return f"feed-forward activation {activation!r} (ReLU only)"
        for attention in (block.self_attention, block.cross_attention):
            if attention.scorer != "dot":
                return f"attention scorer {attention.scorer!r}"
            if not attention.use_bias:
                return "attention without biases"
        if not block.self_attention.fused or block.cross_attention.fused:
            return "query/key/value kernels laid out otherwise"
    return None


def _norm(x, gamma, beta, epsilon):
    """`keras.ops.layer_normalization` over the last axis, op for op."""
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
    inv = tf.math.rsqrt(variance + epsilon) * gamma
    return x * inv + (-mean * inv + beta)


def _write(cache, new, rows):
    """`cache` `(B, h, L, d)` with `new` `(B, h, 1, d)` written at the
    `(B * h, 3)` [row, head, position] indices `rows`: one scatter of
    `B * h` rows (under XLA in place; 1.3x faster greedy decoding at batch 1
    than a select over the whole cache, and as fast at batch 32)."""
    return tf.tensor_scatter_nd_update(cache, rows, tf.reshape(new, (-1, cache.shape[-1])))


def _attend(query, keys, values, mask):
    """softmax(Q K^T, masked) V: `(N, h, g, d)` queries over `(N, h, L, d)`."""
    scores = tf.matmul(query, keys, transpose_b=True)  # (N, h, g, L)
    probs = tf.nn.softmax(tf.where(mask, scores, MASKED_SCORE))
    return tf.matmul(probs, values)  # (N, h, g, d_v)


class FusedDecoder:
    """`model`'s decoding interface with a step of few, large ops.

    Args:
        model: A float32 `keras_transformer.models.Transformer` with
            dot-product attention (`fused_decoder_unsupported(model)` says
            why not, otherwise).

    Raises:
        ValueError: Naming the feature it does not cover.

    Example:

    ```python
    tokens = greedy_search(FusedDecoder(model), source_ids, max_length=64)
    ```
    """

    static_cache_entries = ("cross_key", "cross_value", "encoder_padding_mask",
                            "weights")
    # One tensor a self-attention cache: the step writes it with one scatter.
    beam_cache_chunks = 1

    def __init__(self, model):
        reason = fused_decoder_unsupported(model)
        if reason is not None:
            raise ValueError(f"FusedDecoder does not cover this model: {reason}.")
        self.model = model
        self.config = model.config
        self.normalize_first = bool(model.config.normalize_first)
        self.epsilon = float(model.config.layer_norm_epsilon)

    def encode(self, encoder_token_ids, training=False):
        """The model's encoder: `(B, S)` ids -> `(B, S, d_model)`."""
        return self.model.encode(encoder_token_ids, training=False)

    def init_cache(self, encoder_token_ids, encoder_output, max_length, chunks=1):
        """The model's cache (one tensor a self-attention entry), plus the
        step's weights and position table under the static entry `weights`.

        `chunks` is accepted for the interface and ignored: the step writes
        each self-attention entry with one scatter.
        """
        del chunks
        cache = self.model.init_cache(encoder_token_ids, encoder_output, max_length)
        cache["weights"] = self._weights(max_length)
        return cache

    def _weights(self, max_length):
        """Every tensor a step reads, laid out once: 2-D kernels, 1-D biases."""
        model = self.model
        embedding = model.decoder_embedding
        width = int(embedding.hidden_dim)
        positions = embedding.position_encoding(
            tf.zeros((1, max_length, width)), start_index=0
        )[0]  # (max_length, d): the rows `decode_step` adds at each index
        layers = []
        for block in model.decoder_blocks:
            sa, ca = block.self_attention, block.cross_attention
            layers.append({
                "qkv_kernel": tf.convert_to_tensor(sa.qkv_kernel),  # (d, 2 h dk + h dv)
                "qkv_bias": tf.convert_to_tensor(sa.qkv_bias),
                "self_output_kernel": tf.convert_to_tensor(sa.output_kernel),
                "self_output_bias": tf.convert_to_tensor(sa.output_bias),
                "query_kernel": tf.convert_to_tensor(ca.query_kernel),  # (d, h dk)
                "query_bias": tf.convert_to_tensor(ca.query_bias),
                "cross_output_kernel": tf.convert_to_tensor(ca.output_kernel),
                "cross_output_bias": tf.convert_to_tensor(ca.output_bias),
                "inner_kernel": tf.convert_to_tensor(block.feed_forward.inner_dense.kernel),
                "inner_bias": tf.convert_to_tensor(block.feed_forward.inner_dense.bias),
                "outer_kernel": tf.convert_to_tensor(block.feed_forward.output_dense.kernel),
                "outer_bias": tf.convert_to_tensor(block.feed_forward.output_dense.bias),
                "norms": [
                    (tf.convert_to_tensor(norm.gamma), tf.convert_to_tensor(norm.beta))
                    for norm in (block.self_attention_norm, block.cross_attention_norm,
                                 block.feed_forward_norm)
                ],
            })
        weights = {
            "embeddings": tf.convert_to_tensor(embedding.embeddings),  # (V, d)
            "positions": positions,
            "layers": layers,
        }
        if model.output_projection is not None:
            weights["projection"] = tf.convert_to_tensor(model.output_projection.kernel)
        if model.decoder_norm is not None:
            weights["final_norm"] = (tf.convert_to_tensor(model.decoder_norm.gamma),
                                     tf.convert_to_tensor(model.decoder_norm.beta))
        return weights

    def decode_step(self, token_ids, cache, index):
        """Logits of the next token: `(B, 1)` ids at position `index` -> `(B, V)`.

        Token rows may be a multiple `g * B` of the cache's static rows (the
        beams of a sentence, consecutive), as `Transformer.decode_step` allows.
        """
        weights = cache["weights"]
        config = self.config
        heads = int(config.num_heads)
        width = int(config.hidden_dim)
        key_dim = int(config.key_dim or width // heads)
        value_dim = int(config.value_dim or key_dim)
        scale = tf.constant(1.0 / math.sqrt(key_dim), tf.float32)

        ids = tf.reshape(token_ids, (-1,))  # (B_q,)
        x = tf.gather(weights["embeddings"], ids) * math.sqrt(width)
        x = x + weights["positions"][index]  # (B_q, d)
        length = tf.shape(cache["self_key"][0])[2]
        # Positions 0..index attend: (1, 1, 1, L) for self-attention.
        causal = tf.reshape(tf.range(length) <= index, (1, 1, 1, -1))
        query_rows = tf.shape(ids)[0]
        row, head = tf.meshgrid(tf.range(query_rows), tf.range(heads), indexing="ij")
        cache_rows = tf.stack([tf.reshape(row, [-1]), tf.reshape(head, [-1]),
                               tf.fill([query_rows * heads], index)], axis=1)  # (B_q h, 3)
        source_mask = cache["encoder_padding_mask"]  # (B, S)
        rows = tf.shape(source_mask)[0]
        source_mask = tf.reshape(source_mask, (rows, 1, 1, -1))  # (B, 1, 1, S)

        new_keys, new_values = [], []
        for i, layer in enumerate(weights["layers"]):
            (n1_g, n1_b), (n2_g, n2_b), (n3_g, n3_b) = layer["norms"]

            # Self-attention over the cache, this position written into it.
            y = _norm(x, n1_g, n1_b, self.epsilon) if self.normalize_first else x
            qkv = tf.matmul(y, layer["qkv_kernel"]) + layer["qkv_bias"]  # (B_q, 2 h dk + h dv)
            q, k, v = (
                tf.reshape(t, (-1, heads, 1, width))  # (B_q, h, 1, .)
                for t, width in zip(
                    tf.split(qkv, [heads * key_dim, heads * key_dim, heads * value_dim], -1),
                    (key_dim, key_dim, value_dim), strict=True)
            )
            keys = _write(cache["self_key"][i], k, cache_rows)  # (B_q, h, L, dk)
            values = _write(cache["self_value"][i], v, cache_rows)
            new_keys.append(keys)
            new_values.append(values)
            attended = _attend(q * scale, keys, values, causal)  # (B_q, h, 1, dv)
            attended = tf.reshape(attended, (-1, heads * value_dim))
            y = tf.matmul(attended, layer["self_output_kernel"]) + layer["self_output_bias"]
            x = x + y
            if not self.normalize_first:
                x = _norm(x, n1_g, n1_b, self.epsilon)

            # Cross-attention: the g query rows of a cache row read it once.
            y = _norm(x, n2_g, n2_b, self.epsilon) if self.normalize_first else x
            q = tf.matmul(y, layer["query_kernel"]) + layer["query_bias"]  # (B_q, h dk)
            q = tf.transpose(tf.reshape(q, (rows, -1, heads, key_dim)), (0, 2, 1, 3))
            attended = _attend(q * scale, cache["cross_key"][i], cache["cross_value"][i],
                               source_mask)  # (B, h, g, dv)
            attended = tf.reshape(tf.transpose(attended, (0, 2, 1, 3)),
                                  (-1, heads * value_dim))  # (B_q, h dv)
            y = tf.matmul(attended, layer["cross_output_kernel"]) + layer["cross_output_bias"]
            x = x + y
            if not self.normalize_first:
                x = _norm(x, n2_g, n2_b, self.epsilon)

            # Position-wise feed-forward.
            y = _norm(x, n3_g, n3_b, self.epsilon) if self.normalize_first else x
            y = tf.nn.relu(tf.matmul(y, layer["inner_kernel"]) + layer["inner_bias"])
            y = tf.matmul(y, layer["outer_kernel"]) + layer["outer_bias"]
            x = x + y
            if not self.normalize_first:
                x = _norm(x, n3_g, n3_b, self.epsilon)

        if "final_norm" in weights:
            x = _norm(x, *weights["final_norm"], self.epsilon)
        if "projection" in weights:
            logits = tf.matmul(x, weights["projection"])
        else:
            logits = tf.matmul(x, weights["embeddings"], transpose_b=True)  # (B_q, V)
        return logits, dict(cache, self_key=new_keys, self_value=new_values)
