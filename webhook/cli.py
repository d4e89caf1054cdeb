"""``kgov``: the command line. Same code path as the server (:func:`webhook.core.review.review`).

Exit codes (all commands): 0 success; 1 the answer is "no" (a denied manifest, a malformed
AdmissionReview); 2 usage error or an input file that cannot be used (bad platform file, bad YAML).
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import click
import yaml

from webhook.core.admission import MalformedReview
from webhook.core.inventory import NodeInventory
from webhook.core.patch import apply_patch
from webhook.core.platform import PlatformError, platform_json_schema
from webhook.core.resolve import TeamIndex
from webhook.core.review import ReviewOutcome, review
from webhook.logs import configure_logging
from webhook.sources import InputError, load_namespace_labels, load_nodes, load_policies

__all__ = ["main"]

EXIT_DENIED = 1
EXIT_INPUT = 2

_EXIT_CODES = """\b
Exit codes:
  0  success (every document admitted)
  1  a document was denied, or the AdmissionReview was malformed
  2  usage error, or an input file that cannot be used
"""


def _fail(message: str, code: int = EXIT_INPUT) -> NoReturn:
    click.echo(f"kgov: {message}", err=True)
    sys.exit(code)


platform_option = click.option(
    "--platform",
    "platform",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Platform file (teams, quotas, policies).",
)
policy_option = click.option(
    "--policy",
    "policy",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Compiled policy JSON (the policy.json of the kgov-policy ConfigMap) instead of --platform.",
)
namespaces_option = click.option(
    "--namespaces",
    "namespaces_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="`kubectl get namespaces -o json` dump, for teams that select namespaces by labels.",
)
nodes_option = click.option(
    "--nodes",
    "nodes_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="`kubectl get nodes -o json` dump, for topology mode auto.",
)


def _teams(platform: Path | None, policy: Path | None) -> TeamIndex:
    if platform is None and policy is None:
        _fail("give --platform FILE (or --policy FILE)")
    try:
        return TeamIndex(load_policies(platform, policy))
    except (PlatformError, InputError) as exc:
        _fail(str(exc))


def _inputs(
    namespaces_file: Path | None, nodes_file: Path | None
) -> tuple[dict[str, dict[str, str]], NodeInventory | None]:
    try:
        labels = load_namespace_labels(namespaces_file) if namespaces_file else {}
        nodes = load_nodes(nodes_file) if nodes_file else None
    except InputError as exc:
        _fail(str(exc))
    return labels, nodes


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kueue-governor", prog_name="kgov")
def main() -> None:
    """kueue-governor: team policies and topology-aware placement for Kueue clusters."""


@main.command("review", epilog=_EXIT_CODES)
@platform_option
@policy_option
@namespaces_option
@nodes_option
def review_command(
    platform: Path | None, policy: Path | None, namespaces_file: Path | None, nodes_file: Path | None
) -> None:
    """Answer one AdmissionReview read from stdin, exactly as the server would.

    Reads an AdmissionReview JSON (admission.k8s.io/v1 or v1beta1) on stdin and writes the
    AdmissionReview response JSON on stdout. A malformed review prints the server's 400 reason
    on stderr and exits 1.
    """
    teams = _teams(platform, policy)
    labels, nodes = _inputs(namespaces_file, nodes_file)
    raw = sys.stdin.read()
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        _fail(f"stdin is not valid JSON: {exc}", EXIT_DENIED)
    try:
        outcome = review(body, teams, labels.get, nodes)
    except MalformedReview as exc:
        _fail(f"malformed AdmissionReview: {exc}", EXIT_DENIED)
    click.echo(json.dumps(outcome.response, indent=2))


def _admission_review(document: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    api_version = str(document.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    metadata = document.get("metadata") or {}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": str(document.get("kind", ""))},
            "resource": {"group": group, "version": version, "resource": str(document.get("kind", "")).lower() + "s"},
            "operation": "CREATE",
            "namespace": namespace,
            "name": str(metadata.get("name", "")) if isinstance(metadata, Mapping) else "",
            "object": document,
            "dryRun": True,
        },
    }


def _explain(index: int, document: Mapping[str, Any], outcome: ReviewOutcome) -> None:
    metadata = document.get("metadata") or {}
    name = metadata.get("name") or metadata.get("generateName") or "?"
    click.echo(f"# document {index}: {document.get('kind')} {name}", err=True)
    team = outcome.resolution.team
    click.echo(f"#   team: {team.team if team else '-'} ({outcome.resolution.reason})", err=True)
    if outcome.plan.skipped:
        click.echo(f"#   unchanged: {outcome.plan.skipped}", err=True)
    for change in outcome.plan.changes:
        path = "/".join(str(p) for p in change.path)
        click.echo(f"#   {change.rule}: {change.op} {path} = {json.dumps(change.value)}  ({change.reason})", err=True)
    for warning in outcome.plan.warnings:
        click.echo(f"#   warning: {warning}", err=True)
    for denial in outcome.plan.denials:
        click.echo(f"#   denied: {denial}", err=True)


@main.command("mutate", epilog=_EXIT_CODES)
@platform_option
@policy_option
@click.option("-n", "--namespace", required=True, help="Namespace the manifests are created in.")
@click.option(
    "-f",
    "--filename",
    "manifest",
    required=True,
    type=click.File("r"),
    help="Manifest file (YAML or JSON, multi-document allowed); - for stdin.",
)
@click.option("--patch", "show_patch", is_flag=True, help="Print the JSON Patch of each document instead.")
@click.option("--explain", is_flag=True, help="Say on stderr which rule made which change.")
@namespaces_option
@nodes_option
def mutate_command(
    platform: Path | None,
    policy: Path | None,
    namespace: str,
    manifest: Any,
    show_patch: bool,
    explain: bool,
    namespaces_file: Path | None,
    nodes_file: Path | None,
) -> None:
    """Show what admission would make of manifests created in NAMESPACE.

    Prints the mutated manifests as YAML (or, with --patch, a JSON array holding one RFC 6902
    JSON Patch per admitted document, in file order).
    Denied documents are reported on stderr with the policy's message; the exit code is 1 if any
    document was denied. A document whose own metadata.namespace differs from -n is reviewed in
    -n, with a note on stderr.
    """
    teams = _teams(platform, policy)
    labels, nodes = _inputs(namespaces_file, nodes_file)
    try:
        documents = [d for d in yaml.safe_load_all(manifest) if d is not None]
    except yaml.YAMLError as exc:
        _fail(f"{manifest.name}: not valid YAML: {exc}")
    denied = False
    outputs: list[Any] = []
    for index, document in enumerate(documents, start=1):
        if not isinstance(document, dict) or not document.get("kind") or not document.get("apiVersion"):
            _fail(f"{manifest.name}: document {index} is not a Kubernetes object (needs apiVersion and kind)")
        own = (document.get("metadata") or {}).get("namespace")
        if own and own != namespace:
            click.echo(f"kgov: document {index} says namespace {own!r}; reviewed in {namespace!r} (-n)", err=True)
        try:
            outcome = review(_admission_review(document, namespace), teams, labels.get, nodes)
        except MalformedReview as exc:
            _fail(f"{manifest.name}: document {index}: {exc}")
        if explain:
            _explain(index, document, outcome)
        if not outcome.plan.allowed:
            denied = True
            for message in outcome.response["response"]["status"]["message"].split("; kueue-governor: "):
                click.echo(f"kgov: document {index} denied: {message.removeprefix('kueue-governor: ')}", err=True)
            continue
        for warning in outcome.plan.warnings:
            click.echo(f"Warning: document {index}: {warning}", err=True)
        outputs.append(outcome.patch if show_patch else apply_patch(document, outcome.patch))
    if show_patch:
        click.echo(json.dumps(outputs, indent=2))
    elif outputs:
        click.echo(yaml.safe_dump_all(outputs, sort_keys=False), nl=False)
    sys.exit(EXIT_DENIED if denied else 0)


@main.command("serve")
@platform_option
@policy_option
@click.option("--tls-cert-file", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--tls-private-key-file", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--host", default="0.0.0.0", show_default=True)
@click.option("--port", default=8443, show_default=True, type=click.IntRange(1, 65535))
@namespaces_option
@nodes_option
@click.option(
    "--watch-cluster/--no-watch-cluster",
    default=False,
    help="Keep namespaces and nodes cached from the API server (list + watch).",
)
@click.option("--kubeconfig", help="Kubeconfig for --watch-cluster (default: in-cluster service account).")
@click.option("--exclude-namespace", multiple=True, help="Namespace never mutated (repeatable); add your own.")
@click.option(
    "--log-level", default="info", show_default=True, type=click.Choice(["debug", "info", "warning", "error"])
)
@click.option("--shutdown-timeout", default=20.0, show_default=True, help="Seconds to drain in-flight requests.")
def serve_command(
    platform: Path | None,
    policy: Path | None,
    tls_cert_file: Path,
    tls_private_key_file: Path,
    host: str,
    port: int,
    namespaces_file: Path | None,
    nodes_file: Path | None,
    watch_cluster: bool,
    kubeconfig: str | None,
    exclude_namespace: tuple[str, ...],
    log_level: str,
    shutdown_timeout: float,
) -> None:
    """Run the mutating admission webhook over TLS (POST /mutate, /healthz, /readyz, /metrics)."""
    from webhook.server import ServerConfig, serve

    if (platform is None) == (policy is None):
        _fail("give exactly one of --platform or --policy")
    configure_logging(log_level)
    config = ServerConfig(
        cert_file=tls_cert_file,
        key_file=tls_private_key_file,
        platform=platform,
        policy=policy,
        host=host,
        port=port,
        namespaces_file=namespaces_file,
        nodes_file=nodes_file,
        kubeconfig=kubeconfig,
        watch_cluster=watch_cluster,
        extra_excluded=list(exclude_namespace),
        shutdown_timeout=shutdown_timeout,
    )
    try:
        serve(config)
    except (PlatformError, InputError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot serve: {exc}")


@main.command("schema")
def schema_command() -> None:
    """Print the platform file's JSON Schema (for editors)."""
    click.echo(json.dumps(platform_json_schema(), indent=2))


@main.command("policy", epilog=_EXIT_CODES)
@platform_option
def policy_command(platform: Path | None) -> None:
    """Print the compiled policy JSON the webhook would use for a platform file."""
    teams = _teams(platform, None)
    click.echo(teams.policies.model_dump_json(indent=2))


def _register_generator() -> None:
    from webhook.generate.commands import diff_command, generate_command, import_hyperpod_command

    main.add_command(generate_command, "generate")
    main.add_command(diff_command, "diff")
    main.add_command(import_hyperpod_command, "import-hyperpod")


_register_generator()

if __name__ == "__main__":  # pragma: no cover
    main()
