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

Changes Kueue refuses in place (a recreate) are :mod:`webhook.generate.recreate`'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Literal

from webhook.core.kueue.inventory import Node
from webhook.core.objects.quantity import format_quantity, parse_quantity
from webhook.core.platform.affinity import affinity_node_problems
from webhook.core.platform.platform import Platform, Problem, quota_total
from webhook.core.platform.policy import local_queue_name, team_namespaces
from webhook.generate.manifests import DEFAULT_POLICY_NAMESPACE
from webhook.generate.resource_groups import plan_resource_groups

__all__ = ["validate_platform"]

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
        problems.extend(affinity_node_problems(platform, nodes, "error" if strict else "warning"))
    return problems
