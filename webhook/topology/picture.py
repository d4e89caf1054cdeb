"""The topology tree as one picture (PNG or SVG), drawn with matplotlib.

Layout: one column per domain of the narrowest level (a rack), its hosts stacked as cells; above
the columns, one bar per broader domain spanning its racks; domains of the broadest level are
separated by wide gaps, the next by narrow ones. Columns wrap into bands (at a domain boundary
when it fits) so that the picture stays roughly as tall as wide. Each cell and bar is coloured
by its share of free accelerators and says ``free/allocatable``; hosts that take no new pods are
dark (NotReady), hatched (cordoned) or grey (tainted). Text is left out where it could not be
read (cells too many to label), so large trees stay fast to draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

from webhook.topology.render import level_name, number
from webhook.topology.tree import Domain, Host, TopologyTree

__all__ = ["FORMATS", "render_picture"]

FORMATS = ("png", "svg")
CELL_INCHES = 0.42
HEADER_ROW = 1.0  # height of a broader level's bar, in cells
BAND_GAP = 1.3
MAX_PIXELS = 4_000_000
CELL_TEXT_LIMIT = 3000  # hosts above which cells carry no text
LABEL_LIMIT = 600  # columns above which rack labels are left out
COLORMAP = "RdYlGn"
NOT_READY = "#3b3b3b"
CORDONED = "#bdbdbd"
TAINTED = "#8c8c8c"
NO_ACCELERATOR = "#dde4ec"


@dataclass
class _Column:
    """A narrowest-level domain (or a chunk of hosts when there are no levels) and its ancestors."""

    domain: Domain | None
    hosts: list[Host]
    ancestors: tuple[Domain, ...]  # broadest first, the column's own domain excluded


def _columns(tree: TopologyTree) -> list[_Column]:
    if not tree.levels:
        hosts = tree.root.hosts
        return [_Column(None, hosts[i : i + 8], ()) for i in range(0, len(hosts), 8)]
    out: list[_Column] = []

    def visit(domain: Domain, ancestors: tuple[Domain, ...]) -> None:
        if domain.depth == len(tree.levels) - 1:
            out.append(_Column(domain, domain.hosts, ancestors))
            return
        for child in domain.children.values():
            visit(child, (*ancestors, domain) if domain.depth >= 0 else ancestors)

    visit(tree.root, ())
    return out


def _gap(previous: _Column, column: _Column) -> float:
    """Space before ``column``: wider the broader the first ancestor they do not share."""
    for depth, (a, b) in enumerate(zip(previous.ancestors, column.ancestors, strict=False)):
        if a is not b:
            return 0.8 if depth == 0 else 0.4
    return 0.0


def _bands(columns: Sequence[_Column], width: float) -> list[list[tuple[float, _Column]]]:
    """Columns placed at x positions, wrapped into bands no wider than ``width`` cells, breaking
    at a change of the parent domain when the next group still fits in a band."""
    groups: list[list[_Column]] = []
    for column in columns:
        if groups and column.ancestors[-1:] == groups[-1][-1].ancestors[-1:]:
            groups[-1].append(column)
        else:
            groups.append([column])
    bands: list[list[tuple[float, _Column]]] = [[]]
    x = 0.0
    for group in groups:
        needed = len(group) + (_gap(bands[-1][-1][1], group[0]) if bands[-1] else 0.0)
        if bands[-1] and x + needed > width and len(group) <= width:
            bands.append([])
            x = 0.0
        for column in group:
            if bands[-1]:
                x += _gap(bands[-1][-1][1], column)
                if x + 1 > width:
                    bands.append([])
                    x = 0.0
            bands[-1].append((x, column))
            x += 1
    return [band for band in bands if band]


def _share(free: Decimal, allocatable: Decimal) -> float:
    return float(free / allocatable) if allocatable > 0 else 0.0


def render_picture(tree: TopologyTree, target: str | Path | IO[bytes], fmt: str) -> None:
    """Draw ``tree`` into ``target`` (a path or a binary file) as ``fmt`` (``png`` or ``svg``).

    Raises:
        ValueError: ``fmt`` not in :data:`FORMATS`.
    """
    if fmt not in FORMATS:
        raise ValueError(f"picture format {fmt!r}: expected one of {', '.join(FORMATS)}")
    from matplotlib import colormaps
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    columns = _columns(tree)
    depth_rows = max(len(tree.levels) - 1, 0)
    tallest = max((len(c.hosts) for c in columns), default=1)
    # Rotated rack labels: as tall as the longest name (6.5 pt characters, about 0.62 em wide).
    longest = max((len(c.domain.value or "(none)") for c in columns if c.domain is not None), default=0)
    labelled = bool(tree.levels) and len(columns) <= LABEL_LIMIT
    label_row = longest * 6.5 * 0.62 / (CELL_INCHES * 72) + 0.5 if labelled else 0.3 if tree.levels else 0.0
    band_height = depth_rows * HEADER_ROW + label_row + tallest + BAND_GAP
    # At most 48 columns a band, more when that keeps a large tree about as tall as wide.
    width = max(48.0, math.sqrt(len(columns) * band_height / 1.2))
    bands = _bands(columns, width)
    used_width = max((band[-1][0] + 1 for band in bands), default=1.0)
    title_height = 3.4
    total_height = title_height + band_height * len(bands)
    many_hosts = len(tree.hosts) > CELL_TEXT_LIMIT

    fig_w, fig_h = (max(used_width, 15.0) + 0.6) * CELL_INCHES, total_height * CELL_INCHES
    dpi = min(100.0, math.sqrt(MAX_PIXELS / (fig_w * fig_h)))
    fig = Figure(figsize=(fig_w, fig_h), dpi=dpi)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    ax.set_xlim(-0.3, max(used_width, 15.0) + 0.3)
    ax.set_ylim(total_height, 0)  # y grows downwards
    cmap = colormaps[COLORMAP]
    scale = CELL_INCHES * 72  # points per cell

    bars: list[list[tuple[float, float]]] = []
    bar_colors: list[Any] = []
    # Cells are square markers (one path for all, drawn fast), by kind: centre x, y, share free.
    cells: dict[str, tuple[list[float], list[float], list[float]]] = {
        key: ([], [], []) for key in ("ok", NO_ACCELERATOR, NOT_READY, CORDONED, TAINTED)
    }
    texts: list[tuple[float, float, str, dict[str, Any]]] = []

    def box(x: float, y: float, w: float, h: float) -> list[tuple[float, float]]:
        return [(x, y), (x + w, y), (x + w, y + h), (x, y + h)]

    def shade(free: Decimal, allocatable: Decimal) -> Any:
        return cmap(_share(free, allocatable)) if allocatable > 0 else NO_ACCELERATOR

    y0 = title_height
    for band in bands:
        # Bars of the broader levels: consecutive columns sharing the ancestor at each depth.
        for depth in range(depth_rows):
            start = 0
            while start < len(band):
                ancestor = band[start][1].ancestors[depth]
                end = start
                while end + 1 < len(band) and band[end + 1][1].ancestors[depth] is ancestor:
                    end += 1
                x, right = band[start][0], band[end][0] + 1
                y = y0 + depth * HEADER_ROW
                bars.append(box(x, y + 0.06, right - x, HEADER_ROW - 0.12))
                bar_colors.append(shade(ancestor.free, ancestor.allocatable))
                label = f"{ancestor.value or '(none)'}  {number(ancestor.free)}/{number(ancestor.allocatable)}"
                size = min(8.5, scale * (right - x - 0.2) / (0.62 * max(len(label), 1)))
                if size >= 4.5:
                    texts.append(((x + right) / 2, y + HEADER_ROW / 2, label, {"fontsize": size}))
                start = end + 1
        label_y = y0 + depth_rows * HEADER_ROW
        cells_y = label_y + label_row
        for x, column in band:
            if column.domain is not None and labelled:
                domain = column.domain
                text = f"{domain.value or '(none)'}\n{number(domain.free)}/{number(domain.allocatable)}"
                texts.append(
                    (
                        x + 0.5,
                        cells_y - 0.1,
                        text,
                        {"fontsize": 6.5, "rotation": 90, "va": "bottom", "linespacing": 1.1},
                    )
                )
            for row, host in enumerate(column.hosts):
                cx, cy = x + 0.5, cells_y + row + 0.5
                if host.available:
                    key = "ok" if host.allocatable > 0 else NO_ACCELERATOR
                else:
                    key = NOT_READY if not host.ready else CORDONED if host.cordoned else TAINTED
                xs, ys, shares = cells[key]
                xs.append(cx)
                ys.append(cy)
                if key == "ok":
                    shares.append(_share(host.free, host.allocatable))
                if not many_hosts:
                    label = (
                        f"{number(host.free)}/{number(host.allocatable)}"
                        if host.available
                        else {NOT_READY: "down", CORDONED: "cord", TAINTED: "taint"}[key]
                    )
                    # White on the dark ends of the colour map (and on NotReady), black elsewhere.
                    dark = not host.ready or (key == "ok" and not 0.2 <= shares[-1] <= 0.8)
                    color = "white" if dark else "black"
                    texts.append((cx, cy, label, {"fontsize": 6.5, "color": color}))
        y0 += band_height

    ax.add_collection(PolyCollection(bars, facecolors=bar_colors, edgecolors="white", linewidths=0.6))
    size = (0.9 * scale) ** 2  # marker area in points²: a cell of 0.9 × 0.9
    xs, ys, shares = cells["ok"]
    ax.scatter(xs, ys, s=size, marker="s", c=shares, cmap=cmap, vmin=0.0, vmax=1.0, linewidths=0)
    for key in (NO_ACCELERATOR, NOT_READY, TAINTED):
        ax.scatter(cells[key][0], cells[key][1], s=size, marker="s", c=key, linewidths=0)
    ax.scatter(
        cells[CORDONED][0],
        cells[CORDONED][1],
        s=size,
        marker="s",
        c=CORDONED,
        edgecolors="#555555",
        hatch="///",
        linewidths=0.5,
    )
    for x, y, text, style in texts:
        ax.text(x, y, text, ha="center", va=style.pop("va", "center"), clip_on=False, **style)

    root = tree.root
    down = f", {root.unavailable} taking no new pods" if root.unavailable else ""
    levels = " > ".join([*(level_name(level) for level in tree.levels), "host"])
    ax.text(
        0,
        0.7,
        f"{root.nodes} node{'s' * (root.nodes != 1)}{down} · {tree.resource}: "
        f"{number(root.free)} free of {number(root.allocatable)}",
        fontsize=12,
        fontweight="bold",
        va="center",
    )
    subtitle = f"levels {levels} · cells are hosts (free/allocatable), coloured by free share"
    ax.text(0, 1.55, subtitle, fontsize=8.5, va="center")
    handles = [
        Patch(facecolor=cmap(1.0), label="all free"),
        Patch(facecolor=cmap(0.5), label="half free"),
        Patch(facecolor=cmap(0.0), label="none free"),
        Patch(facecolor=NOT_READY, label="NotReady"),
        Patch(facecolor=CORDONED, hatch="///", edgecolor="#555555", label="cordoned"),
        Patch(facecolor=TAINTED, label="tainted"),
    ]
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(-0.1, 2.0),
        bbox_transform=ax.transData,
        ncols=6,
        fontsize=7.5,
        frameon=False,
        handlelength=1.2,
        borderaxespad=0,
    )
    if fmt == "png":  # light compression: most of the time of a large picture is otherwise the encoder
        fig.savefig(target, format="png", dpi=dpi, metadata={"Software": None}, pil_kwargs={"compress_level": 2})
    else:
        fig.savefig(target, format="svg", metadata={"Date": None})
