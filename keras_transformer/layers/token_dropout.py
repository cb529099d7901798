"""Word dropout: token ids replaced by the unknown-word id while training."""

import keras
import numpy as np
from keras import ops

from keras_transformer.layers.validation import (
    check_non_negative_int,
    check_positive_int,
    check_rate,
)


class _TokenReplacement(keras.layers.Layer):
    """What the word dropouts share: real token ids (not `pad_id`) replaced
    by `replacement_id` where a seeded uniform draw falls below their rate.
    The layer has no trainable weights."""

    def __init__(self, replacement_id=1, pad_id=0, seed=None, **kwargs):
        super().__init__(**kwargs)
        check_non_negative_int("replacement_id", replacement_id)
        check_non_negative_int("pad_id", pad_id)
        if replacement_id == pad_id:
            raise ValueError(
                "`replacement_id` must differ from `pad_id` (a replaced token would "
                f"become padding); received replacement_id={replacement_id!r}, "
                f"pad_id={pad_id!r}."
            )
        self.replacement_id = replacement_id
        self.pad_id = pad_id
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.built = True

    def _replace(self, token_ids, rates):
        """`token_ids` with each real one replaced with probability `rates`
        (a number, or one per token)."""
        draws = keras.random.uniform(ops.shape(token_ids), seed=self.seed_generator)
        replace = ops.logical_and(draws < rates, ops.not_equal(token_ids, self.pad_id))
        return ops.where(replace, ops.cast(self.replacement_id, token_ids.dtype), token_ids)

    def compute_output_spec(self, token_ids, training=False):
        # The ids' own integer dtype, not the layer's (float) compute dtype.
        return keras.KerasTensor(token_ids.shape, dtype=token_ids.dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"replacement_id": self.replacement_id, "pad_id": self.pad_id,
                       "seed": self.seed})
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenDropout(_TokenReplacement):
    """Replaces each real token id by `replacement_id` with probability `rate`.

    Word dropout for classifiers (Iyyer et al., 2015, "Deep Unordered
    Composition Rivals Syntactic Methods for Text Classification"): while
    training, a random share of a
    sentence's words is hidden, so that the class is not learned from a
    few memorised words, and the unknown-word embedding the model meets
    at test time (every word it never saw) is trained on words in context.
    Padding (id `pad_id`) is never replaced; outside training, and at rate
    0, the ids pass through unchanged.  The layer has no weights.

    Args:
        rate: probability that a real token is replaced, in [0, 1).
        replacement_id: the id put in its place (the vocabulary's `[UNK]`).
        pad_id: the padding id, kept as it is.
        seed: seed of the layer's `keras.random.SeedGenerator`.

    Call arguments:
        token_ids: integer ids of any shape.
        training: replace only when True.

    Returns:
        The ids, same shape and dtype.

    Example:
    >>> layer = TokenDropout(0.5, replacement_id=1, seed=0)
    >>> ids = keras.ops.array([[5, 6, 7, 0]])
    >>> bool(keras.ops.all(layer(ids) == ids))  # not training: unchanged
    True
    """

    def __init__(self, rate, replacement_id=1, pad_id=0, seed=None, **kwargs):
        super().__init__(replacement_id, pad_id, seed, **kwargs)
        self.rate = check_rate("rate", rate)

    def call(self, token_ids, training=False):
        if not training or self.rate == 0:
            return token_ids
        return self._replace(token_ids, self.rate)

    def get_config(self):
        config = super().get_config()
        config["rate"] = self.rate
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class RareWordDropout(_TokenReplacement):
    """Replaces a token id by `replacement_id` the more often the rarer its word.

    Word dropout by frequency (Kiperwasser & Goldberg, 2016, for parsers):
    while training, a token whose word was seen `c` times in the training
    text is replaced with probability `alpha / (alpha + c)`.  With
    `alpha=0.25` a word seen once is hidden a fifth of the time, one seen
    twice a ninth, one seen 20 times 1.2%.  A rare word so keeps its own
    embedding, learned from the sentences it occurs in, while the
    unknown-word embedding, which every word the training text never held
    meets at test time, still trains on rare words in context.

    The counts are a non-trainable weight of one entry per id (`counts`,
    zeros until `set_counts`), so a saved model or checkpoint keeps them.
    An id counted 0 (padding, the reserved tokens, a word never seen) is
    never replaced; outside training the ids pass through unchanged.

    Args:
        alpha: positive; the probability for a word seen `c` times is
            `alpha / (alpha + c)`.
        vocabulary_size: number of ids (the length of `counts`).
        replacement_id: the id put in its place (the vocabulary's `[UNK]`).
        pad_id: the padding id, kept as it is.
        seed: seed of the layer's `keras.random.SeedGenerator`.

    Call arguments:
        token_ids: integer ids in `[0, vocabulary_size)` of any shape.
        training: replace only when True.

    Returns:
        The ids, same shape and dtype.

    Example:
    >>> layer = RareWordDropout(0.25, vocabulary_size=8, seed=0)
    >>> layer.set_counts([0, 0, 1, 40, 0, 0, 0, 0])
    >>> [round(float(p), 3) for p in layer.rates()[:4]]
    [0.0, 0.0, 0.2, 0.006]
    """

    def __init__(self, alpha, vocabulary_size, replacement_id=1, pad_id=0, seed=None,
                 **kwargs):
        super().__init__(replacement_id, pad_id, seed, **kwargs)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not (
            0 < alpha < float("inf")
        ):
            raise ValueError(f"`alpha` must be a finite number > 0; received alpha={alpha!r}.")
        self.alpha = float(alpha)
        self.vocabulary_size = check_positive_int("vocabulary_size", vocabulary_size)
        self.counts = self.add_weight(
            shape=(vocabulary_size,), initializer="zeros", dtype="float32",
            trainable=False, name="counts",
        )

    def set_counts(self, counts):
        """Sets the training text's count of each id (`(vocabulary_size,)`, >= 0)."""
        counts = np.asarray(counts, dtype="float64")
        if counts.shape != (self.vocabulary_size,) or not np.all(np.isfinite(counts)) or (
            counts < 0
        ).any():
            raise ValueError(
                f"`counts` must hold {self.vocabulary_size} finite numbers >= 0 (one per "
                f"id); received shape {counts.shape} with minimum "
                f"{float(counts.min()) if counts.size else None!r}."
            )
        self.counts.assign(counts.astype("float32"))

    def rates(self):
        """Each id's replacement probability, `(vocabulary_size,)`."""
        counts = ops.convert_to_tensor(self.counts)
        return ops.where(counts > 0, self.alpha / (self.alpha + counts), 0.0)

    def call(self, token_ids, training=False):
        if not training:
            return token_ids
        return self._replace(token_ids, ops.take(self.rates(), token_ids))

    def get_config(self):
        config = super().get_config()
        config.update({"alpha": self.alpha, "vocabulary_size": self.vocabulary_size})
        return config
