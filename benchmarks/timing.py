"""Timing shared by the benchmarks: medians of repeated runs, and what the machine was doing.

Imported by the ``bench_*.py`` scripts as a plain module (a script's own directory is on
``sys.path`` when it runs as ``python benchmarks/bench_x.py``).
"""

from __future__ import annotations

import os
import platform
import ssl
import statistics
import time
from collections.abc import Callable
from pathlib import Path


def median_times(run: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds of this process over ``repeat`` calls of ``run``
    (CPU time shows what the wall time would be on an idle machine)."""
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        run()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def machine_at_start(title: str) -> str:
    """The header line of a benchmark: ``kueue-governor {title}: Python 3.11.9, OpenSSL …, 2 CPUs,
    load average 0.42 at start`` (a load near the CPU count means other work shared the machine)."""
    return (
        f"kueue-governor {title}: Python {platform.python_version()}, {ssl.OPENSSL_VERSION}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start"
    )


def load_at_end() -> str:
    """The closing line of a benchmark: ``   1-minute load average at the end: 0.42 on 2 CPUs``."""
    return f"   1-minute load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"


def percentile(values: list[float], fraction: float) -> float:
    """The value at ``fraction`` (0-1) of ``values`` sorted, by nearest rank (``nan`` when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def ratio(value: float, baseline: float) -> float:
    """``value / baseline``; ``nan`` when the baseline is 0 (or not a number)."""
    return value / baseline if baseline else float("nan")


def median_ratio(values: list[float], baselines: list[float]) -> float:
    """The median of ``values[i] / baselines[i]``: each round's figure against the baseline's of
    the same round, so that a noisy moment shared by both cancels out. Raises ValueError when the
    lists differ in length; ``nan`` when empty."""
    if len(values) != len(baselines):
        raise ValueError(f"{len(values)} values for {len(baselines)} baselines")
    if not values:
        return float("nan")
    return statistics.median(ratio(value, baseline) for value, baseline in zip(values, baselines, strict=True))


def stat_cpu_seconds(stat: str, ticks_per_second: int) -> float:
    """User + system CPU seconds of a process from the text of its ``/proc/<pid>/stat``: fields 14
    (``utime``) and 15 (``stime``) in clock ticks (proc(5)), counted after the ``)`` that closes
    the command name (which may hold spaces). Raises ValueError on a text without them."""
    _, closed, rest = stat.rpartition(")")
    fields = rest.split()
    if not closed or len(fields) < 13:
        raise ValueError(f"not a /proc/<pid>/stat line: {stat[:80]!r}")
    return (int(fields[11]) + int(fields[12])) / ticks_per_second


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``); raises OSError
    when it does not exist."""
    return stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))


def cpu_ms_per_create(before: float, after: float, creates: int) -> float:
    """Milliseconds of a process's CPU per create: its CPU seconds ``after`` a batch minus
    ``before`` it, over the batch's ``creates``; ``nan`` for an empty batch. Raises ValueError
    when the CPU time went down (not the same process)."""
    if after < before:
        raise ValueError(f"CPU time went down ({before} s, then {after} s): not the same process")
    return 1000 * (after - before) / creates if creates > 0 else float("nan")
