"""UPDATE of a governed workload (SPEC §3, "UPDATE never blocks Kueue or a re-apply").

Kueue starts, stops and evicts jobs by UPDATE (unsuspend, node selectors, scheduling gates;
later suspend again), and users re-apply their original manifests (``kubectl apply``,
``apply --server-side``, ``replace``). So, for each governed value (the queue and priority
labels, ``suspend``, each podset's ``priorityClassName``, TAS annotations and the team's node
affinity, and the labels of pods Kueue admits one by one):

- left as it was by the update → never refused, whoever sends it and whatever the policy says now
  (a value the policy no longer allows stays; an object from before the webhook stays bare);
- introduced or changed → checked as on CREATE (a malformed count or quantity too: refused);
- dropped → put back as it was in the stored object, so a re-apply of the original manifest
  keeps it (and an immutable field, like a started Job's pod template, stays unchanged); a queue
  or priority label emptied to ``""`` is dropped to Kueue (no queue, no WorkloadPriorityClass:
  ``jobframework.QueueNameForObject``, ``WorkloadPriorityClassName``), and so is an emptied
  ``priorityClassName`` to Kubernetes (the Priority admission plugin reads ``""`` as none), so
  each is put back too; ``""`` where the stored object had none (or ``""``), or none where it
  had ``""``, changes nothing. Each value put back is named in a warning (``kubectl label …
  queue-name-`` would otherwise print "unlabeled" while the label stays);
- a podset the update adds gets what CREATE gives a podset, unless the kind's pod templates are
  immutable (a Job's), where it is reported instead;
- a podset's TAS annotations dropped all together are put back together; its
  ``podset-group-name`` dropped alone is put back too (Kueue refuses a group of one podset);
- an update that changes a podset's pod count, per-pod requests, TAS annotations or group name
  (``kubectl patch job --type=merge -p '{"spec":{"parallelism":4}}'``) has the resulting object
  checked as on CREATE for a workload Kueue can never admit (:mod:`~webhook.core.plan.recheck`), and
  each finding is a warning, never a denial (Kueue and controllers resize workloads by UPDATE
  too), naming what the update changed;
- an update that changes the Kueue priority label while a podset's ``priorityClassName`` followed
  the stored one (as CREATE sets it) is warned: the pods keep their PriorityClass (a Job's pod
  template cannot change ``priorityClassName``; the API server lets a suspended Job change its
  node scheduling directives only).

The governor's own widening (its user, one recorded step of its ladder: :mod:`webhook.core.plan.widen`)
is not checked against the topology policy; any other change of TAS annotations, from anyone, is.

Nothing else is patched: in particular no field the stored object did not have is added to a
pod template the API server refuses to change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from webhook.core.kueue.inventory import NodeInventory
from webhook.core.kueue.kinds import WorkloadKind
from webhook.core.kueue.view import PodSet, kueue_view
from webhook.core.kueue.wellformed import Problems, string_values
from webhook.core.objects.paths import Key, dotted, lookup
from webhook.core.plan.create import plan_object, skip_reason, validate_podset
from webhook.core.plan.draft import Draft, Plan, Rule, Shape, check_value, malformed
from webhook.core.plan.owners import managed_child
from webhook.core.plan.recheck import recheck_admissible, resized, retopologized
from webhook.core.plan.rules.pod_priority import check_pod_priority, check_priority_fields
from webhook.core.plan.rules.queue import (
    EMPTY_MEANS,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    labels_path,
    unknown_queue,
    workload_labels,
)
from webhook.core.plan.rules.topology import GROUP_NAME, TAS_ANNOTATIONS, check_user_topology, elastic_forbidden
from webhook.core.plan.widen_history import governor_widening
from webhook.core.platform.platform import Enforcement
from webhook.core.platform.policy import TeamPolicyCompiled, ValueRule
from webhook.core.platform.prepared import prepared

__all__ = ["plan_status_update", "plan_update"]

_AFFINITY = ("nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


def plan_update(
    new: Mapping[str, Any],
    old: Mapping[str, Any],
    row: WorkloadKind,
    team: TeamPolicyCompiled,
    inventory: NodeInventory | None = None,
    governor: bool = False,
) -> Plan:
    """Plan an UPDATE of a workload of kind ``row`` (see the module docstring); ``governor``: the
    governor's own user sends it, so a podset it widens by one recorded step of its ladder
    (:func:`~webhook.core.plan.widen_history.governor_step`) is not checked against the policy."""
    skipped = managed_child(new)
    if skipped and managed_child(old):  # an owner added by this very update proves nothing
        return Plan(skipped=skipped)
    if skip_reason(new, row) and skip_reason(old, row):
        return Plan(skipped=skip_reason(new, row))
    plan = Plan()
    draft = Draft(new)
    try:
        _labels(draft, old, row, team, plan)
        check_priority_fields(new, row, team, plan, old)
        if row.suspend is not None and lookup(old, row.suspend) is True and lookup(new, row.suspend) is None:
            _restore(draft, plan, row.suspend, True, "suspend", dotted(row.suspend), "Kueue has not started it")
        old_podsets = {p.path: p for p in kueue_view(old, row).podsets if p.present}
        levels = team.topology.levels if governor and team.topology is not None else None
        widened = governor_widening(new, old, row, levels, plan) if levels is not None else ()
        view = kueue_view(new, row)
        introduced = [p for p in view.problems if not _same(lookup(old, p.path), p.found)]
        if introduced:  # a malformed value the stored object already had is not this update's doing
            return malformed(*introduced)
        for podset in view.podsets:
            if not podset.present:
                continue
            before = old_podsets.get(podset.path)
            if before is None:
                _added(draft, new, podset, row, team, inventory, plan)
            else:
                forbidden = elastic_forbidden(new, row)
                _podset(draft, podset, before, team, plan, row.pod_labels, forbidden, podset.name in widened)
        if not plan.denials:  # a refused relabel changes nothing
            _priority_followed(draft.doc, old, row, view.podsets, old_podsets, plan)
        planned = kueue_view(draft.doc, row).podsets  # dropped values put back
        sized = resized(planned, old_podsets)
        changed = sized + retopologized(planned, old_podsets)
        if changed:
            recheck_admissible(draft, row, team, inventory, plan, changed, bool(sized))
    except Shape as shape:
        return malformed(shape)
    plan.changes = draft.changes
    if not plan.changes and not plan.denials and not plan.warnings:
        plan.skipped = "UPDATE: no governed value introduced, changed or dropped"
    return plan


def plan_status_update(
    new: Mapping[str, Any], old: Mapping[str, Any], row: WorkloadKind, team: TeamPolicyCompiled
) -> Plan:
    """Plan an UPDATE through the ``status`` subresource of a built-in kind.

    The API server's status strategies of Job, Pod, StatefulSet and ReplicaSet reset ``spec`` but
    keep the object's ``metadata`` changes, so ``kubectl patch --subresource=status`` can change,
    add or drop the queue and priority labels (Kueue then follows the new priority). They are
    planned as on any UPDATE: a value introduced or changed is checked, one dropped or emptied is
    put back, and a label value the update makes no string is a malformed object.
    """
    if managed_child(new) and managed_child(old):
        return Plan(skipped=managed_child(new))
    problems: Problems = []
    labels = labels_path(row)
    string_values(lookup(new, labels), labels, problems)  # a label that is no string: as on any UPDATE
    introduced = [p for p in problems if not _same(lookup(old, p.path), p.found)]
    if introduced:
        return malformed(*introduced)
    plan = Plan()
    draft = Draft(new)
    try:
        _labels(draft, old, row, team, plan)
    except Shape as shape:
        return malformed(shape)
    plan.changes = draft.changes
    if not plan.changes and not plan.denials and not plan.warnings:
        plan.skipped = "status UPDATE: no governed label introduced, changed or dropped"
    return plan


def _same(stored: Any, value: Any) -> bool:
    """The same JSON value (``1`` is not ``true`` nor ``1.0``)."""
    return type(stored) is type(value) and stored == value


_KEPT = "an update that leaves out a governed value keeps the stored one"


def _restore(
    draft: Draft, plan: Plan, path: tuple[Key, ...], value: Any, rule: Rule, what: str, why: str = _KEPT
) -> None:
    """Put back ``value`` the update drops at ``path``, and say so in a warning (rule: ``what``
    was removed, ``value`` kept, ``why``); a map or list value is named, not printed."""
    draft.set(path, value, rule, f"put back: the update drops {what}")
    shown = "true" if value is True else f"{value!r}" if isinstance(value, str) else "the stored value"
    plan.report("warn", rule, f"this update removes {what}; kept {shown} ({why})")


def _value(
    draft: Draft,
    path: tuple[Key, ...],
    old: Any,
    rule_name: Rule,
    rule: ValueRule | None,
    team: TeamPolicyCompiled,
    what: str,
    plan: Plan,
) -> None:
    """One governed scalar: unchanged → nothing; dropped → put back; introduced/changed → checked."""
    new = draft.get(path)
    if rule is None or new == old:
        return
    if new is None:
        _restore(draft, plan, path, old, rule_name, dotted(path))
    else:
        consequence = unknown_queue(team) if rule_name == "queue" else ""
        check_value(plan, rule_name, rule, new, dotted(path), team, what, consequence)


def _unset(value: Any) -> bool:
    """No value to Kueue and Kubernetes: absent, or an empty governed label or
    ``priorityClassName`` (both read ``""`` as none)."""
    return value is None or value == ""


def _emptied(draft: Draft, path: tuple[Key, ...], old: Any, rule: Rule, plan: Plan) -> bool:
    """An update that empties a stored queue or priority label (``path`` ends with the label):
    Kueue reads ``""`` as no queue or no WorkloadPriorityClass (``jobframework.QueueNameForObject``,
    ``WorkloadPriorityClassName``), so it is dropped in effect, and put back (with a warning)."""
    if draft.get(path) != "" or not isinstance(old, str) or old == "":
        return False
    label = str(path[-1])
    means = EMPTY_MEANS[label]
    draft.set(path, old, rule, f"put back: the update empties {dotted(path)}, which Kueue reads as {means}")
    plan.report("warn", rule, f"an empty {label} ({dotted(path)}) means {means} to Kueue; kept {old!r}")
    return True


def _labels(draft: Draft, old: Mapping[str, Any], row: WorkloadKind, team: TeamPolicyCompiled, plan: Plan) -> None:
    path = labels_path(row)
    for label, rule_name, rule, what in _label_rules(team):
        at = (*path, label)
        stored = lookup(old, at)
        if rule is None or _emptied(draft, at, stored, rule_name, plan) or (_unset(draft.get(at)) and _unset(stored)):
            continue  # put back, or no label before nor after to Kueue ("" is none): as before the update
        _value(draft, at, stored, rule_name, rule, team, what, plan)


def _label_rules(team: TeamPolicyCompiled) -> tuple[tuple[str, Rule, ValueRule | None, str], ...]:
    """Each governed label with its rule's name, the team's rule and what its value names."""
    return (
        (QUEUE_LABEL, "queue", team.queue, "LocalQueue"),
        (PRIORITY_LABEL, "kueuePriority", team.kueuePriority, "WorkloadPriorityClass"),
    )


def _podset(
    draft: Draft,
    new: PodSet,
    old: PodSet,
    team: TeamPolicyCompiled,
    plan: Plan,
    pod_labels: bool,
    forbidden: tuple[str, ...] = (),
    widened: bool = False,
) -> None:
    layout = new.rule.layout
    priority_path = new.at(*layout.priority)
    new_priority, old_priority = draft.get(priority_path), lookup(old.base, layout.priority)
    if new_priority == "" and isinstance(old_priority, str) and old_priority:
        where = dotted(priority_path)  # Kubernetes' Priority admission reads "" as none: dropped in effect
        draft.set(priority_path, old_priority, "podPriority", f"put back: the update empties {where}")
        message = f"an empty priorityClassName ({where}) means no PriorityClass to Kubernetes; kept {old_priority!r}"
        plan.report("warn", "podPriority", message)
    elif new_priority is None and not _unset(old_priority):
        _restore(draft, plan, priority_path, old_priority, "podPriority", dotted(priority_path))
    elif new_priority != old_priority and not (_unset(new_priority) and _unset(old_priority)):
        check_pod_priority(new, team, plan)
    # A podset group goes with its TAS annotations (topology mode auto groups a driver with its workers).
    old_tas = {k: v for k, v in old.annotations.items() if k in (*TAS_ANNOTATIONS, GROUP_NAME)}
    new_tas = {k: v for k, v in new.annotations.items() if k in (*TAS_ANNOTATIONS, GROUP_NAME)}
    if not new_tas and any(key in old_tas for key in TAS_ANNOTATIONS):
        dropped = old_tas
    else:  # a group of one podset is refused by Kueue: a dropped group name alone is put back too
        dropped = {GROUP_NAME: old_tas[GROUP_NAME]} if GROUP_NAME in old_tas and GROUP_NAME not in new_tas else {}
        if {**new_tas, **dropped} != old_tas and team.topology is not None and not widened:
            check_user_topology(new, team.topology, team, plan, forbidden)
    for key, value in dropped.items():
        _restore(draft, plan, new.at(*layout.annotations, key), value, "topology", f"{key} of podset {new.name!r}")
    if team.nodeAffinity:
        old_affinity, new_affinity = lookup(old.base, layout.affinity), lookup(new.base, layout.affinity)
        if _has_team_affinity(old_affinity, team) and not _has_team_affinity(new_affinity, team):
            if new_affinity is None:
                _restore(
                    draft,
                    plan,
                    new.at(*layout.affinity),
                    old_affinity,
                    "nodeAffinity",
                    f"the affinity of podset {new.name!r}",
                    f"it holds team {team.team!r}'s node affinity",
                )
            else:
                plan.report(
                    "warn",
                    "nodeAffinity",
                    f"podset {new.name!r}: this update drops team {team.team!r}'s "
                    "node affinity from an affinity it changes; Kueue may place its pods outside the team's nodes",
                )
    if pod_labels:  # Kueue reads these pods' queue and priority from the template (a StatefulSet's pods: children)
        for label, rule_name, rule, what in _label_rules(team):
            path = new.at(*layout.labels, label)
            before, now = lookup(old.base, (*layout.labels, label)), draft.get(path)
            if _emptied(draft, path, before, rule_name, plan) or (_unset(now) and _unset(before)):
                continue
            if before is not None and now is None:
                _restore(draft, plan, path, before, rule_name, dotted(path))
            elif now is not None and now != before and rule is not None:
                consequence = unknown_queue(team) if label == QUEUE_LABEL else ""
                check_value(plan, rule_name, rule, now, dotted(path), team, what, consequence)


def _has_team_affinity(affinity: Any, team: TeamPolicyCompiled) -> bool:
    terms = lookup(affinity, (*_AFFINITY, "nodeSelectorTerms"))
    if not isinstance(terms, list) or not terms:
        return False
    wanted = prepared(team).affinity_full
    for term in terms:
        expressions = term.get("matchExpressions") if isinstance(term, Mapping) else None
        if not isinstance(expressions, list):
            return False
        mine = [
            {"key": e.get("key"), "operator": e.get("operator"), "values": _values(e.get("values"))}
            for e in expressions
            if isinstance(e, Mapping)
        ]
        if not all(w in mine for w in wanted):
            return False
    return True


def _values(values: Any) -> Any:
    """An expression's ``values`` to compare with the team's: a list as a list, absent as [], any
    other JSON value as itself (it then matches no team expression; it is never iterated)."""
    if values is None:
        return []
    return list(values) if isinstance(values, list) else values


def _added(
    draft: Draft,
    new: Mapping[str, Any],
    podset: PodSet,
    row: WorkloadKind,
    team: TeamPolicyCompiled,
    inventory: NodeInventory | None,
    plan: Plan,
) -> None:
    """A podset the update adds: checked and filled in as on CREATE, unless the pod templates are
    immutable (then what CREATE would add is reported: it could never be added later)."""
    validate_podset(podset, team, plan, elastic_forbidden(new, row))
    created = plan_object(new, row, team, inventory, coplace=False)
    governs_podsets = team.podPriority is not None or team.topology is not None or bool(team.nodeAffinity)
    if created.invalid and governs_podsets:  # malformed values the stored object had: nothing planned
        found = "; ".join(d.removeprefix("malformed object: ") for d in created.denials)
        plan.report("warn", "malformed object", f"podset {podset.name!r} added by this update gets no policy: {found}")
        return
    for change in created.changes:
        if change.path[: len(podset.path)] != podset.path or change.rule not in _PODSET_RULES:
            continue
        if row.frozen_unless is not None:
            message = (
                f"this update adds podset {podset.name!r} without what team {team.team!r} requires there "
                f"({dotted(change.path)}), and its pod template cannot change later: set it in the object"
            )
            plan.report(_PODSET_RULES[change.rule](team), change.rule, message)
            continue
        reason = f"podset {podset.name!r} added by this update: {change.reason}"
        draft.set(change.path, change.value, change.rule, reason)


_PODSET_RULES: dict[str, Callable[[TeamPolicyCompiled], Enforcement]] = {
    "podPriority": lambda team: team.podPriority.enforcement if team.podPriority else "default",
    "topology": lambda team: team.topology.enforcement if team.topology else "default",
    "nodeAffinity": lambda team: "warn",
}


def _priority_followed(
    new: Mapping[str, Any],
    old: Mapping[str, Any],
    row: WorkloadKind,
    podsets: Sequence[PodSet],
    old_podsets: Mapping[tuple[Key, ...], PodSet],
    plan: Plan,
) -> None:
    """Warn when the Kueue priority label changes while a podset's ``priorityClassName`` followed
    the stored one and stays: Kueue's priority and the pods' then differ."""
    before, after = workload_labels(old, row).get(PRIORITY_LABEL), workload_labels(new, row).get(PRIORITY_LABEL)
    if not isinstance(before, str) or not isinstance(after, str) or before == after:
        return
    for podset in podsets:
        stored = old_podsets.get(podset.path)
        if not podset.present or stored is None:
            continue
        path = podset.rule.layout.priority
        if lookup(podset.base, path) != before or lookup(stored.base, path) != before:
            continue
        if row.frozen_unless is not None:
            fix = (
                f"a {row.kind}'s pod template cannot change priorityClassName, even suspended; "
                f"recreate the {row.kind} to change both"
            )
        else:
            fix = f"set priorityClassName {after!r} in its pod template too"
        plan.report(
            "warn",
            "podPriority",
            f"podset {podset.name!r}: its pods keep priorityClassName {before!r} while Kueue's priority "
            f"is now {after!r} (label {PRIORITY_LABEL}); {fix}",
        )
