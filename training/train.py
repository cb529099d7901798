"""From a `TrainingConfig` to a trained, evaluated run directory.

`train(config, run_dir)` is the whole pipeline: validate, read data, learn
(or reload) the vocabulary, build `tf.data` pipelines, build and compile the
model under the chosen `tf.distribute` strategy, `model.fit` with resumable
checkpoints and TensorBoard, then average, save and evaluate.
"""

import contextlib
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.models import Transformer, TransformerClassifier, get_preset
from training import budget, pipeline, recipe, selection
from training.callbacks import LearningRateLogger, WallClockTimer
from training.data import load_task_data
from training.distribute import build_strategy
from training.losses import (
    MaskedAccuracy,
    MaskedPerplexity,
    MaskedSparseCategoricalCrossentropy,
)
from training.monitor import (
    AttentionImages,
    ValidationBleu,
    attention_example,
    write_hparams,
)
from training.resume import ResumableCheckpoint
from training.run_dir import RunDirLock, prepare_run_dir
from training.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary


def _is_chief():
    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
    task = tf_config.get("task", {})
    return task.get("type", "worker") == "chief" or (
        task.get("type", "worker") == "worker" and int(task.get("index", 0)) == 0
    )


def _tokenizer(config, run_dir, texts):
    vocab_dir = os.path.join(run_dir, "vocab")
    if os.path.isfile(os.path.join(vocab_dir, "vocab.txt")):
        return WordPieceTokenizer.load(vocab_dir)
    vocabulary = learn_wordpiece_vocabulary(
        texts, config.vocabulary_size, lower_case=config.lower_case
    )
    tokenizer = WordPieceTokenizer(vocabulary, lower_case=config.lower_case)
    if _is_chief():
        tokenizer.save(vocab_dir)
    return tokenizer


def _model_config(config, **fixed):
    preset = get_preset(config.model_preset).replace(**config.model_overrides)
    return preset.replace(max_sequence_length=config.max_sequence_length, **fixed)


def _datasets(config, data, tokenizer, num_replicas):
    """(endless train stream, steps per epoch, validation dataset)."""
    seed = config.seed
    if config.task == "translation":
        static = {}
        if config.jit_compile:
            # XLA compiles once per shape: a few coarse buckets, each batch
            # padded to its bucket's length (the training stream also drops
            # incomplete batches, so each bucket has one shape).
            static = dict(
                pad_to_bucket_boundary=True,
                boundaries=pipeline.bucket_boundaries(
                    config.max_sequence_length, min_length=16, growth=1.5
                ),
            )

        def make(split, **kw):
            return pipeline.make_translation_dataset(
                split[0], split[1], tokenizer, tokenizer, config.max_sequence_length,
                config.tokens_per_batch, seed=seed, **static, **kw,
            )
    else:
        def make(split, **kw):
            return pipeline.make_classification_dataset(
                split[0], split[1], tokenizer=tokenizer,
                max_sequence_length=config.max_sequence_length,
                batch_size=config.batch_size, seed=seed, **kw,
            )
    static_batches = config.jit_compile and config.task == "translation"
    stream = make(data.train, shuffle=True, repeat=True, drop_remainder=static_batches)
    valid = make(data.valid, shuffle=False)
    if config.task != "translation":
        # The classifier is a single-input functional model: feed the bare tensor.
        key = "token_ids" if config.task == "classification" else "features"
        stream = stream.map(lambda x, y: (x[key], y))
        valid = valid.map(lambda x, y: (x[key], y))
    # The stream is a pure function of the seed (pass e is shuffled with a
    # seed from (seed, e)), so a resumed run's fresh iterator over
    # stream.skip(step) yields exactly the batches an uninterrupted run saw.
    # An "epoch" is steps_per_epoch batches of it: the size of one pass.
    # A pass of the stream ends where its first `num_examples` are seen, or,
    # dropping incomplete batches, with the batches of one shuffled pass.
    first_pass = make(data.train, shuffle=True, drop_remainder=True) if static_batches else stream
    steps, batch_tokens = _first_pass(config, first_pass, len(data.train[1]))
    steps = config.steps_per_epoch or steps
    # A known cardinality lets Keras end validation without an "input ran
    # out of data" warning.
    valid = valid.apply(tf.data.experimental.assert_cardinality(_count(valid)))
    return stream, steps, valid, batch_tokens


def _count(dataset):
    return int(dataset.reduce(0, lambda n, _: n + 1))


def _first_pass(config, stream, num_examples):
    """(batches in the first pass of `stream`, mean real tokens per batch).

    Tokens are target tokens for translation, non-padding ids for text and
    patches for series: what the learning rate's batch factor counts.
    """
    steps = seen = tokens = 0
    for inputs, labels in stream:
        steps += 1
        seen += int(labels.shape[0])
        if config.task == "translation":
            tokens += int(np.count_nonzero(labels.numpy()))
        elif config.task == "classification":
            tokens += int(np.count_nonzero(inputs.numpy()))
        else:
            rows, length = inputs.shape[:2]
            tokens += rows * -(-length // config.patch_length)
        if seen >= num_examples:
            break
    return steps, tokens / steps


def _build(config, tokenizer, data):
    """(model, loss, metrics, d_model) for the configured task."""
    if config.task == "translation":
        model_config = _model_config(config, vocabulary_size=tokenizer.vocabulary_size)
        model = Transformer.from_config_object(model_config)
        loss = MaskedSparseCategoricalCrossentropy(label_smoothing=config.label_smoothing)
        metrics = [MaskedAccuracy(), MaskedPerplexity()]
        hidden_dim = model_config.hidden_dim
        model({"encoder_token_ids": np.ones((1, 2), "int32"),
               "decoder_token_ids": np.ones((1, 2), "int32")})
    else:
        m = _model_config(config)
        num_classes = config.num_classes or len(data.label_names)
        common = dict(
            num_classes=num_classes, num_layers=m.num_layers, hidden_dim=m.hidden_dim,
            num_heads=m.num_heads, intermediate_dim=m.intermediate_dim, dropout=m.dropout,
            max_sequence_length=m.max_sequence_length, positions=m.positions,
            normalize_first=m.normalize_first,
        )
        if config.task == "classification":
            model = TransformerClassifier(vocabulary_size=tokenizer.vocabulary_size, **common)
        else:
            model = TransformerClassifier(
                num_features=data.train[0].shape[-1], patch_length=config.patch_length, **common
            )
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        hidden_dim = m.hidden_dim
    return model, loss, metrics, hidden_dim


def train(config, run_dir, overwrite=False, verbose=2, started_at=None):
    """Train, evaluate and save; returns the metrics written to metrics.json.

    `started_at` (a `time.time()` value) is when the command started; a
    time budget counts from it (default: now).
    """
    watch = budget.Stopwatch(started_at)
    config.validate()
    strategy = build_strategy(config.strategy)  # fails early if it cannot be built
    # One process per run directory (multi-worker workers share it; the
    # chief holds the lock).
    with RunDirLock(run_dir) if _is_chief() else contextlib.nullcontext():
        resumed = prepare_run_dir(run_dir, config, overwrite)
        keras.utils.set_random_seed(config.seed)
        if config.deterministic:
            tf.config.experimental.enable_op_determinism()
        keras.config.set_dtype_policy(config.precision)
        try:
            return _train(config, os.fspath(run_dir), strategy, resumed, verbose, watch)
        finally:
            keras.config.set_dtype_policy("float32")


def _train(config, run_dir, strategy, resumed, verbose, watch):
    with watch.phase("data"):
        data = load_task_data(config, run_dir)
    tokenizer = None
    with watch.phase("vocabulary"):
        if config.task == "translation":
            tokenizer = _tokenizer(config, run_dir, list(data.train[0]) + list(data.train[1]))
        elif config.task == "classification":
            tokenizer = _tokenizer(config, run_dir, list(data.train[0]))
    if data.label_names is not None:
        with open(os.path.join(run_dir, "labels.json"), "w", encoding="utf-8") as f:
            json.dump(data.label_names, f)
    with watch.phase("data"):
        train_stream, steps_per_epoch, valid, batch_tokens = _datasets(
            config, data, tokenizer, strategy.num_replicas_in_sync
        )
    plan_path = os.path.join(run_dir, "plan.json")
    plan = budget.read_plan(plan_path)
    max_steps = config.epochs * steps_per_epoch
    with strategy.scope():
        model, loss, train_metrics, hidden_dim = _build(config, tokenizer, data)
        if plan is None:
            plan = recipe.resolve(config, hidden_dim, batch_tokens, max_steps)
            plan["planned"] = config.time_budget_minutes is None
        schedule = recipe.build_schedule(config, hidden_dim, plan)
        optimizer = recipe.build_optimizer(schedule, plan["weight_decay"])
        model.compile(optimizer=optimizer, loss=loss, metrics=train_metrics,
                      jit_compile=config.jit_compile)

    logs_dir = os.path.join(run_dir, "logs")
    checkpoint = ResumableCheckpoint(
        os.path.join(run_dir, "checkpoints", "resume"), config.checkpoint_every_steps,
        is_chief=_is_chief(),
    )
    step = checkpoint.restore(model)
    if resumed and verbose:
        print(f"Resuming {run_dir} from step {step}.", flush=True)
    # One greedy translator for validation BLEU and model selection: its
    # decoding loop is traced once (the plan times that trace).
    greedy = _translator(config, model, tokenizer, 1) if config.task == "translation" else None
    validation_score, monitor, mode = _validation_score(config, greedy, data, valid)
    callbacks = [checkpoint]
    if config.task == "translation":
        if config.eval_sentences:
            n = config.eval_sentences
            callbacks.append(ValidationBleu(
                greedy, data.valid[0][:n], data.valid[1][:n], config.lower_case,
            ))
        callbacks.append(AttentionImages(
            os.path.join(logs_dir, "attention"),
            *attention_example(tokenizer, data.valid[0][0], data.valid[1][0],
                               config.max_sequence_length),
            tokenizer.vocabulary,
        ))
    callbacks += [
        selection.EpochScores(
            run_dir, monitor, mode, config.keep_epoch_checkpoints,
            config.early_stopping_patience, is_chief=_is_chief(),
        ),
        LearningRateLogger(),
        WallClockTimer(),
        keras.callbacks.TensorBoard(logs_dir),
    ]
    deadline = None
    if config.time_budget_minutes is not None and not resumed:
        deadline = budget.Deadline(watch.started_at + 60 * config.time_budget_minutes)
        callbacks.append(deadline)
    if _is_chief():
        write_hparams(logs_dir, config)

    with watch.phase("train"):
        if not plan["planned"]:
            step = _calibrate_and_plan(
                config, model, schedule, train_stream, checkpoint, step,
                steps_per_epoch, valid, data, validation_score, watch, plan, max_steps,
            )
            plan["planned"] = True
            if deadline is not None:  # the final evaluation keeps its time
                deadline.deadline -= plan["seconds_reserved_for_final"]
        if _is_chief():
            budget.write_plan(plan_path, plan)
        history = {}
        for initial_epoch, epochs, steps in _segments(step, plan["total_steps"], steps_per_epoch):
            if selection.plateaued(selection.read_scores(run_dir), config.early_stopping_patience):
                break
            if deadline is not None and deadline.hit:
                break
            h = model.fit(
                train_stream.skip(checkpoint.step), validation_data=valid,
                initial_epoch=initial_epoch, epochs=epochs, steps_per_epoch=steps,
                callbacks=callbacks, verbose=verbose, shuffle=False,
            )
            for key, values in h.history.items():
                history.setdefault(key, []).extend(values)
    with watch.phase("eval"):
        k = config.average_last if config.average_last > 1 else config.keep_epoch_checkpoints
        choice = config.selection
        if choice == "auto" and config.average_last > 1:
            choice = "average_last"
        chosen = selection.select(model, run_dir, k, validation_score, choice)
        metrics = _evaluate(config, model, tokenizer, data, valid,
                            beam=plan.get("test_beam", True), greedy=greedy)
    metrics.update({
        "steps": int(checkpoint.step),
        "steps_per_epoch": steps_per_epoch,
        "epochs": config.epochs,
        "plan": plan,
        "selection": chosen,
        "stopped_by_deadline": bool(deadline is not None and deadline.hit),
        "history": {k: [float(v) for v in vals] for k, vals in history.items()},
    })
    if _is_chief():
        model.save(os.path.join(run_dir, "model.keras"))
        metrics.update(watch.report())
        with open(os.path.join(run_dir, "metrics.json"), "w", encoding="utf-8") as f:
            json.dump(metrics, f, indent=2, ensure_ascii=False)
    return metrics


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


def _validation_score(config, greedy, data, valid):
    """(score(model) -> float, higher is better; epoch-log monitor; mode).

    `greedy` is the model's greedy `Translator` (translation only).
    """
    if config.task == "translation" and config.eval_sentences:
        from training.evaluation import corpus_bleu

        n = config.eval_sentences

        def bleu(model):
            hypotheses = greedy(data.valid[0][:n])
            return corpus_bleu(hypotheses, data.valid[1][:n], config.lower_case).score

        return bleu, "val_bleu", "max"
    if config.task == "translation":
        return (lambda m: -m.evaluate(valid, verbose=0, return_dict=True)["loss"],
                "val_loss", "min")
    return (lambda m: m.evaluate(valid, verbose=0, return_dict=True)["accuracy"],
            "val_accuracy", "max")


def _calibrate_and_plan(config, model, schedule, train_stream, checkpoint, step,
                        steps_per_epoch, valid, data, validation_score, watch, plan,
                        max_steps):
    """Times a few updates and one validation, then fixes the plan in place.

    Returns the global step after the timed updates.
    """
    timer = budget.StepTimer()
    calibration = min(budget.CALIBRATION_STEPS, max(3, max_steps // 4), steps_per_epoch)
    model.fit(train_stream.skip(step), epochs=1, steps_per_epoch=calibration,
              callbacks=[checkpoint, timer], verbose=0, shuffle=False)
    step = checkpoint.step
    # Steps that saved a checkpoint are slow too: their cost is planned as
    # a save every `checkpoint_every_steps` updates, and one per epoch.
    seconds_save = float(np.mean(checkpoint.save_seconds)) if checkpoint.save_seconds else 0.0
    seconds_per_step = timer.seconds_per_step() + seconds_save / config.checkpoint_every_steps
    # Shapes not met yet still compile later (XLA: one per bucket).
    compiled, seconds_per_compile = timer.compiles()
    shapes = len(pipeline.bucket_boundaries(config.max_sequence_length, 16, 1.5)) - 1
    seconds_compiling = max(0, shapes - compiled) * seconds_per_compile * config.jit_compile
    model.evaluate(valid, verbose=0)  # traces (compiles) the test step
    started = time.time()
    model.evaluate(valid, verbose=0)
    seconds_loss = time.time() - started
    seconds_score = test_greedy = trace = 0.0
    beam = config.task == "translation" and config.beam_size > 1
    seconds_final = 5.0 + 3 * seconds_loss  # selection by loss, test, saving
    if config.task == "translation" and config.eval_sentences:
        started = time.time()
        validation_score(model)  # the first call traces the decoding loop
        first = time.time() - started
        started = time.time()
        validation_score(model)
        seconds_score = time.time() - started
        trace = max(0.0, first - seconds_score)
        per_sentence = seconds_score / min(config.eval_sentences, len(data.valid[0]))
        test_greedy = per_sentence * len(data.test[0])
        # Beam search costs about 2.5x greedy here (benchmarks/bench_decoding.py)
        # and traces its own loop.
        seconds_final = (
            5.0 + 3 * seconds_score + test_greedy + (2.5 * test_greedy + 2 * trace) * beam
        )
    seconds_final += seconds_compiling
    budget_seconds = 60 * config.time_budget_minutes
    if beam and 2.5 * test_greedy + 2 * trace > budget.BEAM_SHARE * budget_seconds:
        # A user who gives a run ten minutes wants the model trained, not
        # three of them spent on a beam-search score: greedy only.
        seconds_final -= 2.5 * test_greedy + 2 * trace
        plan["test_beam"] = False
    seconds_left = budget_seconds - watch.elapsed()
    total = budget.plan_total_steps(
        seconds_left, seconds_per_step, steps_per_epoch, step,
        seconds_loss + seconds_score + 2 * seconds_save, seconds_final, max_steps,
    )
    if config.schedule == "auto":
        plan["warmup_steps"] = min(config.warmup_steps or recipe.warmup_steps(total), total - 1)
        schedule.set_plan(plan["warmup_steps"], total)
    plan.update({
        "total_steps": int(total),
        "seconds_per_step": round(seconds_per_step, 4),
        "seconds_compiling_later": round(seconds_compiling, 1),
        "seconds_per_validation": round(seconds_loss + seconds_score + 2 * seconds_save, 2),
        "seconds_reserved_for_final": round(seconds_final, 1),
        "planned_at_second": round(watch.elapsed(), 1),
    })
    plan.setdefault("test_beam", beam)
    return step


def _translator(config, model, tokenizer, beam_size):
    from training.evaluation import Translator

    return Translator(model, tokenizer, config.max_sequence_length,
                      beam_size=beam_size, length_penalty=config.length_penalty)


def _evaluate(config, model, tokenizer, data, valid, beam=True, greedy=None):
    results = model.evaluate(valid, verbose=0, return_dict=True)
    metrics = {f"valid_{k}": float(v) for k, v in results.items()}
    if config.task != "translation":
        test = pipeline.make_classification_dataset(
            data.test[0], data.test[1], tokenizer=tokenizer,
            max_sequence_length=config.max_sequence_length, batch_size=config.batch_size,
            shuffle=False,
        )
        key = "token_ids" if config.task == "classification" else "features"
        test = test.map(lambda x, y: (x[key], y))
        test = test.apply(tf.data.experimental.assert_cardinality(_count(test)))
        test_results = model.evaluate(test, verbose=0, return_dict=True)
        metrics.update({f"test_{k}": float(v) for k, v in test_results.items()})
        return metrics
    from training.evaluation import bleu_scores

    sources, references = data.test
    greedy = greedy or _translator(config, model, tokenizer, beam_size=1)
    decoded = {"greedy": greedy(sources)}
    if config.beam_size > 1 and beam:
        decoded["beam"] = _translator(config, model, tokenizer, config.beam_size)(sources)
    for name, hypotheses in decoded.items():
        # Headline: cased sacreBLEU of detokenized text; beside it the
        # lowercased Moses-tokenized BLEU that Multi30k papers quote.
        scores = bleu_scores(hypotheses, references, language=config.target_language)
        metrics[f"test_bleu_{name}"] = scores["bleu"]
        metrics[f"test_bleu_{name}_lowercase_tokenized"] = scores["bleu_lowercase_tokenized"]
    greedy = decoded["greedy"]
    metrics["examples"] = [
        {"source": s, "reference": r, "translation": t}
        for s, r, t in zip(sources[: config.num_examples], references, greedy, strict=False)
    ]
    return metrics
