"""The encoder-decoder Transformer (Vaswani et al., 2017, Figure 1)."""

import dataclasses

import keras
from keras import ops

from keras_transformer.layers import kv_cache
from keras_transformer.layers._dropout import Dropout
from keras_transformer.layers._norm import sequence_layer_norm
from keras_transformer.layers.masking import padding_mask
from keras_transformer.layers.token_and_position_embedding import (
    TokenAndPositionEmbedding,
)
from keras_transformer.layers.transformer_decoder_block import TransformerDecoderBlock
from keras_transformer.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_transformer.layers.validation import (
    check_choice,
    check_divisible,
    check_positive_int,
    check_rate,
    check_token_ids,
)
from keras_transformer.models._serialization import with_dtype_policy
from keras_transformer.models._xla_dropout import XLADropoutMixin
from keras_transformer.models.transformer_config import TransformerConfig, get_preset


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(XLADropoutMixin, keras.Model):
    """The sequence-to-sequence Transformer, as a functional Keras model.

    N encoder blocks over the embedded source, N decoder blocks over the
    embedded, right-shifted target attending to the encoder output, and a
    projection onto the vocabulary (Figure 1).  With `tie_embeddings`, one
    matrix is the source embedding, the target embedding and the pre-softmax
    projection (Section 3.4).  Every argument is a field of
    `TransformerConfig`; see it for the paper's symbols and defaults.

    Masking: id 0 is padding in both inputs; the source padding mask is
    applied to encoder self-attention and to cross-attention, the target
    padding and causal masks to decoder self-attention.  The logits carry no
    Keras mask: the loss decides what padding means.

    Inputs: `encoder_token_ids` `(B, S)` and `decoder_token_ids` `(B, T)`, int32.
    Output: `logits` `(B, T, target vocabulary)`, float32 under any policy.

    For decoding, `encode`, `init_cache` and `decode_step` run the same layers
    one target position at a time against a key/value cache.

    Example:
    >>> model = keras_transformer.models.Transformer.from_preset("tiny")
    >>> ids = keras.ops.array([[5, 6, 7, 0]])
    >>> model({"encoder_token_ids": ids, "decoder_token_ids": ids}).shape
    (1, 4, 1000)
    """

    def __init__(self, vocabulary_size, **kwargs):
        config_fields = {f.name for f in dataclasses.fields(TransformerConfig)}
        model_kwargs = {k: v for k, v in kwargs.items() if k not in config_fields}
        config = TransformerConfig().replace(
            vocabulary_size=vocabulary_size,
            **{k: v for k, v in kwargs.items() if k in config_fields},
        )
        _validate(config)
        self.config = config
        c = config
        policy = model_kwargs.pop("dtype", None)
        block_args = dict(
            intermediate_dim=c.intermediate_dim,
            num_heads=c.num_heads,
            key_dim=c.key_dim,
            value_dim=c.value_dim,
            dropout=c.dropout,
            attention_dropout=c.attention_dropout,
            activation=c.activation,
            layer_norm_epsilon=c.layer_norm_epsilon,
            normalize_first=c.normalize_first,
            dtype=policy,
        )

        # === Layers ===
        def embedding(vocab, name):
            return TokenAndPositionEmbedding(
                vocab, c.hidden_dim, c.max_sequence_length, positions=c.positions,
                dtype=policy, name=name,
            )

        target_vocabulary = c.target_vocabulary_size or c.vocabulary_size
        if c.tie_embeddings:
            self.encoder_embedding = embedding(c.vocabulary_size, "shared_embedding")
            self.decoder_embedding = self.encoder_embedding
            self.output_projection = None
        else:
            self.encoder_embedding = embedding(c.vocabulary_size, "encoder_embedding")
            self.decoder_embedding = embedding(target_vocabulary, "decoder_embedding")
            self.output_projection = keras.layers.Dense(
                target_vocabulary, use_bias=False, dtype=policy, name="output_projection"
            )
        self.embedding_dropout = Dropout(c.dropout, dtype=policy)
        self.encoder_blocks = [
            TransformerEncoderBlock(**block_args, name=f"encoder_block_{i}")
            for i in range(c.num_layers)
        ]
        self.decoder_blocks = [
            TransformerDecoderBlock(**block_args, name=f"decoder_block_{i}")
            for i in range(c.num_layers)
        ]
        # A pre-LN stack leaves its output unnormalised; close it with a norm.
        self.encoder_norm = self.decoder_norm = None
        if c.normalize_first:
            self.encoder_norm = sequence_layer_norm(c.layer_norm_epsilon, policy, "encoder_norm")
            self.decoder_norm = sequence_layer_norm(c.layer_norm_epsilon, policy, "decoder_norm")
        self.logits_cast = keras.layers.Activation("linear", dtype="float32", name="logits")

        # === Functional model ===
        encoder_token_ids = keras.Input((None,), dtype="int32", name="encoder_token_ids")
        decoder_token_ids = keras.Input((None,), dtype="int32", name="decoder_token_ids")
        encoder_output = self.encode(encoder_token_ids)
        decoder_mask = padding_mask(decoder_token_ids)
        x = self.embedding_dropout(self.decoder_embedding(decoder_token_ids))
        for block in self.decoder_blocks:
            x = block(
                x,
                encoder_output,
                decoder_sequence_mask=decoder_mask,
                encoder_sequence_mask=padding_mask(encoder_token_ids),
            )
        logits = self._logits(x)
        super().__init__(
            inputs={"encoder_token_ids": encoder_token_ids, "decoder_token_ids": decoder_token_ids},
            outputs=logits,
            dtype=policy,
            **model_kwargs,
        )

    def call(self, inputs, training=None, mask=None, **kwargs):
        # Validate before the functional graph casts the inputs to int32.
        if isinstance(inputs, dict):
            for name in ("encoder_token_ids", "decoder_token_ids"):
                if name in inputs:
                    check_token_ids(name, inputs[name])
        # Explicit class: AutoGraph cannot resolve zero-argument super().
        return super(Transformer, self).call(inputs, training=training, mask=mask, **kwargs)  # noqa: UP008 (AutoGraph)

    # --- pieces shared by the functional graph and step-by-step decoding ---
    def encode(self, encoder_token_ids, training=None):
        """The encoder stack: `(B, S)` ids -> `(B, S, d_model)`."""
        mask = padding_mask(encoder_token_ids)
        x = self.embedding_dropout(self.encoder_embedding(encoder_token_ids), training=training)
        for block in self.encoder_blocks:
            x = block(x, mask=mask, training=training)
        return x if self.encoder_norm is None else self.encoder_norm(x)

    def _logits(self, x):
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        if self.output_projection is None:
            x = self.decoder_embedding(x, reverse=True)  # (B, T, V)
        else:
            x = self.output_projection(x)  # (B, T, V)
        return self.logits_cast(x)

    #: Cache entries that `decode_step` never writes: computed once from the
    #: encoder by `init_cache`, so identical across the beams of a sentence.
    #: Beam search keeps them at one row per sentence (neither tiled nor
    #: reordered); `decode_step` accepts `beams * B` token rows against them,
    #: since cross-attention shares a cache row among consecutive query rows.
    static_cache_entries = ("cross_key", "cross_value", "encoder_padding_mask")

    def init_cache(self, encoder_token_ids, encoder_output, max_length):
        """Key/value cache for decoding up to `max_length` target positions.

        The cross-attention keys/values are projected once here; each
        `decode_step` then costs one position.  Every entry has the batch on
        axis 0 so that beam search can tile and reorder it.
        """
        batch = ops.shape(encoder_output)[0]
        cache = {
            "self_key": [], "self_value": [], "cross_key": [], "cross_value": [],
            "encoder_padding_mask": padding_mask(encoder_token_ids),
        }
        for block in self.decoder_blocks:
            attention = block.self_attention
            for name, width in (("self_key", attention.head_key_dim),
                                ("self_value", attention.head_value_dim)):
                cache[name].append(ops.zeros(
                    (batch, self.config.num_heads, max_length, width),
                    # The layer's, which writes it (a functional model's own
                    # compute dtype stays float32 under a mixed policy).
                    dtype=attention.compute_dtype,
                ))  # (B, h, T_max, d): head-major, read without a transpose
            key, value = block.cross_attention.project_key_value(
                encoder_output, heads_first=True
            )
            cache["cross_key"].append(key)  # (B, h, S, d_k)
            cache["cross_value"].append(value)  # (B, h, S, d_v)
        return cache

    def decode_step(self, token_ids, cache, index):
        """Logits of the next token: `(B, 1)` ids at position `index` -> `(B, V)`."""
        x = self.decoder_embedding(token_ids, start_index=index)  # (B, 1, d)
        new_cache = dict(cache, self_key=[], self_value=[])
        # The position's write rows and causal row, made once for every layer.
        position = kv_cache.CachePosition(index, cache["self_key"][0])
        for i, block in enumerate(self.decoder_blocks):
            x, (key, value) = block(
                x,
                encoder_sequence_mask=cache["encoder_padding_mask"],
                self_attention_cache=(cache["self_key"][i], cache["self_value"][i]),
                self_attention_cache_update_index=position,
                cross_attention_cache=(cache["cross_key"][i], cache["cross_value"][i]),
                training=False,
            )
            new_cache["self_key"].append(key)
            new_cache["self_value"].append(value)
        return self._logits(x)[:, 0, :], new_cache

    def attention_weights(self, encoder_token_ids, decoder_token_ids):
        """Every layer's attention weights, for plots: a dict of lists of `(B, h, T, S)`."""
        enc_mask = padding_mask(encoder_token_ids)
        dec_mask = padding_mask(decoder_token_ids)
        weights = {"encoder": [], "decoder_self": [], "cross": []}
        x = self.encoder_embedding(encoder_token_ids)
        for block in self.encoder_blocks:
            x, w = block(x, mask=enc_mask, return_attention_scores=True)
            weights["encoder"].append(w)
        memory = x if self.encoder_norm is None else self.encoder_norm(x)
        y = self.decoder_embedding(decoder_token_ids)
        for block in self.decoder_blocks:
            y, w = block(
                y, memory, decoder_sequence_mask=dec_mask,
                encoder_sequence_mask=enc_mask, return_attention_scores=True,
            )
            weights["decoder_self"].append(w["self"])
            weights["cross"].append(w["cross"])
        return weights

    @classmethod
    def from_preset(cls, name, **overrides):
        """A model from a named preset (`tiny`, `base`, `big`, `table3_*`)."""
        model_kwargs = {k: overrides.pop(k) for k in ("name", "dtype") if k in overrides}
        config = get_preset(name, **overrides)
        return cls(**dataclasses.asdict(config), **model_kwargs)

    @classmethod
    def from_config_object(cls, config, **kwargs):
        return cls(**dataclasses.asdict(config), **kwargs)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            **dataclasses.asdict(self.config),
        }

    @classmethod
    def from_config(cls, config):
        return cls(**with_dtype_policy(config))


def _validate(c):
    """Reject impossible sizes before any layer is built."""
    for name in ("vocabulary_size", "num_layers", "hidden_dim", "num_heads",
                 "intermediate_dim", "max_sequence_length"):
        check_positive_int(name, getattr(c, name))
    for name in ("key_dim", "value_dim", "target_vocabulary_size"):
        check_positive_int(name, getattr(c, name), allow_none=True)
    check_rate("dropout", c.dropout)
    check_rate("attention_dropout", c.attention_dropout)
    check_choice("positions", c.positions, ("sinusoidal", "learned"))
    if c.key_dim is None:
        check_divisible("hidden_dim", c.hidden_dim, "num_heads", c.num_heads)
    if c.tie_embeddings and c.target_vocabulary_size not in (None, c.vocabulary_size):
        raise ValueError(
            "tie_embeddings=True shares one vocabulary; received vocabulary_size="
            f"{c.vocabulary_size}, target_vocabulary_size={c.target_vocabulary_size}."
        )
