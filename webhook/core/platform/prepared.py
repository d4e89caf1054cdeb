"""What the rules read from a team's policy on every request, computed once per policy.

A :class:`~webhook.core.platform.policy.TeamPolicyCompiled` is a frozen pydantic model; turning its parts
into the plain values the rules compare and copy into patches (node affinity expressions as
dicts, the PriorityClasses a pod may take, the quota ceilings as decimals) costs pydantic calls
and parsing that would otherwise be repeated for every podset of every request. :func:`prepared`
computes them once per team object (:class:`~webhook.core.platform.resolve.TeamIndex` does it when a
policy is loaded) and hands the same :class:`Prepared` back afterwards.

The cache is keyed by the team object itself (its identity, held through a weak reference), not
by its contents: a copy of a team (``model_copy(update=...)``) is a new object and is prepared
anew, and an entry goes when its team does.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from webhook.core.objects.quantity import parse_quantity
from webhook.core.platform.policy import TeamPolicyCompiled, ValueRule

__all__ = ["Prepared", "narrowed", "prepared"]


@dataclass(frozen=True)
class Prepared:
    """One team's per-request values.

    ``affinity``: ``nodeAffinity`` as ``{"key", "operator", "values"}`` dicts (``values`` left out
    when empty), the form the node-affinity rule writes and compares. ``affinity_exact``: the same
    expressions as pydantic dumps them without None fields (``values`` always present), the
    form ANDed into a pod's terms when sizing it against nodes. ``affinity_full``: as dumped with
    every field (the UPDATE planner's comparison). Never modify these: the rules copy what they
    write (:class:`~webhook.core.plan.draft.Draft`).
    ``pod_rules``: ``id`` of the team's ``podPriority`` / ``kueuePriority`` rule → that rule
    narrowed to the PriorityClasses the platform generates (:func:`narrowed`).
    ``quota_limits``: ``quotaLimits`` parsed, resource → base units, in the policy's order.
    """

    affinity: list[dict[str, Any]]
    affinity_exact: list[dict[str, Any]]
    affinity_full: list[dict[str, Any]]
    pod_rules: dict[int, ValueRule]
    quota_limits: dict[str, Decimal]


def narrowed(rule: ValueRule, team: TeamPolicyCompiled) -> ValueRule:
    """``rule`` with its allowed values narrowed to the PriorityClasses the platform generates
    (``rule`` itself when the policy does not say which those are, or allows anything)."""
    if rule.allowed is None or team.priorityClasses is None:
        return rule
    generated = set(team.priorityClasses)
    return rule.model_copy(update={"allowed": [name for name in rule.allowed if name in generated]})


def _normalized(expression: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"key": expression.get("key"), "operator": expression.get("operator")}
    if expression.get("values"):
        out["values"] = list(expression["values"])
    return out


def _prepare(team: TeamPolicyCompiled) -> Prepared:
    full = [e.model_dump() for e in team.nodeAffinity]
    rules = [rule for rule in (team.podPriority, team.kueuePriority) if rule is not None]
    return Prepared(
        affinity=[_normalized(e) for e in full],
        affinity_exact=[e.model_dump(exclude_none=True) for e in team.nodeAffinity],
        affinity_full=full,
        pod_rules={id(rule): narrowed(rule, team) for rule in rules},
        quota_limits={name: parse_quantity(text) for name, text in team.quotaLimits.items()},
    )


_CACHE: dict[int, tuple[weakref.ref[TeamPolicyCompiled], Prepared]] = {}


def _forget(key: int, ref: weakref.ref[TeamPolicyCompiled]) -> None:
    entry = _CACHE.get(key)
    if entry is not None and entry[0] is ref:
        del _CACHE[key]


def prepared(team: TeamPolicyCompiled) -> Prepared:
    """The :class:`Prepared` values of ``team``, computed on first use and kept while it lives."""
    key = id(team)
    entry = _CACHE.get(key)
    if entry is not None and entry[0]() is team:
        return entry[1]
    value = _prepare(team)
    _CACHE[key] = (weakref.ref(team, lambda ref: _forget(key, ref)), value)
    return value
