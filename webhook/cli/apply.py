"""``kgov generate --apply``: the options that apply the generated objects to a cluster, and the
step that does it (:mod:`webhook.generate.apply`). The Helm chart's install hook runs this.

Exit codes (of ``kgov generate --apply``): 0 every object applied; 2 an invalid platform file, a
kubeconfig or cluster that cannot be used, or an object the API server refused (named).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from webhook.cli.errors import fail
from webhook.generate.apply import FIELD_MANAGER, apply_manifests, objects_to_apply
from webhook.generate.manifests import Manifest
from webhook.kube.client import ClusterError

__all__ = ["apply_options", "run_apply"]

F = TypeVar("F", bound=Callable[..., Any])


def apply_options(command: F) -> F:
    """``--apply``, ``--kubeconfig``, ``--context`` and ``--apply-field-manager`` on a command."""
    for option in reversed(
        [
            click.option(
                "--apply",
                "apply",
                is_flag=True,
                help="Server-side apply the Kueue objects (and the teams' Namespaces with --namespaces) to the "
                "cluster instead of writing files; the policy ConfigMap and the webhook's namespace are left to "
                "the chart. Without a kubeconfig, the pod's service account is used (the chart's install hook).",
            ),
            click.option(
                "--kubeconfig",
                type=click.Path(exists=True, dir_okay=False),
                help="Kubeconfig of --apply (default: $KUBECONFIG, ~/.kube/config, else the service account).",
            ),
            click.option("--context", help="Kubeconfig context of --apply (default: the current context)."),
            click.option(
                "--apply-field-manager",
                default=FIELD_MANAGER,
                show_default=True,
                help="The field manager of --apply (`kgov diff --field-manager` compares what it applied).",
            ),
        ]
    ):
        command = option(command)
    return command


def run_apply(
    manifests: Mapping[str, list[Manifest]],
    policy_namespace: str,
    kubeconfig: str | None,
    context: str | None,
    field_manager: str,
) -> None:
    """Apply the objects of ``manifests`` that ``--apply`` applies, one line per object on stderr;
    exit 2 with the API server's message at the first one refused."""
    objects = objects_to_apply(manifests, policy_namespace)

    def report(line: str) -> None:
        click.echo(line, err=True)

    try:
        count = asyncio.run(apply_manifests(objects, kubeconfig, context, field_manager, report))
    except ClusterError as exc:
        fail(str(exc))
    click.echo(f"applied {count} objects", err=True)
