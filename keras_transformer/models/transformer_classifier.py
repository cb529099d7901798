"""An encoder-only Transformer classifier for token or numeric sequences."""

import keras

from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.ngram_convolution import NGramConvolution
from keras_transformer.layers.pooling import MaskedMaxPooling, MaskedMeanPooling
from keras_transformer.layers.series_stem import PatchStem, RandomKernelSeriesStem
from keras_transformer.layers.token_stem import CharNGramTokenStem, TokenStem
from keras_transformer.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_transformer.layers.validation import (
    check_bool,
    check_choice,
    check_divisible,
    check_non_negative,
    check_non_negative_int,
    check_positive_int,
    check_rate,
)
from keras_transformer.models.pooled_classifier import PooledClassifier, head_layers


def _check_input_kind(vocabulary_size, num_features, char_ngram_buckets, patch_length,
                      patch_stride, standardize_series):
    """Each stem's options only with its input: n-grams with tokens, patches
    and standardization with numeric series."""
    if vocabulary_size is None and char_ngram_buckets:
        raise ValueError(
            "`char_ngram_buckets` applies to token input (vocabulary_size) only; received "
            f"char_ngram_buckets={char_ngram_buckets!r} with num_features={num_features!r}."
        )
    numeric_only = (("patch_length", patch_length, 1), ("patch_stride", patch_stride, None),
                    ("standardize_series", standardize_series, False))
    for name, value, default in numeric_only:
        if vocabulary_size is not None and value != default:
            raise ValueError(
                f"`{name}` applies to numeric input (num_features) only; "
                f"received {name}={value!r} with vocabulary_size="
                f"{vocabulary_size!r}."
            )
    if patch_stride is not None and patch_stride > patch_length:
        raise ValueError(
            "`patch_stride` must not exceed `patch_length` (steps would be "
            f"skipped); received patch_stride={patch_stride!r}, "
            f"patch_length={patch_length!r}."
        )


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerClassifier(PooledClassifier):
    """The Transformer encoder, pooled, under a small classification head.

    Two kinds of input, chosen by which size is given:
    - `vocabulary_size`: `token_ids` `(B, T)` int32, 0 is padding; the
      embeddings are scaled by sqrt(d_model) and summed with positions.
      With `char_ngram_buckets` n > 0 each token also carries its spelling,
      as fastText's word vectors (Bojanowski et al., 2017): `token_ids` is
      `(B, T, 1 + G)`, the token's id and then G = `char_ngrams_per_word`
      hashed ids of its character n-grams (1..n, 0 for none; built by
      `training.text.tokenizers.CharNGramTokenizer`), and the mean of those
      n-grams' vectors (scaled as the token's) is added to its embedding.
      An unknown word then differs from another by its spelling, and a
      rare one shares vectors with the seen words it is spelt like.
    - `num_features`: `features` `(B, T, F)` float32 (e.g. a UCR time series,
      F=1), projected to d_model by a dense layer and summed with positions.
      With `patch_length` p > 1, every p consecutive steps form one token
      first (`SeriesPatches`: zero-padded to a multiple of p, reshaped to
      `(B, ceil(T/p), p*F)`), as in PatchTST (Nie et al., 2023); with a
      `patch_stride` s < p the patches overlap (a patch starts every s steps).
      With `standardize_series`, each series is first brought to mean 0 and
      standard deviation 1 over its time steps, per feature (instance
      normalization, as RevIN and PatchTST do), so that the model sees shape
      and not level or scale, whatever units the file is in.
      Series of unequal lengths share a batch padded at the end with all-NaN
      steps, and a NaN inside a series is a missing value
      (`keras_transformer.layers.series_masking`): the tokens of padding are
      masked out of attention and pooling, so that a padded series gives the
      output it gives alone, and a missing value takes its feature's mean
      over the series (0 after standardization).
      With `series_level_features` too, what standardization removes comes
      back, added to every token: each series' mean and log standard
      deviation per feature over its known steps, projected to `hidden_dim`
      (`SeriesLevelFeatures`), so that the model reads the shape and the
      level and scale.

    With `ngram_widths`, an `NGramConvolution` residual sub-layer mixes each
    token with its neighbours before the encoder (convolutions of those
    widths): on a few thousand sentences a short phrase decides the class,
    and attention alone learns to find it late.  Kim's CNN itself, with no
    encoder, is `TextCNNClassifier`.

    The encoder output is pooled over real positions (padding excluded):
    averaged (`pooling="mean"`) or its maximum per feature (`"max"`,
    max-over-time as Kim's CNN), then
    `Dense(head_hidden_dim, relu) -> Dropout -> Dense(num_classes)`.

    Args:
        num_classes: classes; 1 gives a single logit for binary tasks
            (sigmoid), 2 or more give softmax logits.
        vocabulary_size: token vocabulary (token input), or None.
        num_features: features per time step (numeric input), or None.
        num_layers, hidden_dim, num_heads, intermediate_dim, dropout,
        attention_dropout, layer_norm_epsilon, normalize_first: as
            `TransformerConfig` (N, d_model, h, d_ff, P_drop).
        max_sequence_length: longest input in tokens, i.e. in patches when
            `patch_length` > 1 (learned positions only).
        positions: `"sinusoidal"` or `"learned"`.
        head_hidden_dim: width of the head's hidden layer (d_model if None).
        patch_length: time steps per token (numeric input only); 1 gives
            one token per step.  A single value per token gives attention
            little to compare; the generated task of notebook 05 is learned
            with patches of 8 steps and not with single steps.
        patch_stride: steps between patch starts (numeric input only);
            None is `patch_length` (no overlap).
        standardize_series: per-series, per-feature standardization of
            numeric input before the patches (False keeps the raw values).
        ngram_widths: widths of the n-gram convolutions before the encoder
            (e.g. `(3, 4, 5)`); None or `()`: none.
        pooling: `"mean"` or `"max"` over the real positions.
        mixup_alpha: mixup of the pooled features while training (0: none),
            as Guo et al. (2019) for sentences, whose tokens cannot be
            mixed: each example's pooled features are mixed with those of
            its mirror in the batch (example i with B-1-i) by
            lam ~ Beta(alpha, alpha) folded to [0.5, 1], and its loss is
            lam times the loss on its own label plus 1 - lam times the loss
            on its partner's (`compute_loss`).  The training call then
            returns `(B, num_classes + 1)`: the logits and lam.  Inference
            is unchanged.
        char_ngram_buckets: hash buckets of the tokens' character n-grams
            (token input only; above); 0: none.
        char_ngrams_per_word: G, the n-gram ids each token carries.
        random_kernel_stem: numeric input only: a dict of `RandomKernelStem`
            arguments (`series_length`, `num_windows`, ...), whose windows'
            MiniRocket features are the tokens, in place of patches (set
            its biases with `adapt_stem` before training); None: none.
        series_level_features: numeric input with `standardize_series`
            only: each series' level and scale added to every token
            (above; set their standardization with
            `adapt_level_features` before training).

    Output: `logits` `(B, num_classes)`, float32.

    Example:
    >>> model = keras_transformer.models.TransformerClassifier(
    ...     num_classes=2, vocabulary_size=100, num_layers=1, hidden_dim=16,
    ...     num_heads=2, intermediate_dim=32)
    >>> model(keras.ops.array([[5, 6, 0]])).shape
    (1, 2)
    """

    def __init__(
        self,
        num_classes,
        vocabulary_size=None,
        num_features=None,
        num_layers=2,
        hidden_dim=64,
        num_heads=4,
        intermediate_dim=128,
        dropout=0.1,
        attention_dropout=0.0,
        max_sequence_length=128,
        positions="sinusoidal",
        normalize_first=False,
        head_hidden_dim=None,
        layer_norm_epsilon=1e-6,
        patch_length=1,
        patch_stride=None,
        standardize_series=False,
        ngram_widths=None,
        pooling="mean",
        mixup_alpha=0.0,
        char_ngram_buckets=0,
        char_ngrams_per_word=32,
        random_kernel_stem=None,
        series_level_features=False,
        dtype=None,
        **kwargs,
    ):
        if (vocabulary_size is None) == (num_features is None):
            raise ValueError(
                "Give exactly one of vocabulary_size (token input) and "
                f"num_features (numeric input); received vocabulary_size="
                f"{vocabulary_size!r}, num_features={num_features!r}."
            )
        check_positive_int("num_classes", num_classes)
        check_positive_int("vocabulary_size", vocabulary_size, allow_none=True)
        check_positive_int("num_features", num_features, allow_none=True)
        if num_layers == 0 and not isinstance(num_layers, bool):
            raise ValueError(
                "`num_layers` must be at least 1 (the encoder blocks); received num_layers=0. "
                "Word n-gram convolutions without attention are `TextCNNClassifier`."
            )
        check_positive_int("num_layers", num_layers)
        for name, value in (("hidden_dim", hidden_dim),
                            ("num_heads", num_heads), ("intermediate_dim", intermediate_dim),
                            ("max_sequence_length", max_sequence_length)):
            check_positive_int(name, value)
        check_positive_int("head_hidden_dim", head_hidden_dim, allow_none=True)
        check_rate("dropout", dropout)
        check_divisible("hidden_dim", hidden_dim, "num_heads", num_heads)
        check_choice("positions", positions, ("sinusoidal", "learned"))
        check_choice("pooling", pooling, ("mean", "max"))
        check_non_negative("mixup_alpha", mixup_alpha)
        check_non_negative_int("char_ngram_buckets", char_ngram_buckets)  # 0: none
        check_positive_int("char_ngrams_per_word", char_ngrams_per_word)
        ngram_widths = tuple(ngram_widths or ())
        check_positive_int("patch_length", patch_length)
        check_positive_int("patch_stride", patch_stride, allow_none=True)
        check_bool("standardize_series", standardize_series)
        _check_input_kind(vocabulary_size, num_features, char_ngram_buckets, patch_length,
                          patch_stride, standardize_series)
        check_bool("series_level_features", series_level_features)
        if series_level_features and not standardize_series:
            raise ValueError(
                "`series_level_features` gives back the level and scale that "
                "`standardize_series` removes: it needs standardize_series=True; received "
                f"series_level_features={series_level_features!r}, standardize_series="
                f"{standardize_series!r}."
            )
        if random_kernel_stem is not None and (vocabulary_size is not None or patch_length > 1):
            raise ValueError(
                "`random_kernel_stem` applies to numeric input without patches; received "
                f"random_kernel_stem={random_kernel_stem!r} with vocabulary_size="
                f"{vocabulary_size!r}, patch_length={patch_length!r}."
            )

        # === Layers ===
        if vocabulary_size is not None and char_ngram_buckets:
            self.stem = CharNGramTokenStem(
                vocabulary_size, hidden_dim, max_sequence_length, positions,
                char_ngram_buckets=char_ngram_buckets,
                char_ngrams_per_word=char_ngrams_per_word, dtype=dtype)
        elif vocabulary_size is not None:
            self.stem = TokenStem(vocabulary_size, hidden_dim, max_sequence_length, positions,
                                  dtype=dtype)
        elif random_kernel_stem is not None:
            self.stem = RandomKernelSeriesStem(
                num_features, hidden_dim, max_sequence_length, positions, standardize_series,
                series_level_features, **random_kernel_stem, dtype=dtype)
        else:
            self.stem = PatchStem(num_features, hidden_dim, max_sequence_length, positions,
                                  standardize_series, series_level_features,
                                  patch_length=patch_length, patch_stride=patch_stride,
                                  dtype=dtype)
        self.ngram_convolution = (
            NGramConvolution(ngram_widths, dropout=dropout, layer_norm_epsilon=layer_norm_epsilon,
                             dtype=dtype, name="ngram_convolution")
            if ngram_widths else None
        )
        self.embedding_dropout = Dropout(dropout, dtype=dtype)
        self.encoder_blocks = [
            TransformerEncoderBlock(
                intermediate_dim, num_heads, dropout=dropout,
                attention_dropout=attention_dropout, layer_norm_epsilon=layer_norm_epsilon,
                normalize_first=normalize_first, dtype=dtype, name=f"encoder_block_{i}",
            )
            for i in range(num_layers)
        ]
        self.encoder_norm = (
            keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=dtype, name="encoder_norm")
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
        self.vocabulary_size = vocabulary_size  # token or numeric input (_pooled_features)
        self.char_ngram_buckets = int(char_ngram_buckets)
        self.char_ngrams_per_word = int(char_ngrams_per_word)
        inputs = self.stem.symbolic_input()
        outputs = self._head(self._pooled_features(inputs))  # (B, num_classes)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        self.mixup_alpha = float(mixup_alpha)
        self.mixup_seed = keras.random.SeedGenerator() if mixup_alpha else None

        # === Config ===
        self.num_classes = num_classes
        self.num_features = num_features
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.max_sequence_length = max_sequence_length
        self.positions = positions
        self.normalize_first = normalize_first
        self.head_hidden_dim = head_hidden_dim
        self.layer_norm_epsilon = layer_norm_epsilon
        self.patch_length = patch_length
        self.patch_stride = patch_stride
        self.standardize_series = standardize_series
        self.ngram_widths = ngram_widths
        self.pooling_mode = pooling
        self.random_kernel_stem = (dict(random_kernel_stem) if random_kernel_stem is not None
                                   else None)
        self.series_level_features = series_level_features

    def adapt_stem(self, series):
        """Sets the `RandomKernelStem`'s biases from training series `(N, T, F)`,
        standardised first as the model's input is."""
        if not isinstance(self.stem, RandomKernelSeriesStem):
            raise ValueError("`adapt_stem` needs a model built with `random_kernel_stem`.")
        self.stem.adapt_kernels(series)

    def adapt_level_features(self, series, batch_size=256):
        """Sets the `SeriesLevelFeatures`' standardization from the statistics
        of training series `(N, T, F)` (NaN-padded)."""
        if getattr(self.stem, "level_features", None) is None:
            raise ValueError("`adapt_level_features` needs a model built with "
                             "`series_level_features=True`.")
        self.stem.adapt_level_features(series, batch_size)

    def token_features(self, token_ids):
        """Token input -> `(x, mask)`, the model's first layers (its `TokenStem`)."""
        return self.stem(token_ids)

    def _pooled_features(self, inputs):
        """The layers up to the pooling: `(B, T)` ids or `(B, T, F)` values -> `(B, d)`."""
        x, mask = self.stem(inputs)
        if self.ngram_convolution is not None:
            x = self.ngram_convolution(x, mask=mask)
        x = self.embedding_dropout(x)
        for block in self.encoder_blocks:
            x = block(x, mask=mask)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return self.pooling(x, mask=mask)  # (B, d)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "num_classes": self.num_classes,
            "vocabulary_size": self.vocabulary_size,
            "num_features": self.num_features,
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "max_sequence_length": self.max_sequence_length,
            "positions": self.positions,
            "normalize_first": self.normalize_first,
            "head_hidden_dim": self.head_hidden_dim,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "patch_length": self.patch_length,
            "patch_stride": self.patch_stride,
            "standardize_series": self.standardize_series,
            "ngram_widths": list(self.ngram_widths),
            "pooling": self.pooling_mode,
            "mixup_alpha": self.mixup_alpha,
            "char_ngram_buckets": self.char_ngram_buckets,
            "char_ngrams_per_word": self.char_ngrams_per_word,
            "random_kernel_stem": self.random_kernel_stem,
            "series_level_features": self.series_level_features,
        }
