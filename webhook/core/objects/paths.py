"""Key paths into JSON objects: reading one value, expanding and binding ``"*"`` patterns.

Counts and quantities are read (and checked) by :mod:`webhook.core.kueue.wellformed`.

A path is a tuple of keys (map keys and list indexes). A *pattern* may hold ``"*"``, which stands
for every item of a list or every value of a map, in document order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["Key", "PathPattern", "bound", "child", "dotted", "expand", "field_path", "lookup", "parse_dotted"]

Key = str | int
PathPattern = tuple[str, ...]


def field_path(loc: tuple[int | str, ...] | list[int | str], prefix: str = "") -> str:
    """A validation error's location as a reader writes it: ``teams[0].name``.

    ``loc`` is pydantic's ``ErrorDetails["loc"]`` (map keys and list indexes); its ``"[key]"``
    marker (the key of a mapping, which precedes it) is dropped. ``prefix`` (a file name, say) leads
    the path; an empty location gives ``prefix`` alone (``""`` when both are empty).
    """
    path = tuple(part for part in loc if part != "[key]")
    if not path:
        return prefix
    text = dotted(path)
    return text if not prefix else prefix + (text if text.startswith("[") else f".{text}")


def child(node: Any, key: Key) -> Any:
    """``node[key]`` for a map key or an in-range list index; None when absent."""
    kind = type(node)
    if kind is dict:  # exact types first: the abc check is slow, and decoded JSON has no others
        return node.get(key)
    if kind is list or isinstance(node, list):
        return node[key] if isinstance(key, int) and 0 <= key < len(node) else None
    if isinstance(node, Mapping):
        return node.get(key)
    return None


def lookup(node: Any, path: tuple[Key, ...]) -> Any:
    """The value at ``path`` (no wildcards), or None when any step is absent."""
    for key in path:
        node = node.get(key) if type(node) is dict else child(node, key)
        if node is None:
            return None
    return node


def expand(
    node: Any, pattern: PathPattern, prefix: tuple[Key, ...] = ()
) -> Iterator[tuple[tuple[Key, ...], tuple[Key, ...], Any]]:
    """Yield (concrete path, wildcard bindings, value) for each match of ``pattern`` in ``node``."""
    if not pattern:
        yield prefix, (), node
        return
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        items: list[tuple[Key, Any]]
        if isinstance(node, list):
            items = list(enumerate(node))
        elif isinstance(node, Mapping):
            items = list(node.items())
        else:
            return
        for key, item in items:
            for path, bindings, value in expand(item, rest, (*prefix, key)):
                yield path, (key, *bindings), value
    elif isinstance(node, Mapping) and head in node:
        yield from expand(node[head], rest, (*prefix, head))


def bound(pattern: PathPattern, bindings: tuple[Key, ...]) -> tuple[Key, ...]:
    """``pattern`` with its wildcards replaced, in order, by ``bindings`` (a concrete path)."""
    if not bindings:
        return pattern
    key = (pattern, bindings)
    found = _BOUND.get(key)
    if found is None:
        keys = iter(bindings)
        found = tuple([next(keys) if head == "*" else head for head in pattern])
        if len(_BOUND) >= _BOUND_MAX:
            _BOUND.clear()
        _BOUND[key] = found
    return found


#: (pattern, bindings) → the bound path: the same few (a count's path with each podset's index)
#: come in request after request. Cleared when full.
_BOUND: dict[tuple[PathPattern, tuple[Key, ...]], tuple[Key, ...]] = {}
_BOUND_MAX = 4096


def dotted(path: tuple[Key, ...]) -> str:
    """``spec.template.spec.containers[0]`` for a key path (``<object>`` for the root)."""
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out or "<object>"


def parse_dotted(text: str) -> tuple[Key, ...]:
    """The key path of a :func:`dotted` text (an AppWrapper's ``podSets[].path``):
    ``template.spec.replicatedJobs[0].template`` → ``("template", "spec", "replicatedJobs", 0, "template")``."""
    out: list[Key] = []
    for part in text.split("."):
        name, _, rest = part.partition("[")
        if name:
            out.append(name)
        while rest:
            index, _, rest = rest.partition("]")
            out.append(int(index) if index.isdigit() else index)
            rest = rest.lstrip("[")
    return tuple(out)
