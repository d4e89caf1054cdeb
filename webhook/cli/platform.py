"""``kgov schema`` and ``kgov policy``: the platform file's JSON Schema and the compiled team policies."""

from __future__ import annotations

import json
from pathlib import Path

import click

from webhook.cli.common import (
    FILE_EXIT_CODES,
    fail,
    platform_option,
)
from webhook.core.platform.platform import PlatformError, platform_json_schema
from webhook.kube.files import InputError, load_policies


@click.command("schema")
def schema_command() -> None:
    """Print the platform file's JSON Schema (for editors)."""
    click.echo(json.dumps(platform_json_schema(), indent=2))


@click.command("policy", epilog=FILE_EXIT_CODES)
@platform_option
@click.option(
    "--exclude-namespace",
    multiple=True,
    help="Namespace never mutated (repeatable), e.g. the webhook's own, as the generated ConfigMap has it.",
)
def policy_command(platform: Path | None, exclude_namespace: tuple[str, ...]) -> None:
    """Print the compiled policy JSON the webhook would use for a platform file."""
    if platform is None:
        fail("give --platform FILE")
    try:
        policies = load_policies(platform, None, list(exclude_namespace))
    except (PlatformError, InputError) as exc:
        fail(str(exc))
    click.echo(policies.model_dump_json(indent=2))
