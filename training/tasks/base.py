"""`Task`: what differs between kinds of problem, behind one interface.

The pipeline (`training.train`, `training.runs.predict`, `export.*`) is written
once against these hooks and never branches on a task's name; the one string
lookup is `training.tasks.get_task(config.task)`.  A task is a plain object,
not a Keras model: it reads its data, holds its assets (a tokenizer for
text, class names for classifiers), builds its model, loss and metrics,
scores a model for selection and evaluates it: the hooks that score,
evaluate or watch a model take the run's task model
(`training.task_models`: its model, with `prepared` batches passed as they
are), and reach the model inside as `model.backbone`.  What the trained model
needs to be served (parsing inputs, answering with Keras, the served
module, the TFLite program, the probes an export is checked on) is its
serving side, `serving()` (`training.serving.task_serving`), which
`predict` and `export` call.  Loop, resume, distribution, averaging, the
run directory and atomic writes stay in the pipeline; tokenizers, decoding
and the served `tf.Module`s stay in their modules, which the tasks call.

Who calls what:

| hook | caller |
|---|---|
| `check_config`, `recipe_defaults` | `TrainingConfig.validate`, `training.recipe.adaptive` |
| `check_data`, `data_defaults`, `resolve_config` | `training.train`, `prepare`, after `load_data` |
| `load_data`, `prepare`, `make_dataset`, `batch_tokens` | `training.train` (data, vocabulary) |
| `build_model`, `loss_and_metrics` | `training.train._build` |
| `validation_score`, `callbacks`, `fit_validates`, `evaluate` | `training.train` |
| `evaluation_plan_type`, `time_evaluation` | `training.loop.time_budget` |
| `load_assets` | `training.runs.run_dir.load_run` |
| `serving` | `training.runs.predict`, `export.ctranslate2` (through `serving_of`) |
"""

import os

import numpy as np

from training.data.atomic import atomic_write_json
from training.data.readers import read_json
from training.recipe import budget
from training.recipe.plan import EvaluationPlan, FinalEvaluation
from training.serving.task_serving import Serving
from training.tasks.options import TaskOptions, option_defaults, option_names
from training.text.tokenizers import load_tokenizer

#: TrainingConfig fields that only some tasks use, with their unset value:
#: every task's options (`training.tasks.options`).
TASK_FIELDS = option_defaults()


def require_task(task, argument="task"):
    """`task` itself when it is a `Task`; a clear error for a name or anything else.

    Exporters and verifiers take the task object, which carries the
    tokenizer and class names a name alone cannot.
    """
    if isinstance(task, Task):
        return task
    hint = ""
    if isinstance(task, str):
        hint = (f" (for a name use training.tasks.get_task({task!r}, tokenizer=..., "
                "label_names=...); a loaded run holds its task as run.task)")
    raise TypeError(f"{argument} must be a training.tasks.Task; received {task!r}{hint}.")


def serving_of(task, argument="task"):
    """The serving side of `task`: a `Task`'s `serving()`, or a
    `training.serving.task_serving.Serving` as it is."""
    if isinstance(task, Serving):
        return task
    return require_task(task, argument).serving()


class Task:
    """One kind of problem; subclasses fill in the hooks.

    Args:
        tokenizer: The text tokenizer (`WordPieceTokenizer`), or None.
        label_names: One name per class, or None.
    """

    #: The registry key: `TrainingConfig.task`, and export's `task` argument.
    name = None
    #: The `TrainingConfig.dataset` values `load_data` reads.
    datasets = ()
    #: False for tasks that are exported but never trained by `train`.
    trainable = True
    #: The dataclass of this task's own config fields (`training.tasks.options`).
    options = TaskOptions
    #: The flat `TASK_FIELDS` (not in `options`) this task reads.
    fields = ()
    #: The `config.DATA_FIELDS` this task fills from its data where the config says None.
    data_fields = ()
    #: Whether the "auto" peak learning rate falls with small batches of
    #: `batch_tokens` (`training.recipe.adaptive.peak_learning_rate`): true where the
    #: loss sums over tokens (translation), false where it is one term per
    #: example whatever its length (text classification).
    peak_scales_with_batch_tokens = True

    def __init__(self, tokenizer=None, label_names=None):
        self.tokenizer = tokenizer
        self.label_names = None if label_names is None else [str(n) for n in label_names]

    # --- configuration ------------------------------------------------------

    def check_config(self, config):
        """Raises ValueError for a task-only field set on a task that ignores it."""
        for field, unset in TASK_FIELDS.items():
            value = getattr(config, field, unset)  # another task's options: not there
            own = field in self.fields or field in option_names(self.options)
            if not own and value != unset:
                raise ValueError(
                    f"`{field}` does not apply to this task; received "
                    f"{field}={value!r} with task={self.name!r}."
                )

    def recipe_defaults(self):
        """{TrainingConfig field: value} the recipe uses where the config says None."""
        return {}

    def data_defaults(self, config, data):
        """{`data_fields` field: value} that the training data (`TaskData`) decide."""
        return {}

    def resolve_config(self, config, data):
        """`config` with its None `data_fields` taken from `data_defaults`."""
        defaults = self.data_defaults(config, data)
        return config.replace(**{
            name: value for name, value in defaults.items()
            if name in self.data_fields and getattr(config, name) is None
        })

    # --- data and assets ----------------------------------------------------

    def load_data(self, config, run_dir):
        """The train/valid/test splits (`training.data.common.TaskData`), checked."""
        raise NotImplementedError

    def check_data(self, config, data):
        """Refuses, before training, data this task cannot learn from: a
        classifier's training split of fewer than two classes (its files
        named).  `training.train` and `prepare` call it after `load_data`."""
        if data.label_names is None:
            return
        names = list(data.label_names)
        if isinstance(data.train, tuple):  # in memory: the classes its labels hold
            names = [names[i] for i in np.unique(np.asarray(data.train[1]))]
        if len(names) >= 2:
            return
        source = (f"train_files={[os.fspath(p) for p in config.train_files]!r}"
                  if config.train_files else f"dataset={config.dataset!r}")
        held = f"only examples of class {names[0]!r}" if names else "no labelled examples"
        raise ValueError(
            f"{source}: the training data hold {held}; task={self.name!r} needs examples "
            "of two or more classes to learn from."
        )

    def prepare(self, config, data, run_dir, write=True):
        """Learns (or, on resume, reloads) the assets; `write`: save them too.

        The default keeps the class names the data found.
        """
        self.label_names = None if data.label_names is None else list(data.label_names)
        if write and self.label_names is not None:
            atomic_write_json(os.path.join(run_dir, "labels.json"), self.label_names, None)
        if write and data.records:
            os.makedirs(os.path.join(run_dir, "data"), exist_ok=True)
            for name, value in data.records.items():
                atomic_write_json(os.path.join(run_dir, "data", name), value, None)

    def load_assets(self, run_dir):
        """Reads what `prepare` wrote: `vocab/` and `labels.json`, when present."""
        vocab_dir = os.path.join(run_dir, "vocab")
        if os.path.isdir(vocab_dir):
            self.tokenizer = load_tokenizer(vocab_dir)
        labels = os.path.join(run_dir, "labels.json")
        if os.path.isfile(labels):
            self.label_names = read_json(labels)
        return self

    def make_dataset(self, config, split, shuffle=False, repeat=False, training=False):
        """`tf.data` of `(model inputs, labels)` batches of `split` (inputs, targets).

        `training`: the batches feed updates (a task may then drop an
        incomplete batch, so that XLA sees few shapes).
        """
        raise NotImplementedError

    def training_shapes(self, config):
        """Distinct batch shapes of the training stream (XLA compiles each once)."""
        return 1

    def batch_tokens(self, config, inputs, labels):
        """Real tokens in one batch: what the learning rate's batch factor counts."""
        raise NotImplementedError

    # --- model ----------------------------------------------------------------

    def build_model(self, config, data):
        """The (built) Keras model for `config` and the assets."""
        raise NotImplementedError

    def loss_and_metrics(self, config):
        """(loss, [metrics]) to compile with; the pipeline adds the optimizer."""
        raise NotImplementedError

    # --- selection and evaluation -------------------------------------------

    def validation_score(self, config, model, data, valid):
        """(score(model) -> float, higher is better; epoch-log monitor; mode)."""
        raise NotImplementedError

    def evaluation_plan_type(self):
        """The `EvaluationPlan` class of what `time_evaluation` decides."""
        return EvaluationPlan

    def time_evaluation(self, config, model, data, score, seconds_loss, evaluation):
        """(seconds of one score beyond the loss pass, seconds kept for the
        end, the task's `EvaluationPlan`).

        Called once while planning a time budget, after one validation pass
        of `seconds_loss`, with `evaluation` None (and after each epoch of
        it, with the plan's `seconds_per_validation` in its place and the
        evaluation plan it returned before).  Where `fit_validates` is
        false no loss pass ends an epoch: the first figure is then the whole
        per-epoch score. The end is selection, the test evaluation and
        saving: by default a few validation passes.  A task may leave a
        costly part of its test out of a short budget by recording that in
        its evaluation plan (plan.json, which `evaluate` then receives, on
        resume too).
        """
        return 0.0, 5.0 + 3 * seconds_loss, EvaluationPlan()

    def callbacks(self, config, model, data, logs_dir):
        """Task callbacks, placed before the pipeline's (TensorBoard last)."""
        return []

    def fit_validates(self, config):
        """Whether `fit` runs Keras' own pass over the validation split each
        epoch; false where a task callback logs `val_*` itself and that pass
        would be thrown away (a cross-fitted ensemble)."""
        return True

    def evaluate(self, config, model, data, valid, plan=None):
        """{"valid_<metric>": ..., test figures...} of the final model.

        `plan`: a `training.recipe.plan.FinalEvaluation`, the evaluation plan
        `time_evaluation` returned and, under a time budget, `end_time`, the
        `time.time()` by which the test must be done: a task leaves out an
        optional part that would not end by then, and says so in the
        metrics.  A task may return
        `eval_parts`, {part: seconds}, which `metrics.json` records (rounded).
        """
        watch = budget.Stopwatch()
        with watch.phase("valid"):
            results = model.evaluate(model.prepared(valid), verbose=0, return_dict=True)
        metrics = {f"valid_{k}": float(v) for k, v in results.items()}
        metrics.update(self.evaluate_test(config, model, data, plan or FinalEvaluation()))
        metrics["eval_parts"] = {**watch.phases, **metrics.get("eval_parts", {})}
        return metrics

    def evaluate_test(self, config, model, data, plan=None):
        """The test split's figures."""
        raise NotImplementedError

    # --- serving ----------------------------------------------------------------

    def serving(self):
        """This task's serving side for its assets: a
        `training.serving.task_serving.Serving` that parses inputs, answers
        with a Keras model, builds the served module and the TFLite program."""
        raise NotImplementedError
