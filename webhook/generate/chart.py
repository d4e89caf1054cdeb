"""What the Helm chart (``helm/kueue-governor``) needs that only Python can compute (SPEC §8, §8b).

Helm templates cannot run the generator, so two documents are written for them:

* :func:`kinds_document` → ``helm/kueue-governor/files/kinds.yaml`` (checked in; drift-checked by
  ``make generate-check``): the webhook ``rules`` of the kinds table
  (:func:`webhook.core.kueue.registration.webhook_rules`) and the CEL expressions the chart puts into the
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

from webhook.core.kueue.registration import webhook_rules
from webhook.core.plan.planner import QUEUE_LABEL
from webhook.core.platform.platform import Platform
from webhook.core.platform.policy import compile_policies
from webhook.generate.cel import (
    controller_expression,
    left_alone_expression,
    managed_child_expression,
    managed_version_expression,
    not_a_child_expression,
    queue_label_expression,
    status_expression,
)
from webhook.generate.manifests import DEFAULT_POLICY_NAMESPACE, GenerateOptions, build_manifests

__all__ = ["kinds_document", "platform_values"]


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
