"""What our webhook decided for a stored workload, and why: the rule, its value and its reason.

The stored object no longer shows how it was submitted. Who set each governed value is read from
its ``managedFields`` (:mod:`webhook.why.provenance`): the ``kueue.x-k8s.io/queue-name`` and
``kueue.x-k8s.io/priority-class`` labels, the ``kueue.x-k8s.io/podset-*`` TAS annotations, each
podset's ``priorityClassName`` and required node affinity. A value no field manager owns was set in
admission, so it is taken out; a value a manager owns was in a request (the user's) and stays.
The policy is then asked again: that object is reviewed as a CREATE, exactly as ``kgov mutate
--explain`` does (:func:`webhook.core.admission.review.review`, the live nodes as inventory for ``topology:
auto``). Each change the policy makes is set next to the stored value at its path: the same value
set in admission is ``policy``; another value is ``other`` (another webhook, or an earlier
policy). Each value the user set is ``user``, allowed by the policy or with the policy's warning
or denial. Without ``managedFields`` (a recorded object stripped of them) the labels and
annotations are taken out as if set in admission, and a value the policy would give is
``unrecorded``: the policy's value, set by it or by the user; ``priorityClassName`` and node
affinity are kept, ``unrecorded`` too, with what the policy says of them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.admission.envelope import MalformedReview, create_review
from webhook.core.admission.review import review
from webhook.core.kueue.inventory import NodeInventory
from webhook.core.kueue.kinds import WorkloadKind, find_kind
from webhook.core.kueue.view import PRIORITY_LABEL, QUEUE_LABEL, kueue_view
from webhook.core.objects.paths import Key, lookup
from webhook.core.plan.draft import Plan
from webhook.core.plan.rules.queue import labels_path
from webhook.core.plan.widen_history import read_history
from webhook.core.platform.policy import TeamPolicyCompiled
from webhook.core.platform.resolve import TeamIndex
from webhook.why.provenance import managers_of

__all__ = ["Decision", "RuleDecision", "decide", "widenings"]

_GOVERNED_LABELS = {QUEUE_LABEL: "queue", PRIORITY_LABEL: "kueuePriority"}
_RULE_ORDER = ("queue", "kueuePriority", "podPriority", "nodeAffinity", "topology")
_GOVERNED_ANNOTATION_PREFIX = "kueue.x-k8s.io/podset-"
_DROPPED_METADATA = ("resourceVersion", "uid", "generation", "creationTimestamp", "managedFields", "selfLink")


@dataclass
class RuleDecision:
    """One rule's outcome: ``path`` (``/``-joined), the value stored now, the value the policy
    gives (None for a value the user set and the policy keeps), ``by`` = ``policy`` (set in
    admission, the policy's value), ``user`` (in a request: ``set_by`` names its field
    managers), ``other`` (set in admission, not the policy's value) or ``unrecorded`` (no
    ``managedFields`` say who set it: the policy's value, or with ``policy`` None a value kept);
    ``reason``: the policy's reason, or for a kept value what the policy says of it."""

    rule: str
    path: str
    stored: Any
    policy: Any
    by: str
    reason: str
    set_by: list[str] = field(default_factory=list)


@dataclass
class Decision:
    """The team owning the namespace (or why none does) and each rule's decision."""

    team: str | None
    team_reason: str
    rules: list[RuleDecision] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    denials: list[str] = field(default_factory=list)
    skipped: str = ""


def _governed(obj: Mapping[str, Any], row: WorkloadKind | None) -> list[tuple[str, tuple[Key, ...]]]:
    """(rule, path) of each governed value the object holds (see the module docstring)."""
    out: list[tuple[str, tuple[Key, ...]]] = []

    def walk(value: Any, path: tuple[Key, ...]) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                if path and path[-1] == "labels" and key in _GOVERNED_LABELS:
                    if row is not None and path == labels_path(row):
                        out.append((_GOVERNED_LABELS[key], (*path, key)))
                    else:  # a podset's own copy (pods Kueue admits one by one): the policy's too
                        out.append((f"{_GOVERNED_LABELS[key]} (podset)", (*path, key)))
                elif path and path[-1] == "annotations" and str(key).startswith(_GOVERNED_ANNOTATION_PREFIX):
                    out.append(("topology", (*path, key)))
                else:
                    walk(item, (*path, key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, (*path, index))

    walk(obj.get("metadata"), ("metadata",))
    walk(obj.get("spec"), ("spec",))
    if row is not None:
        for podset in kueue_view(obj, row).podsets:
            layout = podset.rule.layout
            required = (*layout.affinity, "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
            for rule, suffix in (("podPriority", layout.priority), ("nodeAffinity", required)):
                path = podset.at(*suffix)
                if lookup(obj, path) is not None:
                    out.append((rule, path))
    return out


def _drop(obj: dict[str, Any], path: tuple[Key, ...]) -> None:
    parent = lookup(obj, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1], None)


def _agrees(stored: Any, wanted: Any) -> bool:
    """The stored value holds what the policy wants (maps: every wanted key, recursively)."""
    if isinstance(wanted, Mapping):
        return isinstance(stored, Mapping) and all(k in stored and _agrees(stored[k], v) for k, v in wanted.items())
    if isinstance(wanted, list) and isinstance(stored, list):
        return all(any(_agrees(s, w) for s in stored) for w in wanted)
    return bool(stored == wanted)


def decide(
    obj: Mapping[str, Any],
    teams: TeamIndex,
    namespace_labels: Mapping[str, str] | None,
    nodes: list[dict[str, Any]],
) -> Decision:
    """Ask the policy about a stored workload object (see the module docstring)."""
    metadata = dict(obj.get("metadata") or {})
    namespace = str(metadata.get("namespace", ""))
    api_version = str(obj.get("apiVersion", ""))
    row = find_kind(api_version, str(obj.get("kind", "")))
    submitted = copy.deepcopy(dict(obj))
    submitted.pop("status", None)
    users: list[tuple[str, tuple[Key, ...], list[str]]] = []
    recorded = managers_of(obj, ("metadata",)) is not None
    for rule, path in _governed(obj, row):
        managers = managers_of(obj, path)
        if managers or not (recorded or rule not in ("podPriority", "nodeAffinity")):
            users.append((rule, path, managers or []))  # no managers: kept, who set it unknown
        else:
            _drop(submitted, path)
    submitted["metadata"] = {k: v for k, v in submitted.get("metadata", {}).items() if k not in _DROPPED_METADATA}
    body = create_review(submitted, namespace)
    try:
        outcome = review(body, teams, lambda _: namespace_labels, NodeInventory.from_objects(nodes))
    except MalformedReview as exc:
        return Decision(team=None, team_reason=f"the policy cannot read this object: {exc}")
    team = outcome.resolution.team
    decision = Decision(
        team=team.team if team else None,
        team_reason=outcome.resolution.reason,
        warnings=list(outcome.plan.warnings),
        denials=list(outcome.plan.denials),
        skipped=outcome.plan.skipped,
    )
    for change in outcome.plan.changes:
        if change.rule == "suspend":
            continue
        stored = lookup(obj, change.path)
        agrees = _agrees(stored, change.value)
        owners = managers_of(obj, change.path) if agrees else None
        by = "other" if not agrees else ("user" if owners else "policy" if recorded else "unrecorded")
        decision.rules.append(
            RuleDecision(
                rule=change.rule,
                path="/".join(str(p) for p in change.path),
                stored=stored,
                policy=change.value,
                by=by,
                reason=change.reason,
                set_by=owners or [],
            )
        )
    if team is not None:
        for rule, path, managers in users:
            if _applies(rule, team):
                decision.rules.append(_user_value(rule, path, managers, obj, outcome.plan))
    decision.rules.sort(key=lambda r: _RULE_ORDER.index(r.rule) if r.rule in _RULE_ORDER else len(_RULE_ORDER))
    return decision


def _applies(rule: str, team: TeamPolicyCompiled) -> bool:
    """Whether the team has the rule that governs a value (the queue rule always)."""
    base = rule.removesuffix(" (podset)")
    if base == "podPriority":
        return team.podPriority is not None or team.kueuePriority is not None
    if base == "nodeAffinity":
        return bool(team.nodeAffinity)
    return base == "queue" or getattr(team, base, None) is not None


def _user_value(
    rule: str, path: tuple[Key, ...], managers: list[str], obj: Mapping[str, Any], plan: Plan
) -> RuleDecision:
    """A governed value a request set (``managers``; none: an object without ``managedFields``
    whose value was kept): what the policy says of it (its warnings and denials for the rule)."""
    base = rule.removesuffix(" (podset)")
    said = [m.removeprefix(f"{base}: ") for m in plan.denials if m.startswith(f"{base}: ")]
    warned = [m.removeprefix(f"{base}: ") for m in plan.warnings if m.startswith(f"{base}: ")]
    if said:
        reason = "the policy would deny it now: " + "; ".join(said)
    elif warned:
        reason = "allowed by the policy, with a warning: " + "; ".join(warned)
    else:
        reason = "allowed by the policy"
    return RuleDecision(
        rule=base,
        path="/".join(str(p) for p in path),
        stored=lookup(obj, path),
        policy=None,
        by="user" if managers else "unrecorded",
        reason=reason,
        set_by=managers,
    )


def widenings(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The governor's topology widenings recorded on ``obj``, oldest first, as its history
    annotation holds them (:mod:`webhook.core.plan.widen_history`); [] when there is none, or when
    the annotation is not one the governor wrote."""
    row = find_kind(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
    history = read_history(obj, row) if row is not None else None
    return [step.as_json() for step in history or []]
