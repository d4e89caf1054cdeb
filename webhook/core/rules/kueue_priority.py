"""Kueue priority rule: the ``kueue.x-k8s.io/priority-class`` label, a WorkloadPriorityClass (SPEC §3).

When missing it is filled in from the pod priority the workload itself asks for (when the team
may use it), else the team's default.
"""

from __future__ import annotations

from webhook.core.draft import Draft, Plan, check_value, string_map
from webhook.core.paths import dotted
from webhook.core.policy import TeamPolicyCompiled
from webhook.core.rules.pod_priority import user_pod_priority
from webhook.core.rules.queue import PRIORITY_LABEL, labels_path
from webhook.core.view import WorkloadView

__all__ = ["plan_kueue_priority"]


def plan_kueue_priority(draft: Draft, view: WorkloadView, team: TeamPolicyCompiled, plan: Plan) -> None:
    rule = team.kueuePriority
    if rule is None:
        return
    path = labels_path(view.row)
    priority = string_map(draft, path).get(PRIORITY_LABEL)
    if priority is None:
        chosen = user_pod_priority(view)
        reason = f"the pod priority class the workload asks for ({chosen})"
        if chosen is None or (rule.allowed is not None and chosen not in rule.allowed):
            chosen, reason = rule.default, f"the default of team {team.team!r}"
        if chosen:
            draft.set((*path, PRIORITY_LABEL), chosen, "kueuePriority", reason)
    else:
        where = f"{dotted(path)}.{PRIORITY_LABEL}"
        check_value(plan, "kueuePriority", rule, priority, where, team, "WorkloadPriorityClass")
