"""Generated objects against the live cluster: fetch with kubernetes-asyncio, compare, explain.

:func:`fetch_live` reads, for every generated object, the object of the same kind, namespace and
name (``None`` when absent) and lists the objects labelled ``app.kubernetes.io/managed-by:
kueue-governor`` (and, for a named instance, ``app.kubernetes.io/instance: <instance>``) that are
no longer generated. :func:`diff_objects` is pure: it compares only the fields the generator
writes (a live object's status, server-set metadata and fields defaulted by Kueue are not drift),
quantities by value (``64`` and ``"64"``, ``1024Mi`` and ``1Gi`` are no change, and are not shown
as one next to a real change), and flags changes Kueue refuses in place.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.kueue.versions import KueueRelease
from webhook.generate.manifests import INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL, Manifest, object_key
from webhook.generate.recreate import QUANTITY_FIELDS, equivalent, needs_recreate, same_quantity
from webhook.generate.render import dump_yaml
from webhook.kube.client import get_json, items_of, open_client

__all__ = [
    "KIND_PLURALS",
    "LiveState",
    "ObjectDiff",
    "applied_fields",
    "diff_objects",
    "fetch_live",
    "owned_selector",
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


def owned_selector(instance: str | None = None) -> str:
    """The label selector of the objects a platform owns: ours (``managed-by``) and of its instance.

    ``None`` → ``app.kubernetes.io/managed-by=kueue-governor,!app.kubernetes.io/instance`` (objects
    of a named instance belong to that instance, never to an unnamed platform);
    ``"prod"`` → ``app.kubernetes.io/managed-by=kueue-governor,app.kubernetes.io/instance=prod``.
    """
    owned = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    return f"{owned},{INSTANCE_LABEL}={instance}" if instance is not None else f"{owned},!{INSTANCE_LABEL}"


async def fetch_live(
    desired: list[Manifest], kubeconfig: str | None = None, context: str | None = None, instance: str | None = None
) -> LiveState:
    """Read the live counterparts of ``desired`` and the stray objects of the same kinds that the
    platform owns (:func:`owned_selector` of ``instance``) but no longer generates.

    Raises:
        ClusterError: the kubeconfig cannot be loaded or the API server refuses or cannot be reached.
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
                [("labelSelector", owned_selector(instance))],
            )
            for item in items_of(listing):
                item = {"apiVersion": api_version, "kind": kind, **item}
                if object_key(item) not in wanted:
                    state.extra.append(item)
    return state


def applied_fields(live: Mapping[str, Any], field_manager: str | None) -> dict[str, Any] | None:
    """The fields ``field_manager`` owns in ``live`` through server-side apply: the union of the
    ``fieldsV1`` of its ``operation: Apply`` entries of ``metadata.managedFields`` (subresources
    left out), e.g. ``{"f:spec": {"f:nodeLabels": {}}}``. None when it has none (the object was
    applied otherwise, or by another manager)."""
    if field_manager is None:
        return None
    metadata = live.get("metadata") or {}
    entries = [
        entry
        for entry in metadata.get("managedFields") or []
        if isinstance(entry, Mapping)
        and entry.get("manager") == field_manager
        and entry.get("operation") == "Apply"
        and not entry.get("subresource")
    ]
    if not entries:
        return None
    merged: dict[str, Any] = {}

    def merge(into: dict[str, Any], fields: Any) -> None:
        for key, value in (fields or {}).items() if isinstance(fields, Mapping) else ():
            merge(into.setdefault(key, {}), value)

    for entry in entries:
        merge(merged, entry.get("fieldsV1"))
    return merged


def project(live: Any, desired: Any, field: str = "", owned: Mapping[str, Any] | None = None) -> Any:
    """``live`` reduced to the shape of ``desired``: map keys the generator does not write are
    dropped (recursively; lists element by element when lengths match), so server defaults and
    status are not reported as drift. A key the server left out because its value is empty
    (``false``, ``""``, ``[]``, ``{}``: Go's ``omitempty``) counts as that empty value. A quantity
    (:data:`~webhook.generate.recreate.QUANTITY_FIELDS`) equal to the desired one in another form
    (``"64"`` for ``64``, ``"1Gi"`` for ``"1024Mi"``) takes the desired form, so a diff shows only
    real changes. ``field`` is the map key the values are found under.

    ``owned`` (:func:`applied_fields` at this level; ``{}``: owned as a whole, e.g. an atomic list
    or map) keeps the live keys the applier owns that ``desired`` no longer has: applying again
    removes them, so the diff shows them removed (a dropped ``borrowingLimit`` or node label)."""
    whole = owned is not None and not owned
    if isinstance(live, Mapping) and isinstance(desired, Mapping):
        out = {}
        for key, wanted in desired.items():
            child = {} if whole else (owned.get(f"f:{key}") if owned is not None else None)
            if key in live:
                out[key] = project(live[key], wanted, str(key), child)
            elif wanted in _EMPTY and type(wanted) in _EMPTY_TYPES:
                out[key] = wanted
        if owned is not None:
            removed = [key for key in live if key not in desired and (whole or f"f:{key}" in owned)]
            out.update({key: live[key] for key in removed})
        return out
    if isinstance(live, list) and isinstance(desired, list) and len(live) == len(desired):
        child = {} if whole else None
        return [project(a, b, field, child) for a, b in zip(live, desired, strict=True)]
    if field in QUANTITY_FIELDS and same_quantity(live, desired):
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


def diff_objects(
    desired: list[Manifest], live: LiveState, field_manager: str | None = None, release: KueueRelease | None = None
) -> list[ObjectDiff]:
    """Every generated object that differs from the cluster, then every stray managed object; an
    update that the cluster's Kueue ``release`` (None: the default) refuses in place says why
    (:func:`webhook.generate.recreate.needs_recreate`).

    Pure: no I/O. Objects equal once projected (:func:`project`, quantities compared by value)
    are left out; an empty list means the cluster matches. With ``field_manager`` (the manager
    that server-side applies the generated objects), fields it applied and the platform no longer
    generates show as removed; objects it did not apply are compared on the generated fields only.
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
        shaped = project(current, obj, owned=applied_fields(current, field_manager))
        if equivalent(shaped, obj):
            continue
        diff = "".join(
            difflib.unified_diff(
                _yaml_lines(shaped),
                _yaml_lines(obj),
                fromfile=f"{_label(key)} (live)",
                tofile=f"{_label(key)} (generated)",
            )
        )
        out.append(ObjectDiff(key, "update", diff, needs_recreate(obj, current, release)))
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
