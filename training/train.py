"""From a `TrainingConfig` to a trained, evaluated run directory.

`train(config, run_dir)` is the whole pipeline: validate, read data, learn
(or reload) the vocabulary, build `tf.data` pipelines, build and compile the
model under the chosen `tf.distribute` strategy, `model.fit` with resumable
checkpoints and TensorBoard, then average, save and evaluate.
"""

import json
import os
import time

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.models import Transformer, TransformerClassifier, get_preset
from training import pipeline
from training.callbacks import LearningRateLogger, WallClockTimer
from training.checkpoint_average import average_checkpoints
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
from training.run_dir import prepare_run_dir
from training.schedule import paper_optimizer
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
        def make(split, **kw):
            return pipeline.make_translation_dataset(
                split[0], split[1], tokenizer, tokenizer, config.max_sequence_length,
                config.tokens_per_batch, seed=seed, **kw,
            )
    else:
        def make(split, **kw):
            return pipeline.make_classification_dataset(
                split[0], split[1], tokenizer=tokenizer,
                max_sequence_length=config.max_sequence_length,
                batch_size=config.batch_size, seed=seed, **kw,
            )
    stream = make(data.train, shuffle=True, repeat=True)
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
    steps = config.steps_per_epoch or _batches_per_pass(stream, len(data.train[1]))
    # A known cardinality lets Keras end validation without an "input ran
    # out of data" warning.
    valid = valid.apply(tf.data.experimental.assert_cardinality(_count(valid)))
    return stream, steps, valid


def _count(dataset):
    return int(dataset.reduce(0, lambda n, _: n + 1))


def _batches_per_pass(stream, num_examples):
    """Batches in the first pass of `stream` (no batch spans two passes)."""
    seen = 0
    for steps, (_, labels) in enumerate(stream, start=1):
        seen += int(labels.shape[0])
        if seen >= num_examples:
            return steps


def _build_and_compile(config, tokenizer, data):
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
    optimizer = paper_optimizer(hidden_dim, config.warmup_steps, config.learning_rate_scale)
    model.compile(optimizer=optimizer, loss=loss, metrics=metrics, jit_compile=config.jit_compile)
    return model


def train(config, run_dir, overwrite=False, verbose=2):
    """Train, evaluate and save; returns the metrics written to metrics.json."""
    config.validate()
    strategy = build_strategy(config.strategy)  # fails early if it cannot be built
    resumed = prepare_run_dir(run_dir, config, overwrite)
    keras.utils.set_random_seed(config.seed)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.config.set_dtype_policy(config.precision)
    try:
        return _train(config, os.fspath(run_dir), strategy, resumed, verbose)
    finally:
        keras.config.set_dtype_policy("float32")


def _train(config, run_dir, strategy, resumed, verbose):
    data = load_task_data(config, run_dir)
    tokenizer = None
    if config.task == "translation":
        tokenizer = _tokenizer(config, run_dir, list(data.train[0]) + list(data.train[1]))
    elif config.task == "classification":
        tokenizer = _tokenizer(config, run_dir, list(data.train[0]))
    if data.label_names is not None:
        with open(os.path.join(run_dir, "labels.json"), "w", encoding="utf-8") as f:
            json.dump(data.label_names, f)
    train_stream, steps_per_epoch, valid = _datasets(
        config, data, tokenizer, strategy.num_replicas_in_sync
    )
    with strategy.scope():
        model = _build_and_compile(config, tokenizer, data)

    logs_dir = os.path.join(run_dir, "logs")
    checkpoint = ResumableCheckpoint(
        os.path.join(run_dir, "checkpoints", "resume"), config.checkpoint_every_steps,
        is_chief=_is_chief(),
    )
    step = checkpoint.restore(model)
    if resumed and verbose:
        print(f"Resuming {run_dir} from step {step}.", flush=True)
    callbacks = [checkpoint]
    if config.task == "translation":
        translator = _translator(config, model, tokenizer, beam_size=1)
        if config.eval_sentences:
            n = config.eval_sentences
            callbacks.append(ValidationBleu(
                translator, data.valid[0][:n], data.valid[1][:n], config.lower_case
            ))
        callbacks.append(AttentionImages(
            os.path.join(logs_dir, "attention"),
            *attention_example(tokenizer, data.valid[0][0], data.valid[1][0],
                               config.max_sequence_length),
        ))
    callbacks += [
        keras.callbacks.ModelCheckpoint(
            os.path.join(run_dir, "checkpoints", "epoch-{epoch:03d}.weights.h5"),
            save_weights_only=True,
        ),
        LearningRateLogger(),
        WallClockTimer(),
        keras.callbacks.TensorBoard(logs_dir),
    ]
    if _is_chief():
        write_hparams(logs_dir, config)

    start = time.time()
    history = {}
    epoch, offset = divmod(step, steps_per_epoch)
    # An interrupted epoch is finished first with exactly its remaining steps;
    # the data stream is skipped to the same batch it would have reached.
    segments = []
    if offset:
        segments.append((epoch, epoch + 1, steps_per_epoch - offset))
        epoch += 1
    if epoch < config.epochs:
        segments.append((epoch, config.epochs, steps_per_epoch))
    for initial_epoch, epochs, steps in segments:
        if initial_epoch >= config.epochs:
            break
        h = model.fit(
            train_stream.skip(checkpoint.step), validation_data=valid,
            initial_epoch=initial_epoch, epochs=epochs, steps_per_epoch=steps,
            callbacks=callbacks, verbose=verbose, shuffle=False,
        )
        for key, values in h.history.items():
            history.setdefault(key, []).extend(values)
    train_seconds = time.time() - start
    _prune_epoch_checkpoints(run_dir, config.keep_epoch_checkpoints)
    if config.average_last > 1:
        paths = _epoch_checkpoints(run_dir)[-config.average_last :]
        average_checkpoints(paths, model)
    metrics = _evaluate(config, model, tokenizer, data, valid)
    metrics.update({
        "train_seconds": round(train_seconds, 1),
        "steps": int(checkpoint.step),
        "steps_per_epoch": steps_per_epoch,
        "epochs": config.epochs,
        "history": {k: [float(v) for v in vals] for k, vals in history.items()},
    })
    if _is_chief():
        model.save(os.path.join(run_dir, "model.keras"))
        with open(os.path.join(run_dir, "metrics.json"), "w", encoding="utf-8") as f:
            json.dump(metrics, f, indent=2, ensure_ascii=False)
    return metrics


def _translator(config, model, tokenizer, beam_size):
    from training.evaluation import Translator

    return Translator(model, tokenizer, config.max_sequence_length,
                      beam_size=beam_size, length_penalty=config.length_penalty)


def _epoch_checkpoints(run_dir):
    folder = os.path.join(run_dir, "checkpoints")
    return sorted(
        os.path.join(folder, f) for f in os.listdir(folder)
        if f.startswith("epoch-") and f.endswith(".weights.h5")
    )


def _prune_epoch_checkpoints(run_dir, keep):
    paths = _epoch_checkpoints(run_dir)
    for path in paths[: max(0, len(paths) - keep)]:
        os.remove(path)


def _evaluate(config, model, tokenizer, data, valid):
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
    from training.evaluation import corpus_bleu

    sources, references = data.test
    greedy = _translator(config, model, tokenizer, beam_size=1)(sources)
    metrics["test_bleu_greedy"] = corpus_bleu(greedy, references, config.lower_case).score
    if config.beam_size > 1:
        beam = _translator(config, model, tokenizer, beam_size=config.beam_size)(sources)
        metrics["test_bleu_beam"] = corpus_bleu(beam, references, config.lower_case).score
    metrics["bleu_lowercased"] = bool(config.lower_case)
    metrics["examples"] = [
        {"source": s, "reference": r, "translation": t}
        for s, r, t in zip(sources[: config.num_examples], references, greedy, strict=False)
    ]
    return metrics
