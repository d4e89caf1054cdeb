"""In-cluster certificates (``certs.mode: in-cluster``): the Secret's material and its next step
(:mod:`webhook.certs.rotation`), with real keys, and every served pair checked against the bundle
an API server would hold (real signature verification), step by step."""

from __future__ import annotations

import base64
import datetime
import re
import threading
from pathlib import Path

import pytest
from cryptography import x509

from webhook.certs import generate_ca, issue_serving_certificate, load_certificate, write_private
from webhook.certs.rotation import KEYS, Material, Settings, initial_material, next_step, trusted_by
from webhook.certs.store import split_bundle

NAMES = ["kgov-kueue-governor.kgov.svc", "kgov-kueue-governor.kgov.svc.cluster.local"]
SETTINGS = Settings(dns_names=NAMES)
DAY = datetime.timedelta(days=1)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def verifies(tls_crt: bytes, bundle: bytes, at: datetime.datetime | None = None) -> bool:
    """Whether a client holding ``bundle`` as its trust store accepts ``tls_crt`` for the
    Service's name (a real signature check, as the API server's TLS client does)."""
    leaf = load_certificate(tls_crt)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    if NAMES[0] not in names.get_values_for_type(x509.DNSName):
        return False
    moment = at or _now()
    if not leaf.not_valid_before_utc <= moment <= leaf.not_valid_after_utc:
        return False
    for ca_pem in split_bundle(bundle):
        try:
            leaf.verify_directly_issued_by(load_certificate(ca_pem))
        except Exception:  # InvalidSignature, ValueError: not this CA
            continue
        return True
    return False


def test_initial_material_is_a_ca_its_bundle_and_a_pair_it_signed() -> None:
    material = initial_material(SETTINGS)
    assert split_bundle(material.ca_bundle) == [material.ca_crt]
    assert verifies(material.tls_crt, material.ca_bundle)
    assert load_certificate(material.ca_crt).extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert next_step(material, SETTINGS, material.ca_bundle) is None


def test_secret_data_round_trip_and_errors_name_the_key() -> None:
    material = initial_material(SETTINGS)
    data = material.data()
    assert sorted(data) == sorted(KEYS)
    assert base64.b64decode(data["tls.key"]).startswith(b"-----BEGIN PRIVATE KEY-----")
    assert Material.from_data(data) == material
    # Without a bundle: the CA alone; without a pair: none, and the next step issues one.
    partial = Material.from_data({k: v for k, v in data.items() if k in ("ca.crt", "ca.key")})
    assert (partial.ca_bundle, partial.tls_crt, partial.tls_key) == (material.ca_crt, b"", b"")
    step = next_step(partial, SETTINGS, material.ca_bundle)
    assert step is not None and step[1] == "a new serving pair: there is no serving pair"
    assert verifies(step[0].tls_crt, material.ca_bundle)
    with pytest.raises(ValueError, match=r"^no ca.key$"):
        Material.from_data({k: v for k, v in data.items() if k != "ca.key"})
    with pytest.raises(ValueError, match=r"^tls.crt is not base64$"):
        Material.from_data({**data, "tls.crt": "%%%"})
    with pytest.raises(ValueError, match=r"^ca.key is not a PEM private key"):
        Material.from_data({**data, "ca.key": base64.b64encode(b"nope").decode()})
    with pytest.raises(ValueError, match=r"^no ca.crt$"):
        Material.from_data(None)


def test_settings_refuse_what_cannot_work() -> None:
    with pytest.raises(ValueError, match="at least one DNS name or IP address"):
        Settings(dns_names=[])
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        Settings(dns_names=NAMES, ip_addresses=["10.0.0.300"])
    with pytest.raises(ValueError, match=r"days \(30\) must exceed the renewal margin \(30 days\)"):
        Settings(dns_names=NAMES, days=30)
    with pytest.raises(ValueError, match=r"CA days \(365\) must exceed the CA renewal margin \(365 days\)"):
        Settings(dns_names=NAMES, ca_days=365)


def test_a_due_serving_pair_is_renewed_by_the_same_ca_without_touching_the_bundle() -> None:
    material = initial_material(SETTINGS)
    later = _now() + datetime.timedelta(days=70)  # 90-day pair, renewed 30 days before expiry
    step = next_step(material, SETTINGS, material.ca_bundle, later)
    assert step is not None
    renewed, why = step
    assert why.startswith("a new serving pair: the serving certificate expires in ")
    assert (renewed.ca_crt, renewed.ca_key, renewed.ca_bundle) == (material.ca_crt, material.ca_key, material.ca_bundle)
    assert renewed.tls_crt != material.tls_crt and renewed.tls_key != material.tls_key
    # Both pairs verify with the unchanged bundle: replicas on either are fine.
    assert verifies(material.tls_crt, renewed.ca_bundle) and verifies(renewed.tls_crt, renewed.ca_bundle)


def test_new_names_give_a_new_pair() -> None:
    material = initial_material(SETTINGS)
    wider = Settings(dns_names=[*NAMES, "kgov.example"], ip_addresses=["127.0.0.1"])
    step = next_step(material, wider, material.ca_bundle)
    assert step is not None and step[1] == "a new serving pair: the subject alternative names changed"
    sans = load_certificate(step[0].tls_crt).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [*NAMES, "kgov.example"]


def test_a_new_pair_waits_until_the_published_bundle_trusts_its_ca() -> None:
    material = initial_material(SETTINGS)
    other_ca, other_key = generate_ca("someone-else", 3650)
    foreign = issue_serving_certificate(other_ca, other_key, NAMES, [], 90)
    broken = Material(material.ca_crt, material.ca_key, material.ca_bundle, *foreign)
    assert next_step(broken, SETTINGS, b"") is None  # nothing published yet
    assert next_step(broken, SETTINGS, other_ca) is None  # published, but not this CA
    step = next_step(broken, SETTINGS, material.ca_bundle)
    assert (
        step is not None and step[1] == "a new serving pair: the serving certificate was not issued by the current CA"
    )
    assert verifies(step[0].tls_crt, material.ca_bundle)


#: Material made with a CA of 10 days: under SETTINGS (a new CA 365 days before expiry) it is due.
SHORT = Settings(dns_names=NAMES, days=5, ca_days=10, renew_before=DAY, ca_renew_before=DAY)


def test_ca_rotation_never_leaves_a_served_pair_unverifiable() -> None:
    """Three replicas, a CA that falls due: each step, the bundle an API server holds (the one
    published) verifies every pair any replica serves; replicas lag one and two steps behind."""
    material = initial_material(SHORT)
    published = material.ca_bundle
    served = [material.tls_crt] * 3
    history = []
    for _ in range(4):
        step = next_step(material, SETTINGS, published)
        if step is None:
            break
        material, why = step
        history.append(why)
        # Replica 0 took the step and serves the Secret's pair at once; the others lag behind.
        served = [material.tls_crt, served[0], served[1]]
        for pair in served:
            assert verifies(pair, published), why
        published = material.ca_bundle  # the replicas publish the Secret's bundle
        for pair in served:
            assert verifies(pair, published), why
    assert re.fullmatch(r"a new CA: the current one expires in [89] days", history[0]), history
    assert history[1:] == ["a new serving pair: the serving certificate was not issued by the current CA"]
    # The old CA stays in the bundle (it is still valid), after the new one.
    bundle = split_bundle(material.ca_bundle)
    assert len(bundle) == 2 and bundle[0] == material.ca_crt
    assert load_certificate(bundle[1]).not_valid_after_utc < _now() + 11 * DAY
    # Once the old CA has expired it leaves the bundle (a pair never outlives its CA).
    step = next_step(material, SETTINGS, published, _now() + 11 * DAY)
    assert step is not None and split_bundle(step[0].ca_bundle) == [material.ca_crt]


def test_the_new_ca_pair_is_not_issued_before_its_ca_is_published() -> None:
    material = initial_material(SHORT)
    step = next_step(material, SETTINGS, material.ca_bundle)
    assert step is not None and step[1].startswith("a new CA")
    rotated = step[0]
    assert rotated.tls_crt == material.tls_crt  # the pair stays until the new bundle is out
    # The webhook configuration still holds the old bundle: no new pair yet.
    assert next_step(rotated, SETTINGS, material.ca_bundle) is None
    assert next_step(rotated, SETTINGS, rotated.ca_bundle) is not None


def test_expired_cas_leave_the_bundle_and_the_current_ca_is_always_in_it() -> None:
    material = initial_material(SETTINGS)
    old_ca, _ = generate_ca("old", 1)
    with_old = Material(material.ca_crt, material.ca_key, material.ca_crt + old_ca, material.tls_crt, material.tls_key)
    assert next_step(with_old, SETTINGS, with_old.ca_bundle) is None  # the old CA is still valid
    step = next_step(with_old, SETTINGS, with_old.ca_bundle, _now() + 2 * DAY)
    assert step is not None
    assert step == (material, "the CA bundle drops expired CAs and holds the current CA")
    without_current = Material(material.ca_crt, material.ca_key, old_ca, material.tls_crt, material.tls_key)
    step = next_step(without_current, SETTINGS, b"")
    assert step is not None and split_bundle(step[0].ca_bundle) == [material.ca_crt, old_ca]


def test_a_replaced_secret_keeps_the_valid_cas_of_the_old_bundle() -> None:
    old = initial_material(SETTINGS)
    expired, _ = generate_ca("expired", 1)
    fresh = initial_material(SETTINGS, keep=old.ca_bundle + b"garbage\n-----END CERTIFICATE-----\n")
    assert split_bundle(fresh.ca_bundle) == [fresh.ca_crt, old.ca_crt]
    assert verifies(old.tls_crt, fresh.ca_bundle) and verifies(fresh.tls_crt, fresh.ca_bundle)
    assert not trusted_by(fresh.ca_bundle, expired)


def test_a_secret_made_while_a_bundle_is_published_keeps_it_and_waits_for_its_pair() -> None:
    published = initial_material(SETTINGS)
    # Two webhooks of a configuration hold the same bundle: each CA once in the new bundle.
    fresh = initial_material(SETTINGS, keep=published.ca_bundle * 2, with_pair=False)
    assert (fresh.tls_crt, fresh.tls_key) == (b"", b"")
    assert split_bundle(fresh.ca_bundle) == [fresh.ca_crt, published.ca_crt]
    assert next_step(fresh, SETTINGS, published.ca_bundle) is None  # the new CA is not out yet
    step = next_step(fresh, SETTINGS, fresh.ca_bundle)
    assert step is not None and verifies(step[0].tls_crt, fresh.ca_bundle)


def test_writers_sharing_a_volume_never_take_each_others_temporary_file(tmp_path: Path) -> None:
    """Two writers of one file at once (the processes of one pod, each its container's pid 1, on a
    shared volume; here two threads of one pid): each replace is whole, and none fails."""
    target = tmp_path / "tls.crt"
    contents = [bytes([65 + i]) * 64 * 1024 for i in range(2)]
    errors: list[BaseException] = []

    def write(data: bytes) -> None:
        try:
            for _ in range(200):
                write_private(target, data)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(data,)) for data in contents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert target.read_bytes() in contents
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tls.crt"]
