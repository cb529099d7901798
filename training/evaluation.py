"""Translation and classification evaluation: decoding, BLEU, accuracy."""

import re

import numpy as np
import sacrebleu
import tensorflow as tf

from keras_transformer.decoding import beam_search, greedy_search

# Word pieces are joined with single spaces; undo that around punctuation so
# that BLEU's own (13a) tokenisation sees what a human would have written.
_SPACE_BEFORE = re.compile(r" ([.,!?;:%)\]}])")
_SPACE_AFTER = re.compile(r"([(\[{$]) ")
_APOSTROPHE = re.compile(r" ' (s|t|re|ve|ll|d|m)\b")


def detokenize_punctuation(text):
    """'a man ' s hat .' -> "a man's hat." (English-style spacing)."""
    text = _APOSTROPHE.sub(r"'\1", text)
    text = _SPACE_BEFORE.sub(r"\1", text)
    return _SPACE_AFTER.sub(r"\1", text).strip()


class Translator:
    """Batched strings -> strings with cached greedy or beam search.

    The decoding loop is one `tf.function` with a `(None, None)` signature, so
    it is traced once whatever the batch size and source length.
    """

    def __init__(self, model, tokenizer, max_sequence_length, beam_size=1,
                 length_penalty=0.6, extra_length=50):
        self.model = model
        self.tokenizer = tokenizer
        self.max_sequence_length = int(max_sequence_length)
        self.beam_size = int(beam_size)
        self.length_penalty = float(length_penalty)
        self.extra_length = int(extra_length)
        self.decode_ids = tf.function(
            self._decode,
            input_signature=[tf.TensorSpec([None, None], tf.int32)],
        )

    def _decode(self, encoder_token_ids):
        # Section 6.1: maximum output length = input length + 50.
        max_length = tf.minimum(
            tf.shape(encoder_token_ids)[1] + self.extra_length, self.max_sequence_length
        )
        if self.beam_size > 1:
            tokens, _ = beam_search(
                self.model, encoder_token_ids, beam_size=self.beam_size,
                length_penalty=self.length_penalty, max_length=max_length,
            )
            return tokens
        return greedy_search(self.model, encoder_token_ids, max_length=max_length)

    def encode(self, sentences):
        ids = self.tokenizer.tokenize(tf.constant(sentences, tf.string))
        ids = ids[:, : self.max_sequence_length]
        return ids.to_tensor(0)

    def __call__(self, sentences, batch_size=64):
        sentences = list(sentences)
        order = np.argsort([len(s) for s in sentences], kind="stable")
        outputs = [None] * len(sentences)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            tokens = self.decode_ids(self.encode([sentences[i] for i in chunk]))
            texts = self.tokenizer.detokenize(tf.RaggedTensor.from_tensor(tokens, padding=0))
            for i, text in zip(chunk, texts.numpy(), strict=True):
                outputs[i] = text.decode("utf-8")
        return outputs


def corpus_bleu(hypotheses, references, lowercase=False):
    """sacrebleu's corpus BLEU (13a tokenisation) of detokenised hypotheses."""
    hypotheses = [detokenize_punctuation(h) for h in hypotheses]
    return sacrebleu.corpus_bleu(hypotheses, [list(references)], lowercase=lowercase)
