"""VisionTransformer export: SavedModel and TFLite images in, equal to Keras.

The same contract as the other classifiers (`images` float32 `(B, H, W, C)`
-> `probabilities` `(B, K)`, `labels` `(B,)`), the same atomic export, and
the same checks: reloaded here, in a fresh process, with `saved_model_cli`,
and in the LiteRT interpreter. The model is trained for a few steps on the
digits 0, 1 and 2 (scikit-learn's 8x8 images), so its probabilities are
spread out and labels mean something.
"""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter
from sklearn.datasets import load_digits

from export.saved_model import export_model
from export.tflite import export_model_tflite
from export.tflite_verify import verify_tflite
from export.verify import compare_outputs, reference_outputs, verify_saved_model
from keras_transformer.models import VisionTransformer
from training.serving.signatures import ClassifierModule

LABEL_NAMES = ("zero", "one", "two")
BATCH_SIZE = 2  # Static batch of the `.tflite`.
QUANTIZATIONS = ("none", "float16", "int8")


def _digits():
    """Digits 0-2 as `(N, 8, 8, 1)` float32 in [0, 1] and their labels `(N,)`."""
    digits = load_digits(n_class=len(LABEL_NAMES))
    return (digits.images / 16.0).astype(np.float32)[..., None], digits.target


@pytest.fixture(scope="module")
def vit():
    """A 1-layer ViT on a 2x2 grid of 4x4 patches, one epoch (22 steps) of digits."""
    keras.utils.set_random_seed(0)
    # intermediate_dim 64: dynamic-range quantization keeps weights of fewer
    # than 1,024 elements in float32, so the (16, 64) and (64, 16) MLP kernels
    # are the ones it turns into int8.
    model = VisionTransformer(
        num_classes=len(LABEL_NAMES), image_size=8, patch_size=4, num_layers=1,
        hidden_dim=16, num_heads=2, intermediate_dim=64, dropout=0.0,
    )  # fmt: skip
    images, labels = _digits()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=False,  # XLA compilation costs more than 20 tiny steps.
    )
    model.fit(images[:-6], labels[:-6], batch_size=25, epochs=1, verbose=0)
    return model


@pytest.fixture(scope="module")
def images():
    """Six held-out digits `(6, 8, 8, 1)`: three static batches of the `.tflite`."""
    return _digits()[0][-6:]


@pytest.fixture(scope="module")
def export_dir(vit, tmp_path_factory):
    path = tmp_path_factory.mktemp("vit") / "export"
    config = {"task": "image", "model": vit.get_config()}
    return export_model(vit, path, label_names=list(LABEL_NAMES), config=config)


@pytest.fixture(scope="module")
def tflite_paths(vit, tmp_path_factory):
    """{quantization: path of the `.tflite`}, static batch `BATCH_SIZE`."""
    directory = tmp_path_factory.mktemp("vit-tflite")
    return {
        quantize: export_model_tflite(
            vit, directory / f"{quantize}.tflite", quantize=quantize, batch_size=BATCH_SIZE)
        for quantize in QUANTIZATIONS
    }


def test_patch_projection_equals_numpy_patches_times_kernel(vit, images):
    # Section 3.1: x_p^i E + b for the non-overlapping P x P patches x_p^i,
    # flattened (row, column, channel) and taken in row-major grid order.
    p, g, c = vit.patch_size, vit.grid_size, vit.num_channels
    kernel, bias = vit.patch_embedding.get_weights()  # (P, P, C, D), (D,)
    patches = images.reshape(-1, g, p, g, p, c)  # (B, g, P, g, P, C)
    patches = patches.transpose(0, 1, 3, 2, 4, 5)  # (B, g, g, P, P, C)
    patches = patches.reshape(len(images), g * g, -1)  # (B, N, P*P*C)
    expected = patches @ kernel.reshape(-1, kernel.shape[-1]) + bias  # (B, N, D)
    got = vit.patch_flatten(vit.patch_embedding(images))  # (B, N, D)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(got), expected, atol=1e-5)


def test_signature_takes_images_and_returns_probabilities_and_labels(export_dir):
    signatures = tf.saved_model.load(export_dir).signatures
    assert sorted(signatures) == ["serving_default"]
    serving = signatures["serving_default"]
    (spec,) = serving.structured_input_signature[1].values()
    assert spec.name == "images" and spec.dtype == tf.float32
    assert spec.shape.as_list() == [None, 8, 8, 1]
    outputs = serving.structured_outputs
    assert outputs["probabilities"].dtype == tf.float32
    assert outputs["labels"].dtype == tf.string
    assets = os.path.join(export_dir, "assets")
    assert sorted(os.listdir(assets)) == ["config.json", "export.json", "labels.txt"]
    with open(os.path.join(assets, "labels.txt"), encoding="utf-8") as f:
        assert f.read().split() == list(LABEL_NAMES)


def test_reloaded_saved_model_equals_keras(vit, images, export_dir):
    serving = tf.saved_model.load(export_dir).signatures["serving_default"]
    for batch in (images[:1], images):  # The batch is dynamic.
        got = {k: v.numpy() for k, v in serving(images=batch).items()}
        expected = reference_outputs(vit, batch, label_names=list(LABEL_NAMES))
        assert compare_outputs(got, expected, atol=1e-5) == []
    # A trained model tells the digits apart: the labels are not all one name.
    assert len(set(expected["labels"])) > 1, expected


def test_wrong_image_shape_is_refused_at_the_signature(export_dir):
    serving = tf.saved_model.load(export_dir).signatures["serving_default"]
    message = r"images \[2,16,16,1\] is not compatible with expected shape \[\?,8,8,1\]"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        serving(images=tf.zeros((2, 16, 16, 1)))


def test_default_label_names_are_class_indices(vit, images):
    serving = ClassifierModule(vit).signatures()["serving_default"]
    labels = serving(images=tf.constant(images))["labels"].numpy()
    expected = reference_outputs(vit, images)["labels"]
    assert set(labels) <= {b"0", b"1", b"2"} and list(labels) == list(expected)


@pytest.mark.slow
def test_fresh_process_and_saved_model_cli_equal_keras(vit, images, export_dir):
    report = verify_saved_model(export_dir, vit, images, label_names=list(LABEL_NAMES))
    assert report["fresh_process"] == [] and report["saved_model_cli"] == []
    assert report["ok"], report


def test_exporting_over_an_existing_directory_keeps_the_old_export(vit, tmp_path):
    target = tmp_path / "export"
    export_model(vit, target, config={"version": 1})
    before = {p.name: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    with pytest.raises(FileExistsError, match=str(target)):
        export_model(vit, target, config={"version": 2})
    after = {p.name: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    assert after == before
    assert os.listdir(tmp_path) == ["export"]  # No temporary left beside it.
    export_model(vit, target, overwrite=True, config={"version": 2})
    assert json.loads((target / "assets" / "config.json").read_text())["version"] == 2
    assert os.listdir(tmp_path) == ["export"]


def test_what_is_not_a_model_or_a_vits_length_is_refused_before_writing(vit, tmp_path):
    with pytest.raises(ValueError, match="model must be a Keras model; received dict"):
        export_model({}, tmp_path / "a")
    with pytest.raises(ValueError, match="model must be a Keras model; received str"):
        export_model_tflite("vit", tmp_path / "b.tflite")
    with pytest.raises(ValueError, match="sequence_length=8"):  # its image size is fixed
        export_model_tflite(vit, tmp_path / "c.tflite", sequence_length=8)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("quantize", QUANTIZATIONS)
def test_tflite_probabilities_within_tolerance(vit, images, tflite_paths, quantize):
    runner = Interpreter(model_path=tflite_paths[quantize]).get_signature_runner(
        "serving_default"
    )
    (spec,) = runner.get_input_details().values()
    assert list(spec["shape_signature"]) == [BATCH_SIZE, 8, 8, 1]  # Static: no -1.
    report = verify_tflite(tflite_paths[quantize], vit, images)
    print({k: v for k, v in report.items() if k != "ok"})  # Seen with `pytest -s`.
    assert report["quantization"] == quantize and report["num_examples"] == 6
    assert report["ok"], report
    if quantize == "none":
        assert report["max_abs_diff"] <= 1e-5 and report["label_agreement"] == 1.0


def test_quantized_tflite_files_are_smaller(tflite_paths):
    size = {q: os.path.getsize(path) for q, path in tflite_paths.items()}
    assert size["float16"] < size["none"] and size["int8"] < size["none"], size
