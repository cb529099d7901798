"""Functional Transformer models and their configuration."""

from keras_transformer.models._xla_dropout import XLADropoutMixin
from keras_transformer.models.classifier_ensemble import (
    ClassifierEnsemble,
    mean_probability_logits,
)
from keras_transformer.models.pooled_classifier import PooledClassifier
from keras_transformer.models.text_cnn_classifier import TextCNNClassifier
from keras_transformer.models.transformer import Transformer
from keras_transformer.models.transformer_classifier import TransformerClassifier
from keras_transformer.models.transformer_config import (
    END_ID,
    PAD_ID,
    PAPER_PARAMETER_COUNTS,
    PRESETS,
    RESERVED_TOKENS,
    START_ID,
    UNK_ID,
    TransformerConfig,
    get_preset,
)
from keras_transformer.models.vision_transformer import VisionTransformer

__all__ = [
    "ClassifierEnsemble",
    "END_ID",
    "PAD_ID",
    "PAPER_PARAMETER_COUNTS",
    "PRESETS",
    "PooledClassifier",
    "RESERVED_TOKENS",
    "START_ID",
    "TextCNNClassifier",
    "UNK_ID",
    "Transformer",
    "TransformerClassifier",
    "TransformerConfig",
    "VisionTransformer",
    "XLADropoutMixin",
    "get_preset",
    "mean_probability_logits",
]
