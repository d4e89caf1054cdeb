"""``kgov generate --apply``: the generated Kueue objects server-side applied to the cluster.

This is what the Helm chart's install hook runs (``helm/kueue-governor/templates/kueue-apply-job.yaml``,
SPEC §8 "the Kueue objects are applied from the same image"): the platform file in, the objects
created or brought back to what the file says, with the one field manager :data:`FIELD_MANAGER`, so
that ``kgov diff --field-manager kgov`` compares exactly what was applied.

The objects go in dependency order (:data:`APPLY_ORDER`): Namespaces before the LocalQueues in
them, PriorityClasses and WorkloadPriorityClasses before the queues that name them, Topology before
the ResourceFlavors that name it, ResourceFlavors and Cohorts before the ClusterQueues, ClusterQueues
before their LocalQueues. Kueue accepts a reference to an object that does not exist yet (the
ClusterQueue is then inactive), but in this order no queue is ever seen inactive for that reason.

The policy ConfigMap and the webhook's own Namespace are not applied: they belong to whoever
deploys the server (the chart makes both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from webhook.generate.live import KIND_PLURALS, resource_path
from webhook.generate.manifests import Manifest, object_key
from webhook.kube.client import apply_json, open_client

__all__ = ["APPLY_ORDER", "FIELD_MANAGER", "apply_manifests", "objects_to_apply"]

#: The field manager of every applied object (``kgov diff --field-manager kgov``).
FIELD_MANAGER = "kgov"

#: The kinds ``--apply`` applies, in the order it applies them (see the module docstring).
APPLY_ORDER = (
    "Namespace",
    "PriorityClass",
    "WorkloadPriorityClass",
    "Topology",
    "ResourceFlavor",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
)


def objects_to_apply(manifests: Mapping[str, list[Manifest]], policy_namespace: str) -> list[Manifest]:
    """The objects of ``build_manifests``' files that ``--apply`` applies, in :data:`APPLY_ORDER`:
    every object of those kinds but the Namespace ``policy_namespace`` (the webhook's own); the
    policy ConfigMap and anything else is left out."""
    rank = {kind: index for index, kind in enumerate(APPLY_ORDER)}
    chosen = [
        obj
        for objects in manifests.values()
        for obj in objects
        if obj.get("kind") in rank
        and (str(obj.get("apiVersion", "")), obj["kind"]) in KIND_PLURALS
        and not (obj["kind"] == "Namespace" and obj["metadata"]["name"] == policy_namespace)
    ]
    return sorted(chosen, key=lambda obj: rank[obj["kind"]])


async def apply_manifests(
    objects: list[Manifest],
    kubeconfig: str | None = None,
    context: str | None = None,
    field_manager: str = FIELD_MANAGER,
    report: Callable[[str], Any] = lambda line: None,
) -> int:
    """Server-side apply ``objects`` one by one, in the order given; ``report`` gets one line per
    object (``ClusterQueue research applied``). Without a kubeconfig (none given, none in
    ``$KUBECONFIG`` or ``~/.kube/config``) the pod's service account is used. Returns how many
    were applied.

    Raises:
        ClusterError: the kubeconfig cannot be used, or the first object the API server refuses
            (its message names the object and the reason: RBAC, an absent namespace, a field
            Kueue refuses); the objects before it stay applied.
    """
    async with await open_client(kubeconfig, context=context, in_cluster=True) as api:
        for obj in objects:
            api_version, kind, namespace, name = object_key(obj)
            await apply_json(api, resource_path(api_version, kind, namespace, name), obj, field_manager)
            report(f"{kind} {namespace + '/' if namespace else ''}{name} applied")
    return len(objects)
