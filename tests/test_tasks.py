"""The task registry and each task's own hooks (fast: no training).

The end-to-end contract every task keeps (train, resume, evaluate, predict,
export, verify) is tests/test_task_contract.py.
"""

import dataclasses
import inspect

import pytest
import tensorflow as tf

from training import config as config_module
from training import recipe
from training.config import TrainingConfig
from training.tasks import TASKS, Task, get_task
from training.tasks.base import TASK_FIELDS

# The hooks a trained task must fill in.
TRAINING_HOOKS = ("load_data", "make_dataset", "batch_tokens", "build_model",
                  "loss_and_metrics", "validation_score", "evaluate_test")


def test_registry_keys_are_the_task_names_and_config_lists_the_trained_ones():
    assert all(name == task.name for name, task in TASKS.items())
    assert config_module.TASKS == tuple(n for n, t in TASKS.items() if t.trainable)
    assert set(TASKS) == {"translation", "classification", "timeseries"}
    for task in TASKS.values():
        assert issubclass(task, Task) and task.__bases__ == (Task,)  # flat
        assert set(task.datasets) <= set(config_module.DATASETS)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_fills_in_its_hooks(name):
    task = TASKS[name]
    missing = [h for h in TRAINING_HOOKS if getattr(task, h) is getattr(Task, h)]
    assert missing == [], f"{name} leaves {missing} to the base"


def test_get_task_is_the_lookup_and_holds_assets():
    with pytest.raises(ValueError, match=r"task must be one of .*received task='summarization'"):
        get_task("summarization")
    first, second = get_task("classification", label_names=["neg", "pos"]), get_task("classification")
    assert first is not second and first.label_names == ["neg", "pos"]
    assert second.label_names is None and second.tokenizer is None


@pytest.mark.parametrize("name", [n for n, t in TASKS.items() if t.trainable])
def test_recipe_defaults_name_config_fields(name):
    defaults = get_task(name).recipe_defaults()
    fields = {f.name for f in dataclasses.fields(TrainingConfig)}
    assert set(defaults) <= fields and "weight_decay" in defaults
    assert recipe.default_weight_decay(name) == defaults["weight_decay"]
    config = TrainingConfig(task=name, dataset=get_task(name).datasets[0])
    assert recipe.resolve(config, 64, 512, 100)["weight_decay"] == defaults["weight_decay"]


def test_task_only_fields_are_refused_where_unused():
    assert set(TASK_FIELDS) == {"patch_length"}
    TrainingConfig(task="timeseries", dataset="ucr", patch_length=4).validate()
    for name, dataset in (("translation", "toy"), ("classification", "sst2")):
        with pytest.raises(ValueError, match=f"patch_length=4 with task='{name}'"):
            TrainingConfig(task=name, dataset=dataset, patch_length=4).validate()


@pytest.mark.parametrize(
    "name, dataset, match",
    [("translation", "sst2", "not a translation dataset"),
     ("classification", "toy", "not a text classification dataset")],
)
def test_a_dataset_of_another_task_is_refused(name, dataset, match, tmp_path):
    config = TrainingConfig(task=name, dataset=dataset)
    with pytest.raises(ValueError, match=match):
        get_task(name).load_data(config, tmp_path)


def test_batch_tokens_count_what_the_learning_rate_scales_with():
    config = TrainingConfig(task="timeseries", dataset="ucr", patch_length=4)
    ids = tf.constant([[5, 6, 0], [7, 0, 0]])
    assert get_task("translation").batch_tokens(config, None, ids) == 3
    assert get_task("classification").batch_tokens(config, ids, None) == 3
    series = tf.zeros((2, 10, 1))
    assert get_task("timeseries").batch_tokens(config, series, None) == 2 * 3  # ceil(10 / 4)


def test_pipeline_and_exporters_do_not_branch_on_task_names():
    """The acceptance check of the Task design: no task name outside training/tasks/."""
    import training.recipe
    import training.run_dir
    import training.train

    modules = (training.train, training.run_dir, training.recipe)
    for module in modules:
        source = inspect.getsource(module)
        for name in TASKS:
            assert f'== "{name}"' not in source and f'!= "{name}"' not in source, module
