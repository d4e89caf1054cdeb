"""Job creation through the real kube-apiserver with the fail-safe's MutatingAdmissionPolicies
(``failSafe.mode: mutate``, SPEC §8b): what the policies alone cost a create (a webhook outage),
and what they add to ``kgov serve``'s.

Brings up the e2e cluster (``e2e.devcluster``) in a temporary state directory with the bundled
platform applied and its ClusterQueues held (no admission, no pods), runs ``kgov serve``, and
takes four configurations in turn, a round at a time, in a rotated order:

* ``none``: no webhook of ours and no policy (the Jobs stay as they come);
* ``policies``: the chart's MutatingAdmissionPolicies and bindings (``helm template`` with
  ``failSafe.mode=mutate``), no webhook: what the API server does alone during an outage;
* ``kgov``: the chart's MutatingWebhookConfiguration calling ``kgov serve``;
* ``kgov+policies``: both.

The Jobs carry no queue or priority label (what the policies fill in). After each switch, dry-run
creates prove the configuration is in force: in the team namespace the Job comes back labelled
exactly when the webhook or the policies run, and with the policies' marker only when the policies
run without the webhook; in a namespace of no team, bound to the same policy by a probe binding
(the webhook leaves its objects alone), the marker shows whether the policies run. Each
configuration: ``--sequential`` creates one after the other, then ``--concurrent`` by
``--clients`` clients, all server-side dry runs (the whole admission chain, nothing stored).

    python benchmarks/bench_fail_safe.py                     # about 2 minutes, cluster start included
    python benchmarks/bench_fail_safe.py --sequential 10 --concurrent 32 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from apiserver_support import (
    JOBS,
    QUEUE_LABEL,
    Api,
    Bench,
    BenchError,
    api_session,
    bench_cluster,
    hold_cluster_queues,
    job,
    kgov_server,
    register,
    webhook_configuration,
)
from bench_apiserver import percentile
from timing import load_at_end, machine_at_start

from e2e import devcluster
from e2e.helm_support import PLATFORM_VALUES, Helm, chart_registration
from webhook.core.plan.policy_fill import FILLED_BY_POLICY

CONFIGURATIONS = ("none", "policies", "kgov", "kgov+policies")
#: (configuration, its baseline) → what the difference is.
DIFFERENCES = {
    ("policies", "none"): "what the policies alone cost a create (webhook away)",
    ("kgov+policies", "kgov"): "what the policies add to kgov's",
    ("kgov", "none"): "what kgov costs a create",
}
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PATHS = {
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}
PROBE_NAMESPACE = "kgov-bench-probe"
SWITCH_TIMEOUT_S = 60.0


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


async def state(api: Api, namespace: str, run: str) -> tuple[bool, bool, bool]:
    """(team Job labelled, team Job marked, probe Job marked) of dry-run creates now."""
    seen = []
    for where in (namespace, PROBE_NAMESPACE):
        body = job(f"probe-{secrets.token_hex(4)}", where, run)
        created = await api.request("POST", JOBS.format(namespace=where), body, {"dryRun": "All"})
        seen.append(created["metadata"])
    team, probe = seen
    return (
        QUEUE_LABEL in (team.get("labels") or {}),
        FILLED_BY_POLICY in (team.get("annotations") or {}),
        FILLED_BY_POLICY in (probe.get("annotations") or {}),
    )


EXPECTED = {
    "none": (False, False, False),
    "policies": (True, True, True),
    "kgov": (True, False, False),
    "kgov+policies": (True, False, True),
}


async def switch(
    api: Api, name: str, webhook: dict[str, Any], policies: list[dict[str, Any]], namespace: str, run: str
) -> float:
    started = time.monotonic()
    await register(api, webhook if name.startswith("kgov") else None)
    await set_policies(api, policies, name.endswith("policies"))
    while time.monotonic() - started < SWITCH_TIMEOUT_S:
        if await state(api, namespace, run) == EXPECTED[name]:
            return time.monotonic() - started
        await asyncio.sleep(0.2)
    raise BenchError(f"the API server did not switch to {name!r} in {SWITCH_TIMEOUT_S:.0f}s")


async def create_jobs(api: Api, namespace: str, run: str, prefix: str, count: int, clients: int) -> list[float]:
    """``count`` unlabelled Jobs by ``clients`` clients at once (1: one after the other), as
    server-side dry runs; the latency of each create, ms."""
    latencies: list[float] = []
    bodies = [job(f"{prefix}-{index:04d}", namespace, run) for index in range(count)]
    path = JOBS.format(namespace=namespace)

    async def client() -> None:
        while bodies:
            body = bodies.pop()
            started = time.perf_counter()
            await api.request("POST", path, body, {"dryRun": "All"})
            latencies.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies


async def measure(bench: Bench, args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    run = secrets.token_hex(4)
    port, metrics_port = devcluster.free_ports(2)
    ca_pem = devcluster.Paths(bench.root).ca_crt.read_bytes()
    chart = await asyncio.to_thread(chart_registration, "https://127.0.0.1:1/mutate", "Fail", ca_pem)
    webhook = webhook_configuration(chart, port, "Fail")
    (team,) = [t.team for t in bench.policies().teams if args.namespace in t.namespaces]
    policies = await asyncio.to_thread(fill_policies, team)
    server = kgov_server(bench.root, bench.platform, port, metrics_port)
    figures: dict[str, dict[str, list[float]]] = {name: {"sequential": [], "concurrent": []} for name in CONFIGURATIONS}
    await asyncio.to_thread(server.start, bench.context)
    try:
        async with api_session(bench.info, bench.token, connections=args.clients) as api:
            await hold_cluster_queues(api)
            await api.apply(
                f"/api/v1/namespaces/{PROBE_NAMESPACE}",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROBE_NAMESPACE}},
            )
            for round_number in range(args.rounds + 1):  # round 0 warms every path up
                scale = 1 if round_number else 5
                turn = round_number % len(CONFIGURATIONS)
                for name in CONFIGURATIONS[turn:] + CONFIGURATIONS[:turn]:
                    took = await switch(api, name, webhook, policies, args.namespace, run)
                    prefix = f"f{run}-{round_number}-{name.replace('+', '')}"
                    sequential = await create_jobs(
                        api, args.namespace, run, f"{prefix}-s", max(1, args.sequential // scale), 1
                    )
                    concurrent = await create_jobs(
                        api, args.namespace, run, f"{prefix}-c", max(1, args.concurrent // scale), args.clients
                    )
                    label = f"round {round_number}" if round_number else "warm-up"
                    print(
                        f"   {label:8} {name:13} switched in {took:4.1f} s; sequential p50 "
                        f"{percentile(sequential, 0.5):6.2f} ms; {args.clients} clients p50 "
                        f"{percentile(concurrent, 0.5):6.2f} ms",
                        flush=True,
                    )
                    if round_number:
                        figures[name]["sequential"] += sequential
                        figures[name]["concurrent"] += concurrent
            await register(api, None)
            await set_policies(api, policies, False)
        if not server.alive():
            raise BenchError(f"kgov serve died during the run: {server.tail()}")
    finally:
        server.stop()
    return figures


def report(figures: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> None:
    print(f"\nunlabelled Job creates in {args.namespace} (server-side dry run), ms:")
    print(f"   {'configuration':15} {'seq p50':>8} {'seq p95':>8} {'conc p50':>9} {'conc p95':>9}")
    for name in CONFIGURATIONS:
        seq, conc = figures[name]["sequential"], figures[name]["concurrent"]
        print(
            f"   {name:15} {percentile(seq, 0.5):8.2f} {percentile(seq, 0.95):8.2f} "
            f"{percentile(conc, 0.5):9.2f} {percentile(conc, 0.95):9.2f}"
        )
    for (name, base), what in DIFFERENCES.items():
        delta = percentile(figures[name]["sequential"], 0.5) - percentile(figures[base]["sequential"], 0.5)
        print(f"   {name} - {base}: {delta:+.2f} ms sequential p50 ({what})")
    print(json.dumps({name: {k: len(v) for k, v in parts.items()} for name, parts in figures.items()}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="1x1x2x2", help="fake nodes SxBxRxH (default 4 nodes)")
    parser.add_argument("--namespace", default="hyperpod-ns-data-science", help="team namespace of the Jobs")
    parser.add_argument("--sequential", type=int, default=30, help="sequential creates per configuration per round")
    parser.add_argument("--concurrent", type=int, default=96, help="concurrent creates per configuration per round")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (after one warm-up round)")
    args = parser.parse_args()
    for name, value, limit in (
        ("sequential", args.sequential, 2000),
        ("concurrent", args.concurrent, 5000),
        ("clients", args.clients, 128),
        ("rounds", args.rounds, 9),
    ):
        if not 1 <= value <= limit:
            parser.error(f"--{name} must be between 1 and {limit}")
    print(machine_at_start("creates through kube-apiserver with the fail-safe's admission policies"))
    with tempfile.TemporaryDirectory(prefix="kgov-bench-") as root:
        started = time.monotonic()
        with bench_cluster(Path(root), args.shape) as bench:
            print(f"cluster up with the bundled platform in {time.monotonic() - started:.0f} s", flush=True)
            figures = asyncio.run(measure(bench, args))
    report(figures, args)
    print(load_at_end())
    return 0


if __name__ == "__main__":
    sys.exit(main())
