"""The platform file turned into Kubernetes objects: pure functions, no I/O.

Every function takes a validated :class:`~webhook.core.platform.platform.Platform` and returns plain dicts
as ``kubectl get -o json`` would show them, in API group ``kueue.x-k8s.io/v1beta2`` for Kueue's
kinds (field names from Kueue's API types, ``apis/kueue/v1beta2/*_types.go``):

- ``Topology``: ``spec.levels[].nodeLabel``, broadest first;
- ``ResourceFlavor``: ``spec.nodeLabels``, ``nodeTaints``, ``tolerations``, ``topologyName``;
- ``Cohort``: ``spec.parentName``, ``spec.fairSharing.weight``;
- ``ClusterQueue``: ``spec.cohortName`` (v1beta2 name of v1beta1's ``cohort``),
  ``namespaceSelector``, ``queueingStrategy``, ``preemption``, ``fairSharing``, ``resourceGroups``;
- ``LocalQueue``: one per team namespace, ``spec.clusterQueue``;
- ``WorkloadPriorityClass``: ``value``, ``description`` (top-level fields, no spec);
- ``scheduling.k8s.io/v1`` ``PriorityClass`` for priorities with ``podPriorityClass: true``;
- ``v1`` ``Namespace`` (only when asked) and the webhook's policy as a ``v1`` ``ConfigMap``.

Objects of one kind are sorted by (namespace, name) so that the same platform file always yields
the same output. Every object carries ``app.kubernetes.io/managed-by: kueue-governor``; team
objects also carry ``kueue-governor.io/team: <team>``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from webhook.core.objects.quantity import format_quantity
from webhook.core.platform.platform import (
    LabelSelector,
    Platform,
    TeamSpec,
)
from webhook.core.platform.policy import (
    cluster_queue_name,
    compile_policies,
    local_queue_name,
    priority_class_name,
    team_namespaces,
)
from webhook.generate.resource_groups import plan_resource_groups

__all__ = [
    "DEFAULT_POLICY_NAMESPACE",
    "FILE_KINDS",
    "HYPERPOD_MANAGED_QUEUE_LABEL",
    "HYPERPOD_QUOTA_ALLOCATION_LABEL",
    "INSTANCE_LABEL",
    "KUEUE_API_VERSION",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "NAMESPACE_NAME_LABEL",
    "POLICY_CONFIGMAP_NAME",
    "POLICY_KEY",
    "TEAM_LABEL",
    "GenerateOptions",
    "Manifest",
    "build_manifests",
    "cluster_queues",
    "cohorts",
    "local_queues",
    "namespaces",
    "object_key",
    "policy_config_map",
    "priority_classes",
    "resource_flavors",
    "topologies",
    "workload_priority_classes",
]

Manifest = dict[str, Any]

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kueue-governor"
#: Kubernetes' recommended label for the instance of an application (as Helm's release name):
#: with ``GenerateOptions.instance`` every generated object carries it, and ``kgov diff`` of that
#: instance owns only the objects that carry it.
INSTANCE_LABEL = "app.kubernetes.io/instance"
TEAM_LABEL = "kueue-governor.io/team"
#: Set by the API server on every Namespace (Kubernetes ≥ 1.22); selects namespaces by name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
#: HyperPod task governance labels a team namespace with the team (quota allocation) name …
HYPERPOD_QUOTA_ALLOCATION_LABEL = "sagemaker.amazonaws.com/quota-allocation-id"
#: … and marks it as holding a SageMaker-managed queue (the HyperPod CLI looks namespaces up by both).
HYPERPOD_MANAGED_QUEUE_LABEL = "sagemaker.amazonaws.com/sagemaker-managed-queue"
POLICY_CONFIGMAP_NAME = "kgov-policy"
POLICY_KEY = "policy.json"
DEFAULT_POLICY_NAMESPACE = "kueue-governor-system"


@dataclass(frozen=True)
class GenerateOptions:
    """What to generate besides Kueue's objects.

    ``namespaces``: also emit the teams' Namespace objects; ``policy_namespace``: namespace of the
    policy ConfigMap (the webhook's own namespace, never mutated); ``instance``: the value of
    :data:`INSTANCE_LABEL` on every object (None: no such label), for several platforms in one
    cluster, each diffed on its own.
    """

    namespaces: bool = False
    policy_namespace: str = DEFAULT_POLICY_NAMESPACE
    instance: str | None = None


def object_key(obj: Manifest) -> tuple[str, str, str, str]:
    """(apiVersion, kind, namespace, name): identifies an object in the cluster."""
    metadata = obj.get("metadata") or {}
    return (
        str(obj.get("apiVersion", "")),
        str(obj.get("kind", "")),
        str(metadata.get("namespace", "")),
        str(metadata.get("name", "")),
    )


def _metadata(name: str, namespace: str | None = None, team: str | None = None) -> dict[str, Any]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY}
    if team is not None:
        labels[TEAM_LABEL] = team
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = labels
    return metadata


def _kueue(kind: str, metadata: dict[str, Any], **fields: Any) -> Manifest:
    return {"apiVersion": KUEUE_API_VERSION, "kind": kind, "metadata": metadata, **fields}


def _sorted(objects: list[Manifest]) -> list[Manifest]:
    return sorted(objects, key=object_key)


def _quantity(value: str | int | float) -> str | int:
    """A platform quantity as written to YAML: integers stay numbers, the rest are strings."""
    if isinstance(value, bool):  # pragma: no cover - the models reject booleans
        raise TypeError("a quantity is never a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return format_quantity(Decimal(str(value)))
    return value


def topologies(platform: Platform) -> list[Manifest]:
    """``Topology`` objects (Kueue TAS): one ``spec.levels[].nodeLabel`` per platform level."""
    return _sorted(
        [
            _kueue("Topology", _metadata(t.name), spec={"levels": [{"nodeLabel": level} for level in t.levels]})
            for t in platform.topologies
        ]
    )


def resource_flavors(platform: Platform) -> list[Manifest]:
    """``ResourceFlavor`` objects; empty fields are left out (Kueue treats absent and empty alike)."""
    out = []
    for flavor in platform.flavors:
        spec: dict[str, Any] = {}
        if flavor.nodeLabels:
            spec["nodeLabels"] = dict(sorted(flavor.nodeLabels.items()))
        if flavor.nodeTaints:
            spec["nodeTaints"] = [t.model_dump(exclude_none=True) for t in flavor.nodeTaints]
        if flavor.tolerations:
            spec["tolerations"] = [t.model_dump(exclude_none=True) for t in flavor.tolerations]
        if flavor.topologyName is not None:
            spec["topologyName"] = flavor.topologyName
        out.append(_kueue("ResourceFlavor", _metadata(flavor.name), spec=spec))
    return _sorted(out)


def cohorts(platform: Platform) -> list[Manifest]:
    """``Cohort`` objects (hierarchical cohorts): ``parentName`` and ``fairSharing.weight``."""
    out = []
    for cohort in platform.cohorts:
        spec: dict[str, Any] = {}
        if cohort.parentName is not None:
            spec["parentName"] = cohort.parentName
        if cohort.fairSharing is not None:
            spec["fairSharing"] = {"weight": _quantity(cohort.fairSharing.weight)}
        out.append(_kueue("Cohort", _metadata(cohort.name), spec=spec))
    return _sorted(out)


def _label_selector(selector: LabelSelector) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if selector.matchLabels:
        out["matchLabels"] = dict(sorted(selector.matchLabels.items()))
    if selector.matchExpressions:
        expressions = []
        for requirement in selector.matchExpressions:
            expression: dict[str, Any] = {"key": requirement.key, "operator": requirement.operator}
            if requirement.values:
                expression["values"] = list(requirement.values)
            expressions.append(expression)
        out["matchExpressions"] = expressions
    return out


def _namespace_selector(platform: Platform, team: TeamSpec) -> dict[str, Any]:
    """Listed (or preset) namespaces by name; otherwise the team's own label selector."""
    names = team_namespaces(platform, team)
    if names:
        return {"matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(names)}]}
    assert team.namespaceSelector is not None  # team_namespaces returns names unless a selector is set
    return _label_selector(team.namespaceSelector)


def _resource_groups(team: TeamSpec) -> list[dict[str, Any]]:
    groups, _ = plan_resource_groups(team)
    out = []
    for group in groups:
        flavors = []
        for quota in group.flavors:
            resources = []
            for name in group.covered_resources:
                limits = quota.resources[name]
                entry: dict[str, Any] = {"name": name, "nominalQuota": _quantity(limits.nominalQuota)}
                if limits.borrowingLimit is not None:
                    entry["borrowingLimit"] = _quantity(limits.borrowingLimit)
                if limits.lendingLimit is not None:
                    entry["lendingLimit"] = _quantity(limits.lendingLimit)
                resources.append(entry)
            flavors.append({"name": quota.flavor, "resources": resources})
        out.append({"coveredResources": list(group.covered_resources), "flavors": flavors})
    return out


def cluster_queues(platform: Platform) -> list[Manifest]:
    """One ``ClusterQueue`` per team, named by the naming preset (:func:`cluster_queue_name`)."""
    out = []
    for team in platform.teams:
        spec: dict[str, Any] = {}
        if team.cohort is not None:
            spec["cohortName"] = team.cohort
        spec["namespaceSelector"] = _namespace_selector(platform, team)
        spec["queueingStrategy"] = team.queueingStrategy
        if team.preemption is not None:
            spec["preemption"] = team.preemption.model_dump(exclude_none=True)
        if team.fairSharing is not None:
            spec["fairSharing"] = {"weight": _quantity(team.fairSharing.weight)}
        spec["resourceGroups"] = _resource_groups(team)
        out.append(_kueue("ClusterQueue", _metadata(cluster_queue_name(platform, team), team=team.name), spec=spec))
    return _sorted(out)


def local_queues(platform: Platform) -> list[Manifest]:
    """In every namespace of every team, a ``LocalQueue`` pointing at the team's ClusterQueue for
    the team's own queue name and each further name its queue policy uses (``default``,
    ``allowed``), so that no queue the webhook writes or admits is missing.

    Teams selected only by a ``namespaceSelector`` have no known namespaces and get none.
    """
    out = []
    for team in platform.teams:
        rule = team.policy.queue
        names = dict.fromkeys(
            [local_queue_name(platform, team), *([rule.default] if rule.default else []), *rule.allowed]
        )
        target = cluster_queue_name(platform, team)
        for namespace in team_namespaces(platform, team):
            for name in names:
                out.append(_kueue("LocalQueue", _metadata(name, namespace, team.name), spec={"clusterQueue": target}))
    return _sorted(out)


def workload_priority_classes(platform: Platform) -> list[Manifest]:
    """``WorkloadPriorityClass`` per priority, named by :func:`priority_class_name`."""
    out = []
    for priority in platform.priorities:
        obj = _kueue("WorkloadPriorityClass", _metadata(priority_class_name(platform, priority.name)))
        obj["value"] = priority.value
        if priority.description:
            obj["description"] = priority.description
        out.append(obj)
    return _sorted(out)


def priority_classes(platform: Platform) -> list[Manifest]:
    """``scheduling.k8s.io/v1`` PriorityClass for priorities with ``podPriorityClass: true``.

    Same name and value as the WorkloadPriorityClass; ``globalDefault`` is left out (false).
    """
    out = []
    for priority in platform.priorities:
        if not priority.podPriorityClass:
            continue
        obj: Manifest = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": _metadata(priority_class_name(platform, priority.name)),
            "value": priority.value,
        }
        if priority.description:
            obj["description"] = priority.description
        out.append(obj)
    return _sorted(out)


def namespaces(
    platform: Platform, policy_namespace: str = DEFAULT_POLICY_NAMESPACE, teams: bool = True
) -> list[Manifest]:
    """The webhook's own namespace (where the policy ConfigMap lives, so ``kubectl apply -k``
    works on a fresh cluster) and, with ``teams``, a ``v1`` Namespace per team namespace, labelled
    ``kueue-governor.io/team: <team>``.

    With the ``hyperpod`` preset also ``sagemaker.amazonaws.com/quota-allocation-id: <team>`` and
    ``sagemaker.amazonaws.com/sagemaker-managed-queue: "true"``, the labels HyperPod task
    governance puts on the namespaces it creates (and by which the HyperPod CLI finds a team's
    namespace). ``sagemaker.amazonaws.com/activate-quota`` is deliberately not set: it switches on
    HyperPod's own admission policy.
    """
    out = [{"apiVersion": "v1", "kind": "Namespace", "metadata": _metadata(policy_namespace)}]
    for team in platform.teams if teams else []:
        for namespace in team_namespaces(platform, team):
            metadata = _metadata(namespace, team=team.name)
            if platform.naming == "hyperpod":
                metadata["labels"][HYPERPOD_QUOTA_ALLOCATION_LABEL] = team.name
                metadata["labels"][HYPERPOD_MANAGED_QUEUE_LABEL] = "true"
            out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})
    return _sorted(out)


def policy_config_map(platform: Platform, namespace: str = DEFAULT_POLICY_NAMESPACE) -> Manifest:
    """The webhook's policy document as ConfigMap ``kgov-policy`` (key ``policy.json``).

    The value is :func:`webhook.core.platform.policy.compile_policies` as indented JSON, with ``namespace``
    (the webhook's own) added to the never-mutated namespaces (SPEC §3).
    """
    policy = compile_policies(platform, extra_excluded=[namespace])
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(POLICY_CONFIGMAP_NAME, namespace),
        "data": {POLICY_KEY: policy.model_dump_json(indent=2) + "\n"},
    }


#: Output file → what goes in it, in the order files are listed in ``kustomization.yaml``.
FILE_KINDS: dict[str, str] = {
    "namespaces.yaml": "Namespace",
    "topologies.yaml": "Topology",
    "resourceflavors.yaml": "ResourceFlavor",
    "cohorts.yaml": "Cohort",
    "clusterqueues.yaml": "ClusterQueue",
    "localqueues.yaml": "LocalQueue",
    "workloadpriorityclasses.yaml": "WorkloadPriorityClass",
    "priorityclasses.yaml": "PriorityClass",
    "policy-configmap.yaml": "ConfigMap",
    # `kgov generate --admission-policies` (webhook.generate.admission_policies)
    "admission-policies.yaml": "MutatingAdmissionPolicy",
}


def build_manifests(platform: Platform, options: GenerateOptions | None = None) -> dict[str, list[Manifest]]:
    """Every generated object, grouped by output file (keys in :data:`FILE_KINDS` order).

    Files that would be empty (no cohorts, no pod priority classes, namespaces not asked for)
    are left out. Kueue's kinds are in the API version of the platform's ``kueue.version``
    (:data:`webhook.core.kueue.versions.VERSIONS`). ``platform`` must have passed validation; a
    resource-group conflict is skipped here and reported by :func:`webhook.generate.validate.validate_platform`.
    """
    options = options or GenerateOptions()
    # Kueue's kinds in the API version the platform's Kueue release serves (SPEC §13).
    api_version = platform.kueue.release.api_version
    builders: dict[str, Callable[[], list[Manifest]]] = {
        "namespaces.yaml": lambda: namespaces(platform, options.policy_namespace, teams=options.namespaces),
        "topologies.yaml": lambda: topologies(platform),
        "resourceflavors.yaml": lambda: resource_flavors(platform),
        "cohorts.yaml": lambda: cohorts(platform),
        "clusterqueues.yaml": lambda: cluster_queues(platform),
        "localqueues.yaml": lambda: local_queues(platform),
        "workloadpriorityclasses.yaml": lambda: workload_priority_classes(platform),
        "priorityclasses.yaml": lambda: priority_classes(platform),
        "policy-configmap.yaml": lambda: [policy_config_map(platform, options.policy_namespace)],
    }
    out: dict[str, list[Manifest]] = {}
    for name in builders:
        objects = builders[name]()
        for obj in objects:
            if obj["apiVersion"] == KUEUE_API_VERSION:
                obj["apiVersion"] = api_version
            if options.instance is not None:
                obj["metadata"]["labels"][INSTANCE_LABEL] = options.instance
        if objects:
            out[name] = objects
    return out
