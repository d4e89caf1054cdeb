"""The platform file's value types and their checks (SPEC §2): Kubernetes names, label keys and
values, quantities, and the values of label- and node-selector requirements.

Each check raises ValueError with the reason, which pydantic reports at the field's path; the
``*_error`` functions return that reason (or None) for callers outside pydantic, such as the CLI
checking names typed on the command line. The rules are Kubernetes' own (apimachinery's
``IsDNS1123Label``, ``IsDNS1123Subdomain``, ``IsQualifiedName``, ``IsValidLabelValue``; core/v1
NodeSelectorRequirement and meta/v1 LabelSelectorRequirement validation).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
)

from webhook.core.objects.integers import decimal_int
from webhook.core.objects.quantity import QuantityError, parse_quantity

API_VERSION = "kueue-governor.io/v1alpha1"
HOSTNAME_LABEL = "kubernetes.io/hostname"

# Used with fullmatch: "$" would also accept a trailing newline ("alpha\n"), which the API server refuses.
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _matching(value: str, pattern: re.Pattern[str], most: int, what: str) -> str:
    """``value`` when ``pattern`` matches all of it within ``most`` characters, else ValueError
    ``'{value}' is not {what}``."""
    if len(value) > most or not pattern.fullmatch(value):
        raise ValueError(f"{value!r} is not {what}")
    return value


def dns1123_label(value: str) -> str:
    what = "lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters"
    return _matching(value, _DNS1123_LABEL, 63, f"a DNS-1123 label ({what})")


def dns1123_label_error(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 label (an object or namespace name), or None when it is one.

    Kubernetes names that also end up as label values (LocalQueue and WorkloadPriorityClass names
    in ``kueue.x-k8s.io/queue-name`` and ``kueue.x-k8s.io/priority-class``) must be labels too.
    """
    return _error_of(dns1123_label, value)


def dns1123_subdomain_error(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 subdomain (the name most Kubernetes objects must have:
    Jobs, Workloads, ClusterQueues, Topologies, webhook configurations…), or None when it is one."""
    what = (
        "a valid object name: a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', starting and "
        "ending with a letter or digit, at most 253 characters)"
    )
    return _error_of(lambda name: _matching(name, _DNS1123_SUBDOMAIN, 253, what), value)


def label_value_error(value: str) -> str | None:
    """Why ``value`` is not a Kubernetes label value, or None when it is one."""
    return _error_of(label_value, value)


def _error_of(check: Callable[[str], str], value: str) -> str | None:
    """The message of the ValueError ``check(value)`` raises, or None when it passes."""
    try:
        check(value)
    except ValueError as exc:
        return str(exc)
    return None


def label_key(value: str) -> str:
    """Validate a Kubernetes label key ``[prefix/]name``; raise ValueError with the reason."""
    prefix, _, name = value.rpartition("/")
    if (
        (prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)))
        or len(name) > 63
        or not _LABEL_NAME.fullmatch(name)
    ):
        raise ValueError(
            f"{value!r} is not a valid label key ([prefix/]name; name: at most 63 of [A-Za-z0-9-_.], starting and "
            "ending with a letter or digit; prefix: a DNS-1123 subdomain)"
        )
    return value


def label_value(value: str) -> str:
    what = "a valid label value (at most 63 of [A-Za-z0-9-_.], starting and ending with a letter or digit)"
    return _matching(value, _LABEL_VALUE, 63, what)


def _quantity(value: Any) -> Any:
    """Check a quantity as written, before pydantic coerces it (YAML ``true`` would become 1)."""
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc
    return value


def never_negative(what: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if parse_quantity(value) < 0:
            raise ValueError(f"{what} is never negative")
        return value

    return check


DNSLabel = Annotated[str, AfterValidator(dns1123_label)]
LabelKey = Annotated[str, AfterValidator(label_key)]
LabelValue = Annotated[str, AfterValidator(label_value)]
Quantity = Annotated[
    str | int | float, BeforeValidator(_quantity), Field(description="Kubernetes quantity, e.g. 8, 500m, 64Gi")
]
Enforcement = Literal["default", "enforce", "warn"]
TopologyMode = Literal["required", "preferred", "unconstrained", "auto", "none"]

_INT64 = re.compile(r"[+-]?[0-9]+")


def requirement_value(value: str, info: ValidationInfo) -> str:
    """One entry of ``values``: a label value for ``In``/``NotIn``, an integer for ``Gt``/``Lt``."""
    operator = info.data.get("operator")
    if operator in ("In", "NotIn"):
        label_value(value)
    elif operator in ("Gt", "Lt") and not (
        _INT64.fullmatch(value) and (number := decimal_int(value)) is not None and -(2**63) <= number < 2**63
    ):
        raise ValueError(f"operator {operator} needs an integer value, got {value!r}")
    return value


def requirement_values(values: list[str], info: ValidationInfo) -> list[str]:
    """How many ``values`` an operator takes (Kubernetes' label-selector and node-selector rules)."""
    operator = info.data.get("operator")
    if operator in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"operator {operator} takes no values")
    if operator in ("In", "NotIn") and not values:
        raise ValueError(f"operator {operator} needs at least one value")
    if operator in ("Gt", "Lt") and len(values) != 1:
        raise ValueError(f"operator {operator} needs exactly one integer value")
    return values


RequirementValue = Annotated[str, AfterValidator(requirement_value)]

QuotaAmount = Annotated[Quantity, AfterValidator(never_negative("a quota"))]


#: The patience of a topology policy that names none (how long a workload waits on topology before
#: the governor widens it: :mod:`webhook.core.plan.widen`); the one place it is set. The placement
#: benchmark (``benchmarks/placement``, docs/placement.md "The patience default") measured no
#: patience that meets its target in every run, and reads a patience as a fraction of job run times.
DEFAULT_PATIENCE = "60s"
#: A patience that turns widening off.
NEVER = "never"
_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
#: The longest patience (a week): a longer one is a typo for ``never``.
MOST_PATIENCE_SECONDS = 7 * 24 * 3600


def patience_seconds(value: str) -> int | None:
    """A patience as seconds: ``"90s"`` → 90, ``"5m"`` → 300, ``"1h30m"`` → 5400 (hours, minutes
    and seconds, each an integer, in that order, at least one); ``"never"`` → None.

    Raises:
        ValueError: anything else, or a duration of 0 or above a week.
    """
    if value == NEVER:
        return None
    match = _DURATION.fullmatch(value)
    if not value or match is None:
        raise ValueError(f"{value!r} is no duration: use hours, minutes and seconds like 90s, 5m or 1h30m, or never")
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if not 0 < total <= MOST_PATIENCE_SECONDS:
        raise ValueError(f"{value!r}: a patience is above 0s and at most 168h (a week); never turns it off")
    return total


def _patience(value: str) -> str:
    patience_seconds(value)
    return value


Patience = Annotated[str, AfterValidator(_patience)]
