"""Mutation planning: an admission request and a team policy in, a plan out. Pure.

The request path (SPEC §3, §5): :mod:`~webhook.core.admission` parses, :mod:`~webhook.core.resolve`
finds the team, then here: the kind row (:mod:`~webhook.core.kinds`, group **and** version) →
Kueue's view of the workload (:mod:`~webhook.core.view`) → the rules (:mod:`webhook.core.rules`)
→ the plan, which :mod:`~webhook.core.patch` turns into a JSON Patch and
:mod:`~webhook.core.review` into the AdmissionReview answer.

========== ======================================================= ==============================
rule        where it lands                                          user value outside the policy
========== ======================================================= ==============================
queue       label ``kueue.x-k8s.io/queue-name`` (kind's labels_at)  enforce: deny / warn: warning
kueuePrio.  label ``kueue.x-k8s.io/priority-class``                 enforce: deny / warn: warning
podPrio.    ``priorityClassName`` of every podset                   enforce: deny / warn: warning
topology    one ``kueue.x-k8s.io/podset-*-topology`` annotation     level not in the Topology
            per podset, never when the user set any TAS one
nodeAff.    matchExpressions ANDed into every nodeSelectorTerm      (always added, never denied)
suspend     ``true`` when the queue label is added (Kueue's own     —
            webhook only suspends jobs already labelled)
========== ======================================================= ==============================

UPDATE is handled by :mod:`webhook.core.update`. Children of a Kueue-managed owner get nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.admission import AdmissionRequest
from webhook.core.draft import Change, Draft, Plan, Shape, malformed, string_map
from webhook.core.inventory import NodeInventory
from webhook.core.kinds import WorkloadKind, find_kind, is_managed_owner, kind_of_group
from webhook.core.paths import dotted, lookup
from webhook.core.planned import planned_view
from webhook.core.policy import TeamPolicyCompiled
from webhook.core.prepared import prepared
from webhook.core.rules.kueue_priority import plan_kueue_priority
from webhook.core.rules.node_affinity import plan_node_affinity
from webhook.core.rules.pod_priority import check_pod_priority, plan_pod_priority, user_pod_priority
from webhook.core.rules.queue import PRIORITY_LABEL, QUEUE_LABEL, plan_pod_labels, plan_queue, workload_labels
from webhook.core.rules.stranded import check_admissible
from webhook.core.rules.topology import TAS_ANNOTATIONS, check_user_topology, elastic_forbidden, plan_topology
from webhook.core.view import PodSet, WorkloadView, kueue_view

__all__ = [
    "PRIORITY_LABEL",
    "QUEUE_LABEL",
    "TAS_ANNOTATIONS",
    "Change",
    "Plan",
    "managed_child",
    "plan_admission",
    "plan_object",
    "validate_podset",
]


def plan_admission(request: AdmissionRequest, team: TeamPolicyCompiled, inventory: NodeInventory | None = None) -> Plan:
    """Plan the changes for one request of a team namespace.

    CREATE → :func:`plan_object`; UPDATE → :func:`webhook.core.update.plan_update`; other
    operations and subresources → nothing.
    """
    from webhook.core.update import plan_update  # the UPDATE planner builds on this module

    if request.sub_resource:
        return Plan(skipped=f"subresource {request.sub_resource!r}")
    row = find_kind(request.api_version, request.kind)
    if row is None:
        other = kind_of_group(request.api_version, request.kind)
        if other is not None:
            versions = ", ".join(f"{other.group}/{v}" for v in other.versions)
            return Plan(skipped=f"{request.api_version} {request.kind} is not a version Kueue manages ({versions})")
        return Plan(skipped=f"kind {request.api_version} {request.kind} is not a workload kind")
    if request.operation == "CREATE" and request.object is not None:
        return plan_object(request.object, row, team, inventory)
    if request.operation == "UPDATE" and request.object is not None and request.old_object is not None:
        return plan_update(request.object, request.old_object, row, team, inventory)
    return Plan(skipped=f"operation {request.operation} is not mutated")


def managed_child(obj: Mapping[str, Any]) -> str:
    """Why ``obj`` is a child of an owner Kueue manages ("" when it is not)."""
    metadata = obj.get("metadata")
    owners = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    for owner in owners if isinstance(owners, list) else []:
        if isinstance(owner, Mapping) and owner.get("controller") is True and is_managed_owner(owner):
            return f"controlled by {owner.get('kind')} {owner.get('name')!r}: Kueue manages the owner"
    return ""


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


def _say_opaque(view: WorkloadView, team: TeamPolicyCompiled, plan: Plan) -> None:
    """A kind whose pods the object does not show: say which rules cannot be applied."""
    if not view.row.opaque:
        return
    levels = [
        ("podPriority", team.podPriority.enforcement if team.podPriority else None),
        ("topology", team.topology.enforcement if team.topology else None),
        ("nodeAffinity", "warn" if team.nodeAffinity else None),
    ]
    for rule, enforcement in levels:
        if enforcement is not None:
            plan.report("warn" if enforcement == "default" else enforcement, rule, f"not applied: {view.row.opaque}")


def plan_object(
    obj: Mapping[str, Any], row: WorkloadKind, team: TeamPolicyCompiled, inventory: NodeInventory | None = None
) -> Plan:
    """Plan every rule of ``team`` for a new object of kind ``row``.

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
        for podset in view.podsets:  # every map the rules read or write must be a map
            if podset.present:
                for suffix in podset.rule.layout.maps:
                    string_map(draft, podset.at(*suffix))
        plan_queue(draft, row, team, plan)
        plan_kueue_priority(draft, view, team, plan)
        plan_pod_labels(draft, view, team, plan)
        affinity = prepared(team).affinity
        kueue_priority = workload_labels(obj, row).get(PRIORITY_LABEL)
        _say_opaque(view, team, plan)
        forbidden = elastic_forbidden(obj, row)
        asked = user_pod_priority(view)
        for podset in view.podsets:
            validate_podset(podset, team, plan, forbidden)
            plan_pod_priority(draft, podset, team, kueue_priority, asked)
            plan_node_affinity(draft, podset, affinity, plan)
        if team.topology is not None:
            plan_topology(draft, view.podsets, team.topology, inventory, team, plan, forbidden)
        planned = planned_view(view, draft.doc, draft.changes)  # what Kueue will see
        check_admissible(planned, team, inventory, workload_labels(draft.doc, row).get(QUEUE_LABEL), plan)
    except Shape as shape:
        return malformed(shape)
    plan.changes = draft.changes
    return plan
