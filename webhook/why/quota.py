"""Quota of ClusterQueues and their cohort, as Kueue v0.19.2 counts it.

Per ClusterQueue, flavor and resource: ``nominalQuota``, ``borrowingLimit``, ``lendingLimit``
(``spec.resourceGroups``), what workloads holding a reservation use (``status.flavorsReservation``
``total``; ``borrowed`` the part above nominal) and what admitted ones use
(``status.flavorsUsage``).

What a ClusterQueue can still take is Kueue's ``available`` (``pkg/cache/scheduler/
resource_node.go``) for one cohort level: its guaranteed part (``nominal - lendingLimit``) not
used, plus what the cohort has left, capped by the borrowing limit. The cohort holds each
member's lendable part (``nominal``, or ``lendingLimit``) and counts each member's usage above
its guaranteed part. Its ``potential`` (the same with nothing used) is the most it can ever take:
a workload needing more never fits. Kueue does not say which member a borrower's quota came
from, so ``lendable`` is each queue's unused lendable quota, not an attribution. Cohort objects
with their own quota or a parent cohort are not modelled (noted in :attr:`CohortView.notes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from webhook.core.objects.quantity import QuantityError, parse_quantity

__all__ = ["CohortView", "ResourceQuota", "queue_quotas"]

_ZERO = Decimal(0)


def _quantity(value: Any) -> Decimal | None:
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except (QuantityError, TypeError):
        return None


@dataclass
class ResourceQuota:
    """One (flavor, resource) of one ClusterQueue; amounts in base units (GPUs, cores, bytes)."""

    flavor: str
    resource: str
    nominal: Decimal
    borrowing_limit: Decimal | None
    lending_limit: Decimal | None
    reserved: Decimal = _ZERO
    borrowed: Decimal = _ZERO
    admitted: Decimal = _ZERO
    #: Filled by :class:`CohortView`: what this queue may still take now and ever (cohort included).
    available: Decimal = _ZERO
    potential: Decimal = _ZERO
    cohort_available: Decimal | None = None
    #: What caps ``available`` now: ``nominal`` (no cohort), ``cohort`` (what the cohort has
    #: left) or ``borrowingLimit`` (this queue's own limit leaves less than the cohort has).
    binding: str = "nominal"
    #: With a borrowing limit: what the limit still lets this queue take from the cohort.
    borrowing_room: Decimal | None = None

    @property
    def local(self) -> Decimal:
        """Kueue's ``localQuota``: the part the cohort never sees (``nominal - lendingLimit``)."""
        return max(_ZERO, self.nominal - self.lending_limit) if self.lending_limit is not None else _ZERO

    @property
    def lendable(self) -> Decimal:
        """Unused quota this queue puts at the cohort's disposal now."""
        unused = max(_ZERO, self.nominal - self.reserved)
        return min(unused, self.lending_limit) if self.lending_limit is not None else unused


def _usage(status: Mapping[str, Any], key: str) -> dict[tuple[str, str], tuple[Decimal, Decimal]]:
    out: dict[tuple[str, str], tuple[Decimal, Decimal]] = {}
    for flavor in status.get(key) or []:
        for resource in (flavor or {}).get("resources") or []:
            total = _quantity(resource.get("total")) or _ZERO
            borrowed = _quantity(resource.get("borrowed")) or _ZERO
            out[(str(flavor.get("name")), str(resource.get("name")))] = (total, borrowed)
    return out


def queue_quotas(queue: Mapping[str, Any]) -> list[ResourceQuota]:
    """The (flavor, resource) quotas of one ClusterQueue object with its status usage."""
    spec = queue.get("spec") if isinstance(queue.get("spec"), Mapping) else {}
    status = queue.get("status") if isinstance(queue.get("status"), Mapping) else {}
    reserved, admitted = _usage(status or {}, "flavorsReservation"), _usage(status or {}, "flavorsUsage")
    out: list[ResourceQuota] = []
    for group in (spec or {}).get("resourceGroups") or []:
        for flavor in (group or {}).get("flavors") or []:
            for resource in (flavor or {}).get("resources") or []:
                key = (str(flavor.get("name")), str(resource.get("name")))
                quota = ResourceQuota(
                    flavor=key[0],
                    resource=key[1],
                    nominal=_quantity(resource.get("nominalQuota")) or _ZERO,
                    borrowing_limit=_quantity(resource.get("borrowingLimit")),
                    lending_limit=_quantity(resource.get("lendingLimit")),
                )
                quota.reserved, quota.borrowed = reserved.get(key, (_ZERO, _ZERO))
                quota.admitted = admitted.get(key, (_ZERO, _ZERO))[0]
                out.append(quota)
    return out


@dataclass
class CohortView:
    """Every ClusterQueue's quotas, with ``available``/``potential`` filled in per cohort."""

    queues: dict[str, list[ResourceQuota]] = field(default_factory=dict)
    cohort_of: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def build(
        cls, cluster_queues: Iterable[Mapping[str, Any]], cohorts: Iterable[Mapping[str, Any]] = ()
    ) -> CohortView:
        view = cls()
        for queue in cluster_queues:
            name = str((queue.get("metadata") or {}).get("name", ""))
            view.queues[name] = queue_quotas(queue)
            cohort = (queue.get("spec") or {}).get("cohortName")
            if cohort:
                view.cohort_of[name] = str(cohort)
        for cohort in cohorts:
            spec = cohort.get("spec") or {}
            if spec.get("parentName") or spec.get("resourceGroups"):
                view.notes.append(
                    f"Cohort {(cohort.get('metadata') or {}).get('name')} has its own quota or a parent: "
                    "only one cohort level of ClusterQueues is counted"
                )
        view._fill()
        return view

    def members(self, cohort: str) -> list[str]:
        return [q for q, c in self.cohort_of.items() if c == cohort]

    def _fill(self) -> None:
        # Cohort subtree quota and usage per (cohort, flavor, resource): accumulateFromChild.
        pool: dict[tuple[str, str, str], Decimal] = {}
        used: dict[tuple[str, str, str], Decimal] = {}
        for name, quotas in self.queues.items():
            cohort = self.cohort_of.get(name)
            if cohort is None:
                continue
            for q in quotas:
                key = (cohort, q.flavor, q.resource)
                pool[key] = pool.get(key, _ZERO) + q.nominal - q.local
                used[key] = used.get(key, _ZERO) + max(_ZERO, q.reserved - q.local)
        for name, quotas in self.queues.items():
            cohort = self.cohort_of.get(name)
            for q in quotas:
                if cohort is None:
                    q.available, q.potential = q.nominal - q.reserved, q.nominal
                    continue
                key = (cohort, q.flavor, q.resource)
                local_available = max(_ZERO, q.local - q.reserved)
                parent_available = pool[key] - used[key]
                parent_potential = pool[key]
                q.binding = "cohort"
                if q.borrowing_limit is not None:
                    stored = q.nominal - q.local
                    used_in_parent = max(_ZERO, q.reserved - q.local)
                    q.borrowing_room = stored - used_in_parent + q.borrowing_limit
                    if q.borrowing_room < parent_available:
                        q.binding = "borrowingLimit"
                    parent_available = min(q.borrowing_room, parent_available)
                    parent_potential = min(q.nominal + q.borrowing_limit, q.local + parent_potential) - q.local
                q.cohort_available = pool[key] - used[key]
                q.available = local_available + parent_available
                q.potential = q.local + parent_potential

    def quota(self, queue: str, flavor: str, resource: str) -> ResourceQuota | None:
        return next((q for q in self.queues.get(queue, []) if q.flavor == flavor and q.resource == resource), None)
