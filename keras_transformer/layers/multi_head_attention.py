"""Multi-head attention (Vaswani et al., 2017, Section 3.2.2)."""

import keras
import numpy as np
from keras import ops

from keras_transformer.layers import kv_cache
from keras_transformer.layers._shapes import leading_shape
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.masking import merge_attention_masks
from keras_transformer.layers.scaled_dot_product_attention import (
    additive_attention,
    fused_attention_available,
    fused_dot_product_attention,
    scaled_dot_product_attention,
)
from keras_transformer.layers.validation import (
    check_choice,
    check_positive_int,
    check_rate,
)

SCORERS = ("dot", "additive")


def _matmul_2d(x, kernel, contract, bias=None):
    """Contract the last `contract` axes of `x` with the first of `kernel`.

    The einsums "btd,dhk->bthk" and "bthd,hdo->bto" (plus the bias) as one
    2-D matmul `(B*T, n) @ (n, m) + b`.  Why not einsum: TensorFlow
    differentiates it through a batch matmul broadcast over B, so each
    kernel gradient is a `(B, n, m)` batch of partial products summed over
    B afterwards (50 MB per projection at batch 64 x 64, d_model 256).  The
    bias goes on the 2-D product for its gradient's sake: a column sum of
    `(B*T, m)`, which XLA's CPU backend reduces 4x faster than the same sum
    over the two leading axes of `(B, T, h, k)`.
    """
    lead = leading_shape(x, len(x.shape) - contract)  # (B, T)
    inner = int(np.prod(kernel.shape[:contract]))
    rows = ops.reshape(x, (-1, inner))  # (B*T, n)
    out = ops.matmul(rows, ops.reshape(kernel, (inner, -1)))  # (B*T, m)
    if bias is not None:
        out = out + ops.reshape(bias, (-1,))
    return ops.reshape(out, (*lead, *kernel.shape[contract:]))  # (B, T, ...)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention with masks and a key/value cache.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, where
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) (Section 3.2.2); `num_heads`
    is the paper's h, `key_dim` its d_k and `value_dim` its d_v.

    When the query, key and value have the same width, the three projections
    live in one kernel `(d_model, h, 2 d_k + d_v)`; self-attention then costs
    a single matmul, and cross-attention slices the kernel.

    Masking: the query padding mask, key/value padding mask, causal mask and an
    explicit attention mask are AND-ed into one `(B, T, S)` mask.  Keras
    masks on `query`, `value` and `key` are read automatically; the query mask
    is put back on the output.  Masked scores are filled with the float32
    minimum and the softmax runs in float32, so fully masked rows never NaN.

    On the JAX backend, when the weights are not asked for and there is no
    dropout on them, the heads come from `keras.ops.dot_product_attention`
    (cuDNN's fused kernel on a GPU in bfloat16/float16); the result is the
    same function (see `fused_dot_product_attention`).

    Args:
        num_heads: h, the number of heads.
        key_dim: d_k, width of each query/key head; `query_width // h` if None.
        value_dim: d_v, width of each value head; `key_dim` if None.
        dropout: dropout rate on the attention weights.
        use_bias: whether the projections have biases.
        output_dim: width of the output; the query's width if None.
        scorer: `"dot"` (scaled dot product, the paper) or `"additive"`
            (Bahdanau et al., 2015: w^T tanh(q + k), no scaling).
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the biases.

    Call arguments:
        query: `(B, T, d_q)`.
        value: `(B, S, d_v_in)`.
        key: `(B, S, d_k_in)`, `value` if None.
        query_mask / value_mask / key_mask: boolean padding masks `(B, T)`,
            `(B, S)`, `(B, S)`; `key_mask` defaults to `value_mask`.
        attention_mask: boolean `(B, T, S)` or `(T, S)`; `True` attends.
        use_causal_mask: forbid attending to later positions.
        return_attention_scores: also return the weights `(B, h, T, S)`.
        training: enables dropout.
        cache: a `(key, value)` pair of projected tensors, head-major
            `(B, h, S_max, d)` (the layout the attention matmuls read without
            a transpose).  With `cache_update_index`, the new keys/values are
            written at that position (self-attention decoding); each of the
            pair may then also be a tuple of `n` equal chunks `(B, h, S_max /
            n, d)` along positions, of which a step writes only one (see
            `Transformer.init_cache`); without `cache_update_index`,
            the cache is used as the projected keys/values (precomputed
            cross-attention, see `project_key_value(..., heads_first=True)`).
            A precomputed cache may have fewer rows than the query: with
            `B_q = g * B`, query rows `g * b` to `g * b + g - 1` all attend
            to cache row `b` (the beams of one sentence share its encoder
            keys/values), and each cache row is read once for its group.
        cache_update_index: position of the first query in the cache.

    Returns:
        The output `(B, T, output_dim)`; with `return_attention_scores`, a
        tuple `(output, weights)`; when `cache` is given, the updated cache is
        appended to the tuple.

    Example:
    >>> layer = keras_transformer.layers.MultiHeadAttention(num_heads=2)
    >>> x = keras.random.normal((2, 5, 16))
    >>> layer(x, x, use_causal_mask=True).shape
    (2, 5, 16)

    References:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017.
    """

    def __init__(
        self,
        num_heads,
        key_dim=None,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_dim=None,
        scorer="dot",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.key_dim = check_positive_int("key_dim", key_dim, allow_none=True)
        self.value_dim = check_positive_int("value_dim", value_dim, allow_none=True)
        self.dropout = check_rate("dropout", dropout)
        self.use_bias = use_bias
        self.output_dim = check_positive_int("output_dim", output_dim, allow_none=True)
        self.scorer = check_choice("scorer", scorer, SCORERS)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)

    def build(self, query_shape, value_shape, key_shape=None):
        query_width = query_shape[-1]
        value_width = value_shape[-1]
        key_width = value_width if key_shape is None else key_shape[-1]
        if self.key_dim is None and query_width % self.num_heads != 0:
            raise ValueError(
                f"hidden_dim (the query width) must be divisible by num_heads; "
                f"received hidden_dim={query_width}, num_heads={self.num_heads}."
            )
        h = self.num_heads
        self._head_key_dim = self.key_dim or query_width // h
        self._head_value_dim = self.value_dim or self._head_key_dim
        dk, dv = self._head_key_dim, self._head_value_dim
        self._output_width = self.output_dim or query_width
        self._fused = query_width == key_width == value_width
        if self._fused:
            self.qkv_kernel = self._weight(
                "qkv_kernel", (query_width, h, 2 * dk + dv), parts=(dk, dk, dv)
            )
            self.qkv_bias = self._bias("qkv_bias", (h, 2 * dk + dv))
        else:
            self.query_kernel = self._weight("query_kernel", (query_width, h, dk))
            self.key_kernel = self._weight("key_kernel", (key_width, h, dk))
            self.value_kernel = self._weight("value_kernel", (value_width, h, dv))
            self.query_bias = self._bias("query_bias", (h, dk))
            self.key_bias = self._bias("key_bias", (h, dk))
            self.value_bias = self._bias("value_bias", (h, dv))
        self.output_kernel = self._weight(
            "output_kernel", (h, dv, self._output_width), fan_in_axes=2
        )
        self.output_bias = self._bias("output_bias", (self._output_width,))
        if self.scorer == "additive":
            self.score_weight = self._weight("score_weight", (h, dk))
        self.dropout_layer.build(None)
        self.built = True

    def _weight(self, name, shape, parts=None, fan_in_axes=1):
        """A kernel initialised as the 2-D matrix (or matrices) it stands for.

        Keras' fan computation treats a 3-D kernel as a convolution; initialise
        each projection as its `(fan_in, fan_out)` matrix instead, so that
        Glorot scaling matches a dense layer of the same shape.
        """
        base = self.kernel_initializer
        parts = parts or (shape[-1],)

        def initializer(shape, dtype=None):
            fan_in = int(np.prod(shape[:fan_in_axes]))
            pieces = []
            for width in parts:
                piece_shape = (*shape[:-1], width)
                flat = base((fan_in, int(np.prod(piece_shape)) // fan_in), dtype=dtype)
                pieces.append(ops.reshape(flat, piece_shape))
            return ops.concatenate(pieces, axis=-1) if len(pieces) > 1 else pieces[0]

        return self.add_weight(name=name, shape=shape, initializer=initializer)

    def _bias(self, name, shape):
        if not self.use_bias:
            return None
        return self.add_weight(name=name, shape=shape, initializer=self.bias_initializer)

    def _project(self, x, kernel, bias):
        return _matmul_2d(x, kernel, 1, bias)  # (B, T, h, k)

    def project_query(self, query):
        """Q W^Q: `(B, T, d_q) -> (B, T, h, d_k)`."""
        if not self._fused:
            return self._project(query, self.query_kernel, self.query_bias)
        dk = self._head_key_dim
        bias = None if self.qkv_bias is None else self.qkv_bias[:, :dk]
        return self._project(query, self.qkv_kernel[:, :, :dk], bias)

    def project_key_value(self, value, key=None, heads_first=False):
        """(K W^K, V W^V): each `(B, S, h, d)`; precomputes a cross cache.

        With `heads_first`, each is returned head-major `(B, h, S, d)`, the
        layout of a `cache`.
        """
        if heads_first:
            k, v = self.project_key_value(value, key)
            return ops.transpose(k, (0, 2, 1, 3)), ops.transpose(v, (0, 2, 1, 3))
        key = value if key is None else key
        if not self._fused:
            return (
                self._project(key, self.key_kernel, self.key_bias),
                self._project(value, self.value_kernel, self.value_bias),
            )
        dk = self._head_key_dim
        bias = None if self.qkv_bias is None else self.qkv_bias[:, dk:]
        if key is value:
            kv = self._project(value, self.qkv_kernel[:, :, dk:], bias)  # (B, S, h, dk+dv)
            k, v = ops.split(kv, [dk], axis=-1)  # a split, not slices (see _project_all)
            return k, v
        k_bias = None if bias is None else bias[:, :dk]
        v_bias = None if bias is None else bias[:, dk:]
        return (
            self._project(key, self.qkv_kernel[:, :, dk : 2 * dk], k_bias),
            self._project(value, self.qkv_kernel[:, :, 2 * dk :], v_bias),
        )

    def _project_all(self, query, value, key):
        if self._fused and query is value and key is value:
            qkv = self._project(query, self.qkv_kernel, self.qkv_bias)  # (B, T, h, 2dk+dv)
            dk = self._head_key_dim
            # One split, not three slices: in a TF graph the gradient of each
            # slice writes a zero-padded full-size tensor that is then summed;
            # the split's gradient is one concatenation.
            q, k, v = ops.split(qkv, [dk, 2 * dk], axis=-1)
            return q, k, v
        k, v = self.project_key_value(value, key)
        return self.project_query(query), k, v

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        cache=None,
        cache_update_index=None,
    ):
        if key is None:
            key = value
        if key_mask is None:
            key_mask = value_mask
        causal_offset = 0
        query_rows = None
        if cache is not None and cache_update_index is None:
            q = self.project_query(query)
            k, v = cache  # precomputed (B, h, S, d_k), (B, h, S, d_v)
            # Query rows may come in groups that share a cache row (the beams
            # of one sentence against its encoder output): group g's queries
            # become one row of g * T, so each cache row is read once.
            query_rows, query_length = ops.shape(q)[0], ops.shape(q)[1]
            cache_rows = ops.shape(k)[0]
            kv_cache.check_query_groups(query_rows, cache_rows)
            q = ops.reshape(q, (cache_rows, -1, *ops.shape(q)[2:]))
            query_mask = kv_cache.group_rows(query_mask, cache_rows)
            if attention_mask is not None and len(attention_mask.shape) == 3:
                attention_mask = kv_cache.group_rows(attention_mask, cache_rows)
        else:
            q, k, v = self._project_all(query, value, key)
        if cache is not None and cache_update_index is not None:
            k_cache, v_cache = cache
            k = kv_cache.write_cache(k_cache, k, cache_update_index)  # (B, h, S_max, d_k)
            v = kv_cache.write_cache(v_cache, v, cache_update_index)  # (B, h, S_max, d_v)
            cache = (k, v)
            causal_offset = cache_update_index
            key_mask = None  # cache slots past the causal frontier are masked causally
        heads_first = cache is not None  # k, v: (B, h, S, d)
        mask = merge_attention_masks(
            q, k, query_mask, key_mask, attention_mask, use_causal_mask, causal_offset,
            key_length=kv_cache.cache_length(k) if heads_first else None,
        )

        def dropout_fn(w):
            return self.dropout_layer(w, training=training)

        dropout = dropout_fn if self.dropout > 0 else None
        if (
            self.scorer == "dot"
            and dropout is None
            and not return_attention_scores
            and not heads_first
            and fused_attention_available()
        ):
            heads = fused_dot_product_attention(q, k, v, mask)  # no weights needed
        elif self.scorer == "dot":
            heads, weights = scaled_dot_product_attention(
                q, k, v, mask, dropout_fn=dropout, heads_first=heads_first
            )
        else:
            heads, weights = additive_attention(
                q, k, v, self.score_weight, mask, dropout_fn=dropout,
                heads_first=heads_first,
            )
        if query_rows is not None:  # back from groups of g * T to (B_q, T)
            heads = kv_cache.ungroup_rows(heads, query_rows, query_length)
            if return_attention_scores:
                weights = kv_cache.ungroup_weights(
                    weights, query_rows, query_length, cache_rows
                )
        output = _matmul_2d(heads, self.output_kernel, 2, self.output_bias)  # (B, T, d_out)
        results = (output,)
        if return_attention_scores:
            results += (weights,)
        if cache is not None:
            results += (cache,)
        return results[0] if len(results) == 1 else results

    def compute_mask(self, query, previous_mask=None, *args, **kwargs):
        # Keras calls `compute_mask(query, previous_mask)` where
        # `previous_mask` is the query's Keras mask; the old signature read it
        # as `value` and always returned None, dropping the query mask that
        # the docstring promises to put back on the output.
        return previous_mask

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_dim": self.output_dim,
                "scorer": self.scorer,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
