"""``kgov review`` and ``kgov mutate``: the admission path run offline, the same code as the server
(:func:`webhook.core.admission.review.review`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import yaml

from webhook.cli.common import (
    EXIT_CODES,
    EXIT_DENIED,
    REVIEW_EXIT_CODES,
    fail,
    namespaces_option,
    nodes_option,
    platform_option,
    policy_option,
    read_inputs,
    team_index,
)
from webhook.cli.errors import say, warn
from webhook.cli.options import file_option
from webhook.core.admission.envelope import MalformedReview, create_review, decode_body
from webhook.core.admission.review import ReviewOutcome, review
from webhook.core.kueue.crd_defaults import default_review, with_crd_defaults
from webhook.core.kueue.inventory import NodeInventory
from webhook.core.kueue.kinds import find_kind
from webhook.core.kueue.trainer import RuntimeLookup, expanded, find_runtime
from webhook.core.kueue.view import kueue_view
from webhook.core.kueue.wellformed import describe
from webhook.core.objects.paths import Key, dotted
from webhook.core.plan.patch import apply_patch
from webhook.core.plan.rules.capacity import requests_text
from webhook.core.platform.platform import dns1123_label_error
from webhook.core.platform.resolve import TeamIndex
from webhook.kube.files import InputError, load_manifests
from webhook.kube.runtimes import load_runtimes

runtime_option = file_option(
    "--runtime",
    "runtime_files",
    exists=True,
    multiple=True,
    help="Kubeflow Trainer ClusterTrainingRuntime / TrainingRuntime manifests (repeatable, multi-document): "
    "a TrainJob's pods come from the runtime it references.",
)


def _runtimes(paths: tuple[Path, ...]) -> RuntimeLookup:
    try:
        return load_runtimes(paths)
    except InputError as exc:
        fail(str(exc))


@click.command("review", epilog=REVIEW_EXIT_CODES)
@platform_option
@policy_option
@click.option(
    "-f",
    "--filename",
    "review_file",
    type=click.File("rb"),
    default="-",
    show_default=True,
    help="AdmissionReview JSON file; - for stdin.",
)
@namespaces_option
@nodes_option
@runtime_option
@click.option(
    "--governor",
    metavar="USER",
    help="The user the server's topology widening runs as (its ServiceAccount, e.g. "
    "system:serviceaccount:kueue-governor:kueue-governor): an UPDATE from it that is one recorded "
    "step of the widening ladder is answered as the server with --topology-widening answers it.",
)
def review_command(
    platform: Path | None,
    policy: Path | None,
    review_file: Any,
    namespaces_file: Path | None,
    nodes_file: Path | None,
    runtime_files: tuple[Path, ...],
    governor: str | None,
) -> None:
    """Answer one AdmissionReview, exactly as the server would.

    Reads an AdmissionReview JSON (admission.k8s.io/v1 or v1beta1) from -f (stdin by default) and
    writes the AdmissionReview response JSON on stdout. A malformed review prints the server's 400
    reason on stderr and exits 1.
    """
    teams = team_index(platform, policy)
    labels, nodes = read_inputs(namespaces_file, nodes_file)
    runtimes = _runtimes(runtime_files)
    raw = review_file.read()
    try:
        outcome = review(default_review(decode_body(raw)), teams, labels.get, nodes, runtimes, governor)
    except MalformedReview as exc:
        hint = [] if b'"AdmissionReview"' in raw else ["for a manifest, use kgov mutate -n NAMESPACE -f FILE"]
        fail(f"malformed AdmissionReview: {exc}", EXIT_DENIED, hint)
    click.echo(json.dumps(outcome.response, indent=2))


def _explain(
    where: str, document: Mapping[str, Any], outcome: ReviewOutcome, runtimes: RuntimeLookup | None = None
) -> None:
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
        if row.runtime is not None:  # a TrainJob: its podsets are its runtime's
            runtime, _ = find_runtime(document, outcome.request.namespace, runtimes)
            document = expanded(document, runtime) if runtime is not None else document
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


@click.command("mutate", epilog=EXIT_CODES)
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
    "-o",
    "--output",
    "output_format",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="Format of the mutated manifests (json: one object, or a List of several).",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Say on stderr which rule made which change, and how topology mode auto chose each level.",
)
@namespaces_option
@nodes_option
@runtime_option
def mutate_command(
    platform: Path | None,
    policy: Path | None,
    namespace: str,
    manifest: Any,
    show_patch: bool,
    output_format: str,
    explain: bool,
    namespaces_file: Path | None,
    nodes_file: Path | None,
    runtime_files: tuple[Path, ...],
) -> None:
    """Show what admission would make of manifests created in NAMESPACE.

    Prints the mutated manifests as YAML (or, with --patch, a JSON array holding one RFC 6902
    JSON Patch per document, in file order; null for a denied document; for a `kind: List`, an
    array of its items' patches). The items of a List are reviewed one by one.
    Denied documents are reported on stderr with the policy's
    message; the exit code is 1 if any document was denied, and stderr says how many of the
    documents the output holds. Every workload printed carries metadata.namespace NAMESPACE, the
    namespace it was judged for (a document whose own namespace differs is reviewed in -n, with a
    note on stderr); other documents are printed as they are, so pipe into
    `kubectl apply -n NAMESPACE -f -` to create those without a namespace there too. A document
    that is an AdmissionReview (admission.k8s.io, e.g. an UPDATE with its oldObject) is
    answered as `kgov review` answers it, in the namespace it names, and its request.object
    is printed patched. A TrainJob is planned on the training runtime it references, read from
    --runtime files.
    """
    if dns1123_label_error(namespace):
        fail(f"-n {namespace!r}: {dns1123_label_error(namespace)}")
    teams = team_index(platform, policy)
    labels, nodes = read_inputs(namespaces_file, nodes_file)
    runtimes = _runtimes(runtime_files)
    source = manifest.name
    try:
        documents = load_manifests(manifest.read().decode("utf-8"), source)
    except UnicodeDecodeError as exc:
        fail(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start})")
    except InputError as exc:
        fail(str(exc))
    if not documents:
        fail(f"{source}: no object to review (the input is empty or holds only comments)")
    if teams.needs_namespace_labels and namespace not in labels and teams.resolve(namespace, None).team is None:
        warn(
            f"some teams select namespaces by labels; without --namespaces the labels of "
            f"{namespace!r} are unknown, so only teams that list it by name apply"
        )
    reviewer = _Reviewer(teams, labels, nodes, namespace, explain, runtimes)
    outputs: list[Any] = []
    for index, document in enumerate(documents, start=1):
        where = f"document {index}"
        if not _is_object(document):
            fail(f"{source}: {where} is not a Kubernetes object (needs apiVersion and kind)")
        result, patch = reviewer.review_any(document, where)
        if show_patch:
            outputs.append(patch)
        elif result is not None:
            outputs.append(result)
    if show_patch:
        click.echo(json.dumps(outputs, indent=2))
    elif outputs and output_format == "json":
        single = outputs[0] if len(outputs) == 1 else {"apiVersion": "v1", "kind": "List", "items": outputs}
        click.echo(json.dumps(single, indent=2))
    elif outputs:
        click.echo(yaml.safe_dump_all(outputs, sort_keys=False), nl=False)
    if reviewer.denied and reviewer.reviewed > 1:  # piped into kubectl apply, only these would be created
        admitted = reviewer.reviewed - reviewer.denied
        say(f"{reviewer.denied} of {reviewer.reviewed} documents denied: the output holds only the {admitted} admitted")
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
        runtimes: RuntimeLookup | None = None,
    ) -> None:
        self.teams, self.labels, self.nodes, self.runtimes = teams, labels, nodes, runtimes
        self.namespace, self.explain = namespace, explain
        self.denied = 0  # documents denied or refused
        self.reviewed = 0  # documents reviewed (the items of a List one by one)

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
        self.reviewed += 1
        if not _is_object(document):
            found = f": {dotted(path)} is {describe(document)}" if path else ""
            fail(f"{where} is not a Kubernetes object (needs apiVersion and kind){found}")
        if _is_admission_review(document):
            return self.run_review(document, where)
        metadata = document.get("metadata")
        own = metadata.get("namespace") if isinstance(metadata, dict) else None
        governed = find_kind(str(document.get("apiVersion", "")), str(document.get("kind", ""))) is not None
        if own and own != self.namespace and governed:
            say(f"{where} says namespace {own!r}; reviewed in {self.namespace!r} (-n) and printed for it")
        elif own and own != self.namespace:
            say(f"{where} says namespace {own!r}: not a workload kind, printed as it is (in {own!r})")
        document = with_crd_defaults(document)  # what the API server stores and the webhook sees
        try:
            body = create_review(document, self.namespace)
            outcome = review(body, self.teams, self.labels.get, self.nodes, self.runtimes)
        except MalformedReview as exc:  # the server would answer 400: refused, like a denial
            self.denied += 1
            say(f"{where} refused: {str(exc).replace('request.object.', '')}")
            return None, None
        result, patch = self._answer(where, document, outcome)
        if governed and isinstance(result, dict) and isinstance(result.get("metadata", {}), dict):
            result.setdefault("metadata", {})["namespace"] = self.namespace  # what it was judged for
        return result, patch

    def _answer(self, where: str, document: Any, outcome: ReviewOutcome) -> tuple[Any, list[dict[str, Any]] | None]:
        if self.explain:
            _explain(where, document, outcome, self.runtimes)
        if not outcome.plan.allowed:
            self.denied += 1
            denials = outcome.plan.denials
            if len(denials) == 1:
                say(f"{where} denied: {denials[0]}")
            else:  # one line for the document, its reasons below it
                say(f"{where} denied, {len(denials)} reasons:", denials)
            return None, None
        for warning in outcome.plan.warnings:
            warn(f"{where}: {warning}")
        return apply_patch(document, outcome.patch), outcome.patch

    def run_review(self, document: Mapping[str, Any], where: str) -> tuple[Any, list[dict[str, Any]] | None]:
        """An AdmissionReview document (an UPDATE with its ``oldObject``, a CREATE as the API server
        sent it): answered as the server answers it, in the namespace it names; the result is its
        ``request.object`` patched."""
        document = default_review(document)
        try:
            outcome = review(document, self.teams, self.labels.get, self.nodes, self.runtimes)
        except MalformedReview as exc:
            self.denied += 1
            say(f"{where} refused: malformed AdmissionReview: {exc}")
            return None, None
        request = document["request"]
        if request.get("namespace") != self.namespace:
            say(
                f"{where} is an AdmissionReview of namespace {request.get('namespace')!r}; "
                f"answered in it, not in {self.namespace!r} (-n)"
            )
        obj = request.get("object")
        where = f"{where} ({request.get('operation')})"
        if not isinstance(obj, Mapping):  # a DELETE: no object to print
            old = request.get("oldObject")
            if self.explain:
                _explain(where, old if isinstance(old, Mapping) else {}, outcome, self.runtimes)
            return None, outcome.patch
        return self._answer(where, obj, outcome)


def _is_admission_review(document: Mapping[str, Any]) -> bool:
    return document.get("kind") == "AdmissionReview" and str(document.get("apiVersion", "")).startswith(
        "admission.k8s.io/"
    )
