"""A steady stream of dry-run Job creations across the team namespaces, measured per window.

Used by the chart's real-node events (:mod:`e2e.test_chart_real_node`): while something happens to
the chart's pods (a certificate rotation, an eviction, a killed server process), the stream keeps
creating Jobs (``dryRun=All``) at a fixed rate, open loop (a slow answer does not slow the next
creation), in every team namespace in turn, and records each creation's outcome and round-trip
time. A creation *fails* when the API server refuses it (the webhook unreachable with
``failurePolicy: Fail``, or the fail-safe policy refusing an unlabelled Job) and is *unlabelled*
when it is stored without its team's queue label.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.dynamic import DynamicClient

from e2e import support

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

#: Team namespace → the queue label the chart's webhook gives a plain Job there (the bundled
#: platform, ``helm/kueue-governor/ci/platform-values.yaml``).
TEAM_QUEUES = {
    "hyperpod-ns-research": "hyperpod-ns-research-localqueue",
    "hyperpod-ns-inference": "hyperpod-ns-inference-localqueue",
    "hyperpod-ns-data-science": "hyperpod-ns-data-science-localqueue",
}


def plain_job(name: str, namespace: str) -> dict[str, Any]:
    """A one-pod Job without a queue label (the webhook adds it)."""
    template = {"spec": support.pause_pod_spec(gpus=0, cpu="100m")}
    return support.job_manifest(name, namespace, 1, template)


@dataclass(frozen=True)
class Creation:
    """One creation: when it started (monotonic seconds), its round trip (seconds), its outcome
    (``ok``, ``failed`` or ``unlabelled``) and the refusal's message when it failed."""

    started: float
    seconds: float
    outcome: str
    message: str = ""


@dataclass(frozen=True)
class WindowStats:
    """The creations started within a window: counts, the achieved rate (creations per second of
    the window) and the 50th and 99th percentile round trips (milliseconds)."""

    attempted: int
    failed: int
    #: failed because the connection broke under the call (reset, EOF): one the API server was
    #: waiting on when the server process died (it does not send a POST again).
    broken: int
    unlabelled: int
    rate: float
    p50_ms: float
    p99_ms: float
    failures: tuple[str, ...]

    def row(self) -> str:
        return (
            f"attempted {self.attempted} at {self.rate:.1f}/s, failed {self.failed} ({self.broken} broken), "
            f"unlabelled {self.unlabelled}, p50 {self.p50_ms:.0f} ms, p99 {self.p99_ms:.0f} ms"
        )


def broken_connection(message: str) -> bool:
    """Whether a refusal says the webhook's connection broke under the call (not: refused, timed
    out, or an answer)."""
    return "connection reset by peer" in message or message.endswith(": EOF") or ": EOF'" in message


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


@dataclass
class CreationStream:
    """Dry-run Job creations at ``rate`` per second, spread over :data:`TEAM_QUEUES`' namespaces.

    ``async with stream:`` runs it; :meth:`stats` summarises the creations started between two
    monotonic times. At most ``concurrency`` creations are in flight (a stalled API server makes
    the stream fall behind rather than pile up requests; the achieved rate shows it)."""

    dynamic: DynamicClient
    rate: float = 25.0
    #: creations started together, ``burst / rate`` seconds apart (several at once make the API
    #: server open several connections to the webhook, over both pods).
    burst: int = 1
    concurrency: int = 32
    creations: list[Creation] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def _create(self, namespace: str, slots: asyncio.Semaphore) -> None:
        started = time.monotonic()
        outcome, message = "ok", ""
        try:
            body = plain_job(f"stream-{secrets.token_hex(4)}", namespace)
            result = await support.create_with_warnings(self.dynamic, body, True)
        except support.Refused as refused:
            outcome, message = "failed", str(refused)
        except Exception as error:  # a transport error fails the creation too
            outcome, message = "failed", f"{type(error).__name__}: {error}"
        else:
            if result.obj["metadata"].get("labels", {}).get(QUEUE_LABEL) != TEAM_QUEUES[namespace]:
                outcome = "unlabelled"
        finally:
            slots.release()
        self.creations.append(Creation(started, time.monotonic() - started, outcome, message))

    async def _run(self) -> None:
        slots = asyncio.Semaphore(self.concurrency)
        namespaces = list(TEAM_QUEUES)
        pending: set[asyncio.Task[None]] = set()
        interval = self.burst / self.rate
        due = time.monotonic()
        index = 0
        while not self._stop.is_set():
            for _ in range(self.burst):
                await slots.acquire()
                task = asyncio.create_task(self._create(namespaces[index % len(namespaces)], slots))
                pending.add(task)
                task.add_done_callback(pending.discard)
                index += 1
            due += interval
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        if pending:
            await asyncio.wait(pending)

    async def __aenter__(self) -> CreationStream:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *_: object) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    def stats(self, start: float, end: float) -> WindowStats:
        """The creations started in ``[start, end)`` (monotonic seconds)."""
        window = [c for c in self.creations if start <= c.started < end]
        latencies = [c.seconds * 1000 for c in window]
        return WindowStats(
            attempted=len(window),
            failed=sum(c.outcome == "failed" for c in window),
            broken=sum(c.outcome == "failed" and broken_connection(c.message) for c in window),
            unlabelled=sum(c.outcome == "unlabelled" for c in window),
            rate=len(window) / (end - start) if end > start else 0.0,
            p50_ms=percentile(latencies, 0.50),
            p99_ms=percentile(latencies, 0.99),
            failures=tuple(c.message for c in window if c.outcome == "failed")[:5],
        )
