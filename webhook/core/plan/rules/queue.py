"""Queue rule: the ``kueue.x-k8s.io/queue-name`` label (SPEC §3), the suspend field Kueue's own
webhook needs, the fields Kueue's webhook insists on, and the labels of pods Kueue admits one by one.

Kueue reads an empty queue name as "no queue" (``jobframework.QueueNameForObject``), so ``""``
is treated as missing: filled in with the team's LocalQueue, with a warning (a team without a
default LocalQueue has ``""`` checked like any value). The same holds for an empty label of a pod
template Kueue admits pods from (``pod_labels`` rows), queue and priority label alike: Kueue reads
an empty ``kueue.x-k8s.io/priority-class`` as no WorkloadPriorityClass
(``jobframework.WorkloadPriorityClassName``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.kueue.kinds import WorkloadKind
from webhook.core.kueue.view import PRIORITY_LABEL, QUEUE_LABEL, WorkloadView
from webhook.core.objects.paths import Key, dotted, lookup
from webhook.core.plan.draft import Draft, Plan, Rule, check_value, json_value, string_map
from webhook.core.platform.policy import TeamPolicyCompiled, ValueRule

__all__ = [
    "EMPTY_MEANS",
    "PRIORITY_LABEL",
    "QUEUE_LABEL",
    "emptied_label",
    "plan_pod_labels",
    "plan_queue",
    "unknown_queue",
]

#: What Kueue reads an empty governed label as (``jobframework.QueueNameForObject``,
#: ``jobframework.WorkloadPriorityClassName``: ``""`` is the label's absence).
EMPTY_MEANS = {QUEUE_LABEL: "no queue", PRIORITY_LABEL: "no WorkloadPriorityClass"}


def emptied_label(label: str, where: str, value: str) -> str:
    """The warning for an empty governed ``label`` at ``where`` (a dotted path) given ``value``:
    ``an empty kueue.x-k8s.io/queue-name (metadata.labels) means no queue to Kueue; set to 'q'``."""
    return f"an empty {label} ({where}) means {EMPTY_MEANS[label]} to Kueue; set to {value!r}"


def labels_path(row: WorkloadKind) -> tuple[Key, ...]:
    return (*row.labels_at, "labels")


def plan_queue(draft: Draft, row: WorkloadKind, team: TeamPolicyCompiled, plan: Plan) -> None:
    """Add the team's LocalQueue (and ``suspend: true``) when missing; check a user's value."""
    path = labels_path(row)
    labels = string_map(draft, path)
    queue = labels.get(QUEUE_LABEL)
    managed = queue is not None
    if queue in (None, "") and team.queue.default:
        managed = True
        reason = f"the LocalQueue of team {team.team!r}"
        if queue == "":
            plan.report("warn", "queue", emptied_label(QUEUE_LABEL, dotted(path), team.queue.default))
        draft.set((*path, QUEUE_LABEL), team.queue.default, "queue", reason)
        if row.suspend is not None and draft.get(row.suspend) is not True:
            draft.set(row.suspend, True, "suspend", "queue label added: Kueue starts the workload once admitted")
    elif queue is not None:
        where = f"{dotted(path)}.{QUEUE_LABEL}"
        check_value(plan, "queue", team.queue, queue, where, team, "LocalQueue", unknown_queue(team))
    if managed:
        _plan_requirements(draft, row, plan)


def unknown_queue(team: TeamPolicyCompiled) -> str:
    """What Kueue does with a queue name outside the team's: a LocalQueue is namespaced, and a
    workload whose LocalQueue does not exist in its namespace stays suspended, never admitted
    (Kueue: "LocalQueue <name> doesn't exist")."""
    message = (
        "unless a LocalQueue of that name exists in this namespace, Kueue never admits the workload "
        "(it stays suspended)"
    )
    if team.queue.default:
        message += f"; use the team's LocalQueue {team.queue.default!r}"
    return message


def _plan_requirements(draft: Draft, row: WorkloadKind, plan: Plan) -> None:
    for need in row.requires:
        if need.unless is not None and lookup(draft.doc, need.unless[0]) == need.unless[1]:
            continue
        current = draft.get(need.path)
        if need.forbid:
            if current == need.value:
                message = f"Kueue refuses a {row.kind} with {dotted(need.path)}: {json_value(need.value)}"
                plan.report("enforce", "queue", f"{message} ({need.why})")
        elif current is None:
            draft.set(need.path, need.value, "queue", f"Kueue requires it of a {row.kind}: {need.why}")
        elif current != need.value:
            message = f"Kueue manages a {row.kind} only with {dotted(need.path)}: {json_value(need.value)}"
            plan.report("enforce", "queue", f"{message}, got {json_value(current)} ({need.why})")


def plan_pod_labels(draft: Draft, view: WorkloadView, team: TeamPolicyCompiled, plan: Plan) -> None:
    """The workload's queue and priority labels in every pod template too (``pod_labels`` rows);
    a template's own value is checked like the workload's, and an empty one (no queue or no
    WorkloadPriorityClass to Kueue) is replaced by the workload's, with a warning."""
    if not view.row.pod_labels:
        return
    path = labels_path(view.row)
    checks: tuple[tuple[str, Rule, ValueRule | None, str], ...] = (
        (QUEUE_LABEL, "queue", team.queue, "LocalQueue"),
        (PRIORITY_LABEL, "kueuePriority", team.kueuePriority, "WorkloadPriorityClass"),
    )
    for label, rule_name, rule, what in checks:
        value: Any = draft.get((*path, label)) or None  # "" is no label to Kueue: nothing to copy
        for podset in view.podsets:
            own_path = podset.at(*podset.rule.layout.labels)
            own = string_map(draft, own_path).get(label)
            if own in (None, "") and value is not None:
                if own == "":
                    plan.report("warn", rule_name, emptied_label(label, dotted(own_path), value))
                draft.set(
                    (*own_path, label), value, rule_name, f"podset {podset.name!r}: Kueue admits these pods one by one"
                )
            elif own == "":
                continue  # no value of the workload's to put there: Kueue reads it as the label's absence
            elif own is not None and rule is not None:
                consequence = unknown_queue(team) if label == QUEUE_LABEL else ""
                check_value(plan, rule_name, rule, own, f"{dotted(own_path)}.{label}", team, what, consequence)


def workload_labels(obj: Mapping[str, Any], row: WorkloadKind) -> Mapping[str, Any]:
    """The labels map that carries the queue and priority labels ({} when absent)."""
    labels = lookup(obj, labels_path(row))
    return labels if isinstance(labels, Mapping) else {}
