"""In-memory caches of cluster objects kept fresh by list + watch (kubernetes-asyncio).

The admission path reads these caches only; it never calls the API server per request (SPEC §5).
A cache is *synced* after its first full list; the server's ``/readyz`` waits for that.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from webhook.core.inventory import NodeInventory

__all__ = ["LIST_REASONS", "RETRY_DELAYS", "ObjectCache", "connect", "namespace_cache", "node_cache"]

log = structlog.get_logger("kgov.cache")

Lister = Callable[..., Awaitable[Any]]


async def connect(kubeconfig: str | None) -> client.ApiClient:
    """An API client from a kubeconfig file, or the in-cluster service account when None.

    Raises:
        kubernetes_asyncio.config.ConfigException: no usable configuration.
    """
    configuration = client.Configuration()
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


#: Seconds between retries after a failed list or watch: doubling from the first, capped at the second.
RETRY_DELAYS = (1.0, 10.0)
#: Why a cache listed everything again (the ``reason`` of ``kgov_cache_lists_total``).
LIST_REASONS = ("initial", "expired", "error")


class ObjectCache:
    """Objects of one cluster-scoped kind by name, as plain dicts (``metadata``, ``spec``, ``status``).

    ``list_fn`` is a kubernetes-asyncio list call (e.g. ``CoreV1Api.list_namespace``); it is used
    for the lists and the watches. As client-go's reflector does: one full list, then a watch from
    its ``resourceVersion``; a watch that ends or breaks (the API server restarting, a dropped
    connection) is opened again from the last version seen, after a back-off of
    :data:`RETRY_DELAYS` when it broke or lasted under a second (also after a 429 or 5xx answer);
    ``410 Gone`` (that version is compacted away) lists everything again at once, any other
    refusal (403…) after the back-off. ``on_list(reason)`` is called before each full list (one
    of :data:`LIST_REASONS`), ``on_change()`` after each change of :attr:`objects`.
    """

    def __init__(self, name: str, api: client.ApiClient, list_fn: Lister) -> None:
        self.name = name
        self._api = api
        self._list = list_fn
        self.objects: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._updated = asyncio.Event()
        self.on_change: Callable[[], None] | None = None
        self.on_list: Callable[[str], None] | None = None
        #: The resourceVersion the next watch starts from (None: list first).
        self.version: str | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"watch-{self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def wait_for_object(self, name: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``name`` to be in :attr:`objects`; whether it is."""
        deadline = asyncio.get_running_loop().time() + timeout
        while name not in self.objects:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            updated = self._updated
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(updated.wait(), remaining)
        return True

    async def _run(self) -> None:
        delay = RETRY_DELAYS[0]
        reason = "initial"
        while True:
            try:
                if self.version is None:
                    self.version = await self._relist(reason)
                opened = asyncio.get_running_loop().time()
                await self._watch()
                if asyncio.get_running_loop().time() - opened >= 1.0:
                    delay = RETRY_DELAYS[0]
                    continue
                # Ended at once (a server shutting down): do not spin.
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_DELAYS[1])
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status == 410:
                    log.info(
                        "cache resourceVersion expired (410 Gone); re-listing", cache=self.name, version=self.version
                    )
                    self.version, reason = None, "expired"
                    continue
                transient = exc.status == 429 or (exc.status or 0) >= 500  # e.g. storage (re)initializing
                log.warning(
                    "cache list or watch refused; retrying" if transient else "cache list or watch refused; re-listing",
                    cache=self.name,
                    status=exc.status,
                    error=str(exc.reason),
                    retry_in_s=delay,
                )
                if not transient or self.version is None:
                    self.version, reason = None, "error"
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_DELAYS[1])
            except Exception as exc:
                # The API server is unreachable or cut the stream (aiohttp's ClientError, OSError,
                # a truncated chunk): watch again from the last version seen (a list when none).
                log.warning(
                    "cache watch failed; retrying",
                    cache=self.name,
                    error=f"{type(exc).__name__}: {exc}",
                    resume_from=self.version,
                    retry_in_s=delay,
                )
                if self.version is None:
                    reason = "error"
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_DELAYS[1])

    async def _relist(self, reason: str) -> str | None:
        """List every object, replace :attr:`objects`; returns the list's resourceVersion."""
        if self.on_list is not None:
            self.on_list(reason)
        listing = await self._list(_preload_content=False)
        try:
            data = await listing.json()
        finally:
            listing.release()
        if listing.status != 200:
            raise ApiException(
                status=listing.status, reason=str(data.get("message") if isinstance(data, dict) else data)
            )
        self.objects = {item["metadata"]["name"]: item for item in data.get("items", [])}
        self.synced.set()
        self._changed()
        log.info("cache listed", cache=self.name, count=len(self.objects), reason=reason)
        version = (data.get("metadata") or {}).get("resourceVersion")
        return str(version) if version else None

    async def _watch(self) -> None:
        """Apply watch events from :attr:`version` until the stream ends, moving :attr:`version` on.

        Raises:
            ApiException: the API server sent an ERROR event (410 when the version is too old).
        """
        stream = watch.Watch()
        async with stream.stream(self._list, resource_version=self.version, timeout_seconds=300) as events:
            async for event in events:
                raw = event.get("raw_object") or self._plain(event.get("object"))
                metadata = raw.get("metadata") or {}
                if metadata.get("resourceVersion"):
                    self.version = str(metadata["resourceVersion"])
                name = metadata.get("name")
                if event.get("type") == "BOOKMARK" or name is None:
                    continue
                if event.get("type") == "DELETED":
                    self.objects.pop(name, None)
                else:
                    self.objects[name] = raw
                self._changed()

    def _plain(self, obj: Any) -> dict[str, Any]:
        if isinstance(obj, dict):
            return obj
        data = self._api.sanitize_for_serialization(obj)
        assert isinstance(data, dict)
        return data

    def _changed(self) -> None:
        updated, self._updated = self._updated, asyncio.Event()
        updated.set()
        if self.on_change is not None:
            self.on_change()


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
