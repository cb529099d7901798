"""Invariants of the seq2seq Transformer that shapes alone never reveal.

PEERS pain points: 4 (masks swapped or never applied), 5 (causal mask lost
with dropout on or scores returned), 7 (half-precision overflow), 9 (XLA
differing from eager), 10 (cached decoding differing from a full pass).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_transformer.layers import MultiHeadAttention
from keras_transformer.models import Transformer

TINY = dict(
    vocabulary_size=20,
    num_layers=2,
    hidden_dim=8,
    num_heads=2,
    intermediate_dim=16,
    max_sequence_length=16,
)
# Different source (S=6) and target (T=4) lengths, padding in both, and
# different lengths per row.
SOURCE = np.array([[5, 6, 7, 8, 9, 0], [4, 11, 12, 0, 0, 0]], "int32")
TARGET = np.array([[2, 5, 6, 0], [2, 7, 8, 9]], "int32")
TARGET_REAL = TARGET != 0


def _inputs(source=SOURCE, target=TARGET):
    return {"encoder_token_ids": source, "decoder_token_ids": target}


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(7)
    return Transformer.from_preset("tiny", **TINY)


@pytest.fixture(scope="module")
def logits(model):
    return _np(model(_inputs()))


def test_future_target_tokens_never_change_earlier_logits(model, logits):
    """Causality: logits at positions < k ignore decoder tokens at positions >= k."""
    for k in range(1, TARGET.shape[1]):
        changed = TARGET.copy()
        changed[:, k:] = 13
        out = _np(model(_inputs(target=changed)))
        np.testing.assert_allclose(out[:, :k], logits[:, :k], atol=1e-6)


def test_no_look_ahead_with_dropout_on():
    """Pain point 5: with attention and residual dropout on (training=True) and
    the same dropout draws, future tokens still never reach earlier logits."""
    keras.utils.set_random_seed(3)
    noisy = Transformer.from_preset("tiny", **TINY, dropout=0.3, attention_dropout=0.3)
    seeds = [v.numpy() for v in noisy.non_trainable_variables]  # dropout seed states

    def run(target):
        for variable, value in zip(noisy.non_trainable_variables, seeds, strict=True):
            variable.assign(value)
        return _np(noisy(_inputs(target=target), training=True))

    first = run(TARGET)
    changed = TARGET.copy()
    changed[:, 2:] = 13
    second = run(changed)
    np.testing.assert_allclose(second[:, :2], first[:, :2], atol=1e-6)
    assert not np.allclose(first, _np(noisy(_inputs()))), "dropout was not active"


def test_causal_weights_zero_above_diagonal_with_dropout_and_scores():
    """Pain point 5 at the layer: dropout on, training=True, scores returned."""
    layer = MultiHeadAttention(num_heads=2, dropout=0.5)
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    out, weights = layer(
        x, x, use_causal_mask=True, return_attention_scores=True, training=True
    )
    weights = _np(weights)
    assert np.all(np.triu(weights, k=1) == 0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert np.all(np.isfinite(_np(out)))


def test_source_padding_never_changes_logits(model, logits):
    """Appending more source padding leaves the logits at real target positions
    unchanged (a padded target row attends uniformly to everything, by design)."""
    longer = np.pad(SOURCE, ((0, 0), (0, 3)))
    out = _np(model(_inputs(source=longer)))
    np.testing.assert_allclose(out[TARGET_REAL], logits[TARGET_REAL], atol=1e-5)


def test_target_padding_never_changes_real_logits(model, logits):
    """Appending more target padding leaves the logits at real positions unchanged."""
    longer = np.pad(TARGET, ((0, 0), (0, 2)))
    out = _np(model(_inputs(target=longer)))[:, : TARGET.shape[1]]
    np.testing.assert_allclose(out[TARGET_REAL], logits[TARGET_REAL], atol=1e-5)


def test_padded_batch_equals_each_sequence_alone(model, logits):
    """Masks are applied to the right sequences (pain point 4): each row of the
    padded batch (S=6 != T=4, padding in both) equals that row run alone
    without any padding."""
    for row in range(len(SOURCE)):
        source = SOURCE[row : row + 1, : int(np.sum(SOURCE[row] != 0))]
        target = TARGET[row : row + 1, : int(np.sum(TARGET[row] != 0))]
        alone = _np(model(_inputs(source, target)))[0]
        np.testing.assert_allclose(logits[row, : target.shape[1]], alone, atol=1e-5)


def test_attention_weights_respect_source_and_target_masks(model):
    """Cross-attention never looks at source padding; decoder self-attention never
    at target padding or the future (real query rows)."""
    weights = model.attention_weights(SOURCE, TARGET)
    source_pad = SOURCE == 0  # (B, S)
    target_pad = TARGET == 0  # (B, T)
    causal_future = np.triu(np.ones((4, 4), bool), k=1)
    for cross, self_w in zip(weights["cross"], weights["decoder_self"], strict=True):
        cross, self_w = _np(cross), _np(self_w)  # (B, h, T, S), (B, h, T, T)
        assert cross.shape[-2:] == (4, 6)
        for b in range(len(SOURCE)):
            real = TARGET_REAL[b]
            assert np.all(cross[b][:, real][..., source_pad[b]] == 0)
            assert np.all(self_w[b][:, real][..., target_pad[b]] == 0)
            assert np.all(self_w[b][:, real] * causal_future[real] == 0)
    for enc in weights["encoder"]:
        enc = _np(enc)
        for b in range(len(SOURCE)):
            assert np.all(enc[b][:, ~source_pad[b]][..., source_pad[b]] == 0)


def test_cached_decoding_equals_full_pass(model, logits):
    """encode/init_cache/decode_step, one position at a time, equal one full
    pass at every real target position (pain point 10)."""
    memory = model.encode(SOURCE)
    cache = model.init_cache(SOURCE, memory, max_length=TARGET.shape[1])
    steps = []
    for i in range(TARGET.shape[1]):
        step_logits, cache = model.decode_step(
            TARGET[:, i : i + 1], cache, ops.convert_to_tensor(i, "int32")
        )
        steps.append(_np(step_logits))
    steps = np.stack(steps, axis=1)  # (B, T, V)
    assert steps.dtype == np.float32
    np.testing.assert_allclose(steps[TARGET_REAL], logits[TARGET_REAL], atol=1e-5)


def test_xla_equals_eager(model, logits):
    """The model under tf.function(jit_compile=True) equals eager within 1e-5."""
    compiled = tf.function(
        lambda inputs: model(inputs, training=False), jit_compile=True
    )
    np.testing.assert_allclose(_np(compiled(_inputs())), logits, atol=1e-5, rtol=0)


def test_logits_carry_no_keras_mask(model):
    """The logits have no Keras mask (it would silently reweight losses, pain point 6)."""
    out = model(_inputs())
    assert getattr(out, "_keras_mask", None) is None
    assert getattr(model.outputs[0], "_keras_mask", None) is None


# Tolerance of mixed_bfloat16 logits against float32 with the same weights.
# bfloat16 keeps 8 significant bits: each rounding costs up to 2**-8 ~ 0.4%
# relative error, and the path from token ids to logits rounds activations
# some 50 times (embedding, 2 encoder and 2 decoder blocks of ~10 matmuls,
# adds and norms each, the tied projection).  Random-sign errors growing like
# sqrt(50) * 0.4% ~ 3% predict what this tiny model shows over 40 random
# initialisations: RMS error at most 3.1% of the RMS logit, largest error at
# most 6.6% of the largest |logit|.  The bounds below (5% and 10%) give ~1.5x
# margin; a dtype bug (a -1e9 fill overflowing, a softmax not in float32, a
# missing cast) produces errors of the size of the logits, or NaN.
BFLOAT16_RMS_TOLERANCE = 0.05
BFLOAT16_MAX_TOLERANCE = 0.10


@pytest.fixture(scope="module")
def bfloat16_model(model):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        half = Transformer.from_preset("tiny", **TINY)
    finally:
        keras.config.set_dtype_policy(previous)
    half.set_weights(model.get_weights())
    return half


def test_mixed_bfloat16_close_to_float32(model, bfloat16_model):
    """Same weights under mixed_bfloat16: float32 logits within the tolerance,
    no NaN even when a source row is entirely padding (pain point 7)."""
    assert bfloat16_model.compute_dtype == "bfloat16"
    assert all(v.dtype == "float32" for v in bfloat16_model.weights)
    source = SOURCE.copy()
    source[1] = 0  # an all-padding source sentence
    want = _np(model(_inputs(source=source)))
    out = bfloat16_model(_inputs(source=source))
    assert out.dtype == "float32"
    got = _np(out)
    assert np.all(np.isfinite(got))
    error = got - want
    assert np.sqrt(np.mean(error**2)) <= BFLOAT16_RMS_TOLERANCE * np.sqrt(
        np.mean(want**2)
    )
    np.testing.assert_allclose(
        got, want, rtol=0, atol=BFLOAT16_MAX_TOLERANCE * np.abs(want).max()
    )
    assert getattr(out, "_keras_mask", None) is None


