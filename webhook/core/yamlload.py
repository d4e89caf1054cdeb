"""Limits on what a YAML document may make, checked while PyYAML composes it.

:func:`limited` turns a PyYAML loader class into one that refuses, with :class:`YamlLimitError`
naming the path, line and column:

- nesting of sequences and mappings deeper than :data:`MAX_YAML_DEPTH` levels (PyYAML composes
  recursively, and its scanner slows with each open ``[``: 50,000 nested ``[`` took a second or
  more to end in a RecursionError that said nowhere), flow collections counted as they are
  scanned, so a refusal takes milliseconds;
- an integer of more than 4,000 digits (Python's own conversion limit says "use
  sys.set_int_max_str_digits()", which is no advice for a platform file).
"""

from __future__ import annotations

from typing import Any

import yaml

from webhook.core.jsonbody import dotted_path

__all__ = ["MAX_YAML_DEPTH", "YamlLimitError", "limited"]

#: Deepest nesting of sequences and mappings, the document itself being level 1. Kubernetes objects
#: are about 20 levels deep and platform files under 10; PyYAML spends two stack frames a level.
MAX_YAML_DEPTH = 200
_DIGITS_LIMIT = 4000


class YamlLimitError(Exception):
    """A document over a limit of :mod:`webhook.core.yamlload`; the message says which and where."""


def _where(mark: Any) -> str:
    return f"line {mark.line + 1} column {mark.column + 1}"


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
