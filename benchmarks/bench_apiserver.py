"""Job creation through the real kube-apiserver: what our webhook adds to each create.

Brings up the e2e cluster (``e2e.devcluster``: etcd, kube-apiserver, controllers, Kueue, KWOK) in
a temporary state directory with the bundled platform applied, and runs two webhook servers, each
its own process on 127.0.0.1: ``kgov serve`` and a no-op webhook (``noop_webhook.py``: the same
aiohttp, TLS context and serving certificate; ``allowed`` with no patch). Three configurations
take turns, a round at a time:

* ``none``: no MutatingWebhookConfiguration of ours (Kueue's own webhooks only);
* ``no-op``: the chart's MutatingWebhookConfiguration (``helm template`` of
  ``helm/kueue-governor``: rules, matchConditions, timeout, failurePolicy, caBundle) calling the
  no-op webhook;
* ``kgov``: the same configuration calling ``kgov serve``.

After each switch a server-side dry-run create proves the configuration is the one the API
server calls. In each configuration: ``--sequential`` Jobs created one after the other, then
``--concurrent`` Jobs by ``--clients`` clients at once (aiohttp on keep-alive connections, the
admin's token). The creates are server-side dry runs (``dryRun=All``): the whole admission chain
runs, our webhook and Kueue's included (``sideEffects: None``), the object is validated, and
nothing is stored, so no Workload has to be made and deleted after each round. With ``--store``
the Jobs are stored and deleted after each round (Kueue then makes, and must finalize, a Workload
per Job: on 2 shared CPUs that clean-up takes longer than the measurement). Every Job carries
its team's queue label, so that Kueue treats the Jobs of the three configurations alike; our
webhook still plans every rule and adds the priority, placement and suspension. Latency is the
client's: request sent to answer read. Beside it, the API server's own time in the call to our
webhook (the mean of its histogram ``apiserver_admission_webhook_admission_duration_seconds``),
and the webhook server's CPU time per call, for the no-op and for ``kgov``: on a machine other
work shares, CPU time is what the wall time would be on an idle one.

    python benchmarks/bench_apiserver.py                 # about 8 minutes on 2 loaded CPUs, cluster start included
    python benchmarks/bench_apiserver.py --sequential 10 --concurrent 64 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apiserver_support import (
    JOBS,
    PRIORITY_LABEL,
    Api,
    Bench,
    BenchError,
    admission_breakdown,
    api_session,
    bench_cluster,
    delete_jobs,
    expected_labels,
    hold_cluster_queues,
    job,
    kgov_server,
    metric,
    noop_count,
    noop_server,
    register,
    webhook_call_totals,
    webhook_configuration,
)
from timing import load_at_end, machine_at_start

from e2e import devcluster
from e2e.helm_support import chart_registration

CONFIGURATIONS = ("none", "no-op", "kgov")
SWITCH_TIMEOUT_S = 60.0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


@dataclass
class Figures:
    sequential: list[float] = field(default_factory=list)  # ms per create
    concurrent: list[float] = field(default_factory=list)
    concurrent_seconds: float = 0.0
    round_p50s: list[float] = field(default_factory=list)  # sequential p50 of each round
    webhook_seconds: float = 0.0  # the API server's own time in calls to our webhook
    webhook_calls: int = 0
    server_cpu_seconds: float = 0.0  # CPU time of the configuration's webhook server process
    #: Over the sequential creates: the API server's seconds and calls per part (admission_breakdown).
    breakdown: dict[tuple[str, ...], list[float]] = field(default_factory=dict)
    #: Over the sequential creates: kgov serve's own handler time (kgov_admission_duration_seconds).
    handler_seconds: float = 0.0
    handler_calls: int = 0

    def cpu_ms_per_call(self) -> float:
        return 1000 * self.server_cpu_seconds / self.webhook_calls if self.webhook_calls else 0.0

    def webhook_mean_ms(self) -> float:
        return 1000 * self.webhook_seconds / self.webhook_calls if self.webhook_calls else 0.0

    def throughput(self) -> float:
        return len(self.concurrent) / self.concurrent_seconds if self.concurrent_seconds else 0.0


async def switch(
    api: Api, bench: Bench, configuration: dict[str, Any] | None, name: str, noop_port: int, namespace: str, run: str
) -> float:
    """Register ``configuration`` and wait until a dry-run create shows the API server calls what
    it names (``kgov``: the priority label appears; ``no-op``: no label, the no-op server counts
    one more review; ``none``: neither). Returns the seconds it took."""
    started = time.monotonic()
    await register(api, configuration)
    queue = expected_labels(bench.policies(), namespace)
    body = job(f"probe-{secrets.token_hex(4)}", namespace, run, queue["kueue.x-k8s.io/queue-name"])
    while time.monotonic() - started < SWITCH_TIMEOUT_S:
        before = await asyncio.to_thread(noop_count, noop_port, bench.context)
        created = await api.request("POST", JOBS.format(namespace=namespace), body, {"dryRun": "All"})
        after = await asyncio.to_thread(noop_count, noop_port, bench.context)
        labelled = PRIORITY_LABEL in (created["metadata"].get("labels") or {})
        if (name, labelled, after > before) in {("kgov", True, False), ("no-op", False, True), ("none", False, False)}:
            return time.monotonic() - started
        await asyncio.sleep(0.2)
    raise BenchError(f"the API server did not switch to the configuration {name!r} in {SWITCH_TIMEOUT_S:.0f}s")


async def create_sequential(
    api: Api, namespace: str, queue: str, run: str, prefix: str, count: int, params: dict[str, str]
) -> list[float]:
    latencies = []
    path = JOBS.format(namespace=namespace)
    for index in range(count):
        body = job(f"{prefix}-s{index:04d}", namespace, run, queue)
        started = time.perf_counter()
        await api.request("POST", path, body, params)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def create_concurrent(
    api: Api, namespace: str, queue: str, run: str, prefix: str, count: int, clients: int, params: dict[str, str]
) -> tuple[list[float], float]:
    latencies: list[float] = []
    path = JOBS.format(namespace=namespace)
    bodies = [job(f"{prefix}-c{index:04d}", namespace, run, queue) for index in range(count)]

    async def client() -> None:
        while bodies:
            body = bodies.pop()
            started = time.perf_counter()
            await api.request("POST", path, body, params)
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, time.perf_counter() - started


async def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Figures]:
    run = secrets.token_hex(4)
    kgov_port, metrics_port, noop_port = devcluster._free_ports(3)
    ca_pem = devcluster.Paths(bench.root).ca_crt.read_bytes()
    chart = await asyncio.to_thread(chart_registration, "https://127.0.0.1:1/mutate", "Fail", ca_pem)
    configurations: dict[str, dict[str, Any] | None] = {
        "none": None,
        "no-op": webhook_configuration(chart, noop_port, "Fail"),
        "kgov": webhook_configuration(chart, kgov_port, "Fail"),
    }
    servers = [kgov_server(bench.root, bench.platform, kgov_port, metrics_port), noop_server(bench.root, noop_port)]
    servers_by_name = {"kgov": servers[0], "no-op": servers[1]}
    figures = {name: Figures() for name in CONFIGURATIONS}
    webhook = str(webhook_configuration(chart, kgov_port, "Fail")["webhooks"][0]["name"])
    queue = expected_labels(bench.policies(), args.namespace)["kueue.x-k8s.io/queue-name"]
    params = {} if args.store else {"dryRun": "All"}
    try:
        for server in servers:
            await asyncio.to_thread(server.start, bench.context)
        async with api_session(bench.info, bench.token, connections=args.clients) as api:
            held = await hold_cluster_queues(api)
            print(f"ClusterQueues held (no admission, no pods): {', '.join(held)}")
            for round_number in range(args.rounds + 1):  # round 0 warms every path up
                scale = 1 if round_number else 5
                order = CONFIGURATIONS[round_number % 3 :] + CONFIGURATIONS[: round_number % 3]
                for name in order:
                    took = await switch(api, bench, configurations[name], name, noop_port, args.namespace, run)
                    calls_before = await webhook_call_totals(api, webhook)
                    serving = servers_by_name.get(name)
                    cpu_before = serving.cpu_seconds() if serving else 0.0
                    prefix = f"b{run}-{round_number}-{name.replace('-', '')}"
                    parts_before = await admission_breakdown(api)
                    handler_before = await asyncio.to_thread(handler_totals, metrics_port)
                    sequential = await create_sequential(
                        api, args.namespace, queue, run, prefix, max(1, args.sequential // scale), params
                    )
                    parts_after = await admission_breakdown(api)
                    handler_after = await asyncio.to_thread(handler_totals, metrics_port)
                    concurrent, seconds = await create_concurrent(
                        api,
                        args.namespace,
                        queue,
                        run,
                        prefix,
                        max(1, args.concurrent // scale),
                        args.clients,
                        params,
                    )
                    calls_after = await webhook_call_totals(api, webhook)
                    cpu = (serving.cpu_seconds() - cpu_before) if serving else 0.0
                    label = f"round {round_number}" if round_number else "warm-up"
                    print(
                        f"   {label:8} {name:6} switched in {took:4.1f} s; sequential p50 "
                        f"{percentile(sequential, 0.5):6.2f} ms; {args.clients} clients p50 "
                        f"{percentile(concurrent, 0.5):6.2f} ms; load {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
                    if round_number:
                        figures[name].sequential += sequential
                        figures[name].concurrent += concurrent
                        figures[name].concurrent_seconds += seconds
                        figures[name].round_p50s.append(percentile(sequential, 0.5))
                        figures[name].webhook_seconds += calls_after[0] - calls_before[0]
                        figures[name].webhook_calls += calls_after[1] - calls_before[1]
                        figures[name].server_cpu_seconds += cpu
                        for key, (seconds_after, count_after) in parts_after.items():
                            seconds_before, count_before = parts_before.get(key, (0.0, 0))
                            part = figures[name].breakdown.setdefault(key, [0.0, 0.0])
                            part[0] += seconds_after - seconds_before
                            part[1] += count_after - count_before
                        if name == "kgov":
                            figures[name].handler_seconds += handler_after[0] - handler_before[0]
                            figures[name].handler_calls += int(handler_after[1] - handler_before[1])
                if args.store:
                    await delete_jobs(api, [args.namespace], run, timeout=600)
            await register(api, None)
        for server in servers:
            if not server.alive():
                raise BenchError(f"{server.name} died during the run: {server.tail()}")
    finally:
        for server in servers:
            server.stop()
    return figures


def handler_totals(metrics_port: int) -> tuple[float, float]:
    """``kgov serve``'s own time in its handler: seconds and calls (``kgov_admission_duration_seconds``)."""
    url = f"http://127.0.0.1:{metrics_port}"
    return metric(url, "kgov_admission_duration_seconds_sum"), metric(url, "kgov_admission_duration_seconds_count")


def report_breakdown(figures: dict[str, Figures], args: argparse.Namespace) -> None:
    """Where a sequential create's time goes, by the API server's histograms: mean ms per create."""
    creates = {name: len(figures[name].sequential) or 1 for name in CONFIGURATIONS}
    keys = sorted({key for name in CONFIGURATIONS for key in figures[name].breakdown})
    print(
        f"\n   where a sequential create's time goes ({args.rounds * args.sequential} creates per configuration; "
        "the API server's histograms, mean ms per create, calls per create in parentheses):"
    )
    print(f"   {'part':78} {'none':>13} {'no-op':>13} {'kgov':>13} {'kgov-no-op':>10}")
    for key in keys:
        cells, means = [], {}
        for name in CONFIGURATIONS:
            seconds, count = figures[name].breakdown.get(key, [0.0, 0.0])
            means[name] = 1000 * seconds / creates[name]
            cells.append(f"{means[name]:7.3f} ({count / creates[name]:.1f})")
        if not any(figures[name].breakdown.get(key, [0, 0])[1] for name in CONFIGURATIONS):
            continue
        added = means["kgov"] - means["no-op"]
        print(f"   {' '.join(key):78} {cells[0]:>13} {cells[1]:>13} {cells[2]:>13} {added:+10.3f}")
    kgov = figures["kgov"]
    if kgov.handler_calls:
        print(
            f"   kgov serve's own handler time (kgov_admission_duration_seconds, mean): "
            f"{1000 * kgov.handler_seconds / kgov.handler_calls:.3f} ms ({kgov.handler_calls} calls)"
        )


def report(figures: dict[str, Figures], args: argparse.Namespace) -> None:
    print(
        f"\nJob creates through kube-apiserver: {args.rounds} rounds x ({args.sequential} sequential + "
        f"{args.concurrent} by {args.clients} clients) per configuration, configurations taking turns"
    )
    print(
        f"   {'configuration':14} {'seq p50 ms':>10} {'seq p99 ms':>10} {'conc p50 ms':>11} {'conc p99 ms':>11}"
        f" {'creates/s':>9}   sequential p50 per round"
    )
    for name in CONFIGURATIONS:
        f = figures[name]
        rounds = ", ".join(f"{value:.2f}" for value in f.round_p50s)
        print(
            f"   {name:14} {percentile(f.sequential, 0.5):10.2f} {percentile(f.sequential, 0.99):10.2f} "
            f"{percentile(f.concurrent, 0.5):11.2f} {percentile(f.concurrent, 0.99):11.2f} {f.throughput():9.0f}"
            f"   {rounds}"
        )
    for ours, floor in (("kgov", "no-op"), ("no-op", "none")):
        a, b = figures[ours], figures[floor]
        parts = []
        for label, x, y in (
            ("sequential", a.sequential, b.sequential),
            (f"{args.clients} clients", a.concurrent, b.concurrent),
        ):
            p50 = percentile(x, 0.5) - percentile(y, 0.5)
            p99 = percentile(x, 0.99) - percentile(y, 0.99)
            ratio = percentile(x, 0.5) / percentile(y, 0.5)
            parts.append(f"{label} p50 {p50:+.2f} ms ({ratio:.2f}x), p99 {p99:+.2f} ms")
        print(f"   added by {ours} over {floor}: " + "; ".join(parts))
    added = percentile(figures["kgov"].sequential, 0.5) - percentile(figures["no-op"].sequential, 0.5)
    added_concurrent = percentile(figures["kgov"].concurrent, 0.5) - percentile(figures["no-op"].concurrent, 0.5)
    verdict = "met" if max(added, added_concurrent) <= 1.0 else "not met"
    print(
        f"   goal: kgov adds <= 1 ms at p50 over the no-op webhook: {verdict} "
        f"(sequential {added:+.2f} ms, {args.clients} clients {added_concurrent:+.2f} ms)"
    )
    calls = ", ".join(
        f"{name} {figures[name].webhook_mean_ms():.2f} ms ({figures[name].webhook_calls} calls)"
        for name in ("no-op", "kgov")
    )
    call, call_floor = figures["kgov"].webhook_mean_ms(), figures["no-op"].webhook_mean_ms()
    print(
        f"   the API server's own time in the webhook call (apiserver_admission_webhook_admission_duration_seconds, "
        f"mean): {calls}; kgov {call - call_floor:+.2f} ms ({call / call_floor if call_floor else float('nan'):.2f}x)"
    )
    cpu, cpu_floor = figures["kgov"].cpu_ms_per_call(), figures["no-op"].cpu_ms_per_call()
    print(
        f"   the webhook server's CPU time per call (/proc/<pid>/stat over its turns, background work included): "
        f"no-op {cpu_floor:.2f} ms, kgov {cpu:.2f} ms; kgov {cpu - cpu_floor:+.2f} ms "
        f"({cpu / cpu_floor if cpu_floor else float('nan'):.2f}x)"
    )
    spread = statistics.pstdev(figures["none"].round_p50s) if len(figures["none"].round_p50s) > 1 else 0.0
    print(f"   spread of the baseline's sequential p50 across rounds: {spread:.2f} ms (standard deviation)")
    report_breakdown(figures, args)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="1x1x2x2", help="fake nodes SxBxRxH (default 4 nodes)")
    parser.add_argument("--namespace", default="hyperpod-ns-research", help="team namespace of the Jobs")
    parser.add_argument("--sequential", type=int, default=30, help="sequential creates per configuration per round")
    parser.add_argument("--concurrent", type=int, default=96, help="concurrent creates per configuration per round")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients")
    parser.add_argument("--rounds", type=int, default=4, help="measured rounds (after one warm-up round)")
    parser.add_argument(
        "--store",
        action="store_true",
        help="store the Jobs (and delete them after each round) instead of server-side dry-run creates",
    )
    args = parser.parse_args()
    for name, value, limit in (
        ("sequential", args.sequential, 2000),
        ("concurrent", args.concurrent, 5000),
        ("clients", args.clients, 128),
        ("rounds", args.rounds, 9),
    ):
        if not 1 <= value <= limit:
            parser.error(f"--{name} must be between 1 and {limit}")
    print(machine_at_start("creates through kube-apiserver"))
    print(
        f"   parameters: shape {args.shape}, namespace {args.namespace}, sequential {args.sequential}, "
        f"concurrent {args.concurrent}, clients {args.clients}, rounds {args.rounds}, "
        f"{'stored creates' if args.store else 'server-side dry-run creates'}"
    )
    with tempfile.TemporaryDirectory(prefix="kgov-bench-") as state:
        started = time.monotonic()
        with bench_cluster(Path(state), args.shape) as bench:
            print(f"cluster up with the bundled platform in {time.monotonic() - started:.0f} s", flush=True)
            figures = asyncio.run(measure(bench, args))
    report(figures, args)
    print(load_at_end())
    return 0


if __name__ == "__main__":
    sys.exit(main())
