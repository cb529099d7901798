"""The classifiers' input stems for token ids: embeddings with their positions,
and, for each word, the mean vector of its character n-grams."""

import keras
from keras import ops

from keras_transformer.layers.masking import padding_mask
from keras_transformer.layers.token_and_position_embedding import (
    POSITIONS,
    TokenAndPositionEmbedding,
)
from keras_transformer.layers.validation import (
    check_choice,
    check_positive_int,
)


def token_embedding_layers(vocabulary_size, hidden_dim, max_sequence_length, positions,
                           char_ngram_buckets, dtype=None):
    """The token stem's layers: `(token_embedding, char_ngram_embedding)`.

    The second is None without `char_ngram_buckets`; with n buckets it is
    an `(n + 1, d)` table (row 0: no n-gram) initialised N(0, 1/d), as the
    token embedding, so that both are scaled alike (`embed_tokens`).
    """
    embedding = TokenAndPositionEmbedding(
        vocabulary_size, hidden_dim, max_sequence_length, positions=positions,
        dtype=dtype, name="token_embedding",
    )
    char_ngram_embedding = (char_ngram_table(char_ngram_buckets, hidden_dim, dtype)
                            if char_ngram_buckets else None)
    return embedding, char_ngram_embedding


def char_ngram_table(char_ngram_buckets, hidden_dim, dtype=None):
    """The `(n + 1, d)` embedding of n hashed character n-grams (row 0: none)."""
    return keras.layers.Embedding(
        char_ngram_buckets + 1, hidden_dim,
        embeddings_initializer=keras.initializers.RandomNormal(stddev=hidden_dim**-0.5),
        dtype=dtype, name="char_ngram_embedding",
    )


def embed_tokens(embedding, char_ngram_embedding, token_ids):
    """Token ids -> `(x, mask)`: the tokens' embeddings with their positions
    (and the mean vector of their character n-grams) `(B, T, d)`, and
    `(B, T)` True at real tokens.

    `token_ids`: `(B, T)`, or packed `(B, T, 1 + G)` when
    `char_ngram_embedding` is given: each token's id, then G hashed ids of
    its character n-grams (0 for none), as fastText's word vectors
    (Bojanowski et al., 2017).  The n-grams' mean, scaled by sqrt(d) as the
    token embeddings are, is added to the token's embedding: an unknown
    word then differs from another by its spelling.
    """
    grams = None
    if char_ngram_embedding is not None:
        grams, token_ids = token_ids[..., 1:], token_ids[..., 0]  # (B, T, G), (B, T)
    mask = padding_mask(token_ids)
    x = embedding(token_ids)
    if grams is not None:
        vectors = char_ngram_embedding(grams)  # (B, T, G, d)
        present = ops.cast(ops.expand_dims(ops.not_equal(grams, 0), -1), vectors.dtype)
        count = ops.maximum(ops.sum(present, axis=2), 1.0)  # (B, T, 1)
        mean = ops.sum(vectors * present, axis=2) / count  # 0 for a word without n-grams
        x = x + mean * ops.cast(ops.shape(mean)[-1] ** 0.5, x.dtype)  # scaled as the tokens
    return x, mask


def token_input(char_ngram_buckets, char_ngrams_per_word):
    """The functional `token_ids` input: `(B, T)`, or `(B, T, 1 + G)` packed."""
    if char_ngram_buckets:
        return keras.Input((None, 1 + char_ngrams_per_word), dtype="int32", name="token_ids")
    return keras.Input((None,), dtype="int32", name="token_ids")


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenStem(keras.layers.Layer):
    """Token ids -> their embeddings with positions, and the padding mask.

    The embeddings are scaled by sqrt(d_model) and summed with positions
    (`TokenAndPositionEmbedding`); id 0 is padding.  A classifier's encoder
    reads the tokens `(B, T, d)` and masks the padding out of attention and
    pooling with `(B, T)`.

    Args:
        vocabulary_size: token vocabulary.
        hidden_dim: d_model, the tokens' width.
        max_sequence_length: longest input in tokens (learned positions only).
        positions: `"sinusoidal"` or `"learned"`.

    Call arguments:
        inputs: `token_ids` `(B, T)` int32.

    Returns:
        `(tokens, mask)`: `(B, T, hidden_dim)` and boolean `(B, T)`, True at
        real tokens.

    Example:
    >>> stem = keras_transformer.layers.TokenStem(100, 16)
    >>> x, mask = stem(keras.ops.array([[5, 6, 0]]))
    >>> x.shape, mask.shape
    ((1, 3, 16), (1, 3))
    """

    #: The name of the model input this stem reads.
    input_name = "token_ids"
    #: Numeric features per step: None, the input is token ids.
    num_features = None

    def __init__(self, vocabulary_size, hidden_dim, max_sequence_length=128,
                 positions="sinusoidal", **kwargs):
        kwargs.setdefault("name", "stem")  # one per model; its weights' paths begin with it
        super().__init__(**kwargs)
        self.vocabulary_size = check_positive_int("vocabulary_size", vocabulary_size)
        self.hidden_dim = check_positive_int("hidden_dim", hidden_dim)
        self.max_sequence_length = check_positive_int("max_sequence_length",
                                                      max_sequence_length)
        self.positions = check_choice("positions", positions, POSITIONS)
        self.embedding, self.char_ngram_embedding = token_embedding_layers(
            vocabulary_size, hidden_dim, max_sequence_length, positions, 0,
            dtype=self.dtype_policy,
        )
        self.char_ngram_buckets = 0  # none (`CharNGramTokenStem`)
        self.char_ngrams_per_word = 32  # unused without n-grams

    def symbolic_input(self):
        """The functional model's `token_ids` input this stem reads."""
        return token_input(self.char_ngram_buckets, self.char_ngrams_per_word)

    def build(self, input_shape):
        self.embedding.build(input_shape[:2])
        if self.char_ngram_embedding is not None:
            self.char_ngram_embedding.build(input_shape)
        self.built = True

    def compute_output_spec(self, inputs):
        batch, length = inputs.shape[:2]
        return (keras.KerasTensor((batch, length, self.hidden_dim), dtype=self.compute_dtype),
                keras.KerasTensor((batch, length), dtype="bool"))

    def call(self, inputs):
        return embed_tokens(self.embedding, self.char_ngram_embedding, inputs)

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "hidden_dim": self.hidden_dim,
            "max_sequence_length": self.max_sequence_length,
            "positions": self.positions,
        })
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class CharNGramTokenStem(TokenStem):
    """Words that carry their spelling: a `TokenStem` plus the mean of each
    word's character n-gram vectors, as fastText's word vectors
    (Bojanowski et al., 2017).

    `token_ids` is `(B, T, 1 + G)`: the word's id and then G =
    `char_ngrams_per_word` hashed ids of its character n-grams (1..n, 0 for
    none; built by `training.text.tokenizers.CharNGramTokenizer`).  The
    mean of those n-grams' vectors, scaled by sqrt(d) as the word's own, is
    added to its embedding: an unknown word then differs from another by
    its spelling, and a rare one shares vectors with the seen words it is
    spelt like.

    Args:
        vocabulary_size, hidden_dim, max_sequence_length, positions: as
            `TokenStem`.
        char_ngram_buckets: n, the hash buckets of the character n-grams.
        char_ngrams_per_word: G, the n-gram ids each word carries.

    Call arguments:
        inputs: packed `token_ids` `(B, T, 1 + G)` int32.

    Returns:
        `(tokens, mask)`: `(B, T, hidden_dim)` and boolean `(B, T)`, True at
        real words.

    Example:
    >>> stem = keras_transformer.layers.CharNGramTokenStem(100, 16, char_ngram_buckets=50,
    ...                                                    char_ngrams_per_word=4)
    >>> x, mask = stem(keras.ops.ones((1, 3, 5), "int32"))
    >>> x.shape
    (1, 3, 16)
    """

    def __init__(self, vocabulary_size, hidden_dim, max_sequence_length=128,
                 positions="sinusoidal", char_ngram_buckets=16384, char_ngrams_per_word=32,
                 **kwargs):
        super().__init__(vocabulary_size, hidden_dim, max_sequence_length, positions, **kwargs)
        self.char_ngram_buckets = check_positive_int("char_ngram_buckets", char_ngram_buckets)
        self.char_ngrams_per_word = check_positive_int("char_ngrams_per_word",
                                                       char_ngrams_per_word)
        self.char_ngram_embedding = char_ngram_table(char_ngram_buckets, self.hidden_dim,
                                                     dtype=self.dtype_policy)

    def get_config(self):
        config = super().get_config()
        config.update({
            "char_ngram_buckets": self.char_ngram_buckets,
            "char_ngrams_per_word": self.char_ngrams_per_word,
        })
        return config
