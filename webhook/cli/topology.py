"""``kgov topology`` and ``kgov topology label`` (click commands, SPEC §9).

Exit codes: 0 success; 2 usage error, an input file that cannot be used, or a cluster that
cannot be read or labelled.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click

from webhook.cli.errors import CommandError, say, warn
from webhook.cli.options import OBJECT_NAME, check_output_file, file_option, write_output
from webhook.core.platform.platform import Platform, PlatformError, load_platform
from webhook.core.platform.yamlload import DuplicateKeyError, locate_duplicate, no_duplicate_pairs
from webhook.kube.files import InputError, load_objects
from webhook.topology.ec2 import (
    TopologyDocumentError,
    kubectl_commands,
    parse_instance_topology,
    plan_labels,
)
from webhook.topology.picture import FORMATS as PICTURE_FORMATS
from webhook.topology.render import render_json, render_table, render_tree
from webhook.topology.tree import TopologyTree, default_levels, pick_resource

__all__ = ["topology_group"]

TEXT_FORMATS = ("table", "tree", "json")
_ALL_FORMATS = (*TEXT_FORMATS, *PICTURE_FORMATS)
_EXIT_CODES = """\b
Exit codes:
  0  success
  2  usage error, an input file that cannot be used, or a cluster that cannot be read or written
"""


UsageFailure = CommandError


def _load_platform(platform: Path) -> Platform:
    try:
        return load_platform(platform)
    except PlatformError as exc:
        raise UsageFailure(str(exc)) from None


def _platform_tolerations(spec: Platform) -> list[dict[str, Any]]:
    """The tolerations of the platform's flavors (its ResourceFlavors'), as Kubernetes writes them."""
    return [t.model_dump(exclude_none=True) for flavor in spec.flavors for t in flavor.tolerations]


def _platform_levels(spec: Platform, platform: Path, name: str) -> list[str]:
    for topology in spec.topologies:
        if topology.name == name:
            return list(topology.levels)
    known = ", ".join(t.name for t in spec.topologies) or "none"
    raise UsageFailure(f"{platform}: no topology {name!r} (known: {known})")


def _write(output: Path | None, content: str | bytes) -> None:
    if output is None:
        if isinstance(content, bytes):
            sys.stdout.buffer.write(content)
        else:
            click.echo(content, nl=False)
        return
    write_output(output, content, "--out")


@click.group(
    "topology",
    invoke_without_command=True,
    epilog=_EXIT_CODES,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@file_option(
    "--kubeconfig",
    help="Read the live cluster (default without --nodes, as kubectl: $KUBECONFIG, else ~/.kube/config).",
)
@file_option("--nodes", "nodes_file", help="`kubectl get nodes -o json` dump instead of a live cluster.")
@file_option(
    "--pods",
    "pods_file",
    help="`kubectl get pods -A -o json` dump: requests of pods bound to the nodes are not free (with --nodes).",
)
@click.option(
    "--topology",
    "topology_name",
    type=OBJECT_NAME,
    help="Levels of this Kueue Topology: from --platform if given, else from the cluster. "
    "Default: the AWS network-node layer labels.",
)
@file_option(
    "--platform",
    help="Platform file whose topologies --topology names; its flavors' tolerations decide which "
    "tainted nodes count (default: the cluster's ResourceFlavors, none with --nodes).",
)
@click.option(
    "--resource",
    help="Accelerator resource to count (default: the first of nvidia.com/gpu, amd.com/gpu, "
    "aws.amazon.com/neuron… the nodes have).",
)
@click.option(
    "-o",
    "--output",
    "fmt",
    metavar="|".join([*TEXT_FORMATS, *PICTURE_FORMATS]),
    help="Output format (default: the one --out's suffix names, .png, .svg or .json; else table).",
)
@file_option("--out", "output", help="Write here instead of stdout.")
@click.option("--format", "legacy_format", type=click.Choice([*TEXT_FORMATS, *PICTURE_FORMATS]), hidden=True)
@click.pass_context
def topology_group(
    ctx: click.Context,
    kubeconfig: Path | None,
    nodes_file: Path | None,
    pods_file: Path | None,
    topology_name: str | None,
    platform: Path | None,
    resource: str | None,
    fmt: str | None,
    output: Path | None,
    legacy_format: str | None,
) -> None:
    """Show the tree of network nodes: layer 1 > 2 > 3 > host.

    Per domain and host: nodes, nodes taking no new pods (NotReady, cordoned, tainted
    node.kubernetes.io/*, or with a NoSchedule/NoExecute taint no ResourceFlavor tolerates: only
    pods tolerating it go there), allocatable and free accelerators. Free is allocatable minus the
    requests of pods bound there and, read live, the usage of Workloads holding quota where their
    topology assignment puts it (as Kueue counts it); 0 on a node taking no new pods.
    """
    fmt, output = _format_and_file(fmt, output, legacy_format)
    if ctx.invoked_subcommand is not None:
        if any(
            v is not None for v in (kubeconfig, nodes_file, pods_file, topology_name, platform, resource, fmt, output)
        ):
            raise UsageFailure(
                f"options before `{ctx.invoked_subcommand}` belong to `kgov topology`; put them after it"
            )
        return
    if kubeconfig is not None and nodes_file is not None:
        raise UsageFailure("give one of --kubeconfig K (or $KUBECONFIG) or --nodes NODES.json, not both")
    if pods_file is not None and nodes_file is None:
        raise UsageFailure("--pods is for --nodes; read live, the bound pods come from the cluster")
    if topology_name is not None and platform is None and nodes_file is not None:
        raise UsageFailure("--topology NAME with --nodes needs --platform F (read live, the Topology object is used)")
    _check_output(output)
    fmt = _output_format(output, fmt)
    if nodes_file is None:
        _check_kubeconfig(kubeconfig)
    if fmt in PICTURE_FORMATS and output is None and sys.stdout.isatty():
        raise UsageFailure(
            f"-o {fmt} writes an image, not text for a terminal: give --out FILE.{fmt} (or redirect stdout)"
        )

    spec = _load_platform(platform) if platform is not None else None
    levels = _platform_levels(spec, platform, topology_name) if spec and platform and topology_name else None
    tolerations = _platform_tolerations(spec) if spec is not None else []
    pods: list[dict[str, Any]] = []
    workloads: list[dict[str, Any]] | None = None
    try:
        if nodes_file is not None:
            nodes = load_objects(nodes_file, "Node")
            pods = load_objects(pods_file, "Pod") if pods_file is not None else []
        else:
            from webhook.topology.live import ClusterError, read_cluster

            try:
                state = asyncio.run(read_cluster(kubeconfig, topology_name if levels is None else None))
            except ClusterError as exc:
                raise UsageFailure(str(exc)) from None
            for note in state.notes:
                say(note)
            nodes, pods, workloads = state.nodes, state.pods, state.workloads
            levels = levels if levels is not None else (state.levels or None)
            tolerations = tolerations if platform is not None else state.tolerations
    except InputError as exc:
        raise UsageFailure(str(exc)) from None

    if resource is not None:
        _check_resource(resource, nodes)
    tree = TopologyTree(
        nodes, levels if levels is not None else default_levels(nodes), resource or pick_resource(nodes), tolerations
    )
    tree.add_pods(pods, skip_tas_pods=workloads is not None)
    if workloads is not None:
        tree.add_workloads(workloads)
    if tree.unmatched_pods:
        count = len(tree.unmatched_pods)
        bound = f"{count} pod{'s are' if count != 1 else ' is'} bound"
        say(f"{bound} to nodes not in the inventory")
    for problem in tree.unmatched_assignments:
        say(f"Workload {problem}")

    if fmt in PICTURE_FORMATS:
        from webhook.topology.picture import render_picture

        if output is None:
            render_picture(tree, sys.stdout.buffer, fmt)
            return
        try:
            render_picture(tree, output, fmt)
        except OSError as exc:
            raise UsageFailure(f"--out {output}: cannot write: {exc.strerror}") from None
        return
    render = {"table": render_table, "tree": render_tree, "json": render_json}[fmt]
    _write(output, render(tree))


#: --out suffixes (lower case, no dot) → the format written without -o.
_SUFFIX_FORMATS = {
    **{fmt: fmt for fmt in PICTURE_FORMATS},
    "json": "json",
    "": "table",
    "txt": "table",
    "text": "table",
}


def _format_and_file(fmt: str | None, output: Path | None, legacy_format: str | None) -> tuple[str | None, Path | None]:
    """``-o FORMAT`` and ``--out FILE``; ``--format FORMAT`` and ``-o FILE`` as they were before ``-o``
    named a format everywhere: still taken, with a warning.

    Raises:
        UsageFailure: ``-o`` names no format while ``--out`` is given too.
    """
    legacy_file: Path | None = None
    if fmt is not None and fmt.lower() not in _ALL_FORMATS:
        if output is not None:
            raise UsageFailure(f"-o {fmt}: not a format ({'|'.join(_ALL_FORMATS)})")
        warn(f"-o {fmt} names a file: this is deprecated, give --out {fmt} (-o names the format)")
        check_output_file(Path(fmt), "--out")
        legacy_file, fmt = Path(fmt), None
    if legacy_format is not None:
        if fmt is not None and fmt.lower() != legacy_format:
            raise UsageFailure(f"--format {legacy_format} and -o {fmt}: give the format once, as -o")
        warn(f"--format {legacy_format} is deprecated: give -o {legacy_format}")
        fmt = legacy_format
    if legacy_file is not None:
        return fmt, legacy_file
    return (fmt.lower() if fmt is not None else None), output


def _output_format(output: Path | None, fmt: str | None) -> str:
    """The format to write: -o, else the one --out's suffix names (.png, .svg, .json; a table for
    .txt, .text, no suffix or stdout).

    Raises:
        UsageFailure: a suffix that names no format without -o (``--out out.gif`` got a text
            table), or one that names a format other than -o (``-o png --out t.svg``).
    """
    suffix = output.suffix.lower().lstrip(".") if output is not None else ""
    named = _SUFFIX_FORMATS.get(suffix)
    if fmt is None:
        if named is None:
            raise UsageFailure(
                f"--out {output}: {output.suffix if output is not None else ''} is not a format kgov topology writes "
                f"(.png, .svg, .json, or text: .txt or no suffix); or give -o {'|'.join(_ALL_FORMATS)}"
            )
        return named
    if suffix in ("json", *PICTURE_FORMATS) and named != fmt:
        wanted = f"FILE.{fmt}" if fmt in _SUFFIX_FORMATS else "FILE.txt"
        raise UsageFailure(f"--out {output}: a .{suffix} file, but -o {fmt}; give --out {wanted} or -o {named}")
    return fmt


def _check_output(output: Path | None) -> None:
    """Refuse an --out file whose directory does not exist, before the cluster is read."""
    if output is None:
        return
    try:
        check_output_file(output, "--out")
    except click.ClickException as exc:
        raise UsageFailure(exc.message) from None


def _check_kubeconfig(kubeconfig: Path | None) -> None:
    """Read live: the kubeconfig must be there (--kubeconfig, $KUBECONFIG or ~/.kube/config)."""
    from webhook.kube.client import ClusterError, kubeconfig_files

    try:
        kubeconfig_files(kubeconfig)
    except ClusterError as exc:
        raise UsageFailure(f"{exc} (or read a dump: --nodes NODES.json)") from None


def _check_resource(resource: str, nodes: list[dict[str, Any]]) -> None:
    """Refuse a --resource that no node has allocatable (a typo would count 0 everywhere)."""
    present = sorted({str(key) for node in nodes for key in ((node.get("status") or {}).get("allocatable") or {})})
    if nodes and resource not in present:
        raise UsageFailure(f"--resource {resource}: no node has it allocatable (the nodes have: {', '.join(present)})")


def _read_topology_document(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageFailure(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UsageFailure(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    try:
        return json.loads(text, object_pairs_hook=no_duplicate_pairs)
    except DuplicateKeyError as exc:
        raise UsageFailure(f"{path}: {locate_duplicate(text, exc)}") from None
    except json.JSONDecodeError as exc:
        raise UsageFailure(f"{path}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise UsageFailure(f"{path}: nested too deeply") from None


@topology_group.command("label", epilog=_EXIT_CODES)
@file_option(
    "--from",
    "source",
    required=True,
    help="`aws ec2 describe-instance-topology` output (JSON; an array of pages too).",
)
@file_option("--nodes", "nodes_file", help="`kubectl get nodes -o json` dump.")
@file_option(
    "--kubeconfig",
    help="Read (and with --apply, label) the live cluster (default without --nodes: $KUBECONFIG, ~/.kube/config).",
)
@click.option(
    "--apply", "apply_", is_flag=True, help="Label the nodes on the cluster instead of printing kubectl commands."
)
def label_command(source: Path, nodes_file: Path | None, kubeconfig: Path | None, apply_: bool) -> None:
    """Label nodes topology.k8s.aws/network-node-layer-N from EC2 DescribeInstanceTopology.

    Network node N of an instance (Instances[].NetworkNodes, broadest first; 3 or 4 of them)
    becomes layer N of the node whose spec.providerID names the instance (aws:///ZONE/i-...).
    Prints one `kubectl label` command per node to change (or applies the labels with --apply),
    then, on stderr, the instances with no node and the nodes with no instance.
    """
    if kubeconfig is not None and nodes_file is not None:
        raise UsageFailure("give one of --kubeconfig K (or $KUBECONFIG) or --nodes NODES.json, not both")
    if apply_ and nodes_file is not None:
        raise UsageFailure("--apply labels a live cluster: give --kubeconfig K (or $KUBECONFIG), not --nodes")
    if nodes_file is None:
        _check_kubeconfig(kubeconfig)
    try:
        instances = parse_instance_topology(_read_topology_document(source), str(source))
    except TopologyDocumentError as exc:
        raise UsageFailure(str(exc)) from None

    from webhook.topology.live import ClusterError, apply_labels, read_nodes

    try:
        nodes = load_objects(nodes_file, "Node") if nodes_file is not None else asyncio.run(read_nodes(kubeconfig))
    except (InputError, ClusterError) as exc:
        raise UsageFailure(str(exc)) from None
    plan = plan_labels(instances, nodes)
    if apply_:
        try:
            done = asyncio.run(apply_labels(kubeconfig, plan.changes))
        except ClusterError as exc:
            raise UsageFailure(str(exc)) from None
        for name in done:
            click.echo(f"node/{name} labeled")
    else:
        for command in kubectl_commands(plan):
            click.echo(command)
    report = [
        (plan.instances_without_node, "instances with no node"),
        (plan.nodes_without_instance, "nodes with no instance in the document"),
        (
            plan.instances_without_topology,
            "instances EC2 gave no network nodes for (not running, or a type without topology)",
        ),
    ]
    for names, what in report:
        if names:
            say(f"{len(names)} {what}: {', '.join(names)}")
    verb = "labelled" if apply_ else "to label"
    counts = f"{len(plan.changes)} {verb}, {len(plan.unchanged)} already labelled"
    say(f"{len(instances)} instances, {len(nodes)} nodes: {counts}")
