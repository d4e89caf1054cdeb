"""Certificates: real keys, real signatures, real TLS handshakes on loopback."""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from webhook.certs import (
    expires_within,
    generate_ca,
    issue_serving_certificate,
    load_certificate,
    load_private_key,
    write_private,
)


@pytest.fixture(scope="module")
def ca() -> tuple[bytes, bytes]:
    return generate_ca("kgov-test-ca", days=30)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def test_ca_is_a_self_signed_p256_ca(ca: tuple[bytes, bytes]) -> None:
    cert = load_certificate(ca[0])
    key = load_private_key(ca[1])
    assert isinstance(key.curve, ec.SECP256R1)
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert cert.subject == cert.issuer
    assert cert.subject.rfc4514_string() == "CN=kgov-test-ca"
    cert.verify_directly_issued_by(cert)  # raises when the self-signature is wrong


def test_ca_expiry_is_days_from_now(ca: tuple[bytes, bytes]) -> None:
    cert = load_certificate(ca[0])
    expected = _now() + datetime.timedelta(days=30)
    assert abs(cert.not_valid_after_utc - expected) < datetime.timedelta(minutes=1)
    assert cert.not_valid_before_utc < _now()


def test_serving_certificate_sans_and_signature(ca: tuple[bytes, bytes]) -> None:
    cert_pem, key_pem = issue_serving_certificate(
        ca[0], ca[1], ["kgov.kgov-system.svc", "localhost"], ["127.0.0.1", "::1"], days=7
    )
    cert = load_certificate(cert_pem)
    ca_cert = load_certificate(ca[0])

    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["kgov.kgov-system.svc", "localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    assert cert.issuer == ca_cert.subject
    cert.verify_directly_issued_by(ca_cert)
    assert isinstance(cert.signature_hash_algorithm, hashes.SHA256)
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]
    # The key file belongs to the certificate.
    assert load_private_key(key_pem).public_key() == cert.public_key()
    expected = _now() + datetime.timedelta(days=7)
    assert abs(cert.not_valid_after_utc - expected) < datetime.timedelta(minutes=1)


def test_serving_certificate_signed_by_another_ca_does_not_verify(ca: tuple[bytes, bytes]) -> None:
    # Same subject name, different key: only the signature can tell them apart.
    other_cert, other_key = generate_ca("kgov-test-ca", days=30)
    cert_pem, _ = issue_serving_certificate(other_cert, other_key, ["localhost"], [], days=1)
    with pytest.raises(InvalidSignature):
        load_certificate(cert_pem).verify_directly_issued_by(load_certificate(ca[0]))


def test_serving_certificate_never_outlives_the_ca() -> None:
    ca_cert, ca_key = generate_ca("short-lived", days=2)
    cert_pem, _ = issue_serving_certificate(ca_cert, ca_key, ["localhost"], [], days=365)
    assert load_certificate(cert_pem).not_valid_after_utc == load_certificate(ca_cert).not_valid_after_utc


def test_mismatched_ca_key_is_refused(ca: tuple[bytes, bytes]) -> None:
    _, other_key = generate_ca("other", days=1)
    with pytest.raises(ValueError, match="does not match"):
        issue_serving_certificate(ca[0], other_key, ["localhost"], [], days=1)


@pytest.mark.parametrize(
    ("dns", "ips", "days", "message"),
    [([], [], 1, "at least one"), (["localhost"], ["not-an-ip"], 1, "not-an-ip"), (["x"], [], 0, "days")],
)
def test_bad_arguments(ca: tuple[bytes, bytes], dns: list[str], ips: list[str], days: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        issue_serving_certificate(ca[0], ca[1], dns, ips, days=days)


def test_expires_within(ca: tuple[bytes, bytes]) -> None:
    assert not expires_within(ca[0], datetime.timedelta(days=29))
    assert expires_within(ca[0], datetime.timedelta(days=31))


def test_write_private_mode_0600_even_with_permissive_umask(tmp_path: Path) -> None:
    target = tmp_path / "tls.key"
    old = os.umask(0)
    try:
        write_private(target, b"first")
        write_private(target, b"second")  # replacing keeps the mode
    finally:
        os.umask(old)
    assert target.read_bytes() == b"second"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["tls.key"]  # no temporary left behind


def test_tls_handshake_on_loopback(tmp_path: Path, ca: tuple[bytes, bytes]) -> None:
    """A client that trusts only the CA completes a TLS handshake with 127.0.0.1 and localhost."""
    cert_pem, key_pem = issue_serving_certificate(ca[0], ca[1], ["localhost"], ["127.0.0.1"], days=1)
    (tmp_path / "tls.crt").write_bytes(cert_pem)
    write_private(tmp_path / "tls.key", key_pem)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ctx = ssl.create_default_context(cadata=ca[0].decode())

    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            for _ in range(2):
                conn, _ = listener.accept()
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        for server_name in ("127.0.0.1", "localhost"):
            with (
                socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
                client_ctx.wrap_socket(raw, server_hostname=server_name) as tls,
            ):
                assert tls.recv(2) == b"ok"
        thread.join(timeout=5)
