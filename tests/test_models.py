"""The models: serialisation, presets, argument checks, learned positions, training."""

import json
import zipfile

import keras
import numpy as np
import pytest
from harness import assert_trees_equal, check_saved_model_round_trip
from keras import ops

from keras_transformer.layers import (
    FeedForward,
    MultiHeadAttention,
    PatchStem,
    PositionEmbedding,
    TokenAndPositionEmbedding,
    TokenStem,
    TransformerEncoderBlock,
)
from keras_transformer.layers.sinusoidal_position_encoding import sinusoids
from keras_transformer.models import (
    PRESETS,
    TextCNNClassifier,
    Transformer,
    TransformerClassifier,
)

SEQ2SEQ = dict(
    vocabulary_size=20,
    num_layers=1,
    hidden_dim=8,
    num_heads=2,
    intermediate_dim=16,
    max_sequence_length=16,
)
CLASSIFIER = dict(
    num_classes=3,
    num_layers=1,
    num_heads=2,
    intermediate_dim=16,
)
#: The classifiers' stem sizes: d_model 8, 16 positions.
STEM = dict(hidden_dim=8, max_sequence_length=16)


def _tokens(vocabulary_size=20, **classifier):
    """A `TransformerClassifier` on a `TokenStem`."""
    return TransformerClassifier(TokenStem(vocabulary_size, **STEM), **classifier)
SOURCE = np.array([[5, 6, 7, 0, 0], [4, 9, 11, 12, 3]], "int32")
TARGET = np.array([[2, 5, 6, 0], [2, 7, 8, 9]], "int32")
FEATURES = np.random.default_rng(0).normal(size=(2, 5, 3)).astype("float32")


def _build(kind):
    if kind == "transformer":
        return Transformer(**SEQ2SEQ), {
            "encoder_token_ids": SOURCE,
            "decoder_token_ids": TARGET,
        }
    if kind == "classifier_tokens":
        return _tokens(**CLASSIFIER), SOURCE
    if kind == "classifier_ngrams":
        # n-gram convolutions before the encoder
        return _tokens(ngram_widths=(2, 3), pooling="max", **CLASSIFIER), SOURCE
    return TransformerClassifier(PatchStem(3, **STEM), **CLASSIFIER), FEATURES


KINDS = ["transformer", "classifier_tokens", "classifier_ngrams", "classifier_features"]
TOKEN_CLASSIFIERS = pytest.mark.parametrize("kind", ["classifier_tokens", "classifier_ngrams"])


@pytest.fixture(scope="module")
def built():
    keras.utils.set_random_seed(11)
    return {kind: _build(kind) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_config_round_trip(kind, built):
    """from_config(get_config()) keeps the config; with copied weights, the outputs."""
    model, inputs = built[kind]
    config = model.get_config()
    clone = model.__class__.from_config(config)
    assert clone.get_config() == config
    clone.set_weights(model.get_weights())
    assert_trees_equal(model(inputs), clone(inputs), err_msg=kind)


@pytest.mark.parametrize("kind", KINDS)
def test_keras_file_round_trip(kind, built, tmp_path):
    """`.keras` save and `load_model(safe_mode=True)`: same class, config, outputs."""
    model, inputs = built[kind]
    reloaded = check_saved_model_round_trip(model, inputs, tmp_path)
    assert type(reloaded) is type(model)
    assert reloaded.get_config() == model.get_config()
    out = model(inputs)
    assert out.dtype == "float32" and getattr(out, "_keras_mask", None) is None


@TOKEN_CLASSIFIERS
def test_classifier_ignores_padding(kind, built):
    """Pooling (mean, or max after n-gram convolutions) over real tokens only:
    extra padding leaves the logits unchanged."""
    model, _ = built[kind]
    np.testing.assert_allclose(
        model(np.pad(SOURCE, ((0, 0), (0, 3)))), model(SOURCE), atol=1e-5
    )


@TOKEN_CLASSIFIERS
def test_classifier_empty_sentence_is_finite_and_leaves_others_alone(kind, built):
    """An all-padding row (an empty string after tokenisation) pools to zeros:
    finite logits, and the other rows of the batch are unchanged."""
    model, _ = built[kind]
    with_empty = np.concatenate([SOURCE, np.zeros((1, SOURCE.shape[1]), "int32")])
    logits = ops.convert_to_numpy(model(with_empty))
    assert np.all(np.isfinite(logits)), logits
    np.testing.assert_allclose(logits[: len(SOURCE)], model(SOURCE), atol=1e-5)


def test_from_preset_tiny():
    """The tiny preset builds with its config and gives finite float32 logits."""
    model = Transformer.from_preset("tiny")
    assert model.config == PRESETS["tiny"]
    ids = np.array([[5, 6, 7, 0]], "int32")
    logits = model({"encoder_token_ids": ids, "decoder_token_ids": ids})
    assert tuple(logits.shape) == (1, 4, PRESETS["tiny"].vocabulary_size)
    assert logits.dtype == "float32" and np.all(
        np.isfinite(ops.convert_to_numpy(logits))
    )


def test_unknown_preset_names_it():
    with pytest.raises(ValueError, match="not_a_preset"):
        Transformer.from_preset("not_a_preset")


@pytest.mark.parametrize(
    "build, match",
    [
        (
            lambda: Transformer(**{**SEQ2SEQ, "hidden_dim": 10, "num_heads": 4}),
            r"hidden_dim=10, num_heads=4",
        ),
        (lambda: Transformer(**{**SEQ2SEQ, "num_layers": -1}), r"num_layers=-1"),
        (
            lambda: Transformer(**{**SEQ2SEQ, "vocabulary_size": 0}),
            r"vocabulary_size=0",
        ),
        (lambda: Transformer(**{**SEQ2SEQ, "dropout": 1.5}), r"dropout=1\.5"),
        (
            lambda: _tokens(**{**CLASSIFIER, "num_heads": 3}),
            r"hidden_dim=8, num_heads=3",
        ),
        (
            lambda: _tokens(**{**CLASSIFIER, "dropout": 1.5}),
            r"dropout=1\.5",
        ),
        (
            lambda: _tokens(pooling="sum", **CLASSIFIER),
            r"pooling='sum'",
        ),
        (
            lambda: _tokens(ngram_widths=(3, 0), **CLASSIFIER),
            r"widths=0",
        ),
        (
            lambda: _tokens(**{**CLASSIFIER, "num_layers": -1}),
            r"num_layers=-1",
        ),
        (lambda: MultiHeadAttention(num_heads=0), r"num_heads=0"),
        (lambda: MultiHeadAttention(num_heads=2, scorer="cosine"), r"scorer='cosine'"),
        (lambda: FeedForward(intermediate_dim=-4), r"intermediate_dim=-4"),
        (lambda: TransformerEncoderBlock(16, 2, dropout=1.5), r"dropout=1\.5"),
        (
            lambda: MultiHeadAttention(num_heads=3)(
                np.zeros((1, 2, 8), "float32"), np.zeros((1, 2, 8), "float32")
            ),
            r"hidden_dim=8, num_heads=3",
        ),
    ],
    ids=[
        "indivisible",
        "negative_layers",
        "zero_vocab",
        "dropout",
        "cls_indivisible",
        "cls_dropout",
        "cls_pooling",
        "cls_ngram_width",
        "cls_negative_layers",
        "zero_heads",
        "scorer",
        "negative_ffn",
        "block_dropout",
        "mha_indivisible",
    ],
)
def test_bad_arguments_raise_naming_argument_and_value(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_bad_token_ids_for_embedding():
    """3-D or float token ids are refused, naming `token_ids` and the shape/dtype."""
    layer = TokenAndPositionEmbedding(20, 8)
    with pytest.raises(ValueError, match=r"token_ids.*rank 2.*\(2, 3, 2\)"):
        layer(np.ones((2, 3, 2), "int32"))
    with pytest.raises(ValueError, match=r"token_ids.*dtype=float32"):
        layer(np.ones((2, 3), "float32"))


@pytest.mark.parametrize("name", ["encoder_token_ids", "decoder_token_ids"])
def test_bad_token_ids_for_model_call(name, built):
    """The model refuses float ids (instead of silently casting 2.7 to 2) and 3-D
    ids, naming the input and its dtype or shape."""
    model, inputs = built["transformer"]
    floats = dict(inputs, **{name: inputs[name].astype("float32") + 0.7})
    with pytest.raises(ValueError, match=rf"{name}.*dtype=float32"):
        model(floats)
    cube = dict(inputs, **{name: np.stack([inputs[name]] * 2, axis=-1)})
    with pytest.raises(ValueError, match=rf"{name}.*\(2, \d, 2\)"):
        model(cube)
    classifier, _ = built["classifier_tokens"]
    with pytest.raises(ValueError, match=r"token_ids.*dtype=float32"):
        classifier(SOURCE.astype("float32"))


def test_learned_positions_set_to_sinusoids_equal_sinusoidal_model(built):
    """positions="learned" works, and differs from the paper's model only by its
    table: loading the sinusoids into it reproduces the sinusoidal logits."""
    sinusoidal, inputs = built["transformer"]
    learned = Transformer(**SEQ2SEQ, positions="learned")
    by_path = {v.path: v for v in sinusoidal.weights}
    extra = [v for v in learned.weights if v.path not in by_path]
    assert [tuple(v.shape) for v in extra] == [(SEQ2SEQ["max_sequence_length"], 8)]
    for v in learned.weights:
        v.assign(by_path[v.path] if v.path in by_path else sinusoids(*v.shape))
    np.testing.assert_allclose(learned(inputs), sinusoidal(inputs), atol=1e-5)
    extra[0].assign(ops.zeros(extra[0].shape))
    assert not np.allclose(learned(inputs), sinusoidal(inputs), atol=1e-3)


@pytest.mark.parametrize("new_length", [11, 4, 6])
def test_resized_position_embedding_is_exact_on_a_linear_ramp(new_length):
    """Resizing keeps both endpoints and maps a linear table to the same line
    sampled at the new positions (linear interpolation is exact on a ramp)."""
    layer = PositionEmbedding(6)
    layer.build((None, 6, 3))
    slope, offset = np.array([1.0, -2.0, 0.5]), np.array([0.25, 1.0, -3.0])
    layer.position_embeddings.assign(
        (np.arange(6)[:, None] * slope + offset).astype("float32")
    )
    resized = layer.resized(new_length)
    table = ops.convert_to_numpy(resized.position_embeddings)
    assert resized.sequence_length == new_length and table.shape == (new_length, 3)
    np.testing.assert_allclose(table[0], offset, atol=1e-6)
    np.testing.assert_allclose(table[-1], 5 * slope + offset, atol=1e-5)
    positions = np.linspace(0, 5, new_length)[:, None]
    np.testing.assert_allclose(table, positions * slope + offset, atol=1e-5)
    out = resized(np.zeros((2, new_length, 3), "float32"))
    np.testing.assert_allclose(out[1], table, atol=0)


def test_classifier_learns_a_separable_toy_task():
    """Sequences of token 5 vs token 6 (variable padding): the loss falls and
    the classifier separates them."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=32)
    lengths = rng.integers(2, 7, size=32)
    tokens = np.zeros((32, 6), "int32")
    for i, (label, length) in enumerate(zip(labels, lengths, strict=True)):
        tokens[i, :length] = 5 + label
    model = TransformerClassifier(
        TokenStem(vocabulary_size=10, hidden_dim=8, max_sequence_length=8),
        num_classes=2,
        num_layers=1,
        num_heads=2,
        intermediate_dim=16,
        dropout=0.0,
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    history = model.fit(tokens, labels, batch_size=8, epochs=4, verbose=0).history
    assert history["loss"][-1] < 0.5 * history["loss"][0], history["loss"]
    predicted = np.argmax(ops.convert_to_numpy(model(tokens)), axis=-1)
    assert np.mean(predicted == labels) == 1.0


def test_text_cnn_pools_the_bare_ngram_features():
    """`TextCNNClassifier`: the logits are the head on the max, over real
    tokens, of the n-gram convolutions' bare ReLU features (Kim's CNN: no
    residual, no LayerNorm); `TransformerClassifier` puts the residual form
    of width d before its encoder blocks, and refuses to have none."""
    keras.utils.set_random_seed(3)
    model = TextCNNClassifier(num_classes=3, vocabulary_size=20, hidden_dim=8,
                              ngram_widths=(3, 4), dropout=0.0)
    assert not model.ngram_convolution.residual
    mask = SOURCE != 0
    embedded = ops.convert_to_numpy(model.embedding(SOURCE)) * mask[..., None]
    features = ops.concatenate([conv(embedded) for conv in model.ngram_convolution.convolutions], -1)
    assert features.shape[-1] == 2 * STEM["hidden_dim"]
    pooled = np.where(mask[..., None], ops.convert_to_numpy(features), -np.inf).max(axis=1)
    expected = model.head_output(model.head_hidden(pooled))
    np.testing.assert_allclose(model(SOURCE), expected, atol=1e-5)
    with_block = _tokens(ngram_widths=(3, 4), pooling="max", **{**CLASSIFIER, "num_layers": 1})
    assert with_block.ngram_convolution.residual
    with pytest.raises(ValueError, match=r"num_layers=0\. .*TextCNNClassifier"):
        _tokens(**{**CLASSIFIER, "num_layers": 0})


# The text presets' model (n-gram widths 3-5, max pooling, mixup, hashed
# character n-grams), small.  Its figures were recorded from this model as
# `TransformerClassifier(num_layers=0, num_heads=4, intermediate_dim=32,
# **TEXT_CNN)` before Kim's CNN became its own class, by printing the
# outputs below: the class is the same computation, weight for weight.
TEXT_CNN = dict(num_classes=6, vocabulary_size=40, hidden_dim=16, dropout=0.3,
                max_sequence_length=64, positions="sinusoidal", ngram_widths=(3, 4, 5),
                pooling="max", mixup_alpha=0.4, char_ngram_buckets=50, char_ngrams_per_word=4)
TEXT_CNN_INPUT = np.array([
    [[34, 41, 34, 0, 20], [26, 43, 28, 1, 39], [21, 37, 43, 8, 4], [12, 44, 1, 27, 4],
     [13, 15, 24, 21, 20], [3, 1, 0, 6, 0], [4, 34, 26, 33, 13]],
    [[2, 31, 38, 19, 23], [8, 50, 41, 50, 19], [32, 34, 48, 33, 42], [26, 35, 35, 19, 44],
     [36, 6, 29, 36, 43], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0]],
    [[38, 47, 27, 18, 34], [29, 29, 12, 16, 36], [26, 30, 25, 17, 38], [0, 0, 0, 0, 0],
     [0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0]],
], "int32")  # (B, T, 1 + G): each word's id, then its 4 n-gram ids
TEXT_CNN_LOGITS = np.array([
    [-2.820448, 0.9376487, 0.5510672, -0.4513562, -1.7301552, 2.7001116],
    [-2.5574214, 2.0633075, 1.7569594, -0.565733, 0.0826996, 1.7559061],
    [-2.2183957, 0.7061201, 0.9409158, -1.0832522, -0.6829897, 1.803231],
], "float32")
TEXT_CNN_TRAINING = np.array([  # dropout 0.3 and mixup: logits, then lam
    [-4.6868567, 0.1242856, -0.1392764, -1.7322949, -1.5212678, 3.6014154, 0.6185025],
    [-5.1468363, 0.0448715, 2.2080805, -4.15639, 0.029174, 3.6309664, 0.8204286],
    [-3.283584, -0.0255786, 1.4284428, -1.9388435, -1.9413197, 2.8286824, 0.9818196],
], "float32")
TEXT_CNN_WEIGHTS = [
    ("token_embedding/embeddings", (40, 16)), ("char_ngram_embedding/embeddings", (51, 16)),
    ("ngram_convolution/convolution_3/kernel", (3, 16, 16)),
    ("ngram_convolution/convolution_3/bias", (16,)),
    ("ngram_convolution/convolution_4/kernel", (4, 16, 16)),
    ("ngram_convolution/convolution_4/bias", (16,)),
    ("ngram_convolution/convolution_5/kernel", (5, 16, 16)),
    ("ngram_convolution/convolution_5/bias", (16,)),
    ("head_hidden/kernel", (48, 16)), ("head_hidden/bias", (16,)),
    ("head_output/kernel", (16, 6)), ("head_output/bias", (6,)),
]


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="figures from TensorFlow")
def test_text_cnn_computes_what_the_presets_model_computed_before_it_had_its_own_class():
    """Same seed, same weights in the same order, same logits (inference and
    a training call with dropout and mixup) as the recorded figures above."""
    keras.utils.set_random_seed(0)
    model = TextCNNClassifier(**TEXT_CNN)
    assert [(w.path, tuple(w.shape)) for w in model.weights] == TEXT_CNN_WEIGHTS
    np.testing.assert_allclose(model(TEXT_CNN_INPUT, training=False), TEXT_CNN_LOGITS,
                               rtol=1e-5, atol=1e-5)
    keras.utils.set_random_seed(0)
    model = TextCNNClassifier(**TEXT_CNN)
    # The recorded training output is the mixed logits, then lam: the call
    # now returns the logits and keeps lam for compute_loss.
    np.testing.assert_allclose(model(TEXT_CNN_INPUT, training=True), TEXT_CNN_TRAINING[:, :-1],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.step_outputs.take()[0], TEXT_CNN_TRAINING[:, -1],
                               rtol=1e-5, atol=1e-5)


def test_text_cnn_round_trips_through_its_config_and_a_saved_file(tmp_path):
    keras.utils.set_random_seed(0)
    model = TextCNNClassifier(**TEXT_CNN)
    clone = TextCNNClassifier.from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, TextCNNClassifier)
    np.testing.assert_allclose(restored(TEXT_CNN_INPUT), model(TEXT_CNN_INPUT), atol=1e-6)


def test_classifier_takes_a_stem_and_answers_with_its_sizes():
    """The stem is one layer of the model, its sizes are the model's, and
    the classifier's own arguments are the encoder's and the head's."""
    stem = TokenStem(20, hidden_dim=8, max_sequence_length=16, positions="learned")
    model = TransformerClassifier(stem, **CLASSIFIER)
    assert model.get_layer("stem") is stem
    assert (model.vocabulary_size, model.num_features, model.max_sequence_length,
            model.hidden_dim, model.positions, model.input_name) == (
        20, None, 16, 8, "learned", "token_ids")
    assert model.head_hidden.kernel.shape == (8, 8)
    with pytest.raises(ValueError, match=r"`stem` must be an input stem layer.*stem=20"):
        TransformerClassifier(20, **CLASSIFIER)


def test_a_classifier_saved_in_the_layout_before_stems_is_refused_saying_what_to_do(
        tmp_path):
    """A config of the old layout (input by `vocabulary_size`, no `stem`) is
    refused, directly and from a `.keras` file, naming the way out."""
    old = {"name": "transformer_classifier", "trainable": True, "dtype": "float32",
           "num_classes": 3, "vocabulary_size": 20, "num_features": None, "num_layers": 1,
           "hidden_dim": 8, "num_heads": 2, "intermediate_dim": 16}
    with pytest.raises(ValueError, match=r"no `stem`.*Retrain the model, or load it with"):
        TransformerClassifier.from_config(old)
    model = _tokens(**CLASSIFIER)
    path = tmp_path / "old.keras"
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(files["config.json"])
    config["config"] = old
    files["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    with pytest.raises(Exception, match=r"Retrain the model"):
        keras.saving.load_model(path)


def test_every_model_answers_with_one_shape_in_training_and_at_inference():
    """What training needs beyond the answer (an ensemble's member logits,
    mixup's lam) is kept for compute_loss, never returned by the call."""
    from keras_transformer.models import (
        ClassifierEnsemble,
        TextCNNClassifier,
        VisionTransformer,
    )

    def text(name, mixup_alpha):
        return TextCNNClassifier(num_classes=3, vocabulary_size=20, hidden_dim=8,
                                 max_sequence_length=8, ngram_widths=(2, 3), pooling="max",
                                 mixup_alpha=mixup_alpha, name=name)

    ids = np.array([[5, 6, 7, 0], [8, 9, 3, 4]], "int32")
    cases = [
        (Transformer.from_preset("tiny", vocabulary_size=20, num_layers=1),
         {"encoder_token_ids": ids, "decoder_token_ids": ids}),
        (text("plain", 0.0), ids),
        (text("mixing", 0.4), ids),
        (ClassifierEnsemble([text(f"m{i}", 0.4) for i in range(3)]), ids),
        (VisionTransformer(num_classes=3, image_size=8, patch_size=4, num_layers=1,
                           hidden_dim=8, num_heads=2, intermediate_dim=16),
         np.zeros((2, 8, 8, 1), "float32")),
    ]
    for model, x in cases:
        assert model(x, training=True).shape == model(x, training=False).shape, model.name
