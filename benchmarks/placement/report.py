"""The benchmark's table (policies side by side) and the goals of ``auto`` against ``implicit``."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .metrics import PolicyMetrics

__all__ = ["goals", "table"]

BASELINE = "implicit"
CANDIDATE = "auto"
#: Every policy the goals are judged for, when the run has it: ``auto`` as configured by default
#: (``autoConstraint: required``) and with ``autoConstraint: preferred``, so one run decides the default.
CANDIDATES = (CANDIDATE, "auto-preferred")


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(results: Mapping[str, PolicyMetrics]) -> str:
    """One row per figure, one column per policy, in ``results``' order."""
    rows: list[tuple[str, Callable[[PolicyMetrics], str]]] = [
        ("jobs submitted", lambda m: str(m.jobs)),
        ("admitted", lambda m: str(m.admitted)),
        ("never admitted", lambda m: str(len(m.never_admitted))),
        ("  of them admitted by implicit", lambda m: _lost(results, m)),
        ("multi-node jobs admitted", lambda m: str(m.multi_node)),
        ("in smallest feasible domain", lambda m: _share(m.in_smallest_domain)),
        ("layer-3 domains per job (mean)", lambda m: _number(m.layer3_domains)),
        ("layer-2 domains per job (mean)", lambda m: _number(m.layer2_domains)),
        ("driver shares a rack with workers", lambda m: _share(m.driver_shares_rack)),
        ("GPU utilisation over the horizon", lambda m: _share(m.utilisation)),
        ("wait mean (s)", lambda m: _number(m.wait_mean, 1)),
        ("wait p95 (s)", lambda m: _number(m.wait_p95, 1)),
        ("jobs widened (steps)", lambda m: f"{m.widened} ({m.widening_steps})"),
        ("jobs with pods off their assignment", lambda m: str(m.off_assignment)),
        ("arrival to Workload, mean (s)", lambda m: _number(m.creation_lag_mean, 1)),
        ("arrival to Workload, max (s)", lambda m: _number(m.creation_lag_max, 1)),
    ]
    names = list(results)
    width = max(14, *(len(n) + 2 for n in names))
    lines = [f"{'':<38}" + "".join(f"{n:>{width}}" for n in names)]
    for label, cell in rows:
        lines.append(f"{label:<38}" + "".join(f"{cell(results[n]):>{width}}" for n in names))
    return "\n".join(lines)


def _lost(results: Mapping[str, PolicyMetrics], metrics: PolicyMetrics) -> str:
    baseline = results.get(BASELINE)
    if baseline is None:
        return "-"
    return str(len(set(metrics.never_admitted) - set(baseline.never_admitted)))


def goals(results: Mapping[str, PolicyMetrics]) -> str:
    """Issue 10's goals for each of :data:`CANDIDATES` in ``results`` (against ``implicit``, Kueue
    without a topology annotation), each ``met`` or ``missed`` with the margin; one block per
    candidate."""
    present = [name for name in CANDIDATES if name in results]
    if not present or BASELINE not in results:
        return f"goals: need both {CANDIDATE!r} and {BASELINE!r} in one run"
    return "\n".join(_goals(name, results[name], results[BASELINE]) for name in present)


def _goals(name: str, auto: PolicyMetrics, base: PolicyMetrics) -> str:
    lines = [f"goals for {name} (against {BASELINE}):"]

    def line(ok: bool, text: str) -> None:
        lines.append(f"  {'met   ' if ok else 'MISSED'} {text}")

    share = auto.in_smallest_domain
    line(
        share is not None and share >= 0.95,
        f"multi-node jobs in their smallest feasible domain >= 95 %: {_share(share)}",
    )
    lost = sorted(set(auto.never_admitted) - set(base.never_admitted))
    line(
        not lost,
        f"no job unadmitted that {BASELINE} admits: {len(lost)} such jobs"
        + (f" ({', '.join(lost[:8])}{', ...' if len(lost) > 8 else ''})" if lost else ""),
    )
    points = 100 * (base.utilisation - auto.utilisation)
    line(
        points <= 3.0,
        f"utilisation at most 3 points below {BASELINE}: {_share(auto.utilisation)} vs "
        f"{_share(base.utilisation)} ({abs(points):.1f} points {'below' if points > 0 else 'above'})",
    )
    if auto.wait_mean is None or base.wait_mean is None:
        line(False, "mean wait <= 1.1x: no admitted job to compare")
    else:
        ratio = auto.wait_mean / base.wait_mean if base.wait_mean > 0 else float("inf") if auto.wait_mean else 1.0
        line(
            ratio <= 1.1,
            f"mean wait <= 1.1x {BASELINE}'s: {auto.wait_mean:.1f} s vs {base.wait_mean:.1f} s ({ratio:.2f}x)",
        )
    return "\n".join(lines)
