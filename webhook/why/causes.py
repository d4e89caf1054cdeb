"""The cause that keeps a workload pending, in one phrase, and what would help (see
:mod:`webhook.why.explain` for the order in which causes are tried)."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from webhook.why.placement import ALL_NODES, DomainFit, PodsetPlacement

if TYPE_CHECKING:
    from webhook.why.explain import WhyReport

__all__ = ["amount", "classify", "level_name", "plural"]

_PENDING = ("queued", "pending", "waiting for quota", "waiting for topology")
_GIB = Decimal(2**30)


def amount(resource: str, value: Decimal) -> str:
    """A resource amount for people: memory in TiB or GiB when whole, CPU in cores, counts as integers."""
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for unit, size in (("Ti", _GIB * 1024), ("Gi", _GIB)):
            if value and value % size == 0:
                return f"{(value / size).normalize():f}{unit}"
    return f"{value.normalize():f}"


def level_name(level: str) -> str:
    """``topology.k8s.aws/network-node-layer-3`` → ``layer-3``; ``kubernetes.io/hostname`` → ``host``."""
    if level == "kubernetes.io/hostname":
        return "host"
    return level.rsplit("/", 1)[-1].removeprefix("network-node-")


def plural(count: int, noun: str) -> str:
    """``1 pod``, ``2 pods``, ``0 pods``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _domain(fit: DomainFit) -> str:
    if fit.level == ALL_NODES:
        return "all eligible nodes together"
    return f"{level_name(fit.level)} {fit.domain[-1]}" if fit.domain else f"any {level_name(fit.level)}"


def _largest(fit: DomainFit, left: str = "") -> str:
    """``the largest layer-3 (rack-1)`` or, for the whole flavor, ``the eligible nodes``."""
    if fit.level == ALL_NODES:
        return f"the eligible nodes{left} together"
    return f"the largest {level_name(fit.level)}{left} ({fit.domain[-1] if fit.domain else '-'})"


def _narrowest_fitting(placement: PodsetPlacement, fits: list[DomainFit]) -> DomainFit | None:
    """The narrowest level (not narrower than the podset's own, broadest first) whose largest
    domain holds the podset."""
    holding = [f for f in fits[: len(placement.levels)] if f.pods >= placement.count]
    return holding[-1] if holding else None


def _topology(report: WhyReport) -> bool:
    """Set a topology cause when a podset does not fit at its level; True when one was set."""
    for podset, placement in report.placements:
        now, empty = placement.at_level(placement.fit_now), placement.at_level(placement.fit_empty)
        if now is None or empty is None or now.pods >= placement.count:
            continue
        at = f"{placement.mode} {level_name(placement.level)}" if placement.level else placement.mode
        where = f"podset {podset}: {plural(placement.count, 'pod')} at {at}"
        untainted = placement.fit_untainted_empty
        taints = {k: v for k, v in placement.excluded.items() if k.startswith("taint ")}
        if empty.pods < placement.count and untainted is not None and untainted.pods >= placement.count and taints:
            report.cause = "taint"
            listed = ", ".join(f"{k} on {plural(v, 'node')}" for k, v in taints.items())
            report.summary = (
                f"{where}: untolerated {listed}; {_largest(empty, ' left')} holds "
                f"{empty.pods} of {plural(placement.count, 'pod')}"
            )
            report.helps.append(
                f"tolerate {', '.join(taints)} (or remove it): {_domain(untainted)} would hold "
                f"{plural(untainted.pods, 'pod')}"
            )
            return True
        if empty.pods < placement.count:
            report.cause = "never fits"
            if empty.level == ALL_NODES:
                nodes = "its one eligible node holds" if empty.nodes == 1 else f"its {empty.nodes} eligible nodes hold"
                report.summary = f"{where}: never fits: {nodes} {plural(empty.pods, 'such pod')} with nothing running"
            else:
                report.summary = (
                    f"{where}: never fits: {_largest(empty)} has {plural(empty.nodes, 'eligible node')} and holds "
                    f"{plural(empty.pods, 'such pod')} with nothing running"
                )
            broader = _narrowest_fitting(placement, placement.fit_empty)
            report.helps.append(
                f"ask for {level_name(broader.level)} (its largest domain holds {broader.pods})"
                if broader
                else f"fewer or smaller pods: all eligible nodes together hold {placement.fit_empty[-1].pods}"
            )
            return True
        report.cause = "no domain free"
        if now.level == ALL_NODES:
            report.summary = (
                f"{where}: the eligible nodes have room now for {now.pods} of {plural(placement.count, 'pod')}; "
                f"with nothing running they would hold {empty.pods}"
            )
        else:
            report.summary = (
                f"{where}: no {level_name(now.level)} has room now: the freest "
                f"({now.domain[-1] if now.domain else '-'}) holds {now.pods} of {plural(placement.count, 'pod')}; "
                f"empty, {_domain(empty)} would hold {empty.pods}"
            )
        broader = _narrowest_fitting(placement, placement.fit_now)
        if broader is not None and broader.level != now.level:
            report.helps.append(
                f"would fit now at {level_name(broader.level)} ({_domain(broader)} holds {broader.pods})"
            )
        report.helps.append("wait for running workloads on those nodes to finish")
        return True
    return False


def classify(report: WhyReport) -> None:
    """Set ``cause``, ``summary`` and ``helps`` of a report whose facts are filled in."""
    state = report.state
    if state is None:
        return
    if state.state not in _PENDING:
        report.cause = state.state
        report.summary = f"{state.state} since {state.since}" + (f": {state.message}" if state.message else "")
        return
    never = [n for n in report.quota if n.needed > n.quota.potential]
    if never:
        n = never[0]
        report.cause = "never fits"
        report.summary = (
            f"needs {amount(n.quota.resource, n.needed)} {n.quota.resource} of flavor {n.quota.flavor}; "
            f"ClusterQueue {report.cluster_queue} can get at most {amount(n.quota.resource, n.quota.potential)} "
            f"(nominal {amount(n.quota.resource, n.quota.nominal)} + what it may borrow)"
        )
        report.helps.append(f"ask for at most {amount(n.quota.resource, n.quota.potential)} {n.quota.resource}")
        return
    if _topology(report):
        return
    short = [n for n in report.quota if n.short > 0]
    if short:
        report.cause = "over quota"
        parts = []
        for n in short:
            q = n.quota
            parts.append(
                f"{q.resource}: needs {amount(q.resource, n.needed)}, ClusterQueue {report.cluster_queue} uses "
                f"{amount(q.resource, q.reserved)} of nominal {amount(q.resource, q.nominal)}"
                + (f" (may borrow {amount(q.resource, q.borrowing_limit)})" if q.borrowing_limit is not None else "")
                + (
                    f", cohort {report.cohort} has {amount(q.resource, q.cohort_available)} unused"
                    if q.cohort_available is not None
                    else ""
                )
                + f": {amount(q.resource, n.short)} short"
            )
            borrow = n.needed - max(Decimal(0), q.nominal - q.reserved)
            if report.cohort and borrow > 0:
                report.helps.append(
                    f"needs {amount(q.resource, borrow)} {q.resource} of borrowing the cohort does not have "
                    f"({amount(q.resource, q.available)} available to this queue)"
                )
        report.summary = "; ".join(parts)
        report.helps.append("wait for admitted workloads of the queue (or the cohort) to finish")
        return
    position = report.position
    if position is not None and position.ahead:
        higher = [a for a in position.ahead if a["priority"] > report.priority]
        report.cause = "behind higher priority" if higher else "behind earlier workloads"
        head = position.ahead[0]
        report.summary = (
            f"it fits now, but is {position.in_cluster_queue + 1} in ClusterQueue {report.cluster_queue} "
            f"({report.queueing_strategy}): {len(position.ahead)} pending ahead"
            + (f", {len(higher)} of higher priority than its {report.priority}" if higher else "")
            + f"; the head is {head['workload']} (priority {head['priority']}, {head['state']})"
        )
        if report.queueing_strategy == "StrictFIFO":
            report.helps.append("StrictFIFO: nothing behind the head is admitted until the head is")
        return
    report.cause = "not evaluated yet"
    report.summary = "quota and topology allow it now; Kueue has not admitted it yet"
