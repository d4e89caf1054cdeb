"""Placement quality of one policy's run, computed from a snapshot of the cluster.

A snapshot (:func:`trim_snapshot` makes one from the API server's objects) is plain JSON:

- ``levels``: the Topology's node labels, broadest first, ``kubernetes.io/hostname`` last;
- ``nodes``: node name → its labels at those levels;
- ``gpus_per_node``, ``node_count``, ``t0`` (epoch seconds when the stream started),
  ``horizon`` and ``end`` (seconds from ``t0``: the last arrival bound, and when observation stopped);
- ``jobs``: the stream (:class:`~.stream.Job` fields);
- ``workloads``: each Workload's name, its job (:func:`workload_job`), ``creationTimestamp``,
  conditions and ``status.admission.podSetAssignments`` (name, count, ``topologyAssignment``);
- ``pods``: each pod's name, job, role (``driver``/``worker``), Kueue's ``role-hash`` annotation
  (the podset of a pod group's pod) and ``spec.nodeName``;
- ``widened`` (newer snapshots): job → the steps of the governor's topology widening recorded on
  the job's object (the JobSet's ``kueue-governor.io/widened`` annotation, a JSON list), for the
  jobs with at least one.

A job is a JobSet (its pods labelled ``jobset.sigs.k8s.io/jobset-name`` and
``…/replicatedjob-name``, ``driver`` or ``workers``; its Workload owned by the JobSet, one podset
per replicatedJob, named after it) or a Kueue pod group (the benchmark's own job and role labels
on each pod; the Workload named after the group, the driver's podset named by its pods'
``role-hash``). Snapshots without a workload's ``job`` (older runs: pod groups) join by name.

Definitions (all from the snapshot, nothing from memory of the run):

- a job's **hosts** are where its pods run: the ``spec.nodeName`` of each pod once all are bound,
  else the hostnames of its Workload's topology assignment, driver podset and worker podset
  together (one host per pod, repeated when several pods share one);
- a job is **multi-node** when its pods cannot share one node (``pods * gpus_per_pod >
  gpus_per_node``); its **smallest feasible level** is the narrowest level at which one domain of
  the empty cluster holds all its pods (``hosts in the domain * (gpus_per_node // gpus_per_pod)
  >= pods``), or none (the whole cluster) when no domain does; it is **in its smallest feasible
  domain** when all its hosts share one value of that level's label (always, with no such level);
- **domains per job**: distinct layer-3 (rack) and layer-2 (block) values among its hosts, averaged
  over admitted multi-node jobs;
- **driver shares a rack**: the driver's host is in a rack that holds at least one of the job's
  workers, over admitted jobs with workers;
- **never admitted**: jobs of the stream whose Workload has no ``Admitted=True`` at the end;
- **wait**: ``Admitted`` transition time minus the Workload's ``creationTimestamp`` (1 s resolution),
  over admitted jobs; p95 by nearest rank;
- **GPU utilisation**: GPUs of admitted Workloads (admission to ``Finished``, or to the end of
  observation) integrated over ``[t0, t0 + horizon]``, over all GPUs x horizon;
- **creation lag**: the Workload's ``creationTimestamp`` minus the job's scheduled arrival (Kueue
  creates a JobSet's Workload when it sees the JobSet, a pod group's once all its pods exist, so
  this is how late the stream was submitted and taken up: the API server's and Kueue's pace under
  load);
- **widened**: jobs the governor widened at least once (their patience ran out while Kueue's TAS
  could not place them), and their steps in all;
- **off assignment**: admitted jobs with a bound pod whose node is not a host of the assignment
  (the pods' ``spec.nodeName`` against the topology assignment, as multisets).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from e2e.support import decode_topology_assignment
from webhook.core.plan.widen_history import WIDENED

__all__ = [
    "HOSTNAME",
    "JobPlacement",
    "PolicyMetrics",
    "job_placements",
    "pod_job_and_role",
    "policy_metrics",
    "smallest_feasible_level",
    "trim_snapshot",
    "workload_job",
]

HOSTNAME = "kubernetes.io/hostname"
ROLE_HASH = "kueue.x-k8s.io/role-hash"
JOB_LABEL = "placement-bench.kueue-governor.io/job"
ROLE_LABEL = "placement-bench.kueue-governor.io/role"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
#: The replicatedJob (and so the podset) of a JobSet job's driver.
DRIVER = "driver"


def workload_job(workload: Mapping[str, Any]) -> str:
    """The job a Workload (an API object) is of: the JobSet that owns it, else its own name (a pod
    group's Workload is named after the group)."""
    metadata = workload.get("metadata") or {}
    for owner in metadata.get("ownerReferences") or []:
        if owner.get("kind") == "JobSet":
            return str(owner.get("name"))
    return str(metadata.get("name"))


def pod_job_and_role(pod: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(job, ``driver``/``worker``) of a pod (an API object) from the JobSet's labels, else from
    the benchmark's own labels of a pod group's pod; None where neither says."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if JOBSET_NAME_LABEL in labels:
        replicated = labels.get(REPLICATED_JOB_LABEL)
        role = None if replicated is None else DRIVER if replicated == DRIVER else "worker"
        return labels[JOBSET_NAME_LABEL], role
    return labels.get(JOB_LABEL), labels.get(ROLE_LABEL)


def epoch(timestamp: str) -> float:
    """RFC 3339 (``2026-12-02T00:30:00Z``) to epoch seconds."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _condition_time(workload: Mapping[str, Any], kind: str) -> float | None:
    for item in workload.get("conditions") or []:
        if item.get("type") == kind and item.get("status") == "True":
            return epoch(item["lastTransitionTime"])
    return None


def trim_snapshot(
    base: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    workloads: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    owners: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """``base`` (levels, gpus_per_node, node_count, t0, horizon, end, jobs) plus the fields of the
    API server's Node, Workload and Pod objects and the jobs' own objects (``owners``, the
    JobSets) the metrics read (the shape in the module doc)."""
    levels = list(base["levels"])
    return {
        **base,
        "nodes": {
            n["metadata"]["name"]: {level: (n["metadata"].get("labels") or {}).get(level) for level in levels}
            for n in nodes
        },
        "workloads": [
            {
                "name": w["metadata"]["name"],
                "job": workload_job(w),
                "creationTimestamp": w["metadata"]["creationTimestamp"],
                "conditions": [
                    {k: c.get(k) for k in ("type", "status", "lastTransitionTime", "reason")}
                    for c in (w.get("status") or {}).get("conditions") or []
                ],
                "podSetAssignments": [
                    {k: a.get(k) for k in ("name", "count", "topologyAssignment")}
                    for a in ((w.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
                ],
            }
            for w in workloads
        ],
        "pods": [
            {
                "name": p["metadata"]["name"],
                "job": pod_job_and_role(p)[0],
                "role": pod_job_and_role(p)[1],
                "roleHash": (p["metadata"].get("annotations") or {}).get(ROLE_HASH),
                "nodeName": (p.get("spec") or {}).get("nodeName"),
                "nodeSelector": (p.get("spec") or {}).get("nodeSelector"),
            }
            for p in pods
        ],
        "widened": {o["metadata"]["name"]: _steps(o) for o in owners if _steps(o)},
    }


def _steps(owner: Mapping[str, Any]) -> int:
    """Steps in an object's widening history (:data:`WIDENED`); 0 without one, or one unreadable."""
    text = ((owner.get("metadata") or {}).get("annotations") or {}).get(WIDENED)
    try:
        steps = json.loads(text) if text else []
    except ValueError:
        return 0
    return len(steps) if isinstance(steps, list) else 0


def smallest_feasible_level(
    levels: Sequence[str], hosts_per_domain: Mapping[str, int], pods: int, pods_per_host: int
) -> str | None:
    """The narrowest level one of whose domains, empty, holds ``pods`` pods (``pods_per_host`` on
    each host); None when no domain of any level does (the job spans the cluster)."""
    for level in reversed(levels):
        if hosts_per_domain[level] * pods_per_host >= pods:
            return level
    return None


def hosts_per_domain(levels: Sequence[str], nodes: Mapping[str, Mapping[str, str | None]]) -> dict[str, int]:
    """For each level, the hosts of its largest domain (read from the nodes' labels)."""
    out = {}
    for level in levels:
        out[level] = max(Counter(labels[level] for labels in nodes.values()).values()) if nodes else 0
    return out


@dataclass(frozen=True)
class JobPlacement:
    """One job of the stream as the snapshot shows it (times in epoch seconds)."""

    name: str
    pods: int
    gpus: int
    gpus_per_pod: int
    workers: int
    created: float | None
    admitted: float | None
    finished: float | None
    hosts: tuple[str, ...]  # every pod's host, bound or else assigned (driver first when known)
    driver_host: str | None
    worker_hosts: tuple[str, ...]
    bound: tuple[str, ...]  # spec.nodeName of the pods that have one
    off_assignment: bool


def _assignment_hosts(assignment: Mapping[str, Any] | None) -> list[str]:
    """One hostname per pod of a podset's topology assignment.

    Raises:
        ValueError: the assignment's levels do not end at ``kubernetes.io/hostname``.
    """
    if not assignment:
        return []
    levels, domains = decode_topology_assignment(dict(assignment))
    if levels[-1] != HOSTNAME:
        raise ValueError(f"topology assignment at {levels[-1]!r}, expected hosts ({HOSTNAME})")
    return [d.values[-1] for d in domains for _ in range(d.pods)]


def job_placements(snapshot: Mapping[str, Any]) -> list[JobPlacement]:
    """Every job of the stream joined with its Workload (the JobSet's, or the pod group's) and pods."""
    workloads = {w.get("job", w["name"]): w for w in snapshot["workloads"]}
    pods_by_job: dict[str, list[Mapping[str, Any]]] = {}
    for pod in snapshot["pods"]:
        pods_by_job.setdefault(pod["job"], []).append(pod)
    out = []
    for job in snapshot["jobs"]:
        name = job["name"]
        pods = pods_by_job.get(name, [])
        workload = workloads.get(name)
        pods_total = job["workers"] + 1
        created = epoch(workload["creationTimestamp"]) if workload else None
        admitted = _condition_time(workload, "Admitted") if workload else None
        finished = _condition_time(workload, "Finished") if workload else None
        # the driver's podset: the JobSet's replicatedJob, or the pod group's driver's role hash
        driver_podsets = {DRIVER} | {p["roleHash"] for p in pods if p["role"] == "driver" and p.get("roleHash")}
        driver_hosts: list[str] = []
        worker_hosts: list[str] = []
        for assignment in (workload or {}).get("podSetAssignments") or []:
            hosts = _assignment_hosts(assignment.get("topologyAssignment"))
            if job["workers"] and assignment["name"] in driver_podsets:
                driver_hosts += hosts
            elif job["workers"]:
                worker_hosts += hosts
            else:
                driver_hosts += hosts  # a 1-pod job is its driver alone
        bound = tuple(sorted(p["nodeName"] for p in pods if p.get("nodeName")))
        assigned = Counter(driver_hosts + worker_hosts)
        off = admitted is not None and bool(Counter(bound) - assigned)
        if len(bound) == pods_total:  # where the pods run, when that differs from the assignment
            driver_hosts = [p["nodeName"] for p in pods if p["role"] == "driver"]
            worker_hosts = [p["nodeName"] for p in pods if p["role"] != "driver"]
        out.append(
            JobPlacement(
                name=name,
                pods=pods_total,
                gpus=pods_total * job["gpus_per_pod"],
                gpus_per_pod=job["gpus_per_pod"],
                workers=job["workers"],
                created=created,
                admitted=admitted,
                finished=finished,
                hosts=tuple(driver_hosts + worker_hosts),
                driver_host=driver_hosts[0] if len(driver_hosts) == 1 else None,
                worker_hosts=tuple(worker_hosts),
                bound=bound,
                off_assignment=off,
            )
        )
    return out


@dataclass(frozen=True)
class PolicyMetrics:
    """The figures of one policy (shares in 0..1, times in seconds; None: no job to average)."""

    jobs: int
    admitted: int
    never_admitted: tuple[str, ...]
    multi_node: int
    in_smallest_domain: float | None
    layer3_domains: float | None
    layer2_domains: float | None
    driver_shares_rack: float | None
    utilisation: float
    wait_mean: float | None
    wait_p95: float | None
    off_assignment: int
    creation_lag_mean: float | None
    creation_lag_max: float | None
    widened: int = 0
    widening_steps: int = 0


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def p95(values: Sequence[float]) -> float | None:
    """The 95th percentile by nearest rank (the smallest value with >= 95 % at or below it)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def policy_metrics(snapshot: Mapping[str, Any]) -> PolicyMetrics:
    """The figures of the module doc for one policy's snapshot.

    Raises:
        ValueError: a topology assignment not down to hosts, or a host missing from ``nodes``.
    """
    levels: list[str] = list(snapshot["levels"])
    nodes: Mapping[str, Mapping[str, str | None]] = snapshot["nodes"]
    if levels[-1] != HOSTNAME:
        raise ValueError(f"the Topology's last level is {levels[-1]!r}, expected {HOSTNAME}")
    rack, block = levels[-2], levels[-3]
    per_domain = hosts_per_domain(levels, nodes)
    gpn = int(snapshot["gpus_per_node"])
    placements = job_placements(snapshot)
    admitted = [p for p in placements if p.admitted is not None]
    for placement in admitted:
        missing = [h for h in placement.hosts if h not in nodes]
        if missing:
            raise ValueError(f"{placement.name}: hosts {missing} are not nodes of the snapshot")

    def distinct(placement: JobPlacement, level: str) -> int:
        return len({nodes[h][level] for h in placement.hosts})

    multi = [p for p in admitted if p.gpus > gpn and p.hosts]
    in_smallest = []
    for placement in multi:
        level = smallest_feasible_level(levels, per_domain, placement.pods, gpn // placement.gpus_per_pod)
        in_smallest.append(level is None or distinct(placement, level) == 1)
    with_workers = [p for p in admitted if p.workers and p.driver_host is not None and p.worker_hosts]
    shares = [
        nodes[p.driver_host][rack] in {nodes[h][rack] for h in p.worker_hosts}
        for p in with_workers
        if p.driver_host is not None
    ]
    t0, horizon, end = float(snapshot["t0"]), float(snapshot["horizon"]), float(snapshot["end"])
    busy = 0.0
    for placement in admitted:
        assert placement.admitted is not None
        stop = placement.finished if placement.finished is not None else t0 + end
        overlap = min(stop, t0 + horizon) - max(placement.admitted, t0)
        busy += placement.gpus * max(0.0, overlap)
    arrivals = {job["name"]: t0 + float(job["arrival"]) for job in snapshot["jobs"]}
    lags = [p.created - arrivals[p.name] for p in placements if p.created is not None]
    waits = [p.admitted - p.created for p in admitted if p.admitted is not None and p.created is not None]
    return PolicyMetrics(
        jobs=len(placements),
        admitted=len(admitted),
        never_admitted=tuple(p.name for p in placements if p.admitted is None),
        multi_node=len(multi),
        in_smallest_domain=_mean([float(x) for x in in_smallest]),
        layer3_domains=_mean([float(distinct(p, rack)) for p in multi]),
        layer2_domains=_mean([float(distinct(p, block)) for p in multi]),
        driver_shares_rack=_mean([float(x) for x in shares]),
        utilisation=busy / (int(snapshot["node_count"]) * gpn * horizon),
        wait_mean=_mean(waits),
        wait_p95=p95(waits),
        off_assignment=sum(1 for p in admitted if p.off_assignment),
        creation_lag_mean=_mean(lags),
        creation_lag_max=max(lags, default=None),
        widened=len(snapshot.get("widened") or {}),
        widening_steps=sum((snapshot.get("widened") or {}).values()),
    )
