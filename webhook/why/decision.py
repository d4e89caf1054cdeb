"""What our webhook decided for a stored workload, and why: the rule, its value and its reason.

The stored object no longer shows how it was submitted, so the policy is asked again: the object
with the values our rules set taken out (the ``kueue.x-k8s.io/queue-name`` and
``kueue.x-k8s.io/priority-class`` labels, the ``kueue.x-k8s.io/podset-*`` TAS annotations) is
reviewed as a CREATE, exactly as ``kgov mutate --explain`` does (:func:`webhook.core.review.review`,
the live nodes as inventory for ``topology: auto``). Each change the policy would make is set
next to the stored value at its path: the same value means our rule decided it (its reason
given); another value was the user's or an earlier policy's, and both are shown.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.admission import MalformedReview
from webhook.core.inventory import NodeInventory
from webhook.core.kinds import find_kind
from webhook.core.resolve import TeamIndex
from webhook.core.review import review

__all__ = ["Decision", "RuleDecision", "decide"]

_GOVERNED_LABELS = ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class")
_GOVERNED_ANNOTATION_PREFIX = "kueue.x-k8s.io/podset-"
_DROPPED_METADATA = ("resourceVersion", "uid", "generation", "creationTimestamp", "managedFields", "selfLink")


@dataclass
class RuleDecision:
    """One rule's outcome: ``path`` (``/``-joined), the value stored now, the value the policy
    gives, ``by`` = ``policy`` (they agree) or ``other`` (the stored one came from elsewhere)."""

    rule: str
    path: str
    stored: Any
    policy: Any
    by: str
    reason: str


@dataclass
class Decision:
    """The team owning the namespace (or why none does) and each rule's decision."""

    team: str | None
    team_reason: str
    rules: list[RuleDecision] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    denials: list[str] = field(default_factory=list)
    skipped: str = ""


def _strip(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if key == "labels" and k in _GOVERNED_LABELS:
                continue
            if key == "annotations" and str(k).startswith(_GOVERNED_ANNOTATION_PREFIX):
                continue
            out[k] = _strip(v, str(k))
        return out
    if isinstance(value, list):
        return [_strip(item) for item in value]
    return value


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        in_map = isinstance(obj, Mapping) and key in obj
        if in_map or (isinstance(obj, list) and isinstance(key, int) and 0 <= key < len(obj)):
            obj = obj[key]
        else:
            return None
    return obj


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
    submitted = _strip(copy.deepcopy(dict(obj)))
    submitted.pop("status", None)
    submitted["metadata"] = {k: v for k, v in submitted.get("metadata", {}).items() if k not in _DROPPED_METADATA}
    api_version = str(obj.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    row = find_kind(api_version, str(obj.get("kind", "")))
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": str(obj.get("kind", ""))},
            "resource": {"group": group, "version": version, "resource": row.resource if row else ""},
            "operation": "CREATE",
            "namespace": namespace,
            "name": str(metadata.get("name", "")),
            "object": submitted,
            "dryRun": True,
        },
    }
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
        stored = _at(obj, change.path)
        decision.rules.append(
            RuleDecision(
                rule=change.rule,
                path="/".join(str(p) for p in change.path),
                stored=stored,
                policy=change.value,
                by="policy" if _agrees(stored, change.value) else "other",
                reason=change.reason,
            )
        )
    return decision
