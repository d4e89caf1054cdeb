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
