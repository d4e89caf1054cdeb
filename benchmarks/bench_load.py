"""Steady load (issue 11, item 4(a)): AdmissionReviews at a fixed rate for a fixed time, open loop.

Three targets, each its own process(es) on 127.0.0.1, in turn:

1. ``no-op server``: the floor (``bench_admission.run_noop_server``: the same aiohttp, TLS context
   and body limit; decodes, echoes the uid, allows);
2. ``kgov serve``, one replica;
3. ``kgov serve`` x2: two replicas sharing the port with ``--reuse-port`` (SO_REUSEPORT: the kernel
   spreads new connections over the two processes, as a Service spreads them over pods).

The load is open-loop: request ``i`` is sent at ``start + i / rate`` whether or not the earlier ones
were answered (a server that falls behind sees requests queue, as it would behind an API server),
on a pool of at most ``--connections`` keep-alive connections. Latency is measured from each
request's scheduled send time to the last byte of its answer, so time spent waiting for a free
connection counts. Every answer is checked (HTTP 200, the uid echoed); anything else, a connection
error or no answer within ``--timeout`` is an error.

Run: ``python benchmarks/bench_load.py`` (500/s for 60 s per target: about 4 minutes);
``--rate``, ``--seconds``, ``--connections``, ``--only``. Only loopback is used; each phase stops by
itself after ``--seconds`` plus the answers still due (at most ``--timeout``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench_admission import (
    LOOPBACK,
    PLATFORM,
    Server,
    free_port,
    jobset_review,
    percentile,
    serving_pair,
    start_server,
    wait_healthy,
)
from timing import load_at_end, machine_at_start

TARGETS = ("no-op server", "kgov serve x1", "kgov serve x2")


@dataclass
class PhaseResult:
    name: str
    scheduled: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    late_starts: int = 0

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    @property
    def answered(self) -> int:
        return len(self.latencies_ms)

    def p(self, fraction: float) -> float:
        ordered = sorted(self.latencies_ms)
        return percentile(ordered, fraction) if ordered else float("nan")


async def open_loop(
    port: int, context: ssl.SSLContext, name: str, rate: float, seconds: float, connections: int, timeout: float
) -> PhaseResult:
    """Send ``rate × seconds`` JobSet CREATE reviews at ``rate`` per second; check every answer."""
    import aiohttp

    total = int(rate * seconds)
    uids = [str(uuid.uuid4()) for _ in range(total)]
    bodies = [json.dumps(jobset_review(uid)).encode() for uid in uids]
    result = PhaseResult(name, total, seconds)
    url = f"https://{LOOPBACK}:{port}/mutate"
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(ssl=context, limit=connections)
    client_timeout = aiohttp.ClientTimeout(total=timeout)

    async def one(session: aiohttp.ClientSession, index: int, due: float) -> None:
        try:
            async with session.post(url, data=bodies[index], headers=headers) as resp:
                answer = await resp.read()
                status = resp.status
        except TimeoutError:
            result.error("timeout")
            return
        except aiohttp.ClientError as exc:
            result.error(type(exc).__name__)
            return
        elapsed_ms = (time.perf_counter() - due) * 1000
        if status != 200:
            result.error(f"HTTP {status}")
        elif json.loads(answer)["response"]["uid"] != uids[index]:
            result.error("wrong uid")
        else:
            result.latencies_ms.append(elapsed_ms)

    async with aiohttp.ClientSession(connector=connector, timeout=client_timeout) as session:
        tasks: list[asyncio.Task[None]] = []
        start = time.perf_counter() + 0.05
        for index in range(total):
            due = start + index / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -0.010:
                result.late_starts += 1  # the client itself fell behind its schedule by over 10 ms
            tasks.append(asyncio.create_task(one(session, index, due)))
        await asyncio.wait(tasks, timeout=timeout + 5)
        for task in tasks:
            if not task.done():
                task.cancel()
                result.error("unfinished")
    return result


def kgov_command(port: int, directory: Path, reuse_port: bool) -> list[str]:
    return [
        sys.executable, "-m", "webhook.cli", "serve", "--platform", str(PLATFORM),
        "--tls-cert-file", str(directory / "tls.crt"), "--tls-private-key-file", str(directory / "tls.key"),
        "--host", LOOPBACK, "--port", str(port), "--metrics-port", str(free_port()), "--shutdown-delay", "0",
        *(["--reuse-port"] if reuse_port else []),
    ]  # fmt: skip


def start_target(name: str, directory: Path) -> list[Server]:
    port = free_port()
    if name == "no-op server":
        command = [sys.executable, str(Path(__file__).resolve().parent / "bench_admission.py"), "--noop-server",
                   str(port), str(directory / "tls.crt"), str(directory / "tls.key")]  # fmt: skip
        return [start_server(name, command, port, directory / "noop.log")]
    replicas = 2 if name.endswith("x2") else 1
    return [
        start_server(f"{name} #{i}", kgov_command(port, directory, replicas > 1), port, directory / f"kgov-{i}.log")
        for i in range(replicas)
    ]


def run_phase(name: str, directory: Path, context: ssl.SSLContext, args: argparse.Namespace) -> PhaseResult:
    servers = start_target(name, directory)
    try:

        async def phase() -> PhaseResult:
            for server in servers:
                await wait_healthy(server, context)
            for server in servers:  # the port answers once one replica is up: wait for each
                for _ in range(600):
                    if b'"serving"' in server.log.read_bytes() or server.process.poll() is not None:
                        break
                    await asyncio.sleep(0.1)
            # A short warm-up at the same rate: connections opened, code paths warm.
            await open_loop(servers[0].port, context, name, args.rate, min(3.0, args.seconds), args.connections, 5)
            return await open_loop(
                servers[0].port, context, name, args.rate, args.seconds, args.connections, args.timeout
            )

        return asyncio.run(phase())
    finally:
        for server in servers:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=500, help="AdmissionReviews per second (default 500)")
    parser.add_argument("--seconds", type=float, default=60, help="seconds of load per target (default 60)")
    parser.add_argument("--connections", type=int, default=32, help="most keep-alive connections (default 32)")
    parser.add_argument("--timeout", type=float, default=10, help="seconds an answer may take (default 10)")
    parser.add_argument("--only", choices=TARGETS, action="append", help="run only this target (repeatable)")
    args = parser.parse_args()
    limits = (("rate", args.rate, 1, 5000), ("seconds", args.seconds, 1, 600),
              ("connections", args.connections, 1, 256), ("timeout", args.timeout, 0.1, 60))  # fmt: skip
    for name, value, low, high in limits:
        if not low <= value <= high:
            parser.error(f"--{name} must be between {low:g} and {high:g}")

    print(machine_at_start("steady load"))
    targets = args.only or list(TARGETS)
    results: list[PhaseResult] = []
    with tempfile.TemporaryDirectory(prefix="kgov-load-") as scratch:
        directory = Path(scratch)
        context = serving_pair(directory)
        for name in targets:
            results.append(run_phase(name, directory, context, args))
    print(f"\nJobSet CREATE (4 pod templates) at {args.rate:g}/s for {args.seconds:g} s per target, open loop, "
          f"at most {args.connections} keep-alive connections, TLS on {LOOPBACK}")  # fmt: skip
    print(f"   {'target':16} {'sent':>7} {'answered':>9} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
          f" {'late':>6}")  # fmt: skip
    for r in results:
        worst = max(r.latencies_ms) if r.latencies_ms else float("nan")
        print(f"   {r.name:16} {r.scheduled:7} {r.answered:9} {sum(r.errors.values()):7} {r.p(0.5):8.2f}"
              f" {r.p(0.99):8.2f} {worst:8.2f} {r.late_starts:6}")  # fmt: skip
        if r.errors:
            print(f"      errors: {', '.join(f'{kind} {n}' for kind, n in sorted(r.errors.items()))}")
    floor = next((r for r in results if r.name == "no-op server"), None)
    if floor is not None and floor.latencies_ms:
        for r in results:
            if r is not floor and r.latencies_ms:
                p50, p99 = r.p(0.5) / floor.p(0.5), r.p(0.99) / floor.p(0.99)
                print(f"   ratio {r.name}/no-op: p50 {p50:.2f}x, p99 {p99:.2f}x")
    print("   (late: requests the client itself sent over 10 ms behind schedule; it shares the CPUs)")
    print(load_at_end())


if __name__ == "__main__":
    main()
