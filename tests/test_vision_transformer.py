"""VisionTransformer: round trips, mixed precision, resizing, a short fit."""

import keras
import numpy as np
import pytest
from sklearn.datasets import load_digits

from keras_transformer.models import VisionTransformer

TINY = dict(
    num_classes=10,
    image_size=8,
    patch_size=2,
    num_layers=1,
    hidden_dim=16,
    num_heads=2,
    intermediate_dim=32,
)


def _images(rng, batch=3, size=8):
    return rng.random((batch, size, size, 1), dtype=np.float32)


def test_output_shape_and_config_round_trip(rng):
    model = VisionTransformer(**TINY)
    logits = model(_images(rng), training=False)
    assert tuple(logits.shape) == (3, 10) and logits.dtype == "float32"
    assert [t.name for t in model.inputs] == ["images"]
    assert model.output_names == ["logits"]
    clone = VisionTransformer.from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    assert clone.count_params() == model.count_params()


def test_keras_save_and_load_give_identical_outputs(tmp_path, rng):
    model = VisionTransformer(**TINY)
    images = _images(rng)
    path = tmp_path / "vit.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, VisionTransformer)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(loaded(images, training=False)),
        keras.ops.convert_to_numpy(model(images, training=False)),
    )


def test_mixed_bfloat16_gives_finite_float32_logits(rng):
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = VisionTransformer(**TINY)
    logits = model(_images(rng), training=False)
    assert logits.dtype == "float32"
    assert np.isfinite(keras.ops.convert_to_numpy(logits)).all()
    resized = model.resized(image_size=16)
    assert np.isfinite(keras.ops.convert_to_numpy(resized(_images(rng, size=16)))).all()


def test_resized_to_the_same_grid_is_the_same_model(rng):
    model = VisionTransformer(**TINY)
    images = _images(rng)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model.resized()(images, training=False)),
        keras.ops.convert_to_numpy(model(images, training=False)),
    )


def test_resized_grid_interpolates_a_linear_ramp_bilinearly(rng):
    model = VisionTransformer(**TINY)  # 4x4 grid
    rows, cols = np.meshgrid(np.arange(4.0), np.arange(4.0), indexing="ij")
    scale = np.linspace(-1.0, 1.0, 16)  # one ramp per channel, rows and columns differ
    ramp = (rows + 10 * cols).reshape(16, 1) * scale  # (16, D)
    model.patch_position_embedding.position_embeddings.assign(ramp.astype("float32"))
    resized = model.resized(image_size=16)  # same patch, 8x8 grid
    # Half-pixel centres: new cell i sits at (i + 0.5) * 4/8 - 0.5 of the old grid,
    # clamped at the border; bilinear interpolation of a ramp is that ramp.
    source = np.clip((np.arange(8) + 0.5) * 0.5 - 0.5, 0, 3)
    rows, cols = np.meshgrid(source, source, indexing="ij")
    expected = (rows + 10 * cols).reshape(64, 1) * scale
    table = keras.ops.convert_to_numpy(
        resized.patch_position_embedding.position_embeddings
    )
    np.testing.assert_allclose(table, expected, atol=1e-5)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(
            resized.class_position_embedding.position_embeddings
        ),
        keras.ops.convert_to_numpy(model.class_position_embedding.position_embeddings),
    )
    logits = resized(_images(rng, size=16), training=False)
    assert tuple(logits.shape) == (3, 10)
    assert np.isfinite(keras.ops.convert_to_numpy(logits)).all()


def test_resized_patch_size_keeps_constant_patches(rng):
    model = VisionTransformer(**TINY)
    # Twice the image and twice the patch: the same 4x4 grid, a PI-resized kernel.
    resized = model.resized(image_size=16, patch_size=4)
    assert resized.patch_embedding.kernel.shape == (4, 4, 1, 16)
    levels = rng.random((3, 1, 1, 1), dtype=np.float32)
    small = np.broadcast_to(levels, (3, 8, 8, 1))
    large = np.broadcast_to(levels, (3, 16, 16, 1))
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(resized(large, training=False)),
        keras.ops.convert_to_numpy(model(small, training=False)),
        atol=1e-4,
    )


def test_two_routes_to_an_8x8_grid_agree(rng):
    # A nearest-upsampled 16x16 image cut into 2x2 patches is the 8x8 image cut
    # into 1x1 patches: the PI-resized 1x1 kernel is the sum of the 2x2 kernel.
    model = VisionTransformer(**TINY)
    images = _images(rng)
    upsampled = images.repeat(2, axis=1).repeat(2, axis=2)  # (B, 16, 16, 1)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(
            model.resized(image_size=16)(upsampled, training=False)
        ),
        keras.ops.convert_to_numpy(model.resized(patch_size=1)(images, training=False)),
        atol=1e-5,
    )


def test_fit_on_digits_lowers_the_loss_and_resizes():
    digits = load_digits()
    images = (digits.images[:512] / 16.0).astype("float32")[..., None]  # (512, 8, 8, 1)
    labels = digits.target[:512]
    model = VisionTransformer(**TINY, dropout=0.0)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=False,  # XLA compilation costs more than 24 tiny steps
    )
    history = model.fit(images, labels, batch_size=64, epochs=3, verbose=0)
    assert history.history["loss"][-1] < 0.85 * history.history["loss"][0]
    upsampled = images.repeat(2, axis=1).repeat(2, axis=2)  # (512, 16, 16, 1), nearest
    logits = model.resized(image_size=16)(upsampled[:8], training=False)
    assert np.isfinite(keras.ops.convert_to_numpy(logits)).all()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(image_size=10, patch_size=4), "image_size=10"),
        (dict(patch_size=0), "patch_size=0"),
        (dict(hidden_dim=10, num_heads=4), "hidden_dim=10"),
        (dict(num_channels=0), "num_channels=0"),
        (dict(dropout=1.5), "dropout=1.5"),
    ],
)
def test_bad_arguments_raise(overrides, message):
    with pytest.raises(ValueError, match=message):
        VisionTransformer(**{**TINY, **overrides})


def test_bad_resize_arguments_raise():
    model = VisionTransformer(**TINY)
    with pytest.raises(ValueError, match="image_size=9"):
        model.resized(image_size=9)
    with pytest.raises(ValueError, match="patch_size=-1"):
        model.resized(patch_size=-1)
