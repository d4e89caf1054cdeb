"""``kgov status -o png``: each team's usage against its quota, drawn with matplotlib.

One panel per resource (accelerators first, then CPU and memory; at most four), one horizontal
bar per team: the nominal quota as an outlined bar, the borrowing limit as a dashed extension,
what workloads with a reservation hold filled (the part within nominal green, borrowed orange),
and the number of pending workloads written at the bar's end.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import IO

from webhook.topology.tree import ACCELERATOR_RESOURCES
from webhook.why.status import TeamStatus

__all__ = ["render_status_picture"]

_GIB = Decimal(2**30)
_ORDER = (*ACCELERATOR_RESOURCES, "cpu", "memory")


def _scaled(resource: str, value: Decimal) -> float:
    return float(value / _GIB) if resource == "memory" else float(value)


def render_status_picture(rows: list[TeamStatus], out: str | Path | IO[bytes]) -> None:
    """Write the PNG (``out``: a path or a binary file object)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = {q.resource for row in rows for q in row.quotas}
    resources = [r for r in _ORDER if r in present][:4] or sorted(present)[:4]
    teams = [row.team for row in rows]
    panels = max(1, len(resources))
    figure, axes = plt.subplots(panels, 1, figsize=(9, 1.2 + 0.45 * max(1, len(teams)) * panels), squeeze=False)
    for axis, resource in zip(axes[:, 0], resources or ["-"], strict=False):
        for index, row in enumerate(rows):
            quotas = [q for q in row.quotas if q.resource == resource]
            nominal = sum((q.nominal for q in quotas), Decimal(0))
            reserved = sum((q.reserved for q in quotas), Decimal(0))
            borrowed = sum((q.borrowed for q in quotas), Decimal(0))
            limit = sum((q.borrowing_limit or Decimal(0) for q in quotas), Decimal(0))
            y = len(rows) - 1 - index
            axis.barh(y, _scaled(resource, nominal), color="none", edgecolor="#333333", height=0.7)
            if limit:
                axis.barh(
                    y,
                    _scaled(resource, limit),
                    left=_scaled(resource, nominal),
                    color="none",
                    edgecolor="#999999",
                    linestyle="--",
                    height=0.7,
                )
            axis.barh(y, _scaled(resource, reserved - borrowed), color="#4caf50", height=0.5)
            if borrowed:
                axis.barh(
                    y,
                    _scaled(resource, borrowed),
                    left=_scaled(resource, reserved - borrowed),
                    color="#ff9800",
                    height=0.5,
                )
            axis.text(
                _scaled(resource, max(nominal + limit, reserved)),
                y,
                f"  {row.pending} pending",
                va="center",
                fontsize=8,
            )
        axis.set_yticks(range(len(rows)), list(reversed(teams)))
        axis.set_title(
            f"{resource}{' (GiB)' if resource == 'memory' else ''}: reserved (green, borrowed orange) "
            "against nominal (box) and borrowing limit (dashed)",
            fontsize=9,
        )
        axis.margins(x=0.15)
    figure.tight_layout()
    figure.savefig(out, format="png", dpi=100)
    plt.close(figure)
