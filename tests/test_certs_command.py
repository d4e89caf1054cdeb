"""``kgov certs``: the certificate directory on disk, real keys and signatures (SPEC §7)."""

from __future__ import annotations

import datetime
import ipaddress
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509

from webhook.certs import load_certificate, load_private_key
from webhook.certs.store import CertificateDirectory, split_bundle
from webhook.cli import main


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["certs", *args])
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes is not None else "")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _sans(path: Path) -> tuple[list[str], list[str]]:
    ext = load_certificate(path.read_bytes()).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ext.get_values_for_type(x509.DNSName), [str(ip) for ip in ext.get_values_for_type(x509.IPAddress)]


def test_create_writes_ca_and_serving_certificate_with_service_and_ip_sans(tmp_path: Path) -> None:
    code, output = _run(
        "create",
        str(tmp_path),
        "--service",
        "kgov",
        "--namespace",
        "kgov-system",
        "--dns",
        "localhost",
        "--ip",
        "127.0.0.1",
        "--days",
        "10",
    )
    assert code == 0, output
    assert _sans(tmp_path / "tls.crt") == (
        ["kgov.kgov-system.svc", "kgov.kgov-system.svc.cluster.local", "localhost"],
        ["127.0.0.1"],
    )
    assert _mode(tmp_path / "ca.key") == 0o600
    assert _mode(tmp_path / "tls.key") == 0o600
    ca = load_certificate((tmp_path / "ca.crt").read_bytes())
    leaf = load_certificate((tmp_path / "tls.crt").read_bytes())
    leaf.verify_directly_issued_by(ca)
    assert load_private_key((tmp_path / "tls.key").read_bytes()).public_key() == leaf.public_key()
    left = leaf.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(days=9, hours=23) < left <= datetime.timedelta(days=10)
    assert (tmp_path / "ca-bundle.crt").read_bytes() == (tmp_path / "ca.crt").read_bytes()
    assert "issued" in output and "wrote a new CA" in output


def test_create_again_keeps_a_current_certificate_and_reissues_for_new_names(tmp_path: Path) -> None:
    assert _run("create", str(tmp_path), "--dns", "localhost")[0] == 0
    first_ca, first_leaf = (tmp_path / "ca.crt").read_bytes(), (tmp_path / "tls.crt").read_bytes()
    code, output = _run("create", str(tmp_path), "--dns", "localhost")
    assert code == 0 and "kept" in output
    assert (tmp_path / "tls.crt").read_bytes() == first_leaf
    code, output = _run("create", str(tmp_path), "--dns", "localhost", "--ip", "::1")
    assert code == 0 and "subject alternative names changed" in output
    assert (tmp_path / "ca.crt").read_bytes() == first_ca
    assert _sans(tmp_path / "tls.crt") == (["localhost"], [str(ipaddress.ip_address("::1"))])


def test_renew_only_when_due_and_always_under_the_same_ca(tmp_path: Path) -> None:
    assert _run("create", str(tmp_path), "--dns", "localhost", "--days", "40")[0] == 0
    ca, leaf = (tmp_path / "ca.crt").read_bytes(), (tmp_path / "tls.crt").read_bytes()
    code, output = _run("renew", str(tmp_path), "--renew-before", "30")
    assert code == 0 and "not due" in output
    assert (tmp_path / "tls.crt").read_bytes() == leaf
    code, output = _run("renew", str(tmp_path), "--renew-before", "45", "--days", "90")
    assert code == 0 and "expires in 39 days" in output
    renewed = load_certificate((tmp_path / "tls.crt").read_bytes())
    assert renewed.serial_number != load_certificate(leaf).serial_number
    renewed.verify_directly_issued_by(load_certificate(ca))
    assert (tmp_path / "ca.crt").read_bytes() == ca
    assert _sans(tmp_path / "tls.crt") == (["localhost"], [])
    assert _mode(tmp_path / "tls.key") == 0o600


def test_new_ca_keeps_the_previous_ca_in_the_bundle(tmp_path: Path) -> None:
    assert _run("create", str(tmp_path), "--dns", "localhost")[0] == 0
    old_ca = (tmp_path / "ca.crt").read_bytes()
    code, output = _run("create", str(tmp_path), "--dns", "localhost", "--new-ca")
    assert code == 0, output
    new_ca = (tmp_path / "ca.crt").read_bytes()
    assert new_ca != old_ca
    assert split_bundle((tmp_path / "ca-bundle.crt").read_bytes()) == [new_ca, old_ca]
    load_certificate((tmp_path / "tls.crt").read_bytes()).verify_directly_issued_by(load_certificate(new_ca))


def test_renew_without_a_ca_and_bad_inputs_are_usage_errors(tmp_path: Path) -> None:
    code, output = _run("renew", str(tmp_path / "empty"))
    assert code == 2 and "no CA (ca.crt, ca.key); run `kgov certs create` first" in output
    code, output = _run("create", str(tmp_path))
    assert code == 2 and "at least one DNS name" in output
    code, output = _run("create", str(tmp_path), "--ip", "300.1.1.1")
    assert code == 2 and "300.1.1.1" in output
    code, output = _run("create", str(tmp_path), "--service", "kgov")
    assert code == 2 and "--service and --namespace together" in output
    code, output = _run("inject", str(tmp_path / "empty"), "--webhook-configuration", "x")
    assert code == 2 and "no CA" in output
    assert not CertificateDirectory(tmp_path / "empty").has_ca()


@pytest.mark.parametrize(
    "args, message",
    [
        (("--service", "Bad Svc!", "--namespace", "ns"), "--service: 'Bad Svc!' is not a DNS-1123 label"),
        (("--service", "kgov", "--namespace", "NS_bad"), "--namespace: 'NS_bad' is not a DNS-1123 label"),
        (("--dns", "local host"), "--dns: 'local host' is not a DNS-1123 subdomain"),
        (("--dns", "Webhook.example.com"), "--dns: 'Webhook.example.com' is not a DNS-1123 subdomain"),
        (("--ip", "localhost"), "--ip: 'localhost' is not an IPv4 or IPv6 address"),
    ],
)
def test_create_refuses_names_a_certificate_cannot_carry(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    code, output = _run("create", str(tmp_path / "certs"), *args)
    assert code == 2 and message in output
    assert not (tmp_path / "certs").exists()


def test_create_accepts_a_wildcard_and_an_ipv6_address(tmp_path: Path) -> None:
    code, output = _run("create", str(tmp_path), "--dns", "*.kgov.example.com", "--ip", "::1")
    assert code == 0, output
    assert _sans(tmp_path / "tls.crt") == (["*.kgov.example.com"], ["::1"])


def test_renew_with_a_corrupt_ca_key_names_the_file(tmp_path: Path) -> None:
    assert _run("create", str(tmp_path), "--dns", "localhost")[0] == 0
    (tmp_path / "ca.key").write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n")
    code, output = _run("renew", str(tmp_path), "--force")
    assert code == 2 and f"{tmp_path / 'ca.key'}: not a PEM private key" in output


def test_renew_with_a_corrupt_certificate_names_the_file(tmp_path: Path) -> None:
    assert _run("create", str(tmp_path), "--dns", "localhost")[0] == 0
    (tmp_path / "tls.crt").write_text("garbage")
    code, output = _run("renew", str(tmp_path))
    assert code == 2 and f"{tmp_path / 'tls.crt'}: not a PEM certificate" in output


def test_renew_reissues_over_a_corrupt_serving_key(tmp_path: Path) -> None:
    assert _run("create", str(tmp_path), "--dns", "localhost")[0] == 0
    (tmp_path / "tls.key").write_text("garbage")
    code, output = _run("renew", str(tmp_path))
    assert code == 0 and "tls.key is not a PEM private key" in output
    load_private_key((tmp_path / "tls.key").read_bytes())


@pytest.mark.parametrize("option", ["--webhook-configuration", "--validating-webhook-configuration"])
def test_webhook_configuration_names_are_object_names(tmp_path: Path, option: str) -> None:
    # The name goes into the API path of the read and the patch: refused before the cluster is read.
    assert _run("create", str(tmp_path), "--dns", "localhost")[0] == 0
    for args in (["inject", str(tmp_path)], ["create", str(tmp_path), "--dns", "localhost"]):
        code, output = _run(*args, option, "kgov/../other")
        assert code == 2, output
        assert f"Invalid value for '{option}': 'kgov/../other' is not a valid object name" in output
