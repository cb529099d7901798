"""Helpers several tasks share: the model preset, the word-piece vocabulary
and dataset sizes."""

import os

import tensorflow as tf

from keras_transformer.models import get_preset
from training.data.shards import StreamedCorpus
from training.pipeline.streaming import StreamOptions
from training.text.tokenizers import (
    CharNGramTokenizer,
    WordPieceTokenizer,
    learn_word_vocabulary,
    learn_wordpiece_vocabulary,
    load_tokenizer,
)


def preset_config(config, **fixed):
    """The model preset with the config's overrides and `max_sequence_length`."""
    preset = get_preset(config.model_preset).replace(**config.model_overrides)
    return preset.replace(max_sequence_length=config.max_sequence_length, **fixed)


def learn_or_load_tokenizer(config, run_dir, texts, write=True):
    """The run's `vocab/` tokenizer, or one learned from `texts` (saved if `write`):
    word pieces, or whole words where `config.min_word_count` is set."""
    vocab_dir = os.path.join(run_dir, "vocab")
    if os.path.isfile(os.path.join(vocab_dir, "vocab.txt")):
        return load_tokenizer(vocab_dir)
    if getattr(config, "min_word_count", 0):  # whole words, the rare ones [UNK] (text classification)
        vocabulary = learn_word_vocabulary(
            texts, config.vocabulary_size, lower_case=config.lower_case,
            min_count=config.min_word_count,
        )
    else:
        vocabulary = learn_wordpiece_vocabulary(
            texts, config.vocabulary_size, lower_case=config.lower_case
        )
    tokenizer = WordPieceTokenizer(vocabulary, lower_case=config.lower_case)
    if getattr(config, "char_ngram_buckets", 0):  # each token also carries its spelling
        tokenizer = CharNGramTokenizer(tokenizer, config.char_ngram_buckets)
    if write:
        tokenizer.save(vocab_dir)
    return tokenizer


def training_rows(split):
    """The rows (tuples of one value per column) the vocabulary learns from:
    a streamed corpus's sample, or the whole in-memory split."""
    columns = split.sample if isinstance(split, StreamedCorpus) else split
    return list(zip(*columns, strict=True))


def stream_options(config, corpus):
    """The `StreamOptions` of a run's streamed training corpus."""
    every, lines = corpus.held_out
    num_workers, worker_index = corpus.workers
    return StreamOptions(seed=config.seed, encoding=config.encoding, held_out_every=every,
                         held_out_lines=lines, num_shards=num_workers,
                         shard_index=worker_index)


def count_batches(dataset):
    """Batches in one pass of `dataset`."""
    return int(dataset.reduce(0, lambda n, _: n + 1))


def with_cardinality(dataset):
    """`dataset` with its size known, so Keras ends a pass without a warning.

    Counted by a pass only where tf.data does not know it already (a
    filter, a bucketing): a pass of a series test split's cached tokens is
    a copy of them (0.24 s of ItalyPowerDemand's 330 MB).
    """
    size = int(dataset.cardinality())
    if size >= 0:
        return dataset
    return dataset.apply(tf.data.experimental.assert_cardinality(count_batches(dataset)))
