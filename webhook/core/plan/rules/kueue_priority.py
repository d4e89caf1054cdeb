"""Kueue priority rule: the ``kueue.x-k8s.io/priority-class`` label, a WorkloadPriorityClass (SPEC §3).

When missing it is filled in from the pod priority the workload itself asks for (when the team
may use it and the policy knows it for a PriorityClass the platform generates, i.e. a value of the
team's ``podPriority`` rule), else the team's default; a pod priority not followed for want of a
known PriorityClass is warned about.

Kueue reads an empty label as no WorkloadPriorityClass (``jobframework.WorkloadPriorityClassName``
returns ``""``, and ``ExtractPriority`` then takes the pods' PriorityClass), so ``""`` is treated
as missing: filled in as above, with a warning that the empty value was replaced.
"""

from __future__ import annotations

from webhook.core.kueue.view import WorkloadView
from webhook.core.objects.paths import dotted
from webhook.core.plan.draft import Draft, Plan, check_value, string_map
from webhook.core.plan.rules.pod_priority import user_pod_priority
from webhook.core.plan.rules.queue import PRIORITY_LABEL, emptied_label, labels_path
from webhook.core.platform.policy import TeamPolicyCompiled

__all__ = ["plan_kueue_priority"]


def plan_kueue_priority(draft: Draft, view: WorkloadView, team: TeamPolicyCompiled, plan: Plan) -> None:
    rule = team.kueuePriority
    if rule is None:
        return
    path = labels_path(view.row)
    priority = string_map(draft, path).get(PRIORITY_LABEL)
    if priority is None or priority == "":
        chosen = user_pod_priority(view)
        reason = f"the pod priority class the workload asks for ({chosen})"
        if chosen is not None and not _known_priority_class(chosen, team):
            if chosen != rule.default and (rule.allowed is None or chosen in rule.allowed):
                message = (
                    f"the pods' priorityClassName {chosen!r} is not a PriorityClass team {team.team!r}'s policy "
                    f"lets its pods use, so the Kueue priority does not follow it (the API server refuses pods "
                    f"whose PriorityClass does not exist); set {PRIORITY_LABEL} to choose one"
                )
                plan.report("warn", "kueuePriority", message)
            chosen = None
        if chosen is None or (rule.allowed is not None and chosen not in rule.allowed):
            chosen, reason = rule.default, f"the default of team {team.team!r}"
        if chosen:
            if priority == "":
                plan.report("warn", "kueuePriority", emptied_label(PRIORITY_LABEL, dotted(path), chosen))
            draft.set((*path, PRIORITY_LABEL), chosen, "kueuePriority", reason)
    else:
        where = f"{dotted(path)}.{PRIORITY_LABEL}"
        check_value(plan, "kueuePriority", rule, priority, where, team, "WorkloadPriorityClass")


def _known_priority_class(name: str, team: TeamPolicyCompiled) -> bool:
    """Whether ``name`` is a PriorityClass the platform generates, as far as the compiled policy
    tells: the values of the team's ``podPriority`` rule (each a platform priority with
    ``podPriorityClass: true``, checked when the platform file is loaded). A team without that
    rule names no PriorityClass, so a pod priority is never known to exist."""
    rule = team.podPriority
    if rule is None:
        return False
    return (rule.allowed is not None and name in rule.allowed) or name == rule.default
