"""Job creation through the real kube-apiserver, six ways side by side: what the fail-safe's
MutatingAdmissionPolicies (``failSafe.mode: mutate``, SPEC §8b) cost a create next to a webhook,
and what each option does for that cost.

Brings up the e2e cluster (``e2e.devcluster``) in a temporary state directory with the bundled
platform applied and its ClusterQueues held (no admission, no pods), runs three webhook servers as
processes of their own on 127.0.0.1 (``webhook_servers.py``: ``kgov serve``, the no-op webhook and
the canned one) and takes six configurations in turn, a round at a time, the order rotated by one
each round so that a noisy moment does not land on one configuration only:

* ``none``: no webhook of ours and no policy (Kueue's own webhooks only): the baseline;
* ``policies``: the chart's MutatingAdmissionPolicies and bindings (``helm template`` with
  ``failSafe.mode=mutate``), no webhook: what the API server does alone during an outage;
* ``no-op``: the chart's MutatingWebhookConfiguration calling the no-op webhook (``allowed``, no
  patch): what any webhook call costs;
* ``canned``: the same configuration calling the canned webhook, which answers every review with
  the patch ``kgov serve`` gives the benchmark's Job (taken once at the start through the no-op
  webhook's last review): what changing the object costs, without deciding anything;
* ``kgov``: the same configuration calling ``kgov serve``;
* ``kgov+policies``: the policies and ``kgov serve`` both.

The webhook configurations use ``failurePolicy: Fail``, so that a failed call shows as an error
rather than as a fast create. The Jobs carry no queue or priority label (what the policies fill
in). After each switch, dry-run creates prove the configuration is in force: in the team namespace
the Job comes back labelled exactly when the webhook patches or the policies run, and with the
policies' marker only when the policies run without the webhook; in a namespace of no team, bound
to the same policy by a probe binding, the marker shows whether the policies run; of the no-op and
canned servers exactly the one named counts more reviews. Each configuration: ``--sequential``
creates one after the other, then ``--concurrent`` by ``--clients`` clients, all server-side dry
runs (the whole admission chain, nothing stored). The kube-apiserver's CPU time (utime + stime from
``/proc/<pid>/stat``) is read before and after each batch and divided by the batch's creates; it
includes what the API server does meanwhile for the rest of the cluster (its idle rate is printed).

    python benchmarks/bench_fail_safe.py                     # 3-6 minutes on 2 shared CPUs, cluster start included
    python benchmarks/bench_fail_safe.py --sequential 10 --concurrent 32 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apiserver_support import (
    JOBS,
    QUEUE_LABEL,
    Api,
    Bench,
    BenchError,
    add_create_options,
    api_session,
    apiserver_pid,
    bench_cluster,
    check_counts,
    create_jobs,
    hold_cluster_queues,
    job,
    register,
    webhook_configuration,
)
from fail_safe_options import feature_table
from timing import (
    cpu_ms_per_create,
    load_at_end,
    machine_at_start,
    median_ratio,
    percentile,
    process_cpu_seconds,
    ratio,
)
from webhook_servers import Server, kgov_patch, kgov_server, noop_count, noop_server, webhook_answer

from e2e import devcluster
from e2e.helm_support import PLATFORM_VALUES, Helm, chart_registration
from webhook.core.plan.policy_fill import FILLED_BY_POLICY

CONFIGURATIONS = ("none", "policies", "no-op", "canned", "kgov", "kgov+policies")
#: The webhook server each configuration registers (none: no MutatingWebhookConfiguration of ours).
WEBHOOK_OF = {"no-op": "no-op", "canned": "canned", "kgov": "kgov", "kgov+policies": "kgov"}
WITH_POLICIES = ("policies", "kgov+policies")
#: (configuration, its baseline) → what the difference is.
DIFFERENCES = {
    ("policies", "none"): "what the policies alone cost a create (webhook away)",
    ("no-op", "none"): "any webhook call",
    ("canned", "no-op"): "changing the object (the API server and Kueue's webhooks on the patched Job)",
    ("kgov", "canned"): "kgov's own decision",
    ("kgov+policies", "kgov"): "what the policies add to kgov's",
}
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PATHS = {
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}
PROBE_NAMESPACE = "kgov-bench-probe"
SWITCH_TIMEOUT_S = 60.0
IDLE_SECONDS = 5.0
#: What the probes show in force: (team Job labelled, team Job marked, probe Job marked,
#: no-op webhook called, canned webhook called).
EXPECTED = {
    "none": (False, False, False, False, False),
    "policies": (True, True, True, False, False),
    "no-op": (False, False, False, True, False),
    "canned": (True, False, False, False, True),
    "kgov": (True, False, False, False, False),
    "kgov+policies": (True, False, True, False, False),
}


@dataclass
class Figures:
    """One configuration's creates over the measured rounds: latencies (ms), and the API server's
    CPU seconds over its batches with the creates they were divided by."""

    sequential: list[float] = field(default_factory=list)
    concurrent: list[float] = field(default_factory=list)
    sequential_cpu: float = 0.0
    concurrent_cpu: float = 0.0
    round_p50s: list[float] = field(default_factory=list)

    def cpu_ms(self, kind: str) -> float:
        if kind == "sequential":
            return cpu_ms_per_create(0.0, self.sequential_cpu, len(self.sequential))
        return cpu_ms_per_create(0.0, self.concurrent_cpu, len(self.concurrent))


def fill_policies(team: str) -> list[dict[str, Any]]:
    """The chart's MutatingAdmissionPolicies and bindings (mutate mode), and a binding of
    ``team``'s policy to :data:`PROBE_NAMESPACE`."""
    helm = Helm()
    try:
        objects = helm.template([PLATFORM_VALUES], {"failSafe.mode": '"mutate"'})
    finally:
        helm.close()
    chosen = [obj for obj in objects if obj["kind"] in PATHS]
    for obj in chosen:
        obj["metadata"].pop("labels", None)
    selector = {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [PROBE_NAMESPACE]}]
    }
    probe = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": "kgov-bench-probe"},
        "spec": {"policyName": f"kgov-governor-fill-{team}", "matchResources": {"namespaceSelector": selector}},
    }
    return [*chosen, probe]


async def set_policies(api: Api, objects: list[dict[str, Any]], on: bool) -> None:
    for obj in objects:
        path = f"{ADMISSION}/{PATHS[obj['kind']]}/{obj['metadata']['name']}"
        if on:
            await api.apply(path, obj)
        else:
            await api.delete(path)


async def state(
    api: Api, namespace: str, run: str, counted: dict[str, int], bench: Bench
) -> tuple[bool, bool, bool, bool, bool]:
    """What dry-run creates show in force now (the fields of :data:`EXPECTED`)."""
    before = {name: await asyncio.to_thread(noop_count, port, bench.context) for name, port in counted.items()}
    seen = []
    for where in (namespace, PROBE_NAMESPACE):
        body = job(f"probe-{secrets.token_hex(4)}", where, run)
        created = await api.request("POST", JOBS.format(namespace=where), body, {"dryRun": "All"})
        seen.append(created["metadata"])
    after = {name: await asyncio.to_thread(noop_count, port, bench.context) for name, port in counted.items()}
    team, probe = seen
    return (
        QUEUE_LABEL in (team.get("labels") or {}),
        FILLED_BY_POLICY in (team.get("annotations") or {}),
        FILLED_BY_POLICY in (probe.get("annotations") or {}),
        after["no-op"] > before["no-op"],
        after["canned"] > before["canned"],
    )


async def switch(
    api: Api,
    bench: Bench,
    name: str,
    webhooks: dict[str, dict[str, Any]],
    policies: list[dict[str, Any]],
    counted: dict[str, int],
    namespace: str,
    run: str,
) -> float:
    """Put configuration ``name`` in force and wait until the probes show it; the seconds taken."""
    started = time.monotonic()
    server = WEBHOOK_OF.get(name)
    await register(api, webhooks[server] if server else None)
    await set_policies(api, policies, name in WITH_POLICIES)
    while time.monotonic() - started < SWITCH_TIMEOUT_S:
        if await state(api, namespace, run, counted, bench) == EXPECTED[name]:
            return time.monotonic() - started
        await asyncio.sleep(0.2)
    raise BenchError(f"the API server did not switch to {name!r} in {SWITCH_TIMEOUT_S:.0f}s")


async def batch(
    api: Api, pid: int, namespace: str, bodies: list[dict[str, Any]], clients: int
) -> tuple[list[float], float]:
    """Dry-run creates of ``bodies`` by ``clients`` clients: latencies (ms) and the API server's
    CPU seconds over the batch."""
    cpu = process_cpu_seconds(pid)
    latencies, _ = await create_jobs(api, namespace, bodies, clients, {"dryRun": "All"})
    return latencies, process_cpu_seconds(pid) - cpu


async def measure(bench: Bench, args: argparse.Namespace) -> tuple[dict[str, Figures], float]:
    """The figures of each configuration, and the API server's idle CPU in ms per second."""
    run = secrets.token_hex(4)
    kgov_port, metrics_port, noop_port, canned_port = devcluster.free_ports(4)
    ca_pem = devcluster.Paths(bench.root).ca_crt.read_bytes()
    chart = await asyncio.to_thread(chart_registration, "https://127.0.0.1:1/mutate", "Fail", ca_pem)
    ports = {"kgov": kgov_port, "no-op": noop_port, "canned": canned_port}
    webhooks = {server: webhook_configuration(chart, port, "Fail") for server, port in ports.items()}
    (team,) = [t.team for t in bench.policies().teams if args.namespace in (t.namespaces or [])]
    policies = await asyncio.to_thread(fill_policies, team)
    patch_file = bench.root / "kgov-patch.json"
    servers: dict[str, Server] = {
        "kgov": kgov_server(bench.root, bench.platform, kgov_port, metrics_port),
        "no-op": noop_server(bench.root, noop_port),
        "canned": noop_server(bench.root, canned_port, patch_file),
    }
    counted = {"no-op": noop_port, "canned": canned_port}
    figures = {name: Figures() for name in CONFIGURATIONS}
    pid = apiserver_pid(bench.root)
    try:
        for name in ("kgov", "no-op"):
            await asyncio.to_thread(servers[name].start, bench.context)
        async with api_session(bench.info, bench.token, connections=args.clients) as api:
            await hold_cluster_queues(api)
            await api.apply(
                f"/api/v1/namespaces/{PROBE_NAMESPACE}",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROBE_NAMESPACE}},
            )
            # The canned patch: kgov's answer to the review the no-op webhook got for a team Job.
            await register(api, webhooks["no-op"])
            started = time.monotonic()
            while not await asyncio.to_thread(noop_count, noop_port, bench.context):
                if time.monotonic() - started > SWITCH_TIMEOUT_S:
                    raise BenchError("the API server never called the no-op webhook")
                await api.request(
                    "POST",
                    JOBS.format(namespace=args.namespace),
                    job("capture", args.namespace, run),
                    {"dryRun": "All"},
                )
                await asyncio.sleep(0.2)
            await api.request(
                "POST", JOBS.format(namespace=args.namespace), job("capture", args.namespace, run), {"dryRun": "All"}
            )
            review, patch = await asyncio.to_thread(kgov_patch, noop_port, kgov_port, bench.context)
            patch_file.write_bytes(base64.b64decode(patch))
            await asyncio.to_thread(servers["canned"].start, bench.context)
            canned = await asyncio.to_thread(webhook_answer, canned_port, review, bench.context)
            if canned.get("patch") != patch:
                raise BenchError(f"the canned webhook's answer is not kgov's patch: {canned}")
            print(f"kgov's patch for the unlabelled Job, canned: {base64.b64decode(patch).decode()}")
            await register(api, None)
            idle_before = process_cpu_seconds(pid)
            await asyncio.sleep(IDLE_SECONDS)
            idle = 1000 * (process_cpu_seconds(pid) - idle_before) / IDLE_SECONDS
            print(f"kube-apiserver (pid {pid}) idle: {idle:.1f} ms CPU per second", flush=True)
            for round_number in range(args.rounds + 1):  # round 0 warms every path up
                scale = 1 if round_number else 5
                turn = round_number % len(CONFIGURATIONS)
                for name in CONFIGURATIONS[turn:] + CONFIGURATIONS[:turn]:
                    took = await switch(api, bench, name, webhooks, policies, counted, args.namespace, run)
                    prefix = f"f{run}-{round_number}-{name.replace('+', '').replace('-', '')}"
                    count = max(1, args.sequential // scale)
                    bodies = [job(f"{prefix}-s{i:04d}", args.namespace, run) for i in range(count)]
                    sequential, sequential_cpu = await batch(api, pid, args.namespace, bodies, 1)
                    count = max(1, args.concurrent // scale)
                    bodies = [job(f"{prefix}-c{i:04d}", args.namespace, run) for i in range(count)]
                    concurrent, concurrent_cpu = await batch(api, pid, args.namespace, bodies, args.clients)
                    label = f"round {round_number}" if round_number else "warm-up"
                    print(
                        f"   {label:8} {name:13} switched in {took:4.1f} s; sequential p50 "
                        f"{percentile(sequential, 0.5):6.2f} ms; {args.clients} clients p50 "
                        f"{percentile(concurrent, 0.5):7.2f} ms; load {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
                    if round_number:
                        f = figures[name]
                        f.sequential += sequential
                        f.concurrent += concurrent
                        f.sequential_cpu += sequential_cpu
                        f.concurrent_cpu += concurrent_cpu
                        f.round_p50s.append(percentile(sequential, 0.5))
            await register(api, None)
            await set_policies(api, policies, False)
            again = await asyncio.to_thread(webhook_answer, kgov_port, review, bench.context)
            same = "the same" if again.get("patch") == patch else "DIFFERENT"
            print(f"kgov's patch for the same review after the rounds: {same}")
        for server in servers.values():
            if not server.alive():
                raise BenchError(f"{server.name} died during the run: {server.tail()}")
    finally:
        for server in servers.values():
            server.stop()
    return figures, idle


def cell(value: float, baseline: float) -> str:
    return f"{value:.2f} ({ratio(value, baseline):.2f}x)"


def report(figures: dict[str, Figures], idle: float, args: argparse.Namespace) -> None:
    base = figures["none"]
    print(
        f"\nunlabelled Job creates in {args.namespace} (server-side dry runs): {args.rounds} rounds x "
        f"({args.sequential} sequential + {args.concurrent} by {args.clients} clients) per configuration; "
        "ms, and in parentheses the ratio to none of the same run"
    )
    columns = ("seq p50", "seq p99", "conc p50", "conc p99", "CPU/create seq", "CPU/create conc")
    print(f"   {'configuration':14}" + "".join(f" {c:>17}" for c in columns))
    for name in CONFIGURATIONS:
        f = figures[name]
        cells = [
            cell(percentile(f.sequential, 0.5), percentile(base.sequential, 0.5)),
            cell(percentile(f.sequential, 0.99), percentile(base.sequential, 0.99)),
            cell(percentile(f.concurrent, 0.5), percentile(base.concurrent, 0.5)),
            cell(percentile(f.concurrent, 0.99), percentile(base.concurrent, 0.99)),
            cell(f.cpu_ms("sequential"), base.cpu_ms("sequential")),
            cell(f.cpu_ms("concurrent"), base.cpu_ms("concurrent")),
        ]
        print(f"   {name:14}" + "".join(f" {c:>17}" for c in cells))
    for (name, floor), what in DIFFERENCES.items():
        a, b = figures[name], figures[floor]
        p50 = percentile(a.sequential, 0.5) - percentile(b.sequential, 0.5)
        print(
            f"   {name} - {floor}: sequential p50 {p50:+.2f} ms, "
            f"p99 {percentile(a.sequential, 0.99) - percentile(b.sequential, 0.99):+.2f} ms; "
            f"API-server CPU {a.cpu_ms('sequential') - b.cpu_ms('sequential'):+.2f} ms per sequential create  [{what}]"
        )
    rounds = "; ".join(f"{name} " + ", ".join(f"{v:.2f}" for v in figures[name].round_p50s) for name in CONFIGURATIONS)
    print(f"   sequential p50 per round (ms): {rounds}")
    paired = ", ".join(
        f"{name} {median_ratio(figures[name].round_p50s, base.round_p50s):.2f}x" for name in CONFIGURATIONS
    )
    print(f"   sequential p50 as a ratio to none's in the same round, median over the rounds: {paired}")
    print(f"   kube-apiserver idle: {idle:.1f} ms CPU per second (included in the CPU per create)")
    print(f"   creates per configuration: {len(base.sequential)} sequential, {len(base.concurrent)} concurrent")
    print("\nwhat each option does for a create (SPEC §3, §8b):")
    print(feature_table())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_create_options(parser, "hyperpod-ns-data-science", sequential=40)
    args = parser.parse_args()
    check_counts(parser, args)
    print(machine_at_start("creates through kube-apiserver: policies, no-op, canned, kgov"))
    with tempfile.TemporaryDirectory(prefix="kgov-bench-") as root:
        started = time.monotonic()
        with bench_cluster(Path(root), args.shape) as bench:
            print(f"cluster up with the bundled platform in {time.monotonic() - started:.0f} s", flush=True)
            figures, idle = asyncio.run(measure(bench, args))
    report(figures, idle, args)
    print(load_at_end())
    return 0


if __name__ == "__main__":
    sys.exit(main())
