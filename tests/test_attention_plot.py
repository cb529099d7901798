"""Labelled attention heatmaps: the figure, its pixels, and TensorBoard's images."""

import io

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.models import Transformer
from training.monitor.attention_plot import attention_figure, figure_to_png_array
from training.monitor.tensorboard import AttentionImages, attention_example
from training.text.tokenizers import RESERVED_TOKENS, WordPieceTokenizer

SOURCE = ["ein", "mann", "mit", "##s", "$5", "."]
TARGET = ["a", "man", "with", "$", "[END]"]
ROWS, COLUMNS = len(TARGET), len(SOURCE)


def _weights(heads=3, rows=ROWS, columns=COLUMNS, seed=0):
    w = np.random.default_rng(seed).random((heads, rows, columns)).astype("float32")
    return w / w.sum(-1, keepdims=True)  # (h, T, S), rows are distributions


def _labels(ticks):
    return [t.get_text() for t in ticks]


def _pixel_size(fig):
    width, height = fig.get_size_inches() * fig.dpi
    return round(height), round(width)


def test_figure_labels_axes_with_the_pieces_in_order():
    weights = _weights()
    fig = attention_figure(weights, SOURCE, TARGET, heads="all", title="t")
    main = fig.axes[0]
    assert _labels(main.get_xticklabels()) == SOURCE
    assert _labels(main.get_yticklabels()) == TARGET
    assert list(main.get_xticks()) == list(range(len(SOURCE)))
    assert list(main.get_yticks()) == list(range(len(TARGET)))
    # "$5" and "$" stay literal text, not TeX.
    assert not any(t.get_parse_math() for t in main.get_xticklabels())
    # The large map is the mean of the heads; each head panel is its head.
    np.testing.assert_allclose(main.images[0].get_array(), weights.mean(0), rtol=1e-6)
    panels = [ax for ax in fig.axes if ax.get_title().startswith("head ")]
    assert [ax.get_title() for ax in panels] == ["head 0", "head 1", "head 2"]
    for head, ax in enumerate(panels):
        np.testing.assert_array_equal(ax.images[0].get_array(), weights[head])
    assert any(ax.get_label() == "<colorbar>" for ax in fig.axes)


def test_figure_takes_the_last_layer_of_a_batch_of_one_and_selected_heads():
    layers = [_weights(seed=1)[None], _weights(seed=2)[None]]  # (1, h, T, S) each
    fig = attention_figure(layers, SOURCE, TARGET, heads=[2])
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), layers[-1][0].mean(0),
                               rtol=1e-6)
    panels = [ax for ax in fig.axes if ax.get_title().startswith("head ")]
    assert [ax.get_title() for ax in panels] == ["head 2"]
    no_heads = attention_figure(layers[-1][0, 0], SOURCE, TARGET)  # (T, S)
    assert not [ax for ax in no_heads.axes if ax.get_title().startswith("head ")]


def test_more_tokens_give_a_larger_figure_with_smaller_labels():
    short = attention_figure(_weights(1, 5, 6), [f"s{i}" for i in range(6)],
                             [f"t{i}" for i in range(5)])
    long = attention_figure(_weights(1, 40, 50), [f"s{i}" for i in range(50)],
                            [f"t{i}" for i in range(40)])
    assert (long.get_size_inches() > short.get_size_inches()).all()
    size = lambda fig: fig.axes[0].get_xticklabels()[0].get_fontsize()  # noqa: E731
    assert size(long) < size(short)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(source_tokens=SOURCE[:-1]), "5 source_tokens"),
        (dict(target_tokens=TARGET + ["x"]), "6 target_tokens"),
        (dict(heads=[3]), r"heads=\[3\]"),
        (dict(heads="some"), "heads='some'"),
        (dict(weights=np.zeros((2, 2, 5, 6, 1))), r"shape \(2, 2, 5, 6, 1\)"),
    ],
)
def test_bad_arguments_name_the_value(kwargs, match):
    arguments = dict(weights=_weights(), source_tokens=SOURCE, target_tokens=TARGET)
    with pytest.raises(ValueError, match=match):
        attention_figure(**{**arguments, **kwargs})


def test_array_has_the_figure_pixel_size_and_its_png_pixels():
    fig = attention_figure(_weights(), SOURCE, TARGET, heads="all")
    pixels = figure_to_png_array(fig)
    assert pixels.dtype == np.uint8
    assert pixels.shape == (*_pixel_size(fig), 4)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=fig.dpi)
    png = tf.io.decode_png(buffer.getvalue(), channels=4).numpy()
    np.testing.assert_array_equal(pixels, png)
    assert len(np.unique(pixels.reshape(-1, 4), axis=0)) > 50  # a drawing, not a blank


def _read_images(log_dir):
    """{tag: [(step, decoded image (H, W, C))]} from the event files under log_dir."""
    images = {}
    for path in tf.io.gfile.glob(f"{log_dir}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                # tf.summary.image stores [width, height, png, ...] as strings.
                encoded = tf.make_ndarray(value.tensor)
                width, height = int(encoded[0]), int(encoded[1])
                image = tf.io.decode_png(encoded[2]).numpy()
                assert image.shape[:2] == (height, width)
                images.setdefault(value.tag, []).append((event.step, image))
    return images


def test_callback_writes_the_rendered_heatmap(tmp_path):
    vocabulary = list(RESERVED_TOKENS) + ["ein", "mann", "a", "man", "with", "mit", "."]
    tokenizer = WordPieceTokenizer(vocabulary)
    source_ids, decoder_ids = attention_example(tokenizer, "ein mann mit .", "a man with .", 16)
    model = Transformer(vocabulary_size=len(vocabulary), num_layers=2, hidden_dim=8,
                        num_heads=2, intermediate_dim=16, max_sequence_length=16)
    callback = AttentionImages(model, str(tmp_path), source_ids, decoder_ids,
                               tokenizer.vocabulary)
    assert callback.source_tokens == ["ein", "mann", "mit", "."]
    # Row t is labelled with the piece predicted there: y(t+1), then [END].
    assert callback.target_tokens == ["a", "man", "with", ".", "[END]"]
    callback.on_epoch_end(0)

    images = _read_images(tmp_path)
    assert sorted(images) == ["cross_attention/last_layer", "cross_attention/layer_0",
                              "cross_attention/layer_1"]
    (step, image), = images["cross_attention/last_layer"]
    weights = model.attention_weights(source_ids[None], decoder_ids[None])["cross"]
    expected = figure_to_png_array(attention_figure(
        np.asarray(weights[-1])[0], callback.source_tokens, callback.target_tokens,
        heads="all", title="cross-attention, last layer, epoch 1",
    ))
    assert step == 0
    assert image.shape == expected.shape
    np.testing.assert_array_equal(image, expected)
