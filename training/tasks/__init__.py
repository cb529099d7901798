"""The kinds of problem, by name: `TASKS`, and `get_task`, the one string lookup.

```python
from training.tasks import get_task

task = get_task(config.task)            # a fresh Translation(), ...
task = get_task("classification", tokenizer=tokenizer, label_names=["neg", "pos"])
```

Adding a kind of problem: one file with a `Task` subclass (see
`training/tasks/base.py`), one line below, and, when it is trained by
`training.train`, its name in `training.config.TASKS` (the light list the
command line validates against without importing TensorFlow) and its
fields' dataclass in `training.tasks.options.OPTIONS`.

The task modules (and TensorFlow) are imported on first use of `TASKS`,
`Task` or `get_task`, so that `training.tasks.options` stays light.
"""


def _tasks():
    """{name: Task subclass} of every task (imports their modules)."""
    from training.tasks.image_classification import ImageClassification
    from training.tasks.series_classification import SeriesClassification
    from training.tasks.text_classification import TextClassification
    from training.tasks.translation import Translation

    return {
        task.name: task
        for task in (Translation, TextClassification, SeriesClassification, ImageClassification)
    }


def __getattr__(name):
    if name == "TASKS":
        return _tasks()
    if name == "Task":
        from training.tasks.base import Task

        return Task
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_task(name, tokenizer=None, label_names=None):
    """A new `Task` for `name` (a key of `TASKS`), holding the given assets.

    Raises:
        ValueError: If `name` is not a key of `TASKS`.
    """
    tasks = _tasks()
    if name not in tasks:
        raise ValueError(f"task must be one of {list(tasks)}; received task={name!r}.")
    return tasks[name](tokenizer=tokenizer, label_names=label_names)


__all__ = ["TASKS", "Task", "get_task"]
