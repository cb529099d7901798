"""Helpers several tasks share: the model preset, the word-piece vocabulary,
dataset sizes."""

import os

import tensorflow as tf

from keras_transformer.models import get_preset
from training.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary


def preset_config(config, **fixed):
    """The model preset with the config's overrides and `max_sequence_length`."""
    preset = get_preset(config.model_preset).replace(**config.model_overrides)
    return preset.replace(max_sequence_length=config.max_sequence_length, **fixed)


def learn_or_load_tokenizer(config, run_dir, texts, write=True):
    """The run's `vocab/` tokenizer, or one learned from `texts` (saved if `write`)."""
    vocab_dir = os.path.join(run_dir, "vocab")
    if os.path.isfile(os.path.join(vocab_dir, "vocab.txt")):
        return WordPieceTokenizer.load(vocab_dir)
    vocabulary = learn_wordpiece_vocabulary(
        texts, config.vocabulary_size, lower_case=config.lower_case,
        learn_params={"lower_thresh": 2} if len(texts) < 20000 else None,
    )
    tokenizer = WordPieceTokenizer(vocabulary, lower_case=config.lower_case)
    if write:
        tokenizer.save(vocab_dir)
    return tokenizer


def count_batches(dataset):
    """Batches in one pass of `dataset`."""
    return int(dataset.reduce(0, lambda n, _: n + 1))


def with_cardinality(dataset):
    """`dataset` with its size known, so Keras ends a pass without a warning."""
    return dataset.apply(tf.data.experimental.assert_cardinality(count_batches(dataset)))
