"""`tf.data` input pipelines for translation and classification.

Tokenisation runs inside `tf.data` (batched `dataset.map` over the
tokenizer's `tf.function`), so the exported model and the training input use
the same graph code. Translation batches are built by token count with length
bucketing (section 5.1 of the paper: "sentence pairs were batched together by
approximate sequence length ... each training batch contained ... approximately
25000 source tokens and 25000 target tokens"), which wastes far less compute
on padding than fixed-length batches (`padding_fraction` measures it).

Element layout (docs/architecture.md):
    features["encoder_token_ids"]  (B, S) int32  x1 .. xm, 0-padded
    features["decoder_token_ids"]  (B, T) int32  [START] y1 .. yn, 0-padded
    labels                         (B, T) int32  y1 .. yn [END], 0-padded
"""

import warnings

import numpy as np
import tensorflow as tf

from training.text.tokenizers import END_ID, START_ID

_TOKENIZE_BATCH = 256  # Rows per tokenizer call: amortises the per-op overhead.
_MAX_SHUFFLE_BUFFER = 65536


class TruncationWarning(UserWarning):
    """Some examples were longer than `max_sequence_length` and were cut."""


def bucket_boundaries(max_sequence_length, min_length=8, growth=1.25):
    """Geometric bucket boundaries up to `max_sequence_length` (inclusive).

    Bucket i holds lengths in [boundaries[i-1], boundaries[i]); the last
    boundary is `max_sequence_length + 1`, so no example falls past it.

    Args:
        max_sequence_length: Longest sequence the pipeline emits.
        min_length: Upper end (exclusive) of the first bucket.
        growth: Ratio between consecutive boundaries (at least +1).

    Returns:
        A strictly increasing list of ints.
    """
    boundaries, boundary = [], min_length
    while boundary <= max_sequence_length:
        boundaries.append(boundary)
        boundary = max(boundary + 1, int(boundary * growth))
    return boundaries + [max_sequence_length + 1]


def _truncate(ids, limit):
    """Ragged (B, None) -> (ids cut to `limit`, (B,) bool "was longer")."""
    return ids[:, :limit], ids.row_lengths() > limit


def _add_start_end(ids):
    """Ragged y (B, None) -> ([START] y, y [END]), both ragged (B, None)."""
    ones = tf.ones([ids.nrows(), 1], tf.int32)  # (B, 1)
    splits = ids.row_splits.dtype
    start = tf.RaggedTensor.from_tensor(ones * START_ID, row_splits_dtype=splits)
    end = tf.RaggedTensor.from_tensor(ones * END_ID, row_splits_dtype=splits)
    return tf.concat([start, ids], axis=1), tf.concat([ids, end], axis=1)


def _tokenized(columns, tokenize, cache, max_sequence_length, what):
    """Maps `tokenize` over batches of `columns`; warns once if any was cut.

    `tokenize` gets (B,) tensors and returns ragged/dense tensors whose last
    entry is a (B,) bool "was truncated" flag. The flags are summed in one
    pass before returning; with `cache` that pass also fills the cache.
    """
    dataset = (
        tf.data.Dataset.from_tensor_slices(columns)
        .batch(_TOKENIZE_BATCH)
        .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
        .unbatch()
    )
    dataset = dataset.cache() if cache else dataset
    count = dataset.reduce(np.int64(0), lambda n, e: n + tf.cast(e[-1], tf.int64))
    _warn_truncated(int(count), len(columns[-1]), max_sequence_length, what)
    return dataset


def _warn_truncated(count, total, max_sequence_length, what):
    if count:  # stacklevel 4: the user's call of make_*_dataset.
        message = f"{count} of {total} examples were truncated to "
        message += f"max_sequence_length={max_sequence_length} ({what})."
        warnings.warn(message, TruncationWarning, stacklevel=4)


def _series_dataset(inputs, labels, max_sequence_length, stem_features=None):
    """Numbers (N, T) or (N, T, F) -> dataset of ({"features": (T, F)}, label),
    and `"stem_features"` (their rows of `stem_features`) where given.

    NaN is a missing value, or padding after a series' last known step
    (`keras_transformer.layers.series_masking`); a series is truncated when
    its own length exceeds `max_sequence_length`.
    """
    features = np.asarray(inputs, dtype=np.float32)
    features = features[:, :, None] if features.ndim == 2 else features  # (N, T, F)
    if features.ndim != 3:
        raise ValueError(
            f"inputs must be numbers of shape (N, T) or (N, T, F); received shape "
            f"{features.shape}."
        )
    infinite = np.isinf(features).any(axis=(1, 2))
    empty = np.isnan(features).all(axis=(1, 2))
    if infinite.any() or empty.any():
        i = int(np.flatnonzero(infinite | empty)[0])
        what = "holds an infinite value" if infinite[i] else "has no known value"
        raise ValueError(
            f"inputs: series {i} (0-based) {what}; "
            f"{int(infinite.sum())} series hold infinite values and {int(empty.sum())} have "
            "only NaN. NaN marks a missing value or padding; a series needs one known value."
        )
    known_steps = ~np.isnan(features).all(axis=2)  # (N, T)
    lengths = features.shape[1] - np.argmax(known_steps[:, ::-1], axis=1)  # own lengths
    longest = int(lengths.max())
    _warn_truncated(
        int((lengths > max_sequence_length).sum()),
        len(features),
        max_sequence_length,
        f"series of {longest} steps at most",
    )
    features = features[:, : min(max_sequence_length, longest)]  # (N, T', F)
    inputs = {"features": features}
    if stem_features is not None:
        rows = {len(a) for a in tf.nest.flatten(stem_features)}
        if rows != {len(features)}:
            raise ValueError(f"stem_features must have one row a series ({len(features)}); "
                             f"received rows {sorted(rows)}.")
        inputs["stem_features"] = stem_features
    return tf.data.Dataset.from_tensor_slices((inputs, labels))


def _check_common(num_inputs, num_labels, max_sequence_length, names):
    if num_inputs != num_labels:
        raise ValueError(
            f"{names[0]} has {num_inputs} items but {names[1]} has {num_labels}."
        )
    if num_inputs == 0:
        raise ValueError(f"{names[0]} is empty.")
    if max_sequence_length < 2:
        raise ValueError(
            f"max_sequence_length must be >= 2, received {max_sequence_length}."
        )


def _finish(dataset, num_examples, shuffle, seed, repeat, batch):
    """Shuffle and `batch` one pass, or an endless stream of passes.

    With `repeat`, the (tokenised) examples are held in memory and pass `e`
    visits them in the order `stateless_shuffle(range(n), seed=(seed, e))`,
    batched on its own (no batch spans two passes).  The stream is a pure
    function of `seed`: a new iterator over it, or over `stream.skip(n)`,
    yields the same batches whatever iterators came before.  That is what
    lets a killed run resume at its exact batch.  (`Dataset.shuffle` with
    `reshuffle_each_iteration=True` keeps a seed generator inside the
    dataset that every new iterator advances, so it does not.)
    """
    if not repeat:
        if shuffle:
            buffer_size = min(num_examples, _MAX_SHUFFLE_BUFFER)
            dataset = dataset.shuffle(buffer_size, seed=seed, reshuffle_each_iteration=True)
        return batch(dataset)
    if not shuffle:
        return tf.data.Dataset.counter().flat_map(lambda epoch: batch(dataset))
    examples = dataset.ragged_batch(num_examples).get_single_element()
    seed = tf.constant(seed, tf.int64)

    def one_pass(epoch):
        order = tf.random.experimental.stateless_shuffle(
            tf.range(num_examples), seed=tf.stack([seed, epoch])
        )
        return batch(tf.data.Dataset.from_tensor_slices(order).map(
            lambda i: tf.nest.map_structure(lambda column: column[i], examples)
        ))

    # Not autotuned: the passes only gather rows held in memory, so there is
    # nothing to tune, and the autotuner's thread held the deletion of an
    # iterator over the stream (the end of every `fit`) for 0.3-3.6 s in one
    # run of three or four: a third of a 10-second series run (2026-11-29).
    options = tf.data.Options()
    options.autotune.enabled = False
    return tf.data.Dataset.counter().flat_map(one_pass).with_options(options)


def make_translation_dataset(
    src_sentences,
    tgt_sentences,
    src_tokenizer,
    tgt_tokenizer,
    max_sequence_length,
    tokens_per_batch,
    shuffle=True,
    seed=0,
    cache=True,
    repeat=False,
    pad_to_length=None,
    drop_remainder=False,
    boundaries=None,
    pad_to_bucket_boundary=False,
):
    """Builds `({"encoder_token_ids", "decoder_token_ids"}, labels)` batches.

    Sources are cut to `max_sequence_length` pieces and targets to
    `max_sequence_length - 1`, so `[START] y` and `y [END]` fit too. The
    number of truncated pairs is counted exactly in one pass before the
    dataset is returned (with `cache=True` that pass fills the cache, so text
    is tokenised once) and reported in a single `TruncationWarning`.

    Args:
        src_sentences: List of source strings.
        tgt_sentences: List of target strings, aligned with the sources.
        src_tokenizer: Object with `tokenize(strings (B,)) -> ragged (B, None)`.
        tgt_tokenizer: Same, for the target language.
        max_sequence_length: Longest encoder and decoder sequence.
        tokens_per_batch: Batch size in tokens: every batch has at most this
            many positions in its longer side (batch * max(S, T)).
        shuffle: Shuffle examples (buffer up to 65,536) before batching.
        seed: Shuffle seed.
        cache: Keep the tokenised examples in memory after the first pass.
        repeat: An endless stream of passes, pass `e` shuffled with a seed
            from `(seed, e)`: `skip(n)` on a fresh iterator resumes exactly.
        pad_to_length: When set, no bucketing: every batch has
            `tokens_per_batch // pad_to_length` rows padded to exactly this
            length (fully static shapes with `drop_remainder=True`).
        drop_remainder: Drop incomplete batches (static batch size per bucket).
        boundaries: Bucket boundaries; defaults to `bucket_boundaries(...)`.
        pad_to_bucket_boundary: Pad every batch of a bucket to the bucket's
            longest length instead of the batch's: with `drop_remainder`,
            one static shape per bucket, which is what XLA compiles once.

    Returns:
        A `tf.data.Dataset`, prefetched.

    Raises:
        ValueError: On misaligned or empty inputs or inconsistent sizes.
    """
    _check_common(
        len(src_sentences),
        len(tgt_sentences),
        max_sequence_length,
        ("src_sentences", "tgt_sentences"),
    )
    check_translation_sizes(max_sequence_length, tokens_per_batch, pad_to_length)
    tokenize = translation_tokenize(src_tokenizer, tgt_tokenizer, max_sequence_length)
    columns = tuple(
        tf.constant(list(c), tf.string) for c in (src_sentences, tgt_sentences)
    )
    what = (
        f"source > {max_sequence_length} or target > {max_sequence_length - 1} tokens"
    )
    dataset = _tokenized(columns, tokenize, cache, max_sequence_length, what).map(
        translation_example
    )
    batch = translation_batcher(
        max_sequence_length, tokens_per_batch, pad_to_length, drop_remainder, boundaries,
        pad_to_bucket_boundary,
    )
    dataset = _finish(dataset, len(src_sentences), shuffle, seed, repeat, batch)
    return dataset.prefetch(tf.data.AUTOTUNE)


def check_translation_sizes(max_sequence_length, tokens_per_batch, pad_to_length):
    """Raises ValueError unless a batch of `tokens_per_batch` holds one sequence."""
    longest = pad_to_length or max_sequence_length
    if pad_to_length is not None and pad_to_length < max_sequence_length:
        raise ValueError(
            f"pad_to_length={pad_to_length} is shorter than "
            f"max_sequence_length={max_sequence_length}."
        )
    if tokens_per_batch < longest:
        raise ValueError(
            f"tokens_per_batch={tokens_per_batch} cannot hold one sequence of "
            f"length {longest}."
        )


def translation_tokenize(src_tokenizer, tgt_tokenizer, max_sequence_length):
    """(B,) source and target strings -> (source ids, [START] y, y [END], cut).

    The ids are ragged (B, None); sources are cut to `max_sequence_length`
    pieces and targets to one fewer; the last entry is a (B,) bool "was cut".
    """

    def tokenize(src, tgt):
        src_ids, src_long = _truncate(src_tokenizer.tokenize(src), max_sequence_length)
        tgt_ids, tgt_long = _truncate(
            tgt_tokenizer.tokenize(tgt), max_sequence_length - 1
        )
        decoder_ids, labels = _add_start_end(tgt_ids)
        return src_ids, decoder_ids, labels, src_long | tgt_long

    return tokenize


def translation_example(src, dec, labels, _):
    """`translation_tokenize`'s row -> ({"encoder_token_ids", "decoder_token_ids"}, labels)."""
    return {"encoder_token_ids": src, "decoder_token_ids": dec}, labels


def translation_batcher(max_sequence_length, tokens_per_batch, pad_to_length=None,
                        drop_remainder=False, boundaries=None, pad_to_bucket_boundary=False):
    """`batch(dataset)` of translation examples: by length bucket, or padded
    to `pad_to_length` (the arguments of `make_translation_dataset`)."""
    if pad_to_length is None:
        boundaries = list(boundaries or bucket_boundaries(max_sequence_length))
        # Bucket i holds lengths in [boundaries[i-1], boundaries[i]).
        longest_per_bucket = [b - 1 for b in boundaries] + [max_sequence_length]
        batch_sizes = [max(1, tokens_per_batch // n) for n in longest_per_bucket]

    def batch(dataset):
        if pad_to_length is not None:
            shape = [pad_to_length]
            dataset = dataset.padded_batch(
                tokens_per_batch // pad_to_length,
                padded_shapes=(
                    {"encoder_token_ids": shape, "decoder_token_ids": shape},
                    shape,
                ),
                drop_remainder=drop_remainder,
            )
        else:
            dataset = dataset.bucket_by_sequence_length(
                lambda features, labels: tf.maximum(
                    tf.shape(features["encoder_token_ids"])[0],
                    tf.shape(features["decoder_token_ids"])[0],
                ),
                bucket_boundaries=boundaries,
                bucket_batch_sizes=batch_sizes,
                drop_remainder=drop_remainder,
                pad_to_bucket_boundary=pad_to_bucket_boundary,
            )
        return dataset

    return batch


def make_classification_dataset(
    inputs,
    labels,
    tokenizer=None,
    max_sequence_length=128,
    batch_size=32,
    shuffle=True,
    seed=0,
    cache=True,
    repeat=False,
    pad_to_length=None,
    drop_remainder=False,
    sample_weight=None,
    stem_features=None,
):
    """Builds `({"token_ids"} or {"features"}, labels)` batches, and sample
    weights third where `sample_weight` is given.

    With a tokenizer, `inputs` are strings, cut to `max_sequence_length`
    pieces (one `TruncationWarning` with the exact count) and 0-padded to the
    longest row of each batch, or to `pad_to_length`. Without one, `inputs`
    are numeric sequences (N, T) or (N, T, F), e.g. from `read_ucr`, cut to
    `max_sequence_length` steps; NaN marks missing values and, at a series'
    end, padding (`keras_transformer.layers.series_masking`).

    Args:
        inputs: List of strings, or an array (N, T) / (N, T, F).
        labels: Int class ids (N,).
        tokenizer: A `WordPieceTokenizer`-like object, or None for numbers.
        max_sequence_length: Longest token sequence / time series kept.
        batch_size: Examples per batch.
        shuffle: Reshuffle every epoch.
        seed: Shuffle seed.
        cache: Cache the tokenised examples in memory.
        repeat: An endless, deterministic stream of passes (see above).
        pad_to_length: Fixed padded length for token ids.
        drop_remainder: Drop the last incomplete batch.
        sample_weight: Optional float weights of each example, (N,) or
            (N, k) (e.g. one column per ensemble member), for token inputs.
        stem_features: For numeric series, their stem's fixed features
            computed once (`SeriesStem.stem_features`, a dict of arrays of N
            rows, or a tuple of them, one a member of an ensemble): each
            batch's inputs then hold them as `"stem_features"` beside
            `"features"`, in the same order.

    Returns:
        A prefetched `tf.data.Dataset` of `({"token_ids": int32 (B, T)}, int32
        (B,))` or `({"features": float32 (B, T, F)}, int32 (B,))`.

    Raises:
        ValueError: On misaligned inputs, negative labels, infinite features
            or a series of NaN only.
    """
    labels = np.asarray(labels, dtype=np.int32)
    _check_common(len(inputs), len(labels), max_sequence_length, ("inputs", "labels"))
    if labels.ndim != 1 or labels.min() < 0:
        raise ValueError(
            f"labels must be non-negative class ids (N,), received {labels[:8]}."
        )
    if tokenizer is None:
        if pad_to_length is not None:
            raise ValueError(
                "pad_to_length applies to token ids; numeric series are not padded."
            )
        if sample_weight is not None:
            raise ValueError("sample_weight is supported for token inputs only.")
        dataset = _series_dataset(inputs, labels, max_sequence_length, stem_features)
    else:
        if stem_features is not None:
            raise ValueError("stem_features apply to numeric series, not to token inputs.")

        tokenize = classification_tokenize(tokenizer, max_sequence_length)
        columns = (tf.constant(list(inputs), tf.string), labels)
        if sample_weight is not None:
            sample_weight = np.asarray(sample_weight, np.float32)
            if sample_weight.shape[:1] != labels.shape or sample_weight.ndim > 2:
                raise ValueError(
                    f"sample_weight must be (N,) or (N, k) with N={len(labels)} examples; "
                    f"received shape {sample_weight.shape}."
                )
            columns += (sample_weight,)
        dataset = _tokenized(columns, tokenize, cache, max_sequence_length, "tokens")
        dataset = dataset.map(lambda ids, label, *rest: ({"token_ids": ids}, label, *rest[:-1]))

    weight_shape = None if sample_weight is None else list(sample_weight.shape[1:])
    batch = classification_batcher(tokenizer, batch_size, pad_to_length, drop_remainder,
                                   weight_shape)
    dataset = _finish(dataset, len(labels), shuffle, seed, repeat, batch)
    return dataset.prefetch(tf.data.AUTOTUNE)


def classification_tokenize(tokenizer, max_sequence_length):
    """(B,) strings, labels, weights... -> (ragged ids, labels, weights..., cut)."""

    def tokenize(text, label, *weight):  # (B,) strings -> ragged (B, None) ids.
        ids, too_long = _truncate(tokenizer.tokenize(text), max_sequence_length)
        return ids, label, *weight, too_long

    return tokenize


def classification_batcher(tokenizer, batch_size, pad_to_length=None, drop_remainder=False,
                           weight_shape=None):
    """`batch(dataset)` of classification examples (`make_classification_dataset`'s).

    `weight_shape`: the shape of one example's sample weights, or None
    without weights.
    """

    def batch(dataset):
        if tokenizer is None:
            return dataset.batch(batch_size, drop_remainder=drop_remainder)
        shape = [pad_to_length if pad_to_length is not None else None]
        per_word = getattr(tokenizer, "char_ngrams_per_word", None)
        shape += [1 + per_word] if per_word else []  # CharNGramTokenizer's packed ids
        weights = () if weight_shape is None else (weight_shape,)
        return dataset.padded_batch(
            batch_size,
            padded_shapes=({"token_ids": shape}, [], *weights),
            drop_remainder=drop_remainder,
        )

    return batch


def padding_fraction(dataset, max_batches=None):
    """Fraction of integer feature positions that are padding (id 0).

    1 - padding_fraction is the share of real tokens in the tensors the model
    actually processes; bucketing should make it much smaller than fixed
    padding on the same data.

    Args:
        dataset: Yields `(features dict, labels)` with int token-id features.
        max_batches: Only look at this many batches (None: all).

    Returns:
        A float in [0, 1]: padded positions / all positions, summed over the
        integer features (encoder and decoder ids; labels are not counted).
    """
    padded = total = 0
    for index, (features, _) in enumerate(dataset):
        if max_batches is not None and index >= max_batches:
            break
        for value in features.values():
            if value.dtype.is_integer:
                padded += int(tf.reduce_sum(tf.cast(value == 0, tf.int64)))
                total += int(tf.size(value, out_type=tf.int64))
    return padded / total if total else 0.0
