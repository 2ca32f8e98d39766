"""How the app draws a result: HTML (probability bars, attention heatmaps) and PNG images,
from plain numbers; no model, no Gradio (`app.predict` calls these; `app.ui` holds the CSS their
classes name).
"""

from __future__ import annotations

import base64
import html
import io

import numpy as np


def bars_html(masks: list[dict]) -> str:
    """One card per [MASK]: its top-k WordPieces as horizontal probability bars."""
    cards = []
    for i, m in enumerate(masks):
        rows = "".join(
            f'<div class="bar-row"><span class="bar-token">{html.escape(p["token"])}</span>'
            f'<span class="bar"><span class="bar-fill" style="width:{100 * p["score"]:.1f}%">'
            f'</span></span><span class="bar-value">{p["score"]:.1%}</span></div>'
            for p in m["predictions"]
        )
        cards.append(
            f'<div class="mask-card"><div class="mask-title">[MASK] {i + 1} '
            f"<small>(WordPiece {m['position']} of the input)</small></div>{rows}</div>"
        )
    return f'<div class="bert-bars">{"".join(cards)}</div>'


def shade(weights: np.ndarray) -> np.ndarray:
    """Colour intensity in [0, 1] of attention weights: the square root, so that a weight of
    0.05 (uniform attention over 20 tokens) is pale but visible and 1 is full colour. Absolute,
    not scaled to a maximum: a head that attends evenly looks even, not saturated."""
    return np.sqrt(np.clip(weights, 0.0, 1.0))


_LEVELS = 20  # colour steps of the heatmap cells (CSS classes q0 .. q20 in app.ui)
_CELLS = [f'<td class="q{q}"></td>' for q in range(_LEVELS + 1)]
# Up to this many tokens each cell also carries its weight as a tooltip; longer inputs leave
# them out to keep the page light (a 128-token table has 16,384 cells, and formatting that
# many numbers costs more than the model). The raw JSON always has the weights.
TOOLTIP_TOKENS = 48


def heatmap_html(
    matrix: np.ndarray, tokens: list[str], segment_ids: list[int], selected: int, caption: str
) -> str:
    """A token-by-token table: row i = what token i attends to; each cell's colour is the
    `shade` of its weight (its tooltip the weight itself, up to TOOLTIP_TOKENS tokens). Row and
    column headers carry data-token (clicking one selects that token)."""
    levels = np.rint(shade(matrix) * _LEVELS).astype(int).tolist()
    names = [html.escape(t) for t in tokens]
    kinds = [
        "special" if t in ("[CLS]", "[SEP]", "[PAD]") else f"seg{s}"
        for t, s in zip(tokens, segment_ids)
    ]
    head = "".join(
        f'<th class="col {k}" data-token="{j}"><span>{n}</span></th>'
        for j, (n, k) in enumerate(zip(names, kinds))
    )
    tooltips = len(tokens) <= TOOLTIP_TOKENS
    rows = []
    for i, (name, kind) in enumerate(zip(names, kinds)):
        if tooltips:
            cells = "".join(
                f'<td class="q{q}" title="{w:.3f}"></td>'
                for q, w in zip(levels[i], matrix[i].tolist())
            )
        else:
            cells = "".join([_CELLS[q] for q in levels[i]])
        sel = " sel" if i == selected else ""
        rows.append(
            f'<tr class="r{sel}"><th class="row {kind}" data-token="{i}">{name}</th>{cells}</tr>'
        )
    hover = "; hover: weight" if tooltips else ""
    return (
        f'<div class="attn-wrap"><table class="attn"><caption>{html.escape(caption)} '
        f"<small>each row's token attends to the columns' (darker: more weight; the "
        f"shade grows with its square root, so small weights still show{hover}); click a "
        "token to select "
        f"it</small></caption>"
        f"<thead><tr><th></th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def heads_grid_html(layer_attention: np.ndarray, selected_head: int, layer: int) -> str:
    """Small multiples: every head of one layer as a tiny heatmap image (click one to show it)."""
    levels = np.rint(shade(layer_attention) * 255).astype(np.uint8)  # (heads, T, T)
    figures = []
    for h, image in enumerate(levels, start=1):
        sel = " sel" if h == selected_head else ""
        figures.append(
            f'<figure class="head{sel}" data-head="{h}"><img alt="layer {layer} head '
            f'{h}" src="data:image/png;base64,{png_base64(image)}">'
            f"<figcaption>head {h}</figcaption></figure>"
        )
    return f'<div class="heads-grid">{"".join(figures)}</div>'


# 256 colours from white (level 0) to blue (255): the PNGs are palette images, one byte a pixel.
_PALETTE = np.rint(np.linspace([255, 255, 255], [29, 78, 216], 256)).astype(np.uint8)


def png_base64(levels: np.ndarray) -> str:
    """A (T, T) uint8 array of colour levels as a T x T PNG (white -> blue), base64."""
    from PIL import Image

    image = Image.frombytes("P", levels.shape[::-1], np.ascontiguousarray(levels).tobytes())
    image.putpalette(_PALETTE.tobytes())
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return base64.b64encode(buffer.getvalue()).decode("ascii")
