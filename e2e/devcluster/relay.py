"""A TCP relay: what pods reach as the ``kubernetes`` Service's endpoint, forwarded to the API server.

The API server of the simulated cluster listens on 127.0.0.1 only; a pod on the real node reaches
``10.96.0.1:443``, which kube-proxy sends to the endpoint of the ``default/kubernetes``
EndpointSlice: this relay, on the node's bridge address. Bytes are copied both ways untouched (TLS
ends at the API server, whose certificate carries the IP SAN 10.96.0.1).

Command line (run by :func:`e2e.devcluster.node.start_real_node`)::

    python -m e2e.devcluster.relay LISTEN_HOST:PORT TARGET_HOST:PORT
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(1 << 16):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.write_eof() if writer.can_write_eof() else writer.close()


async def _relay(
    target_host: str, target_port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        upstream_reader, upstream_writer = await asyncio.open_connection(target_host, target_port)
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
    for each in (writer, upstream_writer):
        each.close()


async def serve(listen: str, target: str) -> None:
    """Accept on ``listen`` (``host:port``) and relay each connection to ``target`` until cancelled."""
    listen_host, listen_port = listen.rsplit(":", 1)
    target_host, target_port = target.rsplit(":", 1)
    server = await asyncio.start_server(
        lambda r, w: _relay(target_host, int(target_port), r, w), listen_host, int(listen_port), reuse_address=True
    )
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args[0], args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
