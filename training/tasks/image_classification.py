"""Image classification: a `VisionTransformer`, exported and served (not trained here).

No training run makes a `VisionTransformer` (notebook 06 trains one with
`model.fit`), so this task has no data hooks and is not one of
`training.config.TASKS`; export, verification and prediction go through it
like the others.
"""

import numpy as np

from keras_transformer.models import VisionTransformer
from training.tasks import classifiers
from training.tasks.base import Task


class ImageClassification(Task):
    """Images `(H, W, C)` float32 -> class; H = W = the model's `image_size`."""

    name = "image"
    trainable = False
    model_class = VisionTransformer
    #: Images are not masked: only images of one size share a batch.
    same_key_batches = True

    def load_data(self, config, run_dir):
        raise ValueError(
            "task='image' is not trained by training.train; train a VisionTransformer "
            "with model.fit (notebook 06) and export it with export.saved_model."
        )

    def batch_key(self, example):
        return np.shape(example)

    def parse_input(self, example):
        """An image array `(H, W, C)`, float32."""
        if isinstance(example, (str, bytes)):
            raise ValueError(
                f"task='image' takes image arrays (H, W, C), not text; received {example!r:.40}."
            )
        image = np.asarray(example, np.float32)
        if image.ndim != 3:
            raise ValueError(f"An image must be (H, W, C); received shape {image.shape}.")
        return image

    def outputs(self, model, examples, beam_size=1, length_penalty=0.6):
        self.check_beam_size(beam_size)
        return classifiers.outputs(model, np.asarray(list(examples), np.float32),
                                   self.label_names)

    def format_outputs(self, outputs):
        return classifiers.format_outputs(outputs)

    def serving_inputs(self, examples):
        return {"images": np.asarray(list(examples), np.float32)}

    def serving_module(self, model):
        return classifiers.serving_module(model, None, self.label_names)

    def class_names(self, model):
        return classifiers.class_names(model, self.label_names)

    def tflite_model(self, model, quantize="none", sequence_length=None, batch_size=1):
        return classifiers.tflite_model(model, quantize, sequence_length, batch_size)

    def probe_inputs(self, model, num_examples=6, seed=0):
        """Uniform [0, 1) images of the model's size."""
        shape = (num_examples, model.image_size, model.image_size, model.num_channels)
        return np.random.default_rng(seed).random(shape, dtype=np.float32)
