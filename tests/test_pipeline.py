"""Tests for training/pipeline/datasets.py: layout, shift, truncation, bucketing, padding."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.models import Transformer
from training.data.toy import generate_pairs
from training.pipeline.datasets import (
    TruncationWarning,
    bucket_boundaries,
    make_classification_dataset,
    make_translation_dataset,
    padding_fraction,
)
from training.text.tokenizers import (
    END_ID,
    START_ID,
    WordPieceTokenizer,
    learn_wordpiece_vocabulary,
)

MAX_LENGTH = 24
TOKENS_PER_BATCH = 192


@pytest.fixture(scope="module")
def toy():
    pairs = generate_pairs(300, seed=0)
    src, tgt = [en for en, _ in pairs], [de for _, de in pairs]
    src_tok = WordPieceTokenizer(learn_wordpiece_vocabulary(src, 150))
    tgt_tok = WordPieceTokenizer(learn_wordpiece_vocabulary(tgt, 150))
    return src, tgt, src_tok, tgt_tok


def _translation(toy, **kwargs):
    src, tgt, src_tok, tgt_tok = toy
    kwargs = {
        "max_sequence_length": MAX_LENGTH,
        "tokens_per_batch": TOKENS_PER_BATCH,
    } | kwargs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        return make_translation_dataset(src, tgt, src_tok, tgt_tok, **kwargs)


def _lengths(tokenizer, sentences):
    return tokenizer.tokenize(tf.constant(sentences)).row_lengths().numpy()


def _strings(tokenizer, ids):
    return [
        s.decode()
        for s in tokenizer.detokenize(tf.RaggedTensor.from_tensor(ids)).numpy()
    ]


def test_layout_shift_by_one_and_content(toy):
    src, tgt, src_tok, tgt_tok = toy
    dataset = _translation(
        toy, max_sequence_length=64, tokens_per_batch=512, shuffle=False
    )
    spec_features, spec_labels = dataset.element_spec
    assert set(spec_features) == {"encoder_token_ids", "decoder_token_ids"}
    assert all(s.dtype == tf.int32 for s in (*spec_features.values(), spec_labels))
    seen = []
    for features, labels in dataset:
        decoder, labels = features["decoder_token_ids"].numpy(), labels.numpy()
        assert decoder.shape == labels.shape
        assert (decoder[:, 0] == START_ID).all()
        lengths = (labels != 0).sum(axis=1)
        assert ((decoder != 0).sum(axis=1) == lengths).all()
        assert (labels[np.arange(len(labels)), lengths - 1] == END_ID).all()
        shifted = labels[:, :-1] != END_ID  # Labels are decoder inputs shifted by one.
        np.testing.assert_array_equal(decoder[:, 1:][shifted], labels[:, :-1][shifted])
        seen += zip(
            _strings(src_tok, features["encoder_token_ids"]),
            _strings(tgt_tok, labels),
            strict=True,
        )
    assert sorted(seen) == sorted(
        zip(src, tgt, strict=True)
    )  # Every pair exactly once.


def test_truncation_warning_count_is_exact_and_single(toy):
    src, tgt, src_tok, tgt_tok = toy
    limit = 12
    expected = int(
        ((_lengths(src_tok, src) > limit) | (_lengths(tgt_tok, tgt) > limit - 1)).sum()
    )
    assert 0 < expected < len(src)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dataset = make_translation_dataset(
            src, tgt, src_tok, tgt_tok, limit, 120, seed=1
        )
    messages = [str(w.message) for w in caught if w.category is TruncationWarning]
    assert messages == [
        f"{expected} of {len(src)} examples were truncated to max_sequence_length={limit} "
        f"(source > {limit} or target > {limit - 1} tokens)."
    ]
    for features, labels in dataset:
        assert (
            features["encoder_token_ids"].shape[1] <= limit and labels.shape[1] <= limit
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # No warning when nothing is cut.
        make_translation_dataset(src, tgt, src_tok, tgt_tok, 64, 512)


def test_bucketing_respects_budget_and_pads_less_than_fixed_length(toy):
    bucketed = _translation(toy)
    fixed = _translation(toy, pad_to_length=MAX_LENGTH)
    for features, _ in bucketed:
        rows, length = features["decoder_token_ids"].shape
        length = max(length, features["encoder_token_ids"].shape[1])
        assert rows * length <= TOKENS_PER_BATCH
    assert padding_fraction(bucketed) < 0.5 * padding_fraction(fixed)


def test_fixed_padding_with_drop_remainder_has_static_shapes(toy):
    dataset = _translation(toy, pad_to_length=32, drop_remainder=True)
    rows = TOKENS_PER_BATCH // 32
    features, labels = dataset.element_spec
    assert (
        features["encoder_token_ids"].shape
        == features["decoder_token_ids"].shape
        == (rows, 32)
    )
    assert labels.shape == (rows, 32)
    assert sum(1 for _ in dataset) == len(toy[0]) // rows


def test_shuffle_is_seeded_and_repeat_is_endless(toy):
    def first(dataset):
        return next(iter(dataset))[0]["encoder_token_ids"].numpy()

    np.testing.assert_array_equal(
        first(_translation(toy, seed=5)), first(_translation(toy, seed=5))
    )
    one_epoch = sum(1 for _ in _translation(toy, shuffle=False))
    repeated = _translation(toy, repeat=True).take(one_epoch + 5)
    assert sum(1 for _ in repeated) == one_epoch + 5


def test_repeated_stream_is_a_pure_function_of_the_seed(toy):
    """What resuming relies on: skip(n) on a fresh iterator == the n-th batch.

    Other iterators created before must not change the stream (a
    reshuffle_each_iteration shuffle fails this: its seed generator lives in
    the dataset and every new iterator advances it).
    """
    stream = _translation(toy, repeat=True, seed=3)
    one_epoch = sum(1 for _ in _translation(toy, shuffle=False))
    def ids(batch):
        return batch[0]["encoder_token_ids"].numpy()

    continuous = [ids(b) for b in stream.take(2 * one_epoch + 2)]
    for _ in stream.take(one_epoch + 1):  # another iterator, consumed first
        pass
    skip = one_epoch - 1  # resume across a pass boundary
    resumed = [ids(b) for b in stream.skip(skip).take(4)]
    for a, b in zip(continuous[skip : skip + 4], resumed, strict=True):
        np.testing.assert_array_equal(a, b)
    # Each pass is a fresh shuffle holding every example once; no batch
    # spans two passes.
    everything = sorted(
        tuple(r[r > 0]) for b in _translation(toy, shuffle=False) for r in ids(b)
    )
    rows, pass_length = [], 0
    while len(rows) < len(everything):
        rows += [tuple(r[r > 0]) for r in continuous[pass_length]]
        pass_length += 1
    assert sorted(rows) == everything
    assert not np.array_equal(continuous[0], continuous[pass_length])


def test_translation_argument_errors(toy):
    src, tgt, src_tok, tgt_tok = toy
    with pytest.raises(
        ValueError, match="src_sentences has 300 items but tgt_sentences has 299"
    ):
        make_translation_dataset(src, tgt[:-1], src_tok, tgt_tok, 16, 256)
    with pytest.raises(ValueError, match="pad_to_length=8 is shorter"):
        make_translation_dataset(src, tgt, src_tok, tgt_tok, 16, 256, pad_to_length=8)
    with pytest.raises(ValueError, match="tokens_per_batch=10 cannot hold"):
        make_translation_dataset(src, tgt, src_tok, tgt_tok, 16, 10)


def test_bucket_boundaries_are_increasing_and_cover_the_maximum():
    boundaries = bucket_boundaries(64)
    assert boundaries[0] == 8 and boundaries[-1] == 65
    assert all(a < b for a, b in zip(boundaries, boundaries[1:], strict=False))


def test_classification_from_text(toy):
    src, _, src_tok, _ = toy
    labels = [i % 3 for i in range(len(src))]
    expected = int((_lengths(src_tok, src) > 6).sum())
    with pytest.warns(TruncationWarning, match=f"^{expected} of {len(src)} examples"):
        dataset = make_classification_dataset(
            src, labels, src_tok, 6, batch_size=16, shuffle=False
        )
    features, batch_labels = next(iter(dataset))
    assert (
        features["token_ids"].dtype == tf.int32 and features["token_ids"].shape[1] <= 6
    )
    assert batch_labels.numpy().tolist() == labels[:16]
    fixed = make_classification_dataset(
        src[:40],
        labels[:40],
        src_tok,
        64,
        batch_size=16,
        pad_to_length=64,
        drop_remainder=True,
    )
    assert fixed.element_spec[0]["token_ids"].shape == (16, 64)
    assert sum(1 for _ in fixed) == 2


def test_classification_from_series():
    series = np.arange(5 * 7, dtype=np.float64).reshape(5, 7)
    dataset = make_classification_dataset(
        series, [0, 1, 0, 1, 1], batch_size=2, shuffle=False
    )
    features, labels = next(iter(dataset))
    assert features["features"].dtype == tf.float32 and features["features"].shape == (
        2,
        7,
        1,
    )
    np.testing.assert_array_equal(features["features"][1, :, 0], series[1])
    assert labels.numpy().tolist() == [0, 1]
    with pytest.warns(TruncationWarning, match=r"^5 of 5 examples.*series of 7 steps"):
        short = make_classification_dataset(series, [0] * 5, max_sequence_length=4)
    assert short.element_spec[0]["features"].shape.as_list() == [None, 4, 1]
    series[2, 3] = np.inf
    with pytest.raises(ValueError, match=r"series 2 \(0-based\) holds an infinite value"):
        make_classification_dataset(series, [0, 1, 0, 1, 1])
    series[2, 3] = 0.0
    series[4] = np.nan
    with pytest.raises(ValueError, match=r"series 4 \(0-based\) has no known value"):
        make_classification_dataset(series, [0, 1, 0, 1, 1])
    with pytest.raises(ValueError, match="inputs has 5 items but labels has 4"):
        make_classification_dataset(series, [0, 1, 0, 1])


def test_padding_fraction_counts_zero_ids_in_integer_features():
    features = {
        "token_ids": tf.constant([[5, 0], [6, 7]]),
        "mask": tf.constant([[1.0, 0.0]] * 2),
    }
    dataset = tf.data.Dataset.from_tensors((features, tf.constant([0, 1]))).repeat(3)
    assert padding_fraction(dataset) == pytest.approx(0.25)
    assert padding_fraction(dataset, max_batches=1) == pytest.approx(0.25)


def test_fit_on_bucketed_batches_traces_the_train_step_once(toy):
    """Batches of many shapes (bucketing) go through one traced train step:
    the pipeline's spec leaves batch and length open, so `fit` neither
    retraces per bucket nor per epoch."""
    one_pass = _translation(toy)
    shapes = [tuple(f["decoder_token_ids"].shape) for f, _ in one_pass]
    dataset = _translation(toy, repeat=True)  # as train.py streams it
    assert len(set(shapes)) >= 3, shapes  # otherwise the test proves nothing
    keras.utils.set_random_seed(0)
    model = Transformer.from_preset(
        "tiny", vocabulary_size=150, num_layers=1, hidden_dim=16, num_heads=2,
        intermediate_dim=16, max_sequence_length=MAX_LENGTH + 2,
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    traces = []
    step = model.train_step

    def counting_step(data):
        traces.append(1)  # Python runs once per trace
        return step(data)

    model.train_step = counting_step
    fit = dict(steps_per_epoch=len(shapes), verbose=0, shuffle=False)
    model.fit(dataset, epochs=1, **fit)
    # A first call may trace twice (tf.function's variable-creation pass);
    # a step specialised to batch shapes would trace once per new shape.
    first = len(traces)
    assert first <= 2, f"{first} traces for {len(set(shapes))} batch shapes"
    history = model.fit(dataset, epochs=2, **fit)
    assert len(traces) == first, "fit retraced the train step in later epochs"
    assert np.all(np.isfinite(history.history["loss"]))


def test_an_in_memory_stream_is_not_autotuned():
    """An endless stream of in-memory passes only gathers rows: autotuning
    it tunes nothing, and its thread held the deletion of the iterator (the
    end of each `fit`) for seconds.  A single pass keeps tf.data's default."""
    series = np.random.default_rng(0).normal(size=(12, 16)).astype("float32")
    labels = np.arange(12) % 3
    stream = make_classification_dataset(series, labels, batch_size=4, repeat=True)
    assert stream.options().autotune.enabled is False
    assert next(iter(stream))[0]["features"].shape == (4, 16, 1)
    one_pass = make_classification_dataset(series, labels, batch_size=4)
    assert one_pass.options().autotune.enabled is not False


def test_a_known_size_is_taken_without_a_pass_and_an_unknown_one_is_counted():
    from training.tasks.common import with_cardinality

    def iterated(x):  # raises if a pass ever runs this map
        return x + tf.cast(tf.debugging.check_numerics(tf.constant(np.nan), "iterated"),
                           x.dtype)

    known = tf.data.Dataset.range(10).batch(3).map(iterated)
    assert int(with_cardinality(known).cardinality()) == 4
    unknown = tf.data.Dataset.range(10).filter(lambda x: x % 2 == 0).batch(2)
    assert int(unknown.cardinality()) < 0
    counted = with_cardinality(unknown)
    assert int(counted.cardinality()) == 3 and len(list(counted)) == 3
