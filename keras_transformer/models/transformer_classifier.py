"""An encoder-only Transformer classifier: an input stem, the encoder, a pooled head."""

import keras

from keras_transformer.layers._dropout import Dropout
from keras_transformer.layers.ngram_convolution import NGramConvolution
from keras_transformer.layers.pooling import MaskedMaxPooling, MaskedMeanPooling
from keras_transformer.layers.series_stem import SeriesStem
from keras_transformer.layers.token_stem import TokenStem
from keras_transformer.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_transformer.layers.validation import (
    check_bool,
    check_choice,
    check_divisible,
    check_non_negative,
    check_positive_int,
    check_rate,
)
from keras_transformer.models._serialization import with_dtype_policy
from keras_transformer.models.pooled_classifier import PooledClassifier, head_layers

#: The epsilon of every LayerNormalization of the encoder (and of the n-gram sub-layer).
LAYER_NORM_EPSILON = 1e-6
#: The stems' sizes the classifier answers for (`ClassifierEnsemble`, the exporters).
STEM_SIZES = ("vocabulary_size", "num_features", "max_sequence_length", "hidden_dim",
              "positions", "char_ngram_buckets", "char_ngrams_per_word")


def _check_stem(stem):
    if not isinstance(stem, (TokenStem, SeriesStem)):
        raise ValueError(
            "`stem` must be an input stem layer (keras_transformer.layers.TokenStem, "
            "CharNGramTokenStem, PatchStem or RandomKernelSeriesStem); received "
            f"stem={stem!r}."
        )
    return stem


def _stem_size(name):
    def size(self):
        return getattr(self.stem, name)
    size.__doc__ = f"The stem's `{name}`."
    return property(size)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerClassifier(PooledClassifier):
    """An input stem, the Transformer encoder, pooled, under a small classification head.

    Built from named parts, as KerasHub builds a task from a backbone and
    a head:

    - the stem, a layer given whole, reads the input and returns the tokens
      `(B, T', d_model)` and the mask of the real ones `(B, T')`:
      `TokenStem` (token ids, 0 is padding), `CharNGramTokenStem` (token ids
      packed with their character n-grams' ids), `PatchStem` (numeric
      series `(B, T, F)`, NaN-padded, in tokens of one or more steps) or
      `RandomKernelSeriesStem` (a token per window of MiniRocket features).
      Its width is the encoder's d_model, and its sizes are the model's
      input sizes (`vocabulary_size`, `num_features`,
      `max_sequence_length`, ...).  A series stem that learns from data
      (`RandomKernelSeriesStem`, level features) is adapted before
      training: `model.stem.adapt(series)`.
    - With `ngram_widths`, an `NGramConvolution` residual sub-layer mixes
      each token with its neighbours before the encoder (convolutions of
      those widths): on a few thousand sentences a short phrase decides
      the class, and attention alone learns to find it late.  Kim's CNN
      itself, with no encoder, is `TextCNNClassifier`.
    - `num_layers` encoder blocks over the real tokens.
    - The head: the encoder output pooled over real tokens (padding
      excluded), averaged (`pooling="mean"`) or its maximum per feature
      (`"max"`, max-over-time as Kim's CNN), then
      `Dense(head_hidden_dim, relu) -> Dropout -> Dense(num_classes)`.

    Args:
        stem: the input stem layer (above); one model's own.
        num_classes: classes; 1 gives a single logit for binary tasks
            (sigmoid), 2 or more give softmax logits.
        num_layers, num_heads, intermediate_dim, dropout, normalize_first:
            as `TransformerConfig` (N, h, d_ff, P_drop, pre-LN); d_model is
            the stem's `hidden_dim`.
        ngram_widths: widths of the n-gram convolutions before the encoder
            (e.g. `(3, 4, 5)`); None or `()`: none.
        pooling: `"mean"` or `"max"` over the real positions.
        head_hidden_dim: width of the head's hidden layer (d_model if None).
        mixup_alpha: mixup of the pooled features while training (0: none),
            as Guo et al. (2019) for sentences, whose tokens cannot be
            mixed: each example's pooled features are mixed with those of
            its mirror in the batch (example i with B-1-i) by
            lam ~ Beta(alpha, alpha) folded to [0.5, 1], and its loss is
            lam times the loss on its own label plus 1 - lam times the loss
            on its partner's (`compute_loss`).  The training call then
            returns `(B, num_classes + 1)`: the logits and lam.  Inference
            is unchanged.
        dtype: the dtype policy of the encoder and the head (the stem has
            its own).

    Output: `logits` `(B, num_classes)`, float32.

    Example:
    >>> stem = keras_transformer.layers.TokenStem(vocabulary_size=100, hidden_dim=16)
    >>> model = keras_transformer.models.TransformerClassifier(
    ...     stem, num_classes=2, num_layers=1, num_heads=2, intermediate_dim=32)
    >>> model(keras.ops.array([[5, 6, 0]])).shape
    (1, 2)
    """

    def __init__(
        self,
        stem,
        num_classes,
        num_layers=2,
        num_heads=4,
        intermediate_dim=128,
        dropout=0.1,
        normalize_first=False,
        ngram_widths=None,
        pooling="mean",
        head_hidden_dim=None,
        mixup_alpha=0.0,
        dtype=None,
        **kwargs,
    ):
        _check_stem(stem)
        hidden_dim = stem.hidden_dim
        check_positive_int("num_classes", num_classes)
        if num_layers == 0 and not isinstance(num_layers, bool):
            raise ValueError(
                "`num_layers` must be at least 1 (the encoder blocks); received num_layers=0. "
                "Word n-gram convolutions without attention are `TextCNNClassifier`."
            )
        check_positive_int("num_layers", num_layers)
        check_positive_int("num_heads", num_heads)
        check_positive_int("intermediate_dim", intermediate_dim)
        check_positive_int("head_hidden_dim", head_hidden_dim, allow_none=True)
        check_rate("dropout", dropout)
        check_divisible("hidden_dim", hidden_dim, "num_heads", num_heads)
        check_bool("normalize_first", normalize_first)
        check_choice("pooling", pooling, ("mean", "max"))
        check_non_negative("mixup_alpha", mixup_alpha)
        ngram_widths = tuple(ngram_widths or ())

        # === Layers === (the stem's drew their initial weights when it was made)
        self.stem = stem
        self.ngram_convolution = (
            NGramConvolution(ngram_widths, dropout=dropout, layer_norm_epsilon=LAYER_NORM_EPSILON,
                             dtype=dtype, name="ngram_convolution")
            if ngram_widths else None
        )
        self.embedding_dropout = Dropout(dropout, dtype=dtype)
        self.encoder_blocks = [
            TransformerEncoderBlock(
                intermediate_dim, num_heads, dropout=dropout,
                layer_norm_epsilon=LAYER_NORM_EPSILON, normalize_first=normalize_first,
                dtype=dtype, name=f"encoder_block_{i}",
            )
            for i in range(num_layers)
        ]
        self.encoder_norm = (
            keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, dtype=dtype,
                                            name="encoder_norm")
            if normalize_first else None
        )
        self.pooling = (
            MaskedMeanPooling(dtype=dtype, name="mean_pooling") if pooling == "mean"
            else MaskedMaxPooling(dtype=dtype, name="max_pooling")
        )
        self.head_hidden, self.head_dropout, self.head_output, self.logits_cast = head_layers(
            num_classes, head_hidden_dim or hidden_dim, dropout, dtype=dtype
        )

        # === Functional model ===
        inputs = stem.symbolic_input()
        outputs = self._head(self._pooled_features(inputs))  # (B, num_classes)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        self.mixup_alpha = float(mixup_alpha)
        self.mixup_seed = keras.random.SeedGenerator() if mixup_alpha else None

        # === Config ===
        self.num_classes = num_classes
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.normalize_first = normalize_first
        self.ngram_widths = ngram_widths
        self.pooling_mode = pooling
        self.head_hidden_dim = head_hidden_dim

    vocabulary_size = _stem_size("vocabulary_size")
    num_features = _stem_size("num_features")
    max_sequence_length = _stem_size("max_sequence_length")
    hidden_dim = _stem_size("hidden_dim")
    positions = _stem_size("positions")
    char_ngram_buckets = _stem_size("char_ngram_buckets")
    char_ngrams_per_word = _stem_size("char_ngrams_per_word")

    def _pooled_features(self, inputs):
        """The layers up to the pooling: the stem's input -> `(B, d)`."""
        x, mask = self.stem(inputs)  # (B, T', d), (B, T')
        if self.ngram_convolution is not None:
            x = self.ngram_convolution(x, mask=mask)
        x = self.embedding_dropout(x)
        for block in self.encoder_blocks:
            x = block(x, mask=mask)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return self.pooling(x, mask=mask)  # (B, d)

    def get_config(self):
        stem = keras.saving.serialize_keras_object(self.stem)
        stem.pop("build_config", None)  # the model's graph builds it; a tuple reloads as a list
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "stem": stem,
            "num_classes": self.num_classes,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "normalize_first": self.normalize_first,
            "ngram_widths": list(self.ngram_widths),
            "pooling": self.pooling_mode,
            "head_hidden_dim": self.head_hidden_dim,
            "mixup_alpha": self.mixup_alpha,
        }

    @classmethod
    def from_config(cls, config):
        if "stem" not in config:
            raise ValueError(
                "This TransformerClassifier was saved in the layout before its input stem "
                "became a layer of its own (its config names the input by `vocabulary_size` "
                "or `num_features` and has no `stem`); this version cannot load it. "
                "Retrain the model, or load it with the keras-transformer version that "
                "saved it (before TransformerClassifier took a `stem`)."
            )
        config = with_dtype_policy(config)
        config["stem"] = keras.saving.deserialize_keras_object(config["stem"])
        return cls(**config)
