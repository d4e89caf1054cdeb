"""Faults during a steady stream of Job creations through the real kube-apiserver: nothing lost,
nothing unlabelled, every refusal counted with its message.

Brings up the e2e cluster in a temporary state directory with the bundled platform, registers
``kgov serve`` as the chart registers it (``helm template``: the MutatingWebhookConfiguration and
the ValidatingAdmissionPolicies with their bindings, the fail-safe of SPEC §8b), holds every
ClusterQueue (no pod runs), and for each ``--failure-policy`` (``Fail``, then ``Ignore``):

1. ``--workers`` clients create Jobs without Kueue labels in the team namespaces in turn, one
   after the other with ``--pause`` between, until the faults are over;
2. meanwhile, each after ``--steady`` seconds of quiet, in turn:
   * ``webhook killed``: ``kgov serve`` gets SIGKILL, stays down ``--down`` seconds, and is
     started again on the same port;
   * ``API server restart``: kube-apiserver stopped (SIGTERM) and started again;
   * ``certificate rotated``: a new serving certificate and key from the same CA written over the
     files the server reads (it reloads them; checked by a fresh handshake and its metric);
   * ``policy changed``: the platform file the server reads rewritten with another default
     priority for research (checked by its reload metric);
   * ``watch expired``: kube-apiserver killed, etcd compacted while it is down, and started again:
     the server's namespace and node watches get ``410 Gone`` and list again (checked by its
     ``kgov_cache_lists_total{reason="expired"}``);
3. at the end every Job of the team namespaces is listed: each must carry its team's queue label;
   each Job of the run the priority of the policy in force when it was created (either one while
   a change was being loaded); every create answered 201 must be there (else it is lost); every
   create refused is counted by reason, with a sample message.

While the webhook is down, a create must be refused: by the API server's webhook call under
``Fail``, by the ValidatingAdmissionPolicy under ``Ignore``. The run exits 1 when any Job is lost,
unlabelled or carries a wrong priority, or a create went through while the webhook was down.

    python benchmarks/bench_faults.py                     # about 12 minutes on 2 loaded CPUs, cluster start included
    python benchmarks/bench_faults.py --failure-policy Ignore --steady 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from apiserver_support import (
    JOBS,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    Api,
    ApiError,
    Bench,
    BenchError,
    api_session,
    apply_admission_policies,
    bench_cluster,
    delete_jobs,
    expected_labels,
    hold_cluster_queues,
    job,
    register,
    team_namespaces,
    webhook_configuration,
)
from timing import load_at_end, machine_at_start
from webhook_servers import Server, kgov_server, metric, rotate_serving_certificate, served_serial

from e2e import devcluster
from e2e.helm_support import chart_registration
from webhook.core.platform.policy import PolicySet

STEADY = "steady"
FAULTS = ("webhook killed", "API server restart", "certificate rotated", "policy changed", "watch expired")
WEBHOOK_DOWN = "webhook down"
CATCH_UP_S = 60.0


# --------------------------------------------------------------------------- what happened


@dataclass
class Attempt:
    """One create: when, in which phase, and what came of it."""

    name: str
    namespace: str
    phase: str
    started: float
    ended: float = 0.0
    outcome: str = ""  # created | refused | unanswered
    reason: str = ""
    message: str = ""


@dataclass
class PolicyVersion:
    """A policy file written at ``written`` and seen loaded by the server at ``loaded``."""

    written: float
    loaded: float
    policies: PolicySet


@dataclass
class Run:
    failure_policy: str
    run: str
    attempts: list[Attempt] = field(default_factory=list)
    phase: str = STEADY
    phases: list[tuple[str, float, float]] = field(default_factory=list)  # (name, start, end)
    notes: list[str] = field(default_factory=list)
    versions: list[PolicyVersion] = field(default_factory=list)


FAILED_CALL = "webhook unreachable, refused by the API server (failurePolicy Fail)"
BY_POLICY = "refused by the ValidatingAdmissionPolicy (no team queue label)"
UNREACHABLE = "API server unreachable"
SHORT = {FAILED_CALL: "webhook call", BY_POLICY: "admission policy", UNREACHABLE: "no API server"}


def reason_of(error: ApiError) -> str:
    message = str(error.status.get("message", ""))
    if "ValidatingAdmissionPolicy" in message:
        return BY_POLICY
    if "failed calling webhook" in message:
        return FAILED_CALL
    return f"HTTP {error.code} {error.status.get('reason', '')}".strip()


async def creator(
    api: Api, run: Run, namespaces: list[str], counter: list[int], pause: float, stop: asyncio.Event
) -> None:
    """Create Jobs until ``stop``; record every attempt."""
    while not stop.is_set():
        index = counter[0]
        counter[0] += 1
        namespace = namespaces[index % len(namespaces)]
        name = f"f{run.run}-{run.failure_policy.lower()}-{index:05d}"
        attempt = Attempt(name, namespace, run.phase, time.monotonic())
        run.attempts.append(attempt)
        try:
            await api.request("POST", JOBS.format(namespace=namespace), job(name, namespace, run.run), timeout=20)
            attempt.outcome = "created"
        except ApiError as error:
            attempt.outcome, attempt.reason = "refused", reason_of(error)
            attempt.message = str(error.status.get("message", ""))
        except aiohttp.ClientConnectorError as error:  # not connected: nothing was sent
            attempt.outcome, attempt.reason, attempt.message = "refused", UNREACHABLE, str(error)
        except (aiohttp.ClientError, TimeoutError, OSError) as error:  # sent, the answer lost
            attempt.outcome, attempt.reason = "unanswered", type(error).__name__
            attempt.message = str(error) or type(error).__name__
        attempt.ended = time.monotonic()
        await asyncio.sleep(pause if attempt.outcome == "created" else max(pause, 0.2))


# --------------------------------------------------------------------------- the faults


async def wait_until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = CATCH_UP_S) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if await check():
                return time.monotonic() - started
        except (OSError, aiohttp.ClientError, ApiError, TimeoutError):
            pass
        await asyncio.sleep(0.2)
    raise BenchError(f"{what}: not within {timeout:.0f}s")


async def kill_webhook(bench: Bench, run: Run, kgov: Server, down: float) -> None:
    kgov.kill()
    run.phase = WEBHOOK_DOWN
    await asyncio.sleep(down)
    run.phase = "webhook killed"
    took = await asyncio.to_thread(kgov.start, bench.context)
    run.notes.append(f"webhook killed: SIGKILL, down {down:.0f} s, ready again {took:.1f} s after the restart")


async def restart_apiserver(bench: Bench, api: Api, run: Run, crash: bool, compact: bool) -> float:
    compacted: list[int] = []

    def while_down() -> None:
        if compact:
            compacted.append(devcluster.compact_etcd(bench.root))

    down = await asyncio.to_thread(devcluster.restart_apiserver, bench.root, while_down, crash)

    async def answers() -> bool:
        await api.request("GET", "/version", timeout=5)
        return True

    await wait_until(answers, "the API server to answer the benchmark's client again")
    return down


async def rotate_certificate(bench: Bench, run: Run, kgov: Server, metrics_url: str) -> None:
    before = metric(metrics_url, "kgov_certificate_reloads_total", result="ok")
    serial = served_serial(kgov.port, Path(bench.info.ca_file))
    rotate_serving_certificate(bench.root)

    async def reloaded() -> bool:
        return metric(metrics_url, "kgov_certificate_reloads_total", result="ok") > before and (
            served_serial(kgov.port, Path(bench.info.ca_file)) != serial
        )

    took = await wait_until(reloaded, "kgov serve to serve the rotated certificate")
    if not kgov.alive():
        raise BenchError(f"kgov serve died on the certificate rotation: {kgov.tail()}")
    run.notes.append(f"certificate rotated: the new certificate served {took:.1f} s after it was written")


def flip_research_priority(platform: Path) -> str:
    """Rewrite the platform file with research's other allowed priority as its default (both the
    Kueue and the pod priority); returns the new default."""
    document: dict[str, Any] = yaml.safe_load(platform.read_text())
    (team,) = (team for team in document["teams"] if team["name"] == "research")
    rules = team["policy"]
    current = rules["kueuePriority"]["default"]
    (other,) = (name for name in rules["kueuePriority"]["allowed"] if name != current)
    for key in ("kueuePriority", "podPriority"):
        rules[key]["default"] = other
    staging = platform.with_name(f".{platform.name}.tmp")
    staging.write_text(yaml.safe_dump(document, sort_keys=False))
    os.replace(staging, platform)
    return str(other)


async def change_policy(bench: Bench, run: Run, metrics_url: str) -> None:
    before = metric(metrics_url, "kgov_policy_reloads_total", result="ok")
    written = time.monotonic()
    new = flip_research_priority(bench.platform)

    async def loaded() -> bool:
        return metric(metrics_url, "kgov_policy_reloads_total", result="ok") > before

    took = await wait_until(loaded, "kgov serve to load the changed policy")
    run.versions.append(PolicyVersion(written, time.monotonic(), bench.policies()))
    run.notes.append(f"policy changed: research's default priority now {new}, in force {took:.1f} s after the write")


async def expire_watches(bench: Bench, api: Api, run: Run, metrics_url: str) -> None:
    # A write after everything the server's caches hold: the compaction then removes their versions.
    await api.request(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"generateName": "bump-"},
            "data": {"at": str(time.time())},
        },
    )
    before = {
        cache: metric(metrics_url, "kgov_cache_lists_total", cache=cache, reason="expired")
        for cache in ("namespaces", "nodes")
    }
    down = await restart_apiserver(bench, api, run, crash=True, compact=True)

    async def relisted() -> bool:
        return all(
            metric(metrics_url, "kgov_cache_lists_total", cache=cache, reason="expired") > count
            for cache, count in before.items()
        )

    took = await wait_until(relisted, "kgov serve's watches to get 410 Gone and list again")
    run.notes.append(
        f"watch expired: API server killed, etcd compacted, back after {down:.1f} s; both caches listed again "
        f"after 410 Gone {took:.1f} s later"
    )


# --------------------------------------------------------------------------- one failure policy


async def one_run(
    bench: Bench,
    api: Api,
    kgov: Server,
    chart: list[dict[str, Any]],
    failure_policy: str,
    metrics_url: str,
    args: argparse.Namespace,
) -> Run:
    run = Run(failure_policy, secrets.token_hex(3))
    run.versions.append(PolicyVersion(float("-inf"), float("-inf"), bench.policies()))
    await register(api, webhook_configuration(chart, kgov.port, failure_policy))
    await asyncio.sleep(3)  # the API server's webhook informer picks the change up
    namespaces = sorted(team_namespaces(bench.policies()))
    namespaces = [ns for ns in namespaces if ns in args.namespaces] if args.namespaces else namespaces
    stop = asyncio.Event()
    counter = [0]
    workers = [
        asyncio.create_task(creator(api, run, namespaces, counter, args.pause, stop)) for _ in range(args.workers)
    ]
    faults: dict[str, Callable[[], Awaitable[Any]]] = {
        "webhook killed": lambda: kill_webhook(bench, run, kgov, args.down),
        "API server restart": lambda: restart_apiserver(bench, api, run, crash=False, compact=False),
        "certificate rotated": lambda: rotate_certificate(bench, run, kgov, metrics_url),
        "policy changed": lambda: change_policy(bench, run, metrics_url),
        "watch expired": lambda: expire_watches(bench, api, run, metrics_url),
    }
    try:
        for name in args.faults:
            run.phase = STEADY
            await asyncio.sleep(args.steady)
            run.phase = name
            started = time.monotonic()
            outcome = await asyncio.wait_for(faults[name](), args.fault_timeout)
            if name == "API server restart":
                run.notes.append(f"API server restart: SIGTERM, unreachable {outcome:.1f} s")
            run.phases.append((name, started, time.monotonic()))
            print(f"   {failure_policy}: {name} done; {len(run.attempts)} creates so far", flush=True)
        run.phase = STEADY
        await asyncio.sleep(args.steady)
    finally:
        stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
    return run


def priorities_possible(run: Run, namespace: str, attempt: Attempt) -> set[str]:
    """The Kueue priorities a Job created during ``attempt`` may carry: those of every policy that
    can have been in force at some moment of the create (a version from its write until the next
    version is seen loaded)."""
    possible = set()
    for index, version in enumerate(run.versions):
        until = run.versions[index + 1].loaded if index + 1 < len(run.versions) else float("inf")
        if version.written <= attempt.ended and until >= attempt.started:
            possible.add(expected_labels(version.policies, namespace).get(PRIORITY_LABEL, ""))
    return possible


@dataclass
class Verdict:
    counts: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    samples: dict[str, str] = field(default_factory=dict)
    steady_refusals: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    by_phase: dict[str, Counter[str]] = field(default_factory=dict)
    latency_p50: dict[str, float] = field(default_factory=dict)


async def verify(api: Api, bench: Bench, run: Run) -> Verdict:
    verdict = Verdict()
    teams = team_namespaces(bench.policies())
    stored: dict[tuple[str, str], dict[str, Any]] = {}
    for namespace in teams:
        for obj in await api.items(JOBS.format(namespace=namespace)):
            stored[(namespace, obj["metadata"]["name"])] = obj
            labels = obj["metadata"].get("labels") or {}
            allowed = {
                str(q)
                for team in bench.policies().teams
                if team.team == teams[namespace]
                for q in [team.queue.default, *(team.queue.allowed or [])]
                if q
            }
            if labels.get(QUEUE_LABEL) not in allowed:
                verdict.counts["unlabelled"] += 1
                verdict.problems.append(f"unlabelled: {namespace}/{obj['metadata']['name']} {labels}")
    latencies: dict[str, list[float]] = {}
    for attempt in run.attempts:
        verdict.counts["attempts"] += 1
        verdict.by_phase.setdefault(attempt.phase, Counter())[attempt.outcome or "unfinished"] += 1
        found = stored.get((attempt.namespace, attempt.name))
        if attempt.outcome == "created":
            verdict.counts["created"] += 1
            latencies.setdefault(attempt.phase, []).append(attempt.ended - attempt.started)
            if found is None:
                verdict.counts["lost"] += 1
                verdict.problems.append(f"lost: {attempt.namespace}/{attempt.name} was created and is gone")
        elif attempt.outcome == "refused":
            verdict.counts["refused"] += 1
            verdict.refused[attempt.reason] += 1
            verdict.samples.setdefault(attempt.reason, attempt.message)
            if attempt.phase == STEADY:  # no fault going on: say why
                verdict.steady_refusals.append(f"{attempt.namespace}/{attempt.name}: {attempt.message}")
            verdict.by_phase[attempt.phase]["refused: " + attempt.reason] += 1
            if found is not None:
                verdict.counts["refused yet stored"] += 1
                verdict.problems.append(f"refused yet stored: {attempt.namespace}/{attempt.name}")
        else:
            verdict.counts["unanswered"] += 1
            verdict.samples.setdefault(f"unanswered ({attempt.reason})", attempt.message)
            if found is not None:
                verdict.counts["unanswered, stored"] += 1
        if found is not None:
            labels = found["metadata"].get("labels") or {}
            possible = priorities_possible(run, attempt.namespace, attempt)
            if labels.get(PRIORITY_LABEL, "") not in possible:
                verdict.counts["wrong priority"] += 1
                verdict.problems.append(
                    f"wrong priority: {attempt.namespace}/{attempt.name} has {labels.get(PRIORITY_LABEL)!r}, "
                    f"expected one of {sorted(possible)}"
                )
        if attempt.phase == WEBHOOK_DOWN and attempt.outcome == "created":
            verdict.counts["created while the webhook was down"] += 1
            verdict.problems.append(f"created while the webhook was down: {attempt.namespace}/{attempt.name}")
    for phase, values in latencies.items():
        values.sort()
        verdict.latency_p50[phase] = values[len(values) // 2] * 1000
    expected_down = FAILED_CALL if run.failure_policy == "Fail" else BY_POLICY
    down = verdict.by_phase.get(WEBHOOK_DOWN, Counter())
    if down["refused: " + expected_down] == 0:
        verdict.problems.append(f"no create was refused while the webhook was down ({expected_down!r} expected)")
    for key, count in down.items():
        if key.startswith("refused: ") and key != "refused: " + expected_down:
            verdict.problems.append(
                f"{count} creates refused while the webhook was down {key!r}, not {expected_down!r}"
            )
    return verdict


def report(run: Run, verdict: Verdict, seconds: float) -> None:
    c = verdict.counts
    print(f"\nfailurePolicy {run.failure_policy}: {c['attempts']} creates attempted in {seconds:.0f} s")
    for note in run.notes:
        print(f"   {note}")
    print(
        f"   {'phase':22} {'attempts':>8} {'created':>8} {'refused':>8} {'unanswered':>10} {'create p50 ms':>13}"
        f" {'x steady':>8}   refused by"
    )
    steady = verdict.latency_p50.get(STEADY, float("nan"))
    for phase in (STEADY, WEBHOOK_DOWN, *FAULTS):
        counts = verdict.by_phase.get(phase)
        if not counts:
            continue
        p50 = verdict.latency_p50.get(phase, float("nan"))
        total = counts["created"] + counts["refused"] + counts["unanswered"]
        reasons = ", ".join(
            f"{SHORT.get(key.removeprefix('refused: '), key.removeprefix('refused: '))} {value}"
            for key, value in counts.most_common()
            if key.startswith("refused: ")
        )
        print(
            f"   {phase:22} {total:8d} {counts['created']:8d} {counts['refused']:8d} {counts['unanswered']:10d}"
            f" {p50:13.1f} {p50 / steady:8.2f}   {reasons}"
        )
    print(
        f"   created {c['created']}, refused {c['refused']}, unanswered {c['unanswered']} "
        f"(of which stored {c['unanswered, stored']}); lost {c['lost']}, unlabelled {c['unlabelled']}, "
        f"wrong priority {c['wrong priority']}, refused yet stored {c['refused yet stored']}, "
        f"created while the webhook was down {c['created while the webhook was down']}"
    )
    for reason, count in verdict.refused.most_common():
        print(f"   refused {count:5d}: {reason}")
        print(f"         e.g. {verdict.samples[reason][:300]}")
    for reason, message in verdict.samples.items():
        if reason.startswith("unanswered"):
            print(f"   {reason}: e.g. {message[:200]}")
    for refusal in verdict.steady_refusals[:5]:
        print(f"   refused with no fault going on: {refusal[:300]}")
    for problem in verdict.problems[:20]:
        print(f"   PROBLEM {problem}")


async def main_async(bench: Bench, args: argparse.Namespace) -> int:
    kgov_port, metrics_port = devcluster.free_ports(2)
    metrics_url = f"http://127.0.0.1:{metrics_port}"
    ca_pem = devcluster.Paths(bench.root).ca_crt.read_bytes()
    chart = await asyncio.to_thread(chart_registration, f"https://127.0.0.1:{kgov_port}/mutate", "Fail", ca_pem)
    kgov = kgov_server(bench.root, bench.platform, kgov_port, metrics_port)
    failed = 0
    try:
        await asyncio.to_thread(kgov.start, bench.context)
        async with api_session(bench.info, bench.token, connections=args.workers + 4) as api:
            print(f"ClusterQueues held (no admission, no pods): {', '.join(await hold_cluster_queues(api))}")
            print(f"ValidatingAdmissionPolicies and bindings applied: {await apply_admission_policies(api, chart)}")
            for failure_policy in args.failure_policy:
                started = time.monotonic()
                run = await one_run(bench, api, kgov, chart, failure_policy, metrics_url, args)
                seconds = time.monotonic() - started
                verdict = await verify(api, bench, run)
                report(run, verdict, seconds)
                failed += len(verdict.problems)
                await delete_jobs(api, sorted(team_namespaces(bench.policies())), run.run, timeout=300)
            await register(api, None)
    finally:
        kgov.stop()
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="1x1x2x2", help="fake nodes SxBxRxH (default 4 nodes)")
    parser.add_argument("--failure-policy", nargs="+", choices=["Fail", "Ignore"], default=["Fail", "Ignore"])
    parser.add_argument(
        "--faults",
        nargs="+",
        choices=FAULTS,
        default=list(FAULTS),
        metavar="FAULT",
        help=f"faults in this order (default all: {', '.join(FAULTS)})",
    )
    parser.add_argument("--namespaces", nargs="*", help="team namespaces to create in (default every listed one)")
    parser.add_argument("--workers", type=int, default=2, help="concurrent creating clients")
    parser.add_argument("--pause", type=float, default=0.1, help="seconds between a client's creates")
    parser.add_argument("--steady", type=float, default=5.0, help="seconds of quiet before each fault and at the end")
    parser.add_argument("--down", type=float, default=5.0, help="seconds the killed webhook stays down")
    parser.add_argument("--fault-timeout", type=float, default=300.0, help="bound on each fault, seconds")
    args = parser.parse_args()
    if not 1 <= args.workers <= 32 or not 0 <= args.pause <= 10 or not 0 < args.steady <= 120:
        parser.error("--workers 1-32, --pause 0-10, --steady 0-120")
    print(machine_at_start("faults during creates through kube-apiserver"))
    print(
        f"   parameters: shape {args.shape}, failure policies {' '.join(args.failure_policy)}, workers "
        f"{args.workers}, pause {args.pause} s, steady {args.steady} s, webhook down {args.down} s, faults: "
        f"{', '.join(args.faults)}"
    )
    with tempfile.TemporaryDirectory(prefix="kgov-bench-") as state:
        started = time.monotonic()
        with bench_cluster(Path(state), args.shape) as bench:
            print(f"cluster up with the bundled platform in {time.monotonic() - started:.0f} s", flush=True)
            code = asyncio.run(main_async(bench, args))
    print(load_at_end())
    return code


if __name__ == "__main__":
    sys.exit(main())
