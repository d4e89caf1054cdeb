"""Checks the generator runs before writing Kueue objects (SPEC §6), beyond ``check_platform``.

:func:`validate_platform` returns :class:`~webhook.core.platform.platform.Problem` findings, each with the
platform-file path and the reason. Rules and where they come from:

- resource groups (Kueue ``ClusterQueueSpec.resourceGroups``): a resource or a flavor in one group
  only; at most 16 groups, 64 flavors and 64 resources per group, 256 flavors in all;
- ResourceFlavor (``ResourceFlavorSpec``): at most 8 ``nodeLabels``, ``nodeTaints`` and
  ``tolerations``; taints unique by (key, effect); a toleration without key has operator
  ``Exists``; ``tolerationSeconds`` only with effect ``NoExecute``; no value with ``Exists``;
- preemption (``ClusterQueuePreemption``): ``borrowWithinCohort.policy`` other than ``Never``
  needs ``reclaimWithinCohort`` other than ``Never``;
- fair sharing (``FairSharing.weight``): zero or above 10^-9;
- names: resource names are qualified names (the names the naming preset derives are checked by
  ``check_platform``);
- ``WorkloadPriorityClass.description``: at most 2048 characters;
- with a node inventory (``kubectl get nodes -o json``): the sum of ``nominalQuota`` of each
  (flavor, resource) over all teams is not above the sum of ``status.allocatable`` of the nodes
  matching the flavor's ``nodeLabels``, and those nodes carry every level label of the flavor's
  Topology (Kueue's TAS leaves nodes without them out). Warnings, or errors with ``strict``.

:func:`recreate_warnings` compares generated objects with what exists (files on disk or the live
cluster) and warns about changes Kueue refuses in place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Literal

from webhook.core.kueue.inventory import Node
from webhook.core.objects.quantity import format_quantity, parse_quantity
from webhook.core.platform.platform import Platform, Problem, quota_total
from webhook.core.platform.policy import local_queue_name, team_namespaces
from webhook.generate.manifests import DEFAULT_POLICY_NAMESPACE, Manifest, plan_resource_groups

__all__ = [
    "QUANTITY_FIELDS",
    "Recreate",
    "equivalent",
    "needs_recreate",
    "recreate_warnings",
    "same_quantity",
    "validate_platform",
]

# Limits from Kueue's API types (kubebuilder markers in apis/kueue/v1beta2).
MAX_FLAVOR_LIST = 8
MAX_RESOURCE_GROUPS = 16
MAX_GROUP_FLAVORS = 64
MAX_GROUP_RESOURCES = 64
MAX_TOTAL_FLAVORS = 256
MAX_DESCRIPTION = 2048
MIN_FAIR_WEIGHT = Decimal("1e-9")

_QUALIFIED_NAME = re.compile(
    r"^(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def _problem(path: str, message: str, severity: Literal["error", "warning"] = "error") -> Problem:
    return Problem(path=path, message=message, severity=severity)


def _check_flavors(platform: Platform) -> list[Problem]:
    problems = []
    for index, flavor in enumerate(platform.flavors):
        base = f"flavors[{index}]"
        for field, count in (
            ("nodeLabels", len(flavor.nodeLabels)),
            ("nodeTaints", len(flavor.nodeTaints)),
            ("tolerations", len(flavor.tolerations)),
        ):
            if count > MAX_FLAVOR_LIST:
                problems.append(_problem(f"{base}.{field}", f"{count} entries; Kueue allows at most {MAX_FLAVOR_LIST}"))
        seen: dict[tuple[str, str], int] = {}
        for tindex, taint in enumerate(flavor.nodeTaints):
            key = (taint.key, taint.effect)
            if key in seen:
                problems.append(
                    _problem(
                        f"{base}.nodeTaints[{tindex}]",
                        f"taint {taint.key}:{taint.effect} repeats nodeTaints[{seen[key]}]; "
                        "taints must be unique by key and effect",
                    )
                )
            seen.setdefault(key, tindex)
        for tindex, toleration in enumerate(flavor.tolerations):
            tpath = f"{base}.tolerations[{tindex}]"
            if not toleration.key and toleration.operator != "Exists":
                problems.append(
                    _problem(tpath, "a toleration without key must have operator Exists (it matches every taint)")
                )
            if toleration.tolerationSeconds is not None and toleration.effect != "NoExecute":
                problems.append(_problem(f"{tpath}.tolerationSeconds", "tolerationSeconds needs effect NoExecute"))
            if toleration.operator == "Exists" and toleration.value:
                problems.append(_problem(f"{tpath}.value", "a toleration with operator Exists takes no value"))
    return problems


def _check_teams(platform: Platform, policy_namespace: str) -> list[Problem]:
    problems = []
    total_flavors = 0
    for index, team in enumerate(platform.teams):
        base = f"teams[{index}]"
        groups, group_problems = plan_resource_groups(team, base)
        problems.extend(group_problems)
        if len(groups) > MAX_RESOURCE_GROUPS:
            problems.append(
                _problem(
                    f"{base}.quotas",
                    f"{len(groups)} resource groups; Kueue allows at most {MAX_RESOURCE_GROUPS} per ClusterQueue",
                )
            )
        for group in groups:
            if len(group.flavors) > MAX_GROUP_FLAVORS:
                problems.append(
                    _problem(
                        f"{base}.quotas",
                        f"{len(group.flavors)} flavors cover {group.covered_resources}; "
                        f"Kueue allows at most {MAX_GROUP_FLAVORS} per resource group",
                    )
                )
            if len(group.covered_resources) > MAX_GROUP_RESOURCES:
                problems.append(
                    _problem(
                        f"{base}.quotas",
                        f"{len(group.covered_resources)} resources in one group; "
                        f"Kueue allows at most {MAX_GROUP_RESOURCES}",
                    )
                )
        team_flavors = sum(len(group.flavors) for group in groups)
        total_flavors += team_flavors
        if team_flavors > MAX_TOTAL_FLAVORS:
            problems.append(
                _problem(
                    f"{base}.quotas",
                    f"{team_flavors} flavors; Kueue allows at most {MAX_TOTAL_FLAVORS} per ClusterQueue",
                )
            )
        if not team.quotas:
            problems.append(_problem(f"{base}.quotas", "no quotas: the team's ClusterQueue admits nothing", "warning"))
        for qindex, quota in enumerate(team.quotas):
            for resource in quota.resources:
                if len(resource.rpartition("/")[2]) > 63 or not _QUALIFIED_NAME.match(resource):
                    problems.append(
                        _problem(
                            f"{base}.quotas[{qindex}].resources.{resource}",
                            f"{resource!r} is not a resource name ([prefix/]name, e.g. cpu, nvidia.com/gpu)",
                        )
                    )
        preemption = team.preemption
        if (
            preemption is not None
            and preemption.borrowWithinCohort is not None
            and preemption.borrowWithinCohort.policy != "Never"
            and preemption.reclaimWithinCohort == "Never"
        ):
            problems.append(
                _problem(
                    f"{base}.preemption.borrowWithinCohort.policy",
                    "borrowWithinCohort.policy other than Never needs reclaimWithinCohort other than Never",
                )
            )
        if team.fairSharing is not None:
            weight = parse_quantity(team.fairSharing.weight)
            if 0 < weight < MIN_FAIR_WEIGHT:
                problems.append(_problem(f"{base}.fairSharing.weight", "a fair-sharing weight is 0 or at least 10^-9"))
        if team.namespaceSelector is not None:
            if team.namespaces:
                problems.append(
                    _problem(
                        f"{base}.namespaceSelector",
                        "both namespaces and namespaceSelector are set: the ClusterQueue admits only the "
                        "listed namespaces",
                        "warning",
                    )
                )
            elif not team.namespaceSelector.matchLabels and not team.namespaceSelector.matchExpressions:
                problems.append(
                    _problem(
                        f"{base}.namespaceSelector",
                        "an empty namespaceSelector lets every namespace use the team's ClusterQueue",
                        "warning",
                    )
                )
            else:
                problems.append(
                    _problem(
                        f"{base}.namespaceSelector",
                        "namespaces chosen by selector only: no LocalQueue is generated; create "
                        f"{local_queue_name(platform, team)!r} in each selected namespace",
                        "warning",
                    )
                )
        if policy_namespace in team_namespaces(platform, team):
            problems.append(
                _problem(
                    f"{base}.namespaces",
                    f"namespace {policy_namespace!r} is never mutated by the webhook (its own namespace)",
                    "warning",
                )
            )
    return problems


def _check_descriptions(platform: Platform) -> list[Problem]:
    problems = []
    for index, priority in enumerate(platform.priorities):
        if len(priority.description) > MAX_DESCRIPTION:
            problems.append(
                _problem(
                    f"priorities[{index}].description",
                    f"{len(priority.description)} characters; Kueue allows at most {MAX_DESCRIPTION}",
                )
            )
    return problems


def _show(resource: str, amount: Decimal) -> str:
    """An amount for people: memory in the largest binary unit that keeps it exact (``28Ti``)."""
    if resource == "memory" or resource.endswith("storage"):
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount and amount % size == 0:
                return f"{format_quantity(amount / size)}{suffix}"
    return format_quantity(amount)


def _matching(nodes: list[Node], labels: Mapping[str, str]) -> list[Node]:
    return [node for node in nodes if all(node.labels.get(k) == v for k, v in labels.items())]


def _check_inventory(platform: Platform, nodes: list[Node], strict: bool) -> list[Problem]:
    severity: Literal["error", "warning"] = "error" if strict else "warning"
    problems = []
    topologies = {t.name: (index, t) for index, t in enumerate(platform.topologies)}
    for index, flavor in enumerate(platform.flavors):
        members = _matching(nodes, flavor.nodeLabels)
        resources = list(
            dict.fromkeys(
                resource
                for team in platform.teams
                for quota in team.quotas
                if quota.flavor == flavor.name
                for resource in quota.resources
            )
        )
        if not members:
            if resources:
                problems.append(
                    _problem(
                        f"flavors[{index}].nodeLabels",
                        f"no node in the inventory matches {dict(flavor.nodeLabels)}, "
                        f"so the quotas of flavor {flavor.name!r} have no capacity",
                        severity,
                    )
                )
            continue
        for resource in resources:
            shares = [(team.name, quota_total(team, flavor.name, resource)) for team in platform.teams]
            shares = [(name, amount) for name, amount in shares if amount]
            total = sum((amount for _, amount in shares), Decimal(0))
            capacity = sum((node.allocatable.get(resource, Decimal(0)) for node in members), Decimal(0))
            if total > capacity:
                listed = ", ".join(f"{name} {_show(resource, amount)}" for name, amount in shares)
                problems.append(
                    _problem(
                        f"flavors[{index}]",
                        f"nominalQuota of {resource} summed over teams is {_show(resource, total)} ({listed}), "
                        f"above the allocatable {_show(resource, capacity)} of the {len(members)} nodes "
                        f"matching {json.dumps(dict(flavor.nodeLabels), sort_keys=True)}",
                        severity,
                    )
                )
        if flavor.topologyName is None or flavor.topologyName not in topologies:
            continue
        tindex, topology = topologies[flavor.topologyName]
        for lindex, level in enumerate(topology.levels):
            missing = sorted(node.name for node in members if level not in node.labels)
            if missing:
                shown = ", ".join(missing[:3]) + (", …" if len(missing) > 3 else "")
                problems.append(
                    _problem(
                        f"topologies[{tindex}].levels[{lindex}]",
                        f"{len(missing)} of {len(members)} nodes of flavor {flavor.name!r} lack label "
                        f"{level!r} ({shown}); topology-aware scheduling leaves them out",
                        severity,
                    )
                )
    return problems


def validate_platform(
    platform: Platform,
    nodes: list[Node] | None = None,
    *,
    strict: bool = False,
    policy_namespace: str = DEFAULT_POLICY_NAMESPACE,
) -> list[Problem]:
    """Generator checks on a platform that passed :func:`~webhook.core.platform.platform.parse_platform`.

    ``nodes``: a node inventory for the capacity and topology-label checks (skipped when None);
    ``strict``: those checks report errors instead of warnings; ``policy_namespace``: the
    webhook's namespace (a team namespace there is never mutated). Returns findings in platform
    file order; an empty list means nothing to report.
    """
    problems = [*_check_flavors(platform), *_check_teams(platform, policy_namespace), *_check_descriptions(platform)]
    if nodes is not None:
        problems.extend(_check_inventory(platform, nodes, strict))
    return problems


# --- changes Kueue refuses in place -------------------------------------------------------------


class Recreate(Problem):
    """A change that needs the object deleted and created again (``severity`` is ``warning``)."""

    kind: str
    name: str
    namespace: str = ""


def _spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec")
    return dict(spec) if isinstance(spec, Mapping) else {}


#: Fields of the generated objects that hold a Kubernetes quantity (``resource.Quantity`` in
#: Kueue's API): quotas and limits of a ClusterQueue's or Cohort's resources, a fairSharing weight.
#: The API server and Kueue may return them in another form (``64`` → ``"64"``, ``1024Mi`` →
#: ``"1Gi"`` once Kueue re-writes the object).
QUANTITY_FIELDS = frozenset({"nominalQuota", "borrowingLimit", "lendingLimit", "weight"})


def same_quantity(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are the same Kubernetes quantity (``64`` and ``"64"``, ``"1Gi"`` and
    ``"1024Mi"``, ``0.5`` and ``"500m"``); False when either is not a quantity."""
    try:
        return parse_quantity(a) == parse_quantity(b)
    except ValueError:
        return False


def equivalent(a: Any, b: Any, field: str = "") -> bool:
    """Deep equality where a :data:`QUANTITY_FIELDS` value compares by quantity and every other
    scalar exactly (a label value ``"1k"`` is not ``"1000"``; ``true`` is not ``1``). ``field`` is
    the map key ``a`` and ``b`` are found under."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(equivalent(a[key], b[key], str(key)) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equivalent(x, y, field) for x, y in zip(a, b, strict=True))
    if field in QUANTITY_FIELDS and same_quantity(a, b):
        return True
    return bool(a == b) and isinstance(a, bool) == isinstance(b, bool)


def needs_recreate(desired: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """Why ``current`` cannot be updated in place to ``desired`` (same kind and name), or None.

    - ResourceFlavor whose live version has ``topologyName``: Kueue refuses changes to
      ``nodeLabels``, ``tolerations`` and ``topologyName`` (CRD validation rules, e.g. "nodeLabels
      are immutable when topologyName is set", Kueue v0.17); newer releases keep the whole spec
      immutable (``resourceFlavorSpec are immutable when topologyName is set``), which adds
      ``nodeTaints``. Adding a ``topologyName`` to a flavor without one is allowed;
    - Topology: ``spec.levels`` is immutable;
    - LocalQueue: ``spec.clusterQueue`` is immutable.
    """
    kind = desired.get("kind")
    old, new = _spec(current), _spec(desired)
    if kind == "ResourceFlavor":
        changed = sorted(k for k in {*old, *new} if not equivalent(old.get(k), new.get(k), k))
        if old.get("topologyName") and changed:
            where = f"changes {', '.join(changed)} of a ResourceFlavor with topologyName {old['topologyName']!r}; "
            if set(changed) & {"nodeLabels", "tolerations", "topologyName"}:
                return where + "Kueue refuses changes to nodeLabels, tolerations and topologyName once it is set"
            return where + "newer Kueue releases keep the whole spec immutable once topologyName is set"
    elif kind == "Topology":
        if old.get("levels") != new.get("levels"):
            return "changes spec.levels; Kueue keeps a Topology's levels immutable"
    elif kind == "LocalQueue" and old.get("clusterQueue") and old.get("clusterQueue") != new.get("clusterQueue"):
        return (
            f"moves the LocalQueue from ClusterQueue {old['clusterQueue']!r} to {new.get('clusterQueue')!r}; "
            "Kueue keeps spec.clusterQueue immutable"
        )
    return None


_RECREATE_ACTION = {
    "ResourceFlavor": "delete and re-create it; workloads admitted on it are evicted and requeued",
    "Topology": "delete and re-create it together with the ResourceFlavors that name it",
    "LocalQueue": "delete and re-create it; its pending workloads must be resubmitted",
}


def _platform_path(platform: Platform | None, kind: str, name: str, namespace: str) -> str:
    if platform is None:
        return f"{kind}/{namespace + '/' if namespace else ''}{name}"
    if kind == "ResourceFlavor":
        for index, flavor in enumerate(platform.flavors):
            if flavor.name == name:
                return f"flavors[{index}]"
    if kind == "Topology":
        for index, topology in enumerate(platform.topologies):
            if topology.name == name:
                return f"topologies[{index}].levels"
    if kind == "LocalQueue":
        for index, team in enumerate(platform.teams):
            if namespace in team_namespaces(platform, team) and local_queue_name(platform, team) == name:
                return f"teams[{index}]"
    return f"{kind}/{namespace + '/' if namespace else ''}{name}"


def recreate_warnings(
    desired: Iterable[Manifest], current: Iterable[Manifest], platform: Platform | None = None
) -> list[Recreate]:
    """Warnings for generated objects whose existing version (same kind, namespace, name) cannot be
    updated in place (:func:`needs_recreate`). Paths point into ``platform`` when given."""
    existing = {}
    for obj in current:
        metadata = obj.get("metadata") or {}
        existing[(obj.get("kind"), metadata.get("namespace", ""), metadata.get("name"))] = obj
    out = []
    for obj in desired:
        metadata = obj.get("metadata") or {}
        kind, namespace, name = str(obj.get("kind")), str(metadata.get("namespace", "")), str(metadata.get("name"))
        old = existing.get((kind, namespace, name))
        if old is None:
            continue
        reason = needs_recreate(obj, old)
        if reason is None:
            continue
        out.append(
            Recreate(
                path=_platform_path(platform, kind, name, namespace),
                message=f"{kind} {name!r} needs a recreate: this {reason}; {_RECREATE_ACTION[kind]}",
                severity="warning",
                kind=kind,
                name=name,
                namespace=namespace,
            )
        )
    return out
