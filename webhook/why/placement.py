"""Where a podset could go now: nodes excluded by cause and the largest domain's free capacity.

Kueue v0.19.2's TAS, for one podset and one flavor (``pkg/cache/scheduler/tas_nodes_cache.go``,
``scheduling_simulator_default.go`` ``FindFeasibleNodes``, ``tas_flavor_snapshot.go``
``fillLeafCounts``):

- its snapshot holds the Ready, schedulable nodes carrying the flavor's ``nodeLabels`` and every
  level of the Topology (the others we count as ``not ready``, ``cordoned``, ``flavor labels``,
  ``no topology labels``);
- each of those is then excluded for the first of: a ``NoSchedule``/``NoExecute`` taint that
  neither the pod nor the flavor tolerates (``taint "key=value:Effect"``), the pod's
  ``nodeSelector``, its required node affinity, and, when not even one pod fits in what is
  free, the resource that allows the fewest pods (ties by name: ``resource "nvidia.com/gpu"``);
- free is allocatable minus the requests of bound pods that are not TAS pods, minus what the
  ``topologyAssignment`` of every Workload holding quota puts on the node; a pod also takes one
  of the node's ``pods``.

The counts are Kueue's own ``Total nodes; excluded:`` figures (the e2e suite compares them).

Apart from that snapshot of *now*, ``fit_settled_empty`` counts the same podset with nothing
running on the nodes once their passing states pass (:meth:`webhook.core.kueue.inventory.Node.settled`:
Ready, uncordoned, without Kubernetes' transient ``node.kubernetes.io/*`` taints), so that a podset
is not said to never fit while nodes are only down for a moment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from webhook.core.kueue.inventory import Node, PodConstraints
from webhook.core.kueue.resources import pod_requests
from webhook.core.kueue.scheduling import taint_string, term_matches, tolerates
from webhook.core.objects.quantity import QuantityError, parse_quantity
from webhook.topology.tree import HOSTNAME_LABEL, TAS_POD_ANNOTATIONS, assignment_domains

__all__ = ["ALL_NODES", "DomainFit", "PodsetPlacement", "free_capacity", "place_podset", "taint_string"]

_ZERO = Decimal(0)
#: Causes for nodes outside Kueue's TAS snapshot, before its own.
OUTSIDE = ("not ready", "cordoned", "flavor labels", "no topology labels")


def _conditions_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions if isinstance(c, Mapping))


def free_capacity(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], workloads: Iterable[Mapping[str, Any]]
) -> dict[str, dict[str, Decimal]]:
    """Per node name: allocatable minus non-TAS bound pods minus Workloads' topology assignments
    at host level (resource → base units; ``pods`` counted too)."""
    free: dict[str, dict[str, Decimal]] = {}
    by_hostname: dict[str, str] = {}
    for obj in nodes:
        node = Node.from_object(obj)
        free[node.name] = dict(node.allocatable)
        by_hostname[node.labels.get(HOSTNAME_LABEL, node.name)] = node.name
    for pod in pods:
        spec, metadata = pod.get("spec") or {}, pod.get("metadata") or {}
        name = spec.get("nodeName")
        if name not in free or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if any(a in (metadata.get("annotations") or {}) for a in TAS_POD_ANNOTATIONS):
            continue  # its Workload's topologyAssignment counts it
        for resource, amount in {**pod_requests(spec), "pods": Decimal(1)}.items():
            free[name][resource] = free[name].get(resource, _ZERO) - amount
    for workload in workloads:
        status = workload.get("status") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or [] if isinstance(c, Mapping)}
        if conditions.get("QuotaReserved") != "True" or conditions.get("Finished") == "True":
            continue
        for assignment in (status.get("admission") or {}).get("podSetAssignments") or []:
            count = assignment.get("count")
            topology = assignment.get("topologyAssignment")
            if not topology or not isinstance(count, int) or count <= 0:
                continue
            try:
                per_pod = {r: parse_quantity(v) / count for r, v in (assignment.get("resourceUsage") or {}).items()}
                domains = assignment_domains(topology)
            except (QuantityError, TypeError, ValueError, KeyError):
                continue
            per_pod["pods"] = Decimal(1)
            for levels, values, pods_here in domains:
                if not levels or levels[-1] != HOSTNAME_LABEL or values[-1] not in by_hostname:
                    continue
                node_free = free[by_hostname[values[-1]]]
                for resource, amount in per_pod.items():
                    node_free[resource] = node_free.get(resource, _ZERO) - amount * pods_here
    return free


def _pods_fitting(requests: Mapping[str, Decimal], capacity: Mapping[str, Decimal]) -> tuple[int, str]:
    """Kueue's ``CountInWithLimitingResource``: pods that fit and the resource allowing fewest."""
    best: tuple[int, str] | None = None
    for resource in sorted(requests):
        amount = requests[resource]
        if amount <= 0:
            continue
        count = max(0, int(capacity.get(resource, _ZERO) // amount))
        if best is None or count < best[0]:
            best = (count, resource)
    return best if best is not None else (1_000_000, "")


#: The ``level`` of the last :class:`DomainFit` of a list: every node of the flavor together.
ALL_NODES = "(all nodes)"


@dataclass
class DomainFit:
    """The domain of a level holding most pods: its values (broadest first), its pods and nodes."""

    level: str
    domain: list[str]
    pods: int
    nodes: int


@dataclass
class PodsetPlacement:
    """One podset on one TAS flavor: what it needs and what the nodes offer (see module docstring).

    ``mode``/``level``: ``required``, ``preferred`` or ``unconstrained`` and the level named.
    ``excluded``: nodes per cause (:data:`OUTSIDE` causes first, then Kueue's keys), each node
    once. ``kueue_nodes``: the nodes of Kueue's snapshot (its "Total nodes"). ``fit_now`` /
    ``fit_empty``: per level, broadest first, the domain holding most pods now / with no pods and
    workloads at all (same eligibility). ``fit_untainted_now``: at the podset's level, as
    ``fit_now`` but with every taint tolerated; ``fit_untainted_empty`` the same with no usage.
    ``fit_settled_empty``: per level, as ``fit_empty`` on the nodes once those down now (not Ready,
    cordoned, transient taints) are back; ``down``: how many of the flavor's nodes are down now.
    """

    flavor: str
    topology: str
    levels: list[str]
    mode: str
    level: str
    count: int
    per_pod: dict[str, Decimal]
    excluded: dict[str, int] = field(default_factory=dict)
    kueue_nodes: int = 0
    fit_now: list[DomainFit] = field(default_factory=list)
    fit_empty: list[DomainFit] = field(default_factory=list)
    fit_untainted_now: DomainFit | None = None
    fit_untainted_empty: DomainFit | None = None
    fit_settled_empty: list[DomainFit] = field(default_factory=list)
    down: int = 0
    #: For a workload holding quota: where Kueue's ``topologyAssignment`` put its pods (node and
    #: pods per node) and the domains of the podset's level those nodes are in; the free-now
    #: fields are then left empty (the nodes it runs on are not free room for it).
    assigned: list[tuple[str, int]] | None = None
    assigned_domains: list[str] = field(default_factory=list)

    def at_level(self, fits: Sequence[DomainFit]) -> DomainFit | None:
        """The entry of ``fits`` for the podset's own level (the whole flavor when unconstrained)."""
        if self.mode != "required" or self.level not in self.levels:
            return fits[-1] if fits else None
        return fits[self.levels.index(self.level)]


def _largest(levels: list[str], nodes: list[Node], pods: Mapping[str, int]) -> list[DomainFit]:
    out: list[DomainFit] = []
    for depth in range(len(levels)):
        groups: dict[tuple[str, ...], list[Node]] = {}
        for node in nodes:
            groups.setdefault(tuple(node.labels.get(k, "") for k in levels[: depth + 1]), []).append(node)
        sized = [(sum(pods[n.name] for n in members), len(members), key) for key, members in groups.items()]
        best = max(sized, key=lambda item: (item[0], item[1]), default=None)
        if best is None:
            out.append(DomainFit(levels[depth], [], 0, 0))
        else:
            out.append(DomainFit(levels[depth], list(best[2]), best[0], best[1]))
    out.append(DomainFit(ALL_NODES, [], sum(pods[n.name] for n in nodes), len(nodes)))
    return out


def _takes(node: Node, pod: PodConstraints, flavor_labels: Mapping[str, Any], levels: Sequence[str]) -> bool:
    """The node is of the flavor and every level, and takes the pod (taints, selector, affinity)."""
    if any(node.labels.get(k) != v for k, v in flavor_labels.items()) or any(lv not in node.labels for lv in levels):
        return False
    return node.admits(pod)


def place_podset(
    podset: Mapping[str, Any],
    flavor: Mapping[str, Any],
    levels: list[str],
    topology: str,
    nodes: Iterable[Mapping[str, Any]],
    free: Mapping[str, Mapping[str, Decimal]],
    parsed: Mapping[str, Node] | None = None,
) -> PodsetPlacement:
    """Place one Workload podset (``spec.podSets[]``: ``count``, ``template``, ``topologyRequest``)
    on one ResourceFlavor's nodes. ``levels``: the flavor's Topology levels, broadest first;
    ``parsed``: the nodes already read (:meth:`Node.from_object`) by name, to read them once."""
    template = podset.get("template") or {}
    pod_spec = template.get("spec") or {}
    request = podset.get("topologyRequest") or {}
    mode, level = "unconstrained", ""
    for key in ("required", "preferred"):
        if request.get(key):
            mode, level = key, str(request[key])
            break
    per_pod = {**pod_requests(pod_spec), "pods": Decimal(1)}
    affinity = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    pod = PodConstraints(
        requests=per_pod,
        tolerations=[*(pod_spec.get("tolerations") or []), *((flavor.get("spec") or {}).get("tolerations") or [])],
        node_selector=pod_spec.get("nodeSelector") or {},
        affinity_terms=affinity.get("nodeSelectorTerms") if affinity else None,
    )
    flavor_labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
    result = PodsetPlacement(
        flavor=str((flavor.get("metadata") or {}).get("name", "")),
        topology=topology,
        levels=levels,
        mode=mode,
        level=level,
        count=int(podset.get("count") or 0),
        per_pod=per_pod,
    )
    counted: dict[str, int] = {}
    eligible: list[Node] = []
    untainted: list[Node] = []
    now: dict[str, int] = {}
    empty: dict[str, int] = {}
    settled: list[Node] = []
    for obj in nodes:
        known = parsed.get(str((obj.get("metadata") or {}).get("name", ""))) if parsed else None
        node = known if known is not None else Node.from_object(obj)
        spec = obj.get("spec") or {}
        back = node.settled()
        if _takes(back, pod, flavor_labels, levels):
            settled.append(back)
            result.down += back is not node
        cause = ""
        if not _conditions_ready(obj):
            cause = "not ready"
        elif spec.get("unschedulable") is True:
            cause = "cordoned"
        elif any(node.labels.get(k) != v for k, v in flavor_labels.items()):
            cause = "flavor labels"
        elif any(level_key not in node.labels for level_key in levels):
            cause = "no topology labels"
        if cause:
            counted[cause] = counted.get(cause, 0) + 1
            continue
        result.kueue_nodes += 1
        taint = next((t for t in node.taints if not tolerates(pod.tolerations, t)), None)
        selector_ok = all(node.labels.get(str(k)) == v for k, v in pod.node_selector.items())
        affinity_ok = pod.affinity_terms is None or any(
            term_matches(t, node.name, node.labels) for t in pod.affinity_terms
        )
        fits_now, limiting = _pods_fitting(per_pod, free.get(node.name, {}))
        fits_empty, _ = _pods_fitting(per_pod, node.allocatable)
        now[node.name], empty[node.name] = fits_now, fits_empty
        if selector_ok and affinity_ok:
            untainted.append(node)
        if taint is not None:
            cause = f'taint "{taint_string(taint)}"'
        elif not selector_ok:
            cause = "nodeSelector"
        elif not affinity_ok:
            cause = "affinity"
        else:
            eligible.append(node)
            if fits_now == 0 and limiting:
                cause = f'resource "{limiting}"'
        if cause:
            counted[cause] = counted.get(cause, 0) + 1
    result.excluded = {
        key: counted[key] for key in [*OUTSIDE, *sorted(k for k in counted if k not in OUTSIDE)] if key in counted
    }
    result.fit_now = _largest(levels, eligible, now)
    result.fit_empty = _largest(levels, eligible, empty)
    result.fit_settled_empty = _largest(
        levels, settled, {n.name: _pods_fitting(per_pod, n.allocatable)[0] for n in settled}
    )
    result.fit_untainted_now = result.at_level(_largest(levels, untainted, now))
    result.fit_untainted_empty = result.at_level(_largest(levels, untainted, empty))
    return result
