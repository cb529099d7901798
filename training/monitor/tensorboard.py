"""TensorBoard additions: validation BLEU, attention images, hyper-parameters
linked to the final metrics."""

import keras
import numpy as np
import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api

from keras_transformer.models import END_ID, START_ID
from training.monitor.attention_plot import attention_figure, figure_to_png_array
from training.monitor.evaluation import corpus_bleu


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
        hypotheses = self.translator(self.sources)
        score = corpus_bleu(hypotheses, self.references, self.lowercase).score
        if logs is not None:
            logs["val_bleu"] = score


class AttentionImages(keras.callbacks.Callback):
    """Writes cross-attention heatmaps of one fixed validation pair each epoch.

    Each image is a labelled heatmap (`training.monitor.attention_plot`): source
    word pieces along the x axis, target pieces along the y axis, each row
    labelled with the piece the decoder predicts there (the teacher-forced
    input is `[START] y1 .. yn`, so row t predicts y(t+1) and the last row
    `[END]`). `cross_attention/last_layer` is the last decoder layer's mean
    over heads with every head below it; `cross_attention/layer_i` is layer
    i's mean over heads.

    Args:
        model: the `Transformer` whose attention is drawn (the model inside
            the task model `fit` trains).
        log_dir: folder of the event file.
        encoder_token_ids: the source ids, `(S,)`.
        decoder_token_ids: `[START]` then the target ids, `(T,)`.
        vocabulary: the tokenizer's pieces (`tokenizer.vocabulary`), id -> str.
    """

    def __init__(self, model, log_dir, encoder_token_ids, decoder_token_ids, vocabulary):
        super().__init__()
        self.transformer = model
        self.writer = tf.summary.create_file_writer(log_dir)
        self.encoder_token_ids = np.asarray(encoder_token_ids, "int32")[None]
        self.decoder_token_ids = np.asarray(decoder_token_ids, "int32")[None]
        self.source_tokens = [vocabulary[i] for i in self.encoder_token_ids[0]]
        predicted = list(self.decoder_token_ids[0, 1:]) + [END_ID]
        self.target_tokens = [vocabulary[i] for i in predicted]

    def on_epoch_end(self, epoch, logs=None):
        weights = self.transformer.attention_weights(self.encoder_token_ids, self.decoder_token_ids)
        cross = [np.asarray(w)[0] for w in weights["cross"]]  # per layer (h, T, S)
        images = {"cross_attention/last_layer": attention_figure(
            cross[-1], self.source_tokens, self.target_tokens, heads="all",
            title=f"cross-attention, last layer, epoch {epoch + 1}",
        )}
        for layer, w in enumerate(cross):
            images[f"cross_attention/layer_{layer}"] = attention_figure(
                w, self.source_tokens, self.target_tokens,
                title=f"cross-attention, layer {layer}, mean of heads",
            )
        with self.writer.as_default():
            for tag, fig in images.items():
                tf.summary.image(tag, figure_to_png_array(fig)[None], step=epoch)
        self.writer.flush()


def attention_example(tokenizer, source, target, max_sequence_length):
    """Encoder and decoder ids of one pair, for `AttentionImages`."""
    src = tokenizer.tokenize(tf.constant([source])).numpy()[0][:max_sequence_length]
    tgt = tokenizer.tokenize(tf.constant([target])).numpy()[0][: max_sequence_length - 1]
    return src, np.concatenate([[START_ID], tgt])


def _flat_hparams(config):
    flat = {}
    for key, value in config.to_dict().items():
        if isinstance(value, dict):
            flat.update({f"model.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return {k: (v if isinstance(v, (bool, int, float, str)) else str(v)) for k, v in flat.items()}


def write_hparams(log_dir, config):
    """Record the run's hyper-parameters for TensorBoard's HParams tab."""
    with tf.summary.create_file_writer(log_dir).as_default():
        hparams_api.hparams(_flat_hparams(config))


def final_scalars(metrics):
    """{name: float} of the numbers at the top level of a run's metrics.json."""
    return {
        key: float(value) for key, value in metrics.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def write_final_metrics(log_dir, config, metrics, step):
    """Link the run's final figures to its hyper-parameters in TensorBoard.

    Each number of `metrics` (test BLEU or accuracy, validation loss, the
    seconds each phase took...) becomes a `final/<name>` scalar at `step`,
    and the HParams experiment lists them as its metrics, so the HParams
    table and parallel-coordinates views compare runs by their final test
    score rather than by whatever scalars the plugin finds first.
    """
    scalars = final_scalars(metrics)
    flat = _flat_hparams(config)
    with tf.summary.create_file_writer(log_dir).as_default():
        for name, value in scalars.items():
            tf.summary.scalar(f"final/{name}", value, step=int(step))
        hparams_api.hparams_config(
            hparams=[hparams_api.HParam(name) for name in flat],
            metrics=[hparams_api.Metric(f"final/{name}", display_name=name) for name in scalars],
        )
