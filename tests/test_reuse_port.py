"""``kgov serve --reuse-port``: replicas share one webhook port (SO_REUSEPORT); without it, the
second one is refused the port as before."""

from __future__ import annotations

import socket

import aiohttp
import pytest
from conftest import LOOPBACK, ServerFactory, free_port

from webhook.serve.server import ConfigurationError


async def test_two_servers_share_the_port_and_both_answer(start_server: ServerFactory) -> None:
    first = await start_server(reuse_port=True)
    second = await start_server(reuse_port=True, port=first.port)
    assert second.port == first.port
    connector = aiohttp.TCPConnector(ssl=first.ssl_context, force_close=True)  # a new connection each time
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(20):
            async with session.get(first.url("/healthz")) as resp:
                assert resp.status == 200
        # Each replica answers on its own metrics port: both are up and serving.
        for server in (first, second):
            async with session.get(server.metrics_url("/readyz")) as resp:
                assert resp.status == 200
    await second.shutdown()
    connector = aiohttp.TCPConnector(ssl=first.ssl_context)
    async with aiohttp.ClientSession(connector=connector) as session, session.get(first.url("/healthz")) as resp:
        assert resp.status == 200  # the other replica still holds the port


async def test_without_reuse_port_the_port_is_taken(start_server: ServerFactory) -> None:
    first = await start_server()
    with pytest.raises(OSError, match="address already in use"):
        await start_server(port=first.port)


async def test_a_taken_metrics_port_is_named_and_the_webhook_port_freed(start_server: ServerFactory) -> None:
    """Regression: with --reuse-port and a --metrics-port held by another process, the message
    named the webhook port ("cannot serve on 0.0.0.0:18444") for the metrics port's clash."""
    holder = socket.socket()
    holder.bind((LOOPBACK, 0))
    holder.listen()
    taken = holder.getsockname()[1]
    port = free_port()
    try:
        with pytest.raises(ConfigurationError) as caught:
            await start_server(reuse_port=True, port=port, metrics_port=taken)
    finally:
        holder.close()
    message = str(caught.value)
    assert message.startswith(f"cannot serve metrics on {LOOPBACK}:{taken} (--metrics-port): ")
    assert "address already in use" in message
    assert str(port) not in message
    # The webhook port bound before the clash is closed again: a server without SO_REUSEPORT gets it.
    server = await start_server(port=port)
    assert server.port == port
