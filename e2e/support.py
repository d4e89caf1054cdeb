"""Helpers for e2e tests: polling, Kueue objects, and reading Kueue's topology assignments."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import NotFoundError

T = TypeVar("T")

KUEUE_API = "kueue.x-k8s.io/v1beta2"


class WaitTimeout(AssertionError):
    """A condition did not hold in time; the message carries what was awaited."""


async def wait_for(
    probe: Callable[[], Awaitable[T | None]],
    what: str,
    timeout: float = 30.0,
    interval: float = 0.25,
) -> T:
    """Await ``probe()`` until it returns something other than None (or False); return it.

    Raises:
        WaitTimeout: ``timeout`` seconds passed; the message names ``what``.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = await probe()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


async def create(dynamic: DynamicClient, body: dict[str, Any]) -> dict[str, Any]:
    """Create any object (kind found by discovery); return it as the API server stored it."""
    resource = await dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    namespace = body["metadata"].get("namespace")
    created = await dynamic.create(resource, body=body, namespace=namespace)
    return dict(created.to_dict())


async def get(
    dynamic: DynamicClient, api_version: str, kind: str, name: str, namespace: str | None = None
) -> dict[str, Any] | None:
    """One object as a dict, or None when it does not exist."""
    resource = await dynamic.resources.get(api_version=api_version, kind=kind)
    try:
        found = await dynamic.get(resource, name=name, namespace=namespace)
    except NotFoundError:
        return None
    return dict(found.to_dict())


async def list_objects(
    dynamic: DynamicClient, api_version: str, kind: str, namespace: str | None = None
) -> list[dict[str, Any]]:
    """All objects of a kind (in ``namespace``, or cluster-wide), as dicts."""
    resource = await dynamic.resources.get(api_version=api_version, kind=kind)
    found = await dynamic.get(resource, namespace=namespace)
    return [dict(item) for item in found.to_dict()["items"]]


async def delete(dynamic: DynamicClient, body: dict[str, Any]) -> None:
    """Delete the object ``body`` names; one that is already gone is fine."""
    resource = await dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    with contextlib.suppress(NotFoundError):
        await dynamic.delete(resource, name=body["metadata"]["name"], namespace=body["metadata"].get("namespace"))


async def workload_for(dynamic: DynamicClient, namespace: str, owner_uid: str) -> dict[str, Any] | None:
    """The Workload Kueue created for the object with uid ``owner_uid``, if there is one yet."""
    for workload in await list_objects(dynamic, KUEUE_API, "Workload", namespace):
        owners = workload["metadata"].get("ownerReferences", [])
        if any(owner.get("uid") == owner_uid for owner in owners):
            return workload
    return None


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The status condition of type ``kind`` of an object dict, if present."""
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def is_true(obj: dict[str, Any], kind: str) -> bool:
    """Whether the condition ``kind`` is ``True``."""
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


@dataclass(frozen=True)
class Domain:
    """One topology domain of an assignment: label values from the broadest level, and pods."""

    values: tuple[str, ...]
    pods: int


def decode_topology_assignment(assignment: dict[str, Any]) -> tuple[list[str], list[Domain]]:
    """Expand Kueue's compressed v1beta2 ``topologyAssignment`` into plain domains.

    Each slice covers ``domainCount`` domains; per level a value is either ``universal`` (the
    same for all) or ``individual`` (``prefix + root + suffix``, one root per domain); pod counts
    are ``universal`` or ``individual`` likewise.

    Returns:
        ``(levels, domains)``: the node label keys, broadest first, and one :class:`Domain`
        per assigned domain.
    """
    levels = list(assignment["levels"])
    domains: list[Domain] = []
    for piece in assignment.get("slices", []):
        count = int(piece["domainCount"])
        columns: list[list[str]] = []
        for level_values in piece["valuesPerLevel"]:
            if "universal" in level_values:
                columns.append([level_values["universal"]] * count)
            else:
                individual = level_values["individual"]
                prefix, suffix = individual.get("prefix") or "", individual.get("suffix") or ""
                columns.append([f"{prefix}{root}{suffix}" for root in individual["roots"]])
        pod_counts = piece["podCounts"]
        pods = [int(pod_counts["universal"])] * count if "universal" in pod_counts else pod_counts["individual"]
        for index in range(count):
            domains.append(Domain(tuple(column[index] for column in columns), int(pods[index])))
    return levels, domains
