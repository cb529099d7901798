"""Translation and classification evaluation: decoding, BLEU, accuracy."""

import numpy as np
import sacrebleu
import tensorflow as tf

from keras_transformer.decoding import beam_search, greedy_search
from training.text.detokenize import detokenize_punctuation
from training.text.moses import moses_tokenize

#: Sentences per decoding call.
DECODE_BATCH = 64


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
        # No autograph: the search is written in keras.ops (it runs under
        # jax.jit too), so converting its Python would only cost seconds.
        self.decode_ids = tf.function(
            self._decode,
            input_signature=[tf.TensorSpec([None, None], tf.int32)],
            autograph=False,
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

    @property
    def traced(self):
        """Whether the decoding loop is traced (its next call pays no trace)."""
        return self.decode_ids.experimental_get_tracing_count() > 0

    def encode(self, sentences):
        ids = self.tokenizer.tokenize(tf.constant(sentences, tf.string))
        ids = ids[:, : self.max_sequence_length]
        return ids.to_tensor(0)

    def __call__(self, sentences, batch_size=DECODE_BATCH):
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
    """sacreBLEU corpus BLEU (13a tokenisation) of detokenised hypotheses.

    Returns the `sacrebleu` score object (`.score` is the BLEU value).
    """
    hypotheses = [detokenize_punctuation(h) for h in hypotheses]
    return sacrebleu.corpus_bleu(hypotheses, [list(references)], lowercase=lowercase)


def bleu_scores(hypotheses, references, language=None):
    """The two BLEU figures of one system, side by side.

    * `"bleu"` (the headline): cased sacreBLEU with its standard 13a
      tokenisation of `detokenize_punctuation(hypothesis)` against the raw
      references, signature `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp`.
      A model trained on lowercased text loses every capital here.
    * `"bleu_lowercase_tokenized"`: what Multi30k papers quote, multi-bleu.perl
      over the release's lowercased Moses tokenisation (`*.lc.norm.tok.*`).
      Both sides go through `moses_tokenize` (detokenised hypotheses first)
      and sacreBLEU scores the whitespace tokens (`tokenize="none"`), which
      is multi-bleu.perl's computation. Our tokenisation of the Multi30k
      test_2016_flickr and val references scores 99.97 to 100 BLEU against
      the released tokenised files, in each of en, de, fr and cs.

    Args:
        hypotheses: Iterable of `str`, one translation per reference (as
            `Translator` returns them: word pieces joined by spaces is fine).
        references: Iterable of `str`, raw (untokenised) references.
        language: Moses code of the target language ("en", "de", "fr", "cs"),
            for `moses_tokenize`; `None` takes Moses's default rules.

    Returns:
        `{"bleu": float, "bleu_lowercase_tokenized": float}`, each 0-100.

    Raises:
        ValueError: If `hypotheses` and `references` differ in length.
    """
    hypotheses = [detokenize_punctuation(h) for h in hypotheses]
    references = list(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses and references must have the same length, received "
            f"len(hypotheses)={len(hypotheses)} and len(references)={len(references)}."
        )
    cased = sacrebleu.corpus_bleu(hypotheses, [references])
    tokenized = sacrebleu.corpus_bleu(
        [moses_tokenize(h, language) for h in hypotheses],
        [[moses_tokenize(r, language) for r in references]],
        tokenize="none",
        force=True,  # The input is tokenised on purpose: no warning.
    )
    return {"bleu": cased.score, "bleu_lowercase_tokenized": tokenized.score}
