"""In-memory caches of cluster objects kept fresh by list + watch (kubernetes-asyncio).

The admission path reads these caches only; it never calls the API server per request (SPEC §5).
A cache is *synced* after its first full list; the server's ``/readyz`` waits for that.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from webhook.core.kueue.inventory import NodeInventory
from webhook.kube.client import open_client

__all__ = [
    "LIST_REASONS",
    "ObjectCache",
    "connect",
    "namespace_cache",
    "namespaced_key",
    "node_cache",
    "runtime_caches",
    "runtime_lookup",
    "runtime_wait",
]

log = structlog.get_logger("kgov.cache")

Lister = Callable[..., Awaitable[Any]]


async def connect(kubeconfig: str | None) -> client.ApiClient:
    """An API client from a kubeconfig file, or the in-cluster service account when None
    (:func:`webhook.kube.client.open_client`; the server is not probed: the caches' list retries).

    Raises:
        webhook.kube.client.ClusterError: no usable configuration (the message says why).
    """
    api: client.ApiClient = await open_client(kubeconfig, search=False, check_server=False)
    return api


#: Why a cache listed everything (the ``reason`` of ``kgov_cache_lists_total``): its first list;
#: ``410 Gone`` for the version its watch resumed from; a list or watch refused or unreadable.
LIST_REASONS = ("initial", "expired", "error")


class ObjectCache:
    """Objects of one kind by name (``key``: by another key, such as ``namespace/name``), as plain
    dicts (``metadata``, ``spec``, ``status``).

    ``list_fn`` is a kubernetes-asyncio list call (e.g. ``CoreV1Api.list_namespace``); it is used
    for the list and the watch. As client-go's reflector does: one full list, then a watch from its
    ``resourceVersion``; when a watch ends (the API server's ``timeoutSeconds``) or breaks (a
    dropped connection, an API server restarting, ``read_timeout`` seconds without a byte: a
    connection dead without a close, a ``429`` or ``5xx`` answer) the next watch resumes from the
    last version seen (an event's object or a ``BOOKMARK``), after a back-off of ``retry_delay``
    seconds, doubling up to ``retry_max``, when it broke or lasted under a second. ``410 Gone``
    (that version is compacted away) lists everything again at once, unless the version came from
    a list just made (then after the back-off: no list storm); any other refusal (``403``…) or an
    unreadable list lists again after the back-off. ``on_list(reason)`` is called before each full
    list (one of :data:`LIST_REASONS`), ``on_change()`` after each change of :attr:`objects`,
    ``on_event(type, obj)`` with each ``ADDED``, ``MODIFIED`` or ``DELETED`` event.

    ``namespaced``: the objects of a namespaced kind, listed in every namespace, are kept by
    ``NAMESPACE/NAME``. ``optional``: the kind may not be served (a CRD not installed): a ``404``
    list is an empty, synced cache, listed again every ``retry_max`` seconds.
    """

    def __init__(
        self,
        name: str,
        api: client.ApiClient,
        list_fn: Lister,
        *,
        watch_timeout: int = 300,
        retry_delay: float = 1.0,
        retry_max: float = 10.0,
        read_timeout: float | None = None,
        namespaced: bool = False,
        optional: bool = False,
    ) -> None:
        self.name = name
        self.namespaced = namespaced
        self.optional = optional
        self._api = api
        self._list = list_fn
        self.objects: dict[str, dict[str, Any]] = {}
        #: The version the next watch starts from: the list's, then each event's (None: list first).
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        self.watch_timeout = watch_timeout
        self.retry_delay = retry_delay
        self.retry_max = retry_max
        #: Seconds without a byte before a list or watch is given up (default: the watch's timeout + 30 s).
        self.read_timeout = read_timeout if read_timeout is not None else watch_timeout + 30.0
        self._task: asyncio.Task[None] | None = None
        self._updated = asyncio.Event()
        self.on_change: Callable[[], None] | None = None
        #: Called with each watch event's type and object (every version, not only the last).
        self.on_event: Callable[[str, Mapping[str, Any]], None] | None = None
        self.on_list: Callable[[str], None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"watch-{self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def wait_for_object(self, name: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``name`` to be in :attr:`objects`; whether it is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while name not in self.objects:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            updated = self._updated
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(updated.wait(), remaining)
        return True

    # -- pure parts: a list body and watch events applied to the objects -------------------------
    def replace(self, listing: Mapping[str, Any]) -> None:
        """Take a list answer (``{"kind": "NodeList", "metadata": {"resourceVersion"}, "items"}``):
        its items by name replace every object, and the watch will start from its version."""
        items = listing.get("items")
        objects: dict[str, dict[str, Any]] = {}
        for item in items if isinstance(items, list) else []:
            name = self._key(item)
            if name is not None:
                objects[name] = item
        self.objects = objects
        self.resource_version = _version(listing)

    def apply(self, event: Mapping[str, Any]) -> bool:
        """Apply one watch event (``{"type", "object"}``, as the API server streams it); True when
        an object was added, changed or removed.

        ``ADDED``/``MODIFIED`` store the object, ``DELETED`` removes it, ``BOOKMARK`` only moves the
        version; the event object's ``metadata.resourceVersion`` becomes the version to resume from.

        Raises:
            ApiException: an ``ERROR`` event (its ``code``: 410 when the version is too old).
        """
        kind = event.get("type")
        raw = event.get("raw_object", event.get("object"))
        raw = raw if isinstance(raw, dict) else self._plain(raw)
        if kind == "ERROR":
            raise ApiException(status=raw.get("code") or 500, reason=f"{raw.get('reason')}: {raw.get('message')}")
        version = _version(raw)
        if version is not None:
            self.resource_version = version
        name = self._key(raw)
        if kind not in ("ADDED", "MODIFIED", "DELETED") or name is None:
            return False
        if self.on_event is not None:
            self.on_event(kind, raw)
        if kind == "DELETED":
            return self.objects.pop(name, None) is not None
        self.objects[name] = raw
        return True

    def _key(self, obj: Any) -> str | None:
        return namespaced_key(obj) if self.namespaced else _name(obj)

    def _plain(self, obj: Any) -> dict[str, Any]:
        if obj is None:
            return {}
        data = self._api.sanitize_for_serialization(obj)
        assert isinstance(data, dict)
        return data

    # -- the list + watch loop -------------------------------------------------------------------
    async def _relist(self, reason: str) -> None:
        if self.on_list is not None:
            self.on_list(reason)
        listing = await self._list(_preload_content=False, _request_timeout=self._timeout())
        try:
            # Without preloading, kubernetes-asyncio hands back error answers too: a 403 or 500
            # Status read as a list would empty the cache and mark it synced.
            if listing.status == 404 and self.optional:  # the kind is not served: nothing to cache
                self.replace({"items": []})
                self.synced.set()
                self._changed()
                raise _NotServed(self.name)
            if not 200 <= listing.status <= 299:
                raise ApiException(status=listing.status, reason=_status_message(await listing.text()))
            data = await listing.json()
        finally:
            listing.release()
        if not isinstance(data, dict) or not isinstance(data.get("items"), list):
            raise ValueError(f"the {self.name} list answer has no items")
        self.replace(data)
        self.synced.set()
        self._changed()
        log.info("cache listed", cache=self.name, count=len(self.objects), resource_version=self.resource_version)

    async def _watch(self) -> None:
        # return_type "object": events stay plain dicts (no model per event).
        stream = watch.Watch(return_type="object")
        async with stream.stream(
            self._list,
            resource_version=self.resource_version,
            timeout_seconds=self.watch_timeout,
            allow_watch_bookmarks=True,
            _request_timeout=self._timeout(),
        ) as events:
            async for event in events:
                if self.apply(event):
                    self._changed()

    def _timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(sock_connect=10.0, sock_read=self.read_timeout)

    async def _run(self) -> None:
        delay = self.retry_delay
        reason: str | None = "initial"  # why the next round lists first (None: it resumes the watch)
        while True:
            fresh = False  # this watch starts from a list made just now
            try:
                if reason is not None:
                    await self._relist(reason)
                    reason, fresh, delay = None, True, self.retry_delay
                began = time.monotonic()
                await self._watch()
                # The API server ended the watch at its timeout: watch again from the last version
                # (after a pause when it ended at once, so that such a server makes no busy loop).
                if time.monotonic() - began >= 1.0:
                    delay = self.retry_delay
                    continue
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_max)
            except asyncio.CancelledError:
                raise
            except _NotServed:
                log.debug("kind not served; listing again later", cache=self.name, retry_in_s=self.retry_max)
                reason = "error"
                await asyncio.sleep(self.retry_max)
            except ApiException as exc:
                if exc.status == 410 and not fresh:
                    log.info("cache watch expired; re-listing", cache=self.name, error=str(exc).strip())
                    reason = "expired"
                    continue
                # A 429 or 5xx (e.g. storage re-initializing) is passing: the watch resumes. A 410 for
                # the version a list gave a moment ago, or a refusal, lists again, after a back-off.
                transient = exc.status == 429 or (exc.status or 0) >= 500
                if reason is not None or not transient or self.resource_version is None:
                    reason = "error"
                await self._back_off(exc, delay, reason)
                delay = min(delay * 2, self.retry_max)
            except Exception as exc:  # a dropped connection, a bad answer: never leave the cache stale
                if reason is not None or self.resource_version is None:
                    reason = "error"  # the list failed, or there is no version to resume from
                await self._back_off(exc, delay, reason)
                delay = min(delay * 2, self.retry_max)

    async def _back_off(self, exc: Exception, delay: float, reason: str | None) -> None:
        error = f"{type(exc).__name__}: {exc}".strip()
        action = "re-listing" if reason else "resuming the watch"
        log.warning(f"cache list or watch failed; {action}", cache=self.name, error=error, retry_in_s=delay)
        await asyncio.sleep(delay)

    def _changed(self) -> None:
        updated, self._updated = self._updated, asyncio.Event()
        updated.set()
        if self.on_change is not None:
            self.on_change()


class _NotServed(Exception):
    """The API server does not serve an optional cache's kind (404 on its list)."""


def _status_message(body: str) -> str:
    """The ``message`` of a metav1 Status answer, or the start of the body."""
    try:
        data = json.loads(body)
    except ValueError:
        return body[:200]
    message = data.get("message") if isinstance(data, dict) else None
    return str(message) if message else body[:200]


def _name(obj: Any) -> str | None:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else None


def namespaced_key(obj: Any) -> str | None:
    """``namespace/name`` of a namespaced object (None without a name)."""
    name = _name(obj)
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return f"{namespace}/{name}" if name is not None and isinstance(namespace, str) else None


def _version(obj: Any) -> str | None:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
    return version if isinstance(version, str) and version else None


def namespace_cache(api: client.ApiClient) -> ObjectCache:
    return ObjectCache("namespaces", api, client.CoreV1Api(api).list_namespace)


def node_cache(api: client.ApiClient) -> ObjectCache:
    return ObjectCache("nodes", api, client.CoreV1Api(api).list_node)


def namespace_labels(cache: ObjectCache) -> Callable[[str], Mapping[str, str] | None]:
    """A lookup function over a namespace cache (None for an unknown namespace)."""

    def lookup(name: str) -> Mapping[str, str] | None:
        obj = cache.objects.get(name)
        if obj is None:
            return None
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}

    return lookup


def inventory_of(cache: ObjectCache) -> NodeInventory:
    return NodeInventory.from_objects(cache.objects.values())


#: The training runtimes a TrainJob references (Kubeflow Trainer v2.2.1: group, version, plural, namespaced).
_RUNTIMES = (
    ("ClusterTrainingRuntime", "clustertrainingruntimes", False),
    ("TrainingRuntime", "trainingruntimes", True),
)


def runtime_caches(api: client.ApiClient, retry_max: float = 60.0) -> dict[str, ObjectCache]:
    """Caches of Kubeflow Trainer's ``ClusterTrainingRuntime`` and ``TrainingRuntime`` objects (all
    namespaces), by kind; empty (and synced) where Trainer's CRDs are not installed."""
    custom = client.CustomObjectsApi(api)
    return {
        kind: ObjectCache(
            plural,
            api,
            functools.partial(custom.list_cluster_custom_object, "trainer.kubeflow.org", "v1alpha1", plural),
            namespaced=namespaced,
            optional=True,
            retry_max=retry_max,
        )
        for kind, plural, namespaced in _RUNTIMES
    }


def runtime_lookup(caches: Mapping[str, ObjectCache]) -> Callable[[str, str, str], Mapping[str, Any] | None]:
    """A lookup ``(kind, namespace, name)`` → runtime over :func:`runtime_caches` (namespace "" for
    a cluster-scoped one); None when unknown."""

    def lookup(kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        cache = caches.get(kind)
        if cache is None:
            return None
        return cache.objects.get(f"{namespace}/{name}" if cache.namespaced else name)

    return lookup


def runtime_wait(caches: Mapping[str, ObjectCache]) -> Callable[[str, str, str, float], Awaitable[bool]]:
    """``await wait(kind, namespace, name, timeout)``: whether the runtime caches hold that
    runtime within ``timeout`` seconds (:meth:`ObjectCache.wait_for_object`)."""

    async def wait(kind: str, namespace: str, name: str, timeout: float) -> bool:
        cache = caches.get(kind)
        if cache is None:
            return False
        return await cache.wait_for_object(f"{namespace}/{name}" if cache.namespaced else name, timeout)

    return wait
