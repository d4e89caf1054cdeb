"""What the Helm chart (``helm/kueue-governor``) needs that only Python can compute (SPEC §8, §8b).

Helm templates cannot run the generator, so two documents are written for them:

* :func:`kinds_document` → ``helm/kueue-governor/files/kinds.yaml`` (checked in; drift-checked by
  ``make generate-check``): the webhook ``rules`` of the kinds table
  (:func:`webhook.core.registration.webhook_rules`) and the CEL expressions the chart puts into the
  MutatingWebhookConfiguration's ``matchConditions`` and the ValidatingAdmissionPolicy: which
  objects are children of an owner Kueue manages that a controller made (never sent to the webhook;
  one a user made is refused), which are left alone
  (a RayJob on an existing cluster), and where each kind carries its queue label.
* :func:`platform_values` → a values file for ``helm upgrade -f`` (``platform:``): the compiled
  policy (the ``kgov-policy`` ConfigMap's ``policy.json``), each team's namespaces and queues (for
  the ValidatingAdmissionPolicy bindings) and, for ``kueueObjects.enabled``, the generated Kueue
  objects.
"""

from __future__ import annotations

from typing import Any

from webhook.core.kinds import KINDS, WorkloadKind
from webhook.core.planner import QUEUE_LABEL
from webhook.core.platform import Platform
from webhook.core.policy import compile_policies
from webhook.core.registration import webhook_rules
from webhook.generate.manifests import DEFAULT_POLICY_NAMESPACE, GenerateOptions, build_manifests

__all__ = ["kinds_document", "managed_child_expression", "platform_values", "status_expression"]


def _cel_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _is_kind(row: WorkloadKind) -> str:
    return f"(request.kind.group == {_cel_string(row.group)} && request.kind.kind == {_cel_string(row.kind)})"


def _owner_is(row: WorkloadKind) -> str:
    """An ownerReference ``r`` points to ``row`` (any version of its group, as
    :func:`webhook.core.kinds.is_managed_owner`)."""
    prefix = f"{row.group}/" if row.group else ""
    version = f"r.apiVersion.startsWith({_cel_string(prefix)})" if prefix else "!r.apiVersion.contains('/')"
    return f"(r.kind == {_cel_string(row.kind)} && {version})"


def managed_child_expression(variable: str) -> str:
    """CEL: ``variable`` (``object`` or ``oldObject``) has a controller owner Kueue manages.

    Mirrors ``webhook.core.planner._managed_child``: an ownerReference with ``controller: true``
    whose group and kind is a row of the kinds table with ``owns_workloads``.
    """
    owners = " || ".join(_owner_is(row) for row in KINDS if row.owns_workloads)
    return (
        f"has({variable}.metadata.ownerReferences) && {variable}.metadata.ownerReferences.exists(r, "
        f"has(r.controller) && r.controller == true && ({owners}))"
    )


def controller_expression() -> str:
    """CEL: the request comes from a controller (``webhook.core.planner.made_by_a_controller``): a
    ``system:`` user other than ``system:anonymous`` and the service accounts of the request's own
    namespace."""
    user = "request.userInfo.username"
    return (
        f"has({user}) && {user}.startsWith('system:') && {user} != 'system:anonymous' && "
        f"!{user}.startsWith('system:serviceaccount:' + request.namespace + ':')"
    )


def not_a_child_expression() -> str:
    """CEL (true = the request goes on): not a child of a Kueue-managed owner that a controller
    creates. On UPDATE the old object must be a child too, so an update that adds such an owner is
    still reviewed (``webhook.core.planner.user_made_child``); a CREATE of such a child by a user goes
    on, to be refused."""
    new, old = managed_child_expression("object"), managed_child_expression("oldObject")
    return (
        f"!(({new}) && (request.operation == 'UPDATE' ? (oldObject != null && ({old})) : ({controller_expression()})))"
    )


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


def kinds_document() -> dict[str, Any]:
    """The content of ``files/kinds.yaml`` (see the module docstring)."""
    from webhook.generate.admission_policies import fill_rules  # builds on this module

    return {
        "rules": webhook_rules(),
        "queueLabel": QUEUE_LABEL,
        # The MutatingAdmissionPolicies (failSafe.mode: mutate): CREATE of the versions Kueue manages.
        "fillRules": fill_rules(),
        "cel": {
            "notAManagedChild": not_a_child_expression(),
            # The ValidatingAdmissionPolicy: what matchConditions let through as a child was made one by a user.
            "childOfAController": f"!({managed_child_expression('object')}) || ({controller_expression()})",
            "managedVersion": managed_version_expression(),
            "notLeftAlone": left_alone_expression(),
            "statusChangesMetadata": status_expression(),
            "queue": queue_label_expression("object"),
            "oldQueue": (
                f"request.operation == 'UPDATE' && oldObject != null ? ({queue_label_expression('oldObject')}) : ''"
            ),
        },
    }


def platform_values(
    platform: Platform, policy_namespace: str = DEFAULT_POLICY_NAMESPACE, source: str = ""
) -> dict[str, Any]:
    """The ``platform:`` values of the chart for a validated platform.

    ``teams[]``: ``name``, ``namespaces`` (names), ``namespaceSelector`` (a LabelSelector or
    None), ``queues`` (the LocalQueues its workloads may name: the queue rule's ``allowed``, else
    its ``default``), ``queueEnforced`` (``enforcement: enforce``; otherwise the backstop only
    requires that some queue label is there, as the webhook admits other values with a warning)
    and ``fill`` (the ``variables`` and ``mutations`` of the team's MutatingAdmissionPolicy for
    ``failSafe.mode: mutate``, :mod:`webhook.generate.admission_policies`; None when it fills
    nothing).
    """
    # admission_policies builds on this module's CEL: imported here, where both are loaded
    from webhook.generate.admission_policies import team_mutations, team_variables

    policy = compile_policies(platform, extra_excluded=[policy_namespace])
    teams = []
    for team in policy.teams:
        mutations = team_mutations(team)
        rule = team.queue
        queues = list(rule.allowed or ([rule.default] if rule.default else []))
        selector = team.namespaceSelector.model_dump(exclude_none=True) if team.namespaceSelector else None
        teams.append(
            {
                "name": team.team,
                "namespaces": list(team.namespaces),
                "namespaceSelector": selector,
                "queues": queues,
                "queueEnforced": rule.enforcement == "enforce" and bool(queues),
                "fill": {"variables": team_variables(team), "mutations": mutations} if mutations else None,
            }
        )
    manifests = build_manifests(platform, GenerateOptions(namespaces=True, policy_namespace=policy_namespace))
    kueue_objects = [
        obj
        for name, objects in manifests.items()
        if name not in ("policy-configmap.yaml", "namespaces.yaml")
        for obj in objects
    ]
    team_namespaces = [
        obj for obj in manifests.get("namespaces.yaml", []) if obj["metadata"]["name"] != policy_namespace
    ]
    return {
        "platform": {
            "source": source,
            "policy": policy.model_dump_json(indent=2) + "\n",
            "teams": teams,
            "kueueObjects": kueue_objects,
            "namespaces": team_namespaces,
        }
    }
