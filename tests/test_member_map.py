"""Members of one architecture run as one computation: each member's own answer, gradients and draws."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import PatchStem, RandomKernelSeriesStem
from keras_transformer.models import (
    ClassifierEnsemble,
    TextCNNClassifier,
    TransformerClassifier,
)
from keras_transformer.models.member_map import map_members, same_architecture

NAN = float("nan")


def _series(batch=5, seed=0):
    x = np.random.default_rng(seed).standard_normal((batch, 24, 2)).astype("float32")
    x[0, 5:] = NAN  # a short series: three of its four windows are masked out
    return tf.constant(x)


def _members(size=3, dropout=0.3, **options):
    members = []
    for i in range(size):
        stem = RandomKernelSeriesStem(
            num_features=2, hidden_dim=8, series_length=24, num_windows=4,
            num_kernel_features=168, max_positions=12, seed=i, standardize_series=True,
            series_level_features=True)
        member = TransformerClassifier(stem, 3, name=f"member_{i}", num_layers=2, num_heads=2,
                                       intermediate_dim=16, dropout=dropout, **options)
        member.stem.adapt(_series(batch=8, seed=10 + i))
        members.append(member)
    return members


def _draws_looped_over_members(fn):
    """The random ops that tracing `fn` puts in a while loop: what
    `tf.vectorized_map` does with an op it has no batched form of, such as
    a random op keyed by each member's own seed."""
    graph = tf.function(fn).get_concrete_function().graph
    looped = set()
    for op in graph.get_operations():
        if op.type in ("While", "StatelessWhile"):
            body = graph._functions[op.get_attr("body").name].graph  # noqa: SLF001 (TF's own)
            looped |= {o.type for o in body.get_operations()}
    return sorted(t for t in looped if "Random" in t or "Gamma" in t)


def _states(members):
    return [[v.numpy() for v in m.variables if not v.trainable] for m in members]


def _set_states(members, states):
    for member, values in zip(members, states, strict=True):
        for v, value in zip((v for v in member.variables if not v.trainable), values, strict=True):
            v.assign(value)


@pytest.mark.parametrize("options", [{}, {"normalize_first": True, "pooling": "max"}])
def test_vectorised_members_give_each_members_logits_gradients_and_dropout(options):
    members = _members(**options)
    model = ClassifierEnsemble(members)
    assert model.vectorized
    x = _series()
    inputs = {"features": x, "stem_features": tuple(m.stem.fixed_features(x) for m in members)}
    y = tf.constant([0, 1, 2, 1, 0])
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    before = _states(members)
    with tf.GradientTape() as tape:
        together, _ = model.member_logits(inputs, training=True)  # (B, k, K)
        loss = sum(loss_fn(y, together[:, i]) for i in range(3))
    together_grads = tape.gradient(loss, [w for m in members for w in m.trainable_weights])
    after = _states(members)
    assert together.shape == (5, 3, 3)
    _set_states(members, before)  # each member alone, from the same seeds
    with tf.GradientTape() as tape:
        alone = tf.stack([m({"features": x, "stem_features": f}, training=True)
                          for m, f in zip(members, inputs["stem_features"], strict=True)], 1)
        loss = sum(loss_fn(y, alone[:, i]) for i in range(3))
    alone_grads = tape.gradient(loss, [w for m in members for w in m.trainable_weights])
    # The same dropout masks (a member's seed states are its own), so the
    # same logits and gradients; and the seeds moved on as they do alone.
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-6)
    for got, want in zip(together_grads, alone_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    for got, want in zip(after, _states(members), strict=True):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(before[0], after[0], strict=True))
    # Each member's masks are drawn once, not looped over by the map.
    assert _draws_looped_over_members(lambda: model.member_logits(inputs, training=True)) == []
    # Inference (each member in turn) from the fixed features and from the
    # raw series gives one answer, the mean of what the map gives members
    # without dropout.
    mapped, _ = model.member_logits(inputs, training=False)
    mapped_alone = map_members(members, lambda m, f, s: m({"features": s, "stem_features": f}),
                               {k: tf.stack([f[k] for f in inputs["stem_features"]])
                                for k in inputs["stem_features"][0]}, x)
    np.testing.assert_allclose(mapped, tf.transpose(mapped_alone, (1, 0, 2)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model(inputs), model(x), rtol=1e-5, atol=1e-6)


def test_mixing_text_members_draw_their_own_lam_and_masks():
    members = [TextCNNClassifier(num_classes=3, vocabulary_size=20, hidden_dim=8, dropout=0.3,
                                 max_sequence_length=8, ngram_widths=(2, 3), pooling="max",
                                 mixup_alpha=0.4, name=f"t{i}") for i in range(3)]
    model = ClassifierEnsemble(members)
    assert model.vectorized
    ids = tf.constant(np.random.default_rng(1).integers(3, 20, (4, 6)).astype("int32"))
    before = _states(members)
    logits, lam = model.member_logits(ids, training=True)
    _set_states(members, before)
    alone = [(m(ids, training=True), m.step_outputs.take()[0]) for m in members]
    np.testing.assert_allclose(logits, tf.stack([a[0] for a in alone], 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lam, tf.stack([a[1] for a in alone], 1), rtol=1e-6)
    assert len({float(lam[0, i]) for i in range(3)}) == 3  # each member its own draw
    assert _draws_looped_over_members(lambda: model.member_logits(ids, training=True)) == []


def test_members_that_differ_in_more_than_weights_run_in_turn():
    assert same_architecture(_members(size=2))
    assert not same_architecture(_members(size=1) + _members(size=1, normalize_first=True))
    mixed = [TransformerClassifier(PatchStem(2, hidden_dim=8, max_sequence_length=24,
                                             patch_length=2), 3, num_layers=1, num_heads=2,
                                   intermediate_dim=16, dropout=0.0, name=f"p{i}", pooling=pooling)
             for i, pooling in enumerate(("mean", "max"))]
    model = ClassifierEnsemble(mixed)
    assert not model.vectorized  # same shapes, another pooling: not one computation
    x = _series()
    expected = tf.stack([m(x, training=False) for m in mixed], 1)
    got, _ = model.member_logits(x, training=True)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)  # no dropout here
