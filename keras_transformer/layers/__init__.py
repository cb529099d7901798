"""Transformer layers, each in `keras.ops` only (any Keras 3 backend)."""

from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.masking import (
    causal_mask,
    merge_attention_masks,
    padding_mask,
)
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.ngram_convolution import NGramConvolution
from keras_transformer.layers.pooling import MaskedMaxPooling, MaskedMeanPooling
from keras_transformer.layers.position_embedding import (
    PositionEmbedding,
    interpolate_positions,
)
from keras_transformer.layers.scaled_dot_product_attention import (
    additive_attention,
    elementwise_attention,
    elementwise_attention_limit,
    masked_softmax,
    scaled_dot_product_attention,
)
from keras_transformer.layers.series_level_features import SeriesLevelFeatures
from keras_transformer.layers.series_masking import (
    SeriesStandardization,
    fill_missing,
    series_lengths,
    series_statistics,
    step_mask,
)
from keras_transformer.layers.series_patches import SeriesPatches
from keras_transformer.layers.series_stem import (
    PatchStem,
    RandomKernelSeriesStem,
    SeriesStem,
)
from keras_transformer.layers.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)
from keras_transformer.layers.sublayers import sublayers
from keras_transformer.layers.token_and_position_embedding import (
    TokenAndPositionEmbedding,
)
from keras_transformer.layers.token_stem import CharNGramTokenStem, TokenStem
from keras_transformer.layers.transformer_decoder_block import TransformerDecoderBlock
from keras_transformer.layers.transformer_encoder_block import TransformerEncoderBlock

__all__ = [
    "CharNGramTokenStem",
    "FeedForward",
    "MaskedMaxPooling",
    "MaskedMeanPooling",
    "MultiHeadAttention",
    "NGramConvolution",
    "PatchStem",
    "PositionEmbedding",
    "RandomKernelSeriesStem",
    "SeriesLevelFeatures",
    "SeriesPatches",
    "SeriesStandardization",
    "SeriesStem",
    "SinusoidalPositionEncoding",
    "TokenAndPositionEmbedding",
    "TokenStem",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "additive_attention",
    "causal_mask",
    "elementwise_attention",
    "elementwise_attention_limit",
    "fill_missing",
    "interpolate_positions",
    "masked_softmax",
    "merge_attention_masks",
    "padding_mask",
    "scaled_dot_product_attention",
    "series_lengths",
    "series_statistics",
    "step_mask",
    "sublayers",
]
