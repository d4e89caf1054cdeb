"""The defaults the API server writes into a custom resource before any webhook sees it.

A CRD's OpenAPI schema gives fields ``default:`` values, and the API server fills them in when it
decodes a request, before admission: the governor's webhook sees a RayJob whose ``submissionMode``
is ``K8sJobMode`` (a ``submitter`` podset) and whose worker groups without ``replicas`` have 0,
whatever the manifest says. ``kgov mutate`` and ``kgov review`` have no API server, so they apply
the same defaults (:func:`with_crd_defaults`) before planning: offline and live plan the same
object (SPEC §4).

The defaults are data, ``crd_defaults.json`` next to this module, generated from the CRD files of
the Go modules Kueue v0.19.2 is built with (``python -m e2e.crd_defaults``; ``make
crd-defaults-check`` fails when they drift), so an installed ``kgov`` needs neither Go nor the
CRDs. Kept there: the defaults outside pod specs and ``status`` of each kind the governor governs.

Kubernetes' structural defaulting (``apiextensions-apiserver/pkg/apiserver/schema/defaulting``):
a default is applied where the field is absent (or null and not ``nullable``: pruned, then
defaulted) and its parent object exists; ``"*"`` stands for every list item and map value.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["DATA_PATH", "crd_defaults", "default_review", "with_crd_defaults"]

#: The generated data file (``python -m e2e.crd_defaults``).
DATA_PATH = Path(__file__).with_name("crd_defaults.json")


@cache
def crd_defaults() -> Mapping[str, tuple[tuple[tuple[str, ...], Any, bool], ...]]:
    """``"group/version/Kind"`` → ((path, default, nullable), …), shallow paths first."""
    data = json.loads(DATA_PATH.read_text())
    return {
        name: tuple((tuple(d["path"]), d["default"], bool(d.get("nullable"))) for d in entries)
        for name, entries in data["kinds"].items()
    }


def _fill(node: Any, path: tuple[str, ...], value: Any, nullable: bool) -> None:
    key, rest = path[0], path[1:]
    if key == "*":
        children = node if isinstance(node, list) else list(node.values()) if isinstance(node, dict) else []
        for item in children:
            if rest:
                _fill(item, rest, value, nullable)
        return
    if not isinstance(node, dict):
        return
    if rest:
        _fill(node.get(key), rest, value, nullable)
    elif key not in node or (node[key] is None and not nullable):
        node[key] = copy.deepcopy(value)


def with_crd_defaults(obj: Any) -> Any:
    """``obj`` (a Kubernetes object as JSON) with the CRD defaults of its kind filled in: a new
    object when its kind has defaults (``obj`` is not changed), else ``obj`` itself (a built-in
    kind, an unknown kind, anything that is no object)."""
    if not isinstance(obj, dict):
        return obj
    defaults = crd_defaults().get(f"{obj.get('apiVersion')}/{obj.get('kind')}")
    if not defaults:
        return obj
    out = copy.deepcopy(obj)
    for path, value, nullable in defaults:
        _fill(out, path, value, nullable)
    return out


def default_review(body: Any) -> Any:
    """An AdmissionReview (JSON) whose ``request.object`` and ``request.oldObject`` have their CRD
    defaults, as the API server sends them; ``body`` itself when there is nothing to fill (a body
    of another shape is left for the review to refuse)."""
    request = body.get("request") if isinstance(body, dict) else None
    if not isinstance(request, dict):
        return body
    filled = {key: with_crd_defaults(request.get(key)) for key in ("object", "oldObject") if key in request}
    if all(filled[key] is request.get(key) for key in filled):
        return body
    return {**body, "request": {**request, **filled}}
