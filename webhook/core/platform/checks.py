"""Checks of a validated platform file across its parts (SPEC §2, §6): dangling references,
duplicate names, derived Kueue names that do not fit, namespace ownership, queue names, topology
rules. Every finding is a :class:`Problem` with its field path.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from webhook.core.kueue.wellformed import is_extended_resource
from webhook.core.objects.quantity import MAX_QUANTITY, format_quantity, parse_quantity
from webhook.core.platform.affinity import affinity_problems
from webhook.core.platform.controllers import controller_problems
from webhook.core.platform.models import FlavorSpec, LabelSelector, Platform, PriorityRule, TeamSpec, TopologySpec
from webhook.core.platform.naming import (
    SYSTEM_NAMESPACES,
    cluster_queue_name,
    local_queue_name,
    priority_class_name,
    team_namespaces,
)
from webhook.core.platform.problems import Problem


def _whole_units(path: str, resource: str, amount: str | int | float | None) -> list[Problem]:
    """A fractional amount of an extended resource (``nvidia.com/gpu: 0.5``): pods request
    extended resources in whole units only (Kubernetes' ``ValidateResourceQuantityValue``), so
    such a quota or node size cannot be used as written."""
    if amount is None or not is_extended_resource(resource):
        return []
    value = parse_quantity(amount)
    if value == value.to_integral_value():
        return []
    return [
        Problem(
            path=path,
            message=f"{amount} is not a whole number: {resource} is an extended resource, which pods "
            "request in whole units only",
        )
    ]


def _quota_totals(path: str, team: TeamSpec) -> list[Problem]:
    """A team's quota limit per resource (nominalQuota, plus borrowingLimit in a cohort, over its
    flavors; the policy's ``quotaLimits``) beyond 2^63-1, the largest Kubernetes quantity: each
    amount fits, their sum does not, so the webhook could not hold the limit."""
    totals: dict[str, Decimal] = {}
    for quota in team.quotas:
        for resource, amount in quota.resources.items():
            total = parse_quantity(amount.nominalQuota)
            if team.cohort is not None and amount.borrowingLimit is not None:
                total += parse_quantity(amount.borrowingLimit)
            totals[resource] = totals.get(resource, Decimal(0)) + total
    return [
        Problem(
            path=f"{path}.quotas",
            message=f"the {resource} quota limit (nominalQuota + borrowingLimit over the team's flavors) is "
            f"{format_quantity(total)}, above 2^63-1 = {MAX_QUANTITY}, the largest Kubernetes quantity",
        )
        for resource, total in sorted(totals.items())
        if total > MAX_QUANTITY
    ]


def _unknown(path: str, what: str, name: str, known: Iterable[str]) -> Problem:
    """The reference at ``path`` names no ``what`` of the platform: ``unknown cohort 'x' (known: [...])``."""
    return Problem(path=path, message=f"unknown {what} {name!r} (known: {sorted(known)})")


class PlatformError(ValueError):
    """A platform file that cannot be used; ``problems`` lists every finding with its path."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  {problem}" for problem in problems)
        super().__init__(f"{source}: invalid platform file\n{lines}")


def _names(items: list[Any], what: str, path: str, problems: list[Problem]) -> set[str]:
    names: set[str] = set()
    for index, item in enumerate(items):
        if item.name in names:
            problems.append(Problem(path=f"{path}[{index}].name", message=f"duplicate {what} {item.name!r}"))
        names.add(item.name)
    return names


def check_platform(platform: Platform) -> list[Problem]:
    """Check references between sections; return every problem found (empty list: consistent).

    Checked (SPEC §2, §6): unique names; flavor → topology, team → flavor/cohort/priority,
    cohort → parent (no cycles); topology levels named in a team policy exist in the team
    flavor's Topology; ``borrowingLimit``/``lendingLimit`` only with a cohort; ``lendingLimit``
    not above ``nominalQuota``; every name the naming preset derives fits where it lands (label
    values, namespace names); each effective namespace belongs to one team, none is a system
    namespace, no two teams share a ``namespaceSelector``; ``policy.queue`` names no other team's
    LocalQueue; ``policy.nodeAffinity`` leaves the team a flavor whose nodes can match it
    (:mod:`.affinity`); no ``controllers`` entry is a team's own service account (a warning). Each
    problem is listed once, in the order found.
    """
    problems: list[Problem] = []
    topologies = {t.name: t for t in platform.topologies}
    _names(platform.topologies, "topology", "topologies", problems)
    flavor_names = _names(platform.flavors, "flavor", "flavors", problems)
    cohort_names = _names(platform.cohorts, "cohort", "cohorts", problems)
    priority_names = _names(platform.priorities, "priority", "priorities", problems)
    _names(platform.teams, "team", "teams", problems)
    flavors = {f.name: f for f in platform.flavors}

    for index, flavor in enumerate(platform.flavors):
        for resource, amount in flavor.nodeResources.items():
            problems.extend(_whole_units(f"flavors[{index}].nodeResources.{resource}", resource, amount))
        if flavor.topologyName is not None and flavor.topologyName not in topologies:
            problems.append(_unknown(f"flavors[{index}].topologyName", "topology", flavor.topologyName, topologies))

    parents = {c.name: c.parentName for c in platform.cohorts}
    for index, cohort in enumerate(platform.cohorts):
        if cohort.parentName is not None and cohort.parentName not in cohort_names:
            problems.append(_unknown(f"cohorts[{index}].parentName", "cohort", cohort.parentName, cohort_names))
        seen = {cohort.name}
        parent = cohort.parentName
        while parent is not None and parent in parents:
            if parent in seen:
                problems.append(
                    Problem(path=f"cohorts[{index}].parentName", message=f"cohort cycle through {parent!r}")
                )
                break
            seen.add(parent)
            parent = parents[parent]

    for index, team in enumerate(platform.teams):
        base = f"teams[{index}]"
        if team.cohort is not None and team.cohort not in cohort_names:
            problems.append(_unknown(f"{base}.cohort", "cohort", team.cohort, cohort_names))
        problems.extend(_quota_totals(base, team))
        for qindex, quota in enumerate(team.quotas):
            qpath = f"{base}.quotas[{qindex}]"
            if quota.flavor not in flavor_names:
                problems.append(_unknown(f"{qpath}.flavor", "flavor", quota.flavor, flavor_names))
            for resource, limits in quota.resources.items():
                rpath = f"{qpath}.resources.{resource}"
                for field in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    problems.extend(_whole_units(f"{rpath}.{field}", resource, getattr(limits, field)))
                for field in ("borrowingLimit", "lendingLimit"):
                    if getattr(limits, field) is not None and team.cohort is None:
                        problems.append(
                            Problem(
                                path=f"{rpath}.{field}",
                                message=f"{field} needs the team to be in a cohort (Kueue ignores it otherwise)",
                            )
                        )
                if limits.lendingLimit is not None and parse_quantity(limits.lendingLimit) > parse_quantity(
                    limits.nominalQuota
                ):
                    problems.append(
                        Problem(
                            path=f"{rpath}.lendingLimit",
                            message=f"lendingLimit {limits.lendingLimit} is above nominalQuota {limits.nominalQuota}",
                        )
                    )
        policy = team.policy
        for field in ("kueuePriority", "podPriority"):
            rule: PriorityRule | None = getattr(policy, field)
            if rule is None:
                continue
            named = ([rule.default] if rule.default else []) + list(rule.allowed or [])
            for name in named:
                if name not in priority_names:
                    problems.append(_unknown(f"{base}.policy.{field}", "priority", name, priority_names))
            if rule.default and rule.allowed is not None and rule.default not in rule.allowed:
                problems.append(
                    Problem(
                        path=f"{base}.policy.{field}.default",
                        message=f"default {rule.default!r} is not in allowed {rule.allowed}",
                    )
                )
            if field == "podPriority":
                for name in named:
                    spec = next((p for p in platform.priorities if p.name == name), None)
                    if spec is not None and not spec.podPriorityClass:
                        problems.append(
                            Problem(
                                path=f"{base}.policy.podPriority",
                                message=f"priority {name!r} has no Kubernetes PriorityClass "
                                "(set podPriorityClass: true)",
                            )
                        )
        if policy.topology is not None and policy.topology.mode != "none":
            problems.extend(_check_topology_rule(base, team, flavors, topologies))
    problems.extend(_check_derived_names(platform))
    problems.extend(_check_namespaces(platform))
    problems.extend(_check_queues(platform))
    problems.extend(affinity_problems(platform))
    problems.extend(
        controller_problems(platform.controllers, {t.name: team_namespaces(platform, t) for t in platform.teams})
    )
    # One finding can be reached twice (a priority both the default and allowed): report it once.
    return list(dict.fromkeys(problems))


#: Kubernetes label values and namespace names have at most 63 characters.
_NAME_LIMIT = 63


def _check_derived_names(platform: Platform) -> list[Problem]:
    """Every name the naming preset derives is valid where it lands (SPEC §2).

    The LocalQueue, ClusterQueue and WorkloadPriorityClass names are label values too
    (``kueue.x-k8s.io/queue-name``, ``kueue.x-k8s.io/cluster-queue-name`` on the pods Kueue
    admits, ``kueue.x-k8s.io/priority-class``); a namespace name is a DNS-1123 label. The platform
    names are DNS-1123 labels already and the presets only add lower-case affixes, so only the
    length can go wrong.
    """
    problems: list[Problem] = []

    def check(path: str, kind: str, name: str, limited: str) -> None:
        if len(name) > _NAME_LIMIT:
            problems.append(
                Problem(
                    path=path,
                    message=f"{kind} name {name!r} would be {len(name)} characters; {limited} has at most "
                    f"{_NAME_LIMIT}",
                )
            )

    for index, team in enumerate(platform.teams):
        path = f"teams[{index}].name"
        if not team.namespaces:
            for namespace in team_namespaces(platform, team):
                check(path, "Namespace", namespace, "a namespace name")
        check(path, "ClusterQueue", cluster_queue_name(platform, team), "a label value")
        check(path, "LocalQueue", local_queue_name(platform, team), "a label value")
    for index, priority in enumerate(platform.priorities):
        name = priority_class_name(platform, priority.name)
        check(f"priorities[{index}].name", "WorkloadPriorityClass", name, "a label value")
        if priority.podPriorityClass and name.startswith("system-"):
            # kube-apiserver: the 'system-' prefix of PriorityClass names is reserved.
            problems.append(
                Problem(
                    path=f"priorities[{index}].name",
                    message=f"PriorityClass name {name!r}: the 'system-' prefix is reserved by Kubernetes",
                )
            )
    return problems


def _selector_key(selector: LabelSelector) -> frozenset[tuple[str, str, frozenset[str]]]:
    """A label selector as a set of requirements (``matchLabels`` entries as ``In`` with one value)."""
    requirements = {(key, "In", frozenset([value])) for key, value in selector.matchLabels.items()}
    requirements |= {(e.key, e.operator, frozenset(e.values)) for e in selector.matchExpressions}
    return frozenset(requirements)


def _check_namespaces(platform: Platform) -> list[Problem]:
    """Each effective namespace (listed, else from the naming preset) belongs to one team; no team
    claims a system namespace; no two teams have the same ``namespaceSelector``."""
    problems: list[Problem] = []
    owner: dict[str, int] = {}
    for index, team in enumerate(platform.teams):
        seen: set[str] = set()
        for nindex, namespace in enumerate(team_namespaces(platform, team)):
            if team.namespaces:
                path, what = f"teams[{index}].namespaces[{nindex}]", f"namespace {namespace!r}"
            else:
                path, what = f"teams[{index}].name", f"namespace {namespace!r} (the team's default namespace)"
            if namespace in seen:
                problems.append(Problem(path=path, message=f"{what} is listed twice"))
                continue
            seen.add(namespace)
            if namespace in SYSTEM_NAMESPACES:
                problems.append(
                    Problem(path=path, message=f"{what} is a system namespace, which the webhook never touches")
                )
                continue
            first = owner.setdefault(namespace, index)
            if first != index:
                problems.append(
                    Problem(
                        path=path,
                        message=f"{what} is claimed by team {platform.teams[first].name!r} (teams[{first}]) and "
                        f"team {team.name!r}; a namespace belongs to one team",
                    )
                )
    selectors: dict[frozenset[tuple[str, str, frozenset[str]]], int] = {}
    for index, team in enumerate(platform.teams):
        if team.namespaceSelector is None:
            continue
        first = selectors.setdefault(_selector_key(team.namespaceSelector), index)
        if first != index:
            problems.append(
                Problem(
                    path=f"teams[{index}].namespaceSelector",
                    message=f"same namespaceSelector as team {platform.teams[first].name!r} (teams[{first}]): "
                    "every namespace it selects would belong to both teams",
                )
            )
    return problems


def _check_queues(platform: Platform) -> list[Problem]:
    """``policy.queue`` names no LocalQueue generated for another team (SPEC §3: a queue of another
    team is denied, so defaulting or allowing one would hand out that team's quota)."""
    problems: list[Problem] = []
    queue_owner: dict[str, int] = {}
    for index, team in enumerate(platform.teams):
        queue_owner.setdefault(local_queue_name(platform, team), index)
    for index, team in enumerate(platform.teams):
        rule = team.policy.queue
        named = [("default", rule.default)] if rule.default is not None else []
        named += [(f"allowed[{qindex}]", name) for qindex, name in enumerate(rule.allowed)]
        for field, name in named:
            other = queue_owner.get(name, index)
            if other != index:
                problems.append(
                    Problem(
                        path=f"teams[{index}].policy.queue.{field}",
                        message=f"{name!r} is the LocalQueue of team {platform.teams[other].name!r} "
                        f"(teams[{other}]); a team may name only its own queues",
                    )
                )
    return problems


def _check_topology_rule(
    base: str, team: TeamSpec, flavors: dict[str, FlavorSpec], topologies: dict[str, TopologySpec]
) -> list[Problem]:
    rule = team.policy.topology
    assert rule is not None
    path = f"{base}.policy.topology"
    name = rule.topologyName
    if name is None:
        names = sorted({flavors[q.flavor].topologyName or "" for q in team.quotas if q.flavor in flavors} - {""})
        if len(names) != 1:
            return [
                Problem(
                    path=f"{path}.topologyName",
                    message="cannot tell which Topology applies: the team's flavors name "
                    f"{names or 'none'}; set topologyName",
                )
            ]
        name = names[0]
    if name not in topologies:
        return [Problem(path=f"{path}.topologyName", message=f"unknown topology {name!r}")]
    levels = topologies[name].levels
    problems = []
    for field in ("level", "sliceLevel"):
        level = getattr(rule, field)
        if level is not None and level not in levels:
            problems.append(
                Problem(path=f"{path}.{field}", message=f"{level!r} is not a level of Topology {name!r}: {levels}")
            )
    if (
        rule.level in levels
        and rule.sliceLevel in levels
        and levels.index(rule.sliceLevel) < levels.index(rule.level or "")
    ):
        problems.append(
            Problem(path=f"{path}.sliceLevel", message="sliceLevel must be at or below level (narrower or equal)")
        )
    return problems
