"""From a `TrainingConfig` to a trained, evaluated run directory.

`train(config, run_dir)` is the whole pipeline: validate, read data, learn
(or reload) the vocabulary, build `tf.data` pipelines, build and compile the
model under the chosen `tf.distribute` strategy, `model.fit` with resumable
checkpoints and TensorBoard, then average, save and evaluate.  What differs
between kinds of problem (data, vocabulary, model, loss, selection score,
callbacks, test evaluation) is asked of the task, `get_task(config.task)`
(`training/tasks/`); nothing here branches on its name.
"""

import contextlib
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import config as tf_config

from training.distribute import build_strategy
from training.monitor.callbacks import LearningRateLogger, StepScalars, WallClockTimer
from training.monitor.progress import RunProgress
from training.monitor.tensorboard import write_final_metrics, write_hparams
from training.recipe import adaptive, budget
from training.runs import selection
from training.runs.resume import ResumableCheckpoint
from training.runs.run_dir import RunDirLock, prepare_run_dir
from training.tasks import get_task
from training.tasks.common import preset_config, with_cardinality


def _is_chief():
    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
    task = tf_config.get("task", {})
    return task.get("type", "worker") == "chief" or (
        task.get("type", "worker") == "worker" and int(task.get("index", 0)) == 0
    )


def _datasets(config, task, data, num_replicas):
    """(endless train stream, steps per epoch, validation dataset, batch tokens)."""
    stream = task.make_dataset(config, data.train, shuffle=True, repeat=True, training=True)
    valid = task.make_dataset(config, data.valid, shuffle=False)
    # The stream is a pure function of the seed (pass e is shuffled with a
    # seed from (seed, e)), so a resumed run's fresh iterator over
    # stream.skip(step) yields exactly the batches an uninterrupted run saw.
    # An "epoch" is steps_per_epoch batches of it: the size of one pass.
    # A pass of the stream ends where its first `num_examples` are seen, or,
    # where the task drops incomplete training batches (static shapes for
    # XLA), with the batches of one shuffled pass.
    first_pass = task.make_dataset(config, data.train, shuffle=True, training=True)
    steps, batch_tokens = _first_pass(config, task, first_pass, len(data.train[1]))
    steps = config.steps_per_epoch or steps
    # A known cardinality lets Keras end validation without an "input ran
    # out of data" warning.
    valid = with_cardinality(valid)
    return stream, steps, valid, batch_tokens


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


def _build(config, task, data):
    """(model, loss, metrics, d_model) for the configured task."""
    model = task.build_model(config, data)
    loss, metrics = task.loss_and_metrics(config)
    return model, loss, metrics, preset_config(config).hidden_dim


def train(config, run_dir, overwrite=False, verbose="auto", started_at=None):
    """Train, evaluate and save; returns the metrics written to metrics.json.

    `started_at` (a `time.time()` value) is when the command started; a
    time budget counts from it (default: now).  `verbose="auto"` prints
    `training.monitor.progress.RunProgress`: a bar redrawn in place in a terminal,
    one line per epoch otherwise, with the step time and the run's time
    left; 0, 1 or 2 are Keras' own `fit` verbosity.
    """
    watch = budget.Stopwatch(started_at)
    config.validate()  # the task's own checks too (Task.check_config)
    strategy = build_strategy(config.strategy)  # fails early if it cannot be built
    # One process per run directory (multi-worker workers share it; the
    # chief holds the lock).
    with RunDirLock(run_dir) if _is_chief() else contextlib.nullcontext():
        resumed = prepare_run_dir(run_dir, config, overwrite)
        keras.utils.set_random_seed(config.seed)
        # Op determinism and the dtype policy are process-wide: set them for
        # this run and give the caller's back afterwards (a deterministic run
        # left on would, among others, make Keras drop jit_compile silently
        # in every later run of the process).
        determinism_was = tf_config.is_op_determinism_enabled()
        if config.deterministic:
            tf.config.experimental.enable_op_determinism()
        keras.config.set_dtype_policy(config.precision)
        try:
            return _train(config, os.fspath(run_dir), strategy, resumed, verbose, watch)
        finally:
            keras.config.set_dtype_policy("float32")
            if not determinism_was:
                # No public API turns it off; this is what enable() undoes.
                tf_config.disable_op_determinism()


def _train(config, run_dir, strategy, resumed, verbose, watch):
    task = get_task(config.task)
    with watch.phase("data"):
        data = task.load_data(config, run_dir)
    # Sizes the config leaves null come from the data (`Task.data_fields`);
    # the same data give the same values on resume.
    config = task.resolve_config(config, data)
    with watch.phase("vocabulary"):
        # Learns the vocabulary and class names, or reloads them on resume.
        task.prepare(config, data, run_dir, write=_is_chief())
    with watch.phase("data"):
        train_stream, steps_per_epoch, valid, batch_tokens = _datasets(
            config, task, data, strategy.num_replicas_in_sync
        )
    plan_path = os.path.join(run_dir, "plan.json")
    plan = budget.read_plan(plan_path)
    max_steps = config.epochs * steps_per_epoch
    # A budgeted run may first try the preset's model at its short-run depth
    # (`short_run_num_layers`); a resumed run builds the depth its plan records.
    probe = None  # the preset's depth, while a shallower one is being tried
    if plan is not None and "num_layers" in plan:
        config = _with_num_layers(config, plan["num_layers"])
    elif plan is None and _short_depth_applies(config):
        if config.time_budget_minutes is not None:
            probe = preset_config(config).num_layers
        config = _with_num_layers(config, config.short_run_num_layers)

    logs_dir = os.path.join(run_dir, "logs")

    def setup(config, plan):
        """Builds, compiles and restores the model; what depends on it."""
        # Seeded here, so that the model a run ends up building starts from
        # the same weights whether or not a shallower one was tried first.
        keras.utils.set_random_seed(config.seed)
        with strategy.scope():
            model, loss, metrics, hidden_dim = _build(config, task, data)
            if plan is None or "schedule" not in plan:  # none, or only its depth
                plan = adaptive.resolve(config, task, hidden_dim, batch_tokens, max_steps)
                plan["planned"] = config.time_budget_minutes is None
            schedule = adaptive.build_schedule(config, hidden_dim, plan)
            optimizer = adaptive.build_optimizer(schedule, plan["weight_decay"])
            model.compile(optimizer=optimizer, loss=loss, metrics=metrics,
                          jit_compile=config.jit_compile)
        checkpoint = ResumableCheckpoint(
            os.path.join(run_dir, "checkpoints", "resume"), config.checkpoint_every_steps,
            is_chief=_is_chief(),
        )
        step = checkpoint.restore(model)
        validation_score, monitor, mode = task.validation_score(config, model, data, valid)
        callbacks = [checkpoint, *task.callbacks(config, model, data, logs_dir)]
        callbacks += [
            selection.EpochScores(
                run_dir, monitor, mode, config.keep_epoch_checkpoints,
                config.early_stopping_patience, is_chief=_is_chief(),
            ),
            LearningRateLogger(),
            WallClockTimer(),
            StepScalars(os.path.join(logs_dir, "train"), config.log_every_steps),
            keras.callbacks.TensorBoard(logs_dir),
        ]
        return model, plan, schedule, checkpoint, step, validation_score, callbacks

    model, plan, schedule, checkpoint, step, validation_score, callbacks = setup(config, plan)
    if resumed and verbose:
        print(f"Resuming {run_dir} from step {step}.", flush=True)
    # verbose="auto": our own line per epoch (a bar in a terminal) with the
    # run's time left; an integer: Keras' own progress output.
    progress = None
    if verbose == "auto":
        progress = RunProgress(plan["total_steps"], steps_per_epoch, config.epochs,
                               started_at=watch.started_at)
        verbose = 0
    deadline = None
    if config.time_budget_minutes is not None and not resumed:
        deadline = budget.Deadline(watch.started_at + 60 * config.time_budget_minutes)
    extra_callbacks = [c for c in (progress, deadline) if c is not None]

    with watch.phase("train"):
        if not plan["planned"]:
            step = _calibrate_and_plan(
                config, task, model, schedule, train_stream, checkpoint, step,
                steps_per_epoch, valid, data, validation_score, watch, plan, max_steps,
            )
            if probe is not None and _preset_depth_is_long(
                config, model, plan, probe, watch, steps_per_epoch, max_steps
            ):
                # Even the preset's depth would make enough passes for depth
                # to pay: that depth, planned afresh.
                estimate = plan["preset_depth_passes"]
                config = _with_num_layers(config, probe)
                checkpoint.discard()
                if _is_chief():  # a kill from here on resumes at this depth
                    budget.write_plan(plan_path, {"num_layers": probe, "planned": False})
                model, plan, schedule, checkpoint, step, validation_score, callbacks = setup(
                    config, None
                )
                step = _calibrate_and_plan(
                    config, task, model, schedule, train_stream, checkpoint, step,
                    steps_per_epoch, valid, data, validation_score, watch, plan, max_steps,
                )
                plan["preset_depth_passes"] = estimate
            plan["planned"] = True
            if deadline is not None:  # the final evaluation keeps its time
                deadline.keep(plan["seconds_reserved_for_final"], plan["seconds_per_validation"])
        plan["num_layers"] = int(preset_config(config).num_layers)
        if _is_chief():
            write_hparams(logs_dir, config)
        callbacks = callbacks + extra_callbacks
        if "dropout_off" not in plan:
            plan["dropout_off"] = _short_run(config, plan["total_steps"], steps_per_epoch)
        # A revision may make a budgeted run short after it began with
        # dropout: from then on it trains without (`_DropoutOffAt`), and a
        # resumed run switches at the same update.
        dropout_off_at = plan.get("dropout_off_from_step", 0) if plan["dropout_off"] else None
        if dropout_off_at is not None and checkpoint.step >= dropout_off_at:
            _disable_dropout(model)
        elif dropout_off_at is not None:
            callbacks = callbacks + [_DropoutOffAt(checkpoint, dropout_off_at)]
        if _is_chief():
            budget.write_plan(plan_path, plan)
        if progress is not None:
            progress.set_plan(plan["total_steps"])
        history = {}
        # Under a budget the plan is revised after each epoch, from its pace
        # (the calibration's first updates run slow), by a callback: the
        # rest of the run is one `fit`, so one iterator of the stream.  A
        # `fit` per epoch re-skipped the stream from its start each time,
        # and tf.data makes every skipped batch: 35 s at 8,000 updates, and
        # about 6 of a 60-minute run's minutes in all.
        timer = budget.StepTimer() if deadline is not None else None
        if timer is not None:
            callbacks = callbacks + [
                timer,
                _StopAtPlanEnd(checkpoint, plan),
                _AfterEpoch(lambda: _revise_plan(
                    config, task, model, data, validation_score, plan, plan_path,
                    schedule, timer, deadline, checkpoint, steps_per_epoch, max_steps,
                    progress,
                )),
            ]
        while segments := _segments(checkpoint.step, plan["total_steps"], steps_per_epoch):
            initial_epoch, epochs, steps = segments[0]
            if timer is not None and steps == steps_per_epoch:
                # The whole rest of the run, to the largest plan a revision
                # can make; `_StopAtPlanEnd` ends it where the plan does.  (A
                # shorter segment, the epoch the calibration began, is one
                # epoch already.)
                epochs = -(-max_steps // steps_per_epoch)
            if selection.plateaued(selection.read_scores(run_dir), config.early_stopping_patience):
                break
            if deadline is not None and deadline.passed():
                # Not one more `fit` once the time is up: it would start,
                # make one update, stop, and still validate (a 30-minute
                # run ended 49 s late that way).
                break
            h = model.fit(
                train_stream.skip(checkpoint.step),
                validation_data=valid if task.fit_validates(config) else None,
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
    with watch.phase("eval"):
        k = config.average_last if config.average_last > 1 else config.keep_epoch_checkpoints
        choice = config.selection
        if choice == "auto" and config.average_last > 1:
            choice = "average_last"
        timed = budget.Stopwatch()
        with timed.phase("selection"):
            chosen = selection.select(model, run_dir, k, validation_score, choice)
        # Under a budget the task also learns when metrics.json is due, so
        # that an optional part of its test (a beam search) that would
        # overrun is left out; plan.json itself stays free of wall clocks.
        due = {} if deadline is None else {"end_time": deadline.end - budget.SECONDS_TO_SAVE}
        metrics = task.evaluate(config, model, data, valid, {**plan, **due})
        parts = {name: round(seconds, 2)
                 for name, seconds in {**timed.phases, **metrics.pop("eval_parts", {})}.items()}
    metrics.update({
        "steps": int(checkpoint.step),
        "steps_per_epoch": steps_per_epoch,
        "epochs": config.epochs,
        "from_data": {n: getattr(config, n) for n in task.data_fields},
        "plan": plan,
        "selection": chosen,
        "eval_parts_seconds": parts,
        "stopped_by_deadline": bool(deadline is not None and deadline.hit),
        "history": {k: [float(v) for v in vals] for k, vals in history.items()},
    })
    if _is_chief():
        selection.save_final_model(model, os.path.join(run_dir, "model.keras"))
        metrics.update(watch.report())
        with open(os.path.join(run_dir, "metrics.json"), "w", encoding="utf-8") as f:
            json.dump(metrics, f, indent=2, ensure_ascii=False)
        write_final_metrics(logs_dir, config, metrics, int(checkpoint.step))
    return metrics


def _disable_dropout(model):
    """Sets every dropout rate of `model` to 0; its step function retraces.

    Returns whether any rate changed.  A step function already made is
    replaced: `fit` looks it up at every update, so a call from a callback
    takes effect at the next update of the `fit` running.

    The weights and the optimizer state stay; the saved config keeps the
    built rates (they only act in training).
    """
    changed = False
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.Dropout) and layer.rate > 0:
            layer.rate = 0.0
            changed = True
    if changed and model.train_function is not None:
        model.make_train_function(force=True)  # traced with the old rates
    return changed


class _DropoutOffAt(keras.callbacks.Callback):
    """Turns dropout off before the update after global step `step`.

    A resumed run whose plan turned dropout off at `step` (a revision found
    the run short) trains with dropout up to that update and without it
    from there, as the run it resumes did.  `fit` looks its step function
    up at every update, so the retraced one takes over at once.
    """

    def __init__(self, checkpoint, step):
        super().__init__()
        self.checkpoint = checkpoint
        self.step = int(step)
        self.done = False

    def on_train_batch_begin(self, batch, logs=None):
        if not self.done and self.checkpoint.step >= self.step:
            self.done = True
            _disable_dropout(self.model)


class _StopAtPlanEnd(keras.callbacks.Callback):
    """Ends `fit` at the update that completes the plan (`plan["total_steps"]`).

    The plan is read at every update, so a revision made after an epoch
    moves the end of the `fit` already running.  Keras still validates the
    epoch it stops in, as it does at an epoch's natural end.
    """

    def __init__(self, checkpoint, plan):
        super().__init__()
        self.checkpoint = checkpoint  # ordered before this callback: its step is current
        self.plan = plan

    def on_train_batch_end(self, batch, logs=None):
        if self.checkpoint.step >= self.plan["total_steps"]:
            self.model.stop_training = True


class _AfterEpoch(keras.callbacks.Callback):
    """Calls `revise()` at each epoch's end, last of the callbacks; stops
    `fit` when it returns True.  Nothing is revised in an epoch that already
    stops `fit` (the plan's end, the deadline, early stopping)."""

    def __init__(self, revise):
        super().__init__()
        self.revise = revise

    def on_epoch_end(self, epoch, logs=None):
        if not self.model.stop_training and self.revise():
            self.model.stop_training = True


def _revise_plan(config, task, model, data, validation_score, plan, plan_path, schedule,
                 timer, deadline, checkpoint, steps_per_epoch, max_steps, progress):
    """After an epoch of a budgeted run: re-time the final evaluation, revise
    the plan from the epoch's pace and record it; True if the time is up."""
    # The final evaluation's cost, re-estimated with the model as it is now
    # (an untrained one decodes to the length limit).
    _, final = task.time_evaluation(
        config, model, data, validation_score, plan["seconds_per_validation"], plan
    )
    deadline.keep(final, plan["seconds_per_validation"])
    plan["seconds_reserved_for_final"] = round(final, 1)
    if _replan(config, plan, schedule, timer, deadline, checkpoint,
               steps_per_epoch, max_steps) and progress is not None:
        progress.set_plan(plan["total_steps"])
    if not plan["dropout_off"] and _short_run(config, plan["total_steps"], steps_per_epoch):
        # Planned from its first updates, which run fast, the run looked
        # long enough for dropout; at its measured pace it is short.  A
        # Multi30k de->en ten-minute run planned 3.3 passes, made 2.7 with
        # dropout, and its validation loss after two passes was 3.35
        # against 3.22-3.26 for runs without.  The step function retraces
        # (about 25 s of such a run's first epoch without dropout).
        plan["dropout_off"] = True
        plan["dropout_off_from_step"] = int(checkpoint.step)
        _disable_dropout(model)
    if _is_chief():
        budget.write_plan(plan_path, plan)
    # Not one more epoch once the time is up: it would start, make one
    # update, stop, and still validate (a 30-minute run ended 49 s late that way).
    return deadline.passed()


def _replan(config, plan, schedule, timer, deadline, checkpoint, steps_per_epoch, max_steps):
    """Revises the budgeted plan from the last epoch's pace; True if it changed.

    The updates left are what fits before the final evaluation's time (the
    plan counts the last validation itself) at the measured step time; the
    schedule still ends annealed at the new last update.
    """
    if config.schedule != "auto" or len(timer.durations()) < 6:
        return False
    step = int(checkpoint.step)
    seconds_per_step = _seconds_per_update(config, timer, _seconds_per_save(checkpoint))
    total = budget.plan_total_steps(
        deadline.seconds_to_final(), seconds_per_step, steps_per_epoch, step,
        plan["seconds_per_validation"], 0.0, max_steps,
    )
    # plan_total_steps gives at least 2 more: no time left is not a plan.
    if total <= max(step + 2, plan["warmup_steps"] + 1) or total == plan["total_steps"]:
        return False
    plan["total_steps"] = int(total)
    plan["seconds_per_step"] = round(seconds_per_step, 4)
    plan["revisions"] = plan.get("revisions", 0) + 1
    schedule.set_plan(plan["warmup_steps"], plan["total_steps"])
    return True


def _seconds_per_save(checkpoint):
    """Mean seconds of the checkpoint saves so far (0 before the first)."""
    saves = checkpoint.save_seconds
    return float(np.mean(saves)) if saves else 0.0


def _seconds_per_update(config, timer, seconds_save):
    """An update's planned cost: the timed pace plus a save every `checkpoint_every_steps`."""
    return timer.seconds_per_step() + seconds_save / config.checkpoint_every_steps


def _with_num_layers(config, num_layers):
    """`config` whose model has `num_layers` layers (each side)."""
    return config.replace(model_overrides={**config.model_overrides, "num_layers": int(num_layers)})


def _short_depth_applies(config):
    """Whether a fresh run builds `short_run_num_layers` layers first.

    A budgeted run tries them and may go back to the preset's depth once
    planned; a run of `epochs` passes knows at once whether it is short.
    """
    if config.short_run_num_layers is None:
        return False
    if config.short_run_num_layers == preset_config(config).num_layers:
        return False
    if config.time_budget_minutes is not None:
        return True
    return config.epochs < config.dropout_min_epochs


def _depth_cost_ratio(model, num_layers):
    """An update's estimated cost at `num_layers` over its cost for `model`.

    Parameters stand for multiply-adds per token: those of the encoder and
    decoder blocks scale with depth, the rest (embeddings, the output
    projection) do not.  The Multi30k model: 7.58M parameters at 3+3
    layers, 5.73M at 2+2, so 1.32x.
    """
    blocks = [*getattr(model, "encoder_blocks", ()), *getattr(model, "decoder_blocks", ())]
    in_blocks = sum(int(np.prod(w.shape)) for block in blocks for w in block.weights)
    rest = model.count_params() - in_blocks
    depth = len(getattr(model, "encoder_blocks", ())) or len(blocks)
    if not depth:
        return 1.0
    return (rest + in_blocks * num_layers / depth) / (rest + in_blocks)


def _preset_depth_is_long(config, model, plan, num_layers, watch, steps_per_epoch,
                          max_steps):
    """Whether the preset's `num_layers` would make `dropout_min_epochs` passes.

    `model` is the shallower model, just planned; the deeper one's plan is
    estimated from it, its times scaled by `_depth_cost_ratio`.  This is the
    rule a run of `epochs` passes follows: the preset's depth in a run that
    is not short.  Deciding on the shallower model's passes instead built
    the deeper one for runs it made short: Multi30k de->en in 10 minutes on
    a 2-core host planned 2+2 layers for 3.0 passes, so built 3+3, which
    then made 2.2-2.4 passes without dropout.  Recorded in plan.json
    ("preset_depth_passes").
    """
    if plan["dropout_off"]:  # short already at the shallower depth
        return False
    ratio = _depth_cost_ratio(model, num_layers)
    total = budget.plan_total_steps(
        60 * config.time_budget_minutes - watch.elapsed(), plan["seconds_per_step"] * ratio,
        steps_per_epoch, 0, plan["seconds_per_validation"] * ratio,
        plan["seconds_reserved_for_final"] * ratio, max_steps,
    )
    plan["preset_depth_passes"] = round(total / steps_per_epoch, 2)
    return not _short_run(config, total, steps_per_epoch)


def _short_run(config, total_steps, steps_per_epoch):
    """True when the run is planned for fewer than `dropout_min_epochs` passes."""
    return bool(total_steps / steps_per_epoch < config.dropout_min_epochs)


def _timed_steps(model, train_stream, checkpoint, step, count):
    """`count` updates from global `step`, timed; (the new step, the `StepTimer`)."""
    timer = budget.StepTimer()
    model.fit(train_stream.skip(step), epochs=1, steps_per_epoch=count,
              callbacks=[checkpoint, timer], verbose=0, shuffle=False)
    return checkpoint.step, timer


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


def _calibrate_and_plan(config, task, model, schedule, train_stream, checkpoint, step,
                        steps_per_epoch, valid, data, validation_score, watch, plan,
                        max_steps):
    """Times a few updates and one validation, then fixes the plan in place.

    Returns the global step after the timed updates.
    """
    calibration = min(budget.CALIBRATION_STEPS, max(3, max_steps // 4), steps_per_epoch)
    step, timer = _timed_steps(model, train_stream, checkpoint, step, calibration)
    # Steps that saved a checkpoint are slow too: their cost is planned as
    # a save every `checkpoint_every_steps` updates, and one per epoch.
    seconds_save = _seconds_per_save(checkpoint)
    seconds_per_step = _seconds_per_update(config, timer, seconds_save)
    # Shapes not met yet still compile later (XLA: one per bucket).
    compiled, seconds_per_compile = timer.compiles()
    shapes = task.training_shapes(config)
    seconds_compiling = max(0, shapes - compiled) * seconds_per_compile * config.jit_compile
    model.evaluate(valid, verbose=0)  # traces (compiles) the test step
    started = time.time()
    model.evaluate(valid, verbose=0)
    seconds_loss = time.time() - started
    # Selection, the test evaluation and saving, as the task estimates them
    # (it may drop a costly part of the test from the plan: `plan` records it).
    seconds_score, seconds_final = task.time_evaluation(
        config, model, data, validation_score, seconds_loss, plan
    )
    seconds_final += seconds_compiling
    # An epoch ends with Keras' pass over the validation split (unless the
    # task logs `val_*` itself: `fit_validates`), the task's score beyond
    # it, and the epoch's checkpoint saves.
    seconds_validation = seconds_score + 2 * seconds_save
    if task.fit_validates(config):
        seconds_validation += seconds_loss

    def plan_total():
        return budget.plan_total_steps(
            60 * config.time_budget_minutes - watch.elapsed(), seconds_per_step,
            steps_per_epoch, step, seconds_validation, seconds_final, max_steps,
        )

    total = plan_total()
    plan["dropout_off"] = _short_run(config, total, steps_per_epoch)
    retime = budget.CALIBRATION_STEPS // 2
    if plan["dropout_off"] and _disable_dropout(model) and total - step > 4 * retime:
        # Updates without dropout are faster (~15% on a CPU): time them
        # (the first one retraces the step), then plan again.
        step, timer = _timed_steps(model, train_stream, checkpoint, step, retime)
        seconds_per_step = _seconds_per_update(config, timer, seconds_save)
        total = plan_total()
    if config.schedule == "auto":
        plan["warmup_steps"] = min(config.warmup_steps or adaptive.warmup_steps(total), total - 1)
        schedule.set_plan(plan["warmup_steps"], total)
    plan.update({
        "total_steps": int(total),
        "seconds_per_step": round(seconds_per_step, 4),
        "seconds_compiling_later": round(seconds_compiling, 1),
        "seconds_per_validation": round(seconds_validation, 2),
        "seconds_reserved_for_final": round(seconds_final, 1),
        "planned_at_second": round(watch.elapsed(), 1),
    })
    return step
