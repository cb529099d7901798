"""The Vision Transformer (ViT) of Dosovitskiy et al. (2021)."""

import keras
from keras import ops

from keras_transformer.layers._dropout import Dropout
from keras_transformer.layers.position_embedding import (
    PositionEmbedding,
    interpolate_positions,
)
from keras_transformer.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_transformer.layers.validation import (
    check_divisible,
    check_positive_int,
    check_rate,
)
from keras_transformer.models._serialization import with_dtype_policy
from keras_transformer.models._xla_dropout import XLADropoutMixin
from keras_transformer.models.pooled_classifier import class_probabilities


def resize_patch_kernel(kernel, new_patch_size):
    """Resize a `(p, p, C, D)` patch-projection kernel to `(p', p', C, D)`.

    FlexiViT's PI-resize (Beyer et al. 2023, Section 3.4): with `B` the
    bilinear resize of a `p x p` patch to `p' x p'`, the new kernel is
    `pinv(B^T) w`, so that `<B x, w'> = <x, w>` for every patch `x` when
    `p' >= p` (least squares when `p' < p`).  A constant patch resizes to a
    constant patch, so its projection is kept exactly.
    """
    size, _, channels, width = kernel.shape
    if new_patch_size == size:
        return ops.convert_to_tensor(kernel)
    basis = ops.reshape(ops.eye(size * size), (size * size, size, size, 1))
    resized_basis = ops.image.resize(
        basis, (new_patch_size, new_patch_size), interpolation="bilinear", antialias=False
    )  # (p^2, p', p', 1): row k is B e_k
    b_transpose = ops.reshape(resized_basis, (size * size, new_patch_size**2))  # B^T
    flat = ops.reshape(ops.cast(kernel, "float32"), (size * size, channels * width))
    new_flat = ops.matmul(ops.pinv(b_transpose), flat)  # (p'^2, C * D)
    return ops.reshape(new_flat, (new_patch_size, new_patch_size, channels, width))


@keras.saving.register_keras_serializable(package="keras_transformer")
class _ClassToken(keras.layers.Layer):
    """The learned `[class]` token x_class (Section 3.1, Eq. 1), one per example."""

    def build(self, input_shape):
        self.class_token = self.add_weight(
            name="class_token", shape=(input_shape[-1],), initializer="zeros"
        )
        self.built = True

    def call(self, inputs):
        width = inputs.shape[-1]
        token = ops.reshape(ops.cast(self.class_token, self.compute_dtype), (1, 1, width))
        return ops.broadcast_to(token, (ops.shape(inputs)[0], 1, width))  # (B, 1, D)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], 1, input_shape[-1])


@keras.saving.register_keras_serializable(package="keras_transformer")
class VisionTransformer(XLADropoutMixin, keras.Model):
    """ViT: a Transformer encoder over a sequence of image patches.

    Section 3.1 (Eq. 1-4): the image is cut into non-overlapping
    `patch_size x patch_size` patches, each linearly projected to D (a
    `Conv2D` with stride = kernel = patch size is exactly that projection E);
    a learned `[class]` token is prepended; learned 1D position embeddings are
    added (a `(grid * grid, D)` table for the patches, kept separate from the
    class token's so the grid can be interpolated, Section 3.2); pre-LN
    encoder blocks with a GELU MLP; a final LayerNorm; a linear head on the
    class token.  No masking: every image has the same number of patches.

    Args:
        num_classes: K, the number of output logits.
        image_size: side of the square input images (H = W).
        patch_size: P, side of each square patch; must divide `image_size`.
        num_channels: C of the input images.
        num_layers, hidden_dim, num_heads, intermediate_dim: L, D, heads and
            the MLP size of Table 1.
        dropout: on the embeddings and every sub-layer output (Appendix B.1).
        attention_dropout: on the attention weights.
        normalize_first: pre-LN (ViT, Eq. 2-3) plus a final LayerNorm (Eq. 4);
            False gives the post-LN blocks of Vaswani et al. (2017).
        layer_norm_epsilon: epsilon of every LayerNorm.

    Inputs: `images` `(B, image_size, image_size, num_channels)` float32.
    Output: `logits` `(B, num_classes)`, float32 even under mixed precision.

    Example:
    >>> model = keras_transformer.models.VisionTransformer(
    ...     num_classes=10, image_size=8, patch_size=2, hidden_dim=16,
    ...     num_heads=2, intermediate_dim=32)
    >>> model(keras.ops.zeros((1, 8, 8, 1))).shape
    (1, 10)

    References:
        Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for
        Image Recognition at Scale", ICLR 2021.
        Beyer et al., "FlexiViT: One Model for All Patch Sizes", CVPR 2023.
    """

    def __init__(
        self,
        num_classes,
        image_size,
        patch_size,
        num_channels=1,
        num_layers=2,
        hidden_dim=64,
        num_heads=4,
        intermediate_dim=128,
        dropout=0.1,
        attention_dropout=0.0,
        normalize_first=True,
        layer_norm_epsilon=1e-6,
        dtype=None,
        **kwargs,
    ):
        for name, value in (("num_classes", num_classes), ("image_size", image_size),
                            ("patch_size", patch_size), ("num_channels", num_channels),
                            ("num_layers", num_layers), ("hidden_dim", hidden_dim),
                            ("num_heads", num_heads), ("intermediate_dim", intermediate_dim)):
            check_positive_int(name, value)
        check_divisible("image_size", image_size, "patch_size", patch_size)
        check_divisible("hidden_dim", hidden_dim, "num_heads", num_heads)
        check_rate("dropout", dropout)
        check_rate("attention_dropout", attention_dropout)
        grid_size = image_size // patch_size
        num_patches = grid_size * grid_size  # N = HW / P^2

        # === Layers ===
        self.patch_embedding = keras.layers.Conv2D(
            hidden_dim, patch_size, strides=patch_size, padding="valid",
            dtype=dtype, name="patch_embedding",
        )
        self.patch_flatten = keras.layers.Reshape(
            (num_patches, hidden_dim), dtype=dtype, name="patch_flatten"
        )
        # std 0.02 as the reference implementation; the class token starts at 0.
        position_initializer = keras.initializers.RandomNormal(stddev=0.02)
        self.patch_position_embedding = PositionEmbedding(
            num_patches, initializer=position_initializer, dtype=dtype,
            name="patch_position_embedding",
        )
        self.class_token = _ClassToken(dtype=dtype, name="class_token")
        self.class_position_embedding = PositionEmbedding(
            1, initializer=position_initializer, dtype=dtype, name="class_position_embedding"
        )
        self.concatenate = keras.layers.Concatenate(axis=1, dtype=dtype, name="prepend_class")
        self.embedding_dropout = Dropout(
            dropout, dtype=dtype, name="embedding_dropout"
        )
        self.encoder_blocks = [
            TransformerEncoderBlock(
                intermediate_dim, num_heads, dropout=dropout,
                attention_dropout=attention_dropout, activation="gelu",
                layer_norm_epsilon=layer_norm_epsilon, normalize_first=normalize_first,
                dtype=dtype, name=f"encoder_block_{i}",
            )
            for i in range(num_layers)
        ]
        self.encoder_norm = (
            keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="encoder_norm"
            )
            if normalize_first
            else None
        )
        self.head = keras.layers.Dense(num_classes, dtype=dtype, name="head")
        self.logits_cast = keras.layers.Activation("linear", dtype="float32", name="logits")

        # === Functional model ===
        images = keras.Input(
            (image_size, image_size, num_channels), dtype="float32", name="images"
        )
        x = self.patch_embedding(images)  # (B, H/P, W/P, D): x_p^i E for every patch i
        x = self.patch_flatten(x)  # (B, N, D), patches in row-major grid order
        x = x + self.patch_position_embedding(x)  # (B, N, D)
        class_token = self.class_token(x)  # (B, 1, D)
        class_token = class_token + self.class_position_embedding(class_token)
        x = self.concatenate([class_token, x])  # (B, 1 + N, D): z_0 of Eq. 1
        x = self.embedding_dropout(x)
        for block in self.encoder_blocks:
            x = block(x)  # (B, 1 + N, D)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        x = x[:, 0]  # (B, D): y = LN(z_L^0), Eq. 4
        outputs = self.logits_cast(self.head(x))  # (B, K)
        super().__init__(inputs=images, outputs=outputs, dtype=dtype, **kwargs)

        # === Config ===
        self.num_classes = num_classes
        self.image_size = image_size
        self.patch_size = patch_size
        self.num_channels = num_channels
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.normalize_first = normalize_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.grid_size = grid_size

    def probabilities(self, logits):
        """Class probabilities `(B, K)` float32 from logits `(B, K)`.

        Sigmoid for a single logit, else softmax, as
        `TransformerClassifier.probabilities`: the exporters serve both.
        """
        return class_probabilities(logits, self.num_classes)

    def resized(self, image_size=None, patch_size=None):
        """A copy of this model for another image size and/or patch size.

        Section 3.2, fine-tuning at higher resolution: the patch size is kept,
        the patch grid grows, and "we perform 2D interpolation of the
        pre-trained position embeddings, according to their location in the
        original image".  The patch-position table is resized bilinearly as
        a `grid x grid` image (`interpolate_positions(..., grid=True)`); the
        class token's position is copied unchanged.  If `patch_size` changes
        too, the patch-projection kernel is PI-resized (`resize_patch_kernel`,
        FlexiViT), so a constant patch keeps its projection exactly.  Every
        other weight is copied.

        Args:
            image_size: new image side (this model's if None).
            patch_size: new patch side (this model's if None); must divide
                `image_size`.

        Returns:
            A new, built `VisionTransformer` with the same dtype policy.
        """
        image_size = self.image_size if image_size is None else image_size
        patch_size = self.patch_size if patch_size is None else patch_size
        check_positive_int("image_size", image_size)
        check_positive_int("patch_size", patch_size)
        check_divisible("image_size", image_size, "patch_size", patch_size)
        config = self.get_config()
        config.update(image_size=image_size, patch_size=patch_size)
        model = self.__class__.from_config(config)
        for layer in self.layers:
            if not layer.weights:
                continue
            target = model.get_layer(layer.name)
            if layer is self.patch_position_embedding:
                new_grid = image_size // patch_size
                table = layer.position_embeddings
                if new_grid != self.grid_size:
                    table = interpolate_positions(table, new_grid * new_grid, grid=True)
                target.position_embeddings.assign(ops.cast(table, "float32"))
            elif layer is self.patch_embedding:
                kernel, bias = layer.get_weights()  # (P, P, C, D), (D,)
                kernel = resize_patch_kernel(kernel, patch_size)  # (P', P', C, D)
                target.set_weights([ops.convert_to_numpy(kernel), bias])
            else:
                target.set_weights(layer.get_weights())
        return model

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "num_classes": self.num_classes,
            "image_size": self.image_size,
            "patch_size": self.patch_size,
            "num_channels": self.num_channels,
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "normalize_first": self.normalize_first,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**with_dtype_policy(config))
