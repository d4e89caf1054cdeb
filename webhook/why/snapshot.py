"""One read of the cluster for ``kgov why`` and ``kgov status``: every list once, joined in memory.

A :class:`Snapshot` holds the objects as the API returns them (plain dicts, ``kubectl get -o json``
items): Nodes, bound Pods, Kueue Workloads, ClusterQueues, LocalQueues, ResourceFlavors,
Topologies, WorkloadPriorityClasses, Cohorts (all ``kueue.x-k8s.io/v1beta2``), the webhook's
``kgov-policy`` ConfigMap when it can be read, and, for ``kgov why``, the one object asked about
with, for a kind whose Workloads belong to what it owns (:data:`DESCENDANT_LISTS`), the
ReplicaSets, StatefulSets, Jobs or Pods of its namespace.
:func:`read_snapshot` lists each kind with one request (SPEC §5: no per-object call storm);
:meth:`Snapshot.from_dump` reads the same lists from a recorded JSON document.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from webhook.core.kueue.kinds import KINDS, WorkloadKind, find_kind, kind_of_group
from webhook.core.kueue.wellformed import describe
from webhook.core.platform.fields import dns1123_subdomain_error
from webhook.core.platform.yamlload import DuplicateKeyError, locate_duplicate, no_duplicate_pairs
from webhook.kube.client import ClusterError, get_json, items_of, open_client
from webhook.why.shapes import ShapeError, check_snapshot

__all__ = [
    "KUEUE_API",
    "VISIBILITY_API",
    "ClusterError",
    "ShapeError",
    "Snapshot",
    "find_workload_kind",
    "owner_of",
    "read_snapshot",
]

KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
#: Kueue's on-demand visibility API (feature gate ``VisibilityOnDemand``, an aggregated API server).
VISIBILITY_API = "/apis/visibility.kueue.x-k8s.io/v1beta2"
POLICY_CONFIGMAP = ("kueue-governor-system", "kgov-policy")

#: Snapshot field → (API path, query) of its one list request.
_LISTS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "nodes": ("/api/v1/nodes", []),
    "pods": ("/api/v1/pods", [("fieldSelector", "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed")]),
    "workloads": (f"{KUEUE_API}/workloads", []),
    "clusterqueues": (f"{KUEUE_API}/clusterqueues", []),
    "localqueues": (f"{KUEUE_API}/localqueues", []),
    "resourceflavors": (f"{KUEUE_API}/resourceflavors", []),
    "topologies": (f"{KUEUE_API}/topologies", []),
    "workloadpriorityclasses": (f"{KUEUE_API}/workloadpriorityclasses", []),
    "cohorts": (f"{KUEUE_API}/cohorts", []),
}


#: Kinds whose Workloads Kueue makes for objects they own, and the namespaced lists (field of
#: :attr:`Snapshot.descendants` sources) that lead from the kind to those Workloads through
#: ``ownerReferences``: a Deployment's pods (via ReplicaSets) each get one (pod integration), a
#: CronJob's Jobs each get one, a StatefulSet's pods form a pod group (Kueue v0.19.2 also names
#: the StatefulSet as an owner), a LeaderWorkerSet's groups (owned by it, their pods by its
#: StatefulSets).
DESCENDANT_LISTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "Deployment": (("/apis/apps/v1", "replicasets", "ReplicaSet"), ("/api/v1", "pods", "Pod")),
    "CronJob": (("/apis/batch/v1", "jobs", "Job"),),
    "StatefulSet": (("/api/v1", "pods", "Pod"),),
    "LeaderWorkerSet": (("/apis/apps/v1", "statefulsets", "StatefulSet"), ("/api/v1", "pods", "Pod")),
}
#: Keys of a recorded dump whose objects may stand between an object and its Workloads.
_DESCENDANT_KEYS = ("replicasets", "statefulsets", "jobs", "pods")
#: Keys of a recorded dump that hold workload objects of any kind.
_OBJECT_KEYS = ("objects", "jobs", "deployments", "statefulsets", "cronjobs", "leaderworkersets")
#: Every key :meth:`Snapshot.from_dump` reads (each a list of objects).
_DUMP_KEYS = frozenset((*_LISTS, *_DESCENDANT_KEYS, *_OBJECT_KEYS, "namespaces", "policy"))


def _name(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    return str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""


def _namespace(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    return str(metadata.get("namespace", "")) if isinstance(metadata, Mapping) else ""


@dataclass
class Snapshot:
    """The cluster's objects as plain dicts; ``target`` is the object ``kgov why`` asks about.

    ``pending_positions``: Kueue's visibility API answer for the target's LocalQueue
    (workload name → ``positionInLocalQueue``/``positionInClusterQueue``), None when not served.
    ``notes``: what could not be read and what that leaves out.
    """

    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    workloads: list[dict[str, Any]] = field(default_factory=list)
    clusterqueues: list[dict[str, Any]] = field(default_factory=list)
    localqueues: list[dict[str, Any]] = field(default_factory=list)
    resourceflavors: list[dict[str, Any]] = field(default_factory=list)
    topologies: list[dict[str, Any]] = field(default_factory=list)
    workloadpriorityclasses: list[dict[str, Any]] = field(default_factory=list)
    cohorts: list[dict[str, Any]] = field(default_factory=list)
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    #: Workload objects of any kind in a recorded dump (keys ``objects``, ``jobs``, ``deployments``,
    #: ``statefulsets``, ``cronjobs``, ``leaderworkersets``).
    objects: list[dict[str, Any]] = field(default_factory=list)
    #: Objects that may stand between ``target`` and its Workloads (ReplicaSets, StatefulSets,
    #: Jobs, Pods of any phase, bound or not): see :data:`DESCENDANT_LISTS`.
    descendants: list[dict[str, Any]] = field(default_factory=list)
    policy: dict[str, Any] | None = None
    target: dict[str, Any] | None = None
    pending_positions: dict[str, dict[str, int]] | None = None
    notes: list[str] = field(default_factory=list)
    #: Free capacity per node with every Workload counted, computed once (by :mod:`webhook.why.explain`).
    free: dict[str, dict[str, Decimal]] | None = field(default=None, repr=False)
    #: Memos of :mod:`webhook.why.explain` (parsed nodes, Workload states, placements on ``free``).
    memo: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dump(cls, data: Mapping[str, Any]) -> Snapshot:
        """From a recorded document: ``{"nodes": [...], "pods": [...], ..., "policy": [cm]}``
        (each key a list of objects, as ``kubectl get -o json`` items; missing keys are empty).
        Pods that are not bound or have terminated are dropped, as the live list's field
        selector does.

        Raises:
            ValueError: ``data`` is not a JSON object, or one of its keys holds something other
                than a list of objects (``nodes must be a list of objects, got string "x"``,
                ``pods[2] must be an object, got number 5``): nothing is read as an empty list.
            ShapeError: an object has a value of the wrong type where the report reads one
                (:func:`webhook.why.shapes.check_snapshot`: ``workloads[2] (Workload ns/w):
                status must be an object, got string "x"``).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"the document must be an object of lists, got {describe(data)}")
        for key, value in data.items():
            if key not in _DUMP_KEYS or value is None:
                continue
            if not isinstance(value, list):
                raise ValueError(f"{key} must be a list of objects, got {describe(value)}")
            for index, item in enumerate(value):
                if not isinstance(item, dict):
                    raise ValueError(f"{key}[{index}] must be an object, got {describe(item)}")
        check_snapshot({**data, "policy": [item for item in data.get("policy") or [] if item]})
        snapshot = cls()
        snapshot.descendants = [item for key in _DESCENDANT_KEYS for item in data.get(key) or []]
        for key in _LISTS:
            setattr(snapshot, key, list(data.get(key) or []))
        snapshot.pods = [
            pod
            for pod in snapshot.pods
            if (pod.get("spec") or {}).get("nodeName")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        snapshot.namespaces = list(data.get("namespaces") or [])
        snapshot.objects = [item for key in _OBJECT_KEYS for item in data.get(key) or []]
        policies = [item for item in data.get("policy") or [] if item]
        snapshot.policy = policies[0] if policies else None
        return snapshot

    @classmethod
    def from_file(cls, path: str | Path) -> Snapshot:
        """The snapshot in the JSON file at ``path``.

        Raises:
            OSError: the file cannot be read. UnicodeDecodeError, ValueError: it is no JSON.
            DuplicateKeyError: an object defines a key twice (its line and path named).
            ShapeError: a field is not of the type read (see :meth:`from_dump`).
        """
        text = Path(path).read_text(encoding="utf-8")
        try:
            data = json.loads(text, object_pairs_hook=no_duplicate_pairs)
        except DuplicateKeyError as exc:
            raise locate_duplicate(text, exc) from None
        return cls.from_dump(data)

    # Joins, all in memory.
    def find_object(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A recorded workload object by kind, namespace and name (a Pod among the recorded pods)."""
        return next(
            (
                o
                for o in (*self.objects, *self.descendants)
                if o.get("kind") == kind and _namespace(o) == namespace and _name(o) == name
            ),
            None,
        )

    def namespace_labels(self, name: str) -> dict[str, str] | None:
        found = next((n for n in self.namespaces if _name(n) == name), None)
        return dict((found.get("metadata") or {}).get("labels") or {}) if found else None

    def cluster_queue(self, name: str) -> dict[str, Any] | None:
        return next((q for q in self.clusterqueues if _name(q) == name), None)

    def local_queue(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next((q for q in self.localqueues if _name(q) == name and _namespace(q) == namespace), None)

    def flavor(self, name: str) -> dict[str, Any] | None:
        return next((f for f in self.resourceflavors if _name(f) == name), None)

    def topology(self, name: str) -> dict[str, Any] | None:
        return next((t for t in self.topologies if _name(t) == name), None)

    def workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next((w for w in self.workloads if _name(w) == name and _namespace(w) == namespace), None)

    def workloads_of(self, owner: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Workloads whose ownerReferences name ``owner`` (by uid), in its namespace."""
        uid = (owner.get("metadata") or {}).get("uid")
        namespace = _namespace(owner)
        return [
            w
            for w in self.workloads
            if _namespace(w) == namespace
            and any(ref.get("uid") == uid for ref in (w.get("metadata") or {}).get("ownerReferences") or [])
        ]

    def workloads_under(self, owner: Mapping[str, Any]) -> list[tuple[dict[str, Any], str]]:
        """Workloads of ``owner`` or of anything it owns, transitively through the
        ``ownerReferences`` of :attr:`descendants` (by uid, in its namespace), each with the
        object that owns it directly (``Kind/name``); in :attr:`workloads` order."""
        namespace = _namespace(owner)
        root = str((owner.get("metadata") or {}).get("uid") or "")
        names = {root: f"{owner.get('kind')}/{_name(owner)}"}
        frontier = [root]
        children: dict[str, list[Mapping[str, Any]]] = {}
        for obj in self.descendants:
            if _namespace(obj) != namespace:
                continue
            for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
                children.setdefault(str(ref.get("uid")), []).append(obj)
        while frontier:
            uid = frontier.pop()
            for child in children.get(uid, []):
                child_uid = str((child.get("metadata") or {}).get("uid") or "")
                if child_uid and child_uid not in names:
                    names[child_uid] = f"{child.get('kind')}/{_name(child)}"
                    frontier.append(child_uid)
        out: list[tuple[dict[str, Any], str]] = []
        for workload in self.workloads:
            if _namespace(workload) != namespace:
                continue
            refs = [str(ref.get("uid")) for ref in (workload.get("metadata") or {}).get("ownerReferences") or []]
            owners = [names[uid] for uid in refs if uid in names]
            if owners:
                # The object asked about, when it is an owner, else the first owner found.
                out.append((workload, names[root] if root in refs else owners[0]))
        return out

    def queue_of(self, workload: Mapping[str, Any]) -> str | None:
        """The ClusterQueue of a workload: its admission's, else its LocalQueue's."""
        admission = (workload.get("status") or {}).get("admission") or {}
        if admission.get("clusterQueue"):
            return str(admission["clusterQueue"])
        local = self.local_queue(_namespace(workload), str((workload.get("spec") or {}).get("queueName") or ""))
        if local is None:
            return None
        return str((local.get("spec") or {}).get("clusterQueue") or "") or None


def find_workload_kind(name: str) -> WorkloadKind | None:
    """The kinds-table row for ``job``, ``jobs``, ``Job``, ``pytorchjob.kubeflow.org``…: the kind
    (any case), its resource (plural) or the singular, optionally followed by ``.<group>``."""
    kind, _, group = name.partition(".")
    wanted = kind.lower()
    for row in KINDS:
        if group and row.group != group:
            continue
        if wanted in (row.kind.lower(), row.resource, row.resource.removesuffix("s")):
            return row
    return None


def owner_of(workload: Mapping[str, Any]) -> tuple[dict[str, Any] | None, WorkloadKind | None]:
    """The object a Workload was made for: its controller ownerReference (else its first one) and
    that owner's kinds-table row (None: no owner, or a kind the table does not have)."""
    refs = [r for r in (workload.get("metadata") or {}).get("ownerReferences") or [] if isinstance(r, dict)]
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if ref is None:
        return None, None
    api_version, kind = str(ref.get("apiVersion", "")), str(ref.get("kind", ""))
    return ref, find_kind(api_version, kind) or kind_of_group(api_version, kind)


def object_path(row: WorkloadKind, namespace: str, name: str) -> str:
    """The API path of one object of a kinds-table row (its newest version)."""
    prefix = f"/apis/{row.group}/{row.versions[-1]}" if row.group else f"/api/{row.versions[-1]}"
    return f"{prefix}/namespaces/{namespace}/{row.resource}/{name}"


async def _visibility(api: Any, namespace: str, local_queue: str) -> dict[str, dict[str, int]] | None:
    path = f"{VISIBILITY_API}/namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads"
    try:
        answer = await get_json(api, path)
    except ClusterError:
        return None  # not served (503 from an unavailable APIService, 403…): positions are estimated
    if answer is None:
        return None
    out: dict[str, dict[str, int]] = {}
    for item in items_of(answer):
        positions = {key: item.get(key, 0) for key in ("positionInLocalQueue", "positionInClusterQueue")}
        if all(type(value) is int for value in positions.values()):
            out[_name(item)] = positions  # an item of another shape: its position is estimated
    return out


async def read_snapshot(
    kubeconfig: str | Path | None,
    target: tuple[WorkloadKind, str, str] | None = None,
    workload_name: tuple[str, str] | None = None,
    policy_configmap: tuple[str, str] = POLICY_CONFIGMAP,
) -> Snapshot:
    """List every kind once; with ``target`` (row, namespace, name) also GET that object, and
    ask Kueue's visibility API for its LocalQueue's pending workloads (``workload_name``:
    namespace and name of a Workload asked about directly; its owner, when of a kind of the
    table, is read into ``objects``).

    Raises:
        ClusterError: unreadable kubeconfig, unreachable or refusing API server, the target or a
            Kueue kind missing (Kueue not installed), or an object with a value of the wrong type
            where the report reads one (checked as a recorded snapshot's are).
    """
    snapshot = Snapshot()
    async with await open_client(kubeconfig) as api:
        for key, (path, query) in _LISTS.items():
            listing = await get_json(api, path, query)
            if listing is None and key != "cohorts":
                raise ClusterError(f"GET {path}: not found (is Kueue v0.19 installed, serving kueue.x-k8s.io/v1beta2?)")
            setattr(snapshot, key, items_of(listing))
        _check_read(snapshot, tuple(_LISTS))
        namespace, name = policy_configmap
        try:
            snapshot.policy = await get_json(api, f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        except ClusterError as exc:
            snapshot.notes.append(f"the webhook's policy ConfigMap {namespace}/{name} could not be read ({exc})")
        queue: tuple[str, str] | None = None
        if target is not None:
            row, namespace, name = target
            found_namespace = await get_json(api, f"/api/v1/namespaces/{namespace}")
            snapshot.namespaces = [found_namespace] if found_namespace else []
            snapshot.target = await get_json(api, object_path(row, namespace, name))
            if snapshot.target is None:
                raise ClusterError(f"{row.kind} {namespace}/{name} not found")
            for group_path, resource, kind in DESCENDANT_LISTS.get(row.kind, ()):
                listing = await get_json(api, f"{group_path}/namespaces/{namespace}/{resource}")
                for item in items_of(listing):
                    item.setdefault("kind", kind)  # a list's items carry no kind of their own
                    snapshot.descendants.append(item)
            _check_read(snapshot, ("namespaces", "target", "descendants"))
            owned = [w for w, _ in snapshot.workloads_under(snapshot.target)]
            if owned:
                queue = (namespace, str((owned[0].get("spec") or {}).get("queueName") or ""))
        elif workload_name is not None:
            found = snapshot.workload(*workload_name)
            if found is None:
                raise ClusterError(f"Workload {workload_name[0]}/{workload_name[1]} not found")
            queue = (workload_name[0], str((found.get("spec") or {}).get("queueName") or ""))
            ref, owner_row = owner_of(found)
            owner = str((ref or {}).get("name") or "")
            if owner_row is not None and not dns1123_subdomain_error(owner):
                # The object the Workload was made for: what the policy decided is told for it.
                owner_namespace = await get_json(api, f"/api/v1/namespaces/{workload_name[0]}")
                snapshot.namespaces = [owner_namespace] if owner_namespace else []
                owner_object = await get_json(api, object_path(owner_row, workload_name[0], owner))
                if owner_object is not None:
                    snapshot.objects.append({"kind": owner_row.kind, **owner_object})
        _check_read(snapshot, ("policy", "namespaces", "objects"))
        if queue is not None and queue[1]:
            snapshot.pending_positions = await _visibility(api, *queue)
    return snapshot


def _check_read(snapshot: Snapshot, keys: tuple[str, ...]) -> None:
    """The shapes of the objects of one read of the cluster under ``keys`` (fields of
    :class:`Snapshot`; ``policy`` and ``target`` as one-object lists), checked as a recorded
    snapshot's are (:func:`webhook.why.shapes.check_snapshot`).

    Raises:
        ClusterError: an object the API server returned has a value of the wrong type.
    """
    lists: dict[str, list[dict[str, Any]]] = {}
    for key in keys:
        value = getattr(snapshot, key)
        lists[key] = value if isinstance(value, list) else [value] if value else []
    try:
        check_snapshot(lists)
    except ShapeError as exc:
        raise ClusterError(f"the API server returned an object kgov cannot read: {exc}") from None
