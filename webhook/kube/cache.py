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
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from webhook.core.inventory import NodeInventory
from webhook.kube.client import open_client

__all__ = ["ObjectCache", "connect", "namespace_cache", "node_cache"]

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


class ObjectCache:
    """Objects of one cluster-scoped kind by name, as plain dicts (``metadata``, ``spec``, ``status``).

    ``list_fn`` is a kubernetes-asyncio list call (e.g. ``CoreV1Api.list_namespace``); it is used
    for the initial list and the watch. On a dropped watch or ``410 Gone`` the cache re-lists.
    """

    def __init__(self, name: str, api: client.ApiClient, list_fn: Lister) -> None:
        self.name = name
        self._api = api
        self._list = list_fn
        self.objects: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.on_change: Callable[[], None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"watch-{self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _plain(self, obj: Any) -> dict[str, Any]:
        if isinstance(obj, dict):
            return obj
        data = self._api.sanitize_for_serialization(obj)
        assert isinstance(data, dict)
        return data

    async def _run(self) -> None:
        delay = 1.0
        while True:
            try:
                listing = await self._list(_preload_content=False)
                data = await listing.json()
                self.objects = {item["metadata"]["name"]: item for item in data.get("items", [])}
                version = data.get("metadata", {}).get("resourceVersion")
                self.synced.set()
                self._changed()
                log.info("cache listed", cache=self.name, count=len(self.objects))
                delay = 1.0
                stream = watch.Watch()
                async with stream.stream(self._list, resource_version=version, timeout_seconds=300) as events:
                    async for event in events:
                        kind = event.get("type")
                        raw = event.get("raw_object") or self._plain(event.get("object"))
                        if kind == "ERROR":
                            break
                        name = (raw.get("metadata") or {}).get("name")
                        if name is None:
                            continue
                        if kind == "DELETED":
                            self.objects.pop(name, None)
                        else:
                            self.objects[name] = raw
                        self._changed()
            except asyncio.CancelledError:
                raise
            except (ApiException, OSError, ValueError, KeyError) as exc:
                log.warning("cache watch failed; re-listing", cache=self.name, error=str(exc), retry_in_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    def _changed(self) -> None:
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
