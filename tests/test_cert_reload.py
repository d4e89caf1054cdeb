"""No request in flight fails while the serving certificate is reloaded (SPEC §5, §7).

A real server over real TLS serves from a ``kgov certs`` directory; the rotations are
``kgov certs renew --force`` runs (the command an operator or a CronJob uses). During them:
requests on kept-alive connections (made before the rotation, finished after it), requests on a
new connection each (a handshake per request, some with the old and some with the new
certificate) and requests whose body is still arriving when the new certificate is loaded.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from click.testing import CliRunner
from conftest import LOOPBACK, Pki, ServerFactory
from test_server import job as job_manifest
from test_server import (
    metric_samples,
    peer_serial,
    post_review,
    review_of,
    sample_value,
    session_for,
    wait_until,
)

from webhook.certs import load_certificate
from webhook.cli import main

ROTATIONS = 4


def _renew(directory: Path) -> int:
    result = CliRunner().invoke(main, ["certs", "renew", str(directory), "--force"])
    assert result.exit_code == 0, result.output
    return int(load_certificate((directory / "tls.crt").read_bytes()).serial_number)


async def test_no_request_fails_during_certificate_reloads(start_server: ServerFactory, tmp_path: Path) -> None:
    directory = tmp_path / "certs"
    created = CliRunner().invoke(main, ["certs", "create", str(directory), "--dns", "localhost", "--ip", LOOPBACK])
    assert created.exit_code == 0, created.output
    interval = 0.1
    server = await start_server(
        cert_file=directory / "tls.crt", key_file=directory / "tls.key", reload_interval=interval
    )
    server.ssl_context = ssl.create_default_context(cafile=str(directory / "ca.crt"))

    statuses: dict[str, list[int]] = {"kept-alive": [], "new-connection": [], "slow-body": []}
    failures: list[BaseException] = []
    stop = asyncio.Event()

    async def loop(name: str, force_close: bool) -> None:
        async with session_for(server, force_close=force_close) as client:
            for _ in range(2000):  # bounded; `stop` ends it well before
                if stop.is_set():
                    return
                try:
                    status, answer = await post_review(client, server, review_of(job_manifest()))
                    statuses[name].append(status)
                    assert answer["response"]["allowed"] is True
                except (aiohttp.ClientError, ssl.SSLError, OSError, AssertionError) as exc:
                    failures.append(exc)
                await asyncio.sleep(0.002)

    async def slow_body(payload: bytes, release: asyncio.Event) -> AsyncIterator[bytes]:
        yield payload[:100]
        await release.wait()
        yield payload[100:]

    async def slow_request(client: aiohttp.ClientSession, release: asyncio.Event) -> None:
        payload = json.dumps(review_of(job_manifest(), uid=str(uuid.uuid4()))).encode()
        try:
            async with client.post(server.url("/mutate"), data=slow_body(payload, release)) as resp:
                statuses["slow-body"].append(resp.status)
                answer: dict[str, Any] = await resp.json()
                assert answer["response"]["allowed"] is True
        except (aiohttp.ClientError, ssl.SSLError, OSError, AssertionError) as exc:
            failures.append(exc)

    loops = [asyncio.create_task(loop("kept-alive", False)), asyncio.create_task(loop("new-connection", True))]
    serials = [await peer_serial(server)]
    async with session_for(server) as slow_client:
        for _ in range(ROTATIONS):
            release = asyncio.Event()
            slow = asyncio.create_task(slow_request(slow_client, release))
            await asyncio.sleep(interval)  # the request is in flight: headers and part of the body sent
            serial = _renew(directory)

            async def presented(expected: int = serial) -> bool:
                return await peer_serial(server) == expected

            await wait_until(presented)
            release.set()  # the rest of the body arrives after the reload
            await asyncio.wait_for(slow, timeout=10)
            serials.append(serial)
    stop.set()
    await asyncio.wait_for(asyncio.gather(*loops), timeout=20)

    assert failures == []
    assert len(set(serials)) == ROTATIONS + 1
    assert statuses["slow-body"] == [200] * ROTATIONS
    for name in ("kept-alive", "new-connection"):
        assert len(statuses[name]) > ROTATIONS, statuses  # traffic throughout, whatever the machine's load
        assert set(statuses[name]) == {200}
    async with session_for(server) as client:
        samples = await metric_samples(client, server)
    reloads = "kgov_certificate_reloads"
    assert sample_value(samples, reloads, f"{reloads}_total", result="ok") == ROTATIONS
    # The CA never changed: every certificate the server presented verifies against the first CA.
    assert Pki.serial((directory / "tls.crt").read_bytes()) == serials[-1]
