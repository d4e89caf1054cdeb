"""Clients of the cluster's API server from a kubeconfig file: the async ``ApiClient``, a dynamic
client that raises on an error status (:class:`CheckedDynamicClient`), server-side apply under
the ``kgov-devcluster`` field manager, and CRDs applied and waited for until Established."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import api_exception
from kubernetes_asyncio.dynamic.resource import ResourceInstance

from e2e.devcluster.state import DevClusterError

FIELD_MANAGER = "kgov-devcluster"


@contextlib.asynccontextmanager
async def api_client(kubeconfig: str | os.PathLike[str]) -> AsyncIterator[k8s.ApiClient]:
    """An async ``ApiClient`` for a kubeconfig file (closed on exit)."""
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with k8s.ApiClient(configuration) as api:
        yield api


class CheckedDynamicClient(DynamicClient):
    """A ``DynamicClient`` whose calls raise on an error status, as documented.

    kubernetes-asyncio's dynamic client always asks for the raw response (``_preload_content=False``)
    and its REST layer checks the status only for preloaded ones, so a refused request returns the
    ``Status`` body as if it were the object (fixed upstream in kubernetes_asyncio PR #402). Here
    every non-2xx answer raises the matching ``DynamicApiError`` (``NotFoundError``,
    ``ConflictError``, ``ForbiddenError`` …); ``serialize=False`` still returns the raw response
    of a successful call.
    """

    async def request(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        serialize = params.pop("serialize", True)
        serializer = params.pop("serializer", ResourceInstance)
        response = await super().request(method, path, body=body, serialize=False, **params)
        status = getattr(response, "status", 200)
        if not 200 <= status <= 299:
            error = ApiException(status=status, reason=response.reason)
            error.body = await response.read()
            error.headers = response.headers
            response.release()
            raise api_exception(error)
        if not serialize:
            return response
        try:
            data = await response.json()
        finally:
            response.release()
        return serializer(self, data) if isinstance(data, dict) else data


@contextlib.asynccontextmanager
async def dynamic_client(
    kubeconfig: str | os.PathLike[str], discovery_cache: Path | None = None
) -> AsyncIterator[DynamicClient]:
    """A ``DynamicClient`` (any kind, CRDs included, found by discovery) for a kubeconfig file.

    ``discovery_cache`` is the file the discovery results are cached in (default: one per API
    server URL in the temporary directory).
    """
    async with api_client(kubeconfig) as api:
        cache = str(discovery_cache) if discovery_cache is not None else None
        async with CheckedDynamicClient(api, cache_file=cache) as dynamic:
            yield dynamic


async def apply(dynamic: DynamicClient, body: dict[str, Any], subresource: str | None = None) -> Any:
    """Server-side apply one object (or its ``subresource``, e.g. ``"status"``), forcing conflicts.

    Returns the object as the API server stored it (a ``ResourceInstance``).
    """
    resource = await dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    if subresource is not None:
        resource = resource.subresources[subresource]
    return await dynamic.server_side_apply(resource, body, field_manager=FIELD_MANAGER, force_conflicts=True)


async def apply_crds(dynamic: DynamicClient, crds: list[dict[str, Any]], timeout: float = 120.0) -> None:
    """Apply ``crds`` together and wait until each is Established.

    Raises:
        DevClusterError: some are not Established after ``timeout`` seconds (they are named).
    """
    await asyncio.gather(*(apply(dynamic, crd) for crd in crds))
    pending = {crd["metadata"]["name"] for crd in crds}
    resource = await dynamic.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for name in sorted(pending):
            crd = (await dynamic.get(resource, name=name)).to_dict()
            if any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (crd.get("status") or {}).get("conditions") or []
            ):
                pending.discard(name)
        if pending:
            await asyncio.sleep(0.2)
    if pending:
        raise DevClusterError(f"CRDs not Established after {timeout:.0f}s: {sorted(pending)}")
