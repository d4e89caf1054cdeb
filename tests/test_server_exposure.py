"""What the server says and shows: echoed values, its log lines, error bodies, metrics, TLS suites.

Real server over TLS on 127.0.0.1, logs configured as in ``kgov serve`` (JSON lines) but written
into a buffer the test reads.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from conftest import LOOPBACK, Pki, RunningServer, ServerFactory
from test_server import (
    INFERENCE_QUEUE,
    QUEUE_LABEL,
    RESEARCH_QUEUE,
    job,
    metric_samples,
    post_review,
    review_of,
    sample_value,
    session_for,
    wait_until,
)
from test_server_hostile import FAST, closed_by_server, refused, request_head, status_and_json, tls_connection

from webhook.certs import write_private
from webhook.core.admission.envelope import ECHO_LIMIT
from webhook.serve.logs import LOG_VALUE_LIMIT, configure_logging
from webhook.serve.server import MAX_BODY_BYTES

SEVEN_MIB = 7 * 1024 * 1024


@pytest.fixture
async def server(start_server: ServerFactory) -> RunningServer:
    return await start_server()


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The server's log lines, as ``kgov serve --log-level debug`` writes them."""
    buffer = io.StringIO()
    configure_logging("debug", stream=buffer)
    yield buffer
    structlog.reset_defaults()
    logging.getLogger().handlers.clear()


def log_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    """Every line parsed as one JSON object (fails on any line that is not)."""
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


# -- 5. echoed values -------------------------------------------------------------------------------
def huge_review(where: str) -> dict[str, Any]:
    huge = "v" * SEVEN_MIB
    body = review_of(job())
    if where == "apiVersion":
        body["apiVersion"] = huge
    elif where == "operation":
        body["request"]["operation"] = huge
    elif where == "uid":
        body["request"]["uid"] = huge
    elif where == "name":
        body["request"]["name"] = huge  # the object keeps a short name: both would pass the body limit
    elif where == "queue":
        body["request"]["object"]["metadata"]["labels"] = {QUEUE_LABEL: huge}
    return body


@pytest.mark.parametrize("where", ["apiVersion", "operation", "uid", "name", "queue"])
async def test_huge_user_values_are_cut_in_answers_and_logs(
    server: RunningServer, json_log: io.StringIO, where: str
) -> None:
    async with session_for(server) as client:
        status, answer = await post_review(client, server, huge_review(where))
    text = json.dumps(answer)
    assert len(text) < 4 * 1024  # was 7.3 MB
    if where in ("apiVersion", "operation", "uid"):
        assert status == 400
        assert "characters" in answer["error"]
        assert len(answer["error"]) <= ECHO_LIMIT + 64
    elif where == "queue":
        assert status == 200
        message = answer["response"]["status"]["message"]
        assert answer["response"]["allowed"] is False
        assert message.startswith("kueue-governor: queue: ")
        assert "characters cut]" in message
        assert f"allowed: {RESEARCH_QUEUE}" in message  # the tail of the message survives
        assert len(message) == ECHO_LIMIT
    else:
        assert status == 200 and answer["response"]["allowed"] is True
    lines = json_log.getvalue().splitlines()
    assert lines and max(len(line) for line in lines) < 3 * LOG_VALUE_LIMIT
    assert all(isinstance(json.loads(line), dict) for line in lines)


# -- 6. every log line is JSON, without header values -----------------------------------------------
SECRET = "hdr-secret-d41d8cd9"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            f"POST /mutate HTTP/1.1\r\nHost: x\r\nX-Long: {SECRET}{'a' * 10_000}\r\n\r\n".encode(),
            "the request line or a header is too long",
        ),
        (f"P{SECRET}ST /mutate HTTP/1.1\r\nHost: x\r\n\r\n".encode(), "the request line is not HTTP/1.1"),
        (
            f"POST /mutate HTTP/1.1\r\nHost: x\r\n{SECRET}\r\n\r\n".encode(),
            "the request's headers or its chunked framing are malformed",
        ),
        (
            f"POST /{'a' * 10_000}{SECRET} HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
            "the request line or a header is too long",
        ),
        (
            b"POST /mutate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "the request's headers or its chunked framing are malformed",
        ),
    ],
    ids=["long-header", "bad-method", "no-colon", "long-url", "bad-chunk"],
)
async def test_http_parser_errors_are_json_counted_and_never_echo_headers(
    server: RunningServer, json_log: io.StringIO, raw: bytes, reason: str
) -> None:
    reader, writer = await tls_connection(server)
    writer.write(raw)
    await writer.drain()
    answer = await closed_by_server(reader, 5)
    writer.close()

    status, body = status_and_json(answer)
    assert status == 400
    assert body == {"error": f"bad HTTP request: {reason}"}
    async with session_for(server) as client:
        assert refused(await metric_samples(client, server), "bad_request") == 1.0
    lines = log_lines(json_log)
    assert [line["reason"] for line in lines if line["event"] == "HTTP request refused by the parser"] == [reason]
    assert SECRET not in json_log.getvalue()
    assert "Traceback" not in json_log.getvalue()


async def test_client_leaving_mid_body_is_one_json_line(server: RunningServer, json_log: io.StringIO) -> None:
    _, writer = await tls_connection(server)
    writer.write(request_head(100_000) + b'{"apiVersion": "admission.k8s.io/v1"')
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.transport.abort()

    async def counted() -> bool:
        async with session_for(server) as client:
            return refused(await metric_samples(client, server), "client_disconnected") == 1.0

    await wait_until(counted)
    lines = log_lines(json_log)
    refusals = [line for line in lines if line["event"] == "request refused"]
    assert refusals == [
        {
            "event": "request refused",
            "status": 400,
            "reason": "client_disconnected",
            "level": "warning",
            "logger": "kgov.server",
            "timestamp": refusals[0]["timestamp"],
        }
    ]
    assert "Traceback" not in json_log.getvalue()


async def test_access_log_is_json_without_query_or_headers(server: RunningServer, json_log: io.StringIO) -> None:
    async with (
        session_for(server) as client,
        client.get(server.url(f"/healthz?token={SECRET}"), headers={"Authorization": SECRET}) as resp,
    ):
        assert resp.status == 200
    access = [line for line in log_lines(json_log) if line["event"] == "access"]
    assert len(access) == 1
    assert {k: access[0][k] for k in ("logger", "level", "method", "path", "status")} == {
        "logger": "aiohttp.access",
        "level": "debug",
        "method": "GET",
        "path": "/healthz",
        "status": 200,
    }
    assert SECRET not in json_log.getvalue()


# -- 7. monitoring ----------------------------------------------------------------------------------
async def test_declared_body_over_the_limit_gets_json_413_logged_and_counted(
    server: RunningServer, json_log: io.StringIO
) -> None:
    reader, writer = await tls_connection(server)
    writer.write(request_head(MAX_BODY_BYTES + 1))  # and no body at all
    await writer.drain()
    status, body = status_and_json(await closed_by_server(reader, 5))
    writer.close()
    assert (status, body) == (413, {"error": f"request body is over {MAX_BODY_BYTES} bytes"})
    async with session_for(server) as client:
        assert refused(await metric_samples(client, server), "body_too_large") == 1.0
    assert [line["reason"] for line in log_lines(json_log) if line["event"] == "request refused"] == ["body_too_large"]


async def test_chunked_body_over_the_limit_gets_json_413(server: RunningServer) -> None:
    async def chunks() -> Any:
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b"x" * 65536

    async with session_for(server) as client:
        async with client.post(server.url("/mutate"), data=chunks()) as resp:
            status, body = resp.status, await resp.json()
        assert (status, body) == (413, {"error": f"request body is over {MAX_BODY_BYTES} bytes"})
        assert refused(await metric_samples(client, server), "body_too_large") == 1.0


async def test_expect_continue_over_the_limit_is_refused_without_inviting_the_body(server: RunningServer) -> None:
    reader, writer = await tls_connection(server)
    writer.write(request_head(MAX_BODY_BYTES + 1, Expect="100-continue"))
    await writer.drain()
    raw = await closed_by_server(reader, 5)
    writer.close()
    assert raw.startswith(b"HTTP/1.1 413 ")
    assert status_and_json(raw) == (413, {"error": f"request body is over {MAX_BODY_BYTES} bytes"})


async def test_expect_continue_within_the_limit_is_invited_and_answered(server: RunningServer) -> None:
    body = json.dumps(review_of(job())).encode()
    reader, writer = await tls_connection(server)
    writer.write(request_head(len(body), Expect="100-continue"))
    await writer.drain()
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(body)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    writer.close()
    assert head.startswith(b"HTTP/1.1 200 ")


async def test_every_error_body_is_json(server: RunningServer) -> None:
    async with session_for(server) as client:
        for method, path, status in (("GET", "/nope", 404), ("GET", "/mutate", 405), ("POST", "/healthz", 405)):
            async with client.request(method, server.url(path)) as resp:
                assert resp.status == status
                assert resp.content_type == "application/json"
                assert isinstance((await resp.json())["error"], str)


async def test_latency_histogram_has_outcomes_and_buckets_up_to_ten_seconds(server: RunningServer) -> None:
    async with session_for(server) as client:
        assert (await post_review(client, server, review_of(job())))[0] == 200
        assert (await post_review(client, server, review_of(job(labels={QUEUE_LABEL: INFERENCE_QUEUE}))))[0] == 200
        samples = await metric_samples(client, server)
    buckets = {
        (s.labels["outcome"], s.labels["le"]): s.value
        for s in samples["kgov_admission_duration_seconds"]
        if s.name.endswith("_bucket")
    }
    assert buckets[("patched", "10.0")] == 1.0
    assert buckets[("denied", "10.0")] == 1.0
    assert buckets[("malformed", "10.0")] == 0.0
    assert {le for _, le in buckets} >= {"1.0", "2.5", "5.0", "10.0", "+Inf"}


async def test_certificate_reload_error_is_readable(
    start_server: ServerFactory, pki: Pki, json_log: io.StringIO
) -> None:
    await start_server(reload_interval=0.1)
    new_cert, _ = pki.issue()
    write_private(pki.cert_file, new_cert)  # the key is still the old one

    def logged() -> list[dict[str, Any]]:
        return [line for line in log_lines(json_log) if line["event"].startswith("certificate reload failed")]

    async def failed() -> bool:
        return bool(logged())

    await wait_until(failed)
    error = logged()[0]["error"]
    assert error.startswith(f"the key in {pki.key_file} is not the key of the certificate in {pki.cert_file}")
    assert "PEM lib" not in error


async def test_rejected_policy_on_disk_shows_in_readyz_and_metrics(
    start_server: ServerFactory, platform_file: Path
) -> None:
    server = await start_server(reload_interval=0.1)
    original = platform_file.read_text()
    async with session_for(server) as client:

        async def readyz() -> tuple[int, Any]:
            async with client.get(server.url("/readyz")) as resp:
                return resp.status, await resp.json()

        async def rejected() -> float:
            samples = await metric_samples(client, server)
            return sample_value(samples, "kgov_policy_rejected", "kgov_policy_rejected")

        assert await rejected() == 0.0
        platform_file.write_text(original.replace("naming: hyperpod", "naming: hyperpod\nunknownField: 1"))

        async def is_rejected() -> bool:
            return await rejected() == 1.0

        await wait_until(is_rejected)
        status, body = await readyz()
        assert status == 200  # still serving the last good policy: not a reason to leave the Service
        assert body["ready"] is True
        [notice] = body["notices"]
        assert notice.startswith("policy on disk rejected, serving the last good one (loaded ")
        assert "unknownField" in notice
        assert (await post_review(client, server, review_of(job())))[0] == 200

        platform_file.write_text(original)

        async def is_accepted() -> bool:
            return await rejected() == 0.0

        await wait_until(is_accepted)
        assert (await readyz()) == (200, {"ready": True, "reasons": [], "notices": []})


# -- 8. exposure ------------------------------------------------------------------------------------
async def test_metrics_are_on_the_plain_port_only(server: RunningServer) -> None:
    async with session_for(server) as client, client.get(server.url("/metrics")) as resp:
        assert resp.status == 404
    async with aiohttp.ClientSession() as plain:
        async with plain.get(server.metrics_url()) as resp:
            assert resp.status == 200
            assert "# TYPE kgov_admission_requests_total counter" in await resp.text()
        async with plain.get(server.metrics_url("/readyz")) as resp:
            assert (resp.status, await resp.json()) == (200, {"ready": True, "reasons": [], "notices": []})
        async with plain.post(server.metrics_url("/mutate"), data=b"{}") as resp:
            assert resp.status == 404  # admission is served over TLS only


def tls12_ciphers() -> list[str]:
    """Every TLS 1.2 cipher suite this OpenSSL can offer (security level 0: the weak ones too)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_ciphers("ALL:@SECLEVEL=0")
    return sorted({c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"})


async def test_tls_1_2_accepts_aead_suites_only(server: RunningServer, pki: Pki) -> None:
    accepted = []
    for cipher in tls12_ciphers():
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cafile=str(pki.ca_file))
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(f"{cipher}:@SECLEVEL=0")
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(LOOPBACK, server.port, ssl=context), 5)
        except (ssl.SSLError, ConnectionError):
            continue
        accepted.append(writer.get_extra_info("cipher")[0])
        writer.close()
    assert accepted, "no TLS 1.2 suite at all"
    assert all("GCM" in name or "CHACHA20" in name for name in accepted), accepted
    assert "ECDHE-ECDSA-AES128-GCM-SHA256" in accepted
    assert not any(name.endswith(("-SHA", "-SHA256", "-SHA384")) and "GCM" not in name for name in accepted)


async def test_fast_limits_still_serve_normal_requests(start_server: ServerFactory) -> None:
    server = await start_server(limits=FAST)
    async with session_for(server) as client:
        for _ in range(3):
            status, answer = await post_review(client, server, review_of(job()))
            assert status == 200 and answer["response"]["allowed"] is True
