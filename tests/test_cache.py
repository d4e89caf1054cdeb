"""The namespace and node caches (:mod:`webhook.kube.cache`): list, watch, resume, re-list.

The cache runs its real kubernetes-asyncio ``CoreV1Api.list_node`` / ``list_namespace`` calls and
the library's ``Watch`` against an HTTP server on 127.0.0.1 that replays answers in order and
records each request's query. The answers are what a real kube-apiserver v1.36.1 sent, recorded by
``tests/data/watch/record.py``: a ``NodeList`` of seven nodes, then a watch from its version in
which one node is cordoned, one tainted ``NoExecute``, one deleted and one added, ending with a
``BOOKMARK``; the namespace list and a namespace created, relabelled and deleted; and for each the
``ERROR`` event with the ``410 Expired`` Status a watch from a compacted version gets. Where a test
needs an answer the recording has not (a 403, a proxy's 502, a connection cut or gone silent, a
second list), it is made from the recorded ones.
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

WATCH = Path(__file__).resolve().parent / "data" / "watch"
NODES: dict[str, Any] = json.loads((WATCH / "nodes.json").read_text())
NAMESPACES: dict[str, Any] = json.loads((WATCH / "namespaces.json").read_text())

Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


def names(listing: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in listing["items"]]


def version(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


def node_list(new_version: str | None = None, keep: int | None = None) -> dict[str, Any]:
    """The recorded node list; with ``new_version``, as a later list would be (first ``keep`` nodes)."""
    listing = copy.deepcopy(NODES["list"])
    if new_version is not None:
        listing["metadata"]["resourceVersion"] = new_version
    if keep is not None:
        listing["items"] = listing["items"][:keep]
    return listing


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A metav1 Status answer, shaped like the recorded 410."""
    out = copy.deepcopy(NODES["expired"][0]["object"])
    out.update(code=code, reason=reason, message=message)
    return out


LIST_VERSION = version(NODES["list"])
#: The recorded watch: what each event is, in order.
EVENTS = [(e["type"], e["object"]["metadata"].get("name")) for e in NODES["events"]]
EXPIRED = NODES["expired"][0]["object"]
FORBIDDEN = status(
    403, "Forbidden", 'nodes is forbidden: User "system:serviceaccount:x:y" cannot list resource "nodes"'
)


def test_the_recording_is_what_the_tests_expect() -> None:
    assert names(NODES["list"]) == [f"gpu-1-{b}-{r}-{h}" for b in (1, 2) for r in (1, 2) for h in (1, 2)][:7]
    assert EVENTS == [
        ("MODIFIED", "gpu-1-1-1-1"),
        ("MODIFIED", "gpu-1-1-2-1"),
        ("DELETED", "gpu-1-2-2-1"),
        ("ADDED", "gpu-1-2-2-2"),
        ("BOOKMARK", None),
    ]
    assert NODES["events"][0]["object"]["spec"]["unschedulable"] is True
    assert (
        NODES["expired"]
        == NAMESPACES["expired"][:1]
        == [
            {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": "The resourceVersion for the provided watch is too old.",
                    "reason": "Expired",
                    "code": 410,
                },
            }
        ]
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


def text(body: str, code: int) -> Answer:
    async def answer(_: web.Request) -> web.StreamResponse:
        return web.Response(text=body, status=code, content_type="text/html")

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
    server.queue(listing(NODES["list"]), events(NODES["events"]))
    cache = caches[0]
    notices = start(cache, retry_delay=0.3)
    await until(lambda: len(server.requests) == 3)
    # A watch the API server ended at once is followed by a pause, not by a busy loop.
    assert server.times[2] - server.times[1] >= 0.3
    # A list, a watch from the list's version with bookmarks, and after the stream ended (the
    # watch's timeout) a new watch from the bookmark's version: no second list.
    assert server.watches() == ["list", LIST_VERSION, version(NODES["events"][-1]["object"])]
    assert {k: server.requests[1][k].lower() for k in ("allowWatchBookmarks", "timeoutSeconds")} == {
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "300",
    }
    assert cache.synced.is_set()
    assert sorted(cache.objects) == [
        *("gpu-1-1-1-1", "gpu-1-1-1-2", "gpu-1-1-2-1", "gpu-1-1-2-2"),
        *("gpu-1-2-1-1", "gpu-1-2-1-2", "gpu-1-2-2-2"),
    ]
    assert cache.resource_version == version(NODES["events"][-1]["object"])
    assert notices == [7, 7, 7, 6, 7]  # the list, then one notice per changing event (not the bookmark)
    inventory = {node.name: node for node in inventory_of(cache).nodes}
    assert [name for name, node in inventory.items() if not node.schedulable] == ["gpu-1-1-1-1"]
    assert {"key": "example.com/maintenance", "value": "yes", "effect": "NoExecute"} in inventory["gpu-1-1-2-1"].taints


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
    server.queue(listing(NODES["list"]))
    await until(cache.synced.is_set)
    assert sorted(cache.objects) == names(NODES["list"])


# -- 410 Gone and broken watches -----------------------------------------------------------------
@pytest.mark.parametrize("how", ["error-event", "http-410"])
async def test_an_expired_version_relists_at_once(server: ReplayServer, caches: list[ObjectCache], how: str) -> None:
    # The recorded answer is the ERROR event; an HTTP 410 to the watch request is handled the same.
    expired = events(NODES["expired"]) if how == "error-event" else listing(EXPIRED, code=410)
    later = str(int(LIST_VERSION) + 100)
    # The watch ends (its timeout); the watch resumed from the last version gets 410: list at once.
    server.queue(listing(NODES["list"]), events(NODES["events"]), expired, listing(node_list(later, keep=5)))
    cache = caches[0]
    waits = backoffs(cache)
    start(cache, retry_delay=2.0)  # a back-off would show: the re-list must not wait for it
    await until(lambda: len(server.requests) == 5, timeout=10)
    bookmark = version(NODES["events"][-1]["object"])
    assert server.watches() == ["list", LIST_VERSION, bookmark, "list", later]
    assert waits == []
    assert server.times[3] - server.times[2] < 2.0
    assert sorted(cache.objects) == names(NODES["list"])[:5]  # what went while the watch was gone is gone


async def test_an_expired_version_right_after_a_list_backs_off(server: ReplayServer, caches: list[ObjectCache]) -> None:
    """A 410 for the version a list has just given is no expiry; re-listing at once would storm."""
    server.queue(listing(NODES["list"]), events(NODES["expired"]), listing(node_list()))
    start(caches[0], retry_delay=0.3)
    await until(lambda: len(server.requests) == 4)
    assert server.watches() == ["list", LIST_VERSION, "list", LIST_VERSION]
    assert server.times[2] - server.times[1] >= 0.3


async def test_a_dropped_watch_resumes_from_the_last_version_after_a_back_off(
    server: ReplayServer, caches: list[ObjectCache]
) -> None:
    """As client-go's reflector: a cut connection (an API server restarting) is no reason to list
    everything again; the watch resumes from the last version seen, and a 410 for it lists."""
    first = NODES["events"][0]
    seen = first["object"]["metadata"]["resourceVersion"]
    server.queue(listing(NODES["list"]), events([first], end="drop"), events([], end="close"))
    cache = caches[0]
    lists: list[str] = []
    cache.on_list = lists.append
    start(cache, retry_delay=0.2)
    await until(lambda: len(server.requests) == 3)
    assert server.watches() == ["list", LIST_VERSION, seen]
    assert server.times[2] - server.times[1] >= 0.2
    # The event before the cut is kept (the cordon it carried): no list replaced it.
    assert cache.objects["gpu-1-1-1-1"]["spec"]["unschedulable"] is True
    assert lists == ["initial"]


async def test_a_silent_watch_is_given_up_after_the_read_timeout(
    server: ReplayServer, caches: list[ObjectCache]
) -> None:
    server.queue(listing(NODES["list"]), silence(server.closing), events([], end="close"))
    start(caches[0], retry_delay=0.05, read_timeout=0.5)
    await until(lambda: len(server.requests) == 3)
    assert server.watches() == ["list", LIST_VERSION, LIST_VERSION]
    assert server.times[2] - server.times[1] >= 0.5


def backoffs(cache: ObjectCache) -> list[float]:
    """The delays ``cache`` backs off for, in order, as it computes them (its waits still happen)."""
    waits: list[float] = []
    back_off = cache._back_off

    async def recorded(exc: Exception, delay: float, reason: str | None) -> None:
        waits.append(delay)
        await back_off(exc, delay, reason)

    cache._back_off = recorded  # type: ignore[method-assign]
    return waits


async def test_passing_errors_of_the_watch_back_off_doubling_and_resume(
    server: ReplayServer, caches: list[ObjectCache]
) -> None:
    """A 500 (etcd timing out) or 429 answer to the watch is passing: the watch is tried again from
    the same version after a back-off that doubles; no list."""
    timed_out = status(500, "InternalError", "etcdserver: request timed out")
    server.queue(
        listing(NODES["list"]),
        listing(timed_out, code=500),
        listing(status(429, "TooManyRequests", "slow down"), code=429),
        events([], end="close"),
    )
    lists: list[str] = []
    caches[0].on_list = lists.append
    waits = backoffs(caches[0])
    start(caches[0], retry_delay=0.3, retry_max=10.0)
    await until(lambda: len(server.requests) == 4)
    assert server.watches() == ["list", LIST_VERSION, LIST_VERSION, LIST_VERSION]
    # The delays asked for, not wall time (which a loaded machine stretches), then that they were waited.
    assert waits[:2] == [0.3, 0.6]
    assert server.times[2] - server.times[1] >= 0.3
    assert server.times[3] - server.times[2] >= 0.6
    assert lists == ["initial"]


async def test_refusals_of_the_watch_list_again_after_a_back_off(
    server: ReplayServer, caches: list[ObjectCache]
) -> None:
    forbidden = status(403, "Forbidden", "nodes is forbidden")
    server.queue(
        listing(NODES["list"]),
        listing(forbidden, code=403),
        listing(node_list("1601")),
        listing(forbidden, code=403),
        listing(node_list("1602")),
    )
    lists: list[str] = []
    caches[0].on_list = lists.append
    waits = backoffs(caches[0])
    start(caches[0], retry_delay=0.3, retry_max=10.0)
    await until(lambda: len(server.requests) == 6)
    assert server.watches() == ["list", LIST_VERSION, "list", "1601", "list", "1602"]
    # A successful list resets the back-off: both waits are the first one's (not 0.3 s then 0.6 s).
    assert waits[:2] == [0.3, 0.3]
    for failed in (1, 3):
        assert server.times[failed + 1] - server.times[failed] >= 0.3
    assert lists == ["initial", "error", "error"]


# -- the pure parts ------------------------------------------------------------------------------
def offline_cache(name: str = "nodes") -> ObjectCache:
    """A cache that is never started: only its pure parts are used (no API client, no call)."""

    async def unused(**_: Any) -> Any:
        raise AssertionError("no API call expected")

    return ObjectCache(name, None, unused)  # type: ignore[arg-type]


def test_replace_takes_items_by_name_and_the_lists_version() -> None:
    cache = offline_cache()
    cache.objects = {"stale": {"metadata": {"name": "stale"}}}
    listing = node_list()
    listing["items"] += [{"metadata": {}}, "not an object"]
    cache.replace(listing)
    assert sorted(cache.objects) == names(NODES["list"])
    assert cache.resource_version == LIST_VERSION


def test_each_recorded_event_and_the_version_it_leaves() -> None:
    cache = offline_cache()
    cache.replace(node_list())
    changed = []
    for recorded in NODES["events"]:
        changed.append(cache.apply(recorded))
        assert cache.resource_version == version(recorded["object"])
    assert changed == [True, True, True, True, False]  # the bookmark only moves the version
    assert "gpu-1-2-2-1" not in cache.objects and "gpu-1-2-2-2" in cache.objects
    # A deletion of what the cache does not hold changes nothing but the version.
    assert cache.apply(NODES["events"][2]) is False


def test_an_error_event_raises_with_its_code() -> None:
    with pytest.raises(ApiException) as raised:
        offline_cache().apply(NODES["expired"][0])
    assert raised.value.status == 410
    assert "Expired: The resourceVersion for the provided watch is too old." in str(raised.value)


def test_namespace_labels_follow_the_recorded_events() -> None:
    cache = offline_cache("namespaces")
    cache.replace(NAMESPACES["list"])
    lookup = namespace_labels(cache)
    assert lookup("kube-system") == {"kubernetes.io/metadata.name": "kube-system"}
    assert lookup("ml-dev") is None
    seen = []
    for recorded in NAMESPACES["events"]:
        cache.apply(recorded)
        seen.append(lookup("ml-dev"))
    # Created with team=ml, relabelled team=infra, then Terminating (still there: its finalizer runs).
    assert seen[:3] == [
        {"kubernetes.io/metadata.name": "ml-dev", "team": "ml"},
        {"kubernetes.io/metadata.name": "ml-dev", "team": "infra"},
        {"kubernetes.io/metadata.name": "ml-dev", "team": "infra"},
    ]
    assert cache.objects["ml-dev"]["status"]["phase"] == "Terminating"
    gone = {"type": "DELETED", "object": cache.objects["ml-dev"]}
    assert cache.apply(gone) is True and lookup("ml-dev") is None
