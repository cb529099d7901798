"""TensorBoard additions: validation BLEU, attention images, hyper-parameters."""

import keras
import numpy as np
import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api

from keras_transformer.models import START_ID


class ValidationBleu(keras.callbacks.Callback):
    """Adds `val_bleu` (greedy decoding of a fixed sample) to the epoch logs.

    Place it before `keras.callbacks.TensorBoard` in the callback list so the
    TensorBoard writer sees the value.
    """

    def __init__(self, translator, sources, references, lowercase):
        super().__init__()
        self.translator = translator
        self.sources = list(sources)
        self.references = list(references)
        self.lowercase = lowercase

    def on_epoch_end(self, epoch, logs=None):
        from training.evaluation import corpus_bleu

        hypotheses = self.translator(self.sources)
        score = corpus_bleu(hypotheses, self.references, self.lowercase).score
        if logs is not None:
            logs["val_bleu"] = score


class AttentionImages(keras.callbacks.Callback):
    """Writes cross-attention heatmaps of one fixed validation pair each epoch.

    The image is the last decoder layer's cross-attention, averaged over
    heads: rows are target positions, columns source positions.
    """

    def __init__(self, log_dir, encoder_token_ids, decoder_token_ids):
        super().__init__()
        self.writer = tf.summary.create_file_writer(log_dir)
        self.encoder_token_ids = np.asarray(encoder_token_ids, "int32")[None]
        self.decoder_token_ids = np.asarray(decoder_token_ids, "int32")[None]

    def on_epoch_end(self, epoch, logs=None):
        weights = self.model.attention_weights(self.encoder_token_ids, self.decoder_token_ids)
        cross = np.asarray(weights["cross"][-1])[0].mean(axis=0)  # (T, S)
        image = cross / max(cross.max(), 1e-9)
        with self.writer.as_default():
            tf.summary.image("cross_attention/last_layer", image[None, :, :, None], step=epoch)
            for layer, w in enumerate(weights["cross"]):
                tf.summary.image(
                    f"cross_attention/layer_{layer}",
                    np.asarray(w)[0].mean(0)[None, :, :, None], step=epoch,
                )
        self.writer.flush()


def attention_example(tokenizer, source, target, max_sequence_length):
    """Encoder and decoder ids of one pair, for `AttentionImages`."""
    src = tokenizer.tokenize(tf.constant([source])).numpy()[0][:max_sequence_length]
    tgt = tokenizer.tokenize(tf.constant([target])).numpy()[0][: max_sequence_length - 1]
    return src, np.concatenate([[START_ID], tgt])


def write_hparams(log_dir, config):
    """Record the run's hyper-parameters for TensorBoard's HParams tab."""
    flat = {}
    for key, value in config.to_dict().items():
        if isinstance(value, dict):
            flat.update({f"model.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    flat = {k: (v if isinstance(v, (bool, int, float, str)) else str(v)) for k, v in flat.items()}
    with tf.summary.create_file_writer(log_dir).as_default():
        hparams_api.hparams(flat)
