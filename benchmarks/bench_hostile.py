"""Hostile clients against ``kgov serve``: normal admissions measured alone, then under attack, then after.

The attack (the probe of the "hostile and broken clients" issue), from a separate process:

- compressed-bomb clients (default 4), each sending, in a loop, 1 MiB of gzip that inflates to
  1 GiB (``Content-Encoding: gzip``);
- slow connections (default 2,000 kept open, new ones opened at most ``--rate`` a second): a
  third idle after the TLS handshake, a third trickling request headers (a byte a second), a
  third trickling a chunked body at 10 bytes a second; each reconnects when the server drops it.

Meanwhile this process sends normal admissions (an AdmissionReview CREATE of a JobSet with 4 pod
templates) on ``--concurrency`` keep-alive connections, as the API server does. The baseline is the
same load on the same server just before the attack, in the same run. ``kgov serve`` runs with its
default limits, as its own process; its memory is its resident set size (``/proc/<pid>/status``).

Run: ``python benchmarks/bench_hostile.py`` (about 80 s; ``--help`` for the knobs).
Only loopback is used; every loop is bounded in count and in time.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_admission import (
    LOOPBACK,
    PLATFORM,
    Latencies,
    free_port,
    jobset_review,
    serving_pair,
    start_server,
    wait_healthy,
)
from timing import machine_at_start

MIB = 1024 * 1024


# -- the attacker (a separate process) -------------------------------------------------------------
def gzip_bomb() -> bytes:
    """1,024 gzip members of 1 MiB of zeros each: about 1 MiB that inflates to 1 GiB."""
    return gzip.compress(b"\0" * MIB, compresslevel=9) * 1024


async def attack(port: int, ca_file: str, bombs: int, slow: int, seconds: float, rate: float) -> dict[str, int]:
    import aiohttp

    context = ssl.create_default_context(cafile=ca_file)
    stop_at = time.monotonic() + seconds
    stats: Counter[str] = Counter()
    bomb = gzip_bomb()
    next_slot = time.monotonic()

    async def pace() -> None:
        nonlocal next_slot
        now = time.monotonic()
        next_slot = max(next_slot, now) + 1 / rate
        await asyncio.sleep(next_slot - now)

    def left() -> float:
        return stop_at - time.monotonic()

    async def bomber() -> None:
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        connector = aiohttp.TCPConnector(ssl=context, force_close=True)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:
            while left() > 0:
                try:
                    async with session.post(f"https://{LOOPBACK}:{port}/mutate", data=bomb, headers=headers) as resp:
                        await resp.read()
                        stats[f"bomb answered {resp.status}"] += 1
                except (aiohttp.ClientError, OSError, TimeoutError):
                    stats["bomb cut"] += 1  # the server answered 415 and stopped reading
                    await asyncio.sleep(0.01)

    async def slow_connection(kind: int) -> None:
        while left() > 1:
            await pace()
            if left() <= 1:
                return
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(LOOPBACK, port, ssl=context), timeout=min(10, left())
                )
            except (OSError, TimeoutError, ssl.SSLError):
                stats["slow connect refused"] += 1
                continue
            stats["slow opened"] += 1
            try:
                if kind == 1:
                    writer.write(b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                elif kind == 2:
                    writer.write(b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n")
                while left() > 0:
                    if kind == 0:
                        if await asyncio.wait_for(reader.read(1024), left()) == b"":
                            break
                        continue
                    writer.write(b"X" if kind == 1 else b"1\r\n{\r\n")
                    await writer.drain()
                    await asyncio.sleep(1.0 if kind == 1 else 0.5)
                    if reader.at_eof():
                        break
                else:
                    continue
                stats["slow closed by the server"] += 1
            except (OSError, TimeoutError, ssl.SSLError):
                stats["slow closed by the server"] += 1
            finally:
                writer.transport.abort()

    tasks = [asyncio.create_task(bomber()) for _ in range(bombs)]
    tasks += [asyncio.create_task(slow_connection(index % 3)) for index in range(slow)]
    await asyncio.wait(tasks, timeout=seconds + 15)
    for task in tasks:
        task.cancel()
    return dict(stats)


# -- the measurement -------------------------------------------------------------------------------
def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    name: str
    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    rss_peak: float = 0.0
    seconds: float = 0.0
    server_cpu: float = 0.0  # seconds of CPU the server used during the phase


async def normal_load(
    phase: Phase, port: int, context: ssl.SSLContext, seconds: float, concurrency: int, pid: int
) -> None:
    """Admissions on keep-alive connections for ``seconds``; every answer checked (uid echoed)."""
    import aiohttp

    url = f"https://{LOOPBACK}:{port}/mutate"
    headers = {"Content-Type": "application/json"}
    stop_at = time.monotonic() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < stop_at:
            uid = str(uuid.uuid4())
            body = json.dumps(jobset_review(uid)).encode()
            started = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=headers) as resp:
                    answer = await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                phase.errors[type(exc).__name__] += 1
                await asyncio.sleep(0.01)
                continue
            phase.latencies_ms.append((time.perf_counter() - started) * 1000)
            if status != 200 or json.loads(answer)["response"]["uid"] != uid:
                phase.errors[f"HTTP {status}"] += 1
            await asyncio.sleep(0.002)  # an API server's pace, not a saturating load

    async def sample_memory() -> None:
        while time.monotonic() < stop_at:
            phase.rss_peak = max(phase.rss_peak, rss_mib(pid))
            await asyncio.sleep(0.25)

    connector = aiohttp.TCPConnector(ssl=context, limit=concurrency)
    started, cpu = time.monotonic(), cpu_seconds(pid)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:
        await asyncio.gather(sample_memory(), *(worker(session) for _ in range(concurrency)))
    phase.seconds = time.monotonic() - started
    phase.server_cpu = cpu_seconds(pid) - cpu


async def scrape(metrics_port: int) -> dict[str, float]:
    import aiohttp
    from prometheus_client.parser import text_string_to_metric_families

    async with aiohttp.ClientSession() as session, session.get(f"http://{LOOPBACK}:{metrics_port}/metrics") as resp:
        text = await resp.text()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def report(
    phases: list[Phase], attacker: dict[str, int], before: float, after: float, metrics: dict[str, float]
) -> None:
    print(
        f"   {'phase':22} {'requests':>8} {'errors':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
        f"{'server CPU':>10} {'peak RSS MiB':>12}"
    )
    figures = {}
    for phase in phases:
        lat = Latencies.of(phase.latencies_ms or [0.0])
        figures[phase.name] = lat
        errors = sum(phase.errors.values())
        cpu = phase.server_cpu / phase.seconds
        print(
            f"   {phase.name:22} {len(phase.latencies_ms):8d} {errors:6d} {lat.p50:7.2f} {lat.p99:7.2f} "
            f"{max(phase.latencies_ms or [0.0]):7.1f} {cpu:10.0%} {phase.rss_peak:12.0f}"
        )
        if phase.errors:
            print(f"      errors: {dict(phase.errors)}")
    base, hit = figures[phases[0].name], figures[phases[1].name]
    print(
        f"   ratio under attack / baseline: p50 {hit.p50 / base.p50:.2f}x, p99 {hit.p99 / base.p99:.2f}x "
        f"(goal: p99 under attack < 100 ms: {'met' if hit.p99 < 100 else 'NOT met'})"
    )
    print(
        f"   server RSS: {before:.0f} MiB before the attack, {phases[1].rss_peak:.0f} MiB peak during it, "
        f"{after:.0f} MiB after the attackers left ({after - before:+.0f} MiB)"
    )
    print(f"   attacker: {dict(sorted(attacker.items()))}")
    keys = [k for k in metrics if k.startswith(("kgov_http_refused_total", "kgov_connections_closed_total"))]
    print(
        "   server counters: "
        + ", ".join(
            f"{k.split('{')[0].removeprefix('kgov_')}{{{k.split('{')[1]} {metrics[k]:.0f}"
            for k in sorted(keys)
            if metrics[k]
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bombs", type=int, default=4, help="compressed-bomb clients (default 4)")
    parser.add_argument("--slow", type=int, default=2000, help="slow connections kept open (default 2000)")
    parser.add_argument("--rate", type=float, default=200.0, help="new slow connections per second, at most")
    parser.add_argument("--seconds", type=float, default=30.0, help="attack length (default 30)")
    parser.add_argument("--baseline-seconds", type=float, default=15.0, help="baseline and after phases (default 15)")
    parser.add_argument("--concurrency", type=int, default=2, help="normal admission connections (default 2)")
    parser.add_argument(
        "--attacker-nice",
        type=int,
        default=10,
        help="nice value of the attacker process (default 10; 0: same priority as the server)",
    )
    parser.add_argument("--attacker", nargs=2, metavar=("PORT", "CA"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    bounds = (
        ("bombs", args.bombs, 0, 64),
        ("slow", args.slow, 0, 10_000),
        ("seconds", args.seconds, 5, 600),
        ("baseline_seconds", args.baseline_seconds, 3, 600),
        ("concurrency", args.concurrency, 1, 64),
        ("rate", args.rate, 1, 5000),
    )
    for name, value, low, high in bounds:
        if not low <= value <= high:
            parser.error(f"--{name.replace('_', '-')} must be between {low} and {high}")
    if args.attacker:
        port, ca_file = args.attacker
        os.nice(args.attacker_nice)
        stats = asyncio.run(attack(int(port), ca_file, args.bombs, args.slow, args.seconds, args.rate))
        print(json.dumps(stats))
        return

    print(machine_at_start("hostile-client benchmark"))
    with tempfile.TemporaryDirectory(prefix="kgov-bench-") as scratch:
        directory = Path(scratch)
        context = serving_pair(directory)
        port, metrics_port = free_port(), free_port()
        command = [
            sys.executable,
            "-m",
            "webhook.cli",
            "serve",
            "--platform",
            str(PLATFORM),
            "--tls-cert-file",
            str(directory / "tls.crt"),
            "--tls-private-key-file",
            str(directory / "tls.key"),
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--metrics-port",
            str(metrics_port),
        ]
        server = start_server("kgov serve", command, port, directory / "kgov.log")
        try:
            asyncio.run(wait_healthy(server, context))
            pid = server.process.pid
            print(
                f"1. {args.concurrency} keep-alive connections of JobSet admissions; kgov serve with its default "
                f"limits; attack: {args.bombs} gzip-bomb clients + {args.slow} slow connections "
                f"(at most {args.rate:g} new/s) for {args.seconds:g} s, attacker at nice {args.attacker_nice}"
            )
            phases = [Phase("baseline (no attack)"), Phase("under attack"), Phase("after the attack")]
            asyncio.run(normal_load(Phase("warm-up"), port, context, 3, args.concurrency, pid))
            asyncio.run(normal_load(phases[0], port, context, args.baseline_seconds, args.concurrency, pid))
            before = rss_mib(pid)
            attacker = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--attacker",
                    str(port),
                    str(directory / "ca.crt"),
                    "--bombs",
                    str(args.bombs),
                    "--slow",
                    str(args.slow),
                    "--seconds",
                    str(args.seconds),
                    "--rate",
                    str(args.rate),
                    "--attacker-nice",
                    str(args.attacker_nice),
                ],
                stdout=subprocess.PIPE,
            )
            asyncio.run(normal_load(phases[1], port, context, args.seconds, args.concurrency, pid))
            output, _ = attacker.communicate(timeout=60)
            attack_stats = json.loads(output.decode().strip().splitlines()[-1])
            time.sleep(3)  # the server's last aborts, and its memory trim a second after them
            after = rss_mib(pid)
            asyncio.run(normal_load(phases[2], port, context, args.baseline_seconds, args.concurrency, pid))
            metrics = asyncio.run(scrape(metrics_port))
        finally:
            server.stop()
        report(phases, attack_stats, before, after, metrics)
        tracebacks = (directory / "kgov.log").read_text(errors="replace").count("Traceback")
        lines = (directory / "kgov.log").read_text(errors="replace").splitlines()
        not_json, failures = 0, Counter[str]()
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                not_json += 1
                continue
            if "exception" in event:  # the event and the exception's last line
                failures[f"{event.get('event')}: {str(event['exception']).strip().splitlines()[-1][:200]}"] += 1
        print(f"   server log: {len(lines)} lines, {not_json} not JSON, {tracebacks} with a traceback")
        for failure, count in failures.items():
            print(f"      {count} x {failure}")


if __name__ == "__main__":
    main()
