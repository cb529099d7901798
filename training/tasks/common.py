"""Helpers several tasks share: the model preset, the word-piece vocabulary,
dataset sizes and token-id inputs."""

import os

import numpy as np
import tensorflow as tf

from keras_transformer.models import get_preset
from keras_transformer.models.transformer_config import PAD_ID
from training.data.shards import StreamedCorpus
from training.pipeline.streaming import StreamOptions
from training.text.tokenizers import (
    CharNGramTokenizer,
    WordPieceTokenizer,
    learn_word_vocabulary,
    learn_wordpiece_vocabulary,
    load_tokenizer,
)

# Strings every export must survive (empty, blank, unseen scripts, the
# reserved tokens); the verifiers feed them beside in-vocabulary examples.
PROBES = (
    "",
    "a",
    "two words",
    "Ünïcödé, emoji 😀 and 中文 mixed",
    "   \t  ",
    "[START] [END] [PAD] [UNK]",
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
    """`dataset` with its size known, so Keras ends a pass without a warning."""
    return dataset.apply(tf.data.experimental.assert_cardinality(count_batches(dataset)))


def token_ids(tokenizer, sentences, max_sequence_length):
    """Strings -> `(N, max(S, 1))` int32 ids cut to `max_sequence_length`, 0-padded.

    As the SavedModel's tokenizer-in-the-graph does it (`training.serving.signatures`): a
    batch of empty sentences still has one (padding) column.
    """
    ragged = tokenizer.tokenize(tf.constant(list(sentences), tf.string))
    ids = ragged[:, :max_sequence_length].to_tensor(PAD_ID).numpy()
    return np.pad(ids, [(0, 0), (0, max(1 - ids.shape[1], 0))] + [(0, 0)] * (ids.ndim - 2))




def text_input(example):
    """One sentence: a `str` as given, `bytes` decoded as UTF-8."""
    if isinstance(example, bytes):
        return example.decode("utf-8", errors="replace")
    if not isinstance(example, str):
        raise ValueError(
            f"Each input must be a string; received {type(example).__name__}: {example!r}."
        )
    return example


def text_probes(tokenizer, num_examples, seed):
    """In-vocabulary sentences plus `PROBES` (hostile strings)."""

    rng = np.random.default_rng(seed)
    words = [t for t in tokenizer.vocabulary if t.isalpha() and not t.startswith("[")]
    sentences = [
        " ".join(rng.choice(words, size=rng.integers(1, 8))) for _ in range(num_examples)
    ]
    return sentences + list(PROBES)

