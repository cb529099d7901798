"""From a `TrainingConfig` to a trained, evaluated run directory.

`train(config, run_dir)` is the run's steps, in order, inside what the
run holds: its directory (one process per directory: `_run_directory`),
the process-wide seed, op determinism and dtype policy
(`_process_settings`), a streamed corpus's bad line told in one message
(`_data_errors_explained`) and its summaries folder (`_logs_dir`).  The
worker's role (`training.distribute.worker_role`) is read once and
carried.  The steps:

1. `_load_data`: read the data, fill the config's data-sized fields
   (`Task.resolve_config`) and learn (or reload) the vocabulary;
2. `_datasets`: the endless, seeded training stream, the validation set,
   the size of an epoch and the tokens of a batch;
3. `_planner` (`training/loop/time_budget.py`): the plan (`plan.json` of a
   resumed run) and the clock of a time budget; `_choose_depth`: the
   model's depth;
4. `_build_session`: model and its task model (`training.task_models`:
   the model with its tokenizer and class names), schedule, optimizer,
   restored checkpoint and callbacks (a `_Session`);
5. `_plan`: a budgeted run times its first updates and plans the rest
   (and may build the preset's depth instead of its short-run one);
6. `_fit`: the task model's `fit` to the plan's end, revising a budgeted
   plan after each epoch;
7. `_select_and_evaluate`: the checkpoint (or average) to keep, and the
   task's validation and test figures;
8. `_save`: `model.keras` (the task model: `keras.saving.load_model`
   gives back one that answers raw input), `metrics.json` and the last
   TensorBoard events.

What differs between kinds of problem (data, vocabulary, model, loss,
selection score, callbacks, test evaluation) is asked of the task,
`get_task(config.task)` (`training/tasks/`); nothing here branches on its
name.  How many updates a run makes, with which schedule and dropout, is
the plan's (`training/recipe/budget.py`, `training/recipe/plan.py`).
"""

import contextlib
import dataclasses
import os
import tempfile
import warnings

import keras
import tensorflow as tf
from tensorflow.python.framework import config as tf_config

from training.data.common import check_data_files
from training.data.shards import StreamedCorpus, seeded_sample
from training.distribute import (
    WorkerRole,
    barrier,
    build_strategy,
    worker_batch_note,
    worker_position,
    worker_role,
)
from training.loop.callbacks import AfterEpoch, FirstUpdate, StopAtPlanEnd
from training.loop.dropout import DropoutOffAt, disable_dropout
from training.loop.time_budget import TimeBudget
from training.monitor.callbacks import LearningRateLogger, StepScalars, WallClockTimer
from training.monitor.progress import RunProgress
from training.monitor.tensorboard import write_final_metrics, write_hparams
from training.optimization.optimizer import build_optimizer, build_schedule
from training.pipeline.datasets import TruncationWarning
from training.pipeline.streaming import PassLengths, data_error_message, worker_sharding
from training.recipe import budget
from training.runs import selection
from training.runs.resume import ResumableCheckpoint
from training.runs.run_dir import (
    claim_run_dir,
    drop_replaced_run,
    finish_run,
    write_json_atomically,
)
from training.task_models import task_model_for
from training.tasks import get_task
from training.tasks.common import preset_config, with_cardinality

#: Examples of a streamed corpus's sample whose batching estimates an epoch.
ESTIMATE_EXAMPLES = 20_000


@dataclasses.dataclass
class _Datasets:
    """What a run trains and validates on.

    The training stream is a pure function of the seed (pass e is shuffled
    with a seed from (seed, e)), so a resumed run's fresh iterator over
    `train.skip(step)` yields exactly the batches an uninterrupted run saw
    (a streamed corpus's `from_step(step)`: the same, read from the start of
    the step's pass, `training.pipeline.streaming.PassLengths`).
    An "epoch" is `steps_per_epoch` batches of it: the size of one pass,
    unless the recipe sets another (`steps_per_pass` is a pass's).
    """

    train: tf.data.Dataset  # endless
    valid: tf.data.Dataset
    steps_per_epoch: int
    steps_per_pass: int
    batch_tokens: float  # mean real tokens per batch (the peak's batch factor)


@dataclasses.dataclass
class _Run:
    """What every step of one run shares, fixed once its data are read."""

    task: object
    data: object
    datasets: _Datasets
    run_dir: str
    strategy: tf.distribute.Strategy
    role: WorkerRole  # whether this process writes the run directory
    logs_dir: str  # where summaries go (`_logs_dir`)


@dataclasses.dataclass
class _Session:
    """One model of a run and what is built around it (`_build_session`).

    A run builds one, or two when a budgeted run goes from its short-run
    depth to the preset's.  `TimeBudget` times and revises through it.
    """

    config: object  # the config the model was built from (its depth)
    task: object
    data: object
    model: keras.Model  # the task's model (token ids or series in, logits out)
    # `model` with its preprocessing: what `fit` trains, checkpoints hold
    # and `model.keras` is (`training.task_models.task_model_for`).
    task_model: keras.Model
    schedule: keras.optimizers.schedules.LearningRateSchedule
    checkpoint: ResumableCheckpoint  # its `step` is the run's global step
    validation_score: object  # score(task_model) -> float, higher is better
    callbacks: list


def train(config, run_dir, overwrite=False, verbose="auto", started_at=None, data=None):
    """Train, evaluate and save; returns the metrics written to metrics.json.

    `data`: the splits in memory for `dataset="arrays"` (`_check_given_data`).
    `started_at` (a `time.time()` value) is when the command started; a
    time budget counts from it (default: now).  `verbose="auto"` prints
    `training.monitor.progress.RunProgress`: a bar redrawn in place in a terminal,
    one line per epoch otherwise, with the step time and the run's time
    left; 0, 1 or 2 are Keras' own `fit` verbosity.
    """
    watch = budget.Stopwatch(started_at)
    config.validate()  # the task's own checks too (Task.check_config)
    _check_given_data(config, data)
    check_data_files(config)  # whole and readable, before the run directory is touched
    strategy = build_strategy(config.strategy)  # fails early if it cannot be built
    run_dir, role = os.fspath(run_dir), worker_role()
    with (_run_directory(run_dir, config, overwrite, role) as resumed,
          _process_settings(config), _data_errors_explained(),
          _logs_dir(run_dir, role) as logs_dir):
        task = get_task(config.task)
        config, data = _load_data(config, task, run_dir, role, watch, verbose, data)
        _share_stream(data, strategy, run_dir, role, verbose)
        with watch.phase("data"):
            datasets = _datasets(config, task, data)
        run = _Run(task, data, datasets, run_dir, strategy, role, logs_dir)
        planner = _planner(config, run, resumed, watch)
        config, probe = _choose_depth(config, planner.plan, planner.budget)
        session = _build_session(config, run, planner)
        progress, verbose = _progress(session, run, planner, resumed, verbose, watch)
        with watch.phase("train"):
            session = _plan(session, run, planner, probe)
            history = _fit(session, run, planner, progress, verbose)
        with watch.phase("eval"):
            chosen, metrics, parts = _select_and_evaluate(session, run, planner)
        metrics.update(_run_record(session, run, planner, chosen, parts, history))
        if role.is_chief:
            _save(session, run, metrics, watch)
        return metrics


def _check_given_data(config, data):
    """Data in memory goes with `dataset="arrays"` and only with it (nothing
    of it is written, so a resumed run needs the same `data` again)."""
    if (data is None) != (config.dataset != "arrays"):
        raise ValueError(
            "train(data=...) goes with dataset='arrays', and dataset='arrays' needs data=; "
            f"received dataset={config.dataset!r} and data="
            f"{'None' if data is None else type(data).__name__}."
        )


@contextlib.contextmanager
def _run_directory(run_dir, config, overwrite, role):
    """Yields whether the run resumes.  The chief locks the directory (one
    process per run directory; multi-worker workers share it) and prepares
    it, giving it back as it was if the run fails before its first
    checkpoint (`claim_run_dir`); another worker only reads whether it
    holds a checkpoint to restore."""
    if not role.is_chief:
        yield os.path.isfile(os.path.join(run_dir, "checkpoints", "resume", "LATEST"))
        return
    with claim_run_dir(run_dir, config, overwrite) as resumed:
        yield resumed


@contextlib.contextmanager
def _process_settings(config):
    """The run's seed, op determinism and dtype policy.

    Op determinism and the dtype policy are process-wide: set for this run,
    and the caller's given back afterwards (a deterministic run left on
    would, among others, make Keras drop jit_compile silently in every
    later run of the process).
    """
    keras.utils.set_random_seed(config.seed)
    determinism_was = tf_config.is_op_determinism_enabled()
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    policy_was = keras.config.dtype_policy()
    keras.config.set_dtype_policy(config.precision)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(policy_was)
        if not determinism_was:
            # No public API turns it off; this is what enable() undoes.
            tf_config.disable_op_determinism()


@contextlib.contextmanager
def _data_errors_explained():
    """A streamed corpus's bad line, found when the stream reached it, as a
    ValueError naming the file and line (`data_error_message`)."""
    try:
        yield
    except tf.errors.InvalidArgumentError as error:
        message = data_error_message(error)
        if message is None:
            raise
        raise ValueError(message) from None


@contextlib.contextmanager
def _logs_dir(run_dir, role):
    """Where summaries go: the run directory's for the chief; a temporary
    folder of its own for another worker (never read)."""
    if role.is_chief:
        yield os.path.join(run_dir, "logs")
        return
    with tempfile.TemporaryDirectory(prefix="worker-logs-") as folder:
        yield folder


def _share_stream(data, strategy, run_dir, role, verbose):
    """Gives a streamed corpus this worker's share and its pass record.

    Under a multi-worker strategy each worker streams its own share
    (`worker_sharding`, logged in one line with how batches combine).  The
    chief records its stream's pass lengths in `stream_passes.json`;
    another worker's share has passes of other lengths, so it keeps its
    record in memory (a resume re-reads its stream up to the step).
    """
    corpus = data.train
    if not isinstance(corpus, StreamedCorpus):
        return
    corpus.workers = worker_position(strategy)
    num_workers, _ = corpus.workers
    path = os.path.join(run_dir, "stream_passes.json") if role.is_chief else None
    corpus.pass_lengths = PassLengths(path, write=role.is_chief)
    if num_workers > 1 and verbose:
        share = worker_sharding(len(corpus.columns[0]), *corpus.workers)
        print(f"{share.describe()} {worker_batch_note(num_workers)}", flush=True)


def _planner(config, run, resumed, watch):
    """The run's `TimeBudget`, with the plan a resumed run made."""
    return TimeBudget.for_run(config, watch, run.datasets.steps_per_epoch, run.run_dir,
                              resumed, run.role.is_chief, run.task,
                              steps_per_pass=run.datasets.steps_per_pass)


def _progress(session, run, planner, resumed, verbose, watch):
    """(the `RunProgress` of verbose="auto", or None; `fit`'s own verbosity).

    verbose="auto": our own line per epoch (a bar in a terminal) with the
    run's time left; an integer: Keras' own progress output.
    """
    if resumed and verbose:
        print(f"Resuming {run.run_dir} from step {session.checkpoint.step}.", flush=True)
    if verbose != "auto":
        return None, verbose
    progress = RunProgress(planner.plan.total_steps, run.datasets.steps_per_epoch,
                           session.config.epochs, started_at=watch.started_at)
    return progress, 0


def _run_record(session, run, planner, chosen, parts, history):
    """What metrics.json records of the run beside the task's figures."""
    config = session.config
    return {
        "steps": int(session.checkpoint.step),
        "steps_per_epoch": run.datasets.steps_per_epoch,
        "epochs": config.epochs,
        "from_data": {n: getattr(config, n) for n in run.task.data_fields},
        "plan": planner.plan.to_json(),
        "selection": chosen,
        "eval_parts_seconds": parts,
        "stopped_by_deadline": bool(planner.deadline is not None and planner.deadline.hit),
        "history": {k: [float(v) for v in vals] for k, vals in history.items()},
    }


def _load_data(config, task, run_dir, role, watch, verbose, given=None):
    """(config with its data-sized fields filled, the task's data: `given`,
    or read by the task); the vocabulary and class names learnt (written
    by the chief), or reloaded on resume."""
    with watch.phase("data"):
        data = task.load_data(config, run_dir) if given is None else given
    task.check_data(config, data)
    # Sizes the config leaves null come from the data (`Task.data_fields`);
    # the same data give the same values on resume.
    config = task.resolve_config(config, data)
    with watch.phase("vocabulary"):
        task.prepare(config, data, run_dir, write=role.is_chief)
    if verbose and data.summary:
        print(data.summary, flush=True)
    return config, data


def _datasets(config, task, data):
    """The run's `_Datasets`."""
    stream = task.make_dataset(config, data.train, shuffle=True, repeat=True, training=True)
    valid = task.make_dataset(config, data.valid, shuffle=False)
    if getattr(stream, "pass_size", None):  # a prepared corpus: counted when prepared
        steps, batch_tokens = stream.pass_size
    elif isinstance(data.train, StreamedCorpus):
        steps, batch_tokens = _estimated_pass(config, task, data.train)
    else:
        # A pass of the stream ends where its first `num_examples` are seen,
        # or, where the task drops incomplete training batches (static shapes
        # for XLA), with the batches of one shuffled pass.
        first_pass = task.make_dataset(config, data.train, shuffle=True, training=True)
        steps, batch_tokens = _first_pass(config, task, first_pass, len(data.train[1]))
    # A known cardinality lets Keras end validation without an "input ran
    # out of data" warning.
    return _Datasets(stream, with_cardinality(valid), config.steps_per_epoch or steps, steps,
                     batch_tokens)


def _estimated_pass(config, task, corpus):
    """(batches in a pass of a streamed corpus, mean real tokens per batch),
    from its sample, never from reading the stream.

    At most `ESTIMATE_EXAMPLES` examples of the sample (a seeded subset)
    make one shuffled pass, batched as the stream batches (the
    same tokenizer, buckets and batch sizes), and its batches per example
    scale to the corpus's `num_examples` (counted where every shard was read
    to its end while sampling, else estimated from the shards' bytes per
    line).  The estimate is only the length of an "epoch" (the updates
    between two validations, and the schedule's and budget's unit); nothing
    exact depends on it matching a pass.  The resume position is exact all
    the same: it is the global step the checkpoint holds, and the stream a
    pure function of the seed, so `skip(step)` (`from_step`) reaches that batch; and the
    estimate itself is the same on resume (the same files, seed, sample and
    saved vocabulary give the same figure).
    """
    rows = seeded_sample(list(zip(*corpus.sample, strict=True)), ESTIMATE_EXAMPLES,
                         config.seed)
    sample = tuple(list(column) for column in zip(*rows, strict=True))
    first_pass = task.make_dataset(config, sample, shuffle=True, training=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TruncationWarning)
        steps, batch_tokens = _first_pass(config, task, first_pass, len(sample[1]))
    for warning in caught:
        warnings.warn(f"In the sample of the streamed training corpus: {warning.message}",
                      warning.category, stacklevel=2)
    # A worker's pass is its share of the corpus, and a step's global batch
    # is the workers' batches together (`worker_batch_note`).
    num_workers = corpus.workers[0]
    examples = corpus.num_examples / num_workers
    return max(1, round(steps * examples / len(sample[1]))), batch_tokens * num_workers


def _first_pass(config, task, stream, num_examples):
    """(batches in the first pass of `stream`, mean real tokens per batch).

    Tokens are what the task counts (`Task.batch_tokens`): target tokens for
    translation, non-padding ids for text and patches for series: what the
    learning rate's batch factor counts.
    """
    steps = seen = tokens = 0
    for inputs, labels, *_ in stream:
        steps += 1
        seen += int(labels.shape[0])
        tokens += task.batch_tokens(config, inputs, labels)
        if seen >= num_examples:
            break
    return steps, tokens / steps



def _choose_depth(config, plan, arithmetic):
    """(config of the depth the run builds first, the preset's depth or None).

    A resumed run builds the depth its plan records.  A fresh run may first
    try the preset's model at its short-run depth (`short_run_num_layers`):
    a budgeted one returns the preset's depth too, which it builds instead
    if even that would make enough passes (`_plan`).
    """
    if plan is not None:  # a `Plan`, or the `DepthChoice` a run made before its last kill
        return _with_num_layers(config, plan.num_layers), None
    if plan is None and _short_depth_applies(config, arithmetic):
        probe = None
        if config.time_budget_minutes is not None:
            probe = preset_config(config).num_layers
        return _with_num_layers(config, config.short_run_num_layers), probe
    return config, None


def _build(config, task, data):
    """(model, loss, metrics, d_model) for the configured task."""
    model = task.build_model(config, data)
    loss, metrics = task.loss_and_metrics(config)
    return model, loss, metrics, preset_config(config).hidden_dim


def _build_session(config, run, planner):
    """Builds, compiles and restores the model; the `_Session` around it.

    The schedule is the plan's (a plan without a recipe gets one here).
    """
    # Seeded here, so that the model a run ends up building starts from
    # the same weights whether or not a shallower one was tried first.
    keras.utils.set_random_seed(config.seed)
    task, data = run.task, run.data
    with run.strategy.scope():
        model, loss, metrics, hidden_dim = _build(config, task, data)
        task_model = task_model_for(model, task.tokenizer, task.label_names)
        recipe = planner.resolve_recipe(config, task, hidden_dim, run.datasets.batch_tokens,
                                        preset_config(config).num_layers)
        schedule = build_schedule(config, hidden_dim, recipe)
        optimizer = build_optimizer(schedule, recipe.weight_decay)
        task_model.compile(optimizer=optimizer, loss=loss, metrics=metrics,
                           jit_compile=config.jit_compile)
    checkpoint = ResumableCheckpoint(
        os.path.join(run.run_dir, "checkpoints", "resume"), config.checkpoint_every_steps,
        is_chief=run.role.is_chief,
        # The run an --overwrite replaced goes once this one has a checkpoint.
        on_saved=lambda: drop_replaced_run(run.run_dir),
    )
    with run.strategy.scope():  # a distributed optimizer builds its slots in its scope
        checkpoint.restore(task_model)
        # Built here rather than on the first update: an optimizer that
        # creates its slots inside `fit`'s first trace makes tf.function
        # trace the train step twice (about 5 s of a small run's start).
        if not task_model.optimizer.built:
            task_model.optimizer.build(task_model.trainable_variables)
    validation_score, monitor, mode = task.validation_score(config, task_model, data,
                                                            run.datasets.valid)
    callbacks = [checkpoint, *task.callbacks(config, task_model, data, run.logs_dir)]
    callbacks += [
        selection.EpochScores(
            run.run_dir, monitor, mode,
            # A run that keeps its last weights reads no epoch's: none is saved.
            0 if config.selection == "last" else config.keep_epoch_checkpoints,
            config.early_stopping_patience, is_chief=run.role.is_chief,
        ),
        LearningRateLogger(),
        WallClockTimer(),
    ]
    if run.role.is_chief:  # summaries are the chief's alone
        callbacks += [
            StepScalars(os.path.join(run.logs_dir, "train"), config.log_every_steps),
            keras.callbacks.TensorBoard(run.logs_dir),
        ]
    return _Session(config, task, data, model, task_model, schedule, checkpoint,
                    validation_score, callbacks)


def _plan(session, run, planner, probe):
    """A budgeted run's planning: times its first updates and fixes the plan.

    `probe`: the preset's depth while `session` is a shallower model, or
    None.  If even the preset's depth would make enough passes for depth to
    pay, that depth is built and planned afresh, as if never shallower (its
    checkpoints and updates are gone).  Returns the session the run trains.
    """
    if planner.plan.planned:  # a run of `epochs` passes, or a resumed one
        return session
    planner.calibrate(session, run.datasets)
    if probe is not None and planner.preset_depth_is_long(session.model, probe):
        session.checkpoint.discard()
        estimate = planner.start_over(probe)  # a kill from here on resumes at this depth
        session = _build_session(_with_num_layers(session.config, probe), run, planner)
        planner.calibrate(session, run.datasets)
        planner.plan = planner.plan.with_measured(preset_depth_passes=estimate)
    planner.finish_planning()
    return session


def _fit(session, run, planner, progress, verbose):
    """The task model's `fit` from the checkpoint's step to the plan's end; the history.

    Under a budget the plan is revised after each epoch, from its pace (the
    calibration's first updates run slow), by a callback: the rest of the
    run is one `fit`, so one iterator of the stream.  A `fit` per epoch
    re-skipped the stream from its start each time, and tf.data makes every
    skipped batch: 35 s at 8,000 updates, and about 6 of a 60-minute run's
    minutes in all.
    """
    config, task_model, checkpoint = session.config, session.task_model, session.checkpoint
    steps_per_epoch, deadline = run.datasets.steps_per_epoch, planner.deadline
    if run.role.is_chief:
        write_hparams(run.logs_dir, config)
    callbacks = _fit_callbacks(session, planner, progress)
    history = {}
    while segments := _segments(checkpoint.step, planner.plan.total_steps, steps_per_epoch):
        initial_epoch, epochs, steps = segments[0]
        barrier(run.strategy)  # every worker reads the chief's scores alike
        if planner.timer is not None and steps == steps_per_epoch:
            # The whole rest of the run, to the largest plan a revision
            # can make; `StopAtPlanEnd` ends it where the plan does.  (A
            # shorter segment, the epoch the calibration began, is one
            # epoch already.)
            epochs = -(-planner.max_steps // steps_per_epoch)
        if selection.plateaued(selection.read_scores(run.run_dir),
                               config.early_stopping_patience):
            break
        if deadline is not None and deadline.passed():
            # Not one more `fit` once the time is up: it would start,
            # make one update, stop, and still validate (a 30-minute
            # run ended 49 s late that way).
            break
        valid = run.datasets.valid if run.task.fit_validates(config) else None
        h = task_model.fit(
            task_model.prepared(_stream_from(run.datasets.train, checkpoint.step)),
            validation_data=None if valid is None else task_model.prepared(valid),
            initial_epoch=initial_epoch, epochs=epochs, steps_per_epoch=steps,
            callbacks=callbacks, verbose=verbose, shuffle=False,
        )
        for key, values in h.history.items():
            history.setdefault(key, []).extend(values)
        if deadline is not None and deadline.hit:
            # Stopped by the deadline fallback: straight to the final
            # evaluation.  Re-timing it first (a validation decode, 4 s on
            # Multi30k) is time the budget no longer has: a 60-minute run
            # wrote its metrics.json 0.7 s late that way.
            break
    return history


def _fit_callbacks(session, planner, progress):
    """The session's callbacks, then those of the plan: progress, the
    deadline, dropout switched off, and a budgeted run's revisions."""
    checkpoint = session.checkpoint
    callbacks = session.callbacks + [c for c in (progress, planner.deadline) if c is not None]
    callbacks.append(FirstUpdate(planner.watch))
    # A revision may make a budgeted run short after it began with
    # dropout: from then on it trains without (`DropoutOffAt`), and a
    # resumed run switches at the same update.
    dropout_off_at = planner.settle()
    if dropout_off_at is not None and checkpoint.step >= dropout_off_at:
        disable_dropout(session.model)
    elif dropout_off_at is not None:
        callbacks = callbacks + [DropoutOffAt(checkpoint, dropout_off_at)]
    if progress is not None:
        progress.set_plan(planner.plan.total_steps)
    if planner.timer is not None:

        def revise():
            time_is_up = planner.revise(session)
            if progress is not None:
                progress.set_plan(planner.plan.total_steps)
            return time_is_up

        callbacks = callbacks + [
            planner.timer,
            StopAtPlanEnd(checkpoint, planner),
            AfterEpoch(revise),
        ]
    return callbacks


def _select_and_evaluate(session, run, planner):
    """(the selection made, the task's metrics, seconds of each part)."""
    config = session.config
    barrier(run.strategy)  # the chief's last epoch written before workers select
    timed = budget.Stopwatch()
    with timed.phase("selection"):
        chosen = selection.select(session.task_model, run.run_dir,
                                  config.keep_epoch_checkpoints, session.validation_score,
                                  config.selection)
    metrics = run.task.evaluate(config, session.task_model, run.data, run.datasets.valid,
                                planner.final_evaluation())
    parts = {name: round(seconds, 2)
             for name, seconds in {**timed.phases, **metrics.pop("eval_parts", {})}.items()}
    return chosen, metrics, parts


def _save(session, run, metrics, watch):
    """model.keras, metrics.json (with the phases' seconds) and the final
    events; then the run drops its checkpoints and records its files
    (`finish_run`)."""
    selection.save_final_model(session.task_model, os.path.join(run.run_dir, "model.keras"))
    metrics.update(watch.report())
    write_json_atomically(os.path.join(run.run_dir, "metrics.json"), metrics)
    write_final_metrics(run.logs_dir, session.config, metrics, int(session.checkpoint.step))
    finish_run(run.run_dir)


def _stream_from(stream, step):
    """The training stream from batch `step` on: `skip(step)`, or a streamed
    corpus's `from_step`, which starts reading at the pass `step` lies in."""
    from_step = getattr(stream, "from_step", None)
    return from_step(step) if from_step is not None else stream.skip(step)


def _with_num_layers(config, num_layers):
    """`config` whose model has `num_layers` layers (each side)."""
    return config.replace(model_overrides={**config.model_overrides, "num_layers": int(num_layers)})


def _short_depth_applies(config, arithmetic):
    """Whether a fresh run builds `short_run_num_layers` layers first.

    A budgeted run tries them and may go back to the preset's depth once
    planned; a run of `epochs` epochs knows at once whether it is short
    (`arithmetic`, the run's `Budget`, counts their passes).
    """
    if config.short_run_num_layers is None:
        return False
    if config.short_run_num_layers == preset_config(config).num_layers:
        return False
    if config.time_budget_minutes is not None:
        return True
    return arithmetic.short(arithmetic.max_steps)


def _segments(step, total_steps, steps_per_epoch):
    """`fit` calls (initial_epoch, epochs, steps_per_epoch) from `step` to the end.

    Whole epochs run in one call; an interrupted epoch, and a last epoch cut
    by the plan, run alone with exactly their remaining steps.
    """
    segments = []
    while step < total_steps:
        epoch, offset = divmod(step, steps_per_epoch)
        if offset or total_steps - step < steps_per_epoch:
            end = min((epoch + 1) * steps_per_epoch, total_steps)
            segments.append((epoch, epoch + 1, end - step))
            step = end
        else:
            whole = (total_steps - step) // steps_per_epoch
            segments.append((epoch, epoch + whole, steps_per_epoch))
            step += whole * steps_per_epoch
    return segments
