"""Whether a team's node affinity leaves it any node (SPEC §3 "node affinity", §6 generator checks).

The team's ``policy.nodeAffinity`` is ANDed into every ``nodeSelectorTerm`` of its workloads' pods,
and Kueue admits a podset on a flavor only where a node matches both the flavor's ``nodeLabels`` and
the pod's affinity (TAS counts only such nodes; without TAS the pods would stay unschedulable). A
requirement that contradicts a flavor's own ``nodeLabels`` (``In`` a set without the flavor's value,
``NotIn`` with it, ``DoesNotExist`` of a label the flavor sets, ``Gt``/``Lt`` it fails) makes that
flavor's quota useless to the team; when every flavor of the team is so, no workload of the team can
ever be admitted: the whole team is stranded.

:func:`affinity_problems` judges from the flavors' ``nodeLabels`` alone (requirements on other keys
cannot be decided there and are left alone); :func:`affinity_node_problems` judges against a node
inventory (``kubectl get nodes -o json``), where every requirement can be decided.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from webhook.core.kueue.inventory import Node
from webhook.core.kueue.scheduling import term_matches
from webhook.core.platform.models import FlavorSpec, NodeSelectorRequirement, Platform, TeamSpec
from webhook.core.platform.problems import Problem

__all__ = ["affinity_node_problems", "affinity_problems"]


def _term(requirements: Sequence[NodeSelectorRequirement]) -> dict[str, object]:
    return {"matchExpressions": [r.model_dump(exclude_defaults=False) for r in requirements]}


def _team_flavors(team: TeamSpec, flavors: Mapping[str, FlavorSpec]) -> list[FlavorSpec]:
    named = dict.fromkeys(quota.flavor for quota in team.quotas)
    return [flavors[name] for name in named if name in flavors]


def _shown(requirements: Sequence[NodeSelectorRequirement]) -> str:
    return "; ".join(f"{r.key} {r.operator}{' ' + str(list(r.values)) if r.values else ''}" for r in requirements)


def _stranded(path: str, team: TeamSpec, what: str, severity: Literal["error", "warning"]) -> Problem:
    return Problem(
        path=path,
        message=f"no node of team {team.name!r}'s flavors can match its nodeAffinity ({what}): every workload "
        "of the team would stay pending; fix the affinity or the flavors' nodeLabels",
        severity=severity,
    )


def affinity_problems(platform: Platform) -> list[Problem]:
    """Teams whose ``policy.nodeAffinity`` contradicts the ``nodeLabels`` of their flavors.

    Returns an error when it contradicts every flavor the team has quota in, a warning per flavor
    when only some are (that flavor's quota is useless to the team). Paths are
    ``teams[i].policy.nodeAffinity``.
    """
    problems: list[Problem] = []
    flavors = {flavor.name: flavor for flavor in platform.flavors}
    for index, team in enumerate(platform.teams):
        requirements = team.policy.nodeAffinity
        team_flavors = _team_flavors(team, flavors)
        if not requirements or not team_flavors:
            continue
        path = f"teams[{index}].policy.nodeAffinity"
        refused: list[tuple[FlavorSpec, list[NodeSelectorRequirement]]] = []
        for flavor in team_flavors:
            decidable = [r for r in requirements if r.key in flavor.nodeLabels]
            if decidable and not term_matches(_term(decidable), "", flavor.nodeLabels):
                refused.append((flavor, decidable))
        if len(refused) == len(team_flavors):
            shown = ", ".join(f"flavor {f.name!r} has {dict(f.nodeLabels)}, it asks {_shown(r)}" for f, r in refused)
            problems.append(_stranded(path, team, shown, "error"))
            continue
        for flavor, decidable in refused:
            problems.append(
                Problem(
                    path=path,
                    message=f"the nodes of flavor {flavor.name!r} ({dict(flavor.nodeLabels)}) never match "
                    f"{_shown(decidable)}: team {team.name!r}'s quota in it is never used",
                    severity="warning",
                )
            )
    return problems


def affinity_node_problems(
    platform: Platform, nodes: Sequence[Node], severity: Literal["error", "warning"]
) -> list[Problem]:
    """Teams none of whose flavors' nodes in ``nodes`` match the team's ``policy.nodeAffinity``.

    ``severity`` is the inventory checks' own (``error`` with ``--strict``). Flavors with no node in
    the inventory are left to the capacity checks; a team is judged on the flavors that have nodes.
    """
    problems: list[Problem] = []
    flavors = {flavor.name: flavor for flavor in platform.flavors}
    for index, team in enumerate(platform.teams):
        requirements = team.policy.nodeAffinity
        if not requirements:
            continue
        term = _term(requirements)
        judged = 0
        for flavor in _team_flavors(team, flavors):
            members = [n for n in nodes if all(n.labels.get(k) == v for k, v in flavor.nodeLabels.items())]
            if not members:
                continue
            judged += 1
            if any(term_matches(term, node.name, node.labels) for node in members):
                break
        else:
            if judged:
                what = f"{_shown(requirements)}; none of the {judged} flavor(s)' nodes in the inventory has it"
                problems.append(_stranded(f"teams[{index}].policy.nodeAffinity", team, what, severity))
    return problems
