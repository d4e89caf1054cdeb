"""Pod priority rule: ``priorityClassName`` of every podset's pods (SPEC §3).

A podset without one gets, in this order: the one value the workload's other podsets agree on,
the workload's Kueue priority label, the team's default, each only when the team may use it. A
pod that already has ``spec.priority`` is left alone. A team without a ``podPriority`` rule is
held to its Kueue priorities: a pod may not take a PriorityClass the team may not use as its
Kueue priority (SPEC §12, no raising priority above what the team is allowed).
"""

from __future__ import annotations

from typing import Any

from webhook.core.draft import Draft, Plan, check_value, string_map
from webhook.core.paths import dotted, lookup
from webhook.core.policy import TeamPolicyCompiled, ValueRule
from webhook.core.view import PodSet, WorkloadView

__all__ = ["check_pod_priority", "plan_pod_priority", "user_pod_priority"]


def _value(podset: PodSet) -> Any:
    return lookup(podset.base, podset.rule.layout.priority)


def user_pod_priority(view: WorkloadView) -> str | None:
    """The one priorityClassName every podset that sets one agrees on, else None."""
    names = {value for podset in view.podsets if isinstance(value := _value(podset), str)}
    return next(iter(names)) if len(names) == 1 else None


def _rule(team: TeamPolicyCompiled) -> ValueRule | None:
    return team.podPriority if team.podPriority is not None else team.kueuePriority


def check_pod_priority(podset: PodSet, team: TeamPolicyCompiled, plan: Plan) -> None:
    """Report a podset's own priorityClassName outside what the team may use."""
    rule = _rule(team)
    current = _value(podset)
    if rule is not None and current is not None:
        where = dotted(podset.at(*podset.rule.layout.priority))
        check_value(plan, "podPriority", rule, current, where, team, "PriorityClass")


def plan_pod_priority(
    draft: Draft, podset: PodSet, view: WorkloadView, team: TeamPolicyCompiled, kueue_priority: Any
) -> None:
    """Fill in a missing priorityClassName (see the module docstring for the value chosen)."""
    rule = team.podPriority
    layout = podset.rule.layout
    if rule is None or not podset.present:
        return
    if _value(podset) is not None or (layout.pod_priority and lookup(podset.base, layout.pod_priority) is not None):
        return
    if layout.spec is not None:
        string_map(draft, podset.at(*layout.spec))
    where = f"podset {podset.name!r}"
    chosen: str | None = rule.default
    reason = f"{where}: the default of team {team.team!r}"
    for candidate, why in (
        (user_pod_priority(view), "the pod priority the workload's other podsets ask for"),
        (kueue_priority, "the Kueue priority the workload asks for"),
    ):
        if isinstance(candidate, str) and (rule.allowed is None or candidate in rule.allowed):
            chosen, reason = candidate, f"{where}: {why}"
            break
    if chosen:
        draft.set(podset.at(*layout.priority), chosen, "podPriority", reason)
