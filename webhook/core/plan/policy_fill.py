"""Values a MutatingAdmissionPolicy filled in while the webhook was away (SPEC §8b).

``kgov generate --admission-policies`` (:mod:`webhook.generate.admission_policies`) compiles the
part of a team's policy that CEL states exactly into MutatingAdmissionPolicies: the queue label,
the Kueue priority label's default and a fixed topology level on a kind's single static pod
template. The API server runs those policies before any mutating webhook, and each one writes
what it filled in into the annotation :data:`FILLED_BY_POLICY` next to the labels it set
(``queue,priority,topology``).

This module holds what both sides share (which kinds and which values a policy fills) and the
webhook's side: on CREATE, a value the marker names and that equals what the team's policy
fills is the webhook's own default, not a user's choice, so the object is planned as if the
value were absent (:func:`plan_created`). The webhook then decides every value exactly as it
would alone (a priority that follows the pods' PriorityClass, topology mode checks, stranded
podsets…), puts back what it would not set, and removes the marker: the object it admits is the
one it admits without the policies. UPDATE is unchanged: a value left as it was is never refused
(SPEC §3), whoever set it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from jsonpatch import JsonPatchException
from jsonpointer import JsonPointerException

from webhook.core.kueue.inventory import NodeInventory
from webhook.core.kueue.kind_model import TEMPLATE, PodSetRule, WorkloadKind
from webhook.core.kueue.view import PREFERRED, PRIORITY_LABEL, QUEUE_LABEL, REQUIRED, UNCONSTRAINED
from webhook.core.objects.paths import Key, lookup
from webhook.core.plan.create import plan_object
from webhook.core.plan.draft import Change, Plan, Rule
from webhook.core.plan.patch import apply_patch, to_json_patch
from webhook.core.platform.policy import TeamPolicyCompiled, TopologyPlacement

__all__ = [
    "FILLED_BY_POLICY",
    "TOKENS",
    "filled_values",
    "marked",
    "marker_path",
    "plan_created",
    "static_templates",
    "topology_fill",
    "topology_template",
]

#: The annotation a generated MutatingAdmissionPolicy writes next to the labels it fills in:
#: a comma-separated list of :data:`TOKENS`.
FILLED_BY_POLICY = "kueue-governor.io/filled-by-policy"
#: What a policy fills: the queue label, the Kueue priority label, the topology annotation.
TOKENS = ("queue", "priority", "topology")


def marker_path(row: WorkloadKind) -> tuple[Key, ...]:
    """Where the marker goes: the annotations next to the kind's labels (a CronJob's
    ``spec.jobTemplate.metadata``, so its Jobs carry it too)."""
    return (*row.labels_at, "annotations", FILLED_BY_POLICY)


def marked(obj: Mapping[str, Any], row: WorkloadKind) -> frozenset[str]:
    """The :data:`TOKENS` the marker of ``obj`` names (empty when there is no marker)."""
    value = lookup(obj, marker_path(row))
    if not isinstance(value, str):
        return frozenset()
    return frozenset(part.strip() for part in value.split(",")) & frozenset(TOKENS)


def static_templates(row: WorkloadKind) -> list[PodSetRule]:
    """The podset rules of ``row`` whose pod template sits at a fixed path (no ``"*"``), as a
    ``PodTemplateSpec`` (not a Spark role), of a whole podset (no pod group), always there (no
    ``only_if``); a row whose pods come from elsewhere (a ``runtime``, ``embedded``) has none."""
    if row.runtime is not None or row.embedded is not None:
        return []
    return [
        rule
        for rule in row.podsets
        if "*" not in rule.template
        and rule.layout == TEMPLATE
        and not rule.partial_if
        and rule.only_if is None
        and rule.leader is None
    ]


def topology_template(row: WorkloadKind) -> PodSetRule | None:
    """The one pod template a policy may put a fixed topology level on: ``row`` must have exactly
    one podset rule, and it must be static (:func:`static_templates`); a single podset cannot be
    part of a podset group Kueue accepts, so the webhook's choice for it depends on the policy and
    the template's own TAS annotations only."""
    templates = static_templates(row)
    if len(row.podsets) != 1 or len(templates) != 1:
        return None
    return templates[0]


def topology_fill(placement: TopologyPlacement | None) -> tuple[str, str] | None:
    """The (annotation, value) a fixed topology mode writes on a podset alone: ``required`` or
    ``preferred`` at the policy's level, or ``unconstrained``; None for mode ``auto`` (chosen from
    the live nodes) and for a rule with slices (they depend on the podset's size)."""
    if placement is None or placement.sliceLevel is not None:
        return None
    if placement.mode == "unconstrained":
        return UNCONSTRAINED, "true"
    if placement.mode in ("required", "preferred") and placement.level is not None:
        return (REQUIRED if placement.mode == "required" else PREFERRED), placement.level
    return None


def filled_values(obj: Mapping[str, Any], row: WorkloadKind, team: TeamPolicyCompiled) -> list[tuple[Key, ...]]:
    """Paths of the values of ``obj`` that its marker names and that equal what the team's policy
    fills in there (a marker on a value the policy would not write is not believed)."""
    tokens = marked(obj, row)
    labels = (*row.labels_at, "labels")
    wanted: list[tuple[tuple[Key, ...], Any]] = []
    for token, label, default in (
        ("queue", QUEUE_LABEL, team.queue.default),
        ("priority", PRIORITY_LABEL, team.kueuePriority.default if team.kueuePriority else None),
    ):
        if token in tokens and default:
            wanted.append(((*labels, label), default))
            if row.pod_labels:
                wanted += [((*rule.template, *TEMPLATE.labels, label), default) for rule in static_templates(row)]
    fill, template = topology_fill(team.topology), topology_template(row)
    if "topology" in tokens and fill is not None and template is not None:
        wanted.append(((*template.template, *TEMPLATE.annotations, fill[0]), fill[1]))
    return [path for path, value in wanted if lookup(obj, path) == value]


def _without(obj: Mapping[str, Any], paths: list[tuple[Key, ...]]) -> dict[str, Any]:
    """A copy of ``obj`` without ``paths``; a map left empty by a removal goes too."""
    out = copy.deepcopy(dict(obj))
    for path in paths:
        for depth in range(len(path), 0, -1):
            parent = lookup(out, path[: depth - 1]) if depth > 1 else out
            if not isinstance(parent, dict):
                break
            parent.pop(str(path[depth - 1]), None)
            if parent or depth == 1:
                break
    return out


def _rule_of(path: tuple[Key, ...]) -> Rule:
    """The rule a filled value belongs to (the marker goes with the queue label)."""
    if path[-1] == PRIORITY_LABEL:
        return "kueuePriority"
    return "topology" if path[-1] in (REQUIRED, PREFERRED, UNCONSTRAINED) else "queue"


def plan_created(
    obj: Mapping[str, Any], row: WorkloadKind, team: TeamPolicyCompiled, inventory: NodeInventory | None = None
) -> Plan:
    """Plan a CREATE whose object may carry values a policy filled in (see the module docstring).

    Without a marker, or with one on no value the policy writes (a user's own marker: left as
    set), this is :func:`webhook.core.plan.create.plan_object`. Otherwise the object is planned
    without the values the marker names (:func:`filled_values`) and without the marker;
    the plan's changes apply to the object as it came, and a filled value the webhook does not set
    itself is removed, so the result equals what the webhook alone makes of the user's object.
    """
    filled = filled_values(obj, row, team) if lookup(obj, marker_path(row)) is not None else []
    if not filled:  # no marker, or one on values the policy does not write: the user's, left as set
        return plan_object(obj, row, team, inventory)
    removed = [*filled, marker_path(row)]
    user = _without(obj, removed)
    plan = plan_object(user, row, team, inventory)
    if plan.skipped or not plan.allowed:
        return plan
    try:
        wanted = apply_patch(user, to_json_patch(plan.changes))
        got = apply_patch(obj, to_json_patch(plan.changes))
        removals: list[Change] = []
        for path in removed:
            for depth in range(1, len(path) + 1):
                prefix = path[:depth]
                if lookup(wanted, prefix) is None and lookup(got, prefix) is not None:
                    if all(r.path != prefix for r in removals):
                        removals.append(Change("remove", prefix, None, _rule_of(path), "filled by an admission policy"))
                    break
        plan.changes = [*plan.changes, *removals]
        if apply_patch(obj, to_json_patch(plan.changes)) != wanted:  # never expected: plan the object as it is
            return plan_object(obj, row, team, inventory)
    except (JsonPatchException, JsonPointerException):  # a patch that does not apply: plan the object as it is
        return plan_object(obj, row, team, inventory)
    return plan
