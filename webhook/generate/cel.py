"""The CEL the API server evaluates for us, built from the kinds table: which requests the webhook
never sees (children a controller made, workloads left alone, status updates of kinds Kueue does
not manage), which a user may not make, and where each kind carries its queue label. Used by the
chart (``matchConditions``, the ValidatingAdmissionPolicy) and the admission policies.
"""

from __future__ import annotations

from collections.abc import Sequence

from webhook.core.kueue.kinds import KINDS, WorkloadKind
from webhook.core.plan.planner import QUEUE_LABEL
from webhook.core.platform.controllers import namespace_wildcard

__all__ = [
    "child_of_a_controller_expression",
    "controller_expression",
    "left_alone_expression",
    "managed_child_expression",
    "managed_version_expression",
    "not_a_child_expression",
    "queue_label_expression",
    "status_expression",
]


def _cel_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _is_kind(row: WorkloadKind) -> str:
    return f"(request.kind.group == {_cel_string(row.group)} && request.kind.kind == {_cel_string(row.kind)})"


def _owner_is(row: WorkloadKind) -> str:
    """An ownerReference ``r`` points to ``row`` (any version of its group, as
    :func:`webhook.core.kueue.kinds.is_managed_owner`)."""
    prefix = f"{row.group}/" if row.group else ""
    version = f"r.apiVersion.startsWith({_cel_string(prefix)})" if prefix else "!r.apiVersion.contains('/')"
    return f"(r.kind == {_cel_string(row.kind)} && {version})"


def managed_child_expression(variable: str) -> str:
    """CEL: ``variable`` (``object`` or ``oldObject``) has a controller owner Kueue manages.

    Mirrors ``webhook.core.plan.owners.managed_owner``: an ownerReference with ``controller: true``
    whose group and kind is a row of the kinds table with ``owns_workloads``.
    """
    owners = " || ".join(_owner_is(row) for row in KINDS if row.owns_workloads)
    return (
        f"has({variable}.metadata.ownerReferences) && {variable}.metadata.ownerReferences.exists(r, "
        f"has(r.controller) && r.controller == true && ({owners}))"
    )


def controller_expression(controllers: Sequence[str]) -> str:
    """CEL: the request comes from one of ``controllers`` (the platform's ``controllers``), as
    :func:`webhook.core.platform.controllers.is_controller` decides: the user name is an entry, or
    a service account of the namespace of an entry ``system:serviceaccount:NAMESPACE:*``. No
    entries: ``false``."""
    user = "request.userInfo.username"
    names = [entry for entry in controllers if namespace_wildcard(entry) is None]
    clauses = [f"{user} in [{', '.join(_cel_string(name) for name in names)}]"] if names else []
    for entry in controllers:
        prefix = namespace_wildcard(entry)
        if prefix is not None:  # a DNS-1123 label between fixed text: nothing to escape for RE2
            clauses.append(f"{user}.matches({_cel_string('^' + prefix + '[^:]+$')})")
    if not clauses:
        return "false"
    return f"has({user}) && ({' || '.join(clauses)})"


def not_a_child_expression(controller: str) -> str:
    """CEL (true = the request goes on): not a child of a Kueue-managed owner that a controller
    (``controller``: :func:`controller_expression`) creates. On UPDATE the old object must be a
    child too, so an update that adds such an owner is still reviewed
    (``webhook.core.plan.owners.user_made_child``); a CREATE of such a child by a user goes on, to be
    refused."""
    new, old = managed_child_expression("object"), managed_child_expression("oldObject")
    return f"!(({new}) && (request.operation == 'UPDATE' ? (oldObject != null && ({old})) : ({controller})))"


def child_of_a_controller_expression(controller: str) -> str:
    """CEL (true = allowed): not a child of a Kueue-managed owner, or one that a controller
    (``controller``: :func:`controller_expression`) makes: the ValidatingAdmissionPolicy's check of
    what :func:`not_a_child_expression` lets through."""
    return f"!({managed_child_expression('object')}) || ({controller})"


def managed_version_expression() -> str:
    """CEL (true = allowed): not the CREATE of a version Kueue does not manage that a controller runs
    by itself (the kinds table's ``unmanaged_versions``, e.g. ``kubeflow.org/v1`` MPIJob)."""
    clauses = [
        f"({_is_kind(row)} && request.kind.version == {_cel_string(version)})"
        for row in KINDS
        for version, _ in row.unmanaged_versions
    ]
    return f"!(request.operation == 'CREATE' && ({' || '.join(clauses)}))" if clauses else "true"


def status_expression() -> str:
    """CEL (true = the request goes on): not an update through the ``status`` subresource, or one
    that changes the labels or owner references (which the built-in kinds' status strategies keep),
    so the frequent status writes of controllers and kubelets are never sent to the webhook."""
    changed = " || ".join(
        f"(has(object.metadata.{field}) ? object.metadata.{field} : {empty}) != "
        f"(has(oldObject.metadata.{field}) ? oldObject.metadata.{field} : {empty})"
        for field, empty in (("labels", "{}"), ("ownerReferences", "[]"))
    )
    return f"!has(request.subResource) || request.subResource != 'status' || (oldObject != null && ({changed}))"


def _path_expression(variable: str, path: tuple[str, ...]) -> str:
    """``has()`` chain for a plain (wildcard-free) path."""
    steps = []
    for depth in range(1, len(path) + 1):
        steps.append(f"has({variable}.{'.'.join(path[:depth])})")
    return " && ".join(steps)


def left_alone_expression() -> str:
    """CEL (true = the request goes on): not a workload the webhook leaves alone by its kind's
    ``skip_if`` (e.g. a RayJob with ``spec.clusterSelector``)."""
    skips = []
    for row in KINDS:
        for path in row.skip_if:
            if all(isinstance(step, str) and step != "*" for step in path):
                skips.append(f"({_is_kind(row)} && {_path_expression('object', tuple(str(s) for s in path))})")
    return f"!({' || '.join(skips)})" if skips else "true"


def _labels_expression(variable: str) -> str:
    """CEL: the map of labels that carries the queue label (``labels_at``), ``{}`` when absent."""
    branches = []
    for row in KINDS:
        if tuple(row.labels_at) != ("metadata",):
            path = (*(str(step) for step in row.labels_at), "labels")
            value = f"{variable}.{'.'.join(path)}"
            branches.append((_is_kind(row), f"({_path_expression(variable, path)} ? {value} : {{}})"))
    expression = f"(has({variable}.metadata.labels) ? {variable}.metadata.labels : {{}})"
    for condition, value in reversed(branches):
        expression = f"{condition} ? {value} : {expression}"
    return expression


def queue_label_expression(variable: str) -> str:
    """CEL: the queue label's value on ``variable`` (``object``/``oldObject``), ``''`` when absent."""
    labels = f"({_labels_expression(variable)})"
    label = _cel_string(QUEUE_LABEL)
    return f"{label} in {labels} ? {labels}[{label}] : ''"
