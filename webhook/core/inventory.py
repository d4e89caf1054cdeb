"""Node inventory: which nodes share a network domain, and how many pods of a shape fit in one.

Input is Node objects as the API returns them (``kubectl get nodes -o json`` items, or the
server's node watch). Only Ready, schedulable nodes count, as for Kueue's TAS (KEP-2724: nodes
that are not Ready or are unschedulable are left out of the topology snapshot). Capacities are
node ``status.allocatable`` (GPUs, CPUs, bytes), i.e. what an empty cluster offers: a level
chosen from it never makes a podset unadmittable, only possibly queued.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from webhook.core.quantity import QuantityError, parse_quantity

__all__ = ["DEFAULT_MAX_PODS", "Node", "NodeInventory", "pod_requests"]

DEFAULT_MAX_PODS = 110


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _maps(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


@dataclass(frozen=True)
class Node:
    """A node's name, labels, allocatable resources (base units) and readiness."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, Decimal]
    schedulable: bool = True

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Node:
        """Build from a core/v1 Node. Fields of the wrong type count as absent (a node with no
        Ready condition is not schedulable); unparsable quantities count as zero."""
        metadata = _map(obj.get("metadata"))
        spec = _map(obj.get("spec"))
        status = _map(obj.get("status"))
        allocatable: dict[str, Decimal] = {}
        for name, value in _map(status.get("allocatable")).items():
            try:
                allocatable[str(name)] = parse_quantity(value)
            except (QuantityError, TypeError):
                allocatable[str(name)] = Decimal(0)
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in _maps(status.get("conditions")))
        blocked = any(
            t.get("effect") in ("NoSchedule", "NoExecute") and str(t.get("key", "")).startswith("node.kubernetes.io/")
            for t in _maps(spec.get("taints"))
        )
        return cls(
            name=str(metadata.get("name", "")),
            labels={str(k): str(v) for k, v in _map(metadata.get("labels")).items()},
            allocatable=allocatable,
            schedulable=ready and spec.get("unschedulable") is not True and not blocked,
        )

    def pods_fitting(self, requests: Mapping[str, Decimal]) -> int:
        """How many pods with these requests fit on this empty node (capped by its pod limit)."""
        limit = int(self.allocatable.get("pods", Decimal(DEFAULT_MAX_PODS)))
        for resource, amount in requests.items():
            if amount <= 0:
                continue
            available = self.allocatable.get(resource, Decimal(0))
            # Compare before dividing: a tiny request (1e-30) makes the quotient overflow Decimal.
            if available >= amount * limit:
                continue
            limit = int(available // amount)
        return max(limit, 0)


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective requests of one pod (base units): the larger of the containers' sum and any
    init container; a container's limits stand in for missing requests, as the API server defaults.
    Unparsable quantities are ignored (the API server rejects them anyway)."""

    def container_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
        resources = _map(container.get("resources"))
        merged = dict(_map(resources.get("limits")))
        merged.update(_map(resources.get("requests")))
        out: dict[str, Decimal] = {}
        for name, value in merged.items():
            try:
                out[str(name)] = parse_quantity(value)
            except (QuantityError, TypeError):
                continue
        return out

    total: dict[str, Decimal] = defaultdict(Decimal)
    for container in _maps(pod_spec.get("containers")):
        for name, amount in container_requests(container).items():
            total[name] += amount
    for container in _maps(pod_spec.get("initContainers")):
        for name, amount in container_requests(container).items():
            total[name] = max(total[name], amount)
    return dict(total)


@dataclass
class NodeInventory:
    """A set of nodes, indexed for domain questions."""

    nodes: list[Node] = field(default_factory=list)

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping[str, Any]]) -> NodeInventory:
        return cls([Node.from_object(obj) for obj in objects])

    def __len__(self) -> int:
        return len(self.nodes)

    def select(self, node_labels: Mapping[str, str]) -> list[Node]:
        """Schedulable nodes carrying every ``node_labels`` pair (a flavor's nodeLabels)."""
        return [n for n in self.nodes if n.schedulable and all(n.labels.get(k) == v for k, v in node_labels.items())]

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
        self, levels: list[str], node_labels: Mapping[str, str], requests: Mapping[str, Decimal]
    ) -> list[int]:
        """For each level (broadest first): pods of this shape that fit in its largest domain."""
        nodes = self.select(node_labels)
        out = []
        for depth in range(len(levels)):
            groups = self.domains(levels, depth, nodes)
            out.append(max((sum(n.pods_fitting(requests) for n in members) for members in groups.values()), default=0))
        return out
