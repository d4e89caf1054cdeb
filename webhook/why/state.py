"""Where a Kueue Workload stands, from its conditions (Kueue v0.19.2, ``apis/kueue/v1beta2/workload_types.go``).

States, in the order a workload goes through them: ``queued`` (no ``QuotaReserved`` condition
yet: not evaluated, or held behind the head of a StrictFIFO queue), ``waiting for quota`` and
``waiting for topology`` (``QuotaReserved=False``; Kueue v0.19.2's reason is ``Pending`` and its
message says which: ``insufficient unused quota …`` or ``topology "T" allows to fit only N out of
M pod(s)``), ``admitted`` (``Admitted=True``), ``running`` (and ``PodsReady=True``), ``finished``
(``Finished=True``), ``evicted`` / ``preempted`` (``Evicted=True`` / ``Preempted=True``, until
Kueue requeues it: ``Requeued=True`` and ``QuotaReserved=False``; both conditions stay ``True``
until quota is reserved again, ``pkg/workload/workload.go`` ``SetQuotaReservation``, so a
requeued workload is pending again, with ``earlier`` saying when it was evicted and why; while
``QuotaReserved`` still carries the eviction's message it is ``queued``), ``inactive``
(``spec.active: false``).

Kueue's TAS message (``pkg/cache/scheduler/tas_flavor_snapshot.go`` ``notFitMessage``) carries
``Total nodes: N; excluded: taint "k=v:NoSchedule": 7, resource "nvidia.com/gpu": 4``;
:func:`parse_tas_message` reads it back so a report can set Kueue's count next to ours.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PENDING_STATES", "KueueTasMessage", "WorkloadState", "meta", "parse_tas_message", "workload_state"]

#: The states of a Workload that holds no quota yet and is waiting for it (:func:`workload_state`).
PENDING_STATES = ("queued", "pending", "waiting for quota", "waiting for topology")


def meta(obj: Mapping[str, Any], key: str) -> str:
    """``metadata[key]`` of an object as a string ("" when absent)."""
    return str((obj.get("metadata") or {}).get(key, ""))


_FIT = re.compile(
    r'topology "(?P<topology>[^"]+)" (?:allows to fit only (?P<fit>\d+) out of|doesn\'t allow to fit any of) '
    r"(?P<total>\d+) (?P<unit>pod|slice)\(s\)"
)
_EXCLUDED = re.compile(
    r'(taint "(?P<taint>[^"]+)"|resource "(?P<resource>[^"]+)"'
    r"|(?P<plain>nodeSelector|affinity|topologyDomain|schedulerLibraryNoFit)): (?P<count>\d+)"
)
_QUOTA = re.compile(
    r"insufficient (?P<unused>unused )?quota for (?P<resource>\S+) in flavor (?P<flavor>\S+), (?P<more>\S+) more needed"
)


@dataclass(frozen=True)
class KueueTasMessage:
    """What Kueue's topology message says: pods (or slices) that fit out of those asked for, the
    nodes its snapshot held, and nodes excluded per cause (``taint "k=v:E"``, ``resource "r"``,
    ``nodeSelector``, ``affinity``…, Kueue's own keys)."""

    topology: str
    fit: int
    total: int
    unit: str
    total_nodes: int | None
    excluded: dict[str, int]


def parse_tas_message(message: str) -> KueueTasMessage | None:
    """The topology part of a ``QuotaReserved`` message, or None when it has none."""
    match = _FIT.search(message)
    if match is None:
        return None
    nodes = re.search(r"Total nodes: (\d+); excluded: (.*)$", message)
    excluded: dict[str, int] = {}
    if nodes:
        for item in _EXCLUDED.finditer(nodes.group(2)):
            if item.group("taint"):
                key = f'taint "{item.group("taint")}"'
            elif item.group("resource"):
                key = f'resource "{item.group("resource")}"'
            else:
                key = item.group("plain")
            excluded[key] = int(item.group("count"))
    return KueueTasMessage(
        topology=match.group("topology"),
        fit=int(match.group("fit") or 0),
        total=int(match.group("total")),
        unit=match.group("unit"),
        total_nodes=int(nodes.group(1)) if nodes else None,
        excluded=excluded,
    )


@dataclass
class WorkloadState:
    """A workload's state (see the module docstring), Kueue's own reason and message, and the
    time of each condition that is ``True`` or says why it is not (RFC 3339, as Kueue wrote it)."""

    state: str
    reason: str = ""
    message: str = ""
    since: str = ""
    created: str = ""
    times: dict[str, str] = field(default_factory=dict)
    quota_message: dict[str, str] | None = None
    tas_message: KueueTasMessage | None = None
    #: A workload pending again after an eviction: ``preempted at T: message`` (or ``evicted …``).
    earlier: str = ""


def _conditions(workload: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    status = workload.get("status") if isinstance(workload.get("status"), Mapping) else {}
    out: dict[str, Mapping[str, Any]] = {}
    for condition in (status or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type"):
            out[str(condition["type"])] = condition
    return out


def workload_state(workload: Mapping[str, Any]) -> WorkloadState:
    """The state of one Workload object (any malformed field counts as absent)."""
    conditions = _conditions(workload)
    metadata = workload.get("metadata") if isinstance(workload.get("metadata"), Mapping) else {}
    created = str((metadata or {}).get("creationTimestamp") or "")
    times = {
        kind: str(c.get("lastTransitionTime") or "")
        for kind, c in conditions.items()
        if c.get("status") == "True" or kind == "QuotaReserved"
    }

    def true(kind: str) -> bool:
        return conditions.get(kind, {}).get("status") == "True"

    def made(state: str, kind: str) -> WorkloadState:
        c = conditions.get(kind, {})
        return WorkloadState(
            state,
            str(c.get("reason") or ""),
            str(c.get("message") or ""),
            str(c.get("lastTransitionTime") or created),
            created,
            times,
        )

    spec = workload.get("spec") if isinstance(workload.get("spec"), Mapping) else {}
    if true("Finished"):
        return made("finished", "Finished")
    if (spec or {}).get("active") is False:
        found = made("inactive", "Evicted" if "Evicted" in conditions else "QuotaReserved")
        found.message = found.message or "spec.active is false: Kueue will not admit it until it is set to true"
        return found
    if true("Admitted"):
        return made("running" if true("PodsReady") else "admitted", "PodsReady" if true("PodsReady") else "Admitted")
    if true("QuotaReserved"):
        return made("quota reserved", "QuotaReserved")
    reserved = conditions.get("QuotaReserved")
    earlier = ""
    if true("Evicted"):
        kind = "Preempted" if true("Preempted") else "Evicted"
        requeued = conditions.get("Requeued", {}).get("status")
        if reserved is None or reserved.get("status") != "False" or requeued == "False":
            return made(kind.lower(), kind)
        # Requeued: pending again; Evicted and Preempted stay True until quota is reserved again.
        was = made(kind.lower(), kind)
        earlier = f"{was.state} at {was.since}" + (f": {was.message}" if was.message else "")
        if str(reserved.get("message") or "") in (was.message, str(conditions["Evicted"].get("message") or "")):
            # QuotaReserved still carries the eviction's message: not evaluated since.
            state = made("queued", "QuotaReserved")
            state.message = f"requeued after being {was.state}; not evaluated by Kueue's scheduler since"
            state.earlier = earlier
            return state
    if reserved is None:
        state = made("queued", "QuotaReserved")
        state.message = "not evaluated by Kueue's scheduler yet, or held behind the head of its queue"
        return state
    state = made("pending", "QuotaReserved")
    state.earlier = earlier
    state.tas_message = parse_tas_message(state.message)
    quota = _QUOTA.search(state.message)
    if quota is not None:
        state.quota_message = {k: v for k, v in quota.groupdict().items() if v is not None}
    if state.tas_message is not None:
        state.state = "waiting for topology"
    elif quota is not None or "quota" in state.message:
        state.state = "waiting for quota"
    return state
