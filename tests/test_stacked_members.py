"""Members stacked on a member axis: the same logits and gradients as each member alone."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import PatchStem, RandomKernelSeriesStem, TokenStem
from keras_transformer.models import ClassifierEnsemble, TransformerClassifier
from keras_transformer.models.classifier_ensemble import mean_probability_logits
from keras_transformer.models.stacked_members import stackable, stacked_member_logits

NAN = float("nan")


def _stem(level_features=True, seed=0):
    return RandomKernelSeriesStem(
        num_features=2, hidden_dim=8, series_length=24, num_windows=4,
        num_kernel_features=168, max_positions=12, seed=seed, standardize_series=True,
        series_level_features=level_features)


def _series(batch=5, seed=0):
    x = np.random.default_rng(seed).standard_normal((batch, 24, 2)).astype("float32")
    x[0, 5:] = NAN  # a short series: three of its four windows are masked out
    return x


def _members(size=3, stem=_stem, **options):
    sizes = {"num_layers": 2, "num_heads": 2, "intermediate_dim": 16, "dropout": 0.0,
             **options}
    members = []
    for i in range(size):
        member = TransformerClassifier(stem(seed=i), 3, name=f"member_{i}", **sizes)
        member.stem.adapt(_series(batch=8, seed=10 + i))
        members.append(member)
    return members


def _inputs(members, x):
    return {"features": x,
            "stem_features": tuple(m.stem.fixed_features(x) for m in members)}


def _member_logits(members, x, training):
    return np.stack([keras.ops.convert_to_numpy(m(x, training=training)) for m in members], 1)


@pytest.mark.parametrize("options", [
    {},
    {"normalize_first": True, "pooling": "max", "head_hidden_dim": 4},
])
def test_stacked_members_give_each_members_logits_and_gradients(options):
    members = _members(**options)
    x = _series()
    inputs = _inputs(members, x)
    assert stackable(members)
    stacked = stacked_member_logits(members, inputs["stem_features"], training=True)
    assert stacked.shape == (5, 3, 3)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(stacked),
                               _member_logits(members, x, training=True), atol=1e-5)
    y = np.array([0, 1, 2, 1, 0])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = [v for m in members for v in m.trainable_variables]

    def gradients(logits_fn):
        with tf.GradientTape() as tape:
            logits = logits_fn()
            total = sum(loss(y, logits[:, i]) * (i + 1) for i in range(len(members)))
        return tape.gradient(total, variables)

    alone = gradients(lambda: tf.stack([m(x, training=True) for m in members], 1))
    together = gradients(lambda: stacked_member_logits(members, inputs["stem_features"], True))
    for want, got, variable in zip(alone, together, variables, strict=True):
        assert got is not None, variable.path
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-6,
                                   err_msg=variable.path)


def test_the_ensemble_runs_stacked_from_fixed_features_and_answers_as_from_series():
    members = _members()
    model = ClassifierEnsemble(members, excluded_members=[1])
    x = _series()
    inputs = _inputs(members, x)
    expected = mean_probability_logits(_member_logits(members, x, False)[:, [0, 2]], 3)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(inputs)),
                               keras.ops.convert_to_numpy(expected), atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)),
                               keras.ops.convert_to_numpy(expected), atol=1e-5)
    # In training every member answers, excluded or not.
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(inputs, training=True)),
                               _member_logits(members, x, True), atol=1e-5)


def test_dropout_draws_its_own_mask_for_each_member():
    members = _members(dropout=0.5)
    inputs = _inputs(members, _series())
    # The same weights in every member: only the dropout masks tell them apart.
    for member in members[1:]:
        for mine, first in zip(member.trainable_variables, members[0].trainable_variables,
                               strict=True):
            mine.assign(first)
        levels, first_levels = member.stem.level_features, members[0].stem.level_features
        levels.statistic_mean.assign(first_levels.statistic_mean)
        levels.statistic_scale.assign(first_levels.statistic_scale)
    same_features = (inputs["stem_features"][0],) * 3
    logits = keras.ops.convert_to_numpy(stacked_member_logits(members, same_features, True))
    assert not np.allclose(logits[:, 0], logits[:, 1])
    quiet = keras.ops.convert_to_numpy(stacked_member_logits(members, same_features, False))
    np.testing.assert_allclose(quiet[:, 0], quiet[:, 1], atol=1e-6)


def test_members_that_differ_in_more_than_weights_do_not_stack():
    assert not stackable(_members(size=2)[:1] + _members(size=1, num_layers=1))
    assert not stackable(_members(size=2, mixup_alpha=0.2))

    def tokens(seed):
        return TokenStem(vocabulary_size=20, hidden_dim=8)

    token_members = [TransformerClassifier(tokens(i), 3, num_layers=1, num_heads=2,
                                           intermediate_dim=16) for i in range(2)]
    assert not stackable(token_members)
    # Patches are a series stem: members on them stack.
    patches = [TransformerClassifier(PatchStem(1, hidden_dim=8, patch_length=2), 3,
                                     num_layers=1, num_heads=2, intermediate_dim=16)
               for _ in range(2)]
    assert stackable(patches)
