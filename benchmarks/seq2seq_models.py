"""The two seq2seq models the benchmarks compare, built at the same sizes.

`ours(...)` is `keras_transformer.models.Transformer`; `keras_hub_seq2seq(...)`
is the same architecture assembled from KerasHub's public layers
(`TokenAndPositionEmbedding`, `TransformerEncoder`, `TransformerDecoder`) as
a functional model, the way the keras.io translation example builds it.

Kept equal between the two: N, d_model, h, d_ff, vocabulary, post-LN, ReLU,
dropout 0.1 on residuals *and* attention weights (KerasHub applies its one
`dropout` to both, so ours gets `attention_dropout=dropout`), explicit padding
masks from `ids != 0` (no implicit Keras mask reaches the logits, so the loss
is the same plain mean on both), and an output projection without bias.
Left as each library does it: positions (ours sinusoidal, KerasHub learned:
2 x max_length x d_model extra parameters, no FLOPs) and LayerNorm epsilon.

With `tied=True` KerasHub shares one `ReversibleEmbedding` between the
encoder, the decoder and the output (its `reverse=True` call), like ours with
`tie_embeddings=True`; with `tied=False` it has two embeddings and an
untied `Dense` output, like ours with `tie_embeddings=False`.
"""

import keras

from keras_transformer.models import Transformer


def ours(vocabulary_size, num_layers, hidden_dim, num_heads, intermediate_dim,
         max_sequence_length, tied=True, dropout=0.1, attention_dropout=None,
         name=None):
    """Ours; `attention_dropout` defaults to `dropout`, as KerasHub's layers do."""
    return Transformer(
        vocabulary_size=vocabulary_size,
        num_layers=num_layers,
        hidden_dim=hidden_dim,
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        max_sequence_length=max_sequence_length,
        dropout=dropout,
        attention_dropout=dropout if attention_dropout is None else attention_dropout,
        tie_embeddings=tied,
        name=name,
    )


def keras_hub_seq2seq(vocabulary_size, num_layers, hidden_dim, num_heads,
                      intermediate_dim, max_sequence_length, tied=False,
                      dropout=0.1, name=None):
    import keras_hub

    def embedding(layer_name):
        return keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size, max_sequence_length, hidden_dim,
            # tie_weights=False would add an unused `reverse_embeddings`
            # matrix (V x d, never trained); the untied output is a Dense.
            tie_weights=True, mask_zero=False, name=layer_name,
        )

    encoder_ids = keras.Input((None,), dtype="int32", name="encoder_token_ids")
    decoder_ids = keras.Input((None,), dtype="int32", name="decoder_token_ids")
    encoder_mask = keras.ops.not_equal(encoder_ids, 0)  # (B, S)
    decoder_mask = keras.ops.not_equal(decoder_ids, 0)  # (B, T)
    if tied:
        encoder_embedding = decoder_embedding = embedding("shared_embedding")
    else:
        encoder_embedding = embedding("encoder_embedding")
        decoder_embedding = embedding("decoder_embedding")

    x = keras.layers.Dropout(dropout)(encoder_embedding(encoder_ids))
    for i in range(num_layers):
        x = keras_hub.layers.TransformerEncoder(
            intermediate_dim, num_heads, dropout=dropout, name=f"encoder_{i}"
        )(x, padding_mask=encoder_mask)
    y = keras.layers.Dropout(dropout)(decoder_embedding(decoder_ids))
    for i in range(num_layers):
        y = keras_hub.layers.TransformerDecoder(
            intermediate_dim, num_heads, dropout=dropout, name=f"decoder_{i}"
        )(y, x, decoder_padding_mask=decoder_mask, encoder_padding_mask=encoder_mask)
    if tied:
        logits = decoder_embedding.token_embedding(y, reverse=True)  # (B, T, V)
    else:
        logits = keras.layers.Dense(vocabulary_size, use_bias=False, name="logits")(y)
    return keras.Model(
        {"encoder_token_ids": encoder_ids, "decoder_token_ids": decoder_ids},
        logits,
        name=name,
    )


def build(kind, sizes, **kwargs):
    """`kind` in {"ours", "keras_hub"}; `sizes` a dict of the shared sizes."""
    if kind == "ours":
        return ours(**sizes, **kwargs)
    if kind == "keras_hub":
        return keras_hub_seq2seq(**sizes, **kwargs)
    raise ValueError(f"kind must be 'ours' or 'keras_hub'; received kind={kind!r}.")


def model_flops_per_step(sizes, batch, source_length, target_length):
    """Model FLOPs of one training step (forward + backward), nanoGPT-style.

    nanoGPT's `estimate_mfu` counts 6 N per token for the weights (2 N
    forward, 4 N backward) plus 12 L d T per token for attention (QK^T and
    AV, 2 x 2 T d forward, times 3 with the backward).  For the seq2seq model
    each weight matrix is counted on the tokens that pass through it:

        encoder layer: 4 d^2 + 2 d d_ff per source token
        decoder layer: 4 d^2 + 2 d d_ff per target token (self-attn Q,K,V,O,
                       FFN) + 2 d^2 per target token (cross Q, O)
                       + 2 d^2 per source token (cross K, V)
        output:        d V per target token (counted whether tied or not)
        attention:     per layer 4 d (S^2 + T^2 + T S) per sequence forward
                       (encoder self, decoder self with no causal discount,
                       cross)

    FLOPs = 6 B [S N_src + T N_tgt] + 12 B L d (S^2 + T^2 + T S).
    Embedding look-ups, biases, norms, softmax and the optimizer are not
    counted.  Both models are charged the same FLOPs, so MFU ratios equal
    throughput ratios.
    """
    d, f = sizes["hidden_dim"], sizes["intermediate_dim"]
    layers, vocab = sizes["num_layers"], sizes["vocabulary_size"]
    s, t = source_length, target_length
    per_source_token = layers * (4 * d * d + 2 * d * f) + layers * 2 * d * d
    per_target_token = layers * (6 * d * d + 2 * d * f) + d * vocab
    weights = 6 * batch * (s * per_source_token + t * per_target_token)
    attention = 12 * batch * layers * d * (s * s + t * t + t * s)
    return weights + attention
