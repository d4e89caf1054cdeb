"""Limits on what a YAML document may make, checked while PyYAML composes and constructs it.

:func:`limited` turns a PyYAML loader class into one that refuses, with :class:`YamlLimitError`
naming the path, line and column:

- nesting of sequences and mappings deeper than :data:`MAX_YAML_DEPTH` levels (PyYAML composes
  recursively, and its scanner slows with each open ``[``: 50,000 nested ``[`` took a second or
  more to end in a RecursionError that said nowhere), flow collections counted as they are
  scanned, so a refusal takes milliseconds;
- an integer of more than 4,000 digits (Python's own conversion limit says "use
  sys.set_int_max_str_digits()", which is no advice for a platform file);
- a mapping that defines one key twice (:class:`DuplicateKeyError`, naming both lines): PyYAML
  keeps the last value silently, so a second ``teams:`` or ``labels:`` would drop the first
  without a word (kubectl refuses such a manifest: "mapping key already defined"); keys merged in
  with ``<<`` may be overridden, as YAML intends.

:func:`no_duplicate_pairs` is the same check for ``json.loads`` (``object_pairs_hook``), and
:func:`locate_duplicate` finds the line of what it refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import yaml

from webhook.core.objects.jsonbody import dotted_path

__all__ = [
    "MAX_YAML_DEPTH",
    "DuplicateKeyError",
    "YamlLimitError",
    "limited",
    "locate_duplicate",
    "no_duplicate_pairs",
    "yaml_error_line",
]

#: Deepest nesting of sequences and mappings, the document itself being level 1. Kubernetes objects
#: are about 20 levels deep and platform files under 10; PyYAML spends two stack frames a level.
MAX_YAML_DEPTH = 200
_DIGITS_LIMIT = 4000


class YamlLimitError(Exception):
    """A document refused by a check of :mod:`webhook.core.platform.yamlload`; the message says which and where."""


class DuplicateKeyError(YamlLimitError):
    """A mapping (a JSON object) that defines one key twice; the message names the key and, read
    as YAML, both lines and the path of the mapping."""


def _where(mark: Any) -> str:
    return f"line {mark.line + 1} column {mark.column + 1}"


def yaml_error_line(error: yaml.YAMLError) -> str:
    """PyYAML's error in one line: what is wrong and where (``expected ',' or ']', but got
    '<stream end>' at line 2 column 1``); PyYAML's own text spans several, with a copy of the line."""
    if not isinstance(error, yaml.MarkedYAMLError):
        return " ".join(str(error).split())
    mark = error.problem_mark or error.context_mark
    what = " ".join(part for part in (error.context, error.problem) if part) or "invalid YAML"
    return f"{' '.join(what.split())} at {_where(mark)}" if mark is not None else " ".join(what.split())


class _Limits:
    """Mixin over a PyYAML loader: counts collection levels and keeps the path as it composes."""

    _yaml_path: list[str | int]

    def compose_node(self, parent: Any, index: Any) -> Any:
        path = self.__dict__.setdefault("_yaml_path", [])
        if parent is not None:
            key = index.value if isinstance(index, yaml.ScalarNode) else index
            path.append(key if isinstance(key, int | str) else "?")
        try:
            if len(path) >= MAX_YAML_DEPTH and self.check_event(  # type: ignore[attr-defined]
                yaml.SequenceStartEvent, yaml.MappingStartEvent
            ):
                mark = self.peek_event().start_mark  # type: ignore[attr-defined]
                within = f" within {dotted_path(path)}" if path else ""
                raise YamlLimitError(f"nested more than {MAX_YAML_DEPTH} levels deep (at {_where(mark)}){within}")
            return super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            if parent is not None:
                path.pop()

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        # The scanner looks up to 1,024 characters ahead, and each open ``[`` or ``{`` costs it a
        # step per later token: stop at the limit before the composer gets there.
        # Open block collections (each an indent) and flow collections: the new one's level minus one.
        if len(self.indents) + self.flow_level >= MAX_YAML_DEPTH:  # type: ignore[attr-defined]
            mark = self.get_mark()  # type: ignore[attr-defined]
            raise YamlLimitError(f"nested more than {MAX_YAML_DEPTH} levels deep (at {_where(mark)})")
        super().fetch_flow_collection_start(token_class)  # type: ignore[misc]

    def construct_document(self, node: Any) -> Any:
        self.__dict__["_yaml_root"] = node  # to name a mapping's path, only when one is refused
        return super().construct_document(node)  # type: ignore[misc]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue  # merged keys may be overridden; a non-scalar key is refused later
                key = _json_key(self.construct_object(key_node))  # type: ignore[attr-defined]
                first = seen.get(key)
                if first is None:
                    seen[key] = key_node.start_mark
                else:
                    path = _path_to(self.__dict__.get("_yaml_root"), node)
                    within = f" within {dotted_path(path)}" if path else ""
                    again = f"at {_where(key_node.start_mark)} (first at {_where(first)})"
                    if first is key_node.start_mark:  # an alias is its anchor's node: one mark
                        again = f"(again as an alias of the key at {_where(first)})"
                    raise DuplicateKeyError(f"duplicate mapping key {_shown(key)} {again}{within}")
        return super().construct_mapping(node, deep)  # type: ignore[misc]


def _json_key(key: Any) -> Any:
    """The key as JSON will name it (YAML ``1`` and ``"1"`` are one JSON key); itself if no scalar."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(key)
    try:
        hash(key)
    except TypeError:
        return object()  # never equal: PyYAML refuses an unhashable key itself
    return key


def _shown(key: Any) -> str:
    text = json.dumps(key if isinstance(key, str) else str(key), ensure_ascii=False)
    return text if len(text) <= 100 else f'{text[:80]}…"'


def _path_to(root: Any, target: yaml.Node) -> list[str | int]:
    """The path from ``root`` to the node ``target`` (depth first; each node visited once, as
    aliases may repeat or contain their own anchor)."""
    stack: list[tuple[Any, list[str | int]]] = [(root, [])]
    visited: set[int] = set()
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.extend(_children(node, path))
    return []


def _children(node: Any, path: list[str | int]) -> Iterator[tuple[Any, list[str | int]]]:
    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield item, [*path, index]
    elif isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
            yield value_node, [*path, key]


def no_duplicate_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An ``object_pairs_hook`` for ``json.loads``: the object as a dict, unless a key is repeated.

    Raises:
        DuplicateKeyError: naming the key only (JSON's decoder gives no position: see
            :func:`locate_duplicate`).
    """
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(f"duplicate key {_shown(key)}")
            seen.add(key)
    return data


def locate_duplicate(text: str, error: DuplicateKeyError) -> DuplicateKeyError:
    """``error`` (from :func:`no_duplicate_pairs`) with its line, column and path: ``text`` read by
    the YAML loader, which reads JSON; ``error`` itself if that loader reads ``text`` otherwise."""
    try:
        for _ in yaml.load_all(text, Loader=_LOCATOR):
            pass
    except DuplicateKeyError as located:
        return located
    except (yaml.YAMLError, YamlLimitError, ValueError, RecursionError):
        pass
    return error


def _integer(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    digits = sum(char.isdigit() for char in node.value)
    if digits > _DIGITS_LIMIT:
        raise YamlLimitError(
            f"an integer of {digits} digits (at {_where(node.start_mark)}) is too long to be a Kubernetes value"
        )
    return loader.construct_yaml_int(node)


def limited(loader: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    """A subclass of ``loader`` with the limits above (its other behaviour unchanged)."""
    cls: type[yaml.SafeLoader] = type(f"Limited{loader.__name__}", (_Limits, loader), {})
    cls.add_constructor("tag:yaml.org,2002:int", _integer)
    return cls


_LOCATOR = limited(yaml.SafeLoader)
