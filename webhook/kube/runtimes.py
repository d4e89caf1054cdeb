"""Kubeflow Trainer runtimes from files (``kgov mutate --runtime``, ``kgov review --runtime``).

The server keeps the cluster's ``ClusterTrainingRuntime`` and ``TrainingRuntime`` objects in
watched caches (:func:`webhook.kube.cache.runtime_caches`); offline, the same objects come from
manifest files, so a TrainJob is planned on the runtime it references either way (SPEC §4).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from webhook.core.kueue.trainer import CLUSTER_RUNTIME, RUNTIME
from webhook.kube.files import InputError, load_manifests

__all__ = ["FileRuntimes", "load_runtimes"]

_API_VERSION = "trainer.kubeflow.org/v1alpha1"


class FileRuntimes:
    """Runtimes read from files, looked up as ``(kind, namespace, name)`` (namespace "" for a
    ``ClusterTrainingRuntime``). A ``TrainingRuntime`` without ``metadata.namespace`` is taken as in
    the namespace of the TrainJob that references it."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Mapping[str, Any]] = {}

    def add(self, obj: Mapping[str, Any], where: str) -> None:
        """Keep ``obj`` (a runtime, or a ``kind: …List`` of them).

        Raises:
            InputError: a document that is no training runtime of ``trainer.kubeflow.org/v1alpha1``,
                or one without ``metadata.name``.
        """
        items = obj.get("items")
        if isinstance(items, list) and str(obj.get("kind", "")).endswith("List"):
            for index, item in enumerate(items):
                self.add(item if isinstance(item, Mapping) else {}, f"{where} item {index + 1}")
            return
        kind = obj.get("kind")
        if obj.get("apiVersion") != _API_VERSION or kind not in (CLUSTER_RUNTIME, RUNTIME):
            raise InputError(
                f"{where}: {obj.get('apiVersion')} {kind} is no training runtime "
                f"({_API_VERSION} {CLUSTER_RUNTIME} or {RUNTIME})"
            )
        metadata = obj.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        name, namespace = metadata.get("name"), metadata.get("namespace")
        if not isinstance(name, str) or not name:
            raise InputError(f"{where}: {kind} without metadata.name")
        problem = _shape_problem(obj)
        if problem:
            raise InputError(f"{where}: {kind} {name!r}: {problem}")
        scope = "" if kind == CLUSTER_RUNTIME else (namespace if isinstance(namespace, str) else "*")
        self.objects[(str(kind), scope, name)] = obj

    def __call__(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.objects.get((kind, namespace, name)) or self.objects.get((kind, "*", name))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**31 - 1


def _shape_problem(obj: Mapping[str, Any]) -> str | None:
    """The first value of a runtime that its CRD's schema refuses and that the TrainJob's podsets
    are built from (the server reads runtimes the API server has checked; files are read here):
    ``spec``, ``spec.template``, ``spec.template.spec`` and ``spec.mlPolicy`` not objects,
    ``replicatedJobs`` not a list of objects each with a string ``name``, an object ``template``
    and a ``replicas`` and ``mlPolicy.numNodes`` that are integers from 0 to 2147483647 (int32)."""
    node: Any = obj
    path = ""
    for key in ("spec", "template", "spec"):
        node = node.get(key)
        path = f"{path}.{key}" if path else key
        if node is None:
            return None
        if not isinstance(node, Mapping):
            return f"{path} must be an object"
    policy = obj["spec"].get("mlPolicy")
    if policy is not None and not isinstance(policy, Mapping):
        return "spec.mlPolicy must be an object"
    if isinstance(policy, Mapping) and policy.get("numNodes") is not None and not _count(policy["numNodes"]):
        return f"spec.mlPolicy.numNodes must be an integer from 0 to 2147483647, got {json.dumps(policy['numNodes'])}"
    jobs = node.get("replicatedJobs")
    if jobs is not None and not isinstance(jobs, list):
        return f"{path}.replicatedJobs must be an array"
    for index, job in enumerate(jobs or []):
        at = f"{path}.replicatedJobs[{index}]"
        if not isinstance(job, Mapping):
            return f"{at} must be an object"
        if not isinstance(job.get("name"), str) or not job["name"]:
            return f"{at}.name must be a non-empty string"
        if job.get("replicas") is not None and not _count(job["replicas"]):
            return f"{at}.replicas must be an integer from 0 to 2147483647, got {json.dumps(job['replicas'])}"
        if job.get("template") is not None and not isinstance(job["template"], Mapping):
            return f"{at}.template must be an object"
    return None


def load_runtimes(paths: Iterable[Path]) -> FileRuntimes:
    """The runtimes of ``paths`` (each YAML or JSON, multi-document and ``kind: List`` allowed).

    Raises:
        InputError: an unreadable file, invalid YAML, or a document that is no training runtime.
    """
    runtimes = FileRuntimes()
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
        for index, document in enumerate(load_manifests(text, str(path)), start=1):
            runtimes.add(document if isinstance(document, Mapping) else {}, f"{path}: document {index}")
    return runtimes
