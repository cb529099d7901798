"""Multi-head attention (Vaswani et al., 2017, Section 3.2.2)."""

import keras
from keras import ops

from keras_transformer.layers import kv_cache
from keras_transformer.layers._dropout import Dropout
from keras_transformer.layers._shapes import leading_shape, reshape_dims
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


def _rows(x):
    """`(..., n)` -> `(rows, n)`: what a 2-D kernel multiplies."""
    return ops.reshape(x, (-1, x.shape[-1]))


def _project_heads(x, kernel, bias, widths, heads):
    """`x` `(B, T, n)` times a 2-D `kernel` `(n, sum(widths))`, plus `bias`,
    cut into `widths` and each shaped `(B, T, h, width / h)`.

    One 2-D matmul `(B*T, n) @ (n, m)`, with the kernel as it is stored, and
    one reshape a part, straight from the product's rows to heads.  Why 2-D
    kernels: a reshape of a kernel inside a decoding loop made XLA's CPU
    backend emit the step's matrix-vector product as a naive loop (7x
    slower); and why not einsum: TensorFlow differentiates it through a
    batch matmul broadcast over B, so each kernel gradient is a `(B, n, m)`
    batch of partial products summed over B afterwards (50 MB per
    projection at batch 64 x 64, d_model 256).  The bias goes on the 2-D
    product for its gradient's sake: a column sum of `(B*T, m)`, which
    XLA's CPU backend reduces 4x faster than the same sum over the two
    leading axes of `(B, T, h, k)`.  One split, not slices: in a TF graph
    the gradient of each slice writes a zero-padded full-size tensor that is
    then summed; the split's gradient is one concatenation.
    """
    out = ops.matmul(_rows(x), kernel)  # (B*T, m)
    if bias is not None:
        out = out + bias
    parts = ops.split(out, list(_offsets(widths)), axis=-1) if len(widths) > 1 else [out]
    lead = reshape_dims(x, len(x.shape) - 1)  # (B, T): -1 for an unknown batch
    return [ops.reshape(part, (*lead, heads, width // heads))  # (B, T, h, d)
            for part, width in zip(parts, widths, strict=True)]


def _offsets(widths):
    """Where each of `widths` but the first starts: `ops.split`'s indices."""
    total, starts = 0, []
    for width in widths[:-1]:
        total += width
        starts.append(total)
    return starts


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention with masks and a key/value cache.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, where
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) (Section 3.2.2); `num_heads`
    is the paper's h, `key_dim` its d_k and `value_dim` its d_v.

    Every kernel is a 2-D matrix, heads side by side along its columns.  When
    the query, key and value have the same width and `fuse_projections` is
    set, the three projections are one kernel `(d_model, h d_k + h d_k +
    h d_v)`, all queries, then all keys, then all values: self-attention
    costs a single matmul.  A cross-attention layer clears
    `fuse_projections` (the decoder block does): its query and its keys and
    values come from different tensors, and a decoding step projects the
    query only, from a kernel of its own.

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
        fuse_projections: one kernel for the query, key and value projections
            when their inputs have the same width (self-attention); False
            keeps three (cross-attention).
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
            written at that position (self-attention decoding); without
            `cache_update_index`, the cache is used as the projected
            keys/values (precomputed cross-attention, see
            `project_key_value(..., heads_first=True)`).
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
        fuse_projections=True,
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
        self.fuse_projections = bool(fuse_projections)
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
        dk, dv = h * self._head_key_dim, h * self._head_value_dim  # all heads' widths
        self._output_width = self.output_dim or query_width
        self._fused = self.fuse_projections and query_width == key_width == value_width
        if self._fused:
            self.qkv_kernel = self._weight("qkv_kernel", query_width, (dk, dk, dv))
            self.qkv_bias = self._bias("qkv_bias", 2 * dk + dv)
        else:
            self.query_kernel = self._weight("query_kernel", query_width, (dk,))
            self.key_kernel = self._weight("key_kernel", key_width, (dk,))
            self.value_kernel = self._weight("value_kernel", value_width, (dv,))
            self.query_bias = self._bias("query_bias", dk)
            self.key_bias = self._bias("key_bias", dk)
            self.value_bias = self._bias("value_bias", dv)
        self.output_kernel = self._weight("output_kernel", dv, (self._output_width,))
        self.output_bias = self._bias("output_bias", self._output_width)
        if self.scorer == "additive":
            self.score_weight = self.add_weight(
                name="score_weight", shape=(h, self._head_key_dim),
                initializer=self._initializer((self._head_key_dim,)),
            )
        self.dropout_layer.build(None)
        self.built = True

    @property
    def head_key_dim(self):
        """d_k as built: `key_dim`, or the query's width over `num_heads`."""
        return self._head_key_dim

    @property
    def head_value_dim(self):
        """d_v as built: `value_dim`, or d_k."""
        return self._head_value_dim

    @property
    def fused(self):
        """Whether the query, key and value projections are one kernel (`qkv_kernel`)."""
        return self._fused

    def projection_weights(self):
        """Each projection's `(kernel, bias)` as 2-D and 1-D tensors, whatever
        the layout: `{"query", "key", "value", "output"}`, kernels `(in, h d)`
        with heads side by side (head i at columns `i d` to `i d + d - 1`),
        the output's `(h d_v, d_out)`; a bias is None without biases.
        For exporters that write another engine's layout."""
        if self._fused:
            dk = self.num_heads * self._head_key_dim
            kernels = ops.split(ops.convert_to_tensor(self.qkv_kernel), [dk, 2 * dk], axis=-1)
            biases = (None,) * 3 if self.qkv_bias is None else ops.split(
                ops.convert_to_tensor(self.qkv_bias), [dk, 2 * dk], axis=-1)
        else:
            kernels = (self.query_kernel, self.key_kernel, self.value_kernel)
            biases = (self.query_bias, self.key_bias, self.value_bias)
        weights = dict(zip(("query", "key", "value"), zip(kernels, biases, strict=True),
                           strict=True))
        weights["output"] = (self.output_kernel, self.output_bias)
        return weights

    def _initializer(self, parts):
        """Each of `parts` (column widths) initialised as a matrix of its own.

        Glorot scaling then matches a dense layer of each projection's
        shape, not of the concatenated kernel's.
        """
        base = self.kernel_initializer

        def initializer(shape, dtype=None):
            pieces = [base((shape[0], width), dtype=dtype) for width in parts]
            return ops.concatenate(pieces, axis=-1) if len(pieces) > 1 else pieces[0]

        return initializer

    def _weight(self, name, fan_in, parts):
        return self.add_weight(
            name=name, shape=(fan_in, sum(parts)), initializer=self._initializer(parts)
        )

    def _bias(self, name, width):
        if not self.use_bias:
            return None
        return self.add_weight(name=name, shape=(width,), initializer=self.bias_initializer)

    def project_query(self, query):
        """Q W^Q: `(B, T, d_q) -> (B, T, h, d_k)`."""
        h, width = self.num_heads, self.num_heads * self._head_key_dim
        if not self._fused:
            return _project_heads(query, self.query_kernel, self.query_bias, [width], h)[0]
        bias = None if self.qkv_bias is None else self.qkv_bias[:width]
        return _project_heads(query, self.qkv_kernel[:, :width], bias, [width], h)[0]

    def project_key_value(self, value, key=None, heads_first=False):
        """(K W^K, V W^V): each `(B, S, h, d)`; precomputes a cross cache.

        With `heads_first`, each is returned head-major `(B, h, S, d)`, the
        layout of a `cache`.
        """
        if heads_first:
            k, v = self.project_key_value(value, key)
            return ops.transpose(k, (0, 2, 1, 3)), ops.transpose(v, (0, 2, 1, 3))
        key = value if key is None else key
        h = self.num_heads
        dk, dv = h * self._head_key_dim, h * self._head_value_dim
        if not self._fused:
            return (
                _project_heads(key, self.key_kernel, self.key_bias, [dk], h)[0],
                _project_heads(value, self.value_kernel, self.value_bias, [dv], h)[0],
            )
        bias = None if self.qkv_bias is None else self.qkv_bias[dk:]
        if key is value:
            k, v = _project_heads(value, self.qkv_kernel[:, dk:], bias, [dk, dv], h)
            return k, v
        k_bias = None if bias is None else bias[:dk]
        v_bias = None if bias is None else bias[dk:]
        return (
            _project_heads(key, self.qkv_kernel[:, dk : 2 * dk], k_bias, [dk], h)[0],
            _project_heads(value, self.qkv_kernel[:, 2 * dk :], v_bias, [dv], h)[0],
        )

    def _project_all(self, query, value, key):
        if self._fused and query is value and key is value:
            h = self.num_heads
            dk, dv = h * self._head_key_dim, h * self._head_value_dim
            q, k, v = _project_heads(query, self.qkv_kernel, self.qkv_bias, [dk, dk, dv], h)
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
        if cache is not None and query.shape[1] == 1:
            # A decoding step's one position: its padded rows (a finished
            # sentence's padding) are never read, and masking them costs
            # ops every step.
            query_mask = None
        grouped = False
        if cache is not None and cache_update_index is None:
            q = self.project_query(query)
            k, v = cache  # precomputed (B, h, S, d_k), (B, h, S, d_v)
            # Query rows may come in groups that share a cache row (the beams
            # of one sentence against its encoder output): group g's queries
            # become one row of g * T, so each cache row is read once.
            kv_cache.check_query_groups(q.shape[0], k.shape[0])
            if q.shape[0] is None or q.shape[0] != k.shape[0]:
                grouped = True
                cache_rows = leading_shape(k, 1)[0]
                q = ops.reshape(q, (cache_rows, -1, *q.shape[2:]))  # (B, g * T, h, d_k)
                query_mask = kv_cache.group_rows(query_mask, cache_rows)
                if attention_mask is not None and len(attention_mask.shape) == 3:
                    attention_mask = kv_cache.group_rows(attention_mask, cache_rows)
        else:
            q, k, v = self._project_all(query, value, key)
        if cache is not None and cache_update_index is not None:
            k_cache, v_cache = cache
            k, v = kv_cache.write_caches(
                (k_cache, v_cache), (k, v), cache_update_index
            )  # (B, h, S_max, d_k), (B, h, S_max, d_v)
            cache = (k, v)
            causal_offset = kv_cache.position_index(cache_update_index)
            key_mask = None  # cache slots past the causal frontier are masked causally
            if use_causal_mask and isinstance(cache_update_index, kv_cache.CachePosition):
                # The step's causal row, made once for every layer.
                use_causal_mask = False
                row = cache_update_index.key_mask  # (1, 1, S_max)
                attention_mask = row if attention_mask is None else ops.logical_and(
                    ops.cast(attention_mask, "bool"), row)
        heads_first = cache is not None  # k, v: (B, h, S, d)

        def dropout_fn(w):
            return self.dropout_layer(w, training=training)

        dropout = dropout_fn if self.dropout > 0 else None
        fused = (
            self.scorer == "dot"
            and dropout is None
            and not return_attention_scores
            and not heads_first
            and fused_attention_available()
        )
        # A mask that broadcasts to (B, T, S) is all the scores' `where`
        # needs; only the backend's fused kernel is given the full one.
        # A cache's length is read only where a mask needs it (a shape op).
        needs_length = heads_first and (use_causal_mask or fused)
        mask = merge_attention_masks(
            q, k, query_mask, key_mask, attention_mask, use_causal_mask, causal_offset,
            key_length=kv_cache.cache_length(k) if needs_length else None,
            broadcast=fused,
        )
        if fused:
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
        if grouped and return_attention_scores:  # back from groups of g * T to (B_q, T)
            query_rows, query_length = leading_shape(query, 2)
            weights = kv_cache.ungroup_weights(weights, query_rows, query_length, cache_rows)
        # Heads -> rows: grouped heads (B, g * T, h, d_v) hold the query rows
        # in their own order, so no ungrouping is needed on the way.
        rows = ops.reshape(heads, (-1, heads.shape[2] * heads.shape[3]))  # (B_q*T, h d_v)
        output = ops.matmul(rows, self.output_kernel)  # (B_q*T, d_out)
        if self.output_bias is not None:
            output = output + self.output_bias
        output = ops.reshape(output, (*reshape_dims(query, 2), self._output_width))  # (B_q, T, d_out)
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
                "fuse_projections": self.fuse_projections,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
