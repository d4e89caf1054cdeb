"""What the Helm chart (``helm/kueue-governor``) needs that only Python can compute (SPEC §8, §8b).

Helm templates cannot run the generator, so two documents are written for them:

* :func:`kinds_document` → ``helm/kueue-governor/files/kinds.yaml`` (checked in; drift-checked by
  ``make generate-check``): the webhook ``rules`` of the kinds table
  (:func:`webhook.core.kueue.registration.webhook_rules`) and the CEL expressions the chart puts into the
  MutatingWebhookConfiguration's ``matchConditions`` and the ValidatingAdmissionPolicy: which
  objects are children of an owner Kueue manages that a controller made (never sent to the webhook;
  one a user made is refused; "made by a controller" is a placeholder the chart fills with
  ``platform.controllerExpression``), which are left alone
  (a RayJob on an existing cluster), and where each kind carries its queue label.
* :func:`platform_values` → a values file for ``helm upgrade -f`` (``platform:``): the compiled
  policy (the ``kgov-policy`` ConfigMap's ``policy.json``), the CEL of its ``controllers``, each
  team's namespaces and queues (for the ValidatingAdmissionPolicy bindings) and, for
  ``kueueObjects.enabled``, the generated Kueue objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webhook.core.kueue.kinds import KINDS
from webhook.core.kueue.registration import webhook_rules
from webhook.core.plan.planner import QUEUE_LABEL
from webhook.core.platform.controllers import DEFAULT_CONTROLLERS
from webhook.core.platform.platform import Platform
from webhook.core.platform.policy import compile_policies
from webhook.generate.cel import (
    child_of_a_controller_expression,
    controller_expression,
    left_alone_expression,
    managed_version_expression,
    not_a_child_expression,
    queue_label_expression,
    status_expression,
)
from webhook.generate.manifests import DEFAULT_POLICY_NAMESPACE, GenerateOptions, build_manifests

__all__ = ["CONTROLLER_PLACEHOLDER", "kinds_cel", "kinds_document", "platform_values", "widenable_rules"]

#: Where the CEL of ``files/kinds.yaml`` says "the request comes from a controller": the chart's
#: ``kueue-governor.kinds`` helper puts ``platform.controllerExpression`` there (the platform's
#: ``controllers``, :func:`webhook.generate.cel.controller_expression`), or ``cel.defaultController``
#: when the values have none.
CONTROLLER_PLACEHOLDER = "kgov_controller"


def kinds_document() -> dict[str, Any]:
    """The content of ``files/kinds.yaml`` (see the module docstring)."""
    from webhook.generate.admission_policies import fill_rules  # builds on this module

    return {
        "rules": webhook_rules(),
        "queueLabel": QUEUE_LABEL,
        # The MutatingAdmissionPolicies (failSafe.mode: mutate): CREATE of the versions Kueue manages.
        "fillRules": fill_rules(),
        "controllerPlaceholder": CONTROLLER_PLACEHOLDER,
        # RBAC of topology widening (server.topologyWidening): the kinds with a suspend field, which
        # the governor gets and patches (webhook.kube.widener; a kind without one is never widened).
        "widenable": widenable_rules(),
        "cel": {
            # The default controllers' CEL, for values without platform.controllerExpression.
            "defaultController": controller_expression(DEFAULT_CONTROLLERS),
            "notAManagedChild": not_a_child_expression(CONTROLLER_PLACEHOLDER),
            # The ValidatingAdmissionPolicy: what matchConditions let through as a child was made one by a user.
            "childOfAController": child_of_a_controller_expression(CONTROLLER_PLACEHOLDER),
            "managedVersion": managed_version_expression(),
            "notLeftAlone": left_alone_expression(),
            "statusChangesMetadata": status_expression(),
            "queue": queue_label_expression("object"),
            "oldQueue": (
                f"request.operation == 'UPDATE' && oldObject != null ? ({queue_label_expression('oldObject')}) : ''"
            ),
        },
    }


def widenable_rules() -> list[dict[str, list[str]]]:
    """RBAC rules' ``apiGroups`` and ``resources`` of the kinds topology widening may patch: the
    rows of the kinds table with a suspend field that own their Workloads (not a CronJob, whose
    Jobs own theirs), one rule per API group, sorted."""
    by_group: dict[str, set[str]] = {}
    for row in KINDS:
        if row.suspend is not None and not row.workloads_below:
            by_group.setdefault(row.group, set()).add(row.resource)
    return [{"apiGroups": [group], "resources": sorted(names)} for group, names in sorted(by_group.items())]


def kinds_cel(controllers: Sequence[str]) -> dict[str, str]:
    """The ``cel`` of :func:`kinds_document` as the chart's ``kueue-governor.kinds`` helper renders
    it for a platform whose ``controllers`` are ``controllers``: the placeholder replaced by
    :func:`webhook.generate.cel.controller_expression` in parentheses."""
    controller = f"({controller_expression(controllers)})"
    cel: dict[str, str] = kinds_document()["cel"]
    return {name: expression.replace(CONTROLLER_PLACEHOLDER, controller) for name, expression in cel.items()}


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
    nothing). ``controllerExpression``: the CEL of the platform's ``controllers``, which the chart
    puts into the CEL of ``files/kinds.yaml`` (:data:`CONTROLLER_PLACEHOLDER`).
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
            # The CEL of "the request comes from one of the platform's controllers" (files/kinds.yaml).
            "controllerExpression": controller_expression(policy.controllers),
            "teams": teams,
            "kueueObjects": kueue_objects,
            "namespaces": team_namespaces,
        }
    }
