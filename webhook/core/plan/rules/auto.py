"""Topology mode ``auto`` (SPEC §3): the level of each podset from its size and the node inventory.

For each podset, or podset group (:func:`choose`):

- the narrowest level at which one domain holds all its pods gets the policy's
  ``autoConstraint`` (``required`` by default, or ``preferred``), never a level broader than the
  rule's ``level``; counted on an empty cluster (:mod:`webhook.core.plan.rules.capacity`), so a
  required level never makes the podset unadmittable;
- a single podset that needs a level broader than the narrowest (it is larger than any domain of
  the next level down) also gets **slices** of that next level when it is required: the largest
  slice size that divides its pods such that one domain of the chosen level holds all the slices,
  each slice in one domain of the next level (Kueue v0.19.2's ``podset-slice-required-topology``
  and ``podset-slice-size``; any slice a narrower level could hold, this level holds too);
- too large for every domain it may require: ``preferred`` at the broadest level it may require.

**Nodes down for now** count: the level is chosen from
:meth:`~webhook.core.kueue.inventory.NodeInventory.settled`, every node as if Ready, uncordoned and free
of Kubernetes' transient ``node.kubernetes.io/*`` taints. The annotations stay on the workload
for its whole life, so they follow what the cluster holds, not a blip: counted only on the nodes
Ready this second, a Job created while the nodes cannot renew their Leases (a kube-apiserver
restart) would get ``preferred`` at the broadest level (or a broader required level than the
same Job created a minute later), keeping that weaker placement after the nodes are back; and a
rack drained for maintenance would change the choice for each Job created during the drain. A
level chosen this way that the nodes Ready now cannot hold is only queued by Kueue until they come
back, and the never-stranded check warns so (:func:`webhook.core.plan.rules.stranded.check_topology_fits`).
The price: a node taken out for good keeps counting while its Node object exists; delete it (or
taint it with a taint of your own) rather than only cordon it.

**Co-placement** (:func:`plan_auto`): a driver podset of one pod (the kind's
:class:`~webhook.core.kueue.kind_model.CoPlacement` roles: PyTorchJob ``master``, MPIJob ``launcher``,
Ray ``head``, LWS ``leader``…; for a JobSet, whose replicatedJobs the user names, the one podset
of 1 pod of its two, the second when both have 1) is grouped with its workers by
``kueue.x-k8s.io/podset-group-name: <driver>-<workers>``, both getting the level chosen for the
group's total size, when neither has a group or a TAS annotation of the user's, and the group
needs no broader level than the workers alone (Kueue takes no slices on a group,
``jobframework.ValidateTASPodSetRequest``) or the workers are 1 pod (on one host at any level, so
a broader level costs them nothing and brings the driver next to them). The group is what Kueue
v0.19.2 accepts: exactly these two podsets, one of one pod, the same level on both, no slices, a name that is no number
(``ValidatePodSetGroupingTopology``) and of at most 256 characters (the Workload's
``podSetGroupName``).

**A Pod of a Kueue pod group** (:func:`pod_group_choice`): the webhook sees one pod, but Kueue
makes a podset of each pod role of at most ``pod-group-total-count`` pods of that pod's requests,
so the level is chosen for that upper bound; ``required`` only when the group's other pods,
whatever they are, cannot crowd this pod's role out of every domain of the level
(:func:`~webhook.core.plan.rules.capacity.crowded_role`), else ``preferred``. Never slices, never a
``podset-group-name`` (Kueue's pod webhook does not check groups, and a pod group may have more
than two roles).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from webhook.core.kueue.inventory import NodeInventory
from webhook.core.kueue.kind_model import CoPlacement
from webhook.core.kueue.view import GROUP_NAME, PREFERRED, REQUIRED, SLICE_REQUIRED, SLICE_SIZE, PodSet
from webhook.core.plan.rules.capacity import (
    UnitCapacity,
    crowded_role,
    leader_fits_workers_nodes,
    requests_text,
    unit_capacity,
)
from webhook.core.plan.rules.kueue_tas import GROUP_NAME_MAX
from webhook.core.platform.policy import TeamPolicyCompiled, TopologyPlacement

__all__ = ["Choice", "choose", "plan_auto", "slice_rule"]

Annotations = dict[str, tuple[str, str]]


@dataclass(frozen=True)
class Choice:
    """``annotations``: TAS annotation → (value, reason) for every member. ``depth``: index of the
    level a domain of which holds all the pods (None: none may be required). ``explanation``: the
    reasoning, one line (``kgov mutate --explain``)."""

    annotations: Annotations
    depth: int | None
    explanation: str


def slice_rule(count: int, placement: TopologyPlacement) -> Annotations:
    """The rule's configured slice annotations when the podset divides into whole slices (Kueue
    rejects partial slices)."""
    size = placement.sliceSize
    if placement.sliceLevel is None or size is None or count < size or count % size:
        return {}
    reason = f"{count} pods in slices of {size} at {placement.sliceLevel}"
    return {SLICE_REQUIRED: (placement.sliceLevel, reason), SLICE_SIZE: (str(size), reason)}


def _pods(count: int) -> str:
    return "1 pod" if count == 1 else f"{count} pods"


def _who(members: Sequence[PodSet]) -> str:
    return " + ".join(f"{p.name!r} ({_pods(p.count)} of {requests_text(p.requests)})" for p in members)


def _unsized(members: Sequence[PodSet], inventory: NodeInventory | None) -> str:
    """Why the members cannot be sized ("" when they can)."""
    if inventory is None or not len(inventory):
        return "auto: no node inventory, so preferred (never blocks admission)"
    if any(p.partial for p in members) and (len(members) > 1 or members[0].count < 1):
        return "auto: one member of a pod group, its size unknown, so preferred"
    if any(p.requests is None for p in members):
        return (
            "auto: the operator builds these pods from the object's own fields (such as Spark's cores and "
            "instances), so their size is not judged; preferred"
        )
    return ""


def _held_text(held: Sequence[int], placement: TopologyPlacement, inventory: NodeInventory) -> str:
    """What the largest domain of each level holds, and the nodes down now it counts."""
    table = ", ".join(f"{level} {held[depth]}" for depth, level in enumerate(placement.levels))
    text = f"the largest domain holds {table}; all eligible nodes {held[-1]}"
    down = (
        0
        if inventory.settled() is inventory
        else sum(inventory.unavailable(placement.nodeLabels, placement.levels).values())
    )
    if down:
        text += f" (counting the {down} not Ready, cordoned or tainted node.kubernetes.io/* now)"
    return text


def _narrowest(
    held: Sequence[int], count: int, top: int, placement: TopologyPlacement, subject: str, one: bool, facts: str
) -> tuple[int, str] | Choice:
    """The narrowest level, no broader than ``levels[top]``, one domain of which holds ``count``
    pods (``held``: the pods the largest domain of each level holds, :meth:`UnitCapacity.held`).

    Returns (its depth, the reason "auto: <subject> fits in one <level> domain …") for the caller
    to require it; the Choice of ``preferred`` there when the policy's ``autoConstraint`` is
    ``preferred``; ``preferred`` at ``levels[top]`` (depth None) when no level it may require holds
    them. ``subject``: the pods, ``one`` when it takes a singular verb; ``facts``: the start of the
    explanation."""
    levels = placement.levels
    fit, exceed = ("fits", "exceeds") if one else ("fit", "exceed")
    for depth in range(len(levels) - 1, top - 1, -1):
        if held[depth] < count:
            continue
        level = levels[depth]
        reason = f"auto: {subject} {fit} in one {level} domain (the largest holds {held[depth]})"
        if placement.autoConstraint == "preferred":
            reason += "; preferred there (autoConstraint)"
            return Choice({PREFERRED: (level, reason)}, depth, f"{facts} → preferred {level}")
        return depth, reason
    reason = f"auto: {subject} {exceed} the largest {levels[top]} domain ({held[top]}), so preferred"
    return Choice({PREFERRED: (levels[top], reason)}, None, f"{facts} → preferred {levels[top]} (too large to require)")


def pod_group_choice(
    member: PodSet,
    held: Sequence[int],
    top: int,
    placement: TopologyPlacement,
    inventory: NodeInventory,
    team: TeamPolicyCompiled,
) -> Choice:
    """One Pod of a Kueue pod group of N pods (``member.count``, its ``pod-group-total-count``):
    Kueue makes a podset of each pod role, of at most N pods of one pod's requests, so N pods
    of this pod's requests bound its role's podset from above. The narrowest level one domain of
    which holds N such pods (``held``: the largest domain of each level, :meth:`UnitCapacity.held`)
    gets ``required`` only when no role of this pod's size, whatever the group's other pods
    take, could be left without a domain (:func:`~webhook.core.plan.rules.capacity.crowded_role`),
    else ``preferred``; never slices (the role's own count is unknown) nor a podset group."""
    levels, count = placement.levels, member.count
    facts = (
        f"{member.name!r} (1 pod of {requests_text(member.requests)}), one of a pod group of {_pods(count)} "
        f"(pod-group-total-count): its role has at most {_pods(count)} of its request, an upper bound; "
        f"{_held_text(held, placement, inventory)}"
    )
    bound = f"a pod group of {_pods(count)} (pod-group-total-count, an upper bound on this pod's role)"
    found = _narrowest(held, count, top, placement, bound, True, facts)
    if isinstance(found, Choice):
        return found
    depth, fits = found
    level = levels[depth]
    crowded = crowded_role(member, depth, placement, inventory.settled(), team)
    if crowded is None:
        why = (
            f"{facts} → required {level}, the narrowest level one domain of which holds {count}; "
            f"whichever nodes the group's other pods take, a {level} domain keeps room for this pod's role"
        )
        return Choice({REQUIRED: (level, f"{fits}, whatever its other roles take")}, depth, why)
    others = count - crowded
    why = (
        f"{facts} → preferred {level}, where one domain holds {count}: not required, as a role of "
        f"{_pods(crowded)} like this one could find no {level} domain with room once the group's other "
        f"{_pods(others)} took their nodes"
    )
    return Choice({PREFERRED: (level, f"{fits}; preferred: its other roles could crowd it out")}, depth, why)


def _slices(capacity: UnitCapacity, depth: int) -> tuple[int, int] | None:
    """(slice size, slices the largest ``depth`` domain holds) of the largest slice size that
    divides the pods into at least two slices of the next level, all held by one domain of
    ``levels[depth]``; None when there is none."""
    count, slice_depth = capacity.count, depth + 1
    for size in range(count // 2, 1, -1):
        if count % size == 0:
            held = capacity.slices(depth, slice_depth, size)
            if held >= count // size:
                return size, held
    return None


def choose(
    members: Sequence[PodSet], placement: TopologyPlacement, inventory: NodeInventory | None, team: TeamPolicyCompiled
) -> Choice:
    """The TAS annotations of one podset or podset group in mode ``auto`` (see the module)."""
    levels = placement.levels
    top = levels.index(placement.level) if placement.level in levels else 0
    unsized = _unsized(members, inventory)
    if unsized or inventory is None:
        level = placement.level or levels[-1]
        return Choice({PREFERRED: (level, unsized)}, None, f"{_who(members)}: {unsized} at {level}")
    capacity = unit_capacity(members, placement, inventory.settled(), team)
    count = capacity.count
    held = capacity.held()
    if len(members) == 1 and members[0].partial:
        return pod_group_choice(members[0], held, top, placement, inventory, team)
    facts = f"{_who(members)}: {_pods(count)}; {_held_text(held, placement, inventory)}"
    pods = "pod" if count == 1 else "pods"
    found = _narrowest(held, count, top, placement, f"{count} {pods}", count == 1, facts)
    if isinstance(found, Choice):
        if found.depth is None and len(members) == 1 and (rule := slice_rule(count, placement)):
            return Choice(rule, None, f"{facts} → the rule's slices")
        return found
    depth, reason = found
    level = levels[depth]
    out: Annotations = {REQUIRED: (level, reason)}
    why = f"{facts} → required {level}, the narrowest level one domain of which holds them"
    if len(members) == 1 and depth + 1 < len(levels):
        sliced = _slices(capacity, depth)
        narrow = levels[depth + 1]
        if sliced is not None:
            size, slices = sliced
            text = (
                f"auto: {count} {pods} in {count // size} slices of {size}, each in one {narrow} domain "
                f"(the largest {level} domain holds {slices} such slices)"
            )
            out.update({SLICE_REQUIRED: (narrow, text), SLICE_SIZE: (str(size), text)})
            why += (
                f"; slices of {size} pods at {narrow} ({count // size} slices, "
                f"the largest {level} domain holds {slices})"
            )
        elif depth + 1 < len(levels) and held[depth + 1] < count:
            why += f"; no slices (no slice size dividing {count} has all its slices in one {level} domain)"
    return Choice(out, depth, why)


def _roles(present: Sequence[PodSet], roles: CoPlacement) -> tuple[PodSet, PodSet] | None:
    """The driver and the workers ``roles`` name among the workload's podsets ``present``."""
    if roles.driver is None:  # by shape: two podsets, the driver of 1 pod (both: the second)
        ones = [p for p in present if p.count == 1]
        if len(present) != 2 or not ones:
            return None
        driver = ones[-1]
        return driver, present[0] if driver is present[1] else present[1]
    drivers = [p for p in present if p.name == roles.driver]
    if roles.workers is not None:
        workers = [p for p in present if p.name == roles.workers]
    else:  # the workload's one other podset, whoever placed it
        workers = [p for p in present if p.name not in (roles.driver, *roles.besides)]
    if len(drivers) != 1 or len(workers) != 1:
        return None
    return drivers[0], workers[0]


def _group_name(driver: PodSet, workers: PodSet) -> str:
    return f"{driver.name}-{workers.name}"


def _pair(
    units: Sequence[list[PodSet]], present: Sequence[PodSet], roles: CoPlacement, groups: set[str]
) -> tuple[int, int] | None:
    """Indexes in ``units`` of the driver and the workers ``roles`` name, when they can be
    grouped: each alone and ungrouped, the driver of one pod, the workers of at least one, and
    the group name free and no longer than Kueue takes. ``present``: every podset of the
    workload (placed by the user or not)."""
    found = _roles(present, roles)
    if found is None:
        return None
    driver, workers = found
    alone = {id(u[0]): i for i, u in enumerate(units) if len(u) == 1 and u[0].group is None}
    if id(driver) not in alone or id(workers) not in alone or driver.count != 1 or workers.count < 1:
        return None
    name = _group_name(driver, workers)
    if name in groups or len(name) > GROUP_NAME_MAX:
        return None
    return alone[id(driver)], alone[id(workers)]


def _driver_why(roles: CoPlacement, driver: PodSet, workers: PodSet) -> str:
    """Why ``driver`` is taken as the driver, when the kind does not name it (a JobSet)."""
    if roles.driver is not None:
        return ""
    if workers.count == 1:
        return (
            f" ({driver.name!r} and {workers.name!r}, the workload's two podsets, have 1 pod each: the second is "
            "the driver, as Kueue's TAS takes it)"
        )
    return f" ({driver.name!r} is the one of the workload's two podsets with 1 pod, {workers.name!r} its workers)"


def _coplaced(
    units: Sequence[list[PodSet]],
    present: Sequence[PodSet],
    coplace: Sequence[CoPlacement],
    groups: set[str],
    placement: TopologyPlacement,
    inventory: NodeInventory | None,
    team: TeamPolicyCompiled,
) -> tuple[tuple[int, int], Choice | str] | None:
    """The first driver and workers pair of ``coplace`` found in ``units``, with the group's
    choice, or why they stay apart; None when there is no such pair."""
    for roles in coplace:
        pair = _pair(units, present, roles, groups)
        if pair is None:
            continue
        driver, workers = units[pair[0]][0], units[pair[1]][0]
        if _unsized([driver, workers], inventory) or inventory is None:
            return None
        if not leader_fits_workers_nodes(driver, workers, placement, inventory.settled(), team):
            why = "some nodes its workers may use refuse it (Kueue places a group's driver on its workers' nodes)"
            return pair, f"{driver.name!r} not grouped with {workers.name!r}: {why}"
        members = [p for u in units for p in u if p is driver or p is workers]  # the workload's order
        together, apart = choose(members, placement, inventory, team), choose([workers], placement, inventory, team)
        # A broader level for the group would spread workers of several pods; workers of one pod
        # sit on one host at any level, so only the driver's place changes: next to them.
        if together.depth is None or (together.depth != apart.depth and workers.count > 1):
            why = (
                "no domain it may require holds them together"
                if together.depth is None
                else f"together they need {placement.levels[together.depth]}"
            )
            return pair, f"{driver.name!r} not grouped with {workers.name!r}: {why}"
        name = _group_name(driver, workers)
        reason = f"auto: the driver {driver.name!r} placed with {workers.name!r} (podset group {name!r})"
        explanation = f"{together.explanation}; grouped as {name!r}{_driver_why(roles, driver, workers)}: " + (
            f"together they need no broader level than {workers.name!r} alone"
            if together.depth == apart.depth
            else f"{workers.name!r} is 1 pod, on one host at any level, so the group's broader level only brings "
            "the driver next to it"
        )
        if apart.depth is not None and SLICE_REQUIRED in apart.annotations:
            explanation += " (so no slices: Kueue takes none on a group)"
        return pair, Choice({**together.annotations, GROUP_NAME: (name, reason)}, together.depth, explanation)
    return None


def plan_auto(
    units: Sequence[list[PodSet]],
    present: Sequence[PodSet],
    coplace: Sequence[CoPlacement],
    groups: set[str],
    placement: TopologyPlacement,
    inventory: NodeInventory | None,
    team: TeamPolicyCompiled,
) -> list[tuple[list[PodSet], Choice]]:
    """The choice for each unit the user left unplaced (a podset, or a podset group), a driver
    and its workers grouped (see the module). ``coplace``: the kind's roles; ``groups``: the
    group names the workload already uses; ``present``: all its podsets."""
    found = _coplaced(units, present, coplace, groups, placement, inventory, team)
    out: list[tuple[list[PodSet], Choice]] = []
    for index, unit in enumerate(units):
        if found is not None and isinstance(found[1], Choice) and index in found[0]:
            if index == found[0][1]:  # the group once, at the workers' place
                driver, workers = units[found[0][0]][0], unit[0]
                out.append(([p for u in units for p in u if p is driver or p is workers], found[1]))
            continue
        choice = choose(unit, placement, inventory, team)
        if found is not None and isinstance(found[1], str) and index in found[0]:
            choice = Choice(choice.annotations, choice.depth, f"{choice.explanation}; {found[1]}")
        out.append((unit, choice))
    return out
