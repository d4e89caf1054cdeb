"""``kgov why`` output: a readable report, or the same facts as JSON (``-o json``).

JSON shape (amounts in base units: GPUs, CPU cores, bytes)::

    {"object": {"kind", "namespace", "name"}, "workload": str | null,
     "state": {"state", "reason", "message", "since", "created", "times": {condition: time}},
     "cause": str, "summary": str, "helps": [str],
     "queue": {"localQueue", "clusterQueue", "cohort", "queueingStrategy", "priority", "priorityClass",
               "position": {"inClusterQueue", "inLocalQueue", "source", "ahead": [...]} | null},
     "quota": [{"flavor", "resource", "needed", "reserved", "admitted", "nominal", "borrowingLimit",
                "lendingLimit", "borrowed", "available", "potential", "cohortAvailable"}],
     "topology": [{"podset", "flavor", "topology", "levels", "mode", "level", "count", "perPod", "kueueNodes",
                   "excluded": {cause: nodes}, "kueueExcluded": {cause: nodes} | null,
                   "largestNow": [{"level", "domain", "pods", "nodes"}], "largestEmpty": [...],
                   "assigned": [{"node", "pods"}] | null, "assignedDomains": [str]}],
                  (a workload holding quota: "assigned" is where Kueue placed it, and "excluded",
                  "largestNow" are empty: its own nodes are not free room for it)
     "decision": {"team", "teamReason", "rules": [{"rule", "path", "stored", "policy", "by", "reason", "setBy"}],
                  "warnings", "denials", "skipped", "owner": str | null} | null,
     "policyNote": str | null (why there is no decision, for a Workload asked about directly),
     "owned": [{"name", "owner", "state", "cause", "summary"}],
     "widened": [{"podsets", "from", "to", "at", "reason"}] (the governor's topology widenings, oldest first),
     "notes": [str]}
"""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from typing import Any

from webhook.why.causes import amount, level_name, plural
from webhook.why.explain import WhyReport
from webhook.why.placement import DomainFit, PodsetPlacement

__all__ = ["number", "to_json", "to_text"]


def number(value: Decimal | None) -> int | float | None:
    """A JSON number: an int when whole."""
    if value is None:
        return None
    return int(value) if value == value.to_integral_value() else float(value)


def _text_assigned(p: PodsetPlacement) -> list[str]:
    """Where Kueue placed a podset of a workload holding quota."""
    if not p.assigned:
        return ["  placed by Kueue: no topologyAssignment recorded"]
    nodes = ", ".join(f"{node} ({plural(pods, 'pod')})" for node, pods in p.assigned)
    within = f"{level_name(p.level)} {', '.join(p.assigned_domains)}: " if p.assigned_domains else ""
    return [f"  placed by Kueue (topologyAssignment): {within}{nodes}"]


def _fits(fits: list[DomainFit]) -> list[dict[str, Any]]:
    return [{"level": f.level, "domain": f.domain, "pods": f.pods, "nodes": f.nodes} for f in fits]


def to_json(report: WhyReport) -> dict[str, Any]:
    """The report as plain JSON data (see the module docstring)."""
    state = report.state
    position = report.position
    kueue_excluded = state.tas_message.excluded if state and state.tas_message else None
    return {
        "object": {"kind": report.kind, "namespace": report.namespace, "name": report.name},
        "workload": report.workload,
        "state": dataclasses.asdict(state) if state else None,
        "cause": report.cause,
        "summary": report.summary,
        "helps": report.helps,
        "queue": {
            "localQueue": report.local_queue,
            "clusterQueue": report.cluster_queue,
            "cohort": report.cohort,
            "queueingStrategy": report.queueing_strategy,
            "priority": report.priority,
            "priorityClass": report.priority_class,
            "position": {
                "inClusterQueue": position.in_cluster_queue,
                "inLocalQueue": position.in_local_queue,
                "source": position.source,
                "ahead": position.ahead,
            }
            if position
            else None,
        },
        "quota": [
            {
                "flavor": n.quota.flavor,
                "resource": n.quota.resource,
                "needed": number(n.needed),
                "reserved": number(n.quota.reserved),
                "admitted": number(n.quota.admitted),
                "nominal": number(n.quota.nominal),
                "borrowingLimit": number(n.quota.borrowing_limit),
                "lendingLimit": number(n.quota.lending_limit),
                "borrowed": number(n.quota.borrowed),
                "available": number(n.quota.available),
                "potential": number(n.quota.potential),
                "cohortAvailable": number(n.quota.cohort_available),
            }
            for n in report.quota
        ],
        "topology": [
            {
                "podset": podset,
                "flavor": p.flavor,
                "topology": p.topology,
                "levels": p.levels,
                "mode": p.mode,
                "level": p.level,
                "count": p.count,
                "perPod": {r: number(a) for r, a in p.per_pod.items()},
                "kueueNodes": p.kueue_nodes,
                "excluded": p.excluded,
                "kueueExcluded": kueue_excluded,
                "largestNow": _fits(p.fit_now),
                "largestEmpty": _fits(p.fit_empty),
                "assigned": [{"node": node, "pods": pods} for node, pods in p.assigned]
                if p.assigned is not None
                else None,
                "assignedDomains": p.assigned_domains,
            }
            for podset, p in report.placements
        ],
        "decision": _decision(report),
        "policyNote": report.policy_note or None,
        "owned": [dataclasses.asdict(line) for line in report.owned],
        "widened": report.widened,
        "notes": report.notes,
    }


def _decision(report: WhyReport) -> dict[str, Any] | None:
    decision = report.decision
    if decision is None:
        return None
    return {
        "team": decision.team,
        "teamReason": decision.team_reason,
        "rules": [
            {
                "rule": rule.rule,
                "path": rule.path,
                "stored": rule.stored,
                "policy": rule.policy,
                "by": rule.by,
                "reason": rule.reason,
                "setBy": rule.set_by,
            }
            for rule in decision.rules
        ],
        "warnings": decision.warnings,
        "denials": decision.denials,
        "skipped": decision.skipped,
        "owner": report.policy_owner or None,
    }


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def _short_value(value: Any) -> str:
    """A stored value in one line: strings as they are, anything else as compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)


def _text_decision(report: WhyReport) -> list[str]:
    decision = report.decision
    if decision is None:
        if report.policy_note:
            return [f"Policy: {report.policy_note}"]
        return ["Policy: not known (no kgov-policy ConfigMap readable; give --platform or --policy)"]
    policy = f"Policy (for its owner {report.policy_owner})" if report.policy_owner else "Policy"
    if decision.team is None:
        return [f"{policy}: no team ({decision.skipped or decision.team_reason}): the webhook leaves it alone"]
    lines = [f"{policy}: team {decision.team} ({decision.team_reason})"]
    for rule in decision.rules:
        if rule.by == "policy":
            lines.append(f"  {rule.rule}: {rule.path} set by the policy: {rule.reason}")
        elif rule.by == "user":
            who = ", ".join(rule.set_by)
            lines.append(
                f"  {rule.rule}: {rule.path} = {_short_value(rule.stored)} set by the user ({who}), {rule.reason}"
            )
        elif rule.by == "unrecorded" and rule.policy is None:
            lines.append(
                f"  {rule.rule}: {rule.path} = {_short_value(rule.stored)}, {rule.reason}; set by the policy or "
                "the user (the object has no managedFields to tell)"
            )
        elif rule.by == "unrecorded":
            lines.append(
                f"  {rule.rule}: {rule.path} is the policy's value ({rule.reason}); set by the policy or the user "
                "(the object has no managedFields to tell)"
            )
        else:
            stored = "not set" if rule.stored is None else f"{_short_value(rule.stored)}"
            lines.append(f"  {rule.rule}: {rule.path} is {stored}, not the policy's: {rule.reason}")
    lines.extend(f"  warning: {w}" for w in decision.warnings)
    lines.extend(f"  would be denied now: {d}" for d in decision.denials)
    return lines


def to_text(report: WhyReport) -> str:
    """The readable report."""
    lines = [
        f"{report.kind} {report.namespace}/{report.name}"
        + (f" (Workload {report.workload})" if report.workload and report.kind != "Workload" else "")
    ]
    state = report.state
    if state is not None:
        lines.append(f"State: {state.state} since {state.since} (created {state.created})")
        if state.message:
            lines.append(f"  Kueue: {state.message}")
        if state.earlier:
            lines.append(f"  earlier: {state.earlier}")
    lines.append(f"Cause: {report.cause}: {report.summary}" if report.cause else f"Summary: {report.summary}")
    if report.owned:
        lines.append(
            f"Workloads: {len(report.owned)} (Kueue makes them for what it owns; this report is on "
            f"{report.workload}; for another: kgov why workload/NAME -n {report.namespace})"
        )
        rows = [["WORKLOAD", "OWNER", "STATE", "CAUSE"]]
        rows.extend([line.name, line.owner, line.state, line.cause or "-"] for line in report.owned)
        lines.extend(_table(rows))
    lines.extend(_text_decision(report))
    if report.widened:
        lines.append("Widened by the governor (topology patience):")
        lines.extend(
            f"  {step['at']} podset {', '.join(step['podsets'])}: {step['from']} -> {step['to']} ({step['reason']})"
            for step in report.widened
        )
    if report.cluster_queue:
        lines.append(
            f"Queue: LocalQueue {report.local_queue} -> ClusterQueue {report.cluster_queue}"
            f" (cohort {report.cohort or '-'}, {report.queueing_strategy}); priority {report.priority}"
            + (f" ({report.priority_class})" if report.priority_class else "")
        )
    if report.position is not None:
        where = report.position
        lines.append(
            f"  position {where.in_cluster_queue + 1} in the ClusterQueue ({where.source}); "
            f"{len(where.ahead)} pending ahead"
        )
    if report.quota:
        lines.append("Quota:")
        rows = [["FLAVOR", "RESOURCE", "NEEDS", "QUEUE USES", "NOMINAL", "MAY BORROW", "COHORT UNUSED", "AVAILABLE"]]
        for n in report.quota:
            q = n.quota
            rows.append(
                [
                    q.flavor,
                    q.resource,
                    amount(q.resource, n.needed),
                    amount(q.resource, q.reserved),
                    amount(q.resource, q.nominal),
                    amount(q.resource, q.borrowing_limit)
                    if q.borrowing_limit is not None
                    else ("-" if not report.cohort else "any"),
                    amount(q.resource, q.cohort_available) if q.cohort_available is not None else "-",
                    amount(q.resource, q.available),
                ]
            )
        lines.extend(_table(rows))
    for podset, p in report.placements:
        per_pod = ", ".join(f"{r} {amount(r, a)}" for r, a in p.per_pod.items() if r != "pods")
        lines.append(
            f"Topology: podset {podset}, {plural(p.count, 'pod')} ({per_pod} each), {p.mode}"
            + (f" {level_name(p.level)}" if p.level else "")
            + f", flavor {p.flavor}, topology {p.topology}"
        )
        if p.assigned is not None:
            lines.extend(_text_assigned(p))
            continue
        excluded = ", ".join(f"{k}: {v}" for k, v in p.excluded.items()) or "none"
        lines.append(f"  nodes in Kueue's TAS: {p.kueue_nodes}; excluded: {excluded}")
        if state is not None and state.tas_message is not None and state.tas_message.total_nodes is not None:
            kueue = ", ".join(f"{k}: {v}" for k, v in state.tas_message.excluded.items())
            lines.append(f"  Kueue says: total nodes {state.tas_message.total_nodes}; excluded: {kueue}")
        rows = [["LEVEL", "FREEST DOMAIN NOW", "PODS", "NODES", "PODS EMPTY"]]
        for now, empty in zip(p.fit_now, p.fit_empty, strict=True):
            mark = " <" if now.level == p.level else ""
            rows.append(
                [
                    level_name(now.level) + mark,
                    now.domain[-1] if now.domain else "-",
                    str(now.pods),
                    str(now.nodes),
                    str(empty.pods),
                ]
            )
        lines.extend(_table(rows))
    if report.helps:
        lines.append("What would help:")
        lines.extend(f"  - {h}" for h in report.helps)
    lines.extend(f"Note: {n}" for n in report.notes)
    return "\n".join(lines) + "\n"
