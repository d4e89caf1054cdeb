"""``kgov why`` and ``kgov status``: click commands over :mod:`webhook.why`.

Both read the cluster once (:func:`webhook.why.snapshot.read_snapshot`, through the one client
loader of :mod:`webhook.kube.client`) or a recorded snapshot (``--snapshot FILE``: the JSON document of
:meth:`~webhook.why.snapshot.Snapshot.from_dump`). Exit codes: 0 answered; 2 usage error, an
unreadable cluster or file, or an object that does not exist. What the user types and ends up in
an API path (KIND/NAME, -n) is checked before anything is read.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, NoReturn

import click

from webhook.cli.common import configmap_reference
from webhook.cli.errors import fail, warn
from webhook.cli.options import NAMESPACE, OutputError, check_output_file, file_option, write_output
from webhook.core.kueue.kinds import KINDS, WorkloadKind
from webhook.core.platform.fields import dns1123_subdomain_error, label_value_error
from webhook.core.platform.platform import PlatformError
from webhook.core.platform.policy import PolicySet
from webhook.core.platform.resolve import TeamIndex
from webhook.core.platform.yamlload import DuplicateKeyError, no_duplicate_pairs
from webhook.kube.client import context_namespace
from webhook.kube.files import POLICY_KEY, InputError, load_policies
from webhook.why.decision import decide, widenings
from webhook.why.explain import WhyReport, explain
from webhook.why.owners import explain_object
from webhook.why.report import to_json, to_text
from webhook.why.snapshot import (
    POLICY_CONFIGMAP,
    ClusterError,
    ShapeError,
    Snapshot,
    find_workload_kind,
    owner_of,
    read_snapshot,
)
from webhook.why.status import status_json, status_table, team_statuses, workloads_table

__all__ = ["status_command", "why_command"]

_EXIT_CODES = """\b
Exit codes:
  0  answered
  2  usage error, a cluster or file that cannot be read, or an object that does not exist
"""


def _team_name(value: str | None, param: click.Parameter) -> str | None:
    """--team is a ClusterQueue name (DNS-1123 subdomain) or a team label value: refuse anything else."""
    if value is None:
        return None
    if dns1123_subdomain_error(value) and label_value_error(value):
        raise click.BadParameter(
            f"{value!r} is neither a ClusterQueue name (a DNS-1123 subdomain) nor a label value "
            "(at most 63 of [A-Za-z0-9-_.], starting and ending with a letter or digit)",
            param=param,
        )
    return value


def _teams(snapshot: Snapshot, platform: Path | None, policy: Path | None) -> TeamIndex | None:
    """The policy: from --platform/--policy, else the cluster's kgov-policy ConfigMap, else None."""
    if platform is not None or policy is not None:
        try:
            return TeamIndex(load_policies(platform, policy))
        except (PlatformError, InputError) as exc:
            fail(str(exc))
    text = ((snapshot.policy or {}).get("data") or {}).get(POLICY_KEY)
    if not isinstance(text, str):
        if snapshot.policy is not None:
            snapshot.notes.append(f"the kgov-policy ConfigMap has no data key {POLICY_KEY}: the policy is not known")
        return None
    try:
        return TeamIndex(PolicySet.model_validate(json.loads(text, object_pairs_hook=no_duplicate_pairs)))
    except (ValueError, DuplicateKeyError) as exc:
        snapshot.notes.append(f"the kgov-policy ConfigMap's {POLICY_KEY} is not a valid policy: {exc}")
        return None


kubeconfig_option = file_option(
    "--kubeconfig",
    help="Cluster to read (default, as kubectl: the files of $KUBECONFIG, else ~/.kube/config).",
)
snapshot_option = file_option(
    "--snapshot",
    "snapshot_file",
    help="Read a recorded snapshot (JSON: nodes, pods, workloads, clusterqueues, … as lists) instead of a cluster.",
)


_WORKLOAD_NAMES = ("workload", "workloads", "workload.kueue.x-k8s.io", "workloads.kueue.x-k8s.io", "wl")


def _parse_target(target: str) -> tuple[WorkloadKind | None, str]:
    """KIND/NAME → (kinds-table row, None for a Kueue Workload; NAME), refusing anything else as a
    usage error: NAME goes into an API path, so it must be an object name (DNS-1123 subdomain)."""

    def bad(message: str) -> NoReturn:
        raise click.BadParameter(message, param_hint="'KIND/NAME'")

    kind_name, slash, name = target.partition("/")
    if not slash or not kind_name or not name:
        bad(f"{target!r}: give KIND/NAME, e.g. job/train or workload/job-train-1a2b3")
    row = None if kind_name.lower() in _WORKLOAD_NAMES else find_workload_kind(kind_name)
    if row is None and kind_name.lower() not in _WORKLOAD_NAMES:
        known = ", ".join(sorted({r.resource.removesuffix("s") for r in KINDS}))
        bad(f"{kind_name!r} is not a kind Kueue manages ({known}; see `kgov chart kinds`), nor workload")
    if "/" in name:
        bad(f"{target!r}: one KIND/NAME, and NAME has no '/' ({name!r})")
    problem = dns1123_subdomain_error(name)
    if problem:
        bad(f"{target!r}: NAME {problem}")
    return row, name


@click.command("why", epilog=_EXIT_CODES)
@click.argument("target", metavar="KIND/NAME")
@click.option(
    "-n",
    "--namespace",
    type=NAMESPACE,
    help="Namespace of the object (default, as kubectl: the kubeconfig context's namespace, else default).",
)
@kubeconfig_option
@snapshot_option
@file_option(
    "--platform",
    help="Platform file (default: the cluster's kgov-policy ConfigMap).",
)
@file_option("--policy", help="Compiled policy file instead of --platform.")
@click.option(
    "--policy-configmap",
    metavar="[NAMESPACE/]NAME",
    default="/".join(POLICY_CONFIGMAP),
    show_default=True,
    help="The policy ConfigMap to read from the cluster (the chart's is RELEASE-kueue-governor-policy).",
)
@click.option("-o", "--output", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def why_command(
    target: str,
    namespace: str | None,
    kubeconfig: Path | None,
    snapshot_file: Path | None,
    platform: Path | None,
    policy: Path | None,
    policy_configmap: str,
    fmt: str,
) -> None:
    """Why a workload is pending (or where it stands): state, quota, topology, cause, what would help.

    KIND/NAME is a workload object (job/train, pytorchjob/x, jobset.jobset.x-k8s.io/y…) or
    workload/NAME for a Kueue Workload; NAME is an object name (DNS-1123 subdomain) and the
    namespace a DNS-1123 label.
    """
    row, name = _parse_target(target)
    if namespace is None:
        namespace = "default" if snapshot_file is not None else _context_namespace(kubeconfig)
    snapshot = _read(
        kubeconfig,
        snapshot_file,
        target=(row, namespace, name) if row is not None else None,
        workload_name=(namespace, name) if row is None else None,
        policy_configmap=configmap_reference(policy_configmap, POLICY_CONFIGMAP[0]),
    )
    report = _report(snapshot, row.kind if row else "Workload", namespace, name, platform, policy)
    click.echo(json.dumps(to_json(report), indent=2) if fmt == "json" else to_text(report), nl=fmt == "json")


def _context_namespace(kubeconfig: Path | None) -> str:
    """The kubeconfig context's namespace (exits 2 with the reason when the kubeconfig cannot be read)."""
    try:
        return context_namespace(kubeconfig)
    except ClusterError as exc:
        fail(str(exc))


def _read(
    kubeconfig: Path | None,
    snapshot_file: Path | None,
    target: tuple[WorkloadKind, str, str] | None = None,
    workload_name: tuple[str, str] | None = None,
    policy_configmap: tuple[str, str] = POLICY_CONFIGMAP,
) -> Snapshot:
    """The recorded snapshot, else one read of the cluster; exits 2 with the reason when neither can be read."""
    try:
        if snapshot_file is not None:
            return Snapshot.from_file(snapshot_file)
        return asyncio.run(read_snapshot(kubeconfig, target, workload_name, policy_configmap))
    except ClusterError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"--snapshot {snapshot_file}: cannot read: {exc.strerror or exc}")
    except (ShapeError, DuplicateKeyError) as exc:
        fail(f"--snapshot {snapshot_file}: {exc}")
    except (ValueError, RecursionError) as exc:
        fail(f"--snapshot {snapshot_file}: not a snapshot (JSON with lists of objects): {exc}")


def _report(
    snapshot: Snapshot, kind: str, namespace: str, name: str, platform: Path | None, policy: Path | None
) -> WhyReport:
    if kind == "Workload":
        workload = snapshot.workload(namespace, name)
        if workload is None:
            fail(f"Workload {namespace}/{name} not found")
        report = explain(snapshot, workload, "Workload", namespace, name)
        obj = _owner(snapshot, workload, namespace, report)
    else:
        obj = snapshot.target or snapshot.find_object(kind, namespace, name)
        if obj is None:
            fail(f"{kind} {namespace}/{name} not found")
        report = explain_object(snapshot, obj, kind, namespace, name)
    if obj is not None:
        report.widened = widenings(obj)
        teams = _teams(snapshot, platform, policy)
        if teams is not None:
            report.decision = decide(obj, teams, snapshot.namespace_labels(namespace), snapshot.nodes)
    report.notes.extend(snapshot.notes)
    return report


def _owner(snapshot: Snapshot, workload: dict[str, Any], namespace: str, report: WhyReport) -> dict[str, Any] | None:
    """The object a Workload asked about directly was made for (the policy reviews it, not the
    Workload); None with ``report.policy_note`` saying why there is none to review."""
    ref, row = owner_of(workload)
    if ref is None:
        report.policy_note = "not reviewed: the Workload has no owner (made directly, not by Kueue for an object)"
        return None
    owner = f"{ref.get('kind')} {namespace}/{ref.get('name')}"
    if row is None:
        report.policy_note = (
            f"not reviewed: its owner {owner} ({ref.get('apiVersion')}) is not a kind the webhook reviews"
        )
        return None
    found = snapshot.find_object(row.kind, namespace, str(ref.get("name") or ""))
    if found is None:
        report.policy_note = f"not reviewed: its owner {owner} could not be read (deleted, or not in the snapshot)"
        return None
    report.policy_owner = f"{row.kind} {namespace}/{ref.get('name')}"
    return found


@click.command("status", epilog=_EXIT_CODES)
@kubeconfig_option
@snapshot_option
@click.option(
    "--team",
    callback=lambda ctx, param, value: _team_name(value, param),
    help="List this team's workloads (its kueue-governor.io/team label or ClusterQueue name).",
)
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json", "png"]), default="table", show_default=True)
@file_option("--out", "out_file", help="Write here (png: default kgov-status.png).")
@file_option("-f", "--file", "legacy_file", hidden=True)
def status_command(
    kubeconfig: Path | None,
    snapshot_file: Path | None,
    team: str | None,
    fmt: str,
    out_file: Path | None,
    legacy_file: Path | None,
) -> None:
    """Each team's quota, borrowing, usage and pending work, from its ClusterQueue's status."""
    if legacy_file is not None:
        warn(f"-f {legacy_file} is deprecated: give --out {legacy_file} (-f names an input in every command)")
        out_file = out_file or legacy_file
    if fmt == "png" and out_file is None:
        out_file = Path("kgov-status.png")
    if out_file is not None:
        check_output_file(out_file, "--out")
        named = {".png": "png", ".json": "json"}.get(out_file.suffix.lower())
        if (named is not None and named != fmt) or (fmt == "png" and out_file.suffix.lower() not in ("", ".png")):
            fail(
                f"--out {out_file}: a {out_file.suffix or 'suffixless'} file, but -o {fmt}; give a matching -o or --out"
            )
    snapshot = _read(kubeconfig, snapshot_file)
    rows = team_statuses(snapshot, team)
    if team is not None and not rows:
        fail(f"no ClusterQueue of team {team!r}")
    if fmt == "png":
        from webhook.why.picture import render_status_picture

        assert out_file is not None
        try:
            render_status_picture(rows, out_file)
        except OSError as exc:
            raise OutputError(f"--out {out_file}: cannot write: {exc.strerror or exc}") from None
        click.echo(f"wrote {out_file}" + (f" ({out_file.resolve()})" if not out_file.is_absolute() else ""), err=True)
        return
    text: Any = json.dumps(status_json(rows), indent=2) + "\n" if fmt == "json" else status_table(rows)
    if team is not None and fmt == "table":
        text += "\n" + workloads_table(rows)
    if out_file is not None:
        write_output(out_file, text, "--out")
    else:
        click.echo(text, nl=False)
