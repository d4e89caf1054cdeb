"""Kubernetes resource quantities (``resource.Quantity``) as exact decimals.

Used for quota and capacity arithmetic (GPUs, CPUs, bytes). The grammar is the one of
``k8s.io/apimachinery/pkg/api/resource`` (``<number><suffix>`` where the suffix is a binary SI
suffix ``Ki Mi Gi Ti Pi Ei``, a decimal SI suffix ``n u m "" k M G T P E`` or a decimal exponent
``e3``/``E3``).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, DecimalException
from functools import lru_cache

__all__ = ["MAX_QUANTITY", "QuantityError", "QuantityOutOfRange", "format_quantity", "parse_quantity"]

#: The largest quantity Kubernetes represents, in base units: 2^63-1 (``maxAllowed`` in
#: k8s.io/apimachinery/pkg/api/resource/quantity.go, whose documentation says "no quantity may
#: represent a number greater than 2^63-1 in magnitude"; amounts are int64-scaled).
MAX_QUANTITY = Decimal(2**63 - 1)

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
# ASCII digits only (``\d`` would also take other scripts' digits) and no surrounding space: Kueue's
# CRDs check quantity strings against the same grammar.
_PATTERN = re.compile(r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))((?:[eE][+-]?[0-9]+)|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?")


class QuantityError(ValueError):
    """Raised for a string that is not a Kubernetes quantity."""


class QuantityOutOfRange(QuantityError):
    """Raised for a quantity beyond :data:`MAX_QUANTITY` in magnitude (``"1e400"``, ``10**400``,
    ``"99999999999Ei"``): Kubernetes cannot represent it."""


def _shown(written: str | int | float) -> str:
    """A refused value as written, cut short: ``'1e400'``, ``1000000000000000000000... (401 characters)``."""
    text = repr(written) if isinstance(written, str) else str(written)
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text)} characters)"


def _out_of_range(written: str | int | float) -> QuantityOutOfRange:
    return QuantityOutOfRange(
        f"{_shown(written)} is out of the range of a Kubernetes quantity "
        f"(at most 2^63-1 = {MAX_QUANTITY} in magnitude, in base units)"
    )


def _within_range(value: Decimal, written: str | int | float) -> Decimal:
    if abs(value) > MAX_QUANTITY:
        raise _out_of_range(written)
    return value


def parse_quantity(value: str | int | float) -> Decimal:
    """Return a quantity as an exact :class:`~decimal.Decimal` in base units.

    ``"8"`` → 8 (GPUs), ``"500m"`` → 0.5 (CPUs), ``"2Ti"`` → 2199023255552 (bytes).

    Raises:
        QuantityError: the value is not a quantity (``"8 GPUs"``, ``"1.5.2"``, ``""``, booleans,
            NaN and infinities).
        QuantityOutOfRange: a quantity beyond 2^63-1 (:data:`MAX_QUANTITY`) in magnitude.
    """
    if isinstance(value, bool):
        # YAML's true/false; without this check they would count as 1 and 0.
        raise QuantityError(f"{str(value).lower()} (a boolean) is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a Kubernetes quantity (a finite number, e.g. 8, 500m, 64Gi)")
        return _within_range(Decimal(str(value)), value)
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)")
    return _parse_text(value)


@lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    """:func:`parse_quantity` of a string; cached, since the same few quantities (``"8"``,
    ``"500m"``, ``"64Gi"``) come in request after request (a Decimal is immutable; a refused
    string is not cached, it raises each time)."""
    match = _PATTERN.fullmatch(value)
    if not match:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        base = Decimal(number)
        if suffix in _BINARY:
            amount = base * _BINARY[suffix]
        elif suffix in _DECIMAL:
            amount = base * _DECIMAL[suffix]
        else:
            amount = base.scaleb(int(suffix[1:]))
    except (DecimalException, ValueError) as exc:  # e.g. an exponent of 10 digits overflows
        raise _out_of_range(value) from exc
    return _within_range(amount, value)


#: Longer plain renderings switch to exponent notation, so a message never carries thousands of digits.
_PLAIN_DIGITS = 24


def format_quantity(value: Decimal) -> str:
    """Render a decimal in base units (``Decimal('16')`` → ``"16"``).

    Plain notation up to 24 characters; beyond that Kubernetes' own exponent form
    (``Decimal('1E+9999')`` → ``"1E+9999"``), so a message quoting a huge request stays short.
    """
    text = format(value.normalize(), "f")
    if len(text) > _PLAIN_DIGITS:
        return format(value.normalize(), "E").replace(".0E", "E")
    return text
