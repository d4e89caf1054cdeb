"""Placement benchmark on real Kueue: four topology policies, one seeded job stream, one table.

For each policy in turn a fresh simulated cluster (``e2e.devcluster``: kube-apiserver, Kueue
v0.19.2, kube-controller-manager, kube-scheduler, the JobSet controller for JobSets, KWOK nodes
``SxBxRxH`` with layer-1/2/3 network labels) is brought up in a temporary state directory, the
policy's platform file (one team, ``bench``, whose quota is the whole cluster) is generated and
applied, and ``kgov serve`` runs as the admission webhook with it. Then the same stream
(:mod:`.stream`) is submitted on its schedule (each job a JobSet, or a pod group's Pods); KWOK
runs each bound pod and completes it after the job's run time. Observation ends when every job
has finished, or ``--drain`` seconds after the horizon. Then the Nodes, Workloads and Pods are
read and :mod:`.metrics` computes the figures.

Job shapes (``--shape-kind``):

- ``jobset`` (default): one JobSet (``jobset.x-k8s.io/v1alpha2``) with a replicatedJob ``driver``
  (one Job of one pod, its container declaring a port) and, with workers, a replicatedJob
  ``workers`` (one Job of ``workers`` pods, parallelism = completions); Kueue makes one Workload of
  it with a podset per replicatedJob, and the governor sees the whole job in one admission
  request (what topology mode ``auto`` needs to place driver and workers together);
- ``podgroup``: a Kueue pod group (plain Pods labelled ``kueue.x-k8s.io/pod-group-name``,
  ``pod-group-total-count`` annotated), a driver pod whose container declares a port (so Kueue
  gives it a role of its own: a podset) and its workers. Each Pod reaches the governor alone, so
  a rule that needs the whole job cannot apply.

Policies (the team's ``policy.topology`` in the platform file):

- ``implicit``: ``mode: none``, no TAS annotation; Kueue's TAS-only ClusterQueue places each
  podset as if unconstrained (its implied topology request);
- ``required-L3``: ``mode: required`` at layer 3 (a rack), HyperPod's manual habit;
- ``preferred-L3``: ``mode: preferred`` at layer 3;
- ``auto``: ``mode: auto`` with no ``level`` (whatever the governor's ``auto`` does: ``required``
  at the level it picks, the default ``autoConstraint``);
- ``auto-preferred``: the same with ``autoConstraint: preferred``, so that one run measures both
  and decides the default.

    python -m benchmarks.placement                                # 4x4x4x4: 256 nodes (long)
    python -m benchmarks.placement --shape 1x2x2x4 --horizon 120  # 16 nodes, a few minutes per policy
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform as python_platform
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from e2e import devcluster
from e2e.manifests import INSTANCE_TYPE_LABEL, TOPOLOGY_LEVELS, TopologyShape
from e2e.support import GPU, KUEUE_API, PAUSE_IMAGE, create, is_true, list_objects

from .metrics import JOB_LABEL, ROLE_LABEL, PolicyMetrics, policy_metrics, trim_snapshot, workload_job
from .report import goals, table
from .stream import Job, StreamParameters, make_stream

NAMESPACE = "bench"
LOCAL_QUEUE = "bench-queue"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
COMPLETE_JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"
DRIVER_PORT = 29500  # torch.distributed's usual master port
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
SHAPE_DESCRIPTIONS = {
    "jobset": "one JobSet each (replicatedJobs driver and workers; the governor sees the whole job)",
    "podgroup": "one Kueue pod group of Pods each (driver and workers; the governor sees one Pod at a time)",
}
SHAPE_KINDS = tuple(SHAPE_DESCRIPTIONS)
RACK = TOPOLOGY_LEVELS[2]

#: (name, the team's topology rule) in the order they run.
POLICIES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("implicit", {"mode": "none"}),
    ("required-L3", {"mode": "required", "level": RACK}),
    ("preferred-L3", {"mode": "preferred", "level": RACK}),
    ("auto", {"mode": "auto"}),
    ("auto-preferred", {"mode": "auto", "autoConstraint": "preferred"}),
)


def platform_file(shape: TopologyShape, topology_rule: dict[str, Any]) -> dict[str, Any]:
    """One team, ``bench``, in namespace ``bench``, with the whole cluster as quota (so only the
    nodes, never the quota, limit admission) and ``topology_rule`` as its topology policy."""
    nodes = shape.node_count
    return {
        "apiVersion": "kueue-governor.io/v1alpha1",
        "kind": "Platform",
        "topologies": [{"name": "network", "levels": list(TOPOLOGY_LEVELS)}],
        "flavors": [
            {
                "name": "gpu-node",
                "nodeLabels": {INSTANCE_TYPE_LABEL: shape.instance_type},
                "topologyName": "network",
                "nodeResources": {"cpu": 192, GPU: shape.gpus_per_node},
            }
        ],
        "teams": [
            {
                "name": NAMESPACE,
                "quotas": [
                    {
                        "flavor": "gpu-node",
                        "resources": {
                            "cpu": {"nominalQuota": nodes * 192},
                            GPU: {"nominalQuota": nodes * shape.gpus_per_node},
                        },
                    }
                ],
                "policy": {"topology": topology_rule},
            }
        ],
    }


def _container(job: Job, driver: bool) -> dict[str, Any]:
    """The one container of a pod of ``job``: ``job.gpus_per_pod`` GPUs and 4 CPUs per GPU; the
    driver's declares the port :data:`DRIVER_PORT`."""
    container: dict[str, Any] = {
        "name": "main",
        "image": PAUSE_IMAGE,
        "resources": {
            "requests": {"cpu": str(4 * job.gpus_per_pod), GPU: str(job.gpus_per_pod)},
            "limits": {GPU: str(job.gpus_per_pod)},
        },
    }
    if driver:
        container["ports"] = [{"containerPort": DRIVER_PORT, "name": "master"}]
    return container


def _completion(job: Job) -> dict[str, str]:
    """KWOK's pod-complete annotations: each pod Succeeded ``job.runtime`` seconds after it runs."""
    return {COMPLETE_DELAY: f"{job.runtime}s", COMPLETE_JITTER: f"{job.runtime}s"}


def job_jobset(job: Job) -> dict[str, Any]:
    """One job as a JobSet in the team's LocalQueue: replicatedJob ``driver`` (one Job of one
    pod) and, when ``job.workers``, ``workers`` (one Job of ``job.workers`` pods), each pod as
    :func:`_container` says, completed by KWOK ``job.runtime`` seconds after it runs.

    No JobSet webhook runs in the benchmark's cluster, so the fields JobSet's defaulting webhook
    (v0.12.0, ``pkg/webhooks/jobset_webhook.go``) would set are written here: success policy
    ``All``, startup policy ``AnyOrder``, Indexed completion, the network block (DNS hostnames off:
    no headless Service per job, nothing here resolves names). Kueue suspends it on creation.
    """

    def replicated_job(name: str, pods: int) -> dict[str, Any]:
        return {
            "name": name,
            "replicas": 1,
            "template": {
                "spec": {
                    "parallelism": pods,
                    "completions": pods,
                    "completionMode": "Indexed",
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"annotations": _completion(job)},
                        "spec": {
                            "restartPolicy": "Never",
                            "terminationGracePeriodSeconds": 1,
                            "containers": [_container(job, driver=name == "driver")],
                        },
                    },
                }
            },
        }

    replicated = [replicated_job("driver", 1)]
    if job.workers:
        replicated.append(replicated_job("workers", job.workers))
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {"name": job.name, "namespace": NAMESPACE, "labels": {QUEUE_LABEL: LOCAL_QUEUE}},
        "spec": {
            "replicatedJobs": replicated,
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "network": {"enableDNSHostnames": False, "publishNotReadyAddresses": True},
        },
    }


def job_pods(job: Job) -> list[dict[str, Any]]:
    """The pods of one job: a Kueue pod group of a driver (container port :data:`DRIVER_PORT`, a
    role of its own) and ``job.workers`` workers, each asking for ``job.gpus_per_pod`` GPUs and 4
    CPUs per GPU, completed by KWOK ``job.runtime`` seconds after they run."""
    pods = []
    for index in range(job.pods):
        role = "driver" if index == 0 else "worker"
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job.name}-{'driver' if index == 0 else f'worker-{index}'}",
                    "namespace": NAMESPACE,
                    "labels": {QUEUE_LABEL: LOCAL_QUEUE, GROUP_NAME: job.name, JOB_LABEL: job.name, ROLE_LABEL: role},
                    "annotations": {GROUP_TOTAL: str(job.pods), **_completion(job)},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [_container(job, driver=role == "driver")],
                },
            }
        )
    return pods


async def run_policy(kubeconfig: str, jobs: Sequence[Job], args: argparse.Namespace) -> dict[str, Any]:
    """Submit ``jobs`` on their schedule, observe until done or ``horizon + drain``; return the
    untrimmed objects and times (``t0`` epoch seconds; ``end`` and ``lag`` seconds)."""
    async with devcluster.dynamic_client(kubeconfig) as dynamic:
        limit = asyncio.Semaphore(args.concurrency)
        lags: list[float] = []
        errors: list[str] = []
        t0 = time.time()

        async def submit(job: Job) -> None:
            await asyncio.sleep(max(0.0, t0 + job.arrival - time.time()))
            lags.append(time.time() - t0 - job.arrival)

            async def one(body: dict[str, Any]) -> None:
                async with limit:
                    try:
                        await create(dynamic, body)
                    except Exception as error:  # reported, counted, never silent
                        errors.append(f"{body['kind']} {body['metadata']['name']}: {error}")

            bodies = [job_jobset(job)] if args.shape_kind == "jobset" else job_pods(job)
            await asyncio.gather(*(one(body) for body in bodies))

        submitting = asyncio.gather(*(submit(job) for job in jobs))
        names = {job.name for job in jobs}
        last_print = 0.0
        while True:
            await asyncio.sleep(args.poll)
            now = time.time() - t0
            workloads = [
                w for w in await list_objects(dynamic, KUEUE_API, "Workload", NAMESPACE) if workload_job(w) in names
            ]
            admitted = sum(1 for w in workloads if is_true(w, "Admitted") or is_true(w, "Finished"))
            finished = sum(1 for w in workloads if is_true(w, "Finished"))
            if now - last_print >= 30:
                last_print = now
                print(
                    f"    t={now:5.0f}s  workloads {len(workloads)}/{len(jobs)}  admitted {admitted}  "
                    f"finished {finished}",
                    flush=True,
                )
            if (
                submitting.done()
                and now >= args.horizon
                and (finished == len(jobs) or now >= args.horizon + args.drain)
            ):
                break
        await submitting
        end = time.time() - t0
        return {
            "t0": t0,
            "end": end,
            "lag": max(lags, default=0.0),
            "errors": errors,
            "nodes": await list_objects(dynamic, "v1", "Node"),
            "workloads": await list_objects(dynamic, KUEUE_API, "Workload", NAMESPACE),
            "pods": await list_objects(dynamic, "v1", "Pod", NAMESPACE),
        }


def run_one(
    name: str, rule: dict[str, Any], shape: TopologyShape, jobs: Sequence[Job], root: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """A fresh cluster, the policy's platform and governor, the stream; the trimmed snapshot."""
    platform_path = root.parent / f"platform-{name}.yaml"
    platform_path.write_text(yaml.safe_dump(platform_file(shape, rule), sort_keys=False))
    started = time.monotonic()
    try:
        info = devcluster.up(root, shape=shape, jobset_controller=args.shape_kind == "jobset")
        devcluster.apply_platform(root, platform_path)
        devcluster.start_governor(root, platform_path)
        print(f"  {name}: cluster up in {time.monotonic() - started:.0f} s; submitting {len(jobs)} jobs", flush=True)
        raw = asyncio.run(run_policy(info.kubeconfig, jobs, args))
    finally:
        devcluster.down(root)
    base = {
        "policy": name,
        "shapeKind": args.shape_kind,
        "topologyRule": rule,
        "levels": list(TOPOLOGY_LEVELS),
        "gpus_per_node": shape.gpus_per_node,
        "node_count": shape.node_count,
        "t0": raw["t0"],
        "horizon": args.horizon,
        "end": raw["end"],
        "lag": raw["lag"],
        "errors": raw["errors"],
        "jobs": [
            {
                "name": j.name,
                "arrival": j.arrival,
                "runtime": j.runtime,
                "gpus_per_pod": j.gpus_per_pod,
                "workers": j.workers,
            }
            for j in jobs
        ],
    }
    snapshot = trim_snapshot(base, raw["nodes"], raw["workloads"], raw["pods"])
    print(
        f"  {name}: observed {raw['end']:.0f} s, worst submission lag {raw['lag']:.1f} s, "
        f"{len(raw['errors'])} create errors",
        flush=True,
    )
    for error in raw["errors"][:5]:
        print(f"    create error: {error}", flush=True)
    return snapshot


def describe_stream(jobs: Sequence[Job]) -> str:
    sizes = Counter(f"{j.pods}x{j.gpus_per_pod}GPU" if j.gpus_per_pod < 8 else f"{j.pods} nodes" for j in jobs)
    pods = sum(j.pods for j in jobs)
    gpu_seconds = sum(j.gpus * j.runtime for j in jobs)
    order = sorted(sizes, key=lambda s: (("GPU" in s), int(s.split()[0].split("x")[0])))
    return f"{len(jobs)} jobs, {pods} pods, {gpu_seconds:,} GPU-seconds asked; " + ", ".join(
        f"{s}: {sizes[s]}" for s in order
    )


def print_saved(directory: Path, policies: Sequence[str]) -> int:
    """The table of the snapshots ``<policy>.json`` in ``directory`` (those present, in policy
    order); 2 with a message when none is there or they are not of one stream."""
    snapshots = {}
    for name in policies:
        path = directory / f"{name}.json"
        if path.is_file():
            snapshots[name] = json.loads(path.read_text())
    if not snapshots:
        print(f"error: no snapshot <policy>.json of {', '.join(policies)} in {directory}", file=sys.stderr)
        return 2
    streams = {json.dumps(s["jobs"], sort_keys=True) for s in snapshots.values()}
    if len(streams) != 1:
        print(f"error: the snapshots in {directory} are not of one stream (their jobs differ)", file=sys.stderr)
        return 2
    first = next(iter(snapshots.values()))
    print(first.get("header") or f"snapshots from {directory}")
    print(table({name: policy_metrics(s) for name, s in snapshots.items()}))
    print(goals({name: policy_metrics(s) for name, s in snapshots.items()}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.placement", description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="4x4x4x4", help="fake nodes SxBxRxH (default 4x4x4x4: 256 nodes)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--horizon", type=float, default=300.0, help="seconds over which jobs arrive")
    parser.add_argument("--load", type=float, default=0.9, help="offered load (node-seconds per node-second)")
    parser.add_argument("--min-runtime", type=int, default=15, help="seconds")
    parser.add_argument("--max-runtime", type=int, default=120, help="seconds")
    parser.add_argument("--max-job-nodes", type=int, default=64)
    parser.add_argument("--small-share", type=float, default=0.2, help="share of sub-node jobs")
    parser.add_argument("--drain", type=float, default=180.0, help="seconds observed after the horizon at most")
    parser.add_argument("--poll", type=float, default=5.0, help="seconds between progress reads")
    parser.add_argument("--concurrency", type=int, default=8, help="object creations in flight")
    parser.add_argument(
        "--shape-kind",
        choices=SHAPE_KINDS,
        default="jobset",
        help="each job a JobSet (default: the governor sees the whole job) or a Kueue pod group of Pods",
    )
    parser.add_argument(
        "--policies",
        default=",".join(n for n, _ in POLICIES),
        help="comma-separated subset of " + ", ".join(n for n, _ in POLICIES),
    )
    parser.add_argument("--output", type=Path, help="directory for each policy's snapshot (JSON)")
    parser.add_argument(
        "--from",
        dest="from_dir",
        type=Path,
        help="no cluster: print the table from the snapshots an earlier run wrote with --output",
    )
    args = parser.parse_args(argv)
    # a SIGTERM (timeout, kill) unwinds like Ctrl-C, so each cluster is stopped by its ``finally``
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        shape = TopologyShape.parse(args.shape)
        parameters = StreamParameters(
            seed=args.seed,
            nodes=shape.node_count,
            gpus_per_node=shape.gpus_per_node,
            horizon=args.horizon,
            load=args.load,
            min_runtime=args.min_runtime,
            max_runtime=args.max_runtime,
            max_job_nodes=args.max_job_nodes,
            small_share=args.small_share,
        )
        jobs = make_stream(parameters)
    except ValueError as error:
        parser.error(str(error))
    chosen = [p for p in POLICIES if p[0] in args.policies.split(",")]
    unknown = set(args.policies.split(",")) - {n for n, _ in POLICIES}
    if unknown or not chosen:
        parser.error(f"--policies: unknown {sorted(unknown)}; choose from {[n for n, _ in POLICIES]}")
    header = (
        f"placement benchmark: python {python_platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}\n"
        f"cluster {shape} ({shape.node_count} nodes x {shape.gpus_per_node} GPUs; "
        f"{shape.racks * shape.hosts} nodes per layer-2 block, {shape.hosts} per layer-3 rack)\n"
        f"stream: {parameters.describe()}\n"
        f"        {describe_stream(jobs)}\n"
        f"jobs: {SHAPE_DESCRIPTIONS[args.shape_kind]}\n"
        f"observation: until every job finished or {args.drain:.0f} s after the horizon; a fresh cluster per policy"
    )
    if args.from_dir is not None:
        return print_saved(args.from_dir, [name for name, _ in chosen])
    print(header, flush=True)
    results: dict[str, PolicyMetrics] = {}
    with tempfile.TemporaryDirectory(prefix="kgov-placement-") as state:
        root = Path(state) / "cluster"
        for name, rule in chosen:
            snapshot = {"header": header, **run_one(name, rule, shape, jobs, root, args)}
            if args.output is not None:
                args.output.mkdir(parents=True, exist_ok=True)
                (args.output / f"{name}.json").write_text(json.dumps(snapshot, indent=1) + "\n")
            results[name] = policy_metrics(snapshot)
    print()
    print(header)
    print(table(results))
    print(goals(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
