"""What the ``kgov`` commands share: the input options, reading teams and dumps, and the exit-code
epilogs of ``--help`` (the codes themselves are :mod:`.errors`').
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from webhook.cli.errors import EXIT_INPUT, EXIT_NO, fail
from webhook.cli.options import file_option
from webhook.core.kueue.inventory import NodeInventory
from webhook.core.platform.fields import dns1123_label_error, dns1123_subdomain_error
from webhook.core.platform.platform import PlatformError
from webhook.core.platform.resolve import TeamIndex
from webhook.kube.files import InputError, load_namespace_labels, load_nodes, load_policies

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = [
    "EXIT_CODES",
    "EXIT_DENIED",
    "EXIT_INPUT",
    "FILE_EXIT_CODES",
    "REVIEW_EXIT_CODES",
    "configmap_reference",
    "fail",
    "namespaces_option",
    "nodes_option",
    "platform_option",
    "policy_option",
    "read_inputs",
    "seconds_option",
    "team_index",
]

EXIT_DENIED = EXIT_NO

EXIT_CODES = """\b
Exit codes:
  0  success (every document admitted)
  1  a document was denied, or the AdmissionReview was malformed
  2  usage error, or an input file that cannot be used
"""


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


def seconds_option(flag: str, default: float, minimum: float, help: str) -> Callable[[_F], _F]:
    """A duration option of ``kgov serve``, in seconds, at least ``minimum``; the default is shown."""
    return click.option(flag, default=default, show_default=True, type=click.FloatRange(minimum), help=help)


def team_index(platform: Path | None, policy: Path | None) -> TeamIndex:
    if platform is None and policy is None:
        fail("give --platform FILE (or --policy FILE)")
    try:
        return TeamIndex(load_policies(platform, policy))
    except (PlatformError, InputError) as exc:
        fail(str(exc))


def read_inputs(
    namespaces_file: Path | None, nodes_file: Path | None
) -> tuple[dict[str, dict[str, str]], NodeInventory | None]:
    try:
        labels = load_namespace_labels(namespaces_file) if namespaces_file else {}
        nodes = load_nodes(nodes_file) if nodes_file else None
    except InputError as exc:
        fail(str(exc))
    return labels, nodes


REVIEW_EXIT_CODES = """\b
Exit codes:
  0  answered (allowed, patched or denied: read response.allowed)
  1  the AdmissionReview is malformed (the server's HTTP 400; reason on stderr)
  2  usage error, or an input file that cannot be used
"""

FILE_EXIT_CODES = """\b
Exit codes:
  0  success
  2  usage error, or an input file that cannot be used
"""


def configmap_reference(
    value: str, default_namespace: str | None, option: str = "--policy-configmap"
) -> tuple[str, str]:
    """(namespace, name) of ``--policy-configmap [NAMESPACE/]NAME``; exits 2 on a malformed value."""
    namespace, _, name = value.rpartition("/")
    if not namespace:
        if not default_namespace:
            fail(f"{option} {value}: give NAMESPACE/NAME, or set $POD_NAMESPACE")
        namespace = str(default_namespace)
    problem = dns1123_label_error(namespace)
    if problem:
        fail(f"{option} {value}: namespace {problem}")
    problem = dns1123_subdomain_error(name)
    if problem:
        fail(f"{option} {value}: name {problem}")
    return namespace, name
