"""Kim's (2014) sentence CNN: n-gram convolutions over words, max-pooled."""

import keras

from keras_transformer.layers._dropout import Dropout
from keras_transformer.layers.ngram_convolution import NGramConvolution
from keras_transformer.layers.pooling import MaskedMaxPooling, MaskedMeanPooling
from keras_transformer.layers.token_stem import (
    embed_tokens,
    token_embedding_layers,
    token_input,
)
from keras_transformer.layers.validation import (
    check_choice,
    check_non_negative,
    check_non_negative_int,
    check_positive_int,
    check_rate,
)
from keras_transformer.models.pooled_classifier import PooledClassifier, head_layers


@keras.saving.register_keras_serializable(package="keras_transformer")
class TextCNNClassifier(PooledClassifier):
    """Word embeddings, n-gram convolutions, max over time, a small head.

    The sentence CNN of Kim (2014), the text presets' model: on a few
    thousand labelled sentences a short phrase ("how many", "not good")
    decides the class, and convolutions have such neighbours by
    construction where attention has to learn to find them (on TREC and
    SST-2 one or two attention layers validated 2.5-4 points lower).

    - Input stem: `token_ids` `(B, T)` int32, 0 is padding, embedded
      (scaled by sqrt(d), plus positions) as `TransformerClassifier`'s.
      With `char_ngram_buckets` n > 0 each word also carries its spelling
      (fastText's sub-word vectors): `token_ids` is `(B, T, 1 + G)`, the
      word's id then G = `char_ngrams_per_word` hashed ids of its character
      n-grams (built by `training.text.tokenizers.CharNGramTokenizer`), and
      their mean vector is added to the word's embedding
      (`keras_transformer.layers.token_stem.embed_tokens`).
    - For each width in `ngram_widths`, `hidden_dim` ReLU filters over that
      many consecutive words, side by side (`NGramConvolution(residual=False)`);
      without widths, the embeddings themselves.
    - Dropout, then the maximum of each feature over the real positions
      (`pooling="max"`; `"mean"` averages them).
    - `Dense(head_hidden_dim, relu) -> Dropout -> Dense(num_classes)`.

    With `mixup_alpha` the pooled features of example i are mixed with
    those of example B-1-i while training (Guo et al., 2019; see
    `PooledClassifier`).

    Args:
        num_classes: classes; 1 gives a single sigmoid logit (binary tasks).
        vocabulary_size: the word vocabulary.
        hidden_dim: d, the embedding width and the filters per width.
        ngram_widths: widths of the convolutions, e.g. `(3, 4, 5)` (Kim's).
        dropout: on the features before the pooling and in the head.
        max_sequence_length: longest input in words (learned positions).
        positions: `"sinusoidal"` or `"learned"`.
        head_hidden_dim: the head's hidden width (`hidden_dim` if None).
        pooling: `"max"` or `"mean"` over the real positions.
        mixup_alpha: mixup of the pooled features while training; 0: none.
        char_ngram_buckets: hash buckets of the words' character n-grams; 0: none.
        char_ngrams_per_word: G, the n-gram ids each word carries.

    Output: `logits` `(B, num_classes)`, float32.

    Example:
    >>> model = keras_transformer.models.TextCNNClassifier(
    ...     num_classes=2, vocabulary_size=100, hidden_dim=16)
    >>> model(keras.ops.array([[5, 6, 7, 0]])).shape
    (1, 2)
    """

    def __init__(
        self,
        num_classes,
        vocabulary_size,
        hidden_dim=128,
        ngram_widths=(3, 4, 5),
        dropout=0.5,
        max_sequence_length=128,
        positions="sinusoidal",
        head_hidden_dim=None,
        pooling="max",
        mixup_alpha=0.0,
        char_ngram_buckets=0,
        char_ngrams_per_word=32,
        dtype=None,
        **kwargs,
    ):
        for name, value in (("num_classes", num_classes), ("vocabulary_size", vocabulary_size),
                            ("hidden_dim", hidden_dim),
                            ("max_sequence_length", max_sequence_length),
                            ("char_ngrams_per_word", char_ngrams_per_word)):
            check_positive_int(name, value)
        check_positive_int("head_hidden_dim", head_hidden_dim, allow_none=True)
        check_rate("dropout", dropout)
        check_choice("positions", positions, ("sinusoidal", "learned"))
        check_choice("pooling", pooling, ("mean", "max"))
        check_non_negative("mixup_alpha", mixup_alpha)
        check_non_negative_int("char_ngram_buckets", char_ngram_buckets)  # 0: none
        ngram_widths = tuple(ngram_widths or ())

        # === Layers === (in this order: each draws its initial weights in turn)
        self.embedding, self.char_ngram_embedding = token_embedding_layers(
            vocabulary_size, hidden_dim, max_sequence_length, positions, char_ngram_buckets,
            dtype=dtype,
        )
        self.ngram_convolution = (
            NGramConvolution(ngram_widths, dropout=dropout, residual=False, dtype=dtype,
                             name="ngram_convolution")
            if ngram_widths else None
        )
        self.embedding_dropout = Dropout(dropout, dtype=dtype)
        self.pooling = (
            MaskedMeanPooling(dtype=dtype, name="mean_pooling") if pooling == "mean"
            else MaskedMaxPooling(dtype=dtype, name="max_pooling")
        )
        self.head_hidden, self.head_dropout, self.head_output, self.logits_cast = head_layers(
            num_classes, head_hidden_dim or hidden_dim, dropout, dtype=dtype
        )

        # === Functional model ===
        self.vocabulary_size = vocabulary_size
        self.num_features = None  # token input only (ClassifierEnsemble's shared input)
        inputs = token_input(char_ngram_buckets, char_ngrams_per_word)
        outputs = self._head(self._pooled_features(inputs))  # (B, num_classes)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        self.mixup_alpha = float(mixup_alpha)
        self.mixup_seed = keras.random.SeedGenerator() if mixup_alpha else None

        # === Config ===
        self.num_classes = num_classes
        self.hidden_dim = hidden_dim
        self.ngram_widths = ngram_widths
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.positions = positions
        self.head_hidden_dim = head_hidden_dim
        self.pooling_mode = pooling
        self.char_ngram_buckets = int(char_ngram_buckets)
        self.char_ngrams_per_word = int(char_ngrams_per_word)

    def _pooled_features(self, token_ids):
        """`(B, T)` or packed `(B, T, 1 + G)` ids -> pooled features `(B, d * len(widths))`."""
        x, mask = embed_tokens(self.embedding, self.char_ngram_embedding, token_ids)
        if self.ngram_convolution is not None:
            x = self.ngram_convolution(x, mask=mask)  # (B, T, d * len(widths))
        x = self.embedding_dropout(x)
        return self.pooling(x, mask=mask)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "num_classes": self.num_classes,
            "vocabulary_size": self.vocabulary_size,
            "hidden_dim": self.hidden_dim,
            "ngram_widths": list(self.ngram_widths),
            "dropout": self.dropout,
            "max_sequence_length": self.max_sequence_length,
            "positions": self.positions,
            "head_hidden_dim": self.head_hidden_dim,
            "pooling": self.pooling_mode,
            "mixup_alpha": self.mixup_alpha,
            "char_ngram_buckets": self.char_ngram_buckets,
            "char_ngrams_per_word": self.char_ngrams_per_word,
        }
