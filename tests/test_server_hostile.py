"""Hostile and broken clients against the real server over TLS on 127.0.0.1.

Compressed bodies, made-up kinds, idle and trickling connections, a full connection table, and
SIGTERM while clients misbehave. Every client here is bounded in count and in time; deadlines are
shortened through :class:`webhook.serve.server.ConnectionLimits` so each test takes seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import json
import logging
import ssl
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from conftest import LOOPBACK, Pki, RunningServer, ServerFactory, free_port
from test_server import (
    QUEUE_LABEL,
    RESEARCH_QUEUE,
    decode_patch,
    job,
    metric_samples,
    op_at,
    post_review,
    review_of,
    sample_value,
    session_for,
    wait_until,
)

from webhook.serve.connections import ConnectionLimits
from webhook.serve.logs import configure_logging
from webhook.serve.server import ServerConfig

#: Short deadlines: header 0.5 s, body 0.5 s, idle 1 s.
FAST = ConnectionLimits(header_timeout=0.5, body_timeout=0.5, idle_timeout=1.0, max_connections=64, lingering_time=0.2)


async def tls_connection(server: RunningServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection(LOOPBACK, server.port, ssl=server.ssl_context), timeout=5)


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bytes:
    """Everything the server still sends until it closes; fails if it keeps the connection ``within`` s."""
    received = b""
    async with asyncio.timeout(within):  # TimeoutError: the server kept the connection
        try:
            while chunk := await reader.read(65536):
                received += chunk
        except ConnectionError:
            pass  # an abort is a reset
    return received


def request_head(length: int | None = None, **headers: str) -> bytes:
    lines = ["POST /mutate HTTP/1.1", f"Host: {LOOPBACK}", "Content-Type: application/json"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    lines.extend(f"{name.replace('_', '-')}: {value}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def status_and_json(raw: bytes) -> tuple[int, Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body else None


def closes(samples: dict[str, list[Any]], reason: str) -> float:
    family = "kgov_connections_closed"
    return sample_value(samples, family, f"{family}_total", reason=reason)


def refused(samples: dict[str, list[Any]], reason: str) -> float:
    return sample_value(samples, "kgov_http_refused", "kgov_http_refused_total", reason=reason)


@pytest.fixture
def quiet_logs() -> Iterator[None]:
    """Warnings and errors only, as JSON into a buffer (10,000 admission lines cost seconds)."""
    configure_logging("warning", stream=io.StringIO())
    yield
    structlog.reset_defaults()
    logging.getLogger().handlers.clear()


@pytest.fixture
async def fast_server(start_server: ServerFactory) -> RunningServer:
    return await start_server(limits=FAST)


# -- 1. compressed bodies ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("br", lambda data: data),  # not even valid brotli: the header alone decides
        ("zstd", lambda data: data),
        ("GZip", gzip.compress),
    ],
)
async def test_compressed_bodies_are_refused_with_415(fast_server: RunningServer, encoding: str, compress: Any) -> None:
    body = compress(json.dumps(review_of(job())).encode())  # a valid review once inflated
    async with session_for(fast_server) as client:
        async with client.post(fast_server.url("/mutate"), data=body, headers={"Content-Encoding": encoding}) as resp:
            status, answer, accept = resp.status, await resp.json(), resp.headers.get("Accept-Encoding")
        assert status == 415
        assert answer == {
            "error": "request bodies must not be compressed (Content-Encoding is set); "
            "the API server sends AdmissionReview uncompressed"
        }
        assert accept == "identity"
        samples = await metric_samples(client, fast_server)
    assert refused(samples, "content_encoding") == 1.0
    duration = "kgov_admission_duration_seconds"
    assert sample_value(samples, duration, f"{duration}_count", outcome="content_encoding") == 1.0
    assert sample_value(samples, "kgov_admission_requests", "kgov_admission_requests_total") == 0.0


async def test_gzip_bomb_is_refused_without_inflating_it(fast_server: RunningServer) -> None:
    """The issue's bomb: 1 MiB of gzip that inflates to 1 GiB. Refused on its header; the server
    answers an ordinary review right after (it did not spend a second inflating)."""
    bomb = gzip.compress(b"\0" * (1024 * 1024), compresslevel=9) * 1024  # 1,024 gzip members of 1 MiB each
    assert len(bomb) < 1100 * 1024
    assert len(gzip.decompress(bomb[: len(bomb) // 1024])) == 1024 * 1024
    async with session_for(fast_server) as client:
        statuses = []
        for _ in range(4):
            async with client.post(fast_server.url("/mutate"), data=bomb, headers={"Content-Encoding": "gzip"}) as resp:
                statuses.append(resp.status)
        status, answer = await post_review(client, fast_server, review_of(job()))
    assert statuses == [415] * 4
    assert status == 200
    assert op_at(decode_patch(answer["response"]), "/metadata/labels")["value"] == {QUEUE_LABEL: RESEARCH_QUEUE}


async def test_compressed_body_with_expect_continue_is_refused_before_the_body(fast_server: RunningServer) -> None:
    reader, writer = await tls_connection(fast_server)
    writer.write(request_head(1024 * 1024, Content_Encoding="gzip", Expect="100-continue"))
    await writer.drain()
    raw = await closed_by_server(reader, 5)  # no body byte was ever sent
    writer.close()
    status, answer = status_and_json(raw)
    assert not raw.startswith(b"HTTP/1.1 100")
    assert status == 415
    assert "must not be compressed" in answer["error"]


# -- 2. metric cardinality --------------------------------------------------------------------------
def made_up_kind_review(index: int) -> bytes:
    body = review_of(job(name=f"x{index}"))
    body["request"]["kind"] = {"group": f"made-up-{index}.example.com", "version": "v1", "kind": f"Kind{index}"}
    body["request"]["object"]["kind"] = f"Kind{index}"
    return json.dumps(body).encode()


async def test_ten_thousand_made_up_kinds_leave_metrics_the_same_size(
    fast_server: RunningServer, quiet_logs: None
) -> None:
    async with session_for(fast_server) as client:
        assert (await post_review(client, fast_server, made_up_kind_review(-1)))[0] == 200  # the other series
        async with client.get(fast_server.metrics_url()) as resp:
            before = await resp.text()
        series_before = {line.split(" ")[0] for line in before.splitlines() if not line.startswith("#")}

        async def worker(start: int) -> list[int]:
            statuses = []
            for index in range(start, 10_000, 8):
                statuses.append((await post_review(client, fast_server, made_up_kind_review(index)))[0])
            return statuses

        statuses = [s for batch in await asyncio.gather(*(worker(w) for w in range(8))) for s in batch]
        async with client.get(fast_server.metrics_url()) as resp:
            after = await resp.text()
    assert statuses == [200] * 10_000
    series_after = {line.split(" ")[0] for line in after.splitlines() if not line.startswith("#")}
    assert series_after == series_before
    assert abs(len(after) - len(before)) < 200  # only counter digits moved
    assert 'kgov_admission_requests_total{kind="other",operation="CREATE",result="allowed"} 10001.0' in after
    assert "Kind17" not in after


# -- 3. deadlines, the cap, memory ------------------------------------------------------------------
async def test_connection_idle_after_the_handshake_is_closed_at_the_idle_timeout(fast_server: RunningServer) -> None:
    reader, writer = await tls_connection(fast_server)
    started = time.monotonic()
    assert await closed_by_server(reader, 5) == b""
    elapsed = time.monotonic() - started
    writer.close()
    assert FAST.idle_timeout * 0.8 <= elapsed < FAST.idle_timeout + 2
    async with session_for(fast_server) as client:
        samples = await metric_samples(client, fast_server)
    assert closes(samples, "idle_timeout") == 1.0
    assert closes(samples, "header_timeout") == 0.0


async def test_a_parked_fresh_connection_serves_its_first_request_after_the_header_timeout(
    start_server: ServerFactory,
) -> None:
    """Defect: a connection with no request since its handshake was closed at the header deadline
    (10 s). The API server's Go client parks a connection it dialled for a request another
    connection served first, and reuses it later: the close raced with that first request, the
    webhook call failed, and under failurePolicy Fail a Job's pod creation was refused."""
    limits = ConnectionLimits(header_timeout=0.3, body_timeout=5, idle_timeout=10, max_connections=64)
    server = await start_server(limits=limits)
    reader, writer = await tls_connection(server)
    await asyncio.sleep(limits.header_timeout * 4)  # parked, as Go's idle pool does
    body = json.dumps(review_of(job())).encode()
    writer.write(request_head(len(body)) + body)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200 ")
    async with session_for(server) as client:
        samples = await metric_samples(client, server)
    assert closes(samples, "header_timeout") == 0.0
    assert closes(samples, "idle_timeout") == 0.0
    writer.close()


async def test_trickled_headers_are_cut_at_the_header_deadline(fast_server: RunningServer) -> None:
    reader, writer = await tls_connection(fast_server)
    head = request_head(10)
    started = time.monotonic()

    async def trickle() -> None:
        for byte in head[:-4]:  # never completes the headers
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.05)

    sender = asyncio.create_task(trickle())
    assert await closed_by_server(reader, 5) == b""
    elapsed = time.monotonic() - started
    sender.cancel()
    writer.close()
    assert FAST.header_timeout * 0.8 <= elapsed < FAST.header_timeout + 2


async def test_trickled_chunked_body_gets_408_at_the_body_deadline(fast_server: RunningServer) -> None:
    reader, writer = await tls_connection(fast_server)
    writer.write(request_head(None, Transfer_Encoding="chunked"))
    started = time.monotonic()

    async def trickle() -> None:
        for _ in range(100):  # 10 bytes/s
            writer.write(b"1\r\n{\r\n")
            await writer.drain()
            await asyncio.sleep(0.1)

    sender = asyncio.create_task(trickle())
    raw = await closed_by_server(reader, 5)
    elapsed = time.monotonic() - started
    sender.cancel()
    writer.close()
    status, answer = status_and_json(raw)
    assert status == 408
    assert answer == {"error": "request body not received within 0.5 s"}
    assert b"Connection: close" in raw
    assert elapsed < FAST.body_timeout + FAST.lingering_time + 2
    async with session_for(fast_server) as client:
        assert refused(await metric_samples(client, fast_server), "body_timeout") == 1.0


async def test_request_sent_with_the_tls_finished_is_not_cut_later(start_server: ServerFactory) -> None:
    """Regression: a request that arrives in the same segment as the client's TLS Finished reaches
    aiohttp before the connection is handed over; two header deadlines were armed, one was never
    cancelled, and it closed the connection in steady use 10 s later (the API server's Go client
    sends its first request right behind its Finished)."""
    limits = ConnectionLimits(header_timeout=0.5, body_timeout=5, idle_timeout=10, max_connections=64)
    server = await start_server(limits=limits)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = server.ssl_context.wrap_bio(incoming, outgoing, server_hostname=LOOPBACK)
    reader, writer = await asyncio.wait_for(asyncio.open_connection(LOOPBACK, server.port), 5)
    async with asyncio.timeout(5):
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                writer.write(outgoing.read())
                incoming.write(await reader.read(65536))
    body = json.dumps(review_of(job())).encode()
    tls.write(request_head(len(body)) + body)
    writer.write(outgoing.read())  # the client's Finished and the request in one write
    answer = b""
    async with asyncio.timeout(5):
        while b"\r\n\r\n" not in answer:
            incoming.write(await reader.read(65536))
            with contextlib.suppress(ssl.SSLWantReadError):
                answer += tls.read(65536)
    assert answer.startswith(b"HTTP/1.1 200 ")
    await asyncio.sleep(limits.header_timeout * 3)  # kept alive, idle: only the idle timeout applies
    async with session_for(server) as client:
        samples = await metric_samples(client, server)
    assert closes(samples, "header_timeout") == 0.0
    assert reader.at_eof() is False
    writer.close()


async def test_kept_alive_connection_is_closed_after_the_idle_timeout(fast_server: RunningServer) -> None:
    reader, writer = await tls_connection(fast_server)
    body = json.dumps(review_of(job())).encode()
    writer.write(request_head(len(body)) + body)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = int(
        next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1]
    )
    await asyncio.wait_for(reader.readexactly(length), 5)
    assert head.startswith(b"HTTP/1.1 200")
    started = time.monotonic()
    assert await closed_by_server(reader, 5) == b""
    assert FAST.idle_timeout * 0.8 <= time.monotonic() - started < FAST.idle_timeout + 2
    writer.close()


async def test_at_the_cap_the_longest_waiting_connection_makes_room(start_server: ServerFactory) -> None:
    limits = ConnectionLimits(header_timeout=10, body_timeout=10, idle_timeout=30, max_connections=8)
    server = await start_server(limits=limits)
    idle = [await tls_connection(server) for _ in range(8)]  # the cap, all waiting for a request
    async with session_for(server) as client:
        status, answer = await post_review(client, server, review_of(job()))  # a ninth connection
        assert status == 200
        assert answer["response"]["allowed"] is True
        assert await closed_by_server(idle[0][0], 5) == b""  # the oldest went
        samples = await metric_samples(client, server)
    assert closes(samples, "over_limit") == 1.0
    assert sample_value(samples, "kgov_connections_open", "kgov_connections_open") == 8.0
    for _, writer in idle:
        writer.close()


async def test_at_the_cap_a_trickled_body_does_not_pin_its_slot(start_server: ServerFactory) -> None:
    """Connections whose body is still arriving count as waiting: at the cap the oldest of them is
    dropped for a newcomer (only a request whose body is in is never dropped)."""
    limits = ConnectionLimits(header_timeout=10, body_timeout=10, idle_timeout=30, max_connections=4)
    server = await start_server(limits=limits)
    trickling = []
    for _ in range(4):  # headers sent, the body never completes
        reader, writer = await tls_connection(server)
        writer.write(request_head(1000) + b"{")
        await writer.drain()
        trickling.append((reader, writer))

    async def four_in_flight() -> bool:
        async with aiohttp.ClientSession() as plain, plain.get(server.metrics_url()) as resp:
            text = await resp.text()
        return "kgov_admission_in_flight_requests 4.0" in text

    await wait_until(four_in_flight)
    async with session_for(server) as client:
        status, answer = await post_review(client, server, review_of(job()))
        assert (status, answer["response"]["allowed"]) == (200, True)
        assert await closed_by_server(trickling[0][0], 5) == b""  # the first trickler went, unanswered
        samples = await metric_samples(client, server)
    assert closes(samples, "over_limit") == 1.0
    assert refused(samples, "client_disconnected") == 0.0  # the server dropped it: not the client's doing
    duration = "kgov_admission_duration_seconds"
    assert sample_value(samples, duration, f"{duration}_count", outcome="connection_dropped") == 1.0
    for _, writer in trickling:
        writer.close()


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid``, from /proc."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


async def test_memory_of_closed_connections_is_returned(pki: Pki, platform_file: Path, tmp_path: Path) -> None:
    """``kgov serve`` as its own process (so its memory is its own): 400 TLS connections held
    open, then closed; its RSS comes back (the issue: 169 MB → 668 MB, and it stayed there)."""
    port, metrics_port = free_port(), free_port()
    command = [
        sys.executable, "-m", "webhook.cli", "serve", "--platform", str(platform_file),
        "--tls-cert-file", str(pki.cert_file), "--tls-private-key-file", str(pki.key_file),
        "--host", LOOPBACK, "--port", str(port), "--metrics-port", str(metrics_port),
        "--header-timeout", "30", "--max-connections", "1000", "--shutdown-delay", "0", "--log-level", "warning",
    ]  # fmt: skip
    log_file = tmp_path / "serve.log"
    with log_file.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        server = RunningServer(
            ServerConfig(pki.cert_file, pki.key_file, port=port, metrics_port=metrics_port),
            asyncio.Event(),
            asyncio.get_running_loop().create_future(),  # type: ignore[arg-type]
            pki.client_context(),
        )

        async def up() -> bool:
            try:
                _, writer = await tls_connection(server)
            except OSError:
                return False
            writer.close()
            return True

        await wait_until(up, attempts=200, interval=0.1)
        await asyncio.sleep(1.0)
        before = rss_bytes(process.pid)
        held = [await tls_connection(server) for _ in range(400)]
        await asyncio.sleep(0.5)
        peak = rss_bytes(process.pid)
        for _, writer in held:
            writer.transport.abort()
        del held

        async def returned() -> bool:
            return rss_bytes(process.pid) - before < (peak - before) * 0.25

        assert peak - before > 60 * 1024 * 1024, (before, peak)  # about 275 KiB a connection
        await wait_until(returned, attempts=50, interval=0.1)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert "Traceback" not in log_file.read_text()


# -- 4. shutdown ------------------------------------------------------------------------------------
async def test_sigterm_serves_while_not_ready_then_stops_accepting(start_server: ServerFactory) -> None:
    server = await start_server(shutdown_delay=1.5, shutdown_timeout=2.0)
    async with session_for(server) as client:
        assert (await post_review(client, server, review_of(job())))[0] == 200  # a kept-alive connection
        server.stop.set()
        signalled = time.monotonic()

        async def not_ready() -> bool:
            async with client.get(server.url("/readyz")) as resp:
                return resp.status == 503 and (await resp.json())["reasons"] == ["shutting down"]

        await wait_until(not_ready)
        answered: list[int] = []
        while time.monotonic() - signalled < 1.2:  # requests keep coming during the delay
            async with client.post(server.url("/mutate"), data=json.dumps(review_of(job())).encode()) as resp:
                answered.append(resp.status)
                assert resp.headers.get("Connection") == "close"  # clients move to another replica
        assert len(answered) >= 5 and set(answered) == {200}

    async def refusing() -> bool:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(LOOPBACK, server.port), timeout=1)
        except OSError:
            return True
        writer.close()
        return False

    await wait_until(refusing)
    assert time.monotonic() - signalled >= 1.4
    await asyncio.wait_for(server.task, timeout=5)


async def test_shutdown_ends_in_time_whatever_clients_do(start_server: ServerFactory) -> None:
    """Stalled bodies, trickled headers and idle connections: the server still exits within
    shutdown delay + shutdown timeout (the issue: 43 s with --shutdown-timeout 20)."""
    limits = ConnectionLimits(header_timeout=30, body_timeout=30, idle_timeout=60, max_connections=64)
    server = await start_server(limits=limits, shutdown_delay=0.5, shutdown_timeout=1.0)
    clients = []
    for _ in range(3):
        reader, writer = await tls_connection(server)
        writer.write(request_head(1000) + b'{"apiVersion"')  # a body that never completes
        clients.append((reader, writer))
    for _ in range(3):
        reader, writer = await tls_connection(server)
        writer.write(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")  # headers that never complete
        clients.append((reader, writer))
    clients.extend([await tls_connection(server) for _ in range(3)])  # idle
    await asyncio.sleep(0.2)

    server.stop.set()
    started = time.monotonic()
    await asyncio.wait_for(asyncio.shield(server.task), timeout=10)
    elapsed = time.monotonic() - started

    assert 1.4 <= elapsed < 0.5 + 1.0 + 1.0
    assert server.task.exception() is None
    for reader, writer in clients:
        await closed_by_server(reader, 2)  # every connection is gone
        writer.close()


async def test_requests_on_kept_alive_connections_during_shutdown_are_answered(start_server: ServerFactory) -> None:
    """The issue's 64 cut requests: SIGTERM while clients hammer kept-alive connections. Every
    request sent before the listener closes gets an answer."""
    server = await start_server(shutdown_delay=1.0, shutdown_timeout=3.0)
    cut: list[BaseException] = []
    statuses: list[int] = []
    stop_sending = asyncio.Event()

    async def hammer() -> None:
        async with session_for(server) as client:
            while not stop_sending.is_set():
                uid = str(uuid.uuid4())
                try:
                    status, answer = await post_review(client, server, review_of(job(), uid=uid))
                except aiohttp.ClientConnectorError:
                    return  # the listener is closed: nothing was sent, nothing was cut
                except aiohttp.ClientError as exc:
                    cut.append(exc)
                    return
                statuses.append(status)
                assert answer["response"]["uid"] == uid

    workers = [asyncio.create_task(hammer()) for _ in range(8)]
    await asyncio.sleep(0.3)
    server.stop.set()
    await asyncio.sleep(0.8)  # within the delay
    stop_sending.set()
    await asyncio.wait_for(asyncio.gather(*workers), timeout=10)
    await asyncio.wait_for(server.task, timeout=10)
    assert cut == []
    assert len(statuses) >= 20 and set(statuses) == {200}
