"""Node inventory as Kueue's TAS sees it: which nodes can hold a pod, and how many per domain.

Input is Node objects as the API returns them (``kubectl get nodes -o json`` items, or the
server's node watch). A node counts for a podset, as in Kueue v0.19.2's TAS
(``pkg/cache/scheduler/tas_nodes_cache.go``, ``scheduling_simulator_default.go``; v0.17.0's
``tas_flavor_snapshot.go`` agrees) when it is:

- Ready and not ``spec.unschedulable``;
- labelled with the flavor's ``nodeLabels`` and every level of the Topology;
- free of ``NoSchedule``/``NoExecute`` taints that neither the pod nor the flavor tolerates;
- matched by the pod's own ``nodeSelector`` and required node affinity (terms ORed).

Capacities are node ``status.allocatable`` (GPUs, CPUs, bytes), i.e. what an empty cluster offers:
a level chosen from it never makes a podset unadmittable, only possibly queued.

Kueue's node filter is a judgement of *now*: ``nodesCache.sync`` drops a node that is not Ready or
is ``spec.unschedulable`` until it comes back, and a ``node.kubernetes.io/*`` taint the node
lifecycle controller puts on a NotReady, unreachable or pressured node (:data:`TRANSIENT_TAINTS`)
excludes it like any untolerated taint (``FindMatchingUntoleratedTaint``). Whether a workload can
*ever* be admitted is a claim about the nodes, not their state this second:
:meth:`NodeInventory.settled` is the inventory with those states passed (every node Ready,
uncordoned, without transient taints), and :meth:`NodeInventory.unavailable` counts the nodes
that are down now.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from webhook.core.kueue.resources import pod_requests
from webhook.core.kueue.scheduling import json_map, json_maps, term_matches, tolerates
from webhook.core.objects.quantity import QuantityError, parse_quantity

__all__ = [
    "DEFAULT_MAX_PODS",
    "TRANSIENT_TAINTS",
    "Node",
    "NodeInventory",
    "PodConstraints",
    "allocatable_problem",
    "first_fit",
    "pod_requests",
]

DEFAULT_MAX_PODS = 110
#: Taint keys Kubernetes itself puts on a node for a passing state (``k8s.io/api/core/v1``
#: ``TaintNode*``: the node lifecycle controller's not-ready/unreachable, ``kubectl cordon``'s
#: unschedulable, the kubelet's pressure conditions, network-unavailable): they go when it passes.
TRANSIENT_TAINTS = frozenset(
    f"node.kubernetes.io/{name}"
    for name in (
        "not-ready",
        "unreachable",
        "unschedulable",
        "memory-pressure",
        "disk-pressure",
        "pid-pressure",
        "network-unavailable",
    )
)


def allocatable_problem(obj: Mapping[str, Any]) -> str | None:
    """What is wrong with a Node's ``status.allocatable`` (None: nothing): a map of non-negative
    Kubernetes quantities, as the API server requires (``ValidateResourceQuantityValue``). For
    Nodes read from a file, which no API server has validated; :meth:`Node.from_object` itself
    reads leniently."""
    allocatable = json_map(obj.get("status")).get("allocatable")
    if allocatable is None:
        return None
    if not isinstance(allocatable, Mapping):
        return f"status.allocatable must be a map of resource quantities, got {type(allocatable).__name__}"
    for name, value in allocatable.items():
        try:
            amount = parse_quantity(value)
        except (QuantityError, TypeError) as exc:
            return f"status.allocatable.{name}: {exc}"
        if amount < 0:
            return f"status.allocatable.{name}: {value!r} is negative (allocatable amounts are at least 0)"
    return None


@dataclass(frozen=True)
class PodConstraints:
    """What one pod asks of a node: requests, tolerations, node selector, required affinity terms."""

    requests: Mapping[str, Decimal]
    tolerations: Sequence[Mapping[str, Any]] = ()
    node_selector: Mapping[str, Any] = field(default_factory=dict)
    affinity_terms: Sequence[Any] | None = None


@dataclass(frozen=True)
class Node:
    """A node's name, labels, allocatable resources (base units), taints and readiness.

    ``schedulable``: Ready and not cordoned (Kueue's TAS counts it now); ``ready``: its Ready
    condition is True; ``cordoned``: ``spec.unschedulable``."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, Decimal]
    schedulable: bool = True
    taints: tuple[Mapping[str, Any], ...] = ()
    ready: bool = True
    cordoned: bool = False

    @property
    def transient_taints(self) -> tuple[Mapping[str, Any], ...]:
        """Its ``NoSchedule``/``NoExecute`` taints of :data:`TRANSIENT_TAINTS`."""
        return tuple(t for t in self.taints if t.get("key") in TRANSIENT_TAINTS)

    def settled(self) -> Node:
        """This node once its passing states pass: Ready, uncordoned, no transient taints."""
        if self.schedulable and not self.transient_taints:
            return self
        taints = tuple(t for t in self.taints if t.get("key") not in TRANSIENT_TAINTS)
        return Node(self.name, self.labels, self.allocatable, True, taints, True, False)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Node:
        """Build from a core/v1 Node. Fields of the wrong type count as absent (a node with no
        Ready condition is not schedulable); unparsable or negative quantities count as zero (the
        API server validates Nodes; a file is checked first with :func:`allocatable_problem`)."""
        metadata = json_map(obj.get("metadata"))
        spec = json_map(obj.get("spec"))
        status = json_map(obj.get("status"))
        allocatable: dict[str, Decimal] = {}
        for name, value in json_map(status.get("allocatable")).items():
            try:
                allocatable[str(name)] = max(parse_quantity(value), Decimal(0))
            except (QuantityError, TypeError):
                allocatable[str(name)] = Decimal(0)
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in json_maps(status.get("conditions")))
        cordoned = spec.get("unschedulable") is True
        return cls(
            name=str(metadata.get("name", "")),
            labels={str(k): str(v) for k, v in json_map(metadata.get("labels")).items()},
            allocatable=allocatable,
            schedulable=ready and not cordoned,
            taints=tuple(t for t in json_maps(spec.get("taints")) if t.get("effect") in ("NoSchedule", "NoExecute")),
            ready=ready,
            cordoned=cordoned,
        )

    def admits(self, pod: PodConstraints, flavor_tolerations: Sequence[Mapping[str, Any]] = ()) -> bool:
        """Taints tolerated (pod's or flavor's), node selector and required affinity matched."""
        tolerations = [*pod.tolerations, *flavor_tolerations]
        if any(not tolerates(tolerations, taint) for taint in self.taints):
            return False
        if any(self.labels.get(str(k)) != v for k, v in pod.node_selector.items()):
            return False
        terms = pod.affinity_terms
        return terms is None or any(term_matches(t, self.name, self.labels) for t in terms)

    def pods_fitting(self, requests: Mapping[str, Decimal], reserved: Mapping[str, Decimal] | None = None) -> int:
        """How many pods with these requests fit on this empty node (capped by its pod limit);
        ``reserved``: one other pod's requests already placed here (a group's leader)."""
        taken = reserved or {}
        limit = int(self.allocatable.get("pods", Decimal(DEFAULT_MAX_PODS))) - (1 if reserved is not None else 0)
        for resource, amount in requests.items():
            if amount <= 0:
                continue
            available = self.allocatable.get(resource, Decimal(0)) - taken.get(resource, Decimal(0))
            # Compare before dividing: a tiny request (1e-30) makes the quotient overflow Decimal.
            if available >= amount * limit:
                continue
            limit = int(available // amount)
        return max(limit, 0)


@dataclass
class NodeInventory:
    """A set of nodes, indexed for domain questions."""

    nodes: list[Node] = field(default_factory=list)
    _settled: NodeInventory | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping[str, Any]]) -> NodeInventory:
        return cls([Node.from_object(obj) for obj in objects])

    def __len__(self) -> int:
        return len(self.nodes)

    def settled(self) -> NodeInventory:
        """The same nodes once their passing states pass (:meth:`Node.settled`): what the cluster
        holds, as opposed to what it offers this second. Itself when no node is down; computed on
        the first call (an inventory is not changed once read: a node watch builds a new one)."""
        if self._settled is None:
            nodes = [n.settled() for n in self.nodes]
            changed = any(a is not b for a, b in zip(nodes, self.nodes, strict=True))
            settled = NodeInventory(nodes) if changed else self
            settled._settled = settled
            self._settled = settled
        return self._settled

    def unavailable(self, node_labels: Mapping[str, str], levels: Sequence[str] = ()) -> dict[str, int]:
        """How many nodes carrying the flavor's labels and levels are down now, by state:
        ``{"not Ready": n, "cordoned": n, "tainted": n}`` (``tainted``: a :data:`TRANSIENT_TAINTS`
        taint on a Ready, uncordoned node); only the states with nodes are keys."""
        out: dict[str, int] = {}
        for n in self.nodes:
            if not (all(n.labels.get(k) == v for k, v in node_labels.items()) and all(lv in n.labels for lv in levels)):
                continue
            state = (
                "not Ready" if not n.ready else "cordoned" if n.cordoned else "tainted" if n.transient_taints else ""
            )
            if state:
                out[state] = out.get(state, 0) + 1
        return out

    def select(self, node_labels: Mapping[str, str], levels: Sequence[str] = ()) -> list[Node]:
        """Ready, schedulable nodes carrying every ``node_labels`` pair (a flavor's nodeLabels)
        and every topology level (Kueue's ``NodeMatchesFlavor``)."""
        return [
            n
            for n in self.nodes
            if n.schedulable
            and all(n.labels.get(k) == v for k, v in node_labels.items())
            and all(level in n.labels for level in levels)
        ]

    def domains(self, levels: list[str], depth: int, nodes: list[Node]) -> dict[tuple[str, ...], list[Node]]:
        """Group ``nodes`` by their values of ``levels[:depth+1]``; nodes missing a level are left out."""
        groups: dict[tuple[str, ...], list[Node]] = defaultdict(list)
        keys = levels[: depth + 1]
        for node in nodes:
            values = tuple(node.labels.get(key, "") for key in keys)
            if all(values):
                groups[values].append(node)
        return dict(groups)

    def largest_domain(
        self,
        levels: list[str],
        node_labels: Mapping[str, str],
        pods: Mapping[str, Decimal] | PodConstraints | Sequence[PodConstraints],
        flavor_tolerations: Sequence[Mapping[str, Any]] = (),
        requests: Mapping[str, Decimal] | None = None,
    ) -> list[int]:
        """For each level (broadest first): pods that fit in its largest domain; then one more
        entry, the pods that fit on all the flavor's eligible nodes together.

        ``pods``: one pod's requests, or the constraints of one or more pod shapes; only nodes
        Kueue's TAS would consider for every shape count. ``requests``: the per-pod requests to
        size with (default: the first shape's).
        """
        if isinstance(pods, PodConstraints):
            shapes = [pods]
        elif isinstance(pods, Mapping):
            shapes = [PodConstraints(requests=pods)]
        else:
            shapes = list(pods)
        sizing = requests if requests is not None else (shapes[0].requests if shapes else {})
        nodes = [
            n for n in self.select(node_labels, levels) if all(n.admits(shape, flavor_tolerations) for shape in shapes)
        ]
        out = []
        for depth in range(len(levels)):
            groups = self.domains(levels, depth, nodes)
            out.append(max((sum(n.pods_fitting(sizing) for n in members) for members in groups.values()), default=0))
        # The whole flavor: what a podset without a required level can spread over.
        out.append(sum(n.pods_fitting(sizing) for n in nodes))
        return out

    def domain_pods(
        self,
        levels: list[str],
        node_labels: Mapping[str, str],
        shapes: Sequence[PodConstraints],
        requests: Mapping[str, Decimal],
        flavor_tolerations: Sequence[Mapping[str, Any]] = (),
        leader: Mapping[str, Decimal] | None = None,
    ) -> list[dict[tuple[str, ...], int]]:
        """For each level (broadest first), every domain (its label values down to that level) →
        the pods with ``requests`` its eligible nodes hold on an empty cluster (nodes Kueue's TAS
        would consider for every one of ``shapes``); then ``{(): pods}`` for all of them together.

        With ``leader`` (one pod's requests), the pods of a leader-and-workers group the domain
        holds, as Kueue v0.19.2's TAS counts them (``tas_flavor_snapshot.fillLeafCounts``,
        ``fillInCountsHelper``): the leader on the node where it costs the fewest workers, plus
        the workers of every node with what is left; 0 when no node holds the leader.
        """
        nodes = [
            n for n in self.select(node_labels, levels) if all(n.admits(shape, flavor_tolerations) for shape in shapes)
        ]
        workers = {id(n): n.pods_fitting(requests) for n in nodes}
        cost: dict[int, int] = {}  # workers a node loses by holding the leader (only nodes that can)
        if leader is not None:
            for n in nodes:
                if n.pods_fitting(leader) > 0:
                    cost[id(n)] = workers[id(n)] - n.pods_fitting(requests, reserved=leader)
        out = []
        layers: list[dict[tuple[str, ...], list[Node]]] = [
            self.domains(levels, depth, nodes) for depth in range(len(levels))
        ]
        every: dict[tuple[str, ...], list[Node]] = {(): nodes}
        for layer in [*layers, every]:
            counts: dict[tuple[str, ...], int] = {}
            for key, members in layer.items():
                total = sum(workers[id(n)] for n in members)
                if leader is not None:
                    costs = [cost[id(n)] for n in members if id(n) in cost]
                    total = total + 1 - min(costs) if costs else 0
                counts[key] = total
            out.append(counts)
        return out


def first_fit(
    nodes: Sequence[Node],
    pods: Sequence[tuple[PodConstraints, int]],
    flavor_tolerations: Sequence[Mapping[str, Any]] = (),
) -> int:
    """Place ``count`` pods of each shape on empty ``nodes``, largest shapes first, each pod on the
    first node that admits it and has room; return how many pods found no node (0: all placed).

    A heuristic (first-fit decreasing): 0 proves the pods fit together; a positive answer means
    they very likely do not, since Kueue's TAS places podsets one after the other as well.
    """
    free = [dict(n.allocatable) for n in nodes]
    slots = [int(n.allocatable.get("pods", Decimal(DEFAULT_MAX_PODS))) for n in nodes]
    order = sorted(pods, key=lambda item: sorted(item[0].requests.values(), reverse=True), reverse=True)
    missing = 0
    for shape, count in order:
        candidates = [i for i, n in enumerate(nodes) if n.admits(shape, flavor_tolerations)]
        wanted = {name: amount for name, amount in shape.requests.items() if amount > 0}
        for _ in range(count):
            for i in candidates:
                if slots[i] > 0 and all(free[i].get(name, Decimal(0)) >= amount for name, amount in wanted.items()):
                    for name, amount in wanted.items():
                        free[i][name] -= amount
                    slots[i] -= 1
                    break
            else:
                missing += 1
    return missing
