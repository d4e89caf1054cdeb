"""Frozen dataclasses built on the request path without their generated ``__init__``.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: for the 13
fields of a :class:`~webhook.core.kueue.view.PodSet` that is several times the cost of filling the
instance's ``__dict__`` at once. :func:`made` does the latter for a frozen dataclass with no
``__post_init__`` and no ``__slots__``, every field given (no default is filled in).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["made"]

_T = TypeVar("_T")

#: Each class's field names, read once.
_FIELDS: dict[type[Any], frozenset[str]] = {}


def made(cls: type[_T], **values: Any) -> _T:
    """An instance of ``cls`` whose fields are ``values``, as ``cls(**values)`` would make it.

    Raises:
        TypeError: ``values`` does not name every field of ``cls`` exactly (a field left out or
            one it does not have).
    """
    names = _FIELDS.get(cls)
    if names is None:
        assert not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__"), cls
        names = _FIELDS[cls] = frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    if values.keys() != names:
        wrong = sorted(names.symmetric_difference(values))
        raise TypeError(f"{cls.__name__} fields {wrong} missing or unknown")
    new: _T = object.__new__(cls)
    new.__dict__.update(values)
    return new
