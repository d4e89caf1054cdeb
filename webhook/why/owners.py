"""``kgov why`` of an object whose Workloads Kueue makes for what it owns.

A Deployment's pods each get a Workload (Kueue's pod integration), a CronJob's Jobs each get one,
a StatefulSet's pods form one pod group, a LeaderWorkerSet has one per group; the Workloads are
found through ``ownerReferences`` (:meth:`webhook.why.snapshot.Snapshot.workloads_under`). The
report is on one of them, the first pending one in Kueue's order (priority, then creation), else
the newest (a re-admitted Job may have left an older, finished one); every Workload is listed
with its state and, when pending, its cause, for ``kgov why workload/NAME``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.kueue.kinds import KINDS
from webhook.why.causes import plural
from webhook.why.explain import OwnedWorkload, WhyReport, explain
from webhook.why.snapshot import Snapshot
from webhook.why.state import PENDING_STATES, meta, workload_state

__all__ = ["explain_object"]


def _order(workload: Mapping[str, Any]) -> tuple[int, str]:
    return -int((workload.get("spec") or {}).get("priority") or 0), meta(workload, "creationTimestamp")


def explain_object(snapshot: Snapshot, obj: Mapping[str, Any], kind: str, namespace: str, name: str) -> WhyReport:
    """The report for a workload object (any kind) from its Workloads (see the module docstring);
    ``owned`` of the report lists them all when there is more than one, or when they belong to
    objects it owns."""
    found = sorted(snapshot.workloads_under(obj), key=lambda item: meta(item[0], "creationTimestamp"))
    pending = sorted(
        (w for w, _ in found if workload_state(w).state in PENDING_STATES),
        key=_order,
    )
    chosen = pending[0] if pending else (found[-1][0] if found else None)
    report = explain(snapshot, chosen, kind, namespace, name)
    if chosen is None:
        below = [d for d in snapshot.descendants if meta(d, "namespace") == namespace]
        if any(row.kind == kind and row.workloads_below for row in KINDS):
            report.summary = (
                f"Kueue has no Workload for it nor for what it owns ({_owned_counts(snapshot, obj, below)}): "
                "it has no queue label, or Kueue does not manage its kind or namespace"
            )
        return report
    indirect = any(owner != f"{obj.get('kind') or kind}/{name}" for _, owner in found)
    if len(found) > 1 or indirect:
        for workload, owner in found:
            state = workload_state(workload).state
            line = OwnedWorkload(meta(workload, "name"), owner, state)
            if state in PENDING_STATES:
                if workload is chosen:
                    line.cause, line.summary = report.cause, report.summary
                else:
                    other = explain(snapshot, workload, "Workload", namespace, line.name)
                    line.cause, line.summary = other.cause, other.summary
            report.owned.append(line)
    return report


def _owned_counts(snapshot: Snapshot, obj: Mapping[str, Any], below: list[dict[str, Any]]) -> str:
    """``2 ReplicaSets, 3 Pods`` owned (transitively) by ``obj``, or ``nothing found``."""
    uids = {meta(obj, "uid")}
    counts: dict[str, int] = {}
    grew = True
    while grew:
        grew = False
        for item in below:
            uid = meta(item, "uid")
            refs = {str(r.get("uid")) for r in (item.get("metadata") or {}).get("ownerReferences") or []}
            if uid not in uids and refs & uids:
                uids.add(uid)
                counts[str(item.get("kind"))] = counts.get(str(item.get("kind")), 0) + 1
                grew = True
    return ", ".join(plural(n, k) for k, n in sorted(counts.items())) or "nothing found"
