"""The webhook server end to end: a real aiohttp server over real TLS on 127.0.0.1.

Each test starts :func:`webhook.serve.server.run_server` with a fresh CA and serving certificate
(:mod:`webhook.certs`) and the bundled platform file, and talks to it with an aiohttp client that
verifies the server against that CA. Nothing is mocked; every request loop is bounded in count
and in time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
import uuid
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import LOOPBACK, Pki, RunningServer, ServerFactory
from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families

from webhook.certs import write_private
from webhook.serve.server import MAX_BODY_BYTES

RESEARCH = "hyperpod-ns-research"
RESEARCH_QUEUE = "hyperpod-ns-research-localqueue"
INFERENCE_QUEUE = "hyperpod-ns-inference-localqueue"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
TIMEOUT = aiohttp.ClientTimeout(total=10)


# -- helpers ---------------------------------------------------------------------------------------
def job(
    name: str = "pi", labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "pi", "image": "perl:5.34"}]},
            }
        },
    }


def review_of(
    obj: dict[str, Any],
    namespace: str = RESEARCH,
    *,
    api_version: str = "admission.k8s.io/v1",
    uid: str | None = None,
) -> dict[str, Any]:
    """An AdmissionReview for the CREATE of ``obj`` (a batch/v1 Job) in ``namespace``."""
    return {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "name": obj["metadata"]["name"],
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
        },
    }


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert isinstance(ops, list)
    return ops


def op_at(ops: list[dict[str, Any]], path: str) -> dict[str, Any]:
    matches = [op for op in ops if op["path"] == path]
    assert len(matches) == 1, f"expected one op at {path}, got {ops}"
    return matches[0]


def session_for(server: RunningServer, *, force_close: bool = False) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(ssl=server.ssl_context, force_close=force_close)
    return aiohttp.ClientSession(connector=connector, timeout=TIMEOUT)


async def post_review(session: aiohttp.ClientSession, server: RunningServer, body: Any) -> tuple[int, Any]:
    """POST ``body`` (bytes as is, anything else as JSON) to /mutate; the status and decoded answer."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with session.post(server.url("/mutate"), data=data, headers={"Content-Type": "application/json"}) as resp:
        text = await resp.text()
        try:
            return resp.status, json.loads(text)
        except json.JSONDecodeError:
            return resp.status, text


async def metric_samples(session: aiohttp.ClientSession, server: RunningServer) -> dict[str, list[Any]]:
    """Metric family name → its samples, parsed from /metrics (plain HTTP on the metrics port)."""
    async with session.get(server.metrics_url()) as resp:
        assert resp.status == 200
        text = await resp.text()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def sample_value(samples: dict[str, list[Any]], family: str, sample: str, **labels: str) -> float:
    for s in samples.get(family, []):
        if s.name == sample and s.labels == labels:
            return float(s.value)
    return 0.0


async def peer_serial(server: RunningServer) -> int:
    """Open a new TLS connection and return the serial of the certificate the server presented."""
    _, writer = await asyncio.wait_for(
        asyncio.open_connection(LOOPBACK, server.port, ssl=server.ssl_context), timeout=5
    )
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
        await writer.wait_closed()
    return int(x509.load_der_x509_certificate(der).serial_number)


async def wait_until(predicate: Any, *, attempts: int = 100, interval: float = 0.05) -> None:
    """Await ``predicate()`` until it is true; at most ``attempts`` times (bounded in count and time)."""
    for _ in range(attempts):
        if await predicate():
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met after {attempts} attempts of {interval} s")


@pytest.fixture
async def server(start_server: ServerFactory) -> RunningServer:
    return await start_server()


@pytest.fixture
async def session(server: RunningServer) -> AsyncIterator[aiohttp.ClientSession]:
    async with session_for(server) as client:
        yield client


# -- admission ------------------------------------------------------------------------------------
@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
async def test_job_create_gets_queue_label_and_suspend(
    server: RunningServer, session: aiohttp.ClientSession, api_version: str
) -> None:
    uid = str(uuid.uuid4())
    status, answer = await post_review(session, server, review_of(job(), api_version=api_version, uid=uid))

    assert status == 200
    assert answer["apiVersion"] == api_version
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == uid
    assert response["allowed"] is True
    ops = decode_patch(response)
    assert op_at(ops, "/metadata/labels") == {
        "op": "add",
        "path": "/metadata/labels",
        "value": {QUEUE_LABEL: RESEARCH_QUEUE},
    }
    assert op_at(ops, "/spec/suspend") == {"op": "add", "path": "/spec/suspend", "value": True}
    assert op_at(ops, "/metadata/labels/kueue.x-k8s.io~1priority-class")["value"] == "training-priority"


async def test_other_teams_queue_is_denied(server: RunningServer, session: aiohttp.ClientSession) -> None:
    body = review_of(job(labels={QUEUE_LABEL: INFERENCE_QUEUE}))
    status, answer = await post_review(session, server, body)

    assert status == 200
    response = answer["response"]
    assert response["uid"] == body["request"]["uid"]
    assert response["allowed"] is False
    assert "patch" not in response and "patchType" not in response
    assert response["status"]["code"] == 403
    assert response["status"]["reason"] == "Forbidden"
    message = response["status"]["message"]
    assert message.startswith("kueue-governor: queue: ")
    assert INFERENCE_QUEUE in message
    assert f"allowed: {RESEARCH_QUEUE}" in message


@pytest.mark.parametrize("namespace", ["default", "team-without-policy", "kube-system"])
async def test_namespace_of_no_team_is_untouched(
    server: RunningServer, session: aiohttp.ClientSession, namespace: str
) -> None:
    body = review_of(job(), namespace)
    status, answer = await post_review(session, server, body)

    assert status == 200
    assert answer["response"] == {"uid": body["request"]["uid"], "allowed": True}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "body is not valid JSON"),
        (b"", "body is empty"),
        (b"\xff\xfe{}", "body starts with UTF-16 (byte order mark FF FE); it must be UTF-8 JSON"),
        (b'[{"apiVersion": "admission.k8s.io/v1"}]', "body must be a JSON object (an AdmissionReview), got array"),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
            "AdmissionReview.request is missing",
        ),
        (
            b'{"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": {}}',
            "apiVersion must be one of admission.k8s.io/v1, admission.k8s.io/v1beta1, got 'admission.k8s.io/v2'",
        ),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}',
            "request.uid must be a string, got number",
        ),
    ],
    ids=["truncated", "empty", "not-utf8", "array", "no-request", "wrong-apiversion", "uid-number"],
)
async def test_malformed_requests_get_400_with_reason(
    server: RunningServer, session: aiohttp.ClientSession, body: bytes, reason: str
) -> None:
    status, answer = await post_review(session, server, body)

    assert status == 400
    assert isinstance(answer, dict)
    assert reason in answer["error"]


async def test_three_mib_body_is_accepted(server: RunningServer, session: aiohttp.ClientSession) -> None:
    big = "x" * (3 * 1024 * 1024)
    body = review_of(job(annotations={"example.com/notes": big}))
    encoded = json.dumps(body).encode()
    assert len(encoded) > 3 * 1024 * 1024

    status, answer = await post_review(session, server, encoded)

    assert status == 200
    assert answer["response"]["uid"] == body["request"]["uid"]
    ops = decode_patch(answer["response"])
    assert op_at(ops, "/metadata/labels")["value"] == {QUEUE_LABEL: RESEARCH_QUEUE}
    assert all(big not in json.dumps(op) for op in ops)  # the annotation is not echoed back


async def test_body_over_the_limit_gets_413(server: RunningServer, session: aiohttp.ClientSession) -> None:
    body = review_of(job(annotations={"example.com/notes": "x" * MAX_BODY_BYTES}))
    encoded = json.dumps(body).encode()
    assert len(encoded) > MAX_BODY_BYTES

    status, _ = await post_review(session, server, encoded)

    assert status == 413
    # The server is still answering after refusing the body.
    status, answer = await post_review(session, server, review_of(job()))
    assert status == 200 and answer["response"]["allowed"] is True


# -- health and metrics ---------------------------------------------------------------------------
async def test_health_endpoints(server: RunningServer, session: aiohttp.ClientSession) -> None:
    async with session.get(server.url("/healthz")) as resp:
        assert (resp.status, await resp.text()) == (200, "ok")
    async with session.get(server.url("/readyz")) as resp:
        assert (resp.status, await resp.json()) == (200, {"ready": True, "reasons": [], "notices": []})


async def test_metrics_count_the_requests_made(server: RunningServer, session: aiohttp.ClientSession) -> None:
    for _ in range(3):
        assert (await post_review(session, server, review_of(job())))[0] == 200
    assert (await post_review(session, server, review_of(job(labels={QUEUE_LABEL: INFERENCE_QUEUE}))))[0] == 200
    assert (await post_review(session, server, review_of(job(), "default")))[0] == 200
    assert (await post_review(session, server, review_of(job(), "kube-system")))[0] == 200
    assert (await post_review(session, server, b"nope"))[0] == 400

    samples = await metric_samples(session, server)

    counted = {
        (s.labels["kind"], s.labels["operation"], s.labels["result"]): s.value
        for s in samples["kgov_admission_requests"]
        if s.name == "kgov_admission_requests_total"
    }
    assert counted == {
        ("Job", "CREATE", "patched"): 3.0,
        ("Job", "CREATE", "denied"): 1.0,
        ("Job", "CREATE", "allowed"): 2.0,
    }
    assert sample_value(samples, "kgov_admission_denials", "kgov_admission_denials_total", rule="queue") == 1.0
    assert sample_value(samples, "kgov_admission_changes", "kgov_admission_changes_total", rule="queue") == 3.0
    assert sample_value(samples, "kgov_admission_changes", "kgov_admission_changes_total", rule="suspend") == 3.0
    assert sample_value(samples, "kgov_admission_malformed", "kgov_admission_malformed_total") == 1.0
    # Every POST /mutate, malformed included, is timed.
    duration = "kgov_admission_duration_seconds"
    assert sample_value(samples, duration, f"{duration}_count", outcome="patched") == 3.0
    assert sample_value(samples, duration, f"{duration}_count", outcome="denied") == 1.0
    assert sample_value(samples, duration, f"{duration}_count", outcome="allowed") == 2.0
    assert sample_value(samples, duration, f"{duration}_count", outcome="malformed") == 1.0
    assert sample_value(samples, "kgov_admission_in_flight_requests", "kgov_admission_in_flight_requests") == 0.0


# -- TLS ------------------------------------------------------------------------------------------
def legacy_client_context(pki: Pki, version: ssl.TLSVersion) -> ssl.SSLContext:
    """A client that offers at most ``version`` (security level 0, so the client itself allows it)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=str(pki.ca_file))
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():  # TLSv1/TLSv1_1 are deprecated names: offering them is the point
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = ssl.TLSVersion.TLSv1
        context.maximum_version = version
    return context


async def test_tls_below_1_2_is_refused(server: RunningServer, pki: Pki) -> None:
    # The server reads the TLS 1.1 ClientHello and drops the connection (a reset or a protocol
    # alert, depending on timing); the client never gets a certificate or a session.
    with pytest.raises((ssl.SSLError, ConnectionError)) as refused:
        await asyncio.wait_for(
            asyncio.open_connection(LOOPBACK, server.port, ssl=legacy_client_context(pki, ssl.TLSVersion.TLSv1_1)),
            timeout=5,
        )
    # Not the client refusing to try: it did offer TLS 1.1.
    assert "NO_PROTOCOLS_AVAILABLE" not in str(refused.value)

    # The same client allowed TLS 1.2 gets through: the refusal was about the version only.
    _, writer = await asyncio.wait_for(
        asyncio.open_connection(LOOPBACK, server.port, ssl=legacy_client_context(pki, ssl.TLSVersion.TLSv1_2)),
        timeout=5,
    )
    assert writer.get_extra_info("ssl_object").version() == "TLSv1.2"
    writer.close()
    await writer.wait_closed()


async def test_default_client_negotiates_tls_1_3(server: RunningServer) -> None:
    _, writer = await asyncio.wait_for(
        asyncio.open_connection(LOOPBACK, server.port, ssl=server.ssl_context), timeout=5
    )
    assert writer.get_extra_info("ssl_object").version() == "TLSv1.3"
    writer.close()
    await writer.wait_closed()


async def test_plain_http_is_refused(server: RunningServer) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as plain:
        with pytest.raises(aiohttp.ClientError):
            async with plain.get(f"http://{LOOPBACK}:{server.port}/healthz") as resp:
                await resp.read()
    # Raw bytes too: no HTTP answer ever comes back on the TLS port.
    reader, writer = await asyncio.wait_for(asyncio.open_connection(LOOPBACK, server.port), timeout=5)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    reply = await asyncio.wait_for(reader.read(1024), timeout=5)
    writer.close()
    assert not reply.startswith(b"HTTP/")


async def test_untrusted_server_certificate_is_rejected_by_client(server: RunningServer, tmp_path: Path) -> None:
    # Sanity check of the client side: verification is real (a different CA fails).
    (tmp_path / "other").mkdir()
    other = Pki(tmp_path / "other")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=other.client_context()), timeout=TIMEOUT) as c:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with c.get(server.url("/healthz")):
                pass


# -- reloads --------------------------------------------------------------------------------------
async def test_certificate_rotation_without_restart(start_server: ServerFactory, pki: Pki) -> None:
    interval = 0.1
    server = await start_server(reload_interval=interval)
    old_serial = await peer_serial(server)
    assert old_serial == Pki.serial(pki.cert_file.read_bytes())

    statuses: list[int] = []
    failures: list[BaseException] = []
    done = asyncio.Event()

    async def traffic() -> None:
        # New connection per request (force_close): every request does a TLS handshake.
        deadline = time.monotonic() + 15
        async with session_for(server, force_close=True) as client:
            for _ in range(500):
                if done.is_set() or time.monotonic() > deadline:
                    return
                try:
                    statuses.append((await post_review(client, server, review_of(job())))[0])
                except (aiohttp.ClientError, ssl.SSLError, OSError) as exc:
                    failures.append(exc)
                await asyncio.sleep(0.005)

    load = asyncio.create_task(traffic())
    new_cert, new_key = pki.issue()
    new_serial = Pki.serial(new_cert)
    assert new_serial != old_serial

    # Mid-rotation: the certificate is on disk but the key is still the old one. The pair does not
    # match, so the server must keep serving the previous pair through several reload ticks.
    write_private(pki.cert_file, new_cert)
    await asyncio.sleep(interval * 5)
    assert await peer_serial(server) == old_serial

    write_private(pki.key_file, new_key)

    async def rotated() -> bool:
        return await peer_serial(server) == new_serial

    await wait_until(rotated)
    served_before = len(statuses)

    async def some_traffic_on_the_new_certificate() -> bool:
        return len(statuses) >= max(10, served_before + 3)

    await wait_until(some_traffic_on_the_new_certificate, attempts=200)
    done.set()
    await asyncio.wait_for(load, timeout=20)

    assert failures == []
    assert len(statuses) >= 10
    assert set(statuses) == {200}
    async with session_for(server) as client:
        samples = await metric_samples(client, server)
    assert sample_value(samples, "kgov_certificate_reloads", "kgov_certificate_reloads_total", result="ok") == 1.0
    assert sample_value(samples, "kgov_certificate_reloads", "kgov_certificate_reloads_total", result="error") >= 1.0


def set_default_priority(platform_file: Path, team_line: str, new_line: str) -> None:
    text = platform_file.read_text()
    assert text.count(team_line) == 1
    platform_file.write_text(text.replace(team_line, new_line))


async def test_policy_reload(start_server: ServerFactory, platform_file: Path) -> None:
    server = await start_server(reload_interval=0.1)
    original = platform_file.read_text()
    training = "kueuePriority: {default: training, allowed: [training, experimentation], enforcement: enforce}"
    experimentation = training.replace("default: training", "default: experimentation")

    async with session_for(server) as client:

        async def research_priority() -> str:
            status, answer = await post_review(client, server, review_of(job()))
            assert status == 200
            ops = decode_patch(answer["response"])
            return str(op_at(ops, "/metadata/labels/kueue.x-k8s.io~1priority-class")["value"])

        async def reloads(result: str) -> float:
            samples = await metric_samples(client, server)
            return sample_value(
                samples, "kgov_policy_reloads", "kgov_policy_reloads_total", source="file", result=result
            )

        assert await research_priority() == "training-priority"
        assert await reloads("ok") == 1.0  # the start-up load

        # A valid edit: new requests get the new default.
        set_default_priority(platform_file, training, experimentation)

        async def is_experimentation() -> bool:
            return await research_priority() == "experimentation-priority"

        await wait_until(is_experimentation)
        assert await reloads("ok") == 2.0

        # An invalid edit: the previous policies stay in force, requests are still answered.
        platform_file.write_text(original.replace("naming: hyperpod", "naming: hyperpod\nunknownField: 1"))

        async def one_error() -> bool:
            return await reloads("error") == 1.0

        await wait_until(one_error)
        assert await research_priority() == "experimentation-priority"

        # A file that is not even UTF-8 (a torn or binary write): same, and the reloader survives it.
        platform_file.write_bytes(b"\xff\xfe\x00garbage")

        async def two_errors() -> bool:
            return await reloads("error") == 2.0

        await wait_until(two_errors)
        assert await research_priority() == "experimentation-priority"

        # A later valid edit is still picked up.
        platform_file.write_text(original)

        async def is_training() -> bool:
            return await research_priority() == "training-priority"

        await wait_until(is_training)
        assert await reloads("ok") == 3.0


# -- shutdown -------------------------------------------------------------------------------------
async def test_graceful_shutdown_drains_in_flight_requests(start_server: ServerFactory) -> None:
    server = await start_server(shutdown_timeout=10.0)
    release = asyncio.Event()
    in_flight = 4

    async def slow_body(payload: bytes) -> AsyncIterator[bytes]:
        # Half the body now, the rest only after the server has been told to stop.
        yield payload[: len(payload) // 2]
        await release.wait()
        yield payload[len(payload) // 2 :]

    async def slow_request(client: aiohttp.ClientSession, uid: str) -> tuple[int, dict[str, Any]]:
        payload = json.dumps(review_of(job(), uid=uid)).encode()
        async with client.post(server.url("/mutate"), data=slow_body(payload)) as resp:
            return resp.status, await resp.json()

    async with session_for(server) as client, session_for(server) as probe:
        uids = [str(uuid.uuid4()) for _ in range(in_flight)]
        requests = [asyncio.create_task(slow_request(client, uid)) for uid in uids]

        async def all_in_flight() -> bool:
            samples = await metric_samples(probe, server)
            gauge = "kgov_admission_in_flight_requests"
            return sample_value(samples, gauge, gauge) == in_flight

        await wait_until(all_in_flight)
        server.stop.set()

        async def refusing_new_connections() -> bool:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(LOOPBACK, server.port), timeout=1)
            except OSError:
                return True
            writer.close()
            return False

        await wait_until(refusing_new_connections)
        assert not server.task.done()  # still draining the four requests

        release.set()
        answers = await asyncio.wait_for(asyncio.gather(*requests), timeout=10)

    assert [status for status, _ in answers] == [200] * in_flight
    assert [answer["response"]["uid"] for _, answer in answers] == uids
    for _, answer in answers:
        assert op_at(decode_patch(answer["response"]), "/metadata/labels")["value"] == {QUEUE_LABEL: RESEARCH_QUEUE}
    await asyncio.wait_for(server.task, timeout=10)
    assert server.task.exception() is None
