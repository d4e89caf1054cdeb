"""Figures over several runs (seeds and cluster shapes): each seed's value, their spread, the ratio
to ``implicit`` of the same run, and the target of a candidate policy judged on every run.

A *run* is one seed's stream on one cluster shape, every policy on it (a fresh cluster each,
one after the other); :data:`RunKey` names it ``(shape, seed)``. Ratios and differences are
always taken within a run (the candidate against ``implicit`` on the same stream, measured minutes
apart on the same machine), never between runs, so that the machine's load and the stream's luck
cancel as far as they can; the spread over seeds then shows how far one seed can move a figure,
and a target *holds* only when every run meets it, so no single lucky seed carries it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .metrics import PolicyMetrics

__all__ = ["TARGET", "RunKey", "Spread", "Target", "candidates", "ratio", "spread", "summary", "verdict"]

BASELINE = "implicit"
#: (cluster shape ``SxBxRxH``, seed) of one run.
RunKey = tuple[str, int]


@dataclass(frozen=True)
class Target:
    """What a candidate must reach against ``implicit`` in each run (shares 0..1, ratios, points)."""

    locality: float = 0.90  # multi-node jobs in their smallest feasible domain, at least
    mean_wait_ratio: float = 1.05  # mean wait, at most this times implicit's
    p95_wait_ratio: float = 1.5  # p95 wait, at most this times implicit's
    utilisation_points: float = 2.0  # GPU utilisation, at most this many points below implicit's


#: Issue 26's target for ``auto`` with a patience.
TARGET = Target()


@dataclass(frozen=True)
class Spread:
    """Values of one figure over runs, and their min, max, mean and sample standard deviation
    (0 for one value)."""

    values: tuple[float, ...]
    low: float
    high: float
    mean: float
    stdev: float


def spread(values: Sequence[float | None]) -> Spread | None:
    """The :class:`Spread` of the values that are not None; None when none is."""
    present = tuple(v for v in values if v is not None)
    if not present:
        return None
    finite = [v for v in present if math.isfinite(v)]
    stdev = statistics.stdev(present) if len(finite) == len(present) and len(present) > 1 else 0.0
    if len(finite) != len(present):
        stdev = math.inf
    return Spread(present, min(present), max(present), statistics.fmean(present), stdev)


def ratio(candidate: float | None, base: float | None) -> float | None:
    """``candidate / base``; 1 when both are 0, infinity when only ``base`` is; None when either is
    missing (no admitted job to average)."""
    if candidate is None or base is None:
        return None
    if base == 0:
        return 1.0 if candidate == 0 else math.inf
    return candidate / base


def lost(candidate: PolicyMetrics, base: PolicyMetrics) -> int:
    """Jobs ``base`` admitted and ``candidate`` did not."""
    return len(set(candidate.never_admitted) - set(base.never_admitted))


def candidates(runs: Mapping[RunKey, Mapping[str, PolicyMetrics]]) -> list[str]:
    """The ``auto`` policies present in every run (in the first run's order)."""
    first = next(iter(runs.values()), {})
    return [name for name in first if name.startswith("auto") and all(name in r for r in runs.values())]


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _times(value: float | None) -> str:
    return "-" if value is None else "inf" if math.isinf(value) else f"{value:.2f}x"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _count(value: float | None) -> str:
    return "-" if value is None else f"{round(value, 1):g}"


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}"


Figure = Callable[[PolicyMetrics], float | None]
Against = Callable[[PolicyMetrics, PolicyMetrics], float | None]


def _rows(
    shape_runs: Mapping[int, Mapping[str, PolicyMetrics]], names: Sequence[str], extra: Sequence[str]
) -> list[tuple[str, list[float | None], Callable[[float | None], str]]]:
    """(label, per-seed values, format) of every row of one shape's table."""
    figures: list[tuple[str, Figure, Callable[[float | None], str], Against | None, str]] = [
        ("in smallest feasible domain", lambda m: m.in_smallest_domain, _share, None, ""),
        ("wait mean (s)", lambda m: m.wait_mean, _seconds, lambda c, b: ratio(c.wait_mean, b.wait_mean), "/"),
        ("wait p95 (s)", lambda m: m.wait_p95, _seconds, lambda c, b: ratio(c.wait_p95, b.wait_p95), "/"),
        (
            "GPU utilisation",
            lambda m: m.utilisation,
            _share,
            lambda c, b: 100 * (c.utilisation - b.utilisation),
            "-",
        ),
        ("jobs widened by the governor", lambda m: float(m.widened), _count, None, ""),
        (
            "never admitted",
            lambda m: float(len(m.never_admitted)),
            _count,
            lambda c, b: float(lost(c, b)),
            "lost",
        ),
    ]
    seeds = list(shape_runs)
    rows: list[tuple[str, list[float | None], Callable[[float | None], str]]] = []
    for label, figure, fmt, against, sign in figures:
        rows.append((label, [], fmt))
        for name in names:
            rows.append((f"  {name}", [figure(shape_runs[s][name]) for s in seeds], fmt))
        if against is None:
            continue
        for name in extra:
            compare: list[float | None] = [
                against(shape_runs[s][name], shape_runs[s][BASELINE]) if BASELINE in shape_runs[s] else None
                for s in seeds
            ]
            if sign == "/":
                rows.append((f"  {name} / {BASELINE}", compare, _times))
            elif sign == "-":
                rows.append((f"  {name} - {BASELINE} (points)", compare, _points))
            else:
                rows.append((f"  {name}, admitted by {BASELINE}", compare, fmt))
    return rows


def summary(runs: Mapping[RunKey, Mapping[str, PolicyMetrics]]) -> str:
    """One table per cluster shape: each figure per seed, then min, max, mean and standard
    deviation over the seeds; each candidate's ratio (or difference) to ``implicit`` of the same
    run under the figure. Then :func:`verdict` for each candidate."""
    shapes: dict[str, dict[int, Mapping[str, PolicyMetrics]]] = {}
    for (shape, seed), results in runs.items():
        shapes.setdefault(shape, {})[seed] = results
    names = [n for n in next(iter(runs.values()), {}) if all(n in r for r in runs.values())]
    extra = [n for n in candidates(runs) if any(BASELINE in r for r in runs.values())]
    blocks = []
    for shape, shape_runs in shapes.items():
        seeds = list(shape_runs)
        width = 11
        rows = _rows(shape_runs, names, extra)
        label_width = max(len(label) for label, _, _ in rows) + 2
        head = [f"seed {s}" for s in seeds] + ["min", "max", "mean", "stdev"]
        lines = [
            f"shape {shape}, seeds {', '.join(map(str, seeds))}",
            " " * label_width + "".join(f"{h:>{width}}" for h in head),
        ]
        for label, values, fmt in rows:
            if not values:
                lines.append(label)
                continue
            s = spread(values)
            cells = [fmt(v) for v in values]
            cells += [fmt(s.low), fmt(s.high), fmt(s.mean), _stdev(fmt, s.stdev)] if s else ["-"] * 4
            lines.append(f"{label:<{label_width}}" + "".join(f"{c:>{width}}" for c in cells))
        blocks.append("\n".join(lines))
    blocks += [verdict(runs, name) for name in extra]
    return "\n\n".join(blocks)


def _stdev(fmt: Callable[[float | None], str], value: float) -> str:
    if math.isinf(value):
        return "-"
    return fmt(value).removesuffix("x").removeprefix("+")


def verdict(runs: Mapping[RunKey, Mapping[str, PolicyMetrics]], name: str, target: Target = TARGET) -> str:
    """``name``'s target against ``implicit``: each criterion met in how many runs, its worst run
    and its mean over runs; the target *holds* when every run meets every criterion.

    Runs without ``implicit`` or ``name`` are left out (and counted as such)."""
    judged = {k: r for k, r in runs.items() if BASELINE in r and name in r}
    if not judged:
        return f"target for {name}: need both {name!r} and {BASELINE!r} in a run"
    criteria: list[tuple[str, Against, Callable[[float], bool], Callable[[float | None], str], bool]] = [
        (
            f"multi-node jobs in their smallest feasible domain >= {100 * target.locality:.0f} %",
            lambda c, b: c.in_smallest_domain,
            lambda v: v >= target.locality,
            _share,
            False,
        ),
        (
            f"mean wait <= {target.mean_wait_ratio:g}x {BASELINE}'s",
            lambda c, b: ratio(c.wait_mean, b.wait_mean),
            lambda v: v <= target.mean_wait_ratio,
            _times,
            True,
        ),
        (
            f"p95 wait <= {target.p95_wait_ratio:g}x {BASELINE}'s",
            lambda c, b: ratio(c.wait_p95, b.wait_p95),
            lambda v: v <= target.p95_wait_ratio,
            _times,
            True,
        ),
        (
            f"no job unadmitted that {BASELINE} admits",
            lambda c, b: float(lost(c, b)),
            lambda v: v == 0,
            lambda v: "-" if v is None else f"{_count(v)} jobs",
            True,
        ),
        (
            f"GPU utilisation at most {target.utilisation_points:g} points below {BASELINE}'s",
            lambda c, b: 100 * (c.utilisation - b.utilisation),
            lambda v: v >= -target.utilisation_points,
            _points,
            False,
        ),
    ]
    lines = []
    held = True
    for text, value, ok, fmt, high_is_worse in criteria:
        values = {key: value(r[name], r[BASELINE]) for key, r in judged.items()}
        met = [key for key, v in values.items() if v is not None and ok(v)]
        held = held and len(met) == len(judged)
        present = {k: v for k, v in values.items() if v is not None}
        if present:
            worst_key = (max if high_is_worse else min)(present, key=lambda k: present[k])
            s = spread(list(present.values()))
            assert s is not None
            detail = f"worst {fmt(present[worst_key])} ({worst_key[0]} seed {worst_key[1]}), mean {fmt(s.mean)}"
        else:
            detail = "no value"
        mark = "met   " if len(met) == len(judged) else "MISSED"
        lines.append(f"  {mark} {text}: in {len(met)} of {len(judged)} runs; {detail}")
    left_out = len(runs) - len(judged)
    seeds = ", ".join(map(str, sorted({k[1] for k in judged})))
    head = (
        f"target for {name} against {BASELINE}, over {_plural(len(judged), 'run')} "
        f"({_plural(len({k[0] for k in judged}), 'shape')} x seeds {seeds}"
        f"{f'; {left_out} runs without both left out' if left_out else ''}): "
        f"{'HOLDS in every run' if held else 'DOES NOT HOLD in every run'}"
    )
    return "\n".join([head, *lines])
