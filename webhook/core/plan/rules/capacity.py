"""How much of a podset (or podset group) the team's Topology domains hold on an empty cluster.

Shared by topology mode ``auto`` (:mod:`webhook.core.plan.rules.auto`), which chooses a level from
it, and the never-stranded check (:mod:`webhook.core.plan.rules.stranded`), which refuses a level no
domain can hold. Counted as Kueue v0.19.2's TAS counts (``pkg/cache/scheduler/tas_flavor_snapshot.go``):
the nodes it would consider (:mod:`webhook.core.kueue.inventory`), a group of two podsets as a leader of
one pod plus workers (``findLeaderAndWorkers``, ``fillInCountsHelper``), slices as whole slices
per slice-level domain summed up to the broader domain.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from webhook.core.kueue.inventory import NodeInventory, PodConstraints
from webhook.core.kueue.view import PodSet
from webhook.core.objects.quantity import format_quantity
from webhook.core.platform.policy import TeamPolicyCompiled, TopologyPlacement
from webhook.core.platform.prepared import prepared

__all__ = [
    "UnitCapacity",
    "constraints",
    "crowded_role",
    "leader_fits_workers_nodes",
    "requests_text",
    "unit_capacity",
]


def requests_text(requests: Mapping[str, Decimal] | None) -> str:
    """``{cpu: 2, nvidia.com/gpu: 8}`` (sorted, zero amounts left out), or ``no resource requests``."""
    items = [f"{name}: {format_quantity(amount)}" for name, amount in sorted((requests or {}).items()) if amount]
    return "{" + ", ".join(items) + "}" if items else "no resource requests"


def _listed(value: Any) -> list[Any]:
    """A list as itself; absent or any other JSON value as [] (never iterated as it is)."""
    return value if isinstance(value, list) else []


def constraints(podset: PodSet, team: TeamPolicyCompiled) -> PodConstraints:
    """What one pod of ``podset`` asks of a node once the team's node affinity is ANDed in, as
    :func:`~webhook.core.plan.rules.node_affinity.plan_node_affinity` writes it: into each term, or
    as the one term when the pod has none, an empty ``nodeSelectorTerms`` list included (the rule
    appends the team's term into it). Without a team affinity an empty list stays empty: it
    matches no node (terms are ORed)."""
    extra = prepared(team).affinity_exact
    terms: list[Any] | None = podset.affinity_terms
    if extra:
        if not terms:
            terms = [{"matchExpressions": extra}]
        else:
            terms = [
                {**term, "matchExpressions": [*_listed(term.get("matchExpressions")), *extra]}
                if isinstance(term, Mapping) and (term.get("matchExpressions") or term.get("matchFields"))
                else term
                for term in terms
            ]
    return PodConstraints(
        requests=podset.requests or {},
        tolerations=podset.tolerations,
        node_selector=podset.node_selector,
        affinity_terms=terms,
    )


@dataclass(frozen=True)
class UnitCapacity:
    """What the domains hold of one podset or podset group.

    ``count``: its pods. ``domains``: per level (broadest first), each domain's label values →
    the pods of this unit it holds; last, ``{(): pods}`` all eligible nodes together.
    ``requests``: the per-pod requests it is sized with (a group: the workers', its leader
    counted apart when ``leader`` is set). ``levels``: the Topology's levels.
    """

    count: int
    levels: list[str]
    domains: list[dict[tuple[str, ...], int]]
    requests: Mapping[str, Decimal]
    leader: Mapping[str, Decimal] | None = None

    def largest(self, depth: int) -> int:
        """Pods the largest domain of ``levels[depth]`` holds."""
        return max(self.domains[depth].values(), default=0)

    def whole(self) -> int:
        """Pods all eligible nodes hold together (what a podset without a required level spreads over)."""
        return self.domains[-1].get((), 0)

    def slices(self, depth: int, slice_depth: int, size: int) -> int:
        """Whole slices of ``size`` pods, each in one ``levels[slice_depth]`` domain, that the
        largest ``levels[depth]`` domain holds (``depth`` -1: all eligible nodes together)."""
        per_domain: dict[tuple[str, ...], int] = {}
        for key, pods in self.domains[slice_depth].items():
            broad = key[: depth + 1]
            per_domain[broad] = per_domain.get(broad, 0) + pods // size
        return max(per_domain.values(), default=0)

    def held(self) -> list[int]:
        """The largest domain of each level, broadest first, then all eligible nodes."""
        return [*(self.largest(depth) for depth in range(len(self.levels))), self.whole()]


def unit_capacity(
    members: Sequence[PodSet], placement: TopologyPlacement, inventory: NodeInventory, team: TeamPolicyCompiled
) -> UnitCapacity:
    """The capacity of the domains for ``members`` (one podset, or the podsets of one group),
    counting only nodes that admit every member's pods (the team's node affinity ANDed in).

    A group of two podsets, one of them of one pod, is what Kueue accepts as a group: it is
    counted as Kueue's TAS counts a leader and its workers. Any other group (Kueue's webhook
    refuses it) is sized by its largest pod, never too optimistically.
    """
    shapes = [constraints(p, team) for p in members]
    count = sum(p.count for p in members)
    args = (placement.levels, placement.nodeLabels, shapes)
    if len(members) == 2 and min(p.count for p in members) == 1:
        # Kueue's findLeaderAndWorkers: the second is the leader unless it has more pods.
        leader, workers = (members[1], members[0]) if members[1].count <= members[0].count else members
        requests = workers.requests or {}
        domains = inventory.domain_pods(*args, requests, placement.tolerations, leader=leader.requests or {})
        return UnitCapacity(count, list(placement.levels), domains, requests, leader.requests or {})
    sizing: dict[str, Decimal] = {}
    for shape in shapes:  # sized by the largest pod of the group
        for resource, amount in shape.requests.items():
            sizing[resource] = max(sizing.get(resource, Decimal(0)), amount)
    domains = inventory.domain_pods(*args, sizing, placement.tolerations)
    return UnitCapacity(count, list(placement.levels), domains, sizing)


def leader_fits_workers_nodes(
    leader: PodSet, workers: PodSet, placement: TopologyPlacement, inventory: NodeInventory, team: TeamPolicyCompiled
) -> bool:
    """Every node the workers may use also takes the leader's pod (its node selector, required
    affinity, tolerations). Kueue v0.19.2 places a group's leader on nodes chosen by the workers'
    constraints only (``findTopologyAssignment`` reads the workers' podset), so a leader that
    some of those nodes refuse could be assigned a node the scheduler then never binds it to."""
    tolerations = placement.tolerations
    mine, theirs = constraints(leader, team), constraints(workers, team)
    nodes = inventory.select(placement.nodeLabels, placement.levels)
    return all(n.admits(mine, tolerations) for n in nodes if n.admits(theirs, tolerations))


def crowded_role(
    member: PodSet, depth: int, placement: TopologyPlacement, inventory: NodeInventory, team: TeamPolicyCompiled
) -> int | None:
    """For one Pod of a Kueue pod group of ``member.count`` pods in all (N, its
    ``pod-group-total-count``): the smallest k (1..N) such that, were this pod's role a podset of
    k pods, the group's other N−k pods could leave no ``levels[depth]`` domain room for those k
    pods on an empty cluster; None when there is no such k, so that requiring the level never
    makes the group unadmittable, whatever its other roles are.

    Kueue v0.19.2 makes one podset per pod role (``pod_controller.constructGroupPodSets``, pods of
    one role have the same requests) and places them one after another, each taking room from
    the next. Each of the other N−k pods sits on one node, so at worst it takes a whole node: the
    role has room unless N−k nodes can bring every domain below k pods, which takes, per domain,
    its largest nodes (in pods of this role) until fewer than k are left."""
    count = member.count
    shape = constraints(member, team)
    nodes = [
        n for n in inventory.select(placement.nodeLabels, placement.levels) if n.admits(shape, placement.tolerations)
    ]
    prefixes: list[list[int]] = []  # per domain: pods held by its 0, 1, 2... largest nodes
    for members in inventory.domains(placement.levels, depth, nodes).values():
        sums = [0]
        for pods in sorted((n.pods_fitting(shape.requests) for n in members), reverse=True):
            sums.append(sums[-1] + pods)
        prefixes.append(sums)
    for k in range(1, count + 1):
        others, taken = count - k, 0
        for sums in prefixes:
            if sums[-1] >= k:
                taken += bisect_right(sums, sums[-1] - k)  # its largest nodes to take to leave < k
                if taken > others:
                    break
        if taken <= others:
            return k
    return None
