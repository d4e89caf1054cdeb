"""``kgov why``: one workload's state, quota, topology and the cause that keeps it pending.

:func:`explain` joins a :class:`~webhook.why.snapshot.Snapshot` in memory. The cause of a pending
workload is the first that holds of:

- ``never fits``: a podset Kueue can assign no flavor (:class:`NoFlavor`), a resource needs
  more than the ClusterQueue can ever get (nominal + what its borrowing limit and cohort allow),
  or no domain of the podset's level holds it on the current nodes even with nothing running,
  nor once the nodes down now are back;
- ``nodes down``: it would fit with nothing running once the nodes not Ready, cordoned or tainted
  by Kubernetes' transient ``node.kubernetes.io/*`` taints now are back (it waits for them);
- ``Kueue's message``: Kueue's ``QuotaReserved`` message names a reason not modelled here (not
  quota, not topology): the message itself is the summary;
- ``taint``: it would fit with no pods running if untolerated taints did not exclude nodes;
- ``no domain free``: a domain could hold it, but other pods and workloads use the room now;
- ``over quota``: its ClusterQueue lacks a resource now; the summary says which limit binds
  (its nominal quota, the cohort's unused quota, or its own borrowing limit);
- ``behind higher priority`` / ``behind earlier workloads``: it fits, but its ClusterQueue is
  StrictFIFO and pending workloads of higher (or the same) priority come before it;
- ``not evaluated yet``: none of the above (Kueue has not tried it since its last change; in a
  BestEffortFIFO queue the pending workloads ahead of it do not hold it back).

Amounts are base units (GPUs, CPU cores, bytes) as :class:`~decimal.Decimal`;
:func:`webhook.why.report.to_json` turns them into JSON numbers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from webhook.core.kueue.inventory import Node
from webhook.core.kueue.resources import pod_requests
from webhook.core.objects.quantity import QuantityError, parse_quantity
from webhook.topology.tree import HOSTNAME_LABEL, assignment_domains
from webhook.why.causes import classify
from webhook.why.findings import NoFlavor, OwnedWorkload, Position, QuotaNeed, WhyReport
from webhook.why.placement import PodsetPlacement, free_capacity, place_podset
from webhook.why.quota import CohortView
from webhook.why.snapshot import Snapshot
from webhook.why.state import PENDING_STATES, meta, workload_state

__all__ = [
    "NoFlavor",
    "OwnedWorkload",
    "Position",
    "QuotaNeed",
    "WhyReport",
    "explain",
    "no_flavor",
    "position_in_queue",
]

_ZERO = Decimal(0)
_WITHOUT_RESERVATION = (
    "queued",
    "pending",
    "waiting for quota",
    "waiting for topology",
    "finished",
    "inactive",
    "evicted",
    "preempted",
)


def _state(snapshot: Snapshot, workload: Mapping[str, Any]) -> str:
    states: dict[int, str] = snapshot.memo.setdefault("states", {})
    if id(workload) not in states:
        states[id(workload)] = workload_state(workload).state
    return states[id(workload)]


def _pending_in(snapshot: Snapshot, cluster_queue: str) -> list[Mapping[str, Any]]:
    """The ClusterQueue's pending Workloads in Kueue's order (priority, then creation time); once per queue."""
    queues: dict[str, list[Mapping[str, Any]]] = snapshot.memo.setdefault("pending", {})
    if cluster_queue not in queues:
        for queue in {snapshot.queue_of(w) or "" for w in snapshot.workloads}:
            queues[queue] = []
        for w in snapshot.workloads:
            if _state(snapshot, w) in PENDING_STATES:
                queues[snapshot.queue_of(w) or ""].append(w)
        for members in queues.values():
            members.sort(key=lambda w: (-int((w.get("spec") or {}).get("priority") or 0), meta(w, "creationTimestamp")))
        queues.setdefault(cluster_queue, [])
    return queues[cluster_queue]


def position_in_queue(snapshot: Snapshot, workload: Mapping[str, Any], cluster_queue: str) -> Position:
    """Where ``workload`` stands among its ClusterQueue's pending workloads (Kueue's visibility
    answer when the snapshot has one, else estimated by priority then creation time)."""
    pending = _pending_in(snapshot, cluster_queue)
    index = next((i for i, w in enumerate(pending) if w is workload), len(pending))
    ahead = [
        {
            "workload": f"{meta(w, 'namespace')}/{meta(w, 'name')}",
            "priority": int((w.get("spec") or {}).get("priority") or 0),
            "created": meta(w, "creationTimestamp"),
            "state": _state(snapshot, w),
        }
        for w in pending[:index]
    ]
    seen = (snapshot.pending_positions or {}).get(meta(workload, "name"))
    if seen is not None:
        return Position(seen["positionInClusterQueue"], seen["positionInLocalQueue"], "visibility", ahead)
    queue_name = (workload.get("spec") or {}).get("queueName")
    local = [
        w
        for w in pending[: index + 1]
        if (w.get("spec") or {}).get("queueName") == queue_name and meta(w, "namespace") == meta(workload, "namespace")
    ]
    return Position(index, len(local) - 1 if index < len(pending) else None, "estimated", ahead)


def _needs(workload: Mapping[str, Any]) -> dict[str, dict[str, Decimal]]:
    """Per podset name: total requests (``status.resourceRequests`` when Kueue wrote it)."""
    out: dict[str, dict[str, Decimal]] = {}
    for podset in (workload.get("spec") or {}).get("podSets") or []:
        count = int(podset.get("count") or 0)
        per_pod = pod_requests((podset.get("template") or {}).get("spec") or {})
        out[str(podset.get("name"))] = {r: a * count for r, a in per_pod.items()}
    for recorded in (workload.get("status") or {}).get("resourceRequests") or []:
        try:
            out[str(recorded.get("name"))] = {
                r: parse_quantity(v) for r, v in (recorded.get("resources") or {}).items()
            }
        except (QuantityError, TypeError):
            continue
    return out


_TAS_REQUESTS = (
    "required",
    "preferred",
    "unconstrained",
    "podSetSliceRequiredTopology",
    "podSetSliceSize",
    "podsetSliceRequiredTopologyConstraints",
)


def no_flavor(snapshot: Snapshot, queue: Mapping[str, Any], workload: Mapping[str, Any]) -> list[NoFlavor]:
    """The podsets (with pods) Kueue can assign no flavor in ``queue`` (see :class:`NoFlavor`).

    A podset is placed by topology when it asks for it (``topologyRequest``: Kueue's
    ``IsExplicitlyRequestingTAS``) or every flavor of the ClusterQueue has a ``topologyName``
    (``IsTASOnly``). A ClusterQueue covering ``pods`` gives every podset a flavor. Resources that
    Kueue's Configuration excludes (``resources.excludeResourcePrefixes``) are not known here.
    """
    groups = [g for g in (queue.get("spec") or {}).get("resourceGroups") or [] if isinstance(g, Mapping)]
    covered = sorted({str(r) for g in groups for r in g.get("coveredResources") or []})
    flavors = [str(f.get("name")) for g in groups for f in g.get("flavors") or [] if isinstance(f, Mapping)]
    tas_only = bool(flavors) and all(
        ((snapshot.flavor(f) or {}).get("spec") or {}).get("topologyName") for f in flavors
    )
    out: list[NoFlavor] = []
    for podset in (workload.get("spec") or {}).get("podSets") or []:
        if not isinstance(podset, Mapping) or not int(podset.get("count") or 0):
            continue
        requested = sorted(r for r, a in pod_requests((podset.get("template") or {}).get("spec") or {}).items() if a)
        uncovered = [r for r in requested if r not in covered]
        request = podset.get("topologyRequest") or {}
        by_topology = tas_only or any(request.get(key) for key in _TAS_REQUESTS)
        if uncovered or (by_topology and "pods" not in covered and not set(requested) & set(covered)):
            out.append(NoFlavor(str(podset.get("name")), uncovered, covered))
    return out


def _flavors_for(
    queue: Mapping[str, Any], podset: str, needs: Mapping[str, Decimal], workload: Mapping[str, Any]
) -> list[str]:
    """The flavor a podset got (admitted) or the first flavor of the resource group covering it."""
    for assignment in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        if assignment.get("name") == podset and assignment.get("flavors"):
            return sorted(set(assignment["flavors"].values()))
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        covered = set(group.get("coveredResources") or [])
        if covered & set(needs):
            return [str(f.get("name")) for f in (group.get("flavors") or [])[:1]]
    return []


_HOLDING_QUOTA = ("admitted", "running", "quota reserved")


def _assign(snapshot: Snapshot, workload: Mapping[str, Any], podset: str, placed: PodsetPlacement) -> None:
    """For a workload holding quota: set where Kueue placed ``podset`` (its ``topologyAssignment``)
    and clear the free-now analysis, which would count its own nodes as free room."""
    placed.fit_now, placed.fit_untainted_now, placed.excluded = [], None, {}
    placed.assigned = []
    by_host: dict[str, Node] = {}
    for node in snapshot.memo["nodes"].values():
        by_host[node.labels.get(HOSTNAME_LABEL, node.name)] = node
    for assignment in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        if assignment.get("name") != podset or not assignment.get("topologyAssignment"):
            continue
        try:
            domains = assignment_domains(assignment["topologyAssignment"])
        except (ValueError, KeyError, TypeError):
            continue
        for levels, values, pods in domains:
            placed.assigned.append(("/".join(values), pods))
            node = by_host.get(values[-1]) if levels and levels[-1] == HOSTNAME_LABEL else None
            domain = node.labels.get(placed.level) if node is not None and placed.level else None
            if domain is not None and domain not in placed.assigned_domains:
                placed.assigned_domains.append(domain)


def _placements(
    snapshot: Snapshot,
    workload: Mapping[str, Any],
    queue: Mapping[str, Any],
    needs: Mapping[str, Mapping[str, Decimal]],
) -> list[tuple[str, PodsetPlacement]]:
    holding = workload_state(workload).state in _HOLDING_QUOTA
    if workload_state(workload).state in _WITHOUT_RESERVATION:
        # Nothing of its own is counted in the nodes: one computation serves every such workload.
        if snapshot.free is None:
            snapshot.free = free_capacity(snapshot.nodes, snapshot.pods, snapshot.workloads)
        free = snapshot.free
    else:
        free = free_capacity(snapshot.nodes, snapshot.pods, [w for w in snapshot.workloads if w is not workload])
    out: list[tuple[str, PodsetPlacement]] = []
    for podset in (workload.get("spec") or {}).get("podSets") or []:
        name = str(podset.get("name"))
        for flavor_name in _flavors_for(queue, name, needs.get(name, {}), workload):
            flavor = snapshot.flavor(flavor_name)
            topology_name = str(((flavor or {}).get("spec") or {}).get("topologyName") or "")
            topology = snapshot.topology(topology_name) if topology_name else None
            if flavor is None or topology is None:
                continue
            levels = [str(level.get("nodeLabel")) for level in (topology.get("spec") or {}).get("levels") or []]
            if "nodes" not in snapshot.memo:
                snapshot.memo["nodes"] = {n.name: n for n in map(Node.from_object, snapshot.nodes)}
            # Podsets of the same shape on the shared free capacity place alike (kgov status --team).
            key = json.dumps([podset, flavor_name], sort_keys=True, default=str) if free is snapshot.free else None
            placements = snapshot.memo.setdefault("placements", {})
            if key is None or key not in placements:
                placed = place_podset(
                    podset, flavor, levels, topology_name, snapshot.nodes, free, snapshot.memo["nodes"]
                )
                if key is None:
                    if holding:
                        _assign(snapshot, workload, name, placed)
                    out.append((name, placed))
                    continue
                placements[key] = placed
            out.append((name, placements[key]))
    return out


def explain(snapshot: Snapshot, workload: Mapping[str, Any] | None, kind: str, namespace: str, name: str) -> WhyReport:
    """The report for one workload object (``workload`` None: Kueue made no Workload for it)."""
    report = WhyReport(kind, namespace, name, meta(workload, "name") if workload else None, None)
    if workload is None:
        report.cause = "no workload"
        report.summary = (
            "Kueue has no Workload for it: it has no queue label, or Kueue does not manage its kind or namespace"
        )
        return report
    report.state = workload_state(workload)
    spec = workload.get("spec") or {}
    report.local_queue = str(spec.get("queueName") or "")
    report.priority = int(spec.get("priority") or 0)
    report.priority_class = str((spec.get("priorityClassRef") or {}).get("name") or "")
    report.cluster_queue = snapshot.queue_of(workload) or ""
    queue = snapshot.cluster_queue(report.cluster_queue) if report.cluster_queue else None
    if queue is None:
        report.cause = "no ClusterQueue"
        report.summary = f"LocalQueue {report.local_queue!r} does not exist in {namespace} or names no ClusterQueue"
        return report
    report.cohort = str((queue.get("spec") or {}).get("cohortName") or "")
    report.queueing_strategy = str((queue.get("spec") or {}).get("queueingStrategy") or "BestEffortFIFO")
    cohorts = CohortView.build(snapshot.clusterqueues, snapshot.cohorts)
    report.notes.extend(cohorts.notes)
    needs = _needs(workload)
    report.no_flavor = no_flavor(snapshot, queue, workload)
    report.placements = _placements(snapshot, workload, queue, needs)
    totals: dict[tuple[str, str], Decimal] = {}
    for podset, amounts in needs.items():
        for flavor in _flavors_for(queue, podset, amounts, workload):
            for resource, amount in amounts.items():
                totals[(flavor, resource)] = totals.get((flavor, resource), _ZERO) + amount
    for (flavor, resource), amount in sorted(totals.items()):
        quota = cohorts.quota(report.cluster_queue, flavor, resource)
        if quota is not None:
            # The workload's own reservation is not in its way.
            if report.state.state in ("admitted", "running", "quota reserved"):
                quota.available += amount
            report.quota.append(QuotaNeed(quota, amount))
    if report.state.state in ("queued", "pending", "waiting for quota", "waiting for topology"):
        report.position = position_in_queue(snapshot, workload, report.cluster_queue)
    classify(report)
    if report.state.earlier:
        report.summary += f" ({report.state.earlier.split(': ', 1)[0]}, then requeued)"
    return report
