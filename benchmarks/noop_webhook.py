"""A no-op mutating webhook: the floor any Python webhook on this stack costs the API server.

The same aiohttp, TLS context (``webhook.server.make_ssl_context``) and body limit as ``kgov
serve``; ``POST /mutate`` decodes the AdmissionReview and answers ``allowed: true`` with the uid
and no patch. ``GET /healthz`` answers ``ok``; ``GET /count`` the number of reviews answered (how
a benchmark knows the API server calls it).

    python benchmarks/noop_webhook.py PORT CERT_FILE KEY_FILE      # on 127.0.0.1 until SIGTERM
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from webhook.server import MAX_BODY_BYTES, make_ssl_context


def main(port: int, cert_file: Path, key_file: Path) -> None:
    answered = 0

    async def admit(request: web.Request) -> web.Response:
        nonlocal answered
        body = await request.json(loads=json.loads)
        answered += 1
        answer = {"uid": body["request"]["uid"], "allowed": True}
        return web.json_response({"apiVersion": body["apiVersion"], "kind": "AdmissionReview", "response": answer})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def count(_: web.Request) -> web.Response:
        return web.Response(text=str(answered))

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/mutate", admit)
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/count", count)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=make_ssl_context(cert_file, key_file)).start()
        await stop.wait()
        await runner.cleanup()

    asyncio.run(serve())


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
