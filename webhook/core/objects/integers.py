"""Integers written as decimal text (annotations, label values, JSON numbers kept as text).

Python refuses ``int(text)`` of more than 4,300 digits (``ValueError``, CPython's guard against
quadratic conversion), so a hostile annotation could turn a check into a crash. Every such text is
read here, where the digits beyond int64 are never converted: Go's ``strconv.ParseInt`` (which
Kueue and Kubernetes use) refuses them as out of range anyway.
"""

from __future__ import annotations

import re

__all__ = ["INT64_DIGITS", "decimal_int"]

#: Significant digits of the largest int64 (9223372036854775807).
INT64_DIGITS = 19
_DECIMAL = re.compile(r"([+-]?)0*([0-9]+)")


def decimal_int(text: str, signs: str = "+-") -> int | None:
    """The integer ``text`` spells: decimal ASCII digits, leading zeros allowed, after an optional
    sign among ``signs`` (as ``strconv.ParseInt`` reads base 10); None when it is not such a text or
    has more than :data:`INT64_DIGITS` significant digits (no int64 holds it). Callers check their
    own range (int32, positive …)."""
    found = _DECIMAL.fullmatch(text) if text.isascii() else None
    if found is None or (found.group(1) and found.group(1) not in signs):
        return None
    digits = found.group(2).lstrip("0") or "0"
    if len(digits) > INT64_DIGITS:
        return None
    return -int(digits) if found.group(1) == "-" else int(digits)
