"""Never silently stranded (SPEC §3): a workload Kueue can never admit is said so at creation.

Two checks on the planned object, i.e. what Kueue will see:

- **topology**: a podset (or podset group) whose ``podset-required-topology`` level has no domain
  that holds all its pods, whose ``podset-slice-required-topology`` level has no domain that
  holds one slice, or, without a required level, whose pods do not fit on all the team's
  eligible nodes together (Kueue places every podset of a TAS ClusterQueue by topology), on an
  *empty* cluster (node ``allocatable``, Kueue's TAS node filter) counting the nodes that are
  only down for now (NotReady, cordoned, Kubernetes' transient ``node.kubernetes.io/*`` taints:
  :meth:`~webhook.core.kueue.inventory.NodeInventory.settled`); a podset that fits only with them is
  warned that it waits for them, never refused. Needs
  the node inventory and the team's Topology; reported under the topology rule's enforcement
  (``enforce`` refuses, ``warn`` and ``default`` warn).
- **quota**: a workload whose requests of a resource (Σ pods × per-pod request) exceed what the
  team's ClusterQueue can ever hold (nominalQuota + borrowingLimit, see
  :attr:`TeamPolicyCompiled.quotaLimits`); reported under the queue rule's enforcement.

- **covered**: a podset that requests a resource the team's ClusterQueue does not cover (Kueue:
  "resource … unavailable in ClusterQueue", flavorassigner.go ``findFlavorForPodSets``; warned only,
  as Kueue's Configuration may exclude it by ``resources.excludeResourcePrefixes``), or, in a
  topology-aware ClusterQueue, a podset of pods that requests none of the covered resources: it
  gets no flavor, so no TAS flavor, and Kueue never places it ("no TAS flavor assigned",
  tas_flavorassigner.go ``onlyTASFlavor``); warned only, as a LimitRange may give the pods
  default requests (Kueue applies them to the Workload).
  Only for workloads in the team's own LocalQueue (another queue's ClusterQueue covers other
  resources).

- **together**: podsets that each fit alone but not all together on the team's nodes
  (first-fit decreasing, a heuristic: warned only, "may never be admitted").

- **podsets**: a Workload the API server refuses (so Kueue never creates it), or a podset whose
  required node affinity has no ``nodeSelectorTerms`` (:func:`check_podsets`); under the queue
  rule's enforcement.

A podset whose size or shape is unknown (one Pod of a pod group, a Spark role) is not judged, nor
is a podset (group) whose TAS annotations Kueue refuses: :mod:`webhook.core.plan.rules.kueue_tas` says
why, and a capacity reason read from annotations Kueue never accepts would mislead.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from webhook.core.kueue.inventory import NodeInventory, first_fit
from webhook.core.kueue.view import PodSet, WorkloadView
from webhook.core.objects.integers import decimal_int
from webhook.core.objects.quantity import format_quantity
from webhook.core.plan.draft import Plan
from webhook.core.plan.rules.capacity import constraints, requests_text, unit_capacity
from webhook.core.plan.rules.kueue_tas import group_problems, podset_problems
from webhook.core.plan.rules.podset_limits import check_podsets
from webhook.core.plan.rules.topology import REQUIRED, SLICE_REQUIRED, SLICE_SIZE, podset_groups
from webhook.core.platform.platform import Enforcement
from webhook.core.platform.policy import TeamPolicyCompiled, TopologyPlacement
from webhook.core.platform.prepared import prepared

__all__ = [
    "WAITS_FOR_NODES",
    "check_admissible",
    "check_covered",
    "check_fits_together",
    "check_quota",
    "check_topology_fits",
]


def _loud(enforcement: Enforcement) -> Enforcement:
    return "enforce" if enforcement == "enforce" else "warn"


_shape = requests_text


def _pods(count: int, requests: Mapping[str, Decimal] | None) -> str:
    """``1 pod of {cpu: 2}``, ``4 pods with no resource requests``."""
    shape = _shape(requests)
    return f"{count} {'pod' if count == 1 else 'pods'} {'of' if shape.startswith('{') else 'with'} {shape}"


def _slice_request(annotations: Mapping[str, object], levels: list[str]) -> tuple[str, int] | None:
    level, size = annotations.get(SLICE_REQUIRED), annotations.get(SLICE_SIZE)
    number = decimal_int(size, signs="") if isinstance(size, str) else None
    if isinstance(level, str) and level in levels and number is not None and number > 0:
        return level, number
    return None


def _down(inventory: NodeInventory, placement: TopologyPlacement) -> str:
    """``16 of the team's nodes are down now (12 not Ready, 4 cordoned)``."""
    states = inventory.unavailable(placement.nodeLabels, placement.levels)
    names = {"tainted": "tainted node.kubernetes.io/* (pressure, network, not-ready)"}
    parts = ", ".join(f"{count} {names.get(state, state)}" for state, count in states.items())
    total = sum(states.values())
    return f"{total} of the team's nodes {'is' if total == 1 else 'are'} down now ({parts})"


def _unit_problems(
    members: list[PodSet], placement: TopologyPlacement, inventory: NodeInventory, team: TeamPolicyCompiled, scope: str
) -> list[str]:
    """Why no domain holds ``members`` on ``inventory`` (empty: one does); ``scope`` ends each figure."""
    levels = placement.levels
    annotations = members[0].annotations
    capacity = unit_capacity(members, placement, inventory, team)
    count = capacity.count
    requests = capacity.requests if len(members) == 1 or capacity.leader is not None else members[0].requests
    # A group's members may differ (a driver of {cpu: 1} and workers of 8 GPUs): each is named.
    described = " + ".join(f"{p.name!r} {_pods(p.count, p.requests)}" for p in members)
    described, such = (_pods(count, requests), "such pods") if len(members) == 1 else (described, "of them")
    level = annotations.get(REQUIRED)
    required = levels.index(level) if isinstance(level, str) and level in levels else None
    problems = []
    if required is not None and capacity.largest(required) < count:
        problems.append(
            f"all its pods ({described}) must fit in one {level} domain, and the largest "
            f"holds {capacity.largest(required)} {such} {scope}"
        )
    sliced = _slice_request(annotations, levels)
    if sliced is not None and not problems:
        slice_level, size = sliced
        depth = levels.index(slice_level)
        if capacity.largest(depth) < size:
            problems.append(
                f"one slice ({_pods(size, requests)}) must fit in one {slice_level} domain, and the largest "
                f"holds {capacity.largest(depth)} such pods {scope}"
            )
        elif count % size == 0 and (required is None or required <= depth):
            held = capacity.slices(-1 if required is None else required, depth, size)
            if held < count // size:
                where = f"one {level} domain" if required is not None else "the team's nodes"
                problems.append(
                    f"its {count // size} slices of {_pods(size, requests)}, each in one {slice_level} "
                    f"domain, must fit in {where}, which hold at most {held} such slices {scope}"
                )
    if required is None and sliced is None and capacity.whole() < count:
        fit = "fits" if count == 1 else "fit"
        problems.append(
            f"its {described} {fit} on no set of the team's nodes (they hold {capacity.whole()} {such} {scope})"
        )
    return problems


#: The words of a finding about a podset that fits only once the nodes down now are back.
WAITS_FOR_NODES = "cannot be admitted until nodes come back"


def _nodes_needed(
    members: list[PodSet], placement: TopologyPlacement, inventory: NodeInventory, team: TeamPolicyCompiled
) -> tuple[int, str] | None:
    """The fewest nodes down now that, back, let one podset without slices fit (its required
    level's domain, else all its eligible nodes), and where; None for a group or slices (counted
    otherwise by Kueue) or when no such set exists. Exact: within a domain the nodes holding
    the most pods come back first, and the domain needing the fewest is taken."""
    annotations = members[0].annotations
    if len(members) != 1 or _slice_request(annotations, placement.levels) is not None:
        return None
    shape, count = constraints(members[0], team), members[0].count
    level = annotations.get(REQUIRED)
    depth = placement.levels.index(level) if isinstance(level, str) and level in placement.levels else -1
    keys = placement.levels[: depth + 1]
    now: dict[tuple[str, ...], int] = {}
    down: dict[tuple[str, ...], list[int]] = {}
    eligible = {n.name for n in inventory.settled().select(placement.nodeLabels, placement.levels)}
    for node in inventory.nodes:
        back = node.settled()
        if node.name not in eligible or not back.admits(shape, placement.tolerations):
            continue
        key, held = tuple(node.labels[k] for k in keys), back.pods_fitting(shape.requests)
        if back is node:
            now[key] = now.get(key, 0) + held
        else:
            down.setdefault(key, []).append(held)
    best: tuple[int, str] | None = None
    for key, fits in sorted(down.items()):
        missing, needed = count - now.get(key, 0), 0
        for pods in sorted(fits, reverse=True):
            if missing <= 0:
                break
            missing, needed = missing - pods, needed + 1
        if missing <= 0 and (best is None or needed < best[0]):
            best = (needed, f"e.g. in {level} {key[-1]}" if keys else "")
    return best


_EMPTY = "on an empty cluster"
_NOW = "on the nodes Ready and schedulable now"


def check_topology_fits(
    view: WorkloadView, team: TeamPolicyCompiled, inventory: NodeInventory | None, plan: Plan
) -> None:
    """Report each podset (group) that no domain of its required level can hold, whose slice level
    has no domain that holds one slice, or whose slices do not all fit in one domain of its
    required level (all eligible nodes without one), each slice in one slice-level domain, as
    Kueue's TAS counts them (whole slices per slice-level domain).

    "Can never be admitted" is judged on :meth:`NodeInventory.settled`, the nodes once the
    passing states pass (NotReady, cordoned, :data:`~webhook.core.kueue.inventory.TRANSIENT_TAINTS`):
    a podset that fits only when those nodes count is not refused, only warned that it waits
    for them (Kueue's TAS counts only the nodes Ready and schedulable now)."""
    placement = team.topology
    if placement is None or inventory is None or not len(inventory):
        return
    for members in podset_groups([p for p in view.podsets if p.present]):
        if any(p.partial or p.requests is None or p.affinity_terms == [] for p in members):
            continue  # unknown size, or no node at all: check_podsets says so
        if any(podset_problems(p, team.kueue) for p in members) or group_problems(members, team.kueue):
            continue  # annotations Kueue refuses: kueue_tas says why, their capacity means nothing
        names = " + ".join(repr(p.name) for p in members)
        settled = inventory.settled()
        problems = _unit_problems(members, placement, inventory, team, _EMPTY if settled is inventory else _NOW)
        if problems and settled is not inventory:
            ever = _unit_problems(members, placement, settled, team, _EMPTY)
            if not ever:
                needed = _nodes_needed(members, placement, inventory, team)
                which = "they are" if needed is None else f"{needed[0]} of them {'is' if needed[0] == 1 else 'are'}"
                where = f" ({needed[1]})" if needed is not None and needed[1] else ""
                message = (
                    f"podset {names} {WAITS_FOR_NODES}: {'; '.join(problems)}; "
                    f"{_down(inventory, placement)}, and it fits once {which} Ready and schedulable{where}"
                )
                plan.report("warn", "topology", message)
                continue
            problems = ever
        for problem in problems:
            plan.report(_loud(placement.enforcement), "topology", f"podset {names} can never be admitted: {problem}")


def check_fits_together(
    view: WorkloadView, team: TeamPolicyCompiled, inventory: NodeInventory | None, plan: Plan
) -> None:
    """Warn when the workload's podsets, each of which fits alone, do not fit the team's nodes
    together (first-fit decreasing on an empty cluster; a heuristic, so a warning only). When they
    fit only counting the nodes down now (:meth:`NodeInventory.settled`), the warning says so."""
    placement = team.topology
    podsets = [p for p in view.podsets if p.present]
    if placement is None or inventory is None or not len(inventory) or len(podsets) < 2:
        return
    if any(p.partial or p.requests is None or p.affinity_terms == [] for p in podsets):
        return
    shapes = [(constraints(p, team), p.count) for p in podsets]
    nodes = inventory.select(placement.nodeLabels, placement.levels)
    missing = first_fit(nodes, shapes, placement.tolerations)
    if not missing:
        return
    total = sum(p.count for p in podsets)
    parts = ", ".join(f"{p.name!r} {p.count} × {_shape(p.requests)}" for p in podsets)
    settled = inventory.settled()
    if settled is not inventory:
        every = settled.select(placement.nodeLabels, placement.levels)
        if not first_fit(every, shapes, placement.tolerations):
            message = (
                f"the workload {WAITS_FOR_NODES}: its {total} pods ({parts}) do not fit "
                f"the team's {len(nodes)} nodes Ready and schedulable now together ({missing} left over); "
                f"{_down(inventory, placement)}, and once they are Ready and schedulable they fit"
            )
            plan.report("warn", "topology", message)
            return
        nodes, missing = every, first_fit(every, shapes, placement.tolerations)
    message = (
        f"the workload may never be admitted: its {total} pods ({parts}) do not fit the team's "
        f"{len(nodes)} nodes together on an empty cluster ({missing} left over)"
    )
    plan.report("warn", "topology", message)


def _podset_share(podset: PodSet, resource: str, certain: bool) -> str:
    amount = (podset.requests or {}).get(resource, Decimal(0))
    count = 1 if certain and podset.partial else podset.count
    return f"{podset.name!r} {count} × {format_quantity(amount)}"


def check_quota(view: WorkloadView, team: TeamPolicyCompiled, plan: Plan) -> None:
    """Report each resource the workload needs more of than the team's ClusterQueue can ever hold.

    One Pod of a pod group (a ``partial`` podset) is judged by itself alone, the least its
    workload needs: the group's other pods may request none of the resource. When its
    ``pod-group-total-count`` pods, were they all like it, would need more, that is a warning."""
    limits = prepared(team).quota_limits
    certain, bound = view.total(certain=True), view.total()
    for resource, limit_text in team.quotaLimits.items():
        limit = limits[resource]
        ceiling = f"more than team {team.team!r}'s nominalQuota + borrowingLimit of {limit_text}"
        needed = certain.get(resource, Decimal(0))
        if needed > limit:
            parts = ", ".join(
                _podset_share(p, resource, True) for p in view.podsets if (p.requests or {}).get(resource)
            )
            message = (
                f"the workload can never be admitted: it needs {format_quantity(needed)} {resource} ({parts}), "
                f"{ceiling}"
            )
            plan.report(_loud(team.queue.enforcement), "queue", message)
            continue
        most = bound.get(resource, Decimal(0))
        if most > limit:
            pods = sum(p.count for p in view.podsets if p.partial)
            message = (
                f"the workload may never be admitted: were all {pods} pods of its pod group "
                f"(pod-group-total-count) like this one, they would need {format_quantity(most)} {resource}, "
                f"{ceiling}"
            )
            plan.report("warn", "queue", message)


def check_covered(view: WorkloadView, team: TeamPolicyCompiled, queue: str | None, plan: Plan) -> None:
    """Report podsets whose requests Kueue cannot assign a flavor in the team's own ClusterQueue.

    ``queue``: the LocalQueue the planned workload names. Nothing is checked when it is not the
    team's own (first allowed) queue, or when the policy does not list the covered resources.
    """
    covered = team.coveredResources
    if covered is None or not team.queue.allowed or queue != team.queue.allowed[0]:
        return
    listed = ", ".join(covered) if covered else "nothing"
    for podset in view.podsets:
        if not podset.present or podset.partial or podset.requests is None or podset.count == 0:
            continue
        requested = sorted(name for name, amount in podset.requests.items() if amount)
        uncovered = [name for name in requested if name not in covered]
        if uncovered:
            message = (
                f"podset {podset.name!r} may never be admitted: it requests {', '.join(uncovered)}, which team "
                f"{team.team!r}'s ClusterQueue does not cover (it covers {listed}); Kueue admits it only if its "
                "Configuration excludes that resource (resources.excludeResourcePrefixes)"
            )
            plan.report("warn", "queue", message)
        elif team.topology is not None and "pods" not in covered and not requested:
            message = (
                f"podset {podset.name!r} may never be admitted: its pods request none of the resources team "
                f"{team.team!r}'s topology-aware ClusterQueue covers ({listed}), so Kueue assigns it no flavor "
                'and cannot place it by topology ("no TAS flavor assigned") unless a LimitRange of the '
                "namespace gives them default requests; request at least one of them"
            )
            plan.report("warn", "topology", message)


def check_admissible(
    view: WorkloadView, team: TeamPolicyCompiled, inventory: NodeInventory | None, queue: str | None, plan: Plan
) -> None:
    """Every never-admitted check on ``view`` (what Kueue will see of the planned object), in order:
    each podset's required domain, the podsets together (only when each fits alone: one finding
    each), the team's quota ceilings, the resources its ClusterQueue covers (``queue``: the
    workload's queue label), and the Workload's podsets themselves (:func:`check_podsets`).
    Findings go to ``plan`` with the rules' enforcement."""
    check_podsets(view, team, plan)
    reported = len(plan.denials) + len(plan.warnings)
    check_topology_fits(view, team, inventory, plan)
    if len(plan.denials) + len(plan.warnings) == reported:
        check_fits_together(view, team, inventory, plan)
    check_quota(view, team, plan)
    check_covered(view, team, queue, plan)
