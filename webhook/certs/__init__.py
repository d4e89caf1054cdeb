"""Certificates for the webhook (SPEC §7): the PKI primitives (:mod:`webhook.certs.pki`), the
certificate directory ``kgov certs`` keeps (:mod:`webhook.certs.store`), the ``caBundle`` of our
webhook configurations (:mod:`webhook.certs.inject`), and the certificates the servers keep in a
Secret themselves, ``kgov serve --certs-secret`` (:mod:`webhook.certs.rotation`, the steps;
:mod:`webhook.certs.keeper`, the API calls). The CLI is :mod:`webhook.cli.certs`."""

from webhook.certs.pki import (
    CLOCK_SKEW,
    expires_within,
    generate_ca,
    issue_serving_certificate,
    load_certificate,
    load_private_key,
    write_private,
)

__all__ = [
    "CLOCK_SKEW",
    "expires_within",
    "generate_ca",
    "issue_serving_certificate",
    "load_certificate",
    "load_private_key",
    "write_private",
]
