"""Mutation planning: an admission request and a team policy in, a plan out. Pure.

The request path (SPEC §3, §5): :mod:`~webhook.core.admission.envelope` parses, :mod:`~webhook.core.platform.resolve`
finds the team, then here: the kind row (:mod:`~webhook.core.kueue.kinds`, group **and** version) →
Kueue's view of the workload (:mod:`~webhook.core.kueue.view`) → the rules (:mod:`webhook.core.plan.rules`)
→ the plan, which :mod:`~webhook.core.plan.patch` turns into a JSON Patch and
:mod:`~webhook.core.admission.review` into the AdmissionReview answer.

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

UPDATE is handled by :mod:`webhook.core.plan.update`. Children of a Kueue-managed owner get nothing,
but only a controller may make an object such a child (:func:`user_made_child`).
"""

from __future__ import annotations

from collections.abc import Collection

from webhook.core.kueue.inventory import NodeInventory
from webhook.core.kueue.kinds import find_kind, kind_of_group
from webhook.core.plan.create import plan_object, skip_reason, validate_podset
from webhook.core.plan.draft import Change, Plan
from webhook.core.plan.owners import made_by_a_controller, managed_child, managed_owner, user_made_child
from webhook.core.plan.policy_fill import plan_created
from webhook.core.plan.request import AdmissionRequest
from webhook.core.plan.rules.queue import PRIORITY_LABEL, QUEUE_LABEL
from webhook.core.plan.rules.topology import TAS_ANNOTATIONS
from webhook.core.plan.update import plan_status_update, plan_update
from webhook.core.platform.controllers import DEFAULT_CONTROLLERS
from webhook.core.platform.policy import TeamPolicyCompiled

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
    "skip_reason",
    "user_made_child",
    "validate_podset",
]


def plan_admission(
    request: AdmissionRequest,
    team: TeamPolicyCompiled,
    inventory: NodeInventory | None = None,
    controllers: Collection[str] = DEFAULT_CONTROLLERS,
    governor: str | None = None,
) -> Plan:
    """Plan the changes for one request of a team namespace; ``controllers``: the users that may make
    an object a child of a Kueue-managed owner (the policy's ``controllers``, :func:`user_made_child`).

    CREATE → :func:`plan_object` (values an admission policy filled in planned as absent:
    :func:`webhook.core.plan.policy_fill.plan_created`); UPDATE →
    :func:`webhook.core.plan.update.plan_update`; an UPDATE through the ``status`` subresource of a
    built-in kind → its labels only (:func:`webhook.core.plan.update.plan_status_update`);
    ``governor``: the user the governor's widening runs as (an UPDATE it sends may widen TAS
    annotations by one recorded step, :mod:`webhook.core.plan.widen`; None: no one); other
    operations and subresources → nothing.
    """
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
    forged = user_made_child(request, team, controllers) if request.operation in ("CREATE", "UPDATE") else ""
    if forged:
        plan = Plan()
        plan.report("enforce", "queue", forged)
        return plan
    if status and request.object is not None and request.old_object is not None:
        return plan_status_update(request.object, request.old_object, row, team)
    if request.operation == "CREATE" and request.object is not None:
        return plan_created(request.object, row, team, inventory)
    if request.operation == "UPDATE" and request.object is not None and request.old_object is not None:
        own = governor is not None and request.user == governor
        return plan_update(request.object, request.old_object, row, team, inventory, own)
    return Plan(skipped=f"operation {request.operation} is not mutated")
