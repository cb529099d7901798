"""The kinds of problem, by name: `TASKS`, and `get_task`, the one string lookup.

```python
from training.tasks import get_task

task = get_task(config.task)            # a fresh Translation(), ...
task = get_task("classification", tokenizer=tokenizer, label_names=["neg", "pos"])
```

Adding a kind of problem: one file with a `Task` subclass (see
`training/tasks/base.py`), one line below, and, when it is trained by
`training.train`, its name in `training.config.TASKS` (the light list the
command line validates against without importing TensorFlow).
"""

from training.tasks.base import Task
from training.tasks.image_classification import ImageClassification
from training.tasks.series_classification import SeriesClassification
from training.tasks.text_classification import TextClassification
from training.tasks.translation import Translation

TASKS = {
    task.name: task
    for task in (Translation, TextClassification, SeriesClassification, ImageClassification)
}


def get_task(name, tokenizer=None, label_names=None):
    """A new `Task` for `name` (a key of `TASKS`), holding the given assets.

    Raises:
        ValueError: If `name` is not a key of `TASKS`.
    """
    if name not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}; received task={name!r}.")
    return TASKS[name](tokenizer=tokenizer, label_names=label_names)


__all__ = ["TASKS", "Task", "get_task"]
