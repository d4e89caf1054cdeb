"""Kubeflow Trainer runtimes from files (``kgov mutate --runtime``, ``kgov review --runtime``).

The server keeps the cluster's ``ClusterTrainingRuntime`` and ``TrainingRuntime`` objects in
watched caches (:func:`webhook.kube.cache.runtime_caches`); offline, the same objects come from
manifest files, so a TrainJob is planned on the runtime it references either way (SPEC §4).
"""

from __future__ import annotations

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
        scope = "" if kind == CLUSTER_RUNTIME else (namespace if isinstance(namespace, str) else "*")
        self.objects[(str(kind), scope, name)] = obj

    def __call__(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.objects.get((kind, namespace, name)) or self.objects.get((kind, "*", name))


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
