"""The decoder layer of Vaswani et al. (2017), Section 3.1."""

import keras

from keras_transformer.layers._norm import sequence_layer_norm
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.transformer_encoder_block import TransformerEncoderBlock


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerDecoderBlock(TransformerEncoderBlock):
    """Masked self-attention, cross-attention over the encoder, feed-forward.

    Section 3.1: the self-attention is causal ("ensures that the predictions
    for position i can depend only on the known outputs at positions less than
    i") and a third sub-layer attends over the encoder output.  Each sub-layer
    sits in the same residual/dropout/LayerNorm wrapper as the encoder's
    (post-LN, or pre-LN with `normalize_first=True`).

    Masking: `decoder_sequence_mask` and `encoder_sequence_mask` are the
    `(B, T)` and `(B, S)` padding masks (Keras fills them from the inputs'
    masks); the causal mask is always applied to self-attention.

    Args: as `TransformerEncoderBlock`.

    Call arguments:
        decoder_sequence: `(B, T, d_model)`.
        encoder_sequence: `(B, S, d_model)`; may be None when
            `cross_attention_cache` holds its projected keys/values.
        decoder_sequence_mask / encoder_sequence_mask: padding masks.
        self_attention_cache: `(key, value)` pair `(B, h, T_max, d)`.
        self_attention_cache_update_index: position of `decoder_sequence[:, 0]`.
        cross_attention_cache: precomputed `(key, value)` of the encoder output.
        training: enables dropout.
        return_attention_scores: also return `{"self": ..., "cross": ...}`.

    Returns:
        `(B, T, d_model)`; a tuple `(output, scores)` with
        `return_attention_scores`; the updated self-attention cache is appended
        when `self_attention_cache` is given.
    """

    def __init__(self, intermediate_dim, num_heads, **kwargs):
        super().__init__(intermediate_dim, num_heads, **kwargs)
        policy = self.dtype_policy
        self.cross_attention = MultiHeadAttention(
            num_heads,
            key_dim=self.key_dim,
            value_dim=self.value_dim,
            dropout=self.attention_dropout,
            # The query and the keys/values come from different tensors, and
            # a decoding step projects only the query: separate kernels.
            fuse_projections=False,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=policy,
            name="cross_attention",
        )
        self.cross_attention_norm = sequence_layer_norm(
            self.layer_norm_epsilon, policy, "cross_attention_norm"
        )

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        super().build(decoder_sequence_shape)
        encoder_sequence_shape = encoder_sequence_shape or decoder_sequence_shape
        self.cross_attention.build(decoder_sequence_shape, encoder_sequence_shape)
        self.cross_attention_norm.build(decoder_sequence_shape)
        self.built = True

    def _wrap(self, sublayer, norm, x, training):
        """Residual, dropout and LayerNorm around `sublayer` (pre- or post-LN)."""
        y = norm(x) if self.normalize_first else x
        y, extra = sublayer(y)
        y = x + self.residual_dropout(y, training=training)
        return (y if self.normalize_first else norm(y)), extra

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_sequence_mask=None,
        encoder_sequence_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        training=None,
        return_attention_scores=False,
    ):
        if encoder_sequence is None and cross_attention_cache is None:
            raise ValueError(
                "TransformerDecoderBlock needs `encoder_sequence` or "
                "`cross_attention_cache`; received neither."
            )

        # Weights only when asked: without them the JAX backend can use a
        # fused attention kernel that never materialises them.
        def self_attention(x):
            out = self.self_attention(
                x,
                x,
                query_mask=decoder_sequence_mask,
                value_mask=decoder_sequence_mask,
                use_causal_mask=True,
                return_attention_scores=return_attention_scores,
                training=training,
                cache=self_attention_cache,
                cache_update_index=self_attention_cache_update_index,
            )
            out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            weights = out[1] if return_attention_scores else None
            cache = out[-1] if self_attention_cache is not None else None
            return out[0], (weights, cache)

        def cross_attention(x):
            out = self.cross_attention(
                x,
                encoder_sequence if encoder_sequence is not None else x,
                query_mask=decoder_sequence_mask,
                value_mask=encoder_sequence_mask,
                return_attention_scores=return_attention_scores,
                training=training,
                cache=cross_attention_cache,
            )
            out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            return out[0], (out[1] if return_attention_scores else None)

        def feed_forward(x):
            return self.feed_forward(x, training=training), None

        x, self_out = self._wrap(
            self_attention, self.self_attention_norm, decoder_sequence, training
        )
        x, cross_weights = self._wrap(
            cross_attention, self.cross_attention_norm, x, training
        )
        x, _ = self._wrap(feed_forward, self.feed_forward_norm, x, training)
        results = (x,)
        if return_attention_scores:
            results += ({"self": self_out[0], "cross": cross_weights},)
        if self_attention_cache is not None:
            results += (self_out[1],)
        return results[0] if len(results) == 1 else results

    def compute_output_shape(self, decoder_sequence_shape, *args, **kwargs):
        return decoder_sequence_shape
