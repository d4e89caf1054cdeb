"""``kgov generate``, ``kgov diff`` and ``kgov import-hyperpod`` (click commands).

Exit codes of all three: 0 success (no drift), 1 validation failure or drift, 2 usage error
(bad option, unreadable input file, kubeconfig or cluster that cannot be used).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from webhook.cli.apply import apply_options, run_apply
from webhook.cli.errors import EXIT_NO, fail, warn
from webhook.cli.options import NAMESPACE, file_option
from webhook.core.platform.fields import label_value_error
from webhook.core.platform.platform import Platform, PlatformError, Problem, check_platform, load_platform
from webhook.generate.admission_policies import admission_policy_files
from webhook.generate.hyperpod import (
    DEFAULT_COHORT,
    ClusterSchedulerConfig,
    ComputeQuota,
    HyperPodError,
    import_hyperpod,
    parse_compute_quotas,
    parse_instance_resources,
    parse_scheduler_config,
)
from webhook.generate.live import diff_objects, fetch_live
from webhook.generate.manifests import DEFAULT_POLICY_NAMESPACE, TEAM_LABEL, GenerateOptions, build_manifests
from webhook.generate.recreate import recreate_warnings
from webhook.generate.render import (
    dump_yaml,
    file_drift,
    foreign_files,
    load_generated,
    render_files,
    source_reference,
    write_files,
)
from webhook.generate.validate import validate_platform
from webhook.kube.client import ClusterError
from webhook.kube.files import InputError, load_nodes, read_document

__all__ = ["diff_command", "generate_command", "import_hyperpod_command"]

DEFAULT_OUTPUT = Path("kueue-config/generated")


def _report(problems: list[Problem], platform_file: str = "", by_strict: frozenset[Problem] = frozenset()) -> None:
    """Warnings in the grammar. Errors end the command: exit 2 when the platform file itself is
    invalid; exit 1 ("the answer is no") when every error is one that only --strict made an error
    (``by_strict``: findings against --nodes)."""
    for problem in problems:
        if problem.severity != "error":
            warn(str(problem))
    errors = [problem for problem in problems if problem.severity == "error"]
    if not errors:
        return
    where = f"{platform_file}: " if platform_file else ""
    if all(problem in by_strict for problem in errors):
        fail(f"{where}the platform does not fit the nodes of --nodes (--strict)", EXIT_NO, [str(p) for p in errors])
    fail(f"{where}invalid platform file", details=[str(p) for p in errors])


def _holds_team_namespaces(output_dir: str) -> bool:
    """Whether the generated files in ``output_dir`` hold Namespaces of teams (``--namespaces``)."""
    return any(
        obj.get("kind") == "Namespace" and TEAM_LABEL in (obj.get("metadata", {}).get("labels") or {})
        for obj in load_generated(output_dir)
    )


def _load_and_validate(
    path: str, nodes_path: str | None, strict: bool, policy_namespace: str
) -> tuple[Platform, list[Problem], frozenset[Problem]]:
    """The platform, every finding, and the findings that are errors only because of ``strict``;
    exits 2 on a platform that cannot be loaded."""
    try:
        platform = load_platform(path)
    except PlatformError as exc:
        fail(str(exc))
    nodes = None
    if nodes_path is not None:
        try:
            nodes = load_nodes(nodes_path).nodes
        except InputError as exc:
            raise click.BadParameter(str(exc), param_hint="'--nodes'") from None
    problems = [p for p in check_platform(platform) if p.severity == "warning"]
    found = validate_platform(platform, nodes, strict=strict, policy_namespace=policy_namespace)
    by_strict: frozenset[Problem] = frozenset()
    if strict:
        lenient = validate_platform(platform, nodes, strict=False, policy_namespace=policy_namespace)
        warned = {(p.path, p.message) for p in lenient if p.severity == "warning"}
        by_strict = frozenset(p for p in found if p.severity == "error" and (p.path, p.message) in warned)
    return platform, problems + found, by_strict


_platform_argument = click.argument("platform_file", metavar="PLATFORM", type=click.Path(exists=True, dir_okay=False))
_namespaces_option = click.option(
    "--namespaces", is_flag=True, help="Also generate the teams' Namespace objects (namespaces.yaml)."
)
_policy_namespace_option = click.option(
    "--policy-namespace",
    type=NAMESPACE,
    default=DEFAULT_POLICY_NAMESPACE,
    show_default=True,
    help="Namespace of the webhook and of its policy ConfigMap kgov-policy.",
)


def _instance_value(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # An empty label value is valid, but an instance must be named: "" would select nothing of its own.
    if value is not None and (not value or label_value_error(value) is not None):
        raise click.BadParameter(
            f"{value!r} is not a label value (at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit)"
        )
    return value


_instance_option = click.option(
    "--instance",
    metavar="NAME",
    callback=_instance_value,
    help="Label every object app.kubernetes.io/instance=NAME; `kgov diff --instance NAME` then owns only "
    "the objects with that label (several platforms in one cluster). Default: no such label.",
)
_nodes_option = file_option(
    "--nodes",
    "nodes_path",
    exists=True,
    path_type=None,
    help="`kubectl get nodes -o json` output: check quotas against node capacity and topology labels.",
)
_strict_option = click.option(
    "--strict", is_flag=True, help="Capacity and topology-label findings from --nodes fail instead of warn."
)


@click.command(
    "generate",
    epilog="Exit codes: 0 files written or up to date; 1 with --check, the files on disk differ (the unified "
    "diff is printed); 2 usage error, an invalid platform file, or a file in --out that kgov did not write.",
)
@_platform_argument
@click.option(
    "--out",
    "output_dir",
    type=click.Path(file_okay=False),
    default=str(DEFAULT_OUTPUT),
    show_default=True,
    help="Directory of the generated files.",
)
@click.option("-o", "--output", "legacy_output", type=click.Path(file_okay=False), hidden=True)
@click.option("--force", is_flag=True, help="Overwrite files in --out that kgov did not write.")
@_nodes_option
@click.option("--check", is_flag=True, help="Write nothing; fail with a diff if the files on disk differ.")
@_strict_option
@_namespaces_option
@_policy_namespace_option
@_instance_option
@click.option(
    "--admission-policies",
    is_flag=True,
    help="Also generate MutatingAdmissionPolicies (admission-policies.yaml, Kubernetes >= 1.36) that fill in the "
    "team's queue label, Kueue priority and fixed topology level when the webhook is away.",
)
@apply_options
def generate_command(
    platform_file: str,
    output_dir: str,
    legacy_output: str | None,
    force: bool,
    nodes_path: str | None,
    check: bool,
    strict: bool,
    namespaces: bool,
    policy_namespace: str,
    instance: str | None,
    admission_policies: bool,
    apply: bool,
    kubeconfig: str | None,
    context: str | None,
    apply_field_manager: str,
) -> None:
    """Generate Kueue objects (kueue.x-k8s.io/v1beta2) and the webhook policy from PLATFORM.

    Writes one YAML file per kind (topologies, resourceflavors, cohorts, clusterqueues,
    localqueues, workloadpriorityclasses, priorityclasses, namespaces (the webhook's own; the
    teams' too with --namespaces),
    policy-configmap; admission-policies with --admission-policies) and a kustomization.yaml listing
    them: apply with `kubectl apply -k DIR`.
    Warns when a change to the files already there would need an object to be re-created.
    Refuses to overwrite a file of --out that it did not write, unless --force.
    With --apply, server-side applies the Kueue objects to the cluster instead (no files).
    """
    if legacy_output is not None:
        warn(f"-o {legacy_output} is deprecated: give --out {legacy_output} (-o names a format in every other command)")
        output_dir = legacy_output
    platform, problems, by_strict = _load_and_validate(platform_file, nodes_path, strict, policy_namespace)
    options = GenerateOptions(namespaces=namespaces, policy_namespace=policy_namespace, instance=instance)
    manifests = build_manifests(platform, options)
    if admission_policies:
        manifests.update(admission_policy_files(platform, policy_namespace, instance))
    desired = [obj for objects in manifests.values() for obj in objects]
    if apply and check:
        fail("--apply and --check exclude each other (`kgov diff` compares with the cluster)")
    if not apply:  # the files on disk are what --apply does not touch
        problems += recreate_warnings(desired, load_generated(output_dir), platform)
    _report(problems, platform_file, by_strict)
    if apply:
        run_apply(manifests, policy_namespace, kubeconfig, context, apply_field_manager)
        return
    files = render_files(manifests, source_reference(platform_file, output_dir))
    if check:
        drift = file_drift(files, output_dir)
        if drift:
            click.echo(drift, nl=False)
            flags = [
                *(["--namespaces"] if namespaces else []),
                *([f"--policy-namespace {policy_namespace}"] if policy_namespace != DEFAULT_POLICY_NAMESPACE else []),
                *([f"--instance {instance}"] if instance is not None else []),
                *(["--admission-policies"] if admission_policies else []),
            ]
            command = " ".join(["kgov generate", platform_file, "--out", output_dir, *flags])
            details = []
            if not namespaces and _holds_team_namespaces(output_dir):
                details.append("the files there hold the teams' Namespaces: were they generated with --namespaces?")
            fail(f"{output_dir} is out of date: run `{command}`", EXIT_NO, details)
        click.echo(f"{output_dir} is up to date", err=True)
        return
    foreign = [] if force else foreign_files(files, output_dir)
    if foreign:
        fail(
            f"--out {output_dir}: would overwrite files kgov did not write; give another --out, or --force",
            details=[str(path) for path in foreign],
        )
    try:
        written, removed = write_files(files, output_dir)
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename and str(exc.filename) != output_dir else ""
        fail(f"--out {output_dir}: cannot write{where}: {exc.strerror or exc}")
    for path in written:
        click.echo(f"wrote {path}", err=True)
    for path in removed:
        click.echo(f"removed {path}", err=True)
    if not written and not removed:
        click.echo(f"{output_dir} is up to date", err=True)


@click.command(
    "diff",
    epilog="Exit codes: 0 the cluster matches; 1 the cluster differs (drift); 2 usage error, an invalid "
    "platform file, or a kubeconfig or cluster that cannot be used.",
)
@_platform_argument
@file_option(
    "--kubeconfig", exists=True, path_type=None, help="Kubeconfig file (default: $KUBECONFIG or ~/.kube/config)."
)
@click.option("--context", help="Kubeconfig context (default: the current context).")
@_nodes_option
@_strict_option
@_namespaces_option
@_policy_namespace_option
@_instance_option
@click.option(
    "--field-manager",
    default="kubectl",
    show_default=True,
    help="The field manager that server-side applies the generated objects (`kubectl apply --server-side` is "
    "kubectl): fields it applied that the platform no longer generates show as removed. Objects it did not "
    "apply are compared on the generated fields only.",
)
def diff_command(
    platform_file: str,
    kubeconfig: str | None,
    context: str | None,
    nodes_path: str | None,
    strict: bool,
    namespaces: bool,
    policy_namespace: str,
    instance: str | None,
    field_manager: str,
) -> None:
    """Show how the live cluster differs from what PLATFORM generates.

    For every generated object: a unified diff of the fields the generator writes (live → generated),
    "create" when it is missing, and a RECREATE note when Kueue refuses the change in place (a
    ResourceFlavor with topologyName, a Topology's levels, a LocalQueue's clusterQueue, as the
    platform's kueue.version keeps them). Objects the
    platform owns (labelled app.kubernetes.io/managed-by=kueue-governor, and
    app.kubernetes.io/instance=NAME with --instance, without that label otherwise) that are no
    longer generated show as deletions. Quantities compare by value (64 and "64", 1024Mi and 1Gi).
    Fields the --field-manager applied that are no longer generated show as removed.
    """
    platform, problems, by_strict = _load_and_validate(platform_file, nodes_path, strict, policy_namespace)
    _report(problems, platform_file, by_strict)
    options = GenerateOptions(namespaces=namespaces, policy_namespace=policy_namespace, instance=instance)
    manifests = build_manifests(platform, options)
    desired = [obj for objects in manifests.values() for obj in objects]
    try:
        live = asyncio.run(fetch_live(desired, kubeconfig, context, instance))
    except ClusterError as exc:
        fail(str(exc))
    diffs = diff_objects(desired, live, field_manager, platform.kueue.release)
    for diff in diffs:
        click.echo(f"# {diff.action}: {diff.label}")
        click.echo(diff.diff, nl=False)
        if diff.recreate is not None:
            click.echo(f"# RECREATE {diff.label}: this {diff.recreate}; delete it and apply again")
    if diffs:
        counts = {action: sum(d.action == action for d in diffs) for action in ("create", "update", "delete")}
        recreate = sum(d.recreate is not None for d in diffs)
        fail(
            f"the cluster differs from {platform_file}: {counts['create']} to create, {counts['update']} to update "
            f"({recreate} need a recreate), {counts['delete']} to delete",
            EXIT_NO,
        )
    click.echo(f"the cluster matches {platform_file}", err=True)


def _read_json(path: str) -> Any:
    try:
        return read_document(path)
    except InputError as exc:
        fail(str(exc))


@click.command(
    "import-hyperpod",
    epilog="Exit codes: 0 platform printed; 2 usage error, or definitions that cannot be read or mapped. "
    "The mapping is described in docs/hyperpod-mapping.md.",
)
@file_option(
    "--quota",
    "quota_files",
    exists=True,
    path_type=None,
    multiple=True,
    required=True,
    help="`aws sagemaker describe-compute-quota` (or list-compute-quotas) JSON; repeat per team.",
)
@file_option(
    "--scheduler",
    "scheduler_file",
    exists=True,
    path_type=None,
    help="`aws sagemaker describe-cluster-scheduler-config` JSON (priority classes, fair share).",
)
@click.option(
    "--instance-resources",
    "instance_resources",
    multiple=True,
    required=True,
    metavar="TYPE=RES=QTY[,RES=QTY…]",
    help="Allocatable resources of one node of an instance type, e.g. "
    "ml.p5.48xlarge=cpu=192,memory=2Ti,nvidia.com/gpu=8,vpc.amazonaws.com/efa=32; repeat per type.",
)
@click.option("--cohort", default=DEFAULT_COHORT, show_default=True, help="Cohort that every team joins.")
@click.option(
    "--topology/--no-topology",
    default=False,
    show_default=True,
    help="Add the AWS network Topology (topology.k8s.aws/network-node-layer-1..3, hostname) to every flavor.",
)
def import_hyperpod_command(
    quota_files: tuple[str, ...],
    scheduler_file: str | None,
    instance_resources: tuple[str, ...],
    cohort: str,
    topology: bool,
) -> None:
    """Print a platform file (naming: hyperpod) equivalent to SageMaker HyperPod task governance
    compute allocations and cluster policy."""
    try:
        instances = parse_instance_resources(list(instance_resources))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--instance-resources'") from None
    quotas: list[tuple[str, ComputeQuota]] = []
    scheduler: ClusterSchedulerConfig | None = None
    try:
        for path in quota_files:
            quotas.extend(parse_compute_quotas(_read_json(path), path))
        if scheduler_file is not None:
            scheduler = parse_scheduler_config(_read_json(scheduler_file), scheduler_file)
        document, _, warnings = import_hyperpod(quotas, scheduler, instances, cohort=cohort, topology=topology)
    except HyperPodError as exc:
        fail("cannot map the HyperPod definitions", details=[f"{p.severity}: {p}" for p in exc.problems])
    _report(warnings)
    sources = ", ".join([*quota_files, *([scheduler_file] if scheduler_file else [])])
    click.echo(f"# Imported by `kgov import-hyperpod` from {sources}.")
    click.echo(dump_yaml([document]), nl=False)
