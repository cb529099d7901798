"""The encoder layer of Vaswani et al. (2017), Section 3.1."""

import keras

from keras_transformer.layers._dropout import Dropout
from keras_transformer.layers._norm import sequence_layer_norm
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.validation import check_positive_int, check_rate


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerEncoderBlock(keras.layers.Layer):
    """Self-attention and a feed-forward network, each wrapped in a residual.

    Post-LN, as the paper (Section 3.1, 5.4): LayerNorm(x + Dropout(Sublayer(x))).
    With `normalize_first=True`, pre-LN: x + Dropout(Sublayer(LayerNorm(x)))
    (Xiong et al., 2020), which trains without warm-up at depth; a pre-LN
    stack needs a final LayerNorm, which the models add.

    Masking: the padding mask comes from `mask` (filled by Keras from the
    input's mask) and is used for both queries and keys; the output keeps it.

    Args:
        intermediate_dim: d_ff.
        num_heads: h.
        key_dim: d_k (d_model / h if None).
        value_dim: d_v (d_k if None).
        dropout: P_drop on each sub-layer's output (0.1 in the paper).
        attention_dropout: dropout on the attention weights.
        activation: the feed-forward activation.
        layer_norm_epsilon: epsilon of the layer norms.
        normalize_first: pre-LN instead of post-LN.
        kernel_initializer / bias_initializer: of every dense kernel/bias.

    Call arguments:
        inputs: `(B, T, d_model)`.
        mask: optional boolean `(B, T)` padding mask.
        attention_mask: optional boolean `(B, T, T)` extra mask.
        training: enables dropout.
        return_attention_scores: also return the weights `(B, h, T, T)`.

    Returns:
        `(B, T, d_model)`, or `(output, weights)`.

    Example:
    >>> block = keras_transformer.layers.TransformerEncoderBlock(32, num_heads=2)
    >>> block(keras.ops.zeros((2, 5, 16))).shape
    (2, 5, 16)
    """

    def __init__(
        self,
        intermediate_dim,
        num_heads,
        key_dim=None,
        value_dim=None,
        dropout=0.1,
        attention_dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-6,
        normalize_first=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.intermediate_dim = check_positive_int("intermediate_dim", intermediate_dim)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = check_rate("dropout", dropout)
        self.attention_dropout = check_rate("attention_dropout", attention_dropout)
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        policy = self.dtype_policy
        self.self_attention = MultiHeadAttention(
            num_heads,
            key_dim=key_dim,
            value_dim=value_dim,
            dropout=self.attention_dropout,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=policy,
            name="self_attention",
        )
        self.self_attention_norm = sequence_layer_norm(
            layer_norm_epsilon, policy, "self_attention_norm"
        )
        self.feed_forward = FeedForward(
            intermediate_dim,
            activation=self.activation,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=policy,
            name="feed_forward",
        )
        self.feed_forward_norm = sequence_layer_norm(
            layer_norm_epsilon, policy, "feed_forward_norm"
        )
        self.residual_dropout = Dropout(self.dropout, dtype=policy)

    def build(self, input_shape):
        if len(input_shape) != 3:
            raise ValueError(
                f"`inputs` must have rank 3 (batch, length, hidden_dim); "
                f"received shape={tuple(input_shape)}."
            )
        self.self_attention.build(input_shape, input_shape)
        self.self_attention_norm.build(input_shape)
        self.feed_forward.build(input_shape)
        self.feed_forward_norm.build(input_shape)
        self.residual_dropout.build(input_shape)
        self.built = True

    def call(
        self, inputs, mask=None, attention_mask=None, training=None, return_attention_scores=False
    ):
        # Sub-layer 1: multi-head self-attention.
        residual = inputs
        x = self.self_attention_norm(inputs) if self.normalize_first else inputs
        # Weights only when asked: without them the JAX backend can use a
        # fused attention kernel that never materialises them.
        x = self.self_attention(
            x,
            x,
            query_mask=mask,
            value_mask=mask,
            attention_mask=attention_mask,
            return_attention_scores=return_attention_scores,
            training=training,
        )
        x, weights = x if return_attention_scores else (x, None)
        x = residual + self.residual_dropout(x, training=training)
        if not self.normalize_first:
            x = self.self_attention_norm(x)
        # Sub-layer 2: position-wise feed-forward.
        residual = x
        if self.normalize_first:
            x = self.feed_forward_norm(x)
        x = self.feed_forward(x, training=training)
        x = residual + self.residual_dropout(x, training=training)
        if not self.normalize_first:
            x = self.feed_forward_norm(x)
        return (x, weights) if return_attention_scores else x

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_output_spec(self, *args, return_attention_scores=False, **kwargs):
        # Keras builds a symbolic output from `compute_output_shape`, which never
        # sees `return_attention_scores` (nor, in the decoder, a cache): a
        # functional call then returned one tensor where the eager call returns
        # a tuple.  Trace `call` itself whenever the output is a tuple.
        if return_attention_scores or kwargs.get("self_attention_cache") is not None:
            return keras.Operation.compute_output_spec(
                self, *args, return_attention_scores=return_attention_scores, **kwargs
            )
        return super().compute_output_spec(*args, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "normalize_first": self.normalize_first,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
