"""Per-pod resource requests as Kueue counts them for a podset.

Kueue (v0.19.2 ``pkg/workload/resources.go`` ``UseLimitsAsMissingRequestsInPod``, then
``pkg/workload/workload.go`` ``totalRequestsFromPodSets`` → ``k8s.io/component-helpers/resource``
``PodRequests``) computes one pod's requests as:

- a container's ``limits`` stand in for its missing ``requests`` (per resource);
- app containers are summed;
- init containers in order: a sidecar (``restartPolicy: Always``) adds to the app sum and to the
  running sidecar total; a plain init container needs its own requests plus the sidecars started
  before it; the pod needs at least the largest of those;
- pod-level ``spec.resources.requests`` (cpu, memory, hugepages-*) replace the containers' sum;
- ``spec.overhead`` is added.

Quantities are exact decimals in base units (GPUs, CPUs, bytes). A malformed value (an
unparsable or negative quantity, a list where a map belongs) is left out of the sum, and reported
when the caller collects problems (:mod:`webhook.core.kueue.wellformed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from webhook.core.kueue.wellformed import Problems, a_map, maps_of, quantity
from webhook.core.objects.paths import Key

__all__ = ["Requests", "pod_requests"]

Requests = dict[str, Decimal]
Path = tuple[Key, ...]


#: (resource name, quantity string) → its amount, for the strings found well-formed (a string's
#: check depends on nothing else: ``whole`` concerns JSON numbers). Cleared when full.
_CHECKED: dict[tuple[str, str], Decimal] = {}
_CHECKED_MAX = 4096


def _quantities(value: Any, path: Path, problems: Problems, whole: bool = False) -> Requests:
    out: Requests = {}
    for name, amount in a_map(value, path, problems).items():
        text = type(amount) is str and type(name) is str
        parsed = _CHECKED.get((name, amount)) if text else None
        if parsed is None:
            parsed = quantity(amount, (*path, name), problems, whole)
            if parsed is not None and text:
                if len(_CHECKED) >= _CHECKED_MAX:
                    _CHECKED.clear()
                _CHECKED[(name, amount)] = parsed
        if parsed is not None:
            out[str(name)] = parsed
    return out


def _requests(value: Any, path: Path, problems: Problems, whole: bool) -> Requests:
    """``requests``, with ``limits`` for the resources it leaves out (Kueue's KeepFirst merge)."""
    resources = a_map(value, path, problems)
    merged = _quantities(resources.get("limits"), (*path, "limits"), problems, whole)
    merged.update(_quantities(resources.get("requests"), (*path, "requests"), problems, whole))
    return merged


def _add(into: Requests, more: Mapping[str, Decimal]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, Decimal(0)) + amount


def _max(into: Requests, other: Mapping[str, Decimal]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, Decimal(0)):
            into[name] = amount


def _supported_at_pod_level(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def pod_requests(
    pod_spec: Mapping[str, Any], problems: Problems | None = None, at: Path = (), whole: bool = False
) -> Requests:
    """One pod's requests (resource name → base units) from a ``PodSpec`` map, as Kueue counts them.

    ``problems``: when given, each value on the way that is malformed (a ``containers`` that is no
    list, a quantity that is no non-negative Kubernetes quantity…) is recorded there with its path
    (``at`` is the path of ``pod_spec``); it is left out of the sum either way. ``whole``: a JSON
    number must be whole (a custom resource's int-or-string schema refuses ``0.5``).
    """
    found: Problems = [] if problems is None else problems
    total: Requests = {}
    for path, container in maps_of(pod_spec.get("containers"), (*at, "containers"), found):
        _add(total, _requests(container.get("resources"), (*path, "resources"), found, whole))
    # Each optional field below is skipped when absent (a pod without init containers, pod-level
    # resources or overhead), as reading it would add nothing.
    init_containers = pod_spec.get("initContainers")
    if init_containers is not None:
        sidecars: Requests = {}
        init_peak: Requests = {}
        for path, container in maps_of(init_containers, (*at, "initContainers"), found):
            own = _requests(container.get("resources"), (*path, "resources"), found, whole)
            if container.get("restartPolicy") == "Always":
                _add(total, own)
                _add(sidecars, own)
                _max(init_peak, sidecars)
            else:
                needed = dict(own)
                _add(needed, sidecars)
                _max(init_peak, needed)
        _max(total, init_peak)
    pod_resources = pod_spec.get("resources")
    if pod_resources is not None:
        pod_level = _requests(pod_resources, (*at, "resources"), found, whole)
        for name, amount in pod_level.items():
            if _supported_at_pod_level(name):
                total[name] = amount
    overhead = pod_spec.get("overhead")
    if overhead is not None:
        _add(total, _quantities(overhead, (*at, "overhead"), found, whole))
    return total
