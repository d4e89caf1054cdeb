"""Node affinity rule: the team's ``matchExpressions`` in every podset's required node affinity (SPEC §3).

ANDed into every existing ``nodeSelectorTerm`` (terms are ORed); a new term only when there is
none; no duplicates. A term that is empty (no ``matchExpressions``, no ``matchFields``) matches no
node in Kubernetes and is left so: adding the team's expressions would widen it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from webhook.core.kueue.view import PodSet
from webhook.core.plan.draft import Draft, Plan, Shape, string_map

__all__ = ["normalize", "plan_node_affinity"]


def plan_node_affinity(draft: Draft, podset: PodSet, expressions: list[dict[str, Any]], plan: Plan) -> None:
    """AND ``expressions`` (normalized) into every nodeSelectorTerm (terms are ORed), or add one term.

    A term whose own ``In`` expression on the same key shares no value with the team's can then
    match no node: admitted, with a warning naming the term.
    """
    if not expressions or not podset.present:
        return
    where = f"podset {podset.name!r}"
    affinity_path = podset.at(*podset.rule.layout.affinity)
    required_path = (*affinity_path, "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    terms_path = (*required_path, "nodeSelectorTerms")
    node: dict[str, Any] = string_map(draft, affinity_path)  # each map on the way must be a map
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    for key, key_path in (("nodeAffinity", (*affinity_path, "nodeAffinity")), (required, required_path)):
        found = node.get(key)
        if found is not None and not isinstance(found, dict):
            raise Shape(key_path, found)
        node = found or {}
    terms = node.get("nodeSelectorTerms")
    reason = f"{where}: team node affinity"
    new_term = {"matchExpressions": expressions}
    if terms is None:
        suffix = (*podset.rule.layout.affinity, "nodeAffinity", required, "nodeSelectorTerms")
        draft.set_below(podset.path, suffix, [_own_term(expressions)], "nodeAffinity", reason, copied=True)
        return
    if not isinstance(terms, list):
        raise Shape(terms_path, terms, "array")
    if not terms:
        draft.append(terms_path, new_term, "nodeAffinity", reason)
        return
    for index, term in enumerate(terms):
        term_path = (*terms_path, index)
        if not isinstance(term, dict):
            raise Shape(term_path, term)
        if not term.get("matchExpressions") and not term.get("matchFields"):
            continue  # an empty term matches no node; ANDing ours would widen it to the team's nodes
        existing = term.get("matchExpressions")
        if existing is None:
            draft.set((*term_path, "matchExpressions"), expressions, "nodeAffinity", reason)
            continue
        if not isinstance(existing, list):
            raise Shape((*term_path, "matchExpressions"), existing, "array")
        for expression in expressions:
            warn_disjoint(existing, expression, f"{where}: nodeSelectorTerms[{index}]", plan)
            if not any(normalize(e) == expression for e in existing if isinstance(e, Mapping)):
                draft.append((*term_path, "matchExpressions"), expression, "nodeAffinity", reason)
                existing = draft.get((*term_path, "matchExpressions"))


def _own_term(expressions: list[dict[str, Any]]) -> dict[str, Any]:
    """A new term of its own copy of ``expressions``, the team's prepared expressions
    (:attr:`~webhook.core.platform.prepared.Prepared.affinity`: ``key`` and ``operator`` strings, ``values``
    a list of strings when set): each map and its ``values`` list copied, nothing else to copy."""
    return {"matchExpressions": [{**e, "values": [*e["values"]]} if "values" in e else {**e} for e in expressions]}


def warn_disjoint(existing: list[Any], expression: Mapping[str, Any], where: str, plan: Plan) -> None:
    if expression.get("operator") != "In":
        return
    wanted = set(expression.get("values") or [])
    for own in existing:
        if not isinstance(own, Mapping) or own.get("key") != expression.get("key") or own.get("operator") != "In":
            continue
        values = own.get("values")
        if isinstance(values, list) and not wanted.intersection(v for v in values if isinstance(v, str)):
            message = (
                f"{where} asks for {own.get('key')} in {json.dumps(values)}, but team nodes have "
                f"{json.dumps(sorted(wanted))}: pods of this term can match no node"
            )
            plan.report("warn", "nodeAffinity", message)


def normalize(expression: Mapping[str, Any]) -> dict[str, Any]:
    """Key, operator and values, for comparing a user's expression with the team's; a value of
    the wrong type is kept as is (then it equals nothing of ours)."""
    out: dict[str, Any] = {"key": expression.get("key"), "operator": expression.get("operator")}
    values = expression.get("values")
    if values:
        out["values"] = list(values) if isinstance(values, list) else values
    return out
