"""The certificate directory ``kgov certs`` keeps (SPEC §7).

Files (keys written 0600 with :func:`webhook.certs.pki.write_private`, atomically)::

    ca.crt  ca.key        the CA; made once, kept across serving-certificate renewals
    ca-bundle.crt         what the webhook configurations' caBundle holds: the CA, and after a CA
                          change also the previous CA while it is still valid, so servers still
                          on a certificate of the old CA keep being trusted
    tls.crt tls.key       the serving certificate (leaf only) and its key, as ``kgov serve
                          --tls-cert-file/--tls-private-key-file`` and a ``kubernetes.io/tls``
                          Secret name them

Every write replaces a file in one rename, so a server that reloads on change (``kgov serve``)
never reads half a file; the certificate is written before its key, and the server keeps the
previous pair until the two match again.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from webhook.certs.pki import (
    generate_ca,
    issue_serving_certificate,
    load_certificate,
    load_private_key,
    write_private,
)

__all__ = ["CertificateDirectory", "Outcome", "split_bundle"]

PEM_END = b"-----END CERTIFICATE-----"


def split_bundle(bundle: bytes) -> list[bytes]:
    """The PEM certificates of a bundle, each ending with a newline (order kept)."""
    parts = []
    for chunk in bundle.split(PEM_END):
        body = chunk.strip()
        if body:
            parts.append(body + b"\n" + PEM_END + b"\n")
    return parts


def _valid_now(cert_pem: bytes) -> bool:
    try:
        return load_certificate(cert_pem).not_valid_after_utc > datetime.datetime.now(datetime.UTC)
    except ValueError:
        return False


def _read_certificate(path: Path) -> x509.Certificate:
    """The PEM certificate in ``path``; ValueError naming the file when it is not one."""
    try:
        return load_certificate(path.read_bytes())
    except ValueError as exc:
        raise ValueError(f"{path}: not a PEM certificate ({exc})") from None


def _check_private_key(path: Path) -> bytes:
    """The bytes of ``path`` once they parse as a PEM private key; ValueError naming the file."""
    data = path.read_bytes()
    try:
        load_private_key(data)
    except ValueError as exc:
        raise ValueError(f"{path}: not a PEM private key ({exc})") from None
    return data


def _sans(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return list(names.get_values_for_type(x509.DNSName)), [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]


@dataclass(frozen=True)
class Outcome:
    """What one ``create``/``renew`` did: ``ca_changed`` (a new CA, so the caBundle must be
    published again), ``issued`` (a new serving certificate), ``reason`` (why, in words), and the
    serving certificate's expiry (UTC)."""

    ca_changed: bool
    issued: bool
    reason: str
    not_after: datetime.datetime


class CertificateDirectory:
    """A directory of ``ca.crt``, ``ca.key``, ``ca-bundle.crt``, ``tls.crt`` and ``tls.key``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.ca_crt = self.root / "ca.crt"
        self.ca_key = self.root / "ca.key"
        self.bundle = self.root / "ca-bundle.crt"
        self.tls_crt = self.root / "tls.crt"
        self.tls_key = self.root / "tls.key"

    def has_ca(self) -> bool:
        return self.ca_crt.is_file() and self.ca_key.is_file()

    def ca_bundle(self) -> bytes:
        """The PEM bundle to publish as caBundle (``ca-bundle.crt``, else ``ca.crt``).

        Raises:
            FileNotFoundError: the directory has no CA yet.
        """
        return self.bundle.read_bytes() if self.bundle.is_file() else self.ca_crt.read_bytes()

    def serving_sans(self) -> tuple[list[str], list[str]]:
        """(DNS names, IP addresses) of the current serving certificate.

        Raises:
            FileNotFoundError: no ``tls.crt``; ValueError: it is not a PEM certificate.
        """
        return _sans(_read_certificate(self.tls_crt))

    def _new_ca(self, common_name: str, days: int) -> None:
        previous = [c for c in split_bundle(self.ca_bundle()) if _valid_now(c)] if self.has_ca() else []
        cert, key = generate_ca(common_name, days)
        write_private(self.ca_key, key)
        self.ca_crt.write_bytes(cert)
        # New CA first; the old one stays trusted until it expires or the next CA change.
        write_private(self.bundle, b"".join([cert, *previous[:1]]))
        self.bundle.chmod(0o644)

    def _issue(self, dns_names: list[str], ip_addresses: list[str], days: int) -> datetime.datetime:
        _read_certificate(self.ca_crt)
        cert, key = issue_serving_certificate(
            self.ca_crt.read_bytes(), _check_private_key(self.ca_key), dns_names, ip_addresses, days
        )
        write_private(self.tls_crt, cert)
        self.tls_crt.chmod(0o644)
        write_private(self.tls_key, key)
        return load_certificate(cert).not_valid_after_utc

    def _why_reissue(self, dns_names: list[str], ip_addresses: list[str], before: datetime.timedelta) -> str:
        if not (self.tls_crt.is_file() and self.tls_key.is_file()):
            return "no serving certificate yet"
        try:
            _check_private_key(self.tls_key)
        except ValueError:
            return f"{self.tls_key.name} is not a PEM private key"
        cert = _read_certificate(self.tls_crt)
        if cert.issuer != _read_certificate(self.ca_crt).subject or not _signed_by(cert, self.ca_crt):
            return "the serving certificate was issued by another CA"
        if _sans(cert) != (dns_names, [str(ipaddress.ip_address(ip)) for ip in ip_addresses]):
            return "the subject alternative names changed"
        left = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
        if left <= before:
            return f"it expires in {max(left.days, 0)} days (renewal {before.days} days before expiry)"
        return ""

    def create(
        self,
        dns_names: list[str],
        ip_addresses: list[str],
        *,
        days: int = 90,
        ca_days: int = 3650,
        ca_name: str = "kueue-governor-ca",
        new_ca: bool = False,
        before: datetime.timedelta = datetime.timedelta(days=30),
    ) -> Outcome:
        """Make the CA if there is none (or ``new_ca``), and a serving certificate for the names
        unless a valid one for exactly these names, of this CA, is already there.

        Raises:
            ValueError: no name at all, an unparsable IP address, days < 1.
            OSError: the directory cannot be written.
        """
        if not dns_names and not ip_addresses:
            raise ValueError("give at least one DNS name (--service/--namespace or --dns) or --ip")
        for ip in ip_addresses:
            ipaddress.ip_address(ip)  # ValueError names the address
        self.root.mkdir(parents=True, exist_ok=True)
        ca_changed = new_ca or not self.has_ca()
        if ca_changed:
            self._new_ca(ca_name, ca_days)
        reason = "a new CA" if ca_changed else self._why_reissue(dns_names, ip_addresses, before)
        if not reason:
            not_after = load_certificate(self.tls_crt.read_bytes()).not_valid_after_utc
            return Outcome(False, False, "the serving certificate is current", not_after)
        return Outcome(ca_changed, True, reason, self._issue(dns_names, ip_addresses, days))

    def renew(self, *, before: datetime.timedelta, days: int = 90, force: bool = False) -> Outcome:
        """Issue the serving certificate again, same names, same CA, when it expires within
        ``before`` (or ``force``).

        Raises:
            FileNotFoundError: no CA or no serving certificate in the directory (run create).
        """
        if not self.has_ca():
            raise FileNotFoundError(f"{self.root}: no CA (ca.crt, ca.key); run `kgov certs create` first")
        dns_names, ip_addresses = self.serving_sans()
        reason = "forced" if force else self._why_reissue(dns_names, ip_addresses, before)
        if not reason:
            not_after = load_certificate(self.tls_crt.read_bytes()).not_valid_after_utc
            return Outcome(False, False, f"not due (renewal {before.days} days before expiry)", not_after)
        return Outcome(False, True, reason, self._issue(dns_names, ip_addresses, days))


def _signed_by(cert: x509.Certificate, ca_file: Path) -> bool:
    try:
        cert.verify_directly_issued_by(load_certificate(ca_file.read_bytes()))
    except (ValueError, TypeError, Exception):  # InvalidSignature has no common base but Exception
        return False
    return True
