"""Planning a new object (CREATE): every rule of the team's policy, in the order of :mod:`.planner`.

:func:`plan_object` reads Kueue's view of the object once, runs the rules on it and returns the
plan; :mod:`webhook.core.plan.update` builds on the same functions for UPDATE.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.kueue.inventory import NodeInventory
from webhook.core.kueue.kinds import WorkloadKind
from webhook.core.kueue.view import PodSet, kueue_view
from webhook.core.objects.paths import dotted, lookup
from webhook.core.plan.draft import Draft, Plan, Shape, malformed
from webhook.core.plan.owners import managed_child
from webhook.core.plan.planned import planned_view
from webhook.core.plan.rules.kueue_priority import plan_kueue_priority
from webhook.core.plan.rules.kueue_tas import check_kueue_tas
from webhook.core.plan.rules.node_affinity import plan_node_affinity
from webhook.core.plan.rules.pod_priority import (
    check_pod_priority,
    check_priority_fields,
    plan_pod_priority,
    user_pod_priority,
)
from webhook.core.plan.rules.queue import PRIORITY_LABEL, QUEUE_LABEL, plan_pod_labels, plan_queue, workload_labels
from webhook.core.plan.rules.stranded import check_admissible
from webhook.core.plan.rules.topology import check_user_topology, elastic_forbidden, plan_topology
from webhook.core.platform.policy import TeamPolicyCompiled
from webhook.core.platform.prepared import prepared

__all__ = ["plan_object", "skip_reason", "validate_podset"]


def skip_reason(obj: Mapping[str, Any], row: WorkloadKind) -> str:
    """Why no rule applies to ``obj`` ("" when the rules apply)."""
    skipped = managed_child(obj)
    if skipped:
        return skipped
    for path in row.skip_if:
        if lookup(obj, path) is not None:
            return f"{dotted(path)} is set: {row.kind} is left alone"
    return ""


def validate_podset(podset: PodSet, team: TeamPolicyCompiled, plan: Plan, forbidden: tuple[str, ...] = ()) -> None:
    """The checks of one podset that do not change it (CREATE and UPDATE alike); ``forbidden``:
    the TAS annotations Kueue refuses on this workload (``elastic_forbidden``)."""
    check_pod_priority(podset, team, plan)
    if team.topology is not None:
        check_user_topology(podset, team.topology, team, plan, forbidden)


def plan_object(
    obj: Mapping[str, Any],
    row: WorkloadKind,
    team: TeamPolicyCompiled,
    inventory: NodeInventory | None = None,
    coplace: bool = True,
) -> Plan:
    """Plan every rule of ``team`` for a new object of kind ``row``; ``coplace`` False: topology
    mode ``auto`` groups no driver with its workers (an UPDATE keeps only some podsets' changes,
    and half a group is one Kueue refuses).

    Returns a :class:`Plan`; a field of the wrong JSON type on a path we must read or write
    (``labels`` as a list, a pod template that is a string …), or a count or quantity Kueue could
    not read (``replicas: "abc"``, ``nvidia.com/gpu: "8Xi"``), gives a denial naming each path,
    with ``invalid`` set, whatever the enforcement.
    """
    if not isinstance(obj.get("metadata", {}), Mapping | None):
        return malformed(Shape(("metadata",), obj.get("metadata")))
    skipped = skip_reason(obj, row)
    if skipped:
        return Plan(skipped=skipped)
    draft = Draft(obj)
    plan = Plan()
    try:
        view = kueue_view(obj, row)
        if view.problems:  # Kueue could not read the object: nothing to plan on
            return malformed(*view.problems)
        # every map the rules read or write is a map: the view has a problem for each one that is not
        plan_queue(draft, row, team, plan)
        plan_kueue_priority(draft, view, team, plan)
        plan_pod_labels(draft, view, team, plan)
        affinity = prepared(team).affinity
        kueue_priority = workload_labels(obj, row).get(PRIORITY_LABEL)
        check_priority_fields(obj, row, team, plan, None)
        forbidden = elastic_forbidden(obj, row)
        asked = user_pod_priority(view)
        for podset in view.podsets:
            validate_podset(podset, team, plan, forbidden)
            plan_pod_priority(draft, podset, team, kueue_priority, asked)
            plan_node_affinity(draft, podset, affinity, plan)
        if team.topology is not None:
            plan_topology(
                draft, view.podsets, team.topology, inventory, team, plan, forbidden, row.coplace if coplace else ()
            )
        planned = planned_view(view, draft.doc, draft.changes)  # what Kueue will see
        check_kueue_tas(planned, team, plan, forbidden)
        check_admissible(planned, team, inventory, workload_labels(draft.doc, row).get(QUEUE_LABEL), plan)
    except Shape as shape:
        return malformed(shape)
    plan.changes = draft.changes
    return plan
