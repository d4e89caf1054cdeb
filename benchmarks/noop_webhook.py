"""A no-op mutating webhook: the floor any Python webhook on this stack costs the API server; with
``--patch-file``, a canned webhook: the floor of a webhook that changes the object.

The same aiohttp, TLS context (``webhook.serve.server.make_ssl_context``) and body limit as ``kgov
serve``; ``POST /mutate`` decodes the AdmissionReview and answers ``allowed: true`` with the
request's uid and no patch. With ``--patch-file FILE`` every answer also carries ``patchType:
JSONPatch`` and ``patch``: the file's bytes (a JSON Patch, e.g. the one ``kgov serve`` gives a
Job), base64-encoded once at start, whatever the review: no policy work. ``GET /healthz`` answers
``ok``; ``GET /count`` the number of reviews answered (how a benchmark knows the API server calls
it); ``GET /last`` the body of the last review received, as it came (404 before the first), so a
benchmark can replay the AdmissionReview the API server sends.

    python benchmarks/noop_webhook.py PORT CERT_FILE KEY_FILE                      # no-op
    python benchmarks/noop_webhook.py PORT CERT_FILE KEY_FILE --patch-file FILE    # canned patch

Serves on 127.0.0.1 until SIGTERM. A patch file that cannot be read, or is not a JSON array, exits
with a message (status 2).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import signal
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from webhook.serve.server import MAX_BODY_BYTES, make_ssl_context


def answer(review: dict[str, Any], patch: str | None) -> dict[str, Any]:
    """The AdmissionReview answering ``review``: ``allowed``, the request's uid, and with ``patch``
    (base64 of a JSON Patch, given as is) ``patchType: JSONPatch``. Raises KeyError or TypeError on
    a review without ``apiVersion`` or ``request.uid`` (aiohttp then answers 500)."""
    response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": True}
    if patch is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = patch
    return {"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response}


def encoded_patch(patch_file: Path) -> str:
    """base64 of ``patch_file``'s bytes, which must be a JSON array (a JSON Patch). Raises ValueError
    (with the file's name) otherwise, OSError when it cannot be read."""
    raw = patch_file.read_bytes()
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{patch_file}: not JSON: {exc}") from exc
    if not isinstance(document, list):
        raise ValueError(f"{patch_file}: a JSON Patch is a JSON array, not {type(document).__name__}")
    return base64.b64encode(raw).decode("ascii")


def application(patch: str | None) -> web.Application:
    """The webhook's routes (``/mutate``, ``/healthz``, ``/count``, ``/last``) answering with ``patch``."""
    answered = 0
    last: bytes | None = None

    async def admit(request: web.Request) -> web.Response:
        nonlocal answered, last
        last = await request.read()
        body = json.loads(last)
        answered += 1
        return web.json_response(answer(body, patch))

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def count(_: web.Request) -> web.Response:
        return web.Response(text=str(answered))

    async def last_review(_: web.Request) -> web.Response:
        if last is None:
            return web.Response(status=404, text="no review received yet")
        return web.Response(body=last, content_type="application/json")

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/mutate", admit)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/count", count)
    app.router.add_get("/last", last_review)
    return app


def main(port: int, cert_file: Path, key_file: Path, patch: str | None = None) -> None:
    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        runner = web.AppRunner(application(patch), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=make_ssl_context(cert_file, key_file)).start()
        await stop.wait()
        await runner.cleanup()

    asyncio.run(serve())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("port", type=int)
    parser.add_argument("cert_file", type=Path)
    parser.add_argument("key_file", type=Path)
    parser.add_argument("--patch-file", type=Path, help="answer every review with this JSON Patch")
    args = parser.parse_args()
    try:
        canned = encoded_patch(args.patch_file) if args.patch_file else None
    except (OSError, ValueError) as exc:
        parser.exit(2, f"noop_webhook.py: {exc}\n")
    main(args.port, args.cert_file, args.key_file, canned)
