"""The namespace and node caches (:mod:`webhook.kube.cache`): list, watch, resume, re-list.

The cache runs its real kubernetes-asyncio ``CoreV1Api.list_node`` / ``list_namespace`` calls and
the library's ``Watch`` against an HTTP server on 127.0.0.1 that replays answers in order and
records each request's query. The node objects are the eight recorded from the e2e cluster
(``tests/data/why/bundled.json``); the answers around them are in the API server's wire format: a
``NodeList``, watch events ``{"type", "object"}`` one per line, a ``BOOKMARK`` carrying only a
``resourceVersion``, and a ``metav1.Status`` with code 410 ``Expired`` for a version the API server
no longer keeps (as an ``ERROR`` event, or as the answer to the watch request itself).
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from conftest import LOOPBACK, free_port
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from webhook.kube.cache import ObjectCache, inventory_of, namespace_labels, node_cache

RECORDED = Path(__file__).resolve().parent / "data" / "why" / "bundled.json"
NAMES = [f"gpu-1-{b}-{r}-{h}" for b in (1, 2) for r in (1, 2) for h in (1, 2)]

Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


def recorded_nodes() -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = copy.deepcopy(json.loads(RECORDED.read_text())["nodes"])
    assert [n["metadata"]["name"] for n in nodes] == NAMES
    return nodes


def node_list(version: str, nodes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    items = recorded_nodes() if nodes is None else nodes
    return {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": version}, "items": items}


def event(kind: str, obj: dict[str, Any], version: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = version
    return {"type": kind, "object": obj}


def bookmark(version: str) -> dict[str, Any]:
    obj = {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": version}}
    return {"type": "BOOKMARK", "object": obj}


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


EXPIRED = status(410, "Expired", "too old resource version: 1600 (1812)")
FORBIDDEN = status(
    403, "Forbidden", 'nodes is forbidden: User "system:serviceaccount:x:y" cannot list resource "nodes"'
)


# -- answers the replaying server gives ----------------------------------------------------------
def listing(body: dict[str, Any], code: int = 200) -> Answer:
    async def answer(_: web.Request) -> web.StreamResponse:
        return web.json_response(body, status=code)

    return answer


def events(lines: list[dict[str, Any]], end: str = "close") -> Answer:
    """A watch answer: ``lines`` one JSON per line, then the end of the stream (``close``: as at the
    watch's timeout) or a connection cut mid-stream (``drop``: as when the API server goes away)."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        for line in lines:
            await response.write(json.dumps(line).encode() + b"\n")
        if end == "drop":
            assert request.transport is not None
            request.transport.abort()
            return response
        await response.write_eof()
        return response

    return answer


def silence(closing: asyncio.Event) -> Answer:
    """A watch answer whose headers arrive and then nothing, as on a connection dead without a close."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await closing.wait()
        return response

    return answer


class ReplayServer:
    """Answers each request with the next answer queued for its resource (waiting for one) and
    records its query."""

    def __init__(self) -> None:
        self.answers: dict[str, asyncio.Queue[Answer]] = {}
        self.requests: list[dict[str, str]] = []
        self.times: list[float] = []
        self.closing = asyncio.Event()
        self.port = free_port()
        app = web.Application()
        app.router.add_get("/api/v1/{resource}", self._handle)
        self.runner = web.AppRunner(app, shutdown_timeout=0.5)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        resource = request.match_info["resource"]
        self.requests.append({"resource": resource, **request.query})
        self.times.append(time.monotonic())
        getter = asyncio.ensure_future(self._queue(resource).get())
        closer = asyncio.ensure_future(self.closing.wait())
        done, pending = await asyncio.wait({getter, closer}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if getter not in done:
            return web.Response(status=503)
        return await getter.result()(request)

    def _queue(self, resource: str) -> asyncio.Queue[Answer]:
        return self.answers.setdefault(resource, asyncio.Queue())

    def queue(self, *answers: Answer, resource: str = "nodes") -> None:
        """Answers for the next requests to ``/api/v1/<resource>``, in order."""
        for answer in answers:
            self._queue(resource).put_nowait(answer)

    def api(self) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = f"http://{LOOPBACK}:{self.port}"
        return client.ApiClient(configuration)

    def watches(self) -> list[str | None]:
        """The resourceVersion of each request: ``list`` for a list, the version for a watch."""
        return [r.get("resourceVersion") if r.get("watch", "").lower() == "true" else "list" for r in self.requests]


@pytest.fixture
async def server() -> AsyncIterator[ReplayServer]:
    replay = ReplayServer()
    await replay.runner.setup()
    await web.TCPSite(replay.runner, LOOPBACK, replay.port).start()
    yield replay
    replay.closing.set()
    await replay.runner.cleanup()


@pytest.fixture
async def caches(server: ReplayServer) -> AsyncIterator[list[ObjectCache]]:
    """Caches started by a test; stopped (and their API client closed) at teardown."""
    started: list[ObjectCache] = []
    api = server.api()
    started.append(node_cache(api))
    yield started
    for cache in started:
        await asyncio.wait_for(cache.stop(), 5)
    await api.close()


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within the timeout")
        await asyncio.sleep(0.01)


def start(cache: ObjectCache, **settings: Any) -> list[int]:
    """Start ``cache`` with ``settings``; the returned list grows by one per change notice."""
    for key, value in settings.items():
        setattr(cache, key, value)
    notices: list[int] = []
    cache.on_change = lambda: notices.append(len(cache.objects))
    cache.start()
    return notices


# -- list, watch, resume -------------------------------------------------------------------------
async def test_list_then_events_then_the_watch_resumes_from_the_last_version(
    server: ReplayServer, caches: list[ObjectCache]
) -> None:
    nodes = recorded_nodes()
    cordoned = copy.deepcopy(nodes[0])
    cordoned["spec"] = {"unschedulable": True}
    added = copy.deepcopy(nodes[7])
    added["metadata"]["name"] = added["metadata"]["labels"]["kubernetes.io/hostname"] = "gpu-1-2-2-3"
    server.queue(
        listing(node_list("1600")),
        events(
            [
                event("MODIFIED", cordoned, "1601"),
                event("DELETED", nodes[7], "1602"),
                event("ADDED", added, "1603"),
                bookmark("1650"),
            ]
        ),
    )
    cache = caches[0]
    notices = start(cache, retry_delay=0.3)
    await until(lambda: len(server.requests) == 3)
    # A watch the API server ended at once is followed by a pause, not by a busy loop.
    assert server.times[2] - server.times[1] >= 0.3
    # A list, a watch from the list's version with bookmarks, and after the stream ended (the
    # watch's timeout) a new watch from the bookmark's version: no second list.
    assert server.watches() == ["list", "1600", "1650"]
    assert {k: server.requests[1][k].lower() for k in ("allowWatchBookmarks", "timeoutSeconds")} == {
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "300",
    }
    assert cache.synced.is_set()
    assert sorted(cache.objects) == sorted([*NAMES[:7], "gpu-1-2-2-3"])
    assert cache.resource_version == "1650"
    assert notices == [8, 8, 7, 8]  # the list, then one notice per changing event (not the bookmark)
    inventory = inventory_of(cache)
    assert sorted(n.name for n in inventory.nodes if not n.schedulable) == ["gpu-1-1-1-1"]


def text(body: str, code: int) -> Answer:
    async def answer(_: web.Request) -> web.StreamResponse:
        return web.Response(text=body, status=code, content_type="text/html")

    return answer


async def test_list_answer_without_items_or_with_an_error_never_syncs_an_empty_cache(
    server: ReplayServer, caches: list[ObjectCache]
) -> None:
    server.queue(
        listing(FORBIDDEN, code=403),
        text("<html><body>502 Bad Gateway</body></html>", 502),  # a proxy in front of the API server
        listing({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}}),  # no items
    )
    cache = caches[0]
    start(cache, retry_delay=0.05, retry_max=0.1)
    await until(lambda: len(server.requests) == 4)  # each refused, then retried after the back-off
    assert not cache.synced.is_set() and cache.objects == {}
    server.queue(listing(node_list("1600")))
    await until(cache.synced.is_set)
    assert sorted(cache.objects) == NAMES


# -- 410 Gone and broken watches -----------------------------------------------------------------
@pytest.mark.parametrize("how", ["error-event", "http-410"])
async def test_an_expired_version_relists_at_once(server: ReplayServer, caches: list[ObjectCache], how: str) -> None:
    expired = events([{"type": "ERROR", "object": EXPIRED}]) if how == "error-event" else listing(EXPIRED, code=410)
    server.queue(listing(node_list("1600")), expired, listing(node_list("1812", recorded_nodes()[:6])))
    cache = caches[0]
    start(cache, retry_delay=5.0)  # a back-off would show: the re-list must not wait for it
    await until(lambda: len(server.requests) == 4)
    assert server.watches() == ["list", "1600", "list", "1812"]
    assert server.times[2] - server.times[1] < 2.0
    assert sorted(cache.objects) == NAMES[:6]  # what disappeared while the watch was gone is gone


async def test_a_dropped_watch_relists_after_a_back_off(server: ReplayServer, caches: list[ObjectCache]) -> None:
    nodes = recorded_nodes()
    cordoned = copy.deepcopy(nodes[1])
    cordoned["spec"] = {"unschedulable": True}
    server.queue(
        listing(node_list("1600")),
        events([event("MODIFIED", cordoned, "1601")], end="drop"),
        listing(node_list("1700")),
    )
    cache = caches[0]
    start(cache, retry_delay=0.2)
    await until(lambda: len(server.requests) == 4)
    assert server.watches() == ["list", "1600", "list", "1700"]
    assert server.times[2] - server.times[1] >= 0.2
    assert cache.objects[NAMES[1]]["spec"] == {}  # the re-list is the truth, not the event before the cut


async def test_a_silent_watch_is_given_up_after_the_read_timeout(
    server: ReplayServer, caches: list[ObjectCache]
) -> None:
    server.queue(listing(node_list("1600")), silence(server.closing), listing(node_list("1700")))
    start(caches[0], retry_delay=0.05, read_timeout=0.5)
    await until(lambda: len(server.requests) == 4)
    assert server.watches() == ["list", "1600", "list", "1700"]
    assert server.times[2] - server.times[1] >= 0.5


async def test_error_answers_to_the_watch_back_off_doubling(server: ReplayServer, caches: list[ObjectCache]) -> None:
    server.queue(
        listing(node_list("1600")),
        listing(status(500, "InternalError", "etcdserver: request timed out"), code=500),
        listing(node_list("1601")),
        listing(status(500, "InternalError", "etcdserver: request timed out"), code=500),
        listing(node_list("1602")),
    )
    start(caches[0], retry_delay=0.3, retry_max=10.0)
    await until(lambda: len(server.requests) == 6)
    assert server.watches() == ["list", "1600", "list", "1601", "list", "1602"]
    # A successful list resets the back-off: both waits are the first one's (not 0.3 s then 0.6 s).
    for failed in (1, 3):
        assert 0.3 <= server.times[failed + 1] - server.times[failed] < 0.6


# -- the pure parts ------------------------------------------------------------------------------
def offline_cache(name: str = "nodes") -> ObjectCache:
    """A cache that is never started: only its pure parts are used (no API client, no call)."""

    async def unused(**_: Any) -> Any:
        raise AssertionError("no API call expected")

    return ObjectCache(name, None, unused)  # type: ignore[arg-type]


def test_replace_takes_items_by_name_and_the_lists_version() -> None:
    cache = offline_cache()
    cache.objects = {"stale": {"metadata": {"name": "stale"}}}
    cache.replace(node_list("1600", [*recorded_nodes()[:2], {"metadata": {}}, "not an object"]))  # type: ignore[list-item]
    assert sorted(cache.objects) == NAMES[:2]
    assert cache.resource_version == "1600"


def test_events_change_objects_and_every_event_moves_the_version() -> None:
    cache = offline_cache()
    nodes = recorded_nodes()
    cache.replace(node_list("1600", nodes[:2]))
    assert cache.apply(bookmark("1610")) is False
    assert (cache.resource_version, sorted(cache.objects)) == ("1610", NAMES[:2])
    assert cache.apply(event("DELETED", nodes[5], "1611")) is False  # not cached: nothing changes
    assert cache.resource_version == "1611"
    assert cache.apply(event("ADDED", nodes[5], "1612")) is True
    assert cache.apply(event("DELETED", nodes[0], "1613")) is True
    assert (cache.resource_version, sorted(cache.objects)) == ("1613", [NAMES[1], NAMES[5]])
    assert cache.apply({"type": "MODIFIED", "object": {"metadata": {"resourceVersion": "1614"}}}) is False


def test_an_error_event_raises_with_its_code() -> None:
    with pytest.raises(ApiException) as raised:
        offline_cache().apply({"type": "ERROR", "object": EXPIRED})
    assert raised.value.status == 410
    assert "Expired: too old resource version" in str(raised.value)


def test_namespace_labels_follow_the_events() -> None:
    cache = offline_cache("namespaces")
    ns = {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {"name": "ml-dev", "labels": {"kubernetes.io/metadata.name": "ml-dev", "team": "ml"}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }
    cache.replace({"kind": "NamespaceList", "metadata": {"resourceVersion": "10"}, "items": [ns]})
    lookup = namespace_labels(cache)
    assert lookup("ml-dev") == {"kubernetes.io/metadata.name": "ml-dev", "team": "ml"}
    assert lookup("other") is None
    relabelled = copy.deepcopy(ns)
    relabelled["metadata"]["labels"]["team"] = "infra"
    assert cache.apply(event("MODIFIED", relabelled, "11")) is True
    assert lookup("ml-dev") == {"kubernetes.io/metadata.name": "ml-dev", "team": "infra"}
    assert cache.apply(event("DELETED", relabelled, "12")) is True
    assert lookup("ml-dev") is None
