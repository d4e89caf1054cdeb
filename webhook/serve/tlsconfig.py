"""The serving TLS context and what to say when a certificate pair cannot be loaded.

TLS 1.2 is the minimum; on TLS 1.2 only ECDHE key exchange with AEAD ciphers (AES-GCM,
ChaCha20-Poly1305) is offered, no CBC suite (TLS 1.3 suites are all AEAD). The Go client of the
API server negotiates TLS 1.3 anyway.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

__all__ = ["TLS12_CIPHERS", "describe_pair_error", "make_ssl_context", "serve_certificate_of"]

#: OpenSSL cipher list for TLS 1.2: forward secrecy and AEAD only.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL"


def make_ssl_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server TLS context: TLS 1.2 minimum, AEAD-only TLS 1.2 suites, the pair loaded.

    Raises:
        ssl.SSLError / OSError: unreadable or mismatched certificate and key (see
            :func:`describe_pair_error` for a readable reason).
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.load_cert_chain(str(cert_file), str(key_file))
    return context


def describe_pair_error(cert_file: Path, key_file: Path, error: BaseException) -> str:
    """Why ``cert_file`` and ``key_file`` cannot serve, in words (OpenSSL says only "PEM lib").

    Reads both files with ``cryptography``: a missing or unreadable file, a file that is not PEM
    (or an encrypted key), or a key that is not the certificate's (typical mid-rotation).
    """
    try:
        cert_pem, key_pem = cert_file.read_bytes(), key_file.read_bytes()
    except OSError as exc:
        return f"cannot read {exc.filename}: {exc.strerror}"
    try:
        certificate = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return f"{cert_file} holds no PEM certificate"
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return f"{key_file} holds no unencrypted PEM private key"
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    if certificate.public_key().public_bytes(encoding, public) != key.public_key().public_bytes(encoding, public):
        return (
            f"the key in {key_file} is not the key of the certificate in {cert_file} "
            f"(serial {certificate.serial_number:x}); one of the two files has not been replaced yet"
        )
    reason = getattr(error, "reason", None) or str(error)
    return f"OpenSSL refused the pair: {reason}"


def serve_certificate_of(fresh: ssl.SSLContext) -> Callable[[ssl.SSLObject, str | None, ssl.SSLContext], None]:
    """An SNI callback (OpenSSL runs it on every handshake, SNI or not) that switches to ``fresh``."""

    def switch(ssl_object: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext) -> None:
        ssl_object.context = fresh

    return switch
