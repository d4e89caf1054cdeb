"""What ``kgov why`` finds about one workload: the report's shape, shared by :mod:`.explain`, which
fills it, :mod:`.causes`, which names the cause, and :mod:`.report`, which prints it.

Amounts are base units (GPUs, CPU cores, bytes) as :class:`~decimal.Decimal`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from webhook.why.decision import Decision
from webhook.why.placement import PodsetPlacement
from webhook.why.quota import ResourceQuota
from webhook.why.state import WorkloadState

__all__ = ["NoFlavor", "OwnedWorkload", "Position", "QuotaNeed", "WhyReport"]

_ZERO = Decimal(0)


@dataclass
class QuotaNeed:
    """One resource of one flavor: what the workload needs and what its ClusterQueue has."""

    quota: ResourceQuota
    needed: Decimal

    @property
    def short(self) -> Decimal:
        return max(_ZERO, self.needed - self.quota.available)


@dataclass
class NoFlavor:
    """A podset Kueue can assign no flavor (``flavorassigner.go``, ``tas_flavorassigner.go``
    ``onlyTASFlavor``, v0.19.2): it requests ``uncovered`` resources the ClusterQueue does not
    cover (Kueue: ``resource R unavailable in ClusterQueue``), or, with ``uncovered`` empty, none
    of the ``covered`` ones while its ClusterQueue places it by topology (``no TAS flavor
    assigned``)."""

    podset: str
    uncovered: list[str]
    covered: list[str]


@dataclass
class OwnedWorkload:
    """One Workload of the object asked about: the object owning it directly (``Kind/name``),
    its state and, when pending, its cause and summary."""

    name: str
    owner: str
    state: str
    cause: str = ""
    summary: str = ""


@dataclass
class Position:
    """Place in the ClusterQueue's pending workloads (0 = head); ``source`` is ``visibility``
    (Kueue's visibility API) or ``estimated`` (priority, then creation time, as Kueue orders)."""

    in_cluster_queue: int
    in_local_queue: int | None
    source: str
    ahead: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class WhyReport:
    """Everything ``kgov why`` says about one workload (see :func:`explain`)."""

    kind: str
    namespace: str
    name: str
    workload: str | None
    state: WorkloadState | None
    local_queue: str = ""
    cluster_queue: str = ""
    cohort: str = ""
    priority: int = 0
    priority_class: str = ""
    queueing_strategy: str = ""
    position: Position | None = None
    quota: list[QuotaNeed] = field(default_factory=list)
    no_flavor: list[NoFlavor] = field(default_factory=list)
    placements: list[tuple[str, PodsetPlacement]] = field(default_factory=list)
    cause: str = ""
    summary: str = ""
    helps: list[str] = field(default_factory=list)
    decision: Decision | None = None
    #: For a Workload asked about directly: the owner the policy was asked about ("Job ns/name"),
    #: or why no policy decision can be shown.
    policy_owner: str = ""
    policy_note: str = ""
    owned: list[OwnedWorkload] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The governor's topology widenings of the object, oldest first (its history annotation:
    #: ``{"podsets", "from", "to", "at", "reason"}``, :mod:`webhook.core.plan.widen_history`).
    widened: list[dict[str, Any]] = field(default_factory=list)
