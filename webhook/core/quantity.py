"""Kubernetes resource quantities (``resource.Quantity``) as exact decimals.

Used for quota and capacity arithmetic (GPUs, CPUs, bytes). The grammar is the one of
``k8s.io/apimachinery/pkg/api/resource`` (``<number><suffix>`` where the suffix is a binary SI
suffix ``Ki Mi Gi Ti Pi Ei``, a decimal SI suffix ``n u m "" k M G T P E`` or a decimal exponent
``e3``/``E3``).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["QuantityError", "format_quantity", "parse_quantity"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_PATTERN = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))((?:[eE][+-]?\d+)|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")


class QuantityError(ValueError):
    """Raised for a string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Return a quantity as an exact :class:`~decimal.Decimal` in base units.

    ``"8"`` → 8 (GPUs), ``"500m"`` → 0.5 (CPUs), ``"2Ti"`` → 2199023255552 (bytes).

    Raises:
        QuantityError: the value is not a quantity (``"8 GPUs"``, ``"1.5.2"``, ``""``, booleans).
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _PATTERN.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        base = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the pattern already guards this
        raise QuantityError(f"{value!r} is not a Kubernetes quantity") from exc
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix in _DECIMAL:
        return base * _DECIMAL[suffix]
    return base * (Decimal(10) ** int(suffix[1:]))


def format_quantity(value: Decimal) -> str:
    """Render a decimal in base units without exponent notation (``Decimal('16')`` → ``"16"``)."""
    text = format(value.normalize(), "f")
    return text
