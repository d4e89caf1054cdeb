"""What Kueue adds to a podset's pod beyond its template: containers a controller injects.

Some controllers add containers to a pod that its template does not show, and Kueue counts them
in the podset it builds, so the quota a workload takes is the one its pods use. Each such change
is a :class:`PodChange` row of data on a kind's :class:`~webhook.core.kueue.kind_model.PodSetRule`
(``changes``); :func:`kueue_pod_spec` applies the rows that hold for an object to the podset's
pod spec before :mod:`webhook.core.kueue.resources` sizes it, and :mod:`webhook.core.kueue.view` keeps the
result as the podset's ``spec`` (Kueue's ``Workload.spec.podSets[].template.spec``).

The rows of the Ray head (:func:`ray_head_changes`), from Kueue v0.19.2
``pkg/controller/jobs/raycluster/common.go`` ``BuildPodSets`` and ``pkg/controller/jobs/rayjob/
rayjob_controller.go`` ``addSidecarSubmitterToHeadPodSet``, with KubeRay v1.6.2 (the release Kueue
pins) for the conditions (``utils.IsGCSFaultToleranceEnabled``):

- GCS fault tolerance (annotation ``ray.io/ft-enabled`` equal to ``true`` in any case on the
  object, or ``gcsFaultToleranceOptions`` set): the head's first container's requests are raised
  to at least 200m CPU and 256Mi memory (KubeRay's Redis cleanup Job; ``MergeResourceListKeepMax``
  of its requests, its limits untouched);
- in-tree autoscaling (``enableInTreeAutoscaling: true``): a container ``autoscaler`` with
  ``autoscalerOptions.resources`` when set, else requests and limits of 500m CPU and 512Mi;
- a RayJob in ``SidecarMode``: a container ``ray-job-submitter`` with requests 500m CPU and 200Mi,
  limits 1 CPU and 1Gi (KubeRay's defaults, which it uses whatever ``submitterPodTemplate`` says).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from webhook.core.kueue.wellformed import Problems, a_map, quantity
from webhook.core.objects.paths import Key, PathPattern, lookup
from webhook.core.objects.quantity import format_quantity, parse_quantity

__all__ = ["AddContainer", "PodChange", "RaiseRequests", "When", "kueue_pod_spec", "ray_head_changes", "unbuildable"]

ResourceList = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class When:
    """A condition on the object: the value at ``path`` (from the object root) ``is`` ``value``
    (``"true"``: the JSON boolean true; ``"set"``: any value but null; ``"equals"``: equal to
    ``value``; ``"text-true"``: a string that is ``true`` in any case, as Go's
    ``strings.ToLower(v) == "true"``)."""

    path: PathPattern
    test: Literal["true", "set", "equals", "text-true"]
    value: Any = None

    def holds(self, obj: Mapping[str, Any]) -> bool:
        """Whether the condition holds for ``obj``."""
        found = lookup(obj, self.path)
        if self.test == "true":
            return found is True
        if self.test == "set":
            return found is not None
        if self.test == "equals":
            return bool(found == self.value)
        return isinstance(found, str) and found.lower() == "true"


@dataclass(frozen=True)
class AddContainer:
    """When any of ``when`` holds, a container ``name`` is appended to the pod's ``containers``:
    its resources are the map at ``resources_at`` (from the object root) when that is set, else
    ``requests`` and ``limits`` (resource name, quantity)."""

    name: str
    when: tuple[When, ...]
    requests: ResourceList
    limits: ResourceList = ()
    resources_at: PathPattern | None = None


@dataclass(frozen=True)
class RaiseRequests:
    """When any of ``when`` holds, the first container's requests are raised to at least
    ``requests`` (each resource the larger of the two; limits untouched)."""

    when: tuple[When, ...]
    requests: ResourceList


PodChange = AddContainer | RaiseRequests


def _quantities(value: Any, at: tuple[Key, ...], problems: Problems, whole: bool) -> dict[str, str]:
    """A resource list read at its own path (problems there), rewritten as well-formed strings."""
    out: dict[str, str] = {}
    for name, amount in a_map(value, at, problems).items():
        parsed = quantity(amount, (*at, name), problems, whole)
        if parsed is not None:
            out[str(name)] = format_quantity(parsed)
    return out


def _resources(change: AddContainer, obj: Mapping[str, Any], problems: Problems, whole: bool) -> dict[str, Any]:
    given = lookup(obj, change.resources_at) if change.resources_at is not None else None
    if given is None:
        return {"requests": dict(change.requests), "limits": dict(change.limits)}
    at = change.resources_at or ()
    resources = a_map(given, at, problems)
    return {
        key: _quantities(resources.get(key), (*at, key), problems, whole)
        for key in ("requests", "limits")
        if resources.get(key) is not None
    }


def _raised(container: Mapping[str, Any], floor: ResourceList) -> dict[str, Any]:
    """``container`` with its requests raised to ``floor``; a request that is no quantity is left
    as it is (the view reports it at its path: the container keeps its index)."""
    resources = {} if container.get("resources") is None else container["resources"]
    requests = resources.get("requests") if isinstance(resources, Mapping) else None
    requests = {} if isinstance(resources, Mapping) and requests is None else requests
    if not isinstance(resources, Mapping) or not isinstance(requests, Mapping):
        return dict(container)  # malformed: left for the view to report at its path
    raised: dict[str, Any] = dict(requests)
    for name, least in floor:
        mine = raised.get(name)
        parsed = None if mine is None else quantity(mine, (), [])
        if mine is None or (parsed is not None and parsed < parse_quantity(least)):
            raised[name] = least
    return {**container, "resources": {**resources, "requests": raised}}


def kueue_pod_spec(
    obj: Mapping[str, Any],
    changes: tuple[PodChange, ...],
    spec: Mapping[str, Any],
    problems: Problems,
    whole: bool = False,
) -> Mapping[str, Any]:
    """The pod spec Kueue puts in the podset: ``spec`` (a ``PodSpec`` map of ``obj``) with each of
    ``changes`` whose condition holds applied, or ``spec`` itself when none does (never changed in
    place). A malformed value read from the object (``autoscalerOptions.resources``) is recorded in
    ``problems`` at its own path and left out; the containers the template has keep their index."""
    applied = [c for c in changes if any(w.holds(obj) for w in c.when)]
    if not applied:
        return spec
    containers = [] if spec.get("containers") is None else spec["containers"]
    if not isinstance(containers, list):  # malformed: left for the view to report at its path
        return spec
    out: list[Any] = list(containers)
    for change in applied:
        if isinstance(change, RaiseRequests):
            if out and isinstance(out[0], Mapping):
                out[0] = _raised(out[0], change.requests)
        else:
            out.append({"name": change.name, "resources": _resources(change, obj, problems, whole)})
    return {**spec, "containers": out}


def unbuildable(obj: Mapping[str, Any], changes: tuple[PodChange, ...], spec: Mapping[str, Any]) -> str | None:
    """Why Kueue cannot build the podset whose pod spec is ``spec`` (a map) in ``obj``, or None: a
    change that raises the first container's requests holds and there is no first container
    (Kueue v0.19.2 ``raycluster.accountForRedisCleanupInHeadPodSet`` returns an error, so
    ``BuildPodSets`` fails, and Kueue's Ray webhooks refuse the object: a fault-tolerant Ray head
    without its Ray container)."""
    for change in changes:
        if isinstance(change, RaiseRequests) and any(w.holds(obj) for w in change.when):
            containers = spec.get("containers")
            if not isinstance(containers, list) or not containers:
                return (
                    "its pod template has no container, and with GCS fault tolerance Kueue raises the "
                    "first one's requests (KubeRay's Redis cleanup): 'head pod template must include "
                    "the Ray container'"
                )
    return None


_RAY_FT = "ray.io/ft-enabled"
_HEAD_FLOOR: ResourceList = (("cpu", "200m"), ("memory", "256Mi"))
_AUTOSCALER: ResourceList = (("cpu", "500m"), ("memory", "512Mi"))
_SUBMITTER_REQUESTS: ResourceList = (("cpu", "500m"), ("memory", "200Mi"))
_SUBMITTER_LIMITS: ResourceList = (("cpu", "1"), ("memory", "1Gi"))


def ray_head_changes(cluster: PathPattern, sidecar_submitter: bool = False) -> tuple[PodChange, ...]:
    """The changes Kueue makes to the ``head`` podset of a Ray kind whose ``RayClusterSpec`` is at
    ``cluster``; ``sidecar_submitter``: the kind is a RayJob (its ``SidecarMode``)."""
    changes: list[PodChange] = [
        RaiseRequests(
            when=(
                When(("metadata", "annotations", _RAY_FT), "text-true"),
                When((*cluster, "gcsFaultToleranceOptions"), "set"),
            ),
            requests=_HEAD_FLOOR,
        ),
        AddContainer(
            "autoscaler",
            when=(When((*cluster, "enableInTreeAutoscaling"), "true"),),
            requests=_AUTOSCALER,
            limits=_AUTOSCALER,
            resources_at=(*cluster, "autoscalerOptions", "resources"),
        ),
    ]
    if sidecar_submitter:
        changes.append(
            AddContainer(
                "ray-job-submitter",
                when=(When(("spec", "submissionMode"), "equals", "SidecarMode"),),
                requests=_SUBMITTER_REQUESTS,
                limits=_SUBMITTER_LIMITS,
            )
        )
    return tuple(changes)
