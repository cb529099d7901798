"""The config fields that belong to one task, one frozen dataclass per task.

`training.config.TrainingConfig` holds what every task uses; the fields
here belong to the task that reads them, and a config refuses a field of
another task.  They are still read flat (`config.min_word_count`), and set
flat (`--set min_word_count=2`, a preset's `"min_word_count": 2`).

This module imports nothing of the package, so that `--help` and the
config's checks can read it without TensorFlow.  Each `Task` names its
class as `Task.options`; `OPTIONS` maps the config's task names to them.
"""

import dataclasses
import math

POOLINGS = ("mean", "max")
SERIES_STEMS = ("patches", "random_kernels")
#: The text classifiers a config names by `model`.
TEXT_MODELS = ("transformer", "text_cnn")
# The allowed values of the enumerated option fields (validation and --help).
CHOICES = {"pooling": POOLINGS, "series_stem": SERIES_STEMS, "model": TEXT_MODELS}


def _positive_int(name, value, nullable=False):
    if value is None and nullable:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        allowed = "a positive integer or null" if nullable else "a positive integer"
        raise ValueError(f"`{name}` must be {allowed}; received {name}={value!r}.")


def _non_negative_int(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer; received {name}={value!r}.")


def _non_negative_number(name, value):
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0 <= value < math.inf):
        raise ValueError(f"`{name}` must be a finite number >= 0; received {name}={value!r}.")


def _boolean(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be true or false; received {name}={value!r}.")


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    """No fields of its own: the options of a task that has none."""

    def validate(self, from_data=()):
        """Raises ValueError naming the field and its value.

        Args:
            from_data: The fields the task fills from its data where null.
        """


@dataclasses.dataclass(frozen=True)
class TranslationOptions(TaskOptions):
    """The fields of task "translation"."""

    # The language of the source sentences (Multi30k: "de", "en", "fr" or "cs").
    source_language: str = "de"
    # The language of the target sentences, which BLEU is computed in.
    target_language: str = "en"
    # Each training batch holds about this many tokens.
    tokens_per_batch: int = 2048
    # Validation sentences decoded after each epoch for BLEU (0: none).
    eval_sentences: int = 200
    # Beams of the final test decoding.
    beam_size: int = 4
    # Length penalty alpha of beam search.
    length_penalty: float = 0.6
    # Example translations printed at the end of training.
    num_examples: int = 5

    def validate(self, from_data=()):
        _positive_int("tokens_per_batch", self.tokens_per_batch)
        _positive_int("beam_size", self.beam_size)
        for name in ("eval_sentences", "num_examples"):
            _non_negative_int(name, getattr(self, name))
        _non_negative_number("length_penalty", self.length_penalty)


@dataclasses.dataclass(frozen=True)
class ClassifierOptions(TaskOptions):
    """The fields shared by the text and the series classifiers."""

    # Number of classes; 0 counts them in the training data.
    num_classes: int = 0
    # Mixup strength alpha of lam ~ Beta(alpha, alpha) (0: no mixup).
    mixup_alpha: float = 0.0
    # Classifiers trained side by side whose mean probabilities answer.
    ensemble_size: int | None = 1

    def validate(self, from_data=()):
        _non_negative_int("num_classes", self.num_classes)
        _non_negative_number("mixup_alpha", self.mixup_alpha)
        _positive_int("ensemble_size", self.ensemble_size, "ensemble_size" in from_data)


@dataclasses.dataclass(frozen=True)
class TextClassificationOptions(ClassifierOptions):
    """The fields of task "classification" (text)."""

    # The classifier: "transformer" (a token stem, then the encoder) or "text_cnn"
    # (Kim's CNN: n-gram convolutions, max-pooled, no attention).
    model: str = "transformer"
    # Widths of the n-gram convolutions before the encoder ([]: none).
    ngram_widths: tuple[int, ...] = ()
    # How the encoder output is pooled over the tokens.
    pooling: str = "mean"
    # Whole words seen at least this many times make the vocabulary (0: word pieces).
    min_word_count: int = 0
    # Each ensemble member trains on all folds of the sentences but its own.
    cross_fit: bool = False
    # Hash buckets of the character n-grams added to each word (0: none).
    char_ngram_buckets: int = 0

    def validate(self, from_data=()):
        super().validate(from_data)
        if self.model not in TEXT_MODELS:
            raise ValueError(f"`model` must be one of {list(TEXT_MODELS)}; received "
                             f"model={self.model!r}.")
        if not isinstance(self.ngram_widths, tuple) or any(
            not isinstance(w, int) or isinstance(w, bool) or w <= 0 for w in self.ngram_widths
        ):
            raise ValueError(
                "`ngram_widths` must be a list of positive integers; received "
                f"ngram_widths={self.ngram_widths!r}."
            )
        if self.pooling not in POOLINGS:
            raise ValueError(
                f"`pooling` must be one of {list(POOLINGS)}; received pooling={self.pooling!r}."
            )
        for name in ("min_word_count", "char_ngram_buckets"):
            _non_negative_int(name, getattr(self, name))
        _boolean("cross_fit", self.cross_fit)


@dataclasses.dataclass(frozen=True)
class SeriesOptions(ClassifierOptions):
    """The fields of task "timeseries"."""

    # Time steps per token (1: one token per step).
    patch_length: int | None = 1
    # Time steps between patch starts (null: patches do not overlap).
    patch_stride: int | None = None
    # Each series is scaled to mean 0 and standard deviation 1 inside the model.
    standardize_series: bool = False
    # The tokens: "patches" of steps, or "random_kernels": MiniRocket's features of
    # `stem_windows` windows of the series (keras_transformer.layers.RandomKernelStem).
    series_stem: str = "patches"
    # Windows (tokens) per series of the "random_kernels" stem.
    stem_windows: int = 8
    # Features per window of the "random_kernels" stem (84 kernels x dilations x biases).
    stem_kernel_features: int = 2016
    # Each series' per-channel mean and log standard deviation (what `standardize_series`
    # removes), projected and added to every token (keras_transformer.layers.SeriesLevelFeatures).
    series_level_features: bool = False

    def validate(self, from_data=()):
        super().validate(from_data)
        _positive_int("patch_length", self.patch_length, "patch_length" in from_data)
        _positive_int("patch_stride", self.patch_stride, nullable=True)
        if (self.patch_stride is not None and self.patch_length is not None
                and self.patch_stride > self.patch_length):
            raise ValueError(
                f"`patch_stride` must not exceed `patch_length`; received patch_stride="
                f"{self.patch_stride!r}, patch_length={self.patch_length!r}."
            )
        _boolean("standardize_series", self.standardize_series)
        if self.series_stem not in SERIES_STEMS:
            raise ValueError(f"`series_stem` must be one of {SERIES_STEMS}; received "
                             f"series_stem={self.series_stem!r}.")
        _positive_int("stem_windows", self.stem_windows)
        _positive_int("stem_kernel_features", self.stem_kernel_features)
        _boolean("series_level_features", self.series_level_features)
        if self.series_level_features and not self.standardize_series:
            raise ValueError(
                "`series_level_features` gives back the level and scale that `standardize_series` "
                "removes: set standardize_series=true too; received series_level_features=true, "
                "standardize_series=false."
            )
        if self.series_stem == "random_kernels" and (self.patch_length or 1) > 1:
            raise ValueError(
                "series_stem='random_kernels' makes its own tokens, without patches: leave "
                f"`patch_length` null or 1; received patch_length={self.patch_length!r}."
            )


#: The options class of each trained task (`training.config.TASKS`).
OPTIONS = {
    "translation": TranslationOptions,
    "classification": TextClassificationOptions,
    "timeseries": SeriesOptions,
}


def options_class(task):
    """The options class of `task`; `TaskOptions` (no fields) for another name
    (or for a value that is no name, which the config's checks refuse)."""
    return OPTIONS.get(task, TaskOptions) if isinstance(task, str) else TaskOptions


def option_names(cls):
    """The field names of an options class, in order."""
    return tuple(f.name for f in dataclasses.fields(cls))


def option_defaults():
    """{field: default} of every task's fields; a field two tasks share has one default."""
    defaults = {}
    for cls in OPTIONS.values():
        for field in dataclasses.fields(cls):
            defaults.setdefault(field.name, field.default)
    return defaults


def tasks_of(name):
    """The tasks that have field `name`."""
    return [task for task, cls in OPTIONS.items() if name in option_names(cls)]
