"""``kgov why`` and ``kgov status``: click commands over :mod:`webhook.why`.

Both read the cluster once (:func:`webhook.why.snapshot.read_snapshot`, the same client layer as
``kgov topology``) or a recorded snapshot (``--snapshot FILE``: the JSON document of
:meth:`~webhook.why.snapshot.Snapshot.from_dump`). Exit codes: 0 answered; 2 usage error, an
unreadable cluster or file, or an object that does not exist.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from webhook.core.platform import PlatformError
from webhook.core.policy import PolicySet
from webhook.core.resolve import TeamIndex
from webhook.sources import POLICY_KEY, InputError, load_policies
from webhook.why.decision import decide
from webhook.why.explain import WhyReport, explain
from webhook.why.owners import explain_object
from webhook.why.report import to_json, to_text
from webhook.why.snapshot import ClusterError, Snapshot, find_workload_kind, read_snapshot
from webhook.why.status import status_json, status_table, team_statuses, workloads_table

__all__ = ["status_command", "why_command"]

_EXIT_CODES = """\b
Exit codes:
  0  answered
  2  usage error, a cluster or file that cannot be read, or an object that does not exist
"""


def _fail(message: str) -> NoReturn:
    click.echo(f"kgov: {message}", err=True)
    sys.exit(2)


def _kubeconfig(kubeconfig: Path | None) -> str:
    if kubeconfig is not None:
        return str(kubeconfig)
    configured = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return configured or str(Path.home() / ".kube" / "config")


def _teams(snapshot: Snapshot, platform: Path | None, policy: Path | None) -> TeamIndex | None:
    """The policy: from --platform/--policy, else the cluster's kgov-policy ConfigMap, else None."""
    if platform is not None or policy is not None:
        try:
            return TeamIndex(load_policies(platform, policy))
        except (PlatformError, InputError) as exc:
            _fail(str(exc))
    text = ((snapshot.policy or {}).get("data") or {}).get(POLICY_KEY)
    if not isinstance(text, str):
        return None
    try:
        return TeamIndex(PolicySet.model_validate(json.loads(text)))
    except ValueError as exc:
        snapshot.notes.append(f"the kgov-policy ConfigMap's {POLICY_KEY} is not a valid policy: {exc}")
        return None


kubeconfig_option = click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Cluster to read (default: $KUBECONFIG, ~/.kube/config).",
)
snapshot_option = click.option(
    "--snapshot",
    "snapshot_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read a recorded snapshot (JSON: nodes, pods, workloads, clusterqueues, … as lists) instead of a cluster.",
)


@click.command("why", epilog=_EXIT_CODES)
@click.argument("target", metavar="KIND/NAME")
@click.option("-n", "--namespace", default="default", show_default=True, help="Namespace of the object.")
@kubeconfig_option
@snapshot_option
@click.option(
    "--platform",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Platform file (default: the cluster's kgov-policy ConfigMap).",
)
@click.option(
    "--policy", type=click.Path(dir_okay=False, path_type=Path), help="Compiled policy file instead of --platform."
)
@click.option("-o", "--output", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def why_command(
    target: str,
    namespace: str,
    kubeconfig: Path | None,
    snapshot_file: Path | None,
    platform: Path | None,
    policy: Path | None,
    fmt: str,
) -> None:
    """Why a workload is pending (or where it stands): state, quota, topology, cause, what would help.

    KIND/NAME is a workload object (job/train, pytorchjob/x, jobset.jobset.x-k8s.io/y…) or
    workload/NAME for a Kueue Workload.
    """
    kind_name, slash, name = target.partition("/")
    if not slash or not kind_name or not name:
        _fail(f"{target!r}: give KIND/NAME, e.g. job/train or workload/job-train-1a2b3")
    direct = kind_name.lower() in ("workload", "workloads", "workload.kueue.x-k8s.io", "wl")
    row = None if direct else find_workload_kind(kind_name)
    if not direct and row is None:
        _fail(f"{kind_name!r} is not a kind Kueue manages (see `kgov chart kinds`), nor workload")
    try:
        if snapshot_file is not None:
            snapshot = Snapshot.from_file(snapshot_file)
        else:
            snapshot = asyncio.run(
                read_snapshot(
                    _kubeconfig(kubeconfig),
                    target=(row, namespace, name) if row is not None else None,
                    workload_name=(namespace, name) if row is None else None,
                )
            )
    except (ClusterError, OSError, ValueError) as exc:
        _fail(str(exc))
    report = _report(snapshot, row.kind if row else "Workload", namespace, name, platform, policy)
    click.echo(json.dumps(to_json(report), indent=2) if fmt == "json" else to_text(report), nl=fmt == "json")


def _report(
    snapshot: Snapshot, kind: str, namespace: str, name: str, platform: Path | None, policy: Path | None
) -> WhyReport:
    if kind == "Workload":
        workload = snapshot.workload(namespace, name)
        if workload is None:
            _fail(f"Workload {namespace}/{name} not found")
        return explain(snapshot, workload, "Workload", namespace, name)
    obj = snapshot.target or snapshot.find_object(kind, namespace, name)
    if obj is None:
        _fail(f"{kind} {namespace}/{name} not found")
    report = explain_object(snapshot, obj, kind, namespace, name)
    teams = _teams(snapshot, platform, policy)
    if teams is not None:
        report.decision = decide(obj, teams, snapshot.namespace_labels(namespace), snapshot.nodes)
    report.notes.extend(snapshot.notes)
    return report


@click.command("status", epilog=_EXIT_CODES)
@kubeconfig_option
@snapshot_option
@click.option("--team", help="List this team's workloads (its kueue-governor.io/team label or ClusterQueue name).")
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json", "png"]), default="table", show_default=True)
@click.option(
    "-f",
    "--file",
    "out_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write here (png: default kgov-status.png).",
)
def status_command(
    kubeconfig: Path | None, snapshot_file: Path | None, team: str | None, fmt: str, out_file: Path | None
) -> None:
    """Each team's quota, borrowing, usage and pending work, from its ClusterQueue's status."""
    try:
        snapshot = (
            Snapshot.from_file(snapshot_file) if snapshot_file else asyncio.run(read_snapshot(_kubeconfig(kubeconfig)))
        )
    except (ClusterError, OSError, ValueError) as exc:
        _fail(str(exc))
    rows = team_statuses(snapshot, team)
    if team is not None and not rows:
        _fail(f"no ClusterQueue of team {team!r}")
    if fmt == "png":
        from webhook.why.picture import render_status_picture

        target = out_file or Path("kgov-status.png")
        render_status_picture(rows, target)
        click.echo(f"wrote {target}", err=True)
        return
    text: Any = json.dumps(status_json(rows), indent=2) + "\n" if fmt == "json" else status_table(rows)
    if team is not None and fmt == "table":
        text += "\n" + workloads_table(rows)
    if out_file is not None:
        out_file.write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)
