"""Whether a node takes a pod, as the Kubernetes scheduler reads a taint and a node affinity term.

Pure predicates on the JSON of Node and Pod fields: a toleration against a taint
(``corev1.Toleration.ToleratesTaint``), a ``nodeSelectorTerm`` against a node's name and labels
(``component-helpers/scheduling/corev1/nodeaffinity``). Kueue's TAS filters nodes with the same
helpers, so :mod:`webhook.core.kueue.inventory` counts nodes with these, and ``kgov why`` and
``kgov topology`` name exclusions with them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["json_map", "json_maps", "taint_string", "term_matches", "tolerates"]


def json_map(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else ``{}`` (a field of another type reads as absent)."""
    return value if isinstance(value, Mapping) else {}


def json_maps(value: Any) -> list[Mapping[str, Any]]:
    """The JSON objects of ``value`` when it is a list, else ``[]``."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def taint_string(taint: Mapping[str, Any]) -> str:
    """``key=value:Effect`` (``key:Effect`` without a value), as ``corev1.Taint.ToString``."""
    value = taint.get("value") or ""
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Kubernetes ``Toleration.ToleratesTaint`` for any of ``tolerations``."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if key and key != taint.get("key"):
            continue
        if not key and operator != "Exists":
            continue
        if operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _requirement_matches(requirement: Mapping[str, Any], value: str | None) -> bool:
    operator = requirement.get("operator")
    listed = requirement.get("values")  # any JSON value: only a list's strings are values
    values = [v for v in listed if isinstance(v, str)] if isinstance(listed, list) else []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            mine, theirs = int(value), int(values[0])
        except ValueError:
            return False
        return mine > theirs if operator == "Gt" else mine < theirs
    return False


def term_matches(term: Any, name: str, labels: Mapping[str, str]) -> bool:
    """A ``nodeSelectorTerm`` matches a node: every expression and field holds; an empty term
    (no ``matchExpressions`` and no ``matchFields``) matches no node, as in Kubernetes."""
    selector = json_map(term)
    expressions, fields = json_maps(selector.get("matchExpressions")), json_maps(selector.get("matchFields"))
    if not expressions and not fields:
        return False
    if not all(_requirement_matches(e, labels.get(str(e.get("key")))) for e in expressions):
        return False
    return all(f.get("key") == "metadata.name" and _requirement_matches(f, name) for f in fields)
