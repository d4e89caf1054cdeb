"""``kgov certs``: the webhook's CA and serving certificate, and the caBundle that trusts them.

Exit codes: 0 success; 1 the caBundle could not be published (configuration missing, API refused);
2 usage error, or a certificate directory that cannot be used.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import re
from pathlib import Path

import click

from webhook.certs.store import CertificateDirectory, Outcome
from webhook.cli.options import OBJECT_NAME
from webhook.core.platform.platform import dns1123_label_error

__all__ = ["certs_group"]

_EXIT_CODES = """\b
Exit codes:
  0  success
  1  the caBundle could not be published (see the message)
  2  usage error, or a certificate directory that cannot be used
"""

_directory_argument = click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
_days_option = click.option(
    "--days", default=90, show_default=True, type=click.IntRange(1), help="Validity of the serving certificate."
)
_before_option = click.option(
    "--renew-before",
    "renew_before",
    default=30,
    show_default=True,
    type=click.IntRange(0),
    help="Issue a new serving certificate when the current one expires within this many days.",
)
_webhook_option = click.option(
    "--webhook-configuration",
    "mutating",
    multiple=True,
    type=OBJECT_NAME,
    help="MutatingWebhookConfiguration whose caBundle is set to the CA bundle (repeatable).",
)
_validating_option = click.option(
    "--validating-webhook-configuration",
    "validating",
    multiple=True,
    type=OBJECT_NAME,
    help="ValidatingWebhookConfiguration whose caBundle is set to the CA bundle (repeatable).",
)
_kubeconfig_option = click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, exists=True),
    help="Kubeconfig for --webhook-configuration (default: $KUBECONFIG, ~/.kube/config, in-cluster).",
)


@click.group("certs")
def certs_group() -> None:
    """The webhook's CA and serving certificate (a directory of PEM files, keys 0600).

    \b
    DIRECTORY holds ca.crt ca.key (the CA, kept across renewals), ca-bundle.crt (the caBundle to
    publish: the CA, plus the previous CA for a while after a CA change) and tls.crt tls.key (the
    serving certificate, for kgov serve --tls-cert-file/--tls-private-key-file).
    """


def _report(directory: CertificateDirectory, outcome: Outcome) -> None:
    expiry = outcome.not_after.strftime("%Y-%m-%dT%H:%M:%SZ")
    if outcome.ca_changed:
        click.echo(f"wrote a new CA: {directory.ca_crt}, {directory.ca_key}, {directory.bundle}", err=True)
    if outcome.issued:
        click.echo(f"issued {directory.tls_crt}, {directory.tls_key} ({outcome.reason}); expires {expiry}", err=True)
    else:
        click.echo(f"kept {directory.tls_crt}: {outcome.reason}; expires {expiry}", err=True)


def _publish(
    directory: CertificateDirectory, mutating: tuple[str, ...], validating: tuple[str, ...], kubeconfig: str | None
) -> None:
    if not mutating and not validating:
        return
    from webhook.certs.inject import InjectError, inject_ca_bundle
    from webhook.kube.client import ClusterError, open_client

    async def run() -> None:
        api = await open_client(kubeconfig, in_cluster=True)
        async with api:
            for result in await inject_ca_bundle(api, directory.ca_bundle(), list(mutating), list(validating)):
                what = f"caBundle set in {', '.join(result.patched)}" if result.patched else "caBundle already current"
                click.echo(f"{result.kind} {result.name}: {what}", err=True)

    try:
        asyncio.run(run())
    except InjectError as exc:
        raise click.ClickException(str(exc)) from None
    except ClusterError as exc:
        raise click.ClickException(f"cannot reach the API server: {exc}") from None


@certs_group.command("create", epilog=_EXIT_CODES)
@_directory_argument
@click.option("--service", help="Service name of the webhook; with --namespace adds <service>.<namespace>.svc.")
@click.option("-n", "--namespace", help="Namespace of the Service.")
@click.option("--dns", multiple=True, help="Extra DNS name (repeatable), e.g. localhost.")
@click.option("--ip", multiple=True, help="IP address SAN (repeatable), e.g. 127.0.0.1 for local runs.")
@_days_option
@click.option("--ca-days", default=3650, show_default=True, type=click.IntRange(1), help="Validity of a new CA.")
@click.option(
    "--new-ca", is_flag=True, help="Make a new CA even if DIRECTORY has one (the old one stays in the bundle)."
)
@_before_option
@_webhook_option
@_validating_option
@_kubeconfig_option
def create_command(
    directory: Path,
    service: str | None,
    namespace: str | None,
    dns: tuple[str, ...],
    ip: tuple[str, ...],
    days: int,
    ca_days: int,
    new_ca: bool,
    renew_before: int,
    mutating: tuple[str, ...],
    validating: tuple[str, ...],
    kubeconfig: str | None,
) -> None:
    """Create the CA (once) and a serving certificate in DIRECTORY.

    The serving certificate names <service>.<namespace>.svc and .svc.cluster.local (with --service
    and --namespace), every --dns and every --ip. A current certificate for exactly these names,
    issued by this CA, is kept. When the CA is new, the caBundle of every --webhook-configuration
    is set to it.
    """
    if (service is None) != (namespace is None):
        raise click.UsageError("give --service and --namespace together")
    _check_names(service, namespace, dns, ip)
    names = [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"] if service else []
    names += [name for name in dns if name not in names]
    store = CertificateDirectory(directory)
    try:
        outcome = store.create(
            names,
            list(ip),
            days=days,
            ca_days=ca_days,
            new_ca=new_ca,
            before=datetime.timedelta(days=renew_before),
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.UsageError(f"{directory}: {exc.strerror or exc}") from None
    _report(store, outcome)
    _publish(store, mutating, validating, kubeconfig)


_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _check_names(service: str | None, namespace: str | None, dns: tuple[str, ...], ip: tuple[str, ...]) -> None:
    """Refuse (usage error, exit 2) a --service or --namespace that is not a DNS-1123 label (what
    Kubernetes requires of Service and Namespace names), a --dns name that is not a DNS-1123
    subdomain (253 characters at most; a leading ``*.`` wildcard is allowed) and an --ip that is
    not an IPv4 or IPv6 address."""
    for option, value in (("--service", service), ("--namespace", namespace)):
        error = dns1123_label_error(value) if value is not None else None
        if error:
            raise click.UsageError(f"{option}: {error}")
    for name in dns:
        host = name[2:] if name.startswith("*.") else name
        if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(host):
            raise click.UsageError(
                f"--dns: {name!r} is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', "
                "each part starting and ending with a letter or digit, at most 253 characters)"
            )
    for address in ip:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise click.UsageError(f"--ip: {address!r} is not an IPv4 or IPv6 address") from None


@certs_group.command("renew", epilog=_EXIT_CODES)
@_directory_argument
@_days_option
@_before_option
@click.option("--force", is_flag=True, help="Issue a new serving certificate now, due or not.")
def renew_command(directory: Path, days: int, renew_before: int, force: bool) -> None:
    """Issue the serving certificate in DIRECTORY again, same names and same CA, when it is due.

    Run it on a schedule (e.g. daily): the caBundle does not change, and kgov serve picks the new
    files up without a restart.
    """
    store = CertificateDirectory(directory)
    try:
        outcome = store.renew(before=datetime.timedelta(days=renew_before), days=days, force=force)
    except (FileNotFoundError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    _report(store, outcome)


@certs_group.command("inject", epilog=_EXIT_CODES)
@_directory_argument
@_webhook_option
@_validating_option
@_kubeconfig_option
def inject_command(
    directory: Path, mutating: tuple[str, ...], validating: tuple[str, ...], kubeconfig: str | None
) -> None:
    """Set the caBundle of webhook configurations to DIRECTORY's CA bundle (where it differs)."""
    if not mutating and not validating:
        raise click.UsageError("give --webhook-configuration NAME (or --validating-webhook-configuration NAME)")
    store = CertificateDirectory(directory)
    if not store.has_ca():
        raise click.UsageError(f"{directory}: no CA (ca.crt, ca.key); run `kgov certs create` first")
    _publish(store, mutating, validating, kubeconfig)
