"""Certificates for the webhook: a private CA and serving certificates it signs (SPEC §7).

Everything here uses the ``cryptography`` library and works on PEM bytes:

* :func:`generate_ca` makes a self-signed CA (ECDSA P-256 key, ``BasicConstraints(ca=True)``).
* :func:`issue_serving_certificate` signs a TLS server certificate for DNS names and IP addresses
  (for a cluster: ``<service>.<namespace>.svc``; for local runs: ``localhost``, ``127.0.0.1``).
* :func:`write_private` writes key material with mode 0600, never briefly world-readable.

The CA is meant to stay stable across serving-certificate rotations, so the ``caBundle`` written
into a webhook configuration stays valid while the serving certificate is renewed.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Certificates are back-dated a little so that a clock that runs slightly behind on the verifying
# side (another container, another host) does not see them as not yet valid.
CLOCK_SKEW = datetime.timedelta(minutes=5)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.PKCS8,
        encryption_algorithm=serialization.NoEncryption(),
    )


def _spki(public_key: CertificatePublicKeyTypes) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _validity(days: int) -> tuple[datetime.datetime, datetime.datetime]:
    if days < 1:
        raise ValueError(f"days must be at least 1, got {days}")
    now = datetime.datetime.now(datetime.UTC)
    return now - CLOCK_SKEW, now + datetime.timedelta(days=days)


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
) -> x509.CertificateBuilder:
    """A certificate of ``public_key`` for ``subject`` by ``issuer``, valid from ``not_before`` to
    ``not_after``, with a random serial number; extensions and signature still to add."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
    )


def _key_usage(signs_certificates: bool) -> x509.KeyUsage:
    """Digital signature, plus certificate and CRL signing for a CA (``signs_certificates``)."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def load_certificate(cert_pem: bytes) -> x509.Certificate:
    """Parse one PEM certificate.

    Raises:
        ValueError: the bytes are not a PEM certificate.
    """
    return x509.load_pem_x509_certificate(cert_pem)


def load_private_key(key_pem: bytes) -> ec.EllipticCurvePrivateKey:
    """Parse an unencrypted PEM private key made by this module (ECDSA P-256).

    Raises:
        ValueError: not a PEM key, or not an elliptic-curve key.
    """
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"expected an elliptic-curve private key, got {type(key).__name__}")
    return key


def generate_ca(common_name: str, days: int) -> tuple[bytes, bytes]:
    """Create a self-signed certificate authority.

    Args:
        common_name: subject CN of the CA, e.g. ``"kueue-governor-ca"``.
        days: validity in days from now (at least 1).

    Returns:
        ``(cert_pem, key_pem)``: the CA certificate and its unencrypted PKCS#8 ECDSA P-256 key,
        both PEM-encoded bytes.

    Raises:
        ValueError: ``days`` < 1 or an empty ``common_name``.
    """
    if not common_name:
        raise ValueError("common_name must not be empty")
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    not_before, not_after = _validity(days)
    public_key = key.public_key()
    cert = (
        _builder(name, name, public_key, not_before, not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def issue_serving_certificate(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    dns_names: list[str],
    ip_addresses: list[str],
    days: int,
) -> tuple[bytes, bytes]:
    """Issue a TLS server certificate signed by the CA.

    Args:
        ca_cert_pem: the CA certificate, PEM (from :func:`generate_ca`).
        ca_key_pem: the CA's private key, PEM.
        dns_names: DNS subject alternative names, e.g. ``["kgov.kgov-system.svc", "localhost"]``;
            the first one is also the subject CN.
        ip_addresses: IP subject alternative names as text, IPv4 or IPv6, e.g. ``["127.0.0.1"]``.
        days: validity in days from now (at least 1). It is capped at the CA's own expiry, since
            a certificate outliving its issuer would not verify anyway.

    Returns:
        ``(cert_pem, key_pem)``: the leaf certificate (PEM, leaf only, no chain) and its fresh
        unencrypted PKCS#8 ECDSA P-256 key (PEM).

    Raises:
        ValueError: no SAN at all, an unparsable IP address, ``days`` < 1, or a CA key that does
            not belong to the CA certificate.
    """
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    ca_cert = load_certificate(ca_cert_pem)
    ca_key = load_private_key(ca_key_pem)
    if _spki(ca_key.public_key()) != _spki(ca_cert.public_key()):
        raise ValueError("the CA key does not match the CA certificate")
    ips = [ipaddress.ip_address(address) for address in ip_addresses]
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    sans += [x509.IPAddress(ip) for ip in ips]
    common_name = dns_names[0] if dns_names else str(ips[0])

    key = _new_key()
    public_key = key.public_key()
    not_before, not_after = _validity(days)
    not_after = min(not_after, ca_cert.not_valid_after_utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(subject, ca_cert.subject, public_key, not_before, not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def expires_within(cert_pem: bytes, margin: datetime.timedelta) -> bool:
    """Whether the certificate's ``notAfter`` falls within ``margin`` from now (or has passed).

    Use it to decide on rotation, e.g. ``expires_within(cert, timedelta(days=30))``.
    """
    expiry = load_certificate(cert_pem).not_valid_after_utc
    return expiry - datetime.datetime.now(datetime.UTC) <= margin


def write_private(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600, atomically.

    The bytes go to a temporary file of a unique name in the same directory, created 0600 from the
    start (never readable by others, whatever the umask), which then replaces ``path``; a reader never sees a
    half-written key, and a process watching the file sees one change.

    Raises:
        OSError: the directory does not exist or is not writable.
    """
    target = Path(path)
    # A name of its own (not the pid: the processes of one pod, each its container's pid 1, may
    # write the same shared volume at once).
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    temporary = Path(name)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
