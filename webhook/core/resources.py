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

Quantities are exact decimals in base units (GPUs, CPUs, bytes). An unparsable quantity is left
out (the API server rejects such an object anyway).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from webhook.core.quantity import QuantityError, parse_quantity

__all__ = ["Requests", "pod_requests"]

Requests = dict[str, Decimal]


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _maps(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _quantities(values: Mapping[str, Any]) -> Requests:
    out: Requests = {}
    for name, value in values.items():
        try:
            out[str(name)] = parse_quantity(value)
        except (QuantityError, TypeError):
            continue
    return out


def _requests(resources: Mapping[str, Any]) -> Requests:
    """``requests``, with ``limits`` for the resources it leaves out (Kueue's KeepFirst merge)."""
    merged = _quantities(_map(resources.get("limits")))
    merged.update(_quantities(_map(resources.get("requests"))))
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


def pod_requests(pod_spec: Mapping[str, Any]) -> Requests:
    """One pod's requests (resource name → base units) from a ``PodSpec`` map, as Kueue counts them."""
    total: Requests = {}
    for container in _maps(pod_spec.get("containers")):
        _add(total, _requests(_map(container.get("resources"))))
    sidecars: Requests = {}
    init_peak: Requests = {}
    for container in _maps(pod_spec.get("initContainers")):
        own = _requests(_map(container.get("resources")))
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            _max(init_peak, sidecars)
        else:
            needed = dict(own)
            _add(needed, sidecars)
            _max(init_peak, needed)
    _max(total, init_peak)
    pod_level = _requests(_map(pod_spec.get("resources")))
    for name, amount in pod_level.items():
        if _supported_at_pod_level(name):
            total[name] = amount
    _add(total, _quantities(_map(pod_spec.get("overhead"))))
    return total
