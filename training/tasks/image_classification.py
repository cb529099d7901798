"""Image classification: a `VisionTransformer`, exported and served (not trained here).

No training run makes a `VisionTransformer` (notebook 06 trains one with
`model.fit`), so this task has no data hooks and is not one of
`training.config.TASKS`; export, verification and prediction go through its
serving side like the others'.
"""

from training.serving.task_serving import ClassifierServing
from training.tasks.base import Task


class ImageClassification(Task):
    """Images `(H, W, C)` float32 -> class; H = W = the model's `image_size`."""

    name = "image"
    trainable = False

    def load_data(self, config, run_dir):
        raise ValueError(
            "task='image' is not trained by training.train; train a VisionTransformer "
            "with model.fit (notebook 06) and export it with export.saved_model."
        )

    def serving(self):
        return ClassifierServing.for_images(self.label_names, self.name)
