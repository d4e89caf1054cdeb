"""The in-cluster certificate options of ``kgov serve`` (``--certs-secret`` and its settings):
the chart's ``certs.mode: in-cluster`` (:mod:`webhook.certs.keeper`)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any, TypeVar

import click

from webhook.certs.keeper import KeeperConfig
from webhook.certs.rotation import Settings
from webhook.cli.common import configmap_reference, fail

__all__ = ["certs_options", "keeper_config"]

_F = TypeVar("_F", bound=Callable[..., Any])


def certs_options(command: _F) -> _F:
    """Add the ``--certs-*`` options and ``--mutating/--validating-webhook-configuration``."""
    options = [
        click.option(
            "--certs-secret",
            metavar="[NAMESPACE/]NAME",
            help="Keep the CA and the serving pair in this Secret (made by the first replica to start, "
            "read by the others; renewed in it) and write the pair to --tls-cert-file/--tls-private-key-file. "
            "NAMESPACE defaults to $POD_NAMESPACE.",
        ),
        click.option("--certs-dns-name", multiple=True, help="DNS name of the serving certificate (repeatable)."),
        click.option("--certs-ip-address", multiple=True, help="IP address of the serving certificate (repeatable)."),
        click.option(
            "--certs-days",
            default=90,
            show_default=True,
            type=click.IntRange(2),
            help="Validity of a serving certificate; a new one is issued when a third of it is left.",
        ),
        click.option(
            "--certs-ca-days",
            default=3650,
            show_default=True,
            type=click.IntRange(2),
            help="Validity of a CA; a new one is made when a third of it is left (the old one stays "
            "in the caBundle until it expires).",
        ),
        click.option(
            "--certs-interval",
            default=30.0,
            show_default=True,
            type=click.FloatRange(1),
            help="Seconds between two reads of the Secret (and publications of the caBundle).",
        ),
        click.option(
            "--mutating-webhook-configuration",
            multiple=True,
            help="Publish the Secret's CA bundle in this MutatingWebhookConfiguration's caBundle (repeatable).",
        ),
        click.option(
            "--validating-webhook-configuration",
            multiple=True,
            help="Publish the Secret's CA bundle in this ValidatingWebhookConfiguration's caBundle (repeatable).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def keeper_config(
    own_namespace: str | None,
    *,
    certs_secret: str | None,
    certs_dns_name: tuple[str, ...],
    certs_ip_address: tuple[str, ...],
    certs_days: int,
    certs_ca_days: int,
    certs_interval: float,
    mutating_webhook_configuration: tuple[str, ...],
    validating_webhook_configuration: tuple[str, ...],
) -> KeeperConfig | None:
    """The keeper's configuration from the options (None without ``--certs-secret``); exits 2 on
    options that cannot work (no name for the certificate, a bad IP address, settings without
    ``--certs-secret``)."""
    if certs_secret is None:
        given = certs_dns_name or certs_ip_address or mutating_webhook_configuration or validating_webhook_configuration
        if given:
            fail("--certs-dns-name, --certs-ip-address and --*-webhook-configuration need --certs-secret")
        return None
    namespace, name = configmap_reference(certs_secret, own_namespace, "--certs-secret")
    if not certs_dns_name and not certs_ip_address:
        fail("--certs-secret needs at least one --certs-dns-name or --certs-ip-address")
    try:
        settings = Settings(
            dns_names=list(certs_dns_name),
            ip_addresses=list(certs_ip_address),
            days=certs_days,
            ca_days=certs_ca_days,
            renew_before=datetime.timedelta(days=certs_days / 3),
            ca_renew_before=datetime.timedelta(days=certs_ca_days / 3),
        )
    except ValueError as exc:
        fail(f"--certs-ip-address: {exc}")
    return KeeperConfig(
        namespace=namespace,
        secret=name,
        settings=settings,
        mutating=list(mutating_webhook_configuration),
        validating=list(validating_webhook_configuration),
        interval=certs_interval,
        settle=certs_interval,
    )
