"""Generated objects against the live cluster: fetch with kubernetes-asyncio, compare, explain.

:func:`fetch_live` reads, for every generated object, the object of the same kind, namespace and
name (``None`` when absent) and lists the objects labelled ``app.kubernetes.io/managed-by:
kueue-governor`` that are no longer generated. :func:`diff_objects` is pure: it compares only the
fields the generator writes (a live object's status, server-set metadata and fields defaulted by
Kueue are not drift), quantities by value, and flags changes Kueue refuses in place.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.generate.manifests import MANAGED_BY, MANAGED_BY_LABEL, Manifest, object_key
from webhook.generate.render import dump_yaml
from webhook.generate.validate import canonical, needs_recreate
from webhook.kube.client import ClusterError, get_json, open_client

__all__ = [
    "KIND_PLURALS",
    "LiveError",
    "LiveState",
    "ObjectDiff",
    "diff_objects",
    "fetch_live",
    "project",
    "resource_path",
]

#: (apiVersion, kind) → (plural, namespaced) for every kind the generator writes.
KIND_PLURALS: dict[tuple[str, str], tuple[str, bool]] = {
    ("kueue.x-k8s.io/v1beta2", "Topology"): ("topologies", False),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"): ("resourceflavors", False),
    ("kueue.x-k8s.io/v1beta2", "Cohort"): ("cohorts", False),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"): ("clusterqueues", False),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"): ("localqueues", True),
    ("kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass"): ("workloadpriorityclasses", False),
    ("scheduling.k8s.io/v1", "PriorityClass"): ("priorityclasses", False),
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "ConfigMap"): ("configmaps", True),
}

ObjectKey = tuple[str, str, str, str]

_EMPTY: tuple[Any, ...] = (False, "", [], {})
_EMPTY_TYPES = (bool, str, list, dict)


#: The cluster could not be read (kubeconfig, connection, authorisation): the shared client's error.
LiveError = ClusterError


def resource_path(api_version: str, kind: str, namespace: str = "", name: str = "") -> str:
    """REST path of an object (or of the collection when ``name`` is empty).

    ``("v1", "ConfigMap", "ns", "x")`` → ``/api/v1/namespaces/ns/configmaps/x``.
    """
    plural, namespaced = KIND_PLURALS[(api_version, kind)]
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    scope = f"/namespaces/{namespace}" if namespaced and namespace else ""
    return f"{root}{scope}/{plural}" + (f"/{name}" if name else "")


@dataclass
class LiveState:
    """Live objects: ``objects[key]`` for each generated key (None: absent); ``extra``: objects
    with our managed-by label that are not generated any more."""

    objects: dict[ObjectKey, Manifest | None] = field(default_factory=dict)
    extra: list[Manifest] = field(default_factory=list)


async def fetch_live(desired: list[Manifest], kubeconfig: str | None = None, context: str | None = None) -> LiveState:
    """Read the live counterparts of ``desired`` and our stray objects of the same kinds.

    Raises:
        LiveError: the kubeconfig cannot be loaded or the API server refuses or cannot be reached.
    """
    state = LiveState()
    wanted = {object_key(obj) for obj in desired}
    async with await open_client(kubeconfig, context=context) as api:
        for obj in desired:
            api_version, kind, namespace, name = object_key(obj)
            state.objects[(api_version, kind, namespace, name)] = await get_json(
                api, resource_path(api_version, kind, namespace, name)
            )
        kinds = sorted({(key[0], key[1]) for key in wanted})
        for api_version, kind in kinds:
            listing = await get_json(
                api,
                resource_path(api_version, kind),
                [("labelSelector", f"{MANAGED_BY_LABEL}={MANAGED_BY}")],
            )
            for item in (listing or {}).get("items") or []:
                item = {"apiVersion": api_version, "kind": kind, **item}
                if object_key(item) not in wanted:
                    state.extra.append(item)
    return state


def project(live: Any, desired: Any) -> Any:
    """``live`` reduced to the shape of ``desired``: map keys the generator does not write are
    dropped (recursively; lists element by element when lengths match), so server defaults and
    status are not reported as drift. A key the server left out because its value is empty
    (``false``, ``""``, ``[]``, ``{}``: Go's ``omitempty``) counts as that empty value."""
    if isinstance(live, Mapping) and isinstance(desired, Mapping):
        out = {}
        for key, wanted in desired.items():
            if key in live:
                out[key] = project(live[key], wanted)
            elif wanted in _EMPTY and type(wanted) in _EMPTY_TYPES:
                out[key] = wanted
        return out
    if isinstance(live, list) and isinstance(desired, list) and len(live) == len(desired):
        return [project(a, b) for a, b in zip(live, desired, strict=True)]
    return live


def align(live: Any, desired: Any) -> Any:
    """``live`` with each scalar that equals its generated counterpart by value (``'64'`` and
    ``64``, ``'1Ti'`` and ``1099511627776``) written as the generated one, so the unified diff shows
    only the values that differ."""
    if isinstance(live, Mapping) and isinstance(desired, Mapping):
        return {key: align(value, desired[key]) if key in desired else value for key, value in live.items()}
    if isinstance(live, list) and isinstance(desired, list) and len(live) == len(desired):
        return [align(a, b) for a, b in zip(live, desired, strict=True)]
    if not isinstance(live, Mapping | list) and canonical(live) == canonical(desired):
        return desired
    return live


def _label(key: ObjectKey) -> str:
    _, kind, namespace, name = key
    return f"{kind}/{namespace + '/' if namespace else ''}{name}"


@dataclass
class ObjectDiff:
    """One object's difference: ``action`` is ``create``, ``update`` or ``delete``; ``diff`` a
    unified diff of the YAML; ``recreate`` why it cannot be updated in place (None: it can)."""

    key: ObjectKey
    action: str
    diff: str
    recreate: str | None = None

    @property
    def label(self) -> str:
        return _label(self.key)


def _yaml_lines(obj: Any) -> list[str]:
    return dump_yaml([obj]).splitlines(keepends=True) if obj is not None else []


def diff_objects(desired: list[Manifest], live: LiveState) -> list[ObjectDiff]:
    """Every generated object that differs from the cluster, then every stray managed object.

    Pure: no I/O. Objects equal once projected (:func:`project`) and with quantities compared by
    value are left out; an empty list means the cluster matches.
    """
    out = []
    for obj in desired:
        key = object_key(obj)
        current = live.objects.get(key)
        if current is None:
            diff = "".join(
                difflib.unified_diff([], _yaml_lines(obj), fromfile="/dev/null", tofile=f"{_label(key)} (generated)")
            )
            out.append(ObjectDiff(key, "create", diff))
            continue
        shaped = project(current, obj)
        if canonical(shaped) == canonical(obj):
            continue
        diff = "".join(
            difflib.unified_diff(
                _yaml_lines(align(shaped, obj)),
                _yaml_lines(obj),
                fromfile=f"{_label(key)} (live)",
                tofile=f"{_label(key)} (generated)",
            )
        )
        out.append(ObjectDiff(key, "update", diff, needs_recreate(obj, current)))
    for stray in live.extra:
        key = object_key(stray)
        if key[1] == "Namespace":
            # Never propose deleting a namespace: it takes every workload in it along, and team
            # namespaces are simply not generated without --namespaces.
            continue
        metadata = stray.get("metadata") or {}
        summary_metadata: dict[str, Any] = {"name": metadata.get("name")}
        if key[2]:
            summary_metadata["namespace"] = key[2]
        summary = {"apiVersion": key[0], "kind": key[1], "metadata": summary_metadata}
        diff = "".join(
            difflib.unified_diff(_yaml_lines(summary), [], fromfile=f"{_label(key)} (live)", tofile="/dev/null")
        )
        out.append(ObjectDiff(key, "delete", diff))
    return out
