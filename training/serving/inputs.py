"""What a served model reads: sentences, series or images, parsed and batched.

One class a kind of input, each answering the same five questions for the
serving side of a task (`training.serving.task_serving`): how one raw input
is parsed (`parse`), how inputs are ordered into batches (`batch_key`,
`same_key_batches`), what the Keras model is given (`model_inputs`), what a
SavedModel signature is fed (`serving_inputs`) and which inputs an export is
checked on (`probes`).
"""

import math
import re

import numpy as np
import tensorflow as tf

from keras_transformer.models.transformer_config import PAD_ID
from training.data import series_files
from training.serving.signatures import fill_empty_rows_numpy

# Strings every export must survive (empty, blank, unseen scripts, the
# reserved tokens); the verifiers feed them beside in-vocabulary examples.
PROBES = (
    "",
    "a",
    "two words",
    "Ünïcödé, emoji 😀 and 中文 mixed",
    "   \t  ",
    "[START] [END] [PAD] [UNK]",
)

_NUMBER_SEPARATORS = re.compile(r"[,\s]+")


def token_ids(tokenizer, sentences, max_sequence_length):
    """Strings -> `(N, max(S, 1))` int32 ids cut to `max_sequence_length`, 0-padded.

    As the SavedModel's tokenizer-in-the-graph does it (`training.serving.signatures`): a
    batch of empty sentences still has one (padding) column.
    """
    ragged = tokenizer.tokenize(tf.constant(list(sentences), tf.string))
    ids = ragged[:, :max_sequence_length].to_tensor(PAD_ID).numpy()
    return np.pad(ids, [(0, 0), (0, max(1 - ids.shape[1], 0))] + [(0, 0)] * (ids.ndim - 2))


def text_input(example):
    """One sentence: a `str` as given, `bytes` decoded as UTF-8."""
    if isinstance(example, bytes):
        return example.decode("utf-8", errors="replace")
    if not isinstance(example, str):
        raise ValueError(
            f"Each input must be a string; received {type(example).__name__}: {example!r}."
        )
    return example


def text_probes(tokenizer, num_examples, seed):
    """In-vocabulary sentences plus `PROBES` (hostile strings)."""
    rng = np.random.default_rng(seed)
    words = [t for t in tokenizer.vocabulary if t.isalpha() and not t.startswith("[")]
    sentences = [
        " ".join(rng.choice(words, size=rng.integers(1, 8))) for _ in range(num_examples)
    ]
    return sentences + list(PROBES)


class TextInputs:
    """Sentences, tokenized by `tokenizer` as the SavedModel tokenizes them.

    A sentence without tokens reads as one `[UNK]` for a classifier, as
    served (`training.serving.signatures.fill_empty_rows`).
    """

    #: Token inputs are masked: sentences of any lengths share a batch.
    same_key_batches = False

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    parse = staticmethod(text_input)

    def batch_key(self, example):
        return len(example)

    def model_inputs(self, model, examples):
        ids = token_ids(self.tokenizer, examples, int(model.max_sequence_length))
        return fill_empty_rows_numpy(ids)

    def serving_inputs(self, examples):
        return {"sentences": np.asarray(list(examples), dtype=object)}

    def probes(self, model, num_examples, seed):
        return text_probes(self.tokenizer, num_examples, seed)


def _number(text):
    """A float of a line's value; `?` is missing (NaN), as in the series files."""
    return math.nan if text == "?" else float(text)


class SeriesInputs:
    """Series `(T, F)` float32, NaN-padded to the longest of a batch and cut
    to the model's `max_sequence_length` steps, as served.

    Args:
        channels_first: The export takes `(B, F, T)` (aeon's and sktime's
            layout, `TimeSeriesClassifier.export`'s); False for `(B, T, F)`,
            the layout of exports written before series exports took it.
    """

    #: Series are masked (NaN padding): any lengths share a batch.
    same_key_batches = False
    tokenizer = None

    def __init__(self, channels_first=True):
        self.channels_first = bool(channels_first)

    def parse(self, example):
        """A series `(T, F)` float32: an array (`(T,)` is one feature), or a line
        of numbers separated by commas or spaces, time steps by ";" when F > 1
        ("1 2 3" is (3, 1); "1,2; 3,4" is (2, 2)).  A missing value is NaN
        (`?` or `nan` in a line); the series needs one known value."""
        if isinstance(example, (str, bytes)):
            text = example.decode() if isinstance(example, bytes) else example
            steps = [s.strip() for s in text.split(";")] if ";" in text else None
            try:
                if steps is None:
                    values = [[_number(v)] for v in _NUMBER_SEPARATORS.split(text.strip()) if v]
                else:
                    values = [[_number(v) for v in _NUMBER_SEPARATORS.split(s) if v]
                              for s in steps if s]
                series = np.asarray(values, np.float32)
            except ValueError as error:
                raise ValueError(
                    "A series must be numbers ('?' or NaN where missing), as many at "
                    f"every step; received {text!r}."
                ) from error
        else:
            series = np.asarray(example, np.float32)
            series = series[:, None] if series.ndim == 1 else series
        if (series.ndim != 2 or series.shape[0] == 0 or np.isinf(series).any()
                or np.isnan(series).all()):
            raise ValueError(
                "A series must be numbers, (T,) or (T, F) with T >= 1 and one F per "
                "step, finite or NaN where missing, and at least one known; received "
                f"{example!r}."
            )
        return series

    def batch_key(self, example):
        return len(example)

    def model_inputs(self, model, examples):
        features = series_files.pad_series(list(examples))[:, : int(model.max_sequence_length)]
        if features.shape[-1] != model.num_features:
            raise ValueError(
                f"The model reads {model.num_features} features per step; received "
                f"series of shape {features.shape[1:]}."
            )
        return features

    def serving_inputs(self, examples):
        features = series_files.pad_series(list(examples))  # (B, T, F)
        return {"features": features.transpose(0, 2, 1) if self.channels_first else features}

    def probes(self, model, num_examples, seed):
        """Standard normal series of min(16, `max_sequence_length`) steps, the
        second NaN-padded after half of them, the third with one missing
        value and the fourth with a missing step (at least 4 series)."""
        length = min(16, int(model.max_sequence_length))
        rng = np.random.default_rng(seed)
        shape = (max(num_examples, 4), length, model.num_features)
        series = rng.standard_normal(shape).astype(np.float32)
        series[1, max(length // 2, 1):] = np.nan  # a shorter series, padded
        series[2, length // 3, 0] = np.nan  # a missing value
        if length > 2:
            series[3, length // 2] = np.nan  # a missing step
        return series


class ImageInputs:
    """Images `(H, W, C)` float32; H = W = the model's `image_size`."""

    #: Images are not masked: only images of one size share a batch.
    same_key_batches = True
    tokenizer = None

    def parse(self, example):
        """An image array `(H, W, C)`, float32."""
        if isinstance(example, (str, bytes)):
            raise ValueError(
                f"task='image' takes image arrays (H, W, C), not text; received {example!r:.40}."
            )
        image = np.asarray(example, np.float32)
        if image.ndim != 3:
            raise ValueError(f"An image must be (H, W, C); received shape {image.shape}.")
        return image

    def batch_key(self, example):
        return np.shape(example)

    def model_inputs(self, model, examples):
        return np.asarray(list(examples), np.float32)

    def serving_inputs(self, examples):
        return {"images": np.asarray(list(examples), np.float32)}

    def probes(self, model, num_examples, seed):
        """Uniform [0, 1) images of the model's size."""
        shape = (num_examples, model.image_size, model.image_size, model.num_channels)
        return np.random.default_rng(seed).random(shape, dtype=np.float32)
