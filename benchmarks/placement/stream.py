"""The seeded stream of jobs the placement benchmark submits: sizes, run times and arrivals.

Pure: the same :class:`StreamParameters` (seed included) always give the same jobs, so every
policy of one run sees exactly the same stream.

A job is a driver (one pod) and ``workers`` pods, all asking for ``gpus_per_pod`` GPUs:

- whole-node jobs of ``nodes`` nodes (a size drawn from :data:`NODE_SIZES`, capped at the
  cluster's node count): one driver and ``nodes - 1`` workers of 8 GPUs each (a 1-node job is its
  driver alone);
- sub-node jobs (a share ``small_share`` of the stream): pods of 1, 2 or 4 GPUs, a driver and
  1 to ``8 / gpus - 1`` workers, so the job fits on one node.

Run times are log-uniform between ``min_runtime`` and ``max_runtime`` seconds; arrivals are a
Poisson process whose rate gives an offered load of ``load`` (node-seconds asked per node-second
of the cluster over the horizon, counting 8-GPU nodes).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["NODE_SIZES", "Job", "StreamParameters", "describe_stream", "make_stream"]

#: Whole-node job sizes (nodes) and their relative weights.
NODE_SIZES: tuple[tuple[int, float], ...] = ((1, 15), (2, 18), (4, 18), (8, 14), (16, 10), (32, 6), (64, 4))
SMALL_GPUS = (1, 2, 4)


@dataclass(frozen=True)
class Job:
    """One job of the stream.

    ``arrival`` and ``runtime`` are seconds (from the start of the stream; of each pod's run);
    ``workers`` excludes the driver, so the job has ``workers + 1`` pods.
    """

    index: int
    arrival: float
    runtime: int
    gpus_per_pod: int
    workers: int

    @property
    def name(self) -> str:
        return f"job-{self.index:04d}"

    @property
    def pods(self) -> int:
        return self.workers + 1

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod


@dataclass(frozen=True)
class StreamParameters:
    """What the stream is drawn from (seconds, GPUs per node, nodes)."""

    seed: int = 1
    nodes: int = 256
    gpus_per_node: int = 8
    horizon: float = 300.0
    load: float = 0.9
    min_runtime: int = 15
    max_runtime: int = 120
    max_job_nodes: int = 64
    small_share: float = 0.2

    def describe(self) -> str:
        return (
            f"seed {self.seed}, horizon {self.horizon:.0f} s, offered load {self.load:.2f}, run times log-uniform "
            f"{self.min_runtime}-{self.max_runtime} s, job sizes 1-{min(self.max_job_nodes, self.nodes)} nodes "
            f"(weights {', '.join(f'{n}:{w:g}' for n, w in NODE_SIZES)}), {self.small_share:.0%} sub-node jobs"
        )


def _size(rng: random.Random, parameters: StreamParameters) -> tuple[int, int]:
    """(gpus per pod, workers) of one job."""
    if rng.random() < parameters.small_share:
        gpus = rng.choice(SMALL_GPUS)
        return gpus, rng.randint(1, parameters.gpus_per_node // gpus - 1)
    cap = min(parameters.max_job_nodes, parameters.nodes)
    sizes = [(n, w) for n, w in NODE_SIZES if n <= cap]
    nodes = rng.choices([n for n, _ in sizes], weights=[w for _, w in sizes])[0]
    return parameters.gpus_per_node, nodes - 1


def make_stream(parameters: StreamParameters) -> list[Job]:
    """The jobs arriving in ``[0, horizon)``, in arrival order.

    Raises:
        ValueError: a parameter out of range (its name and value in the message).
    """
    if parameters.nodes < 1 or parameters.horizon <= 0 or parameters.load <= 0:
        raise ValueError(f"nodes, horizon and load must be positive: {parameters}")
    if not 1 <= parameters.min_runtime <= parameters.max_runtime:
        raise ValueError(
            f"need 1 <= min_runtime <= max_runtime, got {parameters.min_runtime}, {parameters.max_runtime}"
        )
    rng = random.Random(parameters.seed)
    # Draw the sizes and run times first to know the mean work per job, then the arrival rate.
    draft = []
    log_low, log_high = math.log(parameters.min_runtime), math.log(parameters.max_runtime)
    work = 0.0
    budget = parameters.load * parameters.nodes * parameters.horizon  # node-seconds offered
    while work < budget:
        gpus, workers = _size(rng, parameters)
        runtime = round(math.exp(rng.uniform(log_low, log_high)))
        draft.append((gpus, workers, runtime))
        work += (workers + 1) * gpus / parameters.gpus_per_node * runtime
    # Poisson arrivals: sorted uniform times over the horizon (the same law, given the count).
    times = sorted(rng.uniform(0, parameters.horizon) for _ in draft)
    return [
        Job(index=i, arrival=round(t, 1), runtime=runtime, gpus_per_pod=gpus, workers=workers)
        for i, (t, (gpus, workers, runtime)) in enumerate(zip(times, draft, strict=True))
    ]


def describe_stream(jobs: Sequence[Job]) -> str:
    """One line on ``jobs``: their count, pods and GPU-seconds, and how many of each size
    (``4 nodes`` for whole-node jobs, ``3x2GPU`` for sub-node ones), whole-node sizes first."""
    sizes = Counter(f"{j.pods}x{j.gpus_per_pod}GPU" if j.gpus_per_pod < 8 else f"{j.pods} nodes" for j in jobs)
    pods = sum(j.pods for j in jobs)
    gpu_seconds = sum(j.gpus * j.runtime for j in jobs)
    order = sorted(sizes, key=lambda s: (("GPU" in s), int(s.split()[0].split("x")[0])))
    return f"{len(jobs)} jobs, {pods} pods, {gpu_seconds:,} GPU-seconds asked; " + ", ".join(
        f"{s}: {sizes[s]}" for s in order
    )
