"""UPDATE: what an update of a governed workload may change (SPEC §3, "UPDATE never blocks").

Nothing is mutated on UPDATE (a started Job's pod template is immutable). Validated:

- a queue or priority label that changes, or is removed (removing the queue label would let a
  suspended job run outside Kueue's quota);
- podsets whose template changes (Deployments, StatefulSets, LWS, RayClusters allow it): their
  priorityClassName and TAS annotations, as on CREATE.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.draft import Plan, check_value
from webhook.core.inventory import NodeInventory
from webhook.core.kinds import WorkloadKind
from webhook.core.paths import dotted, lookup
from webhook.core.planner import managed_child, plan_object, validate_podset
from webhook.core.platform import Enforcement
from webhook.core.policy import TeamPolicyCompiled
from webhook.core.rules.queue import PRIORITY_LABEL, QUEUE_LABEL, labels_path, workload_labels
from webhook.core.view import PodSet, kueue_view

__all__ = ["plan_update"]


def plan_update(
    new: Mapping[str, Any],
    old: Mapping[str, Any],
    row: WorkloadKind,
    team: TeamPolicyCompiled,
    inventory: NodeInventory | None = None,
) -> Plan:
    """Validate an UPDATE of a workload of kind ``row`` (see the module docstring)."""
    skipped = managed_child(new)
    if skipped and managed_child(old):  # an owner added by this very update proves nothing
        return Plan(skipped=skipped)
    plan = Plan()
    new_labels, old_labels = workload_labels(new, row), workload_labels(old, row)
    where = dotted(labels_path(row))
    for rule_name, rule, label, what in (
        ("queue", team.queue, QUEUE_LABEL, "LocalQueue"),
        ("kueuePriority", team.kueuePriority, PRIORITY_LABEL, "WorkloadPriorityClass"),
    ):
        value, before = new_labels.get(label), old_labels.get(label)
        if rule is None or value == before:
            continue
        if value is None:
            message = f"the label {label} ({where}) may not be removed from a {row.kind} of team {team.team!r}"
            plan.report(rule.enforcement, rule_name, message)
            continue
        check_value(plan, rule_name, rule, value, f"{where}.{label}", team, what)
    changed = False
    for podset in kueue_view(new, row).podsets:
        if not _changed(podset, new, old):
            continue
        changed = True
        validate_podset(podset, team, plan)
    if changed:
        _check_removals(new, old, row, team, plan)
    if not plan.denials and not plan.warnings:
        plan.skipped = "UPDATE: nothing to validate changed"
    return plan


def _annotations(obj: Mapping[str, Any]) -> Any:
    return lookup(obj, ("metadata", "annotations"))


def _changed(podset: PodSet, new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    if podset.path:
        return bool(lookup(old, podset.path) != podset.base)
    return bool(lookup(old, ("spec",)) != lookup(new, ("spec",)) or _annotations(old) != _annotations(new))


def _check_removals(
    new: Mapping[str, Any], old: Mapping[str, Any], row: WorkloadKind, team: TeamPolicyCompiled, plan: Plan
) -> None:
    """An UPDATE may not take out of a podset what the policy put there: whatever CREATE
    would now add to the new object but not to the old one was removed by this update."""
    levels: dict[str, Enforcement] = {
        "podPriority": team.podPriority.enforcement if team.podPriority else "default",
        "topology": team.topology.enforcement if team.topology else "default",
        "nodeAffinity": "warn",  # no enforcement setting: always added, so its removal is warned
    }
    podsets = kueue_view(new, row).podsets
    before = {(c.rule, c.path) for c in plan_object(old, row, team).changes}
    reported: set[tuple[str, str]] = set()
    for change in plan_object(new, row, team).changes:
        if change.rule not in levels or (change.rule, change.path) in before:
            continue
        # The podset whose template the change lands in: the longest template path it starts with.
        owner = max((p for p in podsets if change.path[: len(p.path)] == p.path), key=lambda p: len(p.path))
        if (change.rule, owner.name) in reported:
            continue
        reported.add((change.rule, owner.name))
        existed = not owner.path or lookup(old, owner.path) is not None
        what = f"removes from podset {owner.name!r}" if existed else f"adds podset {owner.name!r} without"
        message = (
            f"this update {what} what team {team.team!r} requires there "
            f"({dotted(change.path)}); UPDATE is never mutated, so set it in the object"
        )
        plan.report(levels[change.rule], change.rule, message)
