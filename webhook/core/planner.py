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
topology    one ``kueue.x-k8s.io/podset-*-topology`` annotation     level not in the Topology;
            per podset, never when the user set any TAS one,        TAS annotations Kueue refuses
            nor on a podset group Kueue refuses                     (:mod:`.rules.kueue_tas`)
nodeAff.    matchExpressions ANDed into every nodeSelectorTerm      (always added, never denied)
suspend     ``true`` when the queue label is added (Kueue's own     —
            webhook only suspends jobs already labelled)
========== ======================================================= ==============================

UPDATE is handled by :mod:`webhook.core.update`. Children of a Kueue-managed owner get nothing,
but only a controller may make an object such a child (:func:`user_made_child`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.admission import AdmissionRequest
from webhook.core.draft import Change, Draft, Plan, Shape, malformed
from webhook.core.inventory import NodeInventory
from webhook.core.kinds import WorkloadKind, find_kind, is_managed_owner, kind_of_group
from webhook.core.paths import dotted, lookup
from webhook.core.planned import planned_view
from webhook.core.policy import TeamPolicyCompiled
from webhook.core.prepared import prepared
from webhook.core.rules.kueue_priority import plan_kueue_priority
from webhook.core.rules.kueue_tas import check_kueue_tas
from webhook.core.rules.node_affinity import plan_node_affinity
from webhook.core.rules.pod_priority import (
    check_pod_priority,
    check_priority_fields,
    plan_pod_priority,
    user_pod_priority,
)
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
    "made_by_a_controller",
    "managed_child",
    "managed_owner",
    "plan_admission",
    "plan_object",
    "user_made_child",
    "validate_podset",
]


def plan_admission(request: AdmissionRequest, team: TeamPolicyCompiled, inventory: NodeInventory | None = None) -> Plan:
    """Plan the changes for one request of a team namespace.

    CREATE → :func:`plan_object`; UPDATE → :func:`webhook.core.update.plan_update`; an UPDATE
    through the ``status`` subresource of a built-in kind → its labels only
    (:func:`webhook.core.update.plan_status_update`); other operations and subresources → nothing.
    """
    from webhook.core.update import plan_status_update, plan_update  # the UPDATE planner builds on this module

    row = find_kind(request.api_version, request.kind)
    status = (
        request.sub_resource == "status"
        and request.operation == "UPDATE"
        and row is not None
        and row.built_in
        and request.object is not None
        and request.old_object is not None
    )
    if request.sub_resource and not status:
        return Plan(skipped=f"subresource {request.sub_resource!r}")
    if row is None:
        other = kind_of_group(request.api_version, request.kind)
        if other is not None:
            versions = ", ".join(f"{other.group}/{v}" for v in other.versions)
            why = dict(other.unmanaged_versions).get(request.version)
            message = f"{request.api_version} {request.kind} is not a version Kueue manages ({versions})"
            if why is not None and request.operation == "CREATE":  # an UPDATE (finalizers) of one made before: allowed
                plan = Plan()
                plan.report("enforce", "queue", f"{message}: {why}; create it as {versions}")
                return plan
            return Plan(skipped=message)
        return Plan(skipped=f"kind {request.api_version} {request.kind} is not a workload kind")
    forged = user_made_child(request, team) if request.operation in ("CREATE", "UPDATE") else ""
    if forged:
        plan = Plan()
        plan.report("enforce", "queue", forged)
        return plan
    if status and request.object is not None and request.old_object is not None:
        return plan_status_update(request.object, request.old_object, row, team)
    if request.operation == "CREATE" and request.object is not None:
        return plan_object(request.object, row, team, inventory)
    if request.operation == "UPDATE" and request.object is not None and request.old_object is not None:
        return plan_update(request.object, request.old_object, row, team, inventory)
    return Plan(skipped=f"operation {request.operation} is not mutated")


def managed_owner(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The controller ``ownerReference`` of ``obj`` that Kueue manages as the workload, or None."""
    metadata = obj.get("metadata")
    owners = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    for owner in owners if isinstance(owners, list) else []:
        if isinstance(owner, Mapping) and owner.get("controller") is True and is_managed_owner(owner):
            return owner
    return None


def managed_child(obj: Mapping[str, Any]) -> str:
    """Why ``obj`` is a child of an owner Kueue manages ("" when it is not)."""
    owner = managed_owner(obj)
    if owner is None:
        return ""
    return f"controlled by {owner.get('kind')} {owner.get('name')!r}: Kueue manages the owner"


def made_by_a_controller(user: str | None, namespace: str) -> bool:
    """Whether ``user`` (``request.userInfo.username``) is a controller, which may make an object a
    child of an owner Kueue manages: a Kubernetes component (``system:kube-controller-manager``)
    or the service account of a controller running outside ``namespace``
    (``system:serviceaccount:kube-system:job-controller``, ``…:jobset-system:…``). Not a person,
    not ``system:anonymous``, not a service account of ``namespace`` itself (what runs there runs
    for the team). None (a review without ``userInfo``: ``kgov mutate``) is not known, and trusted."""
    if user is None:
        return True
    if user == "system:anonymous" or user.startswith(f"system:serviceaccount:{namespace}:"):
        return False
    return user.startswith("system:")


def user_made_child(request: AdmissionRequest, team: TeamPolicyCompiled) -> str:
    """Why ``request`` is refused for making its object a child of a Kueue-managed owner ("" when
    it does not, or a controller sends it).

    Kueue leaves such a child to its owner's Workload (v0.19.2 ``FindAncestorJobManagedByKueue``:
    an owner of that name and uid in the namespace that carries a queue name), so the child is never
    queued itself: a Pod or Job that a user creates with a forged controller ``ownerReference`` to
    the team's own JobSet or Job would run at once, outside the team's quota. Only controllers make
    such children; an UPDATE of an object that already was one is not this request's doing.
    """
    obj, old = request.object, request.old_object
    if obj is None or made_by_a_controller(request.user, request.namespace):
        return ""
    owner = managed_owner(obj)
    if owner is None or (request.operation == "UPDATE" and old is not None and managed_owner(old) is not None):
        return ""
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    what = f"{request.kind} {name!r}" if isinstance(name, str) and name else f"this {request.kind}"
    owner_kind = str(owner.get("kind"))
    made = "names" if request.operation == "CREATE" else "is given"
    return (
        f"{what} {made} {owner_kind} {owner.get('name')!r} as its controller owner, and Kueue leaves such an "
        f"object to its owner's Workload: it would run outside the queue of team {team.team!r}. Only a controller "
        f"makes such objects, not {request.user!r}: create the {owner_kind} itself, or leave out the "
        "ownerReference (the team's policy then applies)"
    )


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
        _say_opaque(view, team, plan)
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
