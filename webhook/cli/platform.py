"""``kgov schema`` and ``kgov policy``: the platform file's JSON Schema and the compiled team policies."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml

from webhook.cli.common import (
    FILE_EXIT_CODES,
    fail,
    platform_option,
)
from webhook.core.platform.platform import PlatformError, platform_json_schema
from webhook.kube.files import InputError, load_policies

_F = TypeVar("_F", bound=Callable[..., Any])


def _output_option(default: str) -> Callable[[_F], _F]:
    return click.option(
        "-o",
        "--output",
        "output_format",
        type=click.Choice(["json", "yaml"]),
        default=default,
        show_default=True,
        help="Output format.",
    )


def _print(document: Any, output_format: str) -> None:
    if output_format == "yaml":
        click.echo(yaml.safe_dump(document, sort_keys=False), nl=False)
    else:
        click.echo(json.dumps(document, indent=2))


@click.command("schema")
@_output_option("json")
def schema_command(output_format: str) -> None:
    """Print the platform file's JSON Schema (for editors)."""
    _print(platform_json_schema(), output_format)


@click.command("policy", epilog=FILE_EXIT_CODES)
@platform_option
@click.option(
    "--exclude-namespace",
    multiple=True,
    help="Namespace never mutated (repeatable), e.g. the webhook's own, as the generated ConfigMap has it.",
)
@_output_option("json")
def policy_command(platform: Path | None, exclude_namespace: tuple[str, ...], output_format: str) -> None:
    """Print the compiled policy JSON the webhook would use for a platform file."""
    if platform is None:
        fail("give --platform FILE")
    try:
        policies = load_policies(platform, None, list(exclude_namespace))
    except (PlatformError, InputError) as exc:
        fail(str(exc))
    if output_format == "json":
        click.echo(policies.model_dump_json(indent=2))
    else:
        _print(policies.model_dump(mode="json"), output_format)
