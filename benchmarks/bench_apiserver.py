"""Job creation through the real kube-apiserver: what our webhook adds to each create, and how much
of that is changing the object rather than our computation.

Brings up the e2e cluster (``e2e.devcluster``: etcd, kube-apiserver, controllers, Kueue, KWOK) in
a temporary state directory with the bundled platform applied, and runs three webhook servers,
each its own process on 127.0.0.1: ``kgov serve``, a no-op webhook (``noop_webhook.py``: the same
aiohttp, TLS context and serving certificate; ``allowed`` with no patch) and a canned webhook (the
same program with ``--patch-file``: ``allowed`` with a fixed JSON Patch, no policy work). The
canned patch is ``kgov serve``'s own, taken once at the start: with the no-op configuration
registered, one dry-run create; the AdmissionReview the API server sent the no-op webhook (its
``GET /last``) is posted to ``kgov serve``, and the ``patch`` of its answer (base64, ``patchType:
JSONPatch``) is what the canned webhook answers every review with, the request's uid echoed. The
canned webhook's answer to that same review is checked to carry the very same patch string before
the rounds, and kgov's answer to it again after them. Four configurations take turns, a round at a
time, in a rotated order:

* ``none``: no MutatingWebhookConfiguration of ours (Kueue's own webhooks only);
* ``no-op``: the chart's MutatingWebhookConfiguration (``helm template`` of
  ``helm/kueue-governor``: rules, matchConditions, timeout, failurePolicy, caBundle) calling the
  no-op webhook;
* ``canned``: the same configuration calling the canned webhook;
* ``kgov``: the same configuration calling ``kgov serve``.

So ``canned - no-op`` is what changing the object costs the API server and Kueue (applying the
patch, the second pass of the mutating admission chain, Kueue's webhooks on the changed Job),
``kgov - canned`` what our own computation adds, and ``kgov - no-op`` the whole.

After each switch a server-side dry-run create proves the configuration is the one the API
server calls: the team's labels come back (``expected_labels``) for ``canned`` and ``kgov`` only,
and only the named server among the no-op and the canned one counts one more review (``GET
/count``). In each configuration: ``--sequential`` Jobs created one after the other, then
``--concurrent`` Jobs by ``--clients`` clients at once (aiohttp on keep-alive connections, the
admin's token). The creates are server-side dry runs (``dryRun=All``): the whole admission chain
runs, our webhook and Kueue's included (``sideEffects: None``), the object is validated, and
nothing is stored, so no Workload has to be made and deleted after each round. With ``--store``
the Jobs are stored and deleted after each round (Kueue then makes, and must finalize, a Workload
per Job: on 2 shared CPUs that clean-up takes longer than the measurement). Every Job carries
its team's queue label, so that Kueue treats the Jobs of the configurations alike; our webhook
still plans every rule and adds the priority, placement and suspension. Latency is the client's:
request sent to answer read. Beside it, the API server's own time in the call to our webhook
(the mean of its histogram ``apiserver_admission_webhook_admission_duration_seconds``), the
webhook server's CPU time per call for each of the three server processes (on a machine other
work shares, CPU time is what the wall time would be on an idle one), and where a sequential
create's time goes by the API server's own histograms.

    python benchmarks/bench_apiserver.py                 # 2 minutes at load average 1 to 3, cluster start included
    python benchmarks/bench_apiserver.py --sequential 10 --concurrent 64 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import base64
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
    add_create_options,
    admission_breakdown,
    api_session,
    bench_cluster,
    check_counts,
    create_jobs,
    delete_jobs,
    expected_labels,
    hold_cluster_queues,
    job,
    register,
    webhook_call_totals,
    webhook_configuration,
)
from timing import load_at_end, machine_at_start, percentile
from webhook_servers import (
    kgov_patch,
    kgov_server,
    metric,
    noop_count,
    noop_last_review,
    noop_server,
    webhook_answer,
)

from e2e import devcluster
from e2e.helm_support import chart_registration

CONFIGURATIONS = ("none", "no-op", "canned", "kgov")
#: The configurations served by a webhook process of their own.
SERVED = ("no-op", "canned", "kgov")
#: The differences reported, (configuration, its baseline) → what the difference is.
DIFFERENCES = {
    ("kgov", "no-op"): "all kgov adds",
    ("canned", "no-op"): "what changing the object costs the API server and Kueue",
    ("kgov", "canned"): "what our own computation adds",
    ("no-op", "none"): "any webhook call",
}
#: The configurations whose answer changes the Job (the proof after a switch: the team labels appear).
PATCHING = ("canned", "kgov")
SWITCH_TIMEOUT_S = 60.0


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
    api: Api,
    bench: Bench,
    configuration: dict[str, Any] | None,
    name: str,
    counted: dict[str, int],
    namespace: str,
    run: str,
) -> float:
    """Register ``configuration`` and wait until a dry-run create shows the API server calls what
    it names: the Job comes back with the team's labels (``expected_labels``) exactly when ``name``
    is ``kgov`` or ``canned``, and of the servers that count their reviews (``counted``: name →
    port, the no-op and the canned webhook) exactly the one named counts one more. Returns the
    seconds it took."""
    started = time.monotonic()
    await register(api, configuration)
    labels = expected_labels(bench.policies(), namespace)
    body = job(f"probe-{secrets.token_hex(4)}", namespace, run, labels["kueue.x-k8s.io/queue-name"])
    while time.monotonic() - started < SWITCH_TIMEOUT_S:
        before = {server: await asyncio.to_thread(noop_count, port, bench.context) for server, port in counted.items()}
        created = await api.request("POST", JOBS.format(namespace=namespace), body, {"dryRun": "All"})
        after = {server: await asyncio.to_thread(noop_count, port, bench.context) for server, port in counted.items()}
        found = created["metadata"].get("labels") or {}
        labelled = PRIORITY_LABEL in found and all(found.get(key) == value for key, value in labels.items())
        called = {server for server in counted if after[server] > before[server]}
        if labelled == (name in PATCHING) and called == ({name} & set(counted)):
            return time.monotonic() - started
        await asyncio.sleep(0.2)
    raise BenchError(f"the API server did not switch to the configuration {name!r} in {SWITCH_TIMEOUT_S:.0f}s")


async def capture_patch(
    api: Api, bench: Bench, noop: dict[str, Any], noop_port: int, kgov_port: int, namespace: str, run: str
) -> str:
    """The JSON Patch ``kgov serve`` gives the benchmark's Job, as base64 (its answer's ``patch``):
    with the no-op configuration registered, one dry-run create, whose AdmissionReview the no-op
    webhook keeps as the API server sent it; that review posted to ``kgov serve``'s ``/mutate``.
    Raises BenchError when kgov's answer is not an allowed JSONPatch."""
    await switch(api, bench, noop, "no-op", {"no-op": noop_port}, namespace, run)
    _, patch = await asyncio.to_thread(kgov_patch, noop_port, kgov_port, bench.context)
    return patch


async def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Figures]:
    run = secrets.token_hex(4)
    kgov_port, metrics_port, noop_port, canned_port = devcluster.free_ports(4)
    ca_pem = devcluster.Paths(bench.root).ca_crt.read_bytes()
    chart = await asyncio.to_thread(chart_registration, "https://127.0.0.1:1/mutate", "Fail", ca_pem)
    configurations: dict[str, dict[str, Any] | None] = {
        "none": None,
        "no-op": webhook_configuration(chart, noop_port, "Fail"),
        "canned": webhook_configuration(chart, canned_port, "Fail"),
        "kgov": webhook_configuration(chart, kgov_port, "Fail"),
    }
    patch_file = bench.root / "kgov-patch.json"
    servers_by_name = {
        "kgov": kgov_server(bench.root, bench.platform, kgov_port, metrics_port),
        "no-op": noop_server(bench.root, noop_port),
        "canned": noop_server(bench.root, canned_port, patch_file),
    }
    servers = list(servers_by_name.values())
    counted = {"no-op": noop_port, "canned": canned_port}
    figures = {name: Figures() for name in CONFIGURATIONS}
    webhook = str(webhook_configuration(chart, kgov_port, "Fail")["webhooks"][0]["name"])
    queue = expected_labels(bench.policies(), args.namespace)["kueue.x-k8s.io/queue-name"]
    params = {} if args.store else {"dryRun": "All"}
    try:
        for name in ("kgov", "no-op"):
            await asyncio.to_thread(servers_by_name[name].start, bench.context)
        async with api_session(bench.info, bench.token, connections=args.clients) as api:
            held = await hold_cluster_queues(api)
            print(f"ClusterQueues held (no admission, no pods): {', '.join(held)}")
            noop = configurations["no-op"]
            assert noop is not None
            patch = await capture_patch(api, bench, noop, noop_port, kgov_port, args.namespace, run)
            patch_file.write_bytes(base64.b64decode(patch))
            await asyncio.to_thread(servers_by_name["canned"].start, bench.context)
            review = await asyncio.to_thread(noop_last_review, noop_port, bench.context)
            canned = await asyncio.to_thread(webhook_answer, canned_port, review, bench.context)
            if canned.get("patch") != patch or canned.get("patchType") != "JSONPatch":
                raise BenchError(f"the canned webhook's answer is not kgov's patch: {canned}")
            print(f"kgov's patch for the Job, canned: {base64.b64decode(patch).decode()}")
            for round_number in range(args.rounds + 1):  # round 0 warms every path up
                scale = 1 if round_number else 5
                turn = round_number % len(CONFIGURATIONS)
                order = CONFIGURATIONS[turn:] + CONFIGURATIONS[:turn]
                for name in order:
                    took = await switch(api, bench, configurations[name], name, counted, args.namespace, run)
                    calls_before = await webhook_call_totals(api, webhook)
                    serving = servers_by_name.get(name)
                    cpu_before = serving.cpu_seconds() if serving else 0.0
                    prefix = f"b{run}-{round_number}-{name.replace('-', '')}"
                    parts_before = await admission_breakdown(api)
                    handler_before = await asyncio.to_thread(handler_totals, metrics_port)
                    bodies = [
                        job(f"{prefix}-s{index:04d}", args.namespace, run, queue)
                        for index in range(max(1, args.sequential // scale))
                    ]
                    sequential, _ = await create_jobs(api, args.namespace, bodies, 1, params)
                    parts_after = await admission_breakdown(api)
                    handler_after = await asyncio.to_thread(handler_totals, metrics_port)
                    bodies = [
                        job(f"{prefix}-c{index:04d}", args.namespace, run, queue)
                        for index in range(max(1, args.concurrent // scale))
                    ]
                    concurrent, seconds = await create_jobs(api, args.namespace, bodies, args.clients, params)
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
            again = await asyncio.to_thread(webhook_answer, kgov_port, review, bench.context)
            same = "the same" if again.get("patch") == patch else "DIFFERENT"
            print(f"kgov's patch for the same review after the rounds: {same}")
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
    names = "".join(f" {name:>13}" for name in CONFIGURATIONS)
    print(f"   {'part':78}{names} {'canned-no-op':>12} {'kgov-canned':>11} {'kgov-no-op':>10}")
    for key in keys:
        cells, means = [], {}
        for name in CONFIGURATIONS:
            seconds, count = figures[name].breakdown.get(key, [0.0, 0.0])
            means[name] = 1000 * seconds / creates[name]
            cells.append(f"{means[name]:7.3f} ({count / creates[name]:.1f})")
        if not any(figures[name].breakdown.get(key, [0, 0])[1] for name in CONFIGURATIONS):
            continue
        row = "".join(f" {cell:>13}" for cell in cells)
        print(
            f"   {' '.join(key):78}{row} {means['canned'] - means['no-op']:+12.3f} "
            f"{means['kgov'] - means['canned']:+11.3f} {means['kgov'] - means['no-op']:+10.3f}"
        )
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
    for ours, floor in DIFFERENCES:
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
        print(f"   added by {ours} over {floor}: " + "; ".join(parts) + f"  [{DIFFERENCES[ours, floor]}]")
    added = percentile(figures["kgov"].sequential, 0.5) - percentile(figures["no-op"].sequential, 0.5)
    added_concurrent = percentile(figures["kgov"].concurrent, 0.5) - percentile(figures["no-op"].concurrent, 0.5)
    verdict = "met" if max(added, added_concurrent) <= 1.0 else "not met"
    print(
        f"   goal: kgov adds <= 1 ms at p50 over the no-op webhook: {verdict} "
        f"(sequential {added:+.2f} ms, {args.clients} clients {added_concurrent:+.2f} ms)"
    )
    calls = ", ".join(
        f"{name} {figures[name].webhook_mean_ms():.2f} ms ({figures[name].webhook_calls} calls)" for name in SERVED
    )
    call, call_floor = figures["kgov"].webhook_mean_ms(), figures["no-op"].webhook_mean_ms()
    print(
        f"   the API server's own time in the webhook call (apiserver_admission_webhook_admission_duration_seconds, "
        f"mean): {calls}; kgov {call - call_floor:+.2f} ms ({call / call_floor if call_floor else float('nan'):.2f}x)"
    )
    cpu = {name: figures[name].cpu_ms_per_call() for name in SERVED}
    cpus = ", ".join(f"{name} {cpu[name]:.2f} ms" for name in SERVED)
    print(
        f"   the webhook server's CPU time per call (/proc/<pid>/stat over its turns, background work included): "
        f"{cpus}; kgov {cpu['kgov'] - cpu['no-op']:+.2f} ms over no-op "
        f"({cpu['kgov'] / cpu['no-op'] if cpu['no-op'] else float('nan'):.2f}x), "
        f"{cpu['kgov'] - cpu['canned']:+.2f} ms over canned"
    )
    spread = statistics.pstdev(figures["none"].round_p50s) if len(figures["none"].round_p50s) > 1 else 0.0
    print(f"   spread of the baseline's sequential p50 across rounds: {spread:.2f} ms (standard deviation)")
    report_breakdown(figures, args)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_create_options(parser, "hyperpod-ns-research", sequential=30)
    parser.add_argument(
        "--store",
        action="store_true",
        help="store the Jobs (and delete them after each round) instead of server-side dry-run creates",
    )
    args = parser.parse_args()
    check_counts(parser, args)
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
