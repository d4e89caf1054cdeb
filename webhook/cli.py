"""``kgov``: the command line. Same code path as the server (:func:`webhook.core.review.review`).

Exit codes (all commands): 0 success; 1 the answer is "no" (a denied manifest, a malformed
AdmissionReview); 2 usage error or an input file that cannot be used (bad platform file, bad YAML).
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import yaml

from webhook.core.admission import MalformedReview, decode_body
from webhook.core.crd_defaults import default_review, with_crd_defaults
from webhook.core.inventory import NodeInventory
from webhook.core.kinds import find_kind
from webhook.core.patch import apply_patch
from webhook.core.paths import Key, dotted
from webhook.core.platform import PlatformError, dns1123_label_error, platform_json_schema
from webhook.core.platform_models import dns1123_subdomain_error
from webhook.core.resolve import TeamIndex
from webhook.core.review import ReviewOutcome, review
from webhook.core.rules.capacity import requests_text
from webhook.core.view import kueue_view
from webhook.core.wellformed import describe
from webhook.logs import configure_logging
from webhook.options import file_option
from webhook.sources import InputError, load_manifests, load_namespace_labels, load_nodes, load_policies

__all__ = ["main"]

_F = TypeVar("_F", bound=Callable[..., Any])

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


platform_option = file_option("--platform", "platform", help="Platform file (teams, quotas, policies).")
policy_option = file_option(
    "--policy",
    "policy",
    help="Compiled policy JSON (the policy.json of the kgov-policy ConfigMap) instead of --platform.",
)
namespaces_option = file_option(
    "--namespaces",
    "namespaces_file",
    help="`kubectl get namespaces -o json` dump, for teams that select namespaces by labels.",
)
nodes_option = file_option("--nodes", "nodes_file", help="`kubectl get nodes -o json` dump, for topology mode auto.")


def _seconds_option(flag: str, default: float, minimum: float, help: str) -> Callable[[_F], _F]:
    """A duration option of ``kgov serve``, in seconds, at least ``minimum``; the default is shown."""
    return click.option(flag, default=default, show_default=True, type=click.FloatRange(minimum), help=help)


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


_REVIEW_EXIT_CODES = """\b
Exit codes:
  0  answered (allowed, patched or denied: read response.allowed)
  1  the AdmissionReview is malformed (the server's HTTP 400; reason on stderr)
  2  usage error, or an input file that cannot be used
"""

_FILE_EXIT_CODES = """\b
Exit codes:
  0  success
  2  usage error, or an input file that cannot be used
"""


@main.command("review", epilog=_REVIEW_EXIT_CODES)
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
    raw = sys.stdin.buffer.read()
    try:
        outcome = review(default_review(decode_body(raw)), teams, labels.get, nodes)
    except MalformedReview as exc:
        _fail(f"malformed AdmissionReview: {exc}", EXIT_DENIED)
    click.echo(json.dumps(outcome.response, indent=2))


def _admission_review(document: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    api_version = str(document.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    metadata = document.get("metadata")
    row = find_kind(api_version, str(document.get("kind", "")))
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": str(document.get("kind", ""))},
            "resource": {"group": group, "version": version, "resource": row.resource if row else ""},
            "operation": "CREATE",
            "namespace": namespace,
            "name": str(metadata.get("name") or "") if isinstance(metadata, Mapping) else "",
            "object": document,
            "dryRun": True,
        },
    }


def _explain(where: str, document: Mapping[str, Any], outcome: ReviewOutcome) -> None:
    metadata = document.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = metadata.get("name") or metadata.get("generateName") or "?"
    click.echo(f"# {where}: {document.get('kind')} {name}", err=True)
    team = outcome.resolution.team
    click.echo(f"#   team: {team.team if team else '-'} ({outcome.resolution.reason})", err=True)
    if outcome.plan.skipped:
        click.echo(f"#   unchanged: {outcome.plan.skipped}", err=True)
    row = find_kind(str(document.get("apiVersion", "")), str(document.get("kind", "")))
    if team is not None and row is not None:  # the sizes every rule reasons on, as Kueue builds them
        for podset in kueue_view(document, row).podsets:
            pods = f"{podset.count} pod{'' if podset.count == 1 else 's'}"
            click.echo(
                f"#   podset {podset.name!r} (Kueue's view): {pods} of {requests_text(podset.requests)}", err=True
            )
    for change in outcome.plan.changes:
        path = "/".join(str(p) for p in change.path)
        click.echo(f"#   {change.rule}: {change.op} {path} = {json.dumps(change.value)}  ({change.reason})", err=True)
    for note in outcome.plan.notes:
        click.echo(f"#   {note}", err=True)
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
    type=click.File("rb"),
    help="Manifest file (YAML or JSON, multi-document and kind: List allowed); - for stdin.",
)
@click.option("--patch", "show_patch", is_flag=True, help="Print the JSON Patch of each document instead.")
@click.option(
    "--explain",
    is_flag=True,
    help="Say on stderr which rule made which change, and how topology mode auto chose each level.",
)
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
    JSON Patch per document, in file order; null for a denied document; for a `kind: List`, an
    array of its items' patches). The items of a List are reviewed one by one.
    Denied documents are reported on stderr with the policy's
    message; the exit code is 1 if any document was denied. A document whose own
    metadata.namespace differs from -n is reviewed in -n, with a note on stderr. A document
    that is an AdmissionReview (admission.k8s.io, e.g. an UPDATE with its oldObject) is
    answered as `kgov review` answers it, in the namespace it names, and its request.object
    is printed patched.
    """
    if dns1123_label_error(namespace):
        _fail(f"-n {namespace!r}: {dns1123_label_error(namespace)}")
    teams = _teams(platform, policy)
    labels, nodes = _inputs(namespaces_file, nodes_file)
    source = manifest.name
    try:
        documents = load_manifests(manifest.read().decode("utf-8"), source)
    except UnicodeDecodeError as exc:
        _fail(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start})")
    except InputError as exc:
        _fail(str(exc))
    if not documents:
        _fail(f"{source}: no object to review (the input is empty or holds only comments)")
    if teams.needs_namespace_labels and namespace not in labels and teams.resolve(namespace, None).team is None:
        click.echo(
            f"kgov: some teams select namespaces by labels; without --namespaces the labels of "
            f"{namespace!r} are unknown, so only teams that list it by name apply",
            err=True,
        )
    reviewer = _Reviewer(teams, labels, nodes, namespace, explain)
    outputs: list[Any] = []
    for index, document in enumerate(documents, start=1):
        where = f"document {index}"
        if not _is_object(document):
            _fail(f"{source}: {where} is not a Kubernetes object (needs apiVersion and kind)")
        result, patch = reviewer.review_any(document, where)
        if show_patch:
            outputs.append(patch)
        elif result is not None:
            outputs.append(result)
    if show_patch:
        click.echo(json.dumps(outputs, indent=2))
    elif outputs:
        click.echo(yaml.safe_dump_all(outputs, sort_keys=False), nl=False)
    sys.exit(EXIT_DENIED if reviewer.denied else 0)


def _is_object(document: Any) -> bool:
    return isinstance(document, dict) and bool(document.get("kind")) and bool(document.get("apiVersion"))


class _Reviewer:
    """Reviews documents of one ``kgov mutate`` run and reports on stderr."""

    def __init__(
        self,
        teams: TeamIndex,
        labels: dict[str, dict[str, str]],
        nodes: NodeInventory | None,
        namespace: str,
        explain: bool,
    ) -> None:
        self.teams, self.labels, self.nodes = teams, labels, nodes
        self.namespace, self.explain = namespace, explain
        self.denied = False

    def review_any(self, document: Any, where: str, path: tuple[Key, ...] = ()) -> tuple[Any, Any]:
        """A document, or each item of a list (``kind: List``, ``JobList``…, nested too), as
        kubectl flattens them; a list comes back as a list of its admitted items / their patches.
        ``path``: where the document sits in its file's document (``items[1]``)."""
        items = document.get("items") if isinstance(document, dict) else None
        if isinstance(items, list) and str(document.get("kind", "")).endswith("List"):
            results = [
                self.review_any(item, f"{where} item {i}", (*path, "items", i - 1))
                for i, item in enumerate(items, start=1)
            ]
            return {**document, "items": [r[0] for r in results if r[0] is not None]}, [r[1] for r in results]
        return self.run(document, where, path)

    def run(self, document: Any, where: str, path: tuple[Key, ...] = ()) -> tuple[Any, list[dict[str, Any]] | None]:
        """(mutated document or None when denied, its patch or None when denied)."""
        if not _is_object(document):
            found = f": {dotted(path)} is {describe(document)}" if path else ""
            _fail(f"{where} is not a Kubernetes object (needs apiVersion and kind){found}")
        if _is_admission_review(document):
            return self.run_review(document, where)
        metadata = document.get("metadata")
        own = metadata.get("namespace") if isinstance(metadata, dict) else None
        if own and own != self.namespace:
            click.echo(f"kgov: {where} says namespace {own!r}; reviewed in {self.namespace!r} (-n)", err=True)
        document = with_crd_defaults(document)  # what the API server stores and the webhook sees
        try:
            outcome = review(_admission_review(document, self.namespace), self.teams, self.labels.get, self.nodes)
        except MalformedReview as exc:  # the server would answer 400: refused, like a denial
            self.denied = True
            click.echo(f"kgov: {where} refused: {str(exc).replace('request.object.', '')}", err=True)
            return None, None
        return self._answer(where, document, outcome)

    def _answer(self, where: str, document: Any, outcome: ReviewOutcome) -> tuple[Any, list[dict[str, Any]] | None]:
        if self.explain:
            _explain(where, document, outcome)
        if not outcome.plan.allowed:
            self.denied = True
            for message in outcome.plan.denials:
                click.echo(f"kgov: {where} denied: {message}", err=True)
            return None, None
        for warning in outcome.plan.warnings:
            click.echo(f"Warning: {where}: {warning}", err=True)
        return apply_patch(document, outcome.patch), outcome.patch

    def run_review(self, document: Mapping[str, Any], where: str) -> tuple[Any, list[dict[str, Any]] | None]:
        """An AdmissionReview document (an UPDATE with its ``oldObject``, a CREATE as the API server
        sent it): answered as the server answers it, in the namespace it names; the result is its
        ``request.object`` patched."""
        document = default_review(document)
        try:
            outcome = review(document, self.teams, self.labels.get, self.nodes)
        except MalformedReview as exc:
            self.denied = True
            click.echo(f"kgov: {where} refused: malformed AdmissionReview: {exc}", err=True)
            return None, None
        request = document["request"]
        if request.get("namespace") != self.namespace:
            click.echo(
                f"kgov: {where} is an AdmissionReview of namespace {request.get('namespace')!r}; "
                f"answered in it, not in {self.namespace!r} (-n)",
                err=True,
            )
        obj = request.get("object")
        where = f"{where} ({request.get('operation')})"
        if not isinstance(obj, Mapping):  # a DELETE: no object to print
            old = request.get("oldObject")
            if self.explain:
                _explain(where, old if isinstance(old, Mapping) else {}, outcome)
            return None, outcome.patch
        return self._answer(where, obj, outcome)


def _is_admission_review(document: Mapping[str, Any]) -> bool:
    return document.get("kind") == "AdmissionReview" and str(document.get("apiVersion", "")).startswith(
        "admission.k8s.io/"
    )


@main.command("serve")
@platform_option
@policy_option
@click.option(
    "--policy-configmap",
    metavar="[NAMESPACE/]NAME",
    help="Watch this ConfigMap (key policy.json, as `kgov generate` and the Helm chart write it) for the "
    "policy instead of a file; NAMESPACE defaults to $POD_NAMESPACE. A change is served within seconds; an "
    "invalid one is rejected with a Warning Event on the ConfigMap, and the last good policy stays.",
)
@file_option("--tls-cert-file", required=True)
@file_option("--tls-private-key-file", required=True)
@click.option("--host", default="0.0.0.0", show_default=True)
@click.option("--port", default=8443, show_default=True, type=click.IntRange(1, 65535))
@namespaces_option
@nodes_option
@click.option(
    "--watch-cluster/--no-watch-cluster",
    default=False,
    help="Keep namespaces and nodes cached from the API server (list + watch).",
)
@click.option(
    "--kubeconfig",
    help="Kubeconfig for --watch-cluster and --policy-configmap (default: in-cluster service account).",
)
@click.option(
    "--exclude-namespace",
    multiple=True,
    help="Namespace never mutated (repeatable). The server's own namespace (env POD_NAMESPACE) always is.",
)
@click.option(
    "--log-level", default="info", show_default=True, type=click.Choice(["debug", "info", "warning", "error"])
)
@click.option(
    "--metrics-port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Plain-HTTP port of /metrics (and /healthz, /readyz); 0: no metrics listener.",
)
@click.option("--metrics-host", help="Address of the metrics port (default: --host).")
@_seconds_option(
    "--shutdown-delay",
    5.0,
    0,
    "After SIGTERM, seconds of serving while /readyz says not ready (endpoints drop the pod first).",
)
@_seconds_option(
    "--shutdown-timeout",
    20.0,
    0,
    "Then, seconds to drain before every connection is dropped. terminationGracePeriodSeconds must "
    "exceed --shutdown-delay + --shutdown-timeout.",
)
@_seconds_option("--header-timeout", 10.0, 0.1, "Seconds for the TLS handshake, and for a request's line and headers.")
@_seconds_option("--body-timeout", 10.0, 0.1, "Seconds for a request body once its headers are in.")
@_seconds_option(
    "--idle-timeout",
    120.0,
    0.1,
    "Seconds a kept-alive connection may stay without a request (above the API server's 90 s).",
)
@click.option(
    "--max-connections",
    default=256,
    show_default=True,
    type=click.IntRange(1),
    help="Open connections on the webhook port; at the cap the longest-waiting idle one is closed.",
)
@click.option(
    "--reuse-port/--no-reuse-port",
    default=False,
    show_default=True,
    help="Listen with SO_REUSEPORT, so that several kgov serve processes share the webhook port "
    "(the kernel spreads new connections over them; give each its own --metrics-port).",
)
def serve_command(
    platform: Path | None,
    policy: Path | None,
    policy_configmap: str | None,
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
    metrics_port: int,
    metrics_host: str | None,
    shutdown_delay: float,
    shutdown_timeout: float,
    header_timeout: float,
    body_timeout: float,
    idle_timeout: float,
    max_connections: int,
    reuse_port: bool,
) -> None:
    """Run the mutating admission webhook over TLS (POST /mutate, /healthz, /readyz), with /metrics
    on a separate plain-HTTP port."""
    from webhook.server import ConfigurationError, ConnectionLimits, ServerConfig, serve
    from webhook.tlsconfig import describe_pair_error

    if [platform, policy, policy_configmap].count(None) != 2:
        _fail("give exactly one of --platform, --policy or --policy-configmap")
    own_namespace = os.environ.get("POD_NAMESPACE")
    configmap = _configmap_reference(policy_configmap, own_namespace) if policy_configmap is not None else None
    for option, path in (("--tls-cert-file", tls_cert_file), ("--tls-private-key-file", tls_private_key_file)):
        if not path.is_file():
            _fail(f"{option} {path}: no such file")
    if kubeconfig is not None and not Path(kubeconfig).is_file():
        _fail(f"--kubeconfig {kubeconfig}: no such file")
    if kubeconfig is not None and not (watch_cluster or configmap):
        _fail("--kubeconfig is used by --watch-cluster and --policy-configmap only; add one of them")
    excluded = [*exclude_namespace, *([own_namespace] if own_namespace else [])]
    configure_logging(log_level)
    config = ServerConfig(
        cert_file=tls_cert_file,
        key_file=tls_private_key_file,
        platform=platform,
        policy=policy,
        policy_configmap=configmap,
        host=host,
        port=port,
        namespaces_file=namespaces_file,
        nodes_file=nodes_file,
        kubeconfig=kubeconfig,
        watch_cluster=watch_cluster,
        extra_excluded=excluded,
        metrics_host=metrics_host,
        metrics_port=metrics_port or None,
        shutdown_delay=shutdown_delay,
        shutdown_timeout=shutdown_timeout,
        reuse_port=reuse_port,
        limits=ConnectionLimits(
            header_timeout=header_timeout,
            body_timeout=body_timeout,
            idle_timeout=idle_timeout,
            max_connections=max_connections,
        ),
    )
    try:
        serve(config)
    except (PlatformError, InputError, ConfigurationError) as exc:
        _fail(str(exc))
    except ssl.SSLError as exc:
        _fail(
            f"cannot load the serving certificate pair (--tls-cert-file {tls_cert_file}, "
            f"--tls-private-key-file {tls_private_key_file}): "
            f"{describe_pair_error(tls_cert_file, tls_private_key_file, exc)}"
        )
    except OSError as exc:
        _fail(f"cannot serve on {host}:{port} (--port): {exc}")


def _configmap_reference(value: str, default_namespace: str | None) -> tuple[str, str]:
    """(namespace, name) of ``--policy-configmap [NAMESPACE/]NAME``; exits 2 on a malformed value."""
    namespace, _, name = value.rpartition("/")
    if not namespace:
        if not default_namespace:
            _fail(f"--policy-configmap {value}: give NAMESPACE/NAME, or set $POD_NAMESPACE")
        namespace = str(default_namespace)
    problem = dns1123_label_error(namespace)
    if problem:
        _fail(f"--policy-configmap {value}: namespace {problem}")
    problem = dns1123_subdomain_error(name)
    if problem:
        _fail(f"--policy-configmap {value}: name {problem}")
    return namespace, name


@main.command("schema")
def schema_command() -> None:
    """Print the platform file's JSON Schema (for editors)."""
    click.echo(json.dumps(platform_json_schema(), indent=2))


@main.command("policy", epilog=_FILE_EXIT_CODES)
@platform_option
@click.option(
    "--exclude-namespace",
    multiple=True,
    help="Namespace never mutated (repeatable), e.g. the webhook's own, as the generated ConfigMap has it.",
)
def policy_command(platform: Path | None, exclude_namespace: tuple[str, ...]) -> None:
    """Print the compiled policy JSON the webhook would use for a platform file."""
    if platform is None:
        _fail("give --platform FILE")
    try:
        policies = load_policies(platform, None, list(exclude_namespace))
    except (PlatformError, InputError) as exc:
        _fail(str(exc))
    click.echo(policies.model_dump_json(indent=2))


def _register_generator() -> None:
    from webhook.generate.chart_commands import chart_group
    from webhook.generate.commands import diff_command, generate_command, import_hyperpod_command

    main.add_command(generate_command, "generate")
    main.add_command(diff_command, "diff")
    main.add_command(import_hyperpod_command, "import-hyperpod")
    main.add_command(chart_group, "chart")


_register_generator()


def _register_topology() -> None:
    from webhook.topology.commands import topology_group

    main.add_command(topology_group, "topology")


_register_topology()


def _register_certs() -> None:
    from webhook.certs.commands import certs_group

    main.add_command(certs_group, "certs")


_register_certs()


def _register_why() -> None:
    from webhook.why.commands import status_command, why_command

    main.add_command(why_command, "why")
    main.add_command(status_command, "status")


_register_why()

if __name__ == "__main__":  # pragma: no cover
    main()
