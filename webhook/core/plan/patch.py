"""Changes → RFC 6902 JSON Patch, with RFC 6901 pointers built by the ``jsonpointer`` library.

Pointer escaping (``~`` → ``~0`` first, then ``/`` → ``~1``) matters here: every Kueue label and
annotation key contains a ``/`` (``kueue.x-k8s.io/queue-name`` → ``kueue.x-k8s.io~1queue-name``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import jsonpatch
from jsonpointer import JsonPointer

from webhook.core.plan.draft import Change

__all__ = ["apply_patch", "pointer", "to_json_patch"]


@lru_cache(maxsize=8192)
def pointer(path: tuple[str | int, ...]) -> str:
    """RFC 6901 pointer for a key path (``("metadata", "labels", "a/b")`` → ``/metadata/labels/a~1b``).

    Cached: the same workload shapes yield the same paths request after request.
    """
    return str(JsonPointer.from_parts([str(part) for part in path]).path)


def to_json_patch(changes: Sequence[Change]) -> list[dict[str, Any]]:
    """RFC 6902 operations, in plan order (each applies to the result of the previous one).

    The values are the plan's own (the planner never shares them with the draft); serialise the
    patch before changing any of them.
    """
    return [
        {"op": c.op, "path": pointer(tuple(c.path))}
        if c.op == "remove"
        else {"op": c.op, "path": pointer(tuple(c.path)), "value": c.value}
        for c in changes
    ]


def apply_patch(obj: Mapping[str, Any], operations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Apply a JSON Patch to a copy of ``obj`` (the original is never modified).

    Raises:
        jsonpatch.JsonPatchException / jsonpointer.JsonPointerException: the patch does not apply.
    """
    result = jsonpatch.JsonPatch([dict(op) for op in operations]).apply(copy.deepcopy(dict(obj)))
    assert isinstance(result, dict)
    return result
