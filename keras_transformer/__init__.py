"""keras-transformer: the Transformer of "Attention Is All You Need" for Keras 3."""

from keras_transformer import decoding, layers, models

__version__ = "0.1.0"
__all__ = ["decoding", "layers", "models", "__version__"]
