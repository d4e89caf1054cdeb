"""A team's quotas grouped into Kueue resource groups (``ClusterQueue.spec.resourceGroups``), with
the problems Kueue would refuse: pure, shared by the manifests and the generator's checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from webhook.core.platform.platform import FlavorQuota, Problem, TeamSpec

__all__ = ["ResourceGroupPlan", "plan_resource_groups"]


@dataclass
class ResourceGroupPlan:
    """One ``spec.resourceGroups[]`` entry: resources covered together by the same flavors."""

    covered_resources: list[str]
    flavors: list[FlavorQuota] = field(default_factory=list)


def plan_resource_groups(team: TeamSpec, path: str = "") -> tuple[list[ResourceGroupPlan], list[Problem]]:
    """Group a team's quotas into Kueue resource groups.

    Flavors that quote exactly the same set of resources form one group; flavors keep the order
    of ``quotas`` (Kueue tries them in that order) and ``coveredResources`` the order of the
    group's first flavor. Kueue (ClusterQueueSpec.resourceGroups) allows each resource and each
    flavor in one group only, so a flavor listed twice, or a resource quoted by flavors with
    different resource sets, is reported as a problem (paths below ``path``, e.g. ``teams[0]``)
    and left out of the plan.
    """
    groups: list[ResourceGroupPlan] = []
    problems: list[Problem] = []
    group_of_resource: dict[str, tuple[ResourceGroupPlan, int]] = {}
    seen_flavor: dict[str, int] = {}
    prefix = f"{path}." if path else ""
    for index, quota in enumerate(team.quotas):
        qpath = f"{prefix}quotas[{index}]"
        if quota.flavor in seen_flavor:
            first = seen_flavor[quota.flavor]
            problems.append(
                Problem(
                    path=f"{qpath}.flavor",
                    message=f"flavor {quota.flavor!r} already has quotas at {prefix}quotas[{first}]; "
                    "Kueue allows a flavor in one resource group only: merge the two entries",
                )
            )
            continue
        seen_flavor[quota.flavor] = index
        resources = list(quota.resources)
        same = [group_of_resource[r] for r in resources if r in group_of_resource]
        target = same[0][0] if same else None
        if target is not None and set(target.covered_resources) == set(resources):
            target.flavors.append(quota)
            continue
        if same:
            group, first = same[0]
            problems.append(
                Problem(
                    path=f"{qpath}.resources",
                    message=f"flavor {quota.flavor!r} quotes {sorted(resources)} but flavor "
                    f"{team.quotas[first].flavor!r} (quotas[{first}]) covers {sorted(group.covered_resources)}; "
                    "Kueue allows a resource in one resource group only, and every flavor of a group "
                    "must quote the same resources",
                )
            )
            continue
        group = ResourceGroupPlan(covered_resources=resources, flavors=[quota])
        groups.append(group)
        for resource in resources:
            group_of_resource[resource] = (group, index)
    return groups, problems
