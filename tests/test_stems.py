"""The classifiers' input stems, each through the shared layer harness, and
what each must compute: tokens of width d_model and the mask of real tokens."""

import numpy as np
import pytest
from harness import run_layer_test
from keras import ops

from keras_transformer.layers import (
    CharNGramTokenStem,
    PatchStem,
    RandomKernelSeriesStem,
    TokenStem,
)

NAN = np.float32("nan")
TOKENS = np.array([[3, 5, 7, 9], [4, 2, 0, 0]], "int32")


def _series(batch=2, length=12, features=2, seed=0):
    """`(B, T, F)` series, the first padded with NaN after 8 steps and missing one value."""
    x = np.random.default_rng(seed).normal(size=(batch, length, features)).astype("float32")
    x[0, 8:] = NAN
    x[0, 2, -1] = NAN
    return x


def _numpy(tensors):
    return [ops.convert_to_numpy(t) for t in tensors]


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_token_stem_embeds_with_positions_and_masks_padding(positions, tmp_path):
    stem, (x, mask) = run_layer_test(
        TokenStem, {"vocabulary_size": 11, "hidden_dim": 8, "max_sequence_length": 6,
                    "positions": positions}, TOKENS, tmp_path,
        expected_output_shape=(2, 4, 8))
    np.testing.assert_array_equal(ops.convert_to_numpy(mask), TOKENS != 0)
    np.testing.assert_allclose(ops.convert_to_numpy(x),
                               ops.convert_to_numpy(stem.embedding(TOKENS)), atol=1e-6)
    assert stem.symbolic_input().shape == (None, None)


def test_char_ngram_token_stem_adds_the_mean_of_the_words_ngrams(tmp_path):
    grams = np.array([[[1, 2, 0], [3, 0, 0], [0, 0, 0], [4, 5, 6]],
                      [[7, 0, 0], [1, 1, 2], [0, 0, 0], [0, 0, 0]]], "int32")
    packed = np.concatenate([TOKENS[..., None], grams], axis=-1)  # (B, T, 1 + G)
    stem, (x, mask) = run_layer_test(
        CharNGramTokenStem, {"vocabulary_size": 11, "hidden_dim": 8, "char_ngram_buckets": 9,
                             "char_ngrams_per_word": 3}, packed, tmp_path,
        expected_output_shape=(2, 4, 8))
    np.testing.assert_array_equal(ops.convert_to_numpy(mask), TOKENS != 0)
    table = ops.convert_to_numpy(stem.char_ngram_embedding.embeddings)
    words = ops.convert_to_numpy(stem.embedding(TOKENS))
    for b in range(2):
        for t in range(4):
            present = grams[b, t][grams[b, t] != 0]
            spelling = table[present].mean(axis=0) if len(present) else 0.0
            np.testing.assert_allclose(ops.convert_to_numpy(x)[b, t],
                                       words[b, t] + np.sqrt(8) * spelling, atol=1e-5)
    assert stem.symbolic_input().shape == (None, None, 4)
    with pytest.raises(ValueError, match="char_ngram_buckets=0"):
        CharNGramTokenStem(11, 8, char_ngram_buckets=0)


@pytest.mark.parametrize("options", [
    {},
    {"patch_length": 4, "patch_stride": 2, "positions": "learned"},
    {"patch_length": 3, "standardize_series": True, "series_level_features": True},
], ids=["steps", "overlapping_patches", "standardized_with_level"])
def test_patch_stem_tokens_and_mask(options, tmp_path):
    x = _series()
    stem, (tokens, mask) = run_layer_test(
        PatchStem, {"num_features": 2, "hidden_dim": 8, "max_sequence_length": 12, **options},
        x, tmp_path, frozen_ok=("statistic_mean", "statistic_scale"))
    p, s = options.get("patch_length", 1), options.get("patch_stride") or options.get(
        "patch_length", 1)
    count = -(-max(12 - p, 0) // s) + 1
    assert tokens.shape == (2, count, 8) and mask.shape == (2, count)
    mask = ops.convert_to_numpy(mask)
    assert mask[1].all() and mask[0].sum() == -(-max(8 - p, 0) // s) + 1
    # The padded series' real tokens are those of the same series alone.
    alone, alone_mask = _numpy(stem(x[:1, :8]))
    assert alone_mask.all()
    np.testing.assert_allclose(ops.convert_to_numpy(tokens)[0, :alone.shape[1]][alone_mask[0]],
                               alone[0], atol=1e-5)


def test_patch_stem_refuses_options_that_do_not_fit():
    with pytest.raises(ValueError, match="patch_stride=4, patch_length=2"):
        PatchStem(1, 8, patch_length=2, patch_stride=4)
    with pytest.raises(ValueError, match="series_level_features=True, standardize_series=False"):
        PatchStem(1, 8, series_level_features=True)
    with pytest.raises(ValueError, match="num_features=0"):
        PatchStem(0, 8)


def test_random_kernel_series_stem_tokens_are_its_windows(tmp_path):
    options = {"num_features": 1, "hidden_dim": 8, "series_length": 24, "num_windows": 4,
               "num_kernel_features": 200, "max_positions": 12, "seed": 3,
               "standardize_series": True, "series_level_features": True}
    x = _series(features=1, length=24)
    stem, (tokens, mask) = run_layer_test(
        RandomKernelSeriesStem, options, x, tmp_path, expected_output_shape=(2, 4, 8),
        frozen_ok=("statistic_mean", "statistic_scale"), bfloat16_rtol=0.1)
    # Each series is cut into windows by its own length: all four hold steps.
    assert ops.convert_to_numpy(mask).all()
    # Two steps, every second one compared (max_positions 12 of 24): one window holds them.
    short = x.copy()
    short[0, 2:] = NAN
    np.testing.assert_array_equal(ops.convert_to_numpy(stem(short)[1]),
                                  [[True, False, False, False], [True] * 4])
    # `adapt` sets the kernels' biases and the level features' standardization.
    stem = RandomKernelSeriesStem(**options)
    stem.adapt(_series(batch=6, features=1, length=24, seed=1))
    assert np.any(ops.convert_to_numpy(stem.kernel_stem.biases) != 0)
    assert np.all(ops.convert_to_numpy(stem.level_features.statistic_mean) != 0)
    # Its part without trainable weights, computed once (as a training loop
    # caches it) and given back, makes the same tokens as the series do.
    fixed = stem.stem_features(x, batch_size=1)
    assert sorted(fixed) == ["mask", "statistics", "tokens"] and fixed["tokens"].shape == (2, 4, 168)
    # Backend tensors, not NumPy copies (tf.data copies a NumPy array); one
    # batch of both series gives what two batches of one do.
    whole = stem.stem_features(x)
    assert all(ops.is_tensor(v) for v in (*fixed.values(), *whole.values()))
    for key in fixed:
        np.testing.assert_allclose(ops.convert_to_numpy(whole[key]),
                                   ops.convert_to_numpy(fixed[key]), atol=1e-6)
    for whole, batched in zip(_numpy(stem({"features": x, "stem_features": fixed})), _numpy(stem(x)),
                              strict=True):
        np.testing.assert_allclose(whole, batched, atol=1e-6)
    plain = RandomKernelSeriesStem(**{**options, "series_level_features": False})
    with pytest.raises(ValueError, match="series_level_features=True"):
        plain.adapt_level_features(x)
