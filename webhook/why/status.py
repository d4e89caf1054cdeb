"""``kgov status``: one row per team (ClusterQueue) with its quota, usage and pending work.

A team is a ClusterQueue; its name is the ``kueue-governor.io/team`` label ``kgov generate``
puts on it, else the ClusterQueue's name. Per flavor and resource (from the ClusterQueue's own
``spec`` and ``status``, Kueue v0.19.2): ``nominal`` (``nominalQuota``), ``borrowingLimit``,
``reserved`` and ``borrowed`` (``status.flavorsReservation``: quota held by workloads with a
reservation, and the part of it above nominal), ``used`` (``status.flavorsUsage``: admitted
workloads) and ``lendable`` (its unused quota the cohort may borrow, capped by ``lendingLimit``;
Kueue does not attribute borrowing to a lender). Workload counts are the ClusterQueue's
``status.admittedWorkloads``, ``reservingWorkloads`` and ``pendingWorkloads``; the oldest pending
Workload is named with its cause (:func:`webhook.why.explain.explain`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.why.causes import amount
from webhook.why.explain import explain
from webhook.why.quota import CohortView, ResourceQuota
from webhook.why.report import number
from webhook.why.snapshot import Snapshot
from webhook.why.state import PENDING_STATES, meta, workload_state

__all__ = [
    "TEAM_LABEL",
    "TeamStatus",
    "WorkloadLine",
    "status_json",
    "status_table",
    "team_statuses",
    "team_workloads",
    "workloads_table",
]

TEAM_LABEL = "kueue-governor.io/team"


@dataclass
class WorkloadLine:
    """One workload of a team: its state and, when pending, its cause in one phrase."""

    namespace: str
    name: str
    owner: str
    priority: int
    created: str
    state: str
    cause: str
    summary: str


@dataclass
class TeamStatus:
    """One ClusterQueue's quota, usage and workload counts (see the module docstring)."""

    team: str
    cluster_queue: str
    cohort: str
    quotas: list[ResourceQuota]
    admitted: int
    reserving: int
    pending: int
    oldest_pending: WorkloadLine | None = None
    workloads: list[WorkloadLine] = field(default_factory=list)


def _line(snapshot: Snapshot, workload: Mapping[str, Any]) -> WorkloadLine:
    state = workload_state(workload)
    owners = (workload.get("metadata") or {}).get("ownerReferences") or []
    owner = f"{owners[0].get('kind')}/{owners[0].get('name')}" if owners else ""
    cause, summary = "", ""
    if state.state in PENDING_STATES:
        report = explain(snapshot, workload, "Workload", meta(workload, "namespace"), meta(workload, "name"))
        cause, summary = report.cause, report.summary
    return WorkloadLine(
        namespace=meta(workload, "namespace"),
        name=meta(workload, "name"),
        owner=owner,
        priority=int((workload.get("spec") or {}).get("priority") or 0),
        created=meta(workload, "creationTimestamp"),
        state=state.state,
        cause=cause,
        summary=summary,
    )


def team_statuses(snapshot: Snapshot, team: str | None = None) -> list[TeamStatus]:
    """Every ClusterQueue (or those of ``team``: its label or name) with its status; with
    ``team``, each of its workloads too."""
    cohorts = CohortView.build(snapshot.clusterqueues, snapshot.cohorts)
    out: list[TeamStatus] = []
    for queue in sorted(snapshot.clusterqueues, key=lambda q: meta(q, "name")):
        name = meta(queue, "name")
        label = str(((queue.get("metadata") or {}).get("labels") or {}).get(TEAM_LABEL) or name)
        if team is not None and team not in (label, name):
            continue
        status = queue.get("status") or {}
        row = TeamStatus(
            team=label,
            cluster_queue=name,
            cohort=str((queue.get("spec") or {}).get("cohortName") or ""),
            quotas=cohorts.queues.get(name, []),
            admitted=int(status.get("admittedWorkloads") or 0),
            reserving=int(status.get("reservingWorkloads") or 0),
            pending=int(status.get("pendingWorkloads") or 0),
        )
        mine = [w for w in snapshot.workloads if snapshot.queue_of(w) == name]
        pending = sorted(
            (w for w in mine if workload_state(w).state in PENDING_STATES), key=lambda w: meta(w, "creationTimestamp")
        )
        if pending:
            row.oldest_pending = _line(snapshot, pending[0])
        if team is not None:
            row.workloads = [_line(snapshot, w) for w in sorted(mine, key=lambda w: meta(w, "creationTimestamp"))]
        out.append(row)
    return out


def team_workloads(rows: list[TeamStatus]) -> list[WorkloadLine]:
    return [line for row in rows for line in row.workloads]


def _line_json(line: WorkloadLine | None) -> dict[str, Any] | None:
    if line is None:
        return None
    return {
        "namespace": line.namespace,
        "name": line.name,
        "owner": line.owner,
        "priority": line.priority,
        "created": line.created,
        "state": line.state,
        "cause": line.cause,
        "summary": line.summary,
    }


def status_json(rows: list[TeamStatus]) -> list[dict[str, Any]]:
    """``kgov status -o json``: one object per team; amounts in base units."""
    return [
        {
            "team": row.team,
            "clusterQueue": row.cluster_queue,
            "cohort": row.cohort,
            "resources": [
                {
                    "flavor": q.flavor,
                    "resource": q.resource,
                    "nominal": number(q.nominal),
                    "borrowingLimit": number(q.borrowing_limit),
                    "lendingLimit": number(q.lending_limit),
                    "reserved": number(q.reserved),
                    "borrowed": number(q.borrowed),
                    "used": number(q.admitted),
                    "lendable": number(q.lendable),
                }
                for q in row.quotas
            ],
            "admittedWorkloads": row.admitted,
            "reservingWorkloads": row.reserving,
            "pendingWorkloads": row.pending,
            "oldestPending": _line_json(row.oldest_pending),
            "workloads": [_line_json(line) for line in row.workloads],
        }
        for row in rows
    ]


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows) + "\n"


def status_table(rows: list[TeamStatus]) -> str:
    """``kgov status``: a line per team and resource; workload counts on the team's first line."""
    table = [
        [
            "TEAM",
            "RESOURCE",
            "NOMINAL",
            "BORROW LIMIT",
            "RESERVED",
            "BORROWED",
            "USED",
            "LENDABLE",
            "ADMITTED",
            "PENDING",
            "OLDEST PENDING",
        ]
    ]
    for row in rows:
        for index, q in enumerate(row.quotas or [None]):
            first = index == 0
            oldest = row.oldest_pending
            table.append(
                [
                    row.team if first else "",
                    q.resource if q else "-",
                    amount(q.resource, q.nominal) if q else "-",
                    (
                        amount(q.resource, q.borrowing_limit)
                        if q.borrowing_limit is not None
                        else ("any" if row.cohort else "-")
                    )
                    if q
                    else "-",
                    amount(q.resource, q.reserved) if q else "-",
                    amount(q.resource, q.borrowed) if q else "-",
                    amount(q.resource, q.admitted) if q else "-",
                    amount(q.resource, q.lendable) if q and row.cohort else "-",
                    str(row.admitted) if first else "",
                    str(row.pending) if first else "",
                    (f"{oldest.namespace}/{oldest.name}: {oldest.cause}" if oldest else "-") if first else "",
                ]
            )
    return _table(table)


def workloads_table(rows: list[TeamStatus]) -> str:
    """``kgov status --team T``: a line per workload with its state in one phrase."""
    table = [["NAMESPACE", "WORKLOAD", "OWNER", "PRIORITY", "CREATED", "STATE", "CAUSE"]]
    for line in team_workloads(rows):
        table.append(
            [line.namespace, line.name, line.owner, str(line.priority), line.created, line.state, line.cause or "-"]
        )
    return _table(table)
