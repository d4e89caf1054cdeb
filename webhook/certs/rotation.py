"""The certificates of ``certs.mode: in-cluster``: one Secret that every replica shares, and the
next step of its life (SPEC §7, §8: an offline render carries no key material).

The Secret's data (PEM, base64 in the Secret)::

    ca.crt ca.key     the CA that signs serving certificates now
    ca-bundle.crt     what the webhook configurations' caBundle must hold: the CA, and after a CA
                      change also the previous CAs until they expire
    tls.crt tls.key   the serving pair every replica serves

:func:`next_step` is pure: given the Secret's material, the wanted names and lifetimes, and the
bundle the webhook configurations hold now, it says what to write next, one step at a time:

1. the CA is due (expires within ``ca_renew_before``): a new CA, put first in the bundle, the old
   ones kept; the serving pair stays as it is (still trusted through the old CA);
2. a CA of the bundle has expired: it leaves the bundle;
3. the serving pair is due, for other names, unreadable or not signed by the current CA: a new
   pair from the current CA, but only once the published bundle trusts that CA. Until then the
   step waits, so no replica ever serves a certificate the API server cannot verify.

An old CA stays in the bundle until it expires. A serving certificate never outlives its CA
(:func:`webhook.certs.pki.issue_serving_certificate` caps it), so a replica still serving a pair of
an old CA is trusted for as long as that pair is valid: every replica serves the new pair (within
one sync interval) long before the old CA goes.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass, field

from cryptography import x509

from webhook.certs.pki import generate_ca, issue_serving_certificate, load_certificate, load_private_key
from webhook.certs.store import split_bundle

__all__ = ["KEYS", "Material", "Settings", "initial_material", "next_step", "trusted_by"]

#: The Secret's keys, in the order a reader needs them.
KEYS = ("ca.crt", "ca.key", "ca-bundle.crt", "tls.crt", "tls.key")


@dataclass(frozen=True)
class Settings:
    """What the serving certificate must be: its names, lifetimes and renewal margins.

    ``dns_names``/``ip_addresses``: subject alternative names (at least one in all).
    ``days``/``ca_days``: validity of a new serving certificate / CA, in days.
    ``renew_before``/``ca_renew_before``: how long before expiry a new one is made.
    """

    dns_names: list[str]
    ip_addresses: list[str] = field(default_factory=list)
    days: int = 90
    ca_days: int = 3650
    renew_before: datetime.timedelta = datetime.timedelta(days=30)
    ca_renew_before: datetime.timedelta = datetime.timedelta(days=365)
    ca_name: str = "kueue-governor-ca"

    def __post_init__(self) -> None:
        if not self.dns_names and not self.ip_addresses:
            raise ValueError("the serving certificate needs at least one DNS name or IP address")
        for ip in self.ip_addresses:
            ipaddress.ip_address(ip)  # ValueError names the address
        if datetime.timedelta(days=self.days) <= self.renew_before:
            raise ValueError(f"days ({self.days}) must exceed the renewal margin ({self.renew_before.days} days)")
        if datetime.timedelta(days=self.ca_days) <= self.ca_renew_before:
            raise ValueError(
                f"CA days ({self.ca_days}) must exceed the CA renewal margin ({self.ca_renew_before.days} days)"
            )


@dataclass(frozen=True)
class Material:
    """The Secret's five PEM values (see the module docstring)."""

    ca_crt: bytes
    ca_key: bytes
    ca_bundle: bytes
    tls_crt: bytes
    tls_key: bytes

    def data(self) -> dict[str, str]:
        """The Secret's ``data`` (base64 of each PEM value)."""
        values = (self.ca_crt, self.ca_key, self.ca_bundle, self.tls_crt, self.tls_key)
        return {key: base64.b64encode(value).decode() for key, value in zip(KEYS, values, strict=True)}

    @classmethod
    def from_data(cls, data: dict[str, str] | None) -> Material:
        """Read a Secret's ``data``. A missing ``ca-bundle.crt`` is the CA alone; a missing
        serving pair is empty (:func:`next_step` issues one).

        Raises:
            ValueError: no CA pair, a value that is not base64, or a CA pair that does not parse
                (the message names the key).
        """
        values: dict[str, bytes] = {}
        for key in KEYS:
            if not data or key not in data:
                if key in ("ca.crt", "ca.key"):
                    raise ValueError(f"no {key}")
                continue
            try:
                values[key] = base64.b64decode(data[key], validate=True)
            except ValueError:
                raise ValueError(f"{key} is not base64") from None
        try:
            load_certificate(values["ca.crt"])
        except ValueError as exc:
            raise ValueError(f"ca.crt is not a PEM certificate ({exc})") from None
        try:
            load_private_key(values["ca.key"])
        except ValueError as exc:
            raise ValueError(f"ca.key is not a PEM private key ({exc})") from None
        return cls(
            values["ca.crt"],
            values["ca.key"],
            values.get("ca-bundle.crt", values["ca.crt"]),
            values.get("tls.crt", b""),
            values.get("tls.key", b""),
        )


def initial_material(settings: Settings, keep: bytes = b"", with_pair: bool = True) -> Material:
    """A new CA and (``with_pair``) a serving pair it signs; ``keep``: PEM certificates (the
    bundle published so far) that stay in the new bundle while they are valid, after the new CA.
    Without a pair, :func:`next_step` issues one once the new bundle is published.

    Raises:
        ValueError: no name at all, an unparsable IP address, days < 1.
    """
    ca_crt, ca_key = generate_ca(settings.ca_name, settings.ca_days)
    tls_crt, tls_key = b"", b""
    if with_pair:
        tls_crt, tls_key = issue_serving_certificate(
            ca_crt, ca_key, settings.dns_names, settings.ip_addresses, settings.days
        )
    bundle = _bundle(ca_crt, keep, datetime.datetime.now(datetime.UTC))
    return Material(ca_crt, ca_key, bundle, tls_crt, tls_key)


def _bundle(first: bytes, rest: bytes, now: datetime.datetime) -> bytes:
    """``first``, then each certificate of ``rest`` valid at ``now``, once (order kept)."""
    kept = [first]
    for cert in split_bundle(rest):
        if cert not in kept and _valid_at(cert, now):
            kept.append(cert)
    return b"".join(kept)


def _valid_at(cert_pem: bytes, now: datetime.datetime) -> bool:
    try:
        return load_certificate(cert_pem).not_valid_after_utc > now
    except ValueError:
        return False


def trusted_by(bundle: bytes, ca_crt: bytes) -> bool:
    """Whether the PEM ``bundle`` holds the certificate ``ca_crt`` (compared as certificates)."""
    wanted = load_certificate(ca_crt)
    for cert in split_bundle(bundle):
        try:
            if load_certificate(cert) == wanted:
                return True
        except ValueError:
            continue
    return False


def _sans(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return list(names.get_values_for_type(x509.DNSName)), [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]


def _why_new_pair(material: Material, settings: Settings, now: datetime.datetime) -> str:
    """Why the serving pair must be issued again ("" when it is fine)."""
    if not material.tls_crt or not material.tls_key:
        return "there is no serving pair"
    try:
        cert = load_certificate(material.tls_crt)
        key = load_private_key(material.tls_key)
    except ValueError:
        return "the serving pair does not parse"
    if key.public_key() != cert.public_key():
        return "the serving key does not match its certificate"
    try:
        cert.verify_directly_issued_by(load_certificate(material.ca_crt))
    except (ValueError, TypeError, Exception):  # InvalidSignature has no common base but Exception
        return "the serving certificate was not issued by the current CA"
    wanted = (settings.dns_names, [str(ipaddress.ip_address(ip)) for ip in settings.ip_addresses])
    if _sans(cert) != wanted:
        return "the subject alternative names changed"
    left = cert.not_valid_after_utc - now
    if left <= settings.renew_before:
        return f"the serving certificate expires in {max(left.days, 0)} days"
    return ""


def next_step(
    material: Material, settings: Settings, published: bytes, now: datetime.datetime | None = None
) -> tuple[Material, str] | None:
    """The Secret's next material and why, or None when nothing is due or the step must wait.

    ``published``: the PEM bundle every webhook configuration holds now (b"" when they differ or
    hold none). A new serving pair waits until it trusts the current CA.

    Raises:
        ValueError: the settings name no SAN, or an unparsable IP address.
    """
    now = now or datetime.datetime.now(datetime.UTC)
    ca = load_certificate(material.ca_crt)
    ca_left = ca.not_valid_after_utc - now
    if ca_left <= settings.ca_renew_before:
        ca_crt, ca_key = generate_ca(settings.ca_name, settings.ca_days)
        bundle = _bundle(ca_crt, material.ca_bundle, now)
        changed = Material(ca_crt, ca_key, bundle, material.tls_crt, material.tls_key)
        return changed, f"a new CA: the current one expires in {max(ca_left.days, 0)} days"
    kept = [c for c in split_bundle(material.ca_bundle) if _valid_at(c, now)]
    if not trusted_by(b"".join(kept), material.ca_crt):
        kept.insert(0, material.ca_crt)
    if b"".join(kept) != material.ca_bundle:
        trimmed = Material(material.ca_crt, material.ca_key, b"".join(kept), material.tls_crt, material.tls_key)
        return trimmed, "the CA bundle drops expired CAs and holds the current CA"
    why = _why_new_pair(material, settings, now)
    if not why or not published or not trusted_by(published, material.ca_crt):
        return None
    tls_crt, tls_key = issue_serving_certificate(
        material.ca_crt, material.ca_key, settings.dns_names, settings.ip_addresses, settings.days
    )
    return Material(
        material.ca_crt, material.ca_key, material.ca_bundle, tls_crt, tls_key
    ), f"a new serving pair: {why}"
