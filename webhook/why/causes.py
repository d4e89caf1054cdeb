"""The cause that keeps a workload pending, in one phrase, and what would help (see
:mod:`webhook.why.explain` for the order in which causes are tried)."""

from __future__ import annotations

from decimal import Decimal

from webhook.why.findings import QuotaNeed, WhyReport
from webhook.why.placement import ALL_NODES, DomainFit, PodsetPlacement
from webhook.why.state import PENDING_STATES

__all__ = ["amount", "classify", "level_name", "plural"]

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


def _eligible(placement: PodsetPlacement) -> str:
    """``the 1 eligible node (7 excluded: taint "k=v:NoSchedule": 7)``: the nodes advice is about."""
    nodes = placement.fit_empty[-1].nodes if placement.fit_empty else 0
    excluded = {k: v for k, v in placement.excluded.items() if not k.startswith("resource ")}
    said = f"the {plural(nodes, 'eligible node')}"
    if excluded:
        listed = ", ".join(f"{k}: {v}" for k, v in excluded.items())
        said += f" ({sum(excluded.values())} excluded: {listed})"
    return said


def _workload_pods(report: WhyReport, flavor: str) -> tuple[int, str]:
    """The pods of every podset of the workload on ``flavor`` and, with more than one podset,
    ``" (podsets master 1, worker 2)"``: Kueue admits a workload's podsets all together or none."""
    counts = [(podset, p.count) for podset, p in report.placements if p.flavor == flavor]
    listed = f" (podsets {', '.join(f'{podset} {count}' for podset, count in counts)})" if len(counts) > 1 else ""
    return sum(count for _, count in counts), listed


def _together(report: WhyReport, now: bool) -> bool:
    """``never fits`` (``now`` False) or ``no domain free`` (``now`` True) for the podsets of one
    flavor with the same pod shape, whose eligible nodes hold fewer of those pods than the
    workload has in all (with nothing running, or now): Kueue admits them all or none."""
    by_flavor: dict[str, list[PodsetPlacement]] = {}
    for _, placement in report.placements:
        by_flavor.setdefault(placement.flavor, []).append(placement)
    for flavor, placements in by_flavor.items():
        first = placements[0]
        if len(placements) < 2 or any(p.per_pod != first.per_pod for p in placements) or not first.fit_empty:
            continue
        total, listed = _workload_pods(report, flavor)
        where = f"the workload needs {plural(total, 'pod')} in all{listed} and Kueue admits all or none"
        empty = first.fit_empty[-1]
        if not now and empty.pods < total and _nodes_down(report, first, where, empty, total):
            return True
        if not now and empty.pods < total:
            report.cause = "never fits"
            report.summary = f"{where}: {_eligible(first)} hold {plural(empty.pods, 'such pod')} with nothing running"
            report.helps.append(f"fewer or smaller pods: {_eligible(first)} together hold {empty.pods}")
            return True
        if now and first.fit_now and first.fit_now[-1].pods < total:
            report.cause = "no domain free"
            report.summary = (
                f"{where}: the eligible nodes have room now for {first.fit_now[-1].pods} of them; "
                f"with nothing running they would hold {empty.pods}"
            )
            report.helps.append(f"wait for running workloads on {_eligible(first)} to finish")
            return True
    return False


def _nodes_down(report: WhyReport, placement: PodsetPlacement, where: str, empty: DomainFit, total: int) -> bool:
    """Set cause ``nodes down`` when the podset (the workload's ``total`` pods on all the flavor's
    nodes) fits with nothing running only once the nodes down now are back (not Ready, cordoned,
    Kubernetes' transient ``node.kubernetes.io/*`` taints): it waits, it is not "never fits"."""
    back = next((f for f in placement.fit_settled_empty if f.level == empty.level), None)
    if back is None or not placement.down or not _enough(back, placement, total):
        return False
    report.cause = "nodes down"
    verb = "is" if placement.down == 1 else "are"
    report.summary = (
        f"{where}: {plural(placement.down, 'eligible node')} {verb} not Ready, cordoned or tainted "
        f"node.kubernetes.io/* now, and {_largest(empty)} holds {plural(empty.pods, 'such pod')} with nothing "
        f"running; with them back {_domain(back)} would hold {plural(back.pods, 'pod')}"
    )
    report.helps.append("wait for the nodes to be Ready and schedulable again (or uncordon them)")
    return True


def _enough(fit: DomainFit, placement: PodsetPlacement, total: int) -> bool:
    """Whether ``fit`` holds the podset (all the flavor's nodes: the workload's ``total`` pods)."""
    return fit.pods >= (total if fit.level == ALL_NODES else placement.count)


def _alone(fit: DomainFit, podset: str, placement: PodsetPlacement, total: int, listed: str) -> str:
    """For advice about one domain of a podset's level: that it is for that podset alone."""
    if total == placement.count or fit.level == ALL_NODES:
        return ""
    return f", for podset {podset} alone: the workload needs {plural(total, 'pod')} in all{listed}"


def _topology(report: WhyReport) -> bool:
    """Set a topology cause when a podset does not fit at its level, or the podsets do not fit
    together; True when one was set.

    Advice that a change would let it fit counts the whole workload: on all the flavor's nodes
    every podset of the flavor (all or none); at a narrower level, where each podset may take its
    own domain, the advice says it is for that podset and how many pods the workload needs."""
    if _together(report, now=False):
        return True
    for podset, placement in report.placements:
        now, empty = placement.at_level(placement.fit_now), placement.at_level(placement.fit_empty)
        if now is None or empty is None or now.pods >= placement.count:
            continue
        total, listed = _workload_pods(report, placement.flavor)

        at = f"{placement.mode} {level_name(placement.level)}" if placement.level else placement.mode
        where = f"podset {podset}: {plural(placement.count, 'pod')} at {at}"
        if total != placement.count:
            where += f" (the workload: {plural(total, 'pod')}{listed}, admitted all or none)"
        if empty.pods < placement.count and _nodes_down(report, placement, where, empty, total):
            return True
        untainted = placement.fit_untainted_empty
        taints = {k: v for k, v in placement.excluded.items() if k.startswith("taint ")}
        if empty.pods < placement.count and untainted is not None and untainted.pods >= placement.count and taints:
            report.cause = "taint"
            listed_taints = ", ".join(f"{k} on {plural(v, 'node')}" for k, v in taints.items())
            report.summary = (
                f"{where}: untolerated {listed_taints}; {_largest(empty, ' left')} holds "
                f"{empty.pods} of {plural(placement.count, 'pod')}"
            )
            if _enough(untainted, placement, total):
                report.helps.append(
                    f"tolerate {', '.join(taints)} (or remove it): {_domain(untainted)} would hold "
                    f"{plural(untainted.pods, 'pod')}{_alone(untainted, podset, placement, total, listed)}"
                )
            else:
                report.helps.append(
                    f"tolerate {', '.join(taints)} (or remove it) and make room: {_domain(untainted)} would hold "
                    f"{plural(untainted.pods, 'pod')} of the {total} the workload needs"
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
                f"ask for {level_name(broader.level)} (its largest domain holds {plural(broader.pods, 'pod')}"
                f"{_alone(broader, podset, placement, total, listed)})"
                if broader
                else f"fewer or smaller pods: {_eligible(placement)} together hold {placement.fit_empty[-1].pods}"
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
                f"would fit now at {level_name(broader.level)} ({_domain(broader)} holds "
                f"{plural(broader.pods, 'pod')}{_alone(broader, podset, placement, total, listed)})"
            )
        tolerated = placement.fit_untainted_now
        if taints and tolerated is not None and _enough(tolerated, placement, total):
            report.helps.append(
                f"tolerate {', '.join(taints)} (or remove it): {_domain(tolerated)} would hold "
                f"{plural(tolerated.pods, 'pod')} now{_alone(tolerated, podset, placement, total, listed)}"
            )
        report.helps.append(f"wait for running workloads on {_eligible(placement)} to finish")
        return True
    return _together(report, now=True)


def _short(report: WhyReport, need: QuotaNeed) -> str:
    """One short resource: the limit that binds (nominal, the cohort or the borrowing limit), with numbers."""
    q = need.quota

    def a(value: Decimal) -> str:
        return amount(q.resource, value)

    queue = f"ClusterQueue {report.cluster_queue}"
    said = f"{q.resource}: needs {a(need.needed)}, {queue} uses {a(q.reserved)} of nominal {a(q.nominal)}"
    borrow = need.needed - max(Decimal(0), q.nominal - q.reserved)
    if q.binding == "borrowingLimit" and q.borrowing_limit is not None:
        unused = q.cohort_available or Decimal(0)
        said += (
            f"; its borrowingLimit binds, not the cohort: it may hold at most {a(q.nominal + q.borrowing_limit)} "
            f"(nominal {a(q.nominal)} + borrowingLimit {a(q.borrowing_limit)}), which leaves {a(q.available)}, "
            f"while cohort {report.cohort} has {a(unused)} unused"
        )
        raised = q.borrowing_limit + need.short
        report.helps.append(
            f"raise {queue}'s borrowingLimit for {q.resource} from {a(q.borrowing_limit)} to {a(raised)}"
            + (
                ""
                if q.borrowing_room is None or q.borrowing_room + need.short <= unused
                else f" (then the cohort binds: it has {a(unused)} unused)"
            )
        )
    elif q.binding == "cohort":
        said += (
            f" (borrowingLimit {a(q.borrowing_limit)})" if q.borrowing_limit is not None else ""
        ) + f"; the cohort binds: cohort {report.cohort} has {a(q.cohort_available or Decimal(0))} unused"
        if borrow > 0:
            report.helps.append(
                f"needs {a(borrow)} {q.resource} of borrowing the cohort does not have "
                f"({a(q.available)} available to this queue)"
            )
    else:
        said += " (no cohort to borrow from)"
    return said + f": {a(need.short)} short"


def classify(report: WhyReport) -> None:
    """Set ``cause``, ``summary`` and ``helps`` of a report whose facts are filled in."""
    state = report.state
    if state is None:
        return
    if state.state not in PENDING_STATES:
        report.cause = state.state
        report.summary = f"{state.state} since {state.since}" + (f": {state.message}" if state.message else "")
        return
    if report.no_flavor:
        _no_flavor(report)
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
    if state.state == "pending" and state.message:
        # Kueue's condition names a reason kgov does not model: its own words are the cause.
        report.cause = "Kueue's message"
        report.summary = state.message
        return
    if _topology(report):
        return
    short = [n for n in report.quota if n.short > 0]
    if short:
        report.cause = "over quota"
        parts = []
        for n in short:
            parts.append(_short(report, n))
        report.summary = "; ".join(parts)
        report.helps.append("wait for admitted workloads of the queue (or the cohort) to finish")
        return
    position = report.position
    if position is not None and position.ahead and report.queueing_strategy == "StrictFIFO":
        higher = [a for a in position.ahead if a["priority"] > report.priority]
        report.cause = "behind higher priority" if higher else "behind earlier workloads"
        head = position.ahead[0]
        report.summary = (
            f"it fits now, but is {position.in_cluster_queue + 1} in ClusterQueue {report.cluster_queue} "
            f"({report.queueing_strategy}): {len(position.ahead)} pending ahead"
            + (f", {len(higher)} of higher priority than its {report.priority}" if higher else "")
            + f"; the head is {head['workload']} (priority {head['priority']}, {head['state']})"
        )
        report.helps.append("StrictFIFO: nothing behind the head is admitted until the head is")
        return
    report.cause = "not evaluated yet"
    report.summary = "quota and topology allow it now; Kueue has not admitted it yet" + (
        f" ({len(position.ahead)} pending ahead in {report.queueing_strategy}: those that do not fit do not hold it)"
        if position is not None and position.ahead
        else ""
    )


def _no_flavor(report: WhyReport) -> None:
    """``never fits``: a podset Kueue can assign no flavor (see :class:`webhook.why.explain.NoFlavor`)."""
    report.cause = "never fits"
    parts = []
    for gap in report.no_flavor:
        listed = ", ".join(gap.covered) or "nothing"
        if gap.uncovered:
            parts.append(
                f"no flavor: podset {gap.podset} requests {', '.join(gap.uncovered)}, which ClusterQueue "
                f"{report.cluster_queue} does not cover (it covers {listed})"
            )
            report.helps.append(
                f"podset {gap.podset}: drop the {', '.join(gap.uncovered)} request, or use a ClusterQueue that "
                "covers it (unless Kueue's Configuration excludes it: resources.excludeResourcePrefixes)"
            )
        else:
            parts.append(
                f"no flavor: podset {gap.podset} requests none of the resources ClusterQueue "
                f"{report.cluster_queue} covers ({listed}), so Kueue assigns it no flavor, and without one "
                "its topology-aware ClusterQueue cannot place it (no TAS flavor)"
            )
            example = "cpu" if "cpu" in gap.covered else (gap.covered[0] if gap.covered else "")
            report.helps.append(
                f"podset {gap.podset}: request one of them for its pods"
                + (f", e.g. {example}" if example else "")
                + " (or give the namespace a LimitRange with default requests)"
            )
    report.summary = "; ".join(parts)
