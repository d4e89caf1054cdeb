"""Who set a field of a stored object: the field managers of its ``metadata.managedFields``.

The API server records a request's fields under its manager (``kubectl-create``, ``kubectl
apply``'s…) before the mutating admission webhooks run (``handlers/create.go``: the field manager
update, then ``Admit``), so a value a webhook added is owned by no manager, and a later
``Update`` only takes ownership of the fields it changed. A governed value owned by a manager was
therefore in a request (the user's, or a controller's); one owned by none was set in admission.

``FieldsV1`` is a tree of ``f:<field>`` (a map's field), ``k:<json>`` (a list item by its key
fields), ``v:<json>`` (a set item) and ``.`` (the map itself); an empty node owns its whole
value (an atomic list or map).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from webhook.core.objects.paths import Key

__all__ = ["managers_of"]


def _item_node(node: Mapping[str, Any], item: Any) -> Any:
    """The node of one list item: by its key fields (``k:``) or its value (``v:``)."""
    for key, child in node.items():
        if key.startswith("k:") and isinstance(item, Mapping):
            try:
                fields = json.loads(key[2:])
            except ValueError:
                continue
            if isinstance(fields, Mapping) and all(item.get(k) == v for k, v in fields.items()):
                return child
        elif key.startswith("v:"):
            try:
                if json.loads(key[2:]) == item:
                    return child
            except ValueError:
                continue
    return None


def _covers(tree: Any, obj: Any, path: tuple[Key, ...]) -> bool:
    """Whether a manager's ``FieldsV1`` tree holds ``path`` of ``obj`` (or an atomic value above it)."""
    node, value = tree, obj
    for key in path:
        if not isinstance(node, Mapping):
            return False
        if not node:
            return True  # an atomic value: owned whole
        if isinstance(key, int):
            item = value[key] if isinstance(value, list) and 0 <= key < len(value) else None
            node = _item_node(node, item)
            value = item
        else:
            node = node.get(f"f:{key}")
            value = value.get(key) if isinstance(value, Mapping) else None
        if node is None:
            return False
    return True


def managers_of(obj: Mapping[str, Any], path: tuple[Key, ...]) -> list[str] | None:
    """The managers owning ``path`` (or part of the value there) in ``obj``; None when the object
    carries no ``managedFields`` (who set what is not recorded)."""
    entries = (obj.get("metadata") or {}).get("managedFields")
    if not isinstance(entries, list) or not entries:
        return None
    out: list[str] = []
    for entry in entries:
        if not isinstance(entry, Mapping) or entry.get("fieldsType") != "FieldsV1":
            continue
        if _covers(entry.get("fieldsV1") or {}, obj, path):
            manager = str(entry.get("manager") or "?")
            if manager not in out:
                out.append(manager)
    return out
