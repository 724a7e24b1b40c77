"""Attention heatmaps: one panel per head, subword pieces on the axes (`vaswani attention`).

translation = Translator.load("runs/multi30k_de_en").attention("Ein Mann fährt Fahrrad.")
plot_attention(translation, "attention.png", kind="cross", layer=6)   # the 8 heads of the last layer
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

KINDS = ("cross", "encoder", "decoder")


def select_panels(n_layers: int, n_heads: int, layer: int | None, head: int | None) -> list[tuple[int, int]]:
    """(layer, head) pairs, 1-based, row by row: one panel, a layer's heads, a head in every layer, or all."""
    for name, value, count in (("layer", layer, n_layers), ("head", head, n_heads)):
        if value is not None and not 1 <= value <= count:
            raise ValueError(f"--{name} {value} is out of range: this model has {count} {name}s (1 to {count})")
    layers = [layer] if layer is not None else range(1, n_layers + 1)
    heads = [head] if head is not None else range(1, n_heads + 1)
    return [(i, j) for i in layers for j in heads]


def _axes_pieces(translation, kind: str) -> tuple[list[str], list[str]]:
    """Row and column labels of `kind`'s weights."""
    if kind == "encoder":
        return translation.src_pieces, translation.src_pieces
    if kind == "decoder":
        return translation.tgt_pieces, translation.decoder_pieces
    return translation.tgt_pieces, translation.src_pieces


def plot_attention(
    translation,
    path: str | Path,
    kind: str = "cross",
    layer: int | None = None,
    head: int | None = None,
    title: str | None = None,
) -> Path:
    """Write a PNG of `translation`'s attention (a `Translation` with attention, from `Translator.attention`):
    a grid with one row per layer and one column per head, limited to `layer` and/or `head` (1-based)."""
    import matplotlib

    # matplotlib's object API: no pyplot, no global backend switched under a user's notebook.
    with matplotlib.rc_context({"text.parse_math": False}):  # a sentence's "$" is text, not mathtext
        return _plot(translation, path, kind, layer, head, title)


def _plot(translation, path, kind, layer, head, title) -> Path:
    from matplotlib.figure import Figure

    if kind not in KINDS:
        raise ValueError(f"--kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if translation.attention is None:
        raise ValueError("this translation carries no attention weights: ask for them (attention=True)")
    weights = {
        "cross": translation.attention.cross,
        "encoder": translation.attention.encoder,
        "decoder": translation.attention.decoder_self,
    }[kind]
    panels = select_panels(len(weights), weights[0].size(0), layer, head)
    rows_labels, column_labels = _axes_pieces(translation, kind)
    n_rows = len({i for i, _ in panels})
    n_cols = len(panels) // n_rows
    # Square cells of ~0.2 inch so the pieces stay legible; room around each panel for its labels.
    cell, margin = 0.2, 0.12 * max(map(len, [*rows_labels, *column_labels])) + 0.6
    width = n_cols * (cell * len(column_labels) + margin) + 1.2
    height = n_rows * (cell * len(rows_labels) + margin) + 1.0
    figure = Figure(figsize=(max(width, 4.0), max(height, 3.0)), layout="constrained")
    axes = figure.subplots(n_rows, n_cols, squeeze=False)
    image = None
    for position, (i, j) in enumerate(panels):
        ax = axes[position // n_cols][position % n_cols]
        matrix = weights[i - 1][j - 1].float().numpy()  # (rows, columns)
        image = ax.imshow(matrix, cmap="Blues", vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
        ax.set_title(f"layer {i}, head {j}", fontsize=9)
        _label(ax, rows_labels, column_labels)
    what = {
        "cross": "encoder-decoder attention (rows: target, columns: source)",
        "encoder": "encoder self-attention",
        "decoder": "decoder self-attention (rows: target, columns: input)",
    }
    line = max(40, int(width * 9))  # characters that fit the figure's width at 10 pt
    pair = textwrap.shorten(f"{translation.source}  →  {translation.text}", 3 * line, placeholder=" …")
    figure.suptitle(title or "\n".join([what[kind], *textwrap.wrap(pair, line)]), fontsize=10)
    figure.colorbar(image, ax=axes.ravel().tolist(), shrink=min(0.6, 4 / max(height, 4)), label="weight")
    path = Path(path)
    figure.savefig(path, dpi=110)
    return path


def _label(ax, rows: Sequence[str], columns: Sequence[str]) -> None:
    ax.set_xticks(range(len(columns)), list(columns), rotation=90, fontsize=8)
    ax.set_yticks(range(len(rows)), list(rows), fontsize=8)
    ax.tick_params(length=0)
    ax.xaxis.tick_top()
