"""The shape of every value ``kgov why`` and ``kgov status`` read from a snapshot, checked once.

:func:`check_snapshot` validates each object of a :class:`~webhook.why.snapshot.Snapshot` (a
recorded file or one read of the cluster) against a model of its kind, so that the code reading
them afterwards may trust the types of what it finds: a map is a map, a list a list, a count an
integer, a quantity a Kubernetes quantity. Every field is optional and null counts as absent
(Kubernetes' ``omitempty`` pointers and lists), except the ``metadata.name`` of the objects
joined by name (every kind but the workload objects of ``objects``, ``jobs``…). The first value
of the wrong type is reported with the object and its JSON path:
``workloads[2] (Workload ns/job-a-1b2c3): status must be an object, got string "x"``.

The models: :mod:`webhook.why.kube_shapes` (Kubernetes' kinds and fields, with their sources)
and :mod:`webhook.why.kueue_shapes` (Kueue v0.19.2's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from webhook.core.kueue.wellformed import Problem
from webhook.core.objects.paths import Key
from webhook.why.kube_shapes import AnyObject, ConfigMap, Node, Object, Pod
from webhook.why.kueue_shapes import ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Topology, Workload

__all__ = ["MODELS", "ShapeError", "check_objects", "check_snapshot"]


class ShapeError(ValueError):
    """A snapshot object with a value of the wrong type; the message names the object and path."""


_ANY: tuple[type[AnyObject], str | None] = (AnyObject, None)
#: Snapshot key (of a recorded document, or a :class:`~webhook.why.snapshot.Snapshot` field) →
#: (model, kind named in messages; None: the object's own ``kind``).
MODELS: dict[str, tuple[type[AnyObject], str | None]] = {
    "nodes": (Node, "Node"),
    "pods": (Pod, "Pod"),
    "workloads": (Workload, "Workload"),
    "clusterqueues": (ClusterQueue, "ClusterQueue"),
    "localqueues": (LocalQueue, "LocalQueue"),
    "resourceflavors": (ResourceFlavor, "ResourceFlavor"),
    "topologies": (Topology, "Topology"),
    "workloadpriorityclasses": (Object, "WorkloadPriorityClass"),
    "cohorts": (Cohort, "Cohort"),
    "namespaces": (Object, "Namespace"),
    "policy": (ConfigMap, "ConfigMap"),
    **dict.fromkeys(("objects", "jobs", "deployments", "statefulsets", "cronjobs", "leaderworkersets"), _ANY),
    **dict.fromkeys(("replicasets", "descendants", "target"), _ANY),
}

#: Pydantic error types → what the value must be (a phrase with its article, as :class:`Problem`'s).
_EXPECTED = {
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "bool_type": "a boolean",
}


def _problem(error: Mapping[str, Any]) -> Problem:
    path: tuple[Key, ...] = tuple(error["loc"])
    if error["type"] == "missing":
        return Problem(path, None, "every Kubernetes object has one", missing=True)
    expected = (error.get("ctx") or {}).get("expected") or _EXPECTED.get(error["type"]) or error["msg"]
    return Problem(path, error["input"], str(expected))


def _label(key: str, index: int, obj: Mapping[str, Any], kind: str | None) -> str:
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name, namespace = metadata.get("name"), metadata.get("namespace")
    kind = kind or (obj.get("kind") if isinstance(obj.get("kind"), str) else None)
    if not isinstance(name, str) or not name or not kind:
        return f"{key}[{index}]"
    return f"{key}[{index}] ({kind} {f'{namespace}/' if isinstance(namespace, str) and namespace else ''}{name})"


def check_objects(key: str, objects: Iterable[Mapping[str, Any]], model: type[AnyObject], kind: str | None) -> None:
    """Validate each object of one snapshot list against ``model``.

    Raises:
        ShapeError: the first object with a value of the wrong type (see the module docstring).
    """
    validate: Callable[[Any], Any] = model.model_validate
    for index, obj in enumerate(objects):
        try:
            validate(obj)
        except ValidationError as exc:
            problem = _problem(exc.errors(include_url=False)[0])
            raise ShapeError(f"{_label(key, index, obj, kind)}: {problem.message()}") from None


def check_snapshot(lists: Mapping[str, Iterable[Mapping[str, Any]] | None]) -> None:
    """Validate a snapshot's lists (key of :data:`MODELS` → objects; other keys are not read).

    Raises:
        ShapeError: the first value of the wrong type, with its object and path.
    """
    for key, objects in lists.items():
        if key in MODELS and objects:
            check_objects(key, objects, *MODELS[key])
