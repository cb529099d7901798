"""Attention weights drawn as labelled heatmaps (notebooks and TensorBoard).

`attention_figure` draws one large heatmap, source word pieces along the x
axis and target pieces along the y axis, with a colour bar, and optionally
the individual heads as small panels below it; `figure_to_png_array` renders
a figure to the `(H, W, 4)` uint8 pixels `tf.summary.image` takes.

Figures are `matplotlib.figure.Figure` objects on the non-interactive Agg
canvas, made without `pyplot`: a training callback that draws one per epoch
leaves no window, no global figure list to leak into, and does not touch the
backend a notebook chose (Jupyter still displays the returned figure).

Example:

```python
weights = model.attention_weights(source_ids, decoder_ids)["cross"][-1][0]
fig = attention_figure(weights, source_pieces, target_pieces, heads="all")
pixels = figure_to_png_array(fig)  # (H, W, 4) uint8
```
"""

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

# Inches given to each token along an axis of the main heatmap, and the
# smallest main heatmap (a two-token sentence still gets a readable plot).
INCHES_PER_TOKEN = 0.32
MIN_MAIN_INCHES = 3.0
# Tick-label font size: this share of the room (in points) one token has
# along its axis, clipped to a readable range.
FONT_SHARE = 0.4
MIN_FONT, MAX_FONT = 7.0, 12.0
# Head panels: at least this wide, as many to a row as fit under the main map.
HEAD_PANEL_INCHES = 1.4


def _layer_weights(weights):
    """`weights` as a float array `(h, T, S)` (a 2-D map becomes one head)."""
    if isinstance(weights, (list, tuple)):
        if not weights:
            raise ValueError("attention_figure: received weights=[] (no layers).")
        weights = weights[-1]  # a list of layers: the last layer's
    weights = np.asarray(weights, dtype="float32")
    if weights.ndim == 4 and weights.shape[0] == 1:
        weights = weights[0]  # a batch of one, as model.attention_weights returns
    if weights.ndim == 2:
        weights = weights[None]
    if weights.ndim != 3:
        raise ValueError(
            "attention_figure: weights must be (T, S), (h, T, S), (1, h, T, S) or a "
            f"list of layers of those; received an array of shape {weights.shape}."
        )
    return weights


def _head_indices(heads, num_heads):
    if heads is None:
        return []
    if isinstance(heads, str):
        if heads != "all":
            raise ValueError(
                f"attention_figure: heads must be None, 'all' or head indices; "
                f"received heads={heads!r}."
            )
        return list(range(num_heads))
    indices = [int(h) for h in heads]
    if any(not 0 <= h < num_heads for h in indices):
        raise ValueError(
            f"attention_figure: heads must index the {num_heads} heads; received "
            f"heads={list(heads)!r}."
        )
    return indices


def _font_size(axis_inches, num_tokens):
    points_per_token = 72.0 * axis_inches / max(num_tokens, 1)
    return float(np.clip(FONT_SHARE * points_per_token, MIN_FONT, MAX_FONT))


def attention_figure(weights, source_tokens, target_tokens, heads=None, title=None):
    """A labelled heatmap of attention weights, heads optionally beside it.

    Args:
        weights: the attention of one layer, `(h, T, S)` (the large heatmap
            is the mean over heads), a single map `(T, S)`, `(1, h, T, S)` as
            `Transformer.attention_weights` returns it, or a list of layers of
            those (the last layer is drawn). T rows are target (query)
            positions, S columns source (key) positions.
        source_tokens: S strings, the x-axis labels (source word pieces).
        target_tokens: T strings, the y-axis labels (target pieces).
        heads: None (no head panels), "all", or a list of head indices to
            draw as small panels below the main heatmap.
        title: the main heatmap's title (default: "mean of h heads").

    Returns:
        A `matplotlib.figure.Figure` on an Agg canvas.

    Raises:
        ValueError: if the weights' shape does not match the token lists, or
            `heads` names a head that does not exist.
    """
    weights = _layer_weights(weights)  # (h, T, S)
    num_heads, rows, columns = weights.shape
    source_tokens = [str(t) for t in source_tokens]
    target_tokens = [str(t) for t in target_tokens]
    if (len(target_tokens), len(source_tokens)) != (rows, columns):
        raise ValueError(
            f"attention_figure: weights have {rows} target rows and {columns} source "
            f"columns; received {len(target_tokens)} target_tokens and "
            f"{len(source_tokens)} source_tokens."
        )
    panels = _head_indices(heads, num_heads)
    mean = weights.mean(axis=0)  # (T, S)

    main_width = max(MIN_MAIN_INCHES, INCHES_PER_TOKEN * columns)
    main_height = max(MIN_MAIN_INCHES, INCHES_PER_TOKEN * rows)
    x_font, y_font = _font_size(main_width, columns), _font_size(main_height, rows)
    # Room for the rotated source labels, the target labels and the colour bar.
    label_chars = max(len(t) for t in source_tokens + target_tokens)
    margin = 0.12 * label_chars * max(x_font, y_font) / 10 + 0.6
    width = main_width + margin + 1.2
    per_row = max(1, min(len(panels), int(width // HEAD_PANEL_INCHES)))
    head_rows = -(-len(panels) // per_row)
    height = main_height + margin + 0.6 + head_rows * (HEAD_PANEL_INCHES + 0.3)

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    if panels:
        top, bottom = fig.subfigures(
            2, 1, height_ratios=[main_height + margin + 0.6, head_rows * (HEAD_PANEL_INCHES + 0.3)]
        )
    else:
        top, bottom = fig, None

    ax = top.subplots()
    image = ax.imshow(mean, vmin=0.0, vmax=max(float(mean.max()), 1e-9), cmap="viridis",
                      aspect="auto", interpolation="nearest")
    # parse_math=False: a piece such as "$5" is text, not a TeX formula.
    ax.set_xticks(range(columns), source_tokens, rotation=90, fontsize=x_font,
                  parse_math=False)
    ax.set_yticks(range(rows), target_tokens, fontsize=y_font, parse_math=False)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    ax.set_title(title or (f"mean of {num_heads} heads" if num_heads > 1 else "attention"))
    top.colorbar(image, ax=ax, label="attention weight", shrink=0.8)

    if panels:
        axes = np.atleast_1d(bottom.subplots(head_rows, per_row, squeeze=False)).ravel()
        vmax = max(float(weights[panels].max()), 1e-9)  # one scale for all heads
        for panel, head in zip(axes, panels + [None] * (len(axes) - len(panels)),
                               strict=True):
            if head is None:
                panel.set_axis_off()
                continue
            panel.imshow(weights[head], vmin=0.0, vmax=vmax, cmap="viridis",
                         aspect="auto", interpolation="nearest")
            panel.set_title(f"head {head}", fontsize=9)
            panel.set_xticks([])
            panel.set_yticks([])
        bottom.suptitle("heads (same axes, one colour scale)", fontsize=9)
    return fig


def figure_to_png_array(fig):
    """The figure's pixels, `(H, W, 4)` uint8 RGBA, for `tf.summary.image`.

    H and W are the figure's size in inches times its dpi.
    """
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    return np.array(canvas.buffer_rgba(), dtype=np.uint8)  # (H, W, 4), a copy
