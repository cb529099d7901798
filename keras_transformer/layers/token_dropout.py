"""Word dropout: token ids replaced by the unknown-word id while training."""

import keras
from keras import ops

from keras_transformer.layers.validation import check_rate


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenDropout(keras.layers.Layer):
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
        super().__init__(**kwargs)
        self.rate = check_rate("rate", rate)
        for name, value in (("replacement_id", replacement_id), ("pad_id", pad_id)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"`{name}` must be a non-negative integer; received {name}={value!r}."
                )
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

    def call(self, token_ids, training=False):
        if not training or self.rate == 0:
            return token_ids
        draws = keras.random.uniform(ops.shape(token_ids), seed=self.seed_generator)
        replace = ops.logical_and(draws < self.rate, ops.not_equal(token_ids, self.pad_id))
        return ops.where(replace, ops.cast(self.replacement_id, token_ids.dtype), token_ids)

    def compute_output_spec(self, token_ids, training=False):
        # The ids' own integer dtype, not the layer's (float) compute dtype.
        return keras.KerasTensor(token_ids.shape, dtype=token_ids.dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "replacement_id": self.replacement_id,
                       "pad_id": self.pad_id, "seed": self.seed})
        return config
