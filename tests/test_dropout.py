"""Dropout with ThreeFry masks: the generator, the layer, and when models use it."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from harness import run_layer_test
from keras import ops

import keras_transformer.layers._dropout as dropout_module
from keras_transformer.layers._dropout import (
    Dropout,
    threefry2x32,
    threefry_bits,
    threefry_dropout,
)
from keras_transformer.models import Transformer

MASK32 = 0xFFFFFFFF


def reference_threefry2x32(key, counter):
    """Threefry-2x32-20 on Python ints, from Salmon et al. (2011), Table 4."""
    rotations = (13, 15, 26, 6, 17, 29, 16, 24)
    ks = (key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDA)
    x = [(counter[0] + ks[0]) & MASK32, (counter[1] + ks[1]) & MASK32]
    for r in range(20):
        x[0] = (x[0] + x[1]) & MASK32
        bits = rotations[r % 8]
        x[1] = ((x[1] << bits) | (x[1] >> (32 - bits))) & MASK32
        x[1] ^= x[0]
        if r % 4 == 3:
            s = r // 4 + 1
            x[0] = (x[0] + ks[s % 3]) & MASK32
            x[1] = (x[1] + ks[(s + 1) % 3] + s) & MASK32
    return tuple(x)


def run_threefry(key, x0, x1):
    y0, y1 = threefry2x32(
        tuple(np.uint32(k) for k in key), (np.asarray(x0, "uint32"), np.asarray(x1, "uint32"))
    )
    return ops.convert_to_numpy(y0), ops.convert_to_numpy(y1)


@pytest.mark.parametrize(
    "key, counter, expected",
    [  # Random123's known-answer vectors (kat_vectors, threefry2x32_20)
        ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
        ((MASK32, MASK32), (MASK32, MASK32), (0x1CB996FC, 0xBB002BE7)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ],
)
def test_threefry_known_answers(key, counter, expected):
    y0, y1 = run_threefry(key, [counter[0]], [counter[1]])
    assert (int(y0[0]), int(y1[0])) == expected
    assert reference_threefry2x32(key, counter) == expected


def test_threefry_equals_reference_on_random_words():
    rng = np.random.default_rng(0)
    key = tuple(int(k) for k in rng.integers(0, 2**32, size=2))
    x0, x1 = rng.integers(0, 2**32, size=(2, 16), dtype=np.uint64)
    y0, y1 = run_threefry(key, x0, x1)
    for i in range(16):
        assert (int(y0[i]), int(y1[i])) == reference_threefry2x32(key, (int(x0[i]), int(x1[i])))


def test_threefry_bits_depend_on_the_flat_index_only():
    key = (np.uint32(3), np.uint32(5))
    flat = ops.convert_to_numpy(threefry_bits(key, (24,)))
    shaped = ops.convert_to_numpy(threefry_bits(key, (2, 3, 4)))
    np.testing.assert_array_equal(shaped.reshape(-1), flat)
    assert int(flat[7]) == reference_threefry2x32((3, 5), (7, 0))[0]


def threefry_layer_call(layer, x, training=True):
    with threefry_dropout():
        return ops.convert_to_numpy(layer(x, training=training))


def test_dropout_keeps_one_minus_rate_and_scales_the_kept():
    rate, n = 0.25, 2**14
    x = np.random.default_rng(1).uniform(1.0, 2.0, size=(4, n // 4)).astype("float32")
    y = threefry_layer_call(Dropout(rate, seed=7), x)
    kept = y != 0
    # Binomial(n, 0.75): five standard deviations.
    assert abs(kept.mean() - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / n)
    np.testing.assert_allclose(y[kept], x[kept] / (1 - rate), rtol=1e-6)


def test_dropout_masks_of_two_calls_are_independent():
    rate, n = 0.5, 2**14
    layer = Dropout(rate, seed=3)
    x = np.ones((n,), "float32")
    first, second = (threefry_layer_call(layer, x) != 0 for _ in range(2))
    assert (first != second).any()  # a new key each call
    both = (first & second).mean()
    assert abs(both - (1 - rate) ** 2) < 5 * np.sqrt(0.25 * 0.75 / n)


def test_dropout_is_reproducible_from_its_seed():
    x = np.ones((8, 16), "float32")
    a = threefry_layer_call(Dropout(0.3, seed=11), x)
    b = threefry_layer_call(Dropout(0.3, seed=11), x)
    c = threefry_layer_call(Dropout(0.3, seed=12), x)
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()


def test_dropout_outside_the_context_is_keras_dropout():
    x = np.random.default_rng(2).normal(size=(8, 16)).astype("float32")
    ours = Dropout(0.3, seed=5)(x, training=True)
    theirs = keras.layers.Dropout(0.3, seed=5)(x, training=True)
    np.testing.assert_array_equal(ops.convert_to_numpy(ours), ops.convert_to_numpy(theirs))
    np.testing.assert_array_equal(threefry_layer_call(Dropout(0.3), x, training=False), x)


def test_dropout_gradient_is_the_mask_times_the_scale():
    layer = Dropout(0.4, seed=9)
    x = tf.constant(np.random.default_rng(3).normal(size=(4, 8)).astype("float32"))
    with tf.GradientTape() as tape, threefry_dropout():
        tape.watch(x)
        y = layer(x, training=True)
    grad = tape.gradient(y, x).numpy()
    np.testing.assert_allclose(grad, (y.numpy() != 0) / 0.6, rtol=1e-6)


def test_dropout_mask_is_the_same_under_xla():
    x = np.ones((4, 32), "float32")
    layer = Dropout(0.5, seed=4)

    def step(x):
        with threefry_dropout():
            return layer(x, training=True)

    eager_state = ops.convert_to_numpy(layer.seed_generator.state)
    graph = tf.function(step, jit_compile=False)(x)
    layer.seed_generator.state.assign(eager_state)
    xla = tf.function(step, jit_compile=True)(x)
    np.testing.assert_array_equal(graph.numpy(), xla.numpy())


@pytest.mark.slow
@pytest.mark.parametrize("jit_compile", [False, True])
def test_models_draw_threefry_masks_when_training_under_xla(jit_compile, monkeypatch):
    calls = []
    original = dropout_module.threefry_bits

    def counting(key, shape):
        calls.append(shape)
        return original(key, shape)

    monkeypatch.setattr(dropout_module, "threefry_bits", counting)
    keras.utils.set_random_seed(0)
    model = Transformer(
        vocabulary_size=16, num_layers=1, hidden_dim=8, num_heads=2,
        intermediate_dim=16, max_sequence_length=8, dropout=0.1,
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )
    ids = np.random.default_rng(0).integers(4, 16, size=(2, 6)).astype("int32")
    inputs = {"encoder_token_ids": ids, "decoder_token_ids": ids}
    losses = [float(model.train_on_batch(inputs, ids)) for _ in range(3)]
    assert np.isfinite(losses).all()
    # Under XLA every dropout site is traced with ThreeFry (embeddings,
    # residuals and the feed-forward's inner dropout); without it none is.
    assert bool(calls) == jit_compile
    traced = len(calls)
    model.predict(inputs, verbose=0)
    assert len(calls) == traced  # inference draws no mask


def test_dropout_layer_harness(tmp_path):
    """Config round trip, symbolic call, `.keras` reload, bfloat16 and a fit
    step (STYLE habit 10); at inference the layer is the identity."""
    x = np.random.default_rng(5).normal(size=(2, 6, 8)).astype("float32")
    layer, out = run_layer_test(Dropout, {"rate": 0.3, "seed": 2}, x, tmp_path)
    np.testing.assert_array_equal(out, x)
    assert layer.get_config()["rate"] == 0.3
