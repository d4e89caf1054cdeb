"""Changes Kueue refuses in place: :func:`recreate_warnings` compares generated objects with what
exists (files on disk or the live cluster) and warns about each change that needs the object deleted
and created again (:func:`needs_recreate`); :func:`equivalent` and :func:`same_quantity` compare
values as the API server stores them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.core.kueue.versions import HOSTNAME_LEVEL, KueueRelease, kueue_release
from webhook.core.objects.quantity import parse_quantity
from webhook.core.platform.platform import Platform, Problem
from webhook.core.platform.policy import local_queue_name, team_namespaces
from webhook.generate.manifests import Manifest

__all__ = ["QUANTITY_FIELDS", "Recreate", "equivalent", "needs_recreate", "recreate_warnings", "same_quantity"]


class Recreate(Problem):
    """A change that needs the object deleted and created again (``severity`` is ``warning``)."""

    kind: str
    name: str
    namespace: str = ""


def _spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec")
    return dict(spec) if isinstance(spec, Mapping) else {}


#: Fields of the generated objects that hold a Kubernetes quantity (``resource.Quantity`` in
#: Kueue's API): quotas and limits of a ClusterQueue's or Cohort's resources, a fairSharing weight.
#: The API server and Kueue may return them in another form (``64`` → ``"64"``, ``1024Mi`` →
#: ``"1Gi"`` once Kueue re-writes the object).
QUANTITY_FIELDS = frozenset({"nominalQuota", "borrowingLimit", "lendingLimit", "weight"})


def same_quantity(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are the same Kubernetes quantity (``64`` and ``"64"``, ``"1Gi"`` and
    ``"1024Mi"``, ``0.5`` and ``"500m"``); False when either is not a quantity."""
    try:
        return parse_quantity(a) == parse_quantity(b)
    except ValueError:
        return False


def equivalent(a: Any, b: Any, field: str = "") -> bool:
    """Deep equality where a :data:`QUANTITY_FIELDS` value compares by quantity and every other
    scalar exactly (a label value ``"1k"`` is not ``"1000"``; ``true`` is not ``1``). ``field`` is
    the map key ``a`` and ``b`` are found under."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(equivalent(a[key], b[key], str(key)) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equivalent(x, y, field) for x, y in zip(a, b, strict=True))
    if field in QUANTITY_FIELDS and same_quantity(a, b):
        return True
    return bool(a == b) and isinstance(a, bool) == isinstance(b, bool)


def _last_level(levels: Any) -> Any:
    if isinstance(levels, list) and levels and isinstance(levels[-1], Mapping):
        return levels[-1].get("nodeLabel")
    return None


def _fields(names: Iterable[str]) -> str:
    ordered = sorted(names, key=["nodeLabels", "tolerations", "topologyName"].index)
    return ordered[0] if len(ordered) == 1 else ", ".join(ordered[:-1]) + " and " + ordered[-1]


def needs_recreate(
    desired: Mapping[str, Any], current: Mapping[str, Any], release: KueueRelease | None = None
) -> str | None:
    """Why ``current`` cannot be updated in place to ``desired`` (same kind and name) on the
    Kueue ``release`` (None: the default, :data:`webhook.core.kueue.versions.DEFAULT_KUEUE_VERSION`),
    or None. The rules are the CRDs' validation rules, per release in
    :data:`webhook.core.kueue.versions.VERSIONS`:

    - ResourceFlavor whose live version has ``topologyName``: Kueue refuses changes to the fields
      of ``release.tas_flavor_immutable`` (v0.19.2: ``nodeLabels``, ``tolerations`` and
      ``topologyName``, e.g. "nodeLabels are immutable when topologyName is set"; v0.20: only
      ``topologyName``). While a release keeps ``nodeLabels`` too, a change of another field is
      warned about as well: older releases kept the whole spec immutable (``resourceFlavorSpec are
      immutable when topologyName is set``). Adding a ``topologyName`` to a flavor without one is allowed;
    - Topology: ``spec.levels`` is immutable, except under ``release.topology_levels_mutable``
      (v0.20) when ``kubernetes.io/hostname`` is the lowest level before and after;
    - LocalQueue: ``spec.clusterQueue`` is immutable.
    """
    release = release or kueue_release()
    kind = desired.get("kind")
    old, new = _spec(current), _spec(desired)
    if kind == "ResourceFlavor":
        changed = sorted(k for k in {*old, *new} if not equivalent(old.get(k), new.get(k), k))
        if old.get("topologyName") and changed:
            where = f"changes {', '.join(changed)} of a ResourceFlavor with topologyName {old['topologyName']!r}; "
            fixed = release.tas_flavor_immutable
            if set(changed) & fixed:
                return where + f"Kueue refuses changes to {_fields(fixed)} once it is set"
            if "nodeLabels" in fixed:
                return where + "newer Kueue releases keep the whole spec immutable once topologyName is set"
    elif kind == "Topology":
        levels, was = new.get("levels"), old.get("levels")
        if was != levels:
            if release.topology_levels_mutable and _last_level(was) == _last_level(levels) == HOSTNAME_LEVEL:
                return None
            if release.topology_levels_mutable:
                return (
                    f"changes spec.levels; {release.label} changes a Topology's levels in place only when "
                    f"{HOSTNAME_LEVEL} is the lowest level both before and after"
                )
            return "changes spec.levels; Kueue keeps a Topology's levels immutable"
    elif kind == "LocalQueue" and old.get("clusterQueue") and old.get("clusterQueue") != new.get("clusterQueue"):
        return (
            f"moves the LocalQueue from ClusterQueue {old['clusterQueue']!r} to {new.get('clusterQueue')!r}; "
            "Kueue keeps spec.clusterQueue immutable"
        )
    return None


_RECREATE_ACTION = {
    "ResourceFlavor": "delete and re-create it; workloads admitted on it are evicted and requeued",
    "Topology": "delete and re-create it together with the ResourceFlavors that name it",
    "LocalQueue": "delete and re-create it; its pending workloads must be resubmitted",
}


def _platform_path(platform: Platform | None, kind: str, name: str, namespace: str) -> str:
    if platform is None:
        return f"{kind}/{namespace + '/' if namespace else ''}{name}"
    if kind == "ResourceFlavor":
        for index, flavor in enumerate(platform.flavors):
            if flavor.name == name:
                return f"flavors[{index}]"
    if kind == "Topology":
        for index, topology in enumerate(platform.topologies):
            if topology.name == name:
                return f"topologies[{index}].levels"
    if kind == "LocalQueue":
        for index, team in enumerate(platform.teams):
            if namespace in team_namespaces(platform, team) and local_queue_name(platform, team) == name:
                return f"teams[{index}]"
    return f"{kind}/{namespace + '/' if namespace else ''}{name}"


def recreate_warnings(
    desired: Iterable[Manifest], current: Iterable[Manifest], platform: Platform | None = None
) -> list[Recreate]:
    """Warnings for generated objects whose existing version (same kind, namespace, name) cannot be
    updated in place (:func:`needs_recreate`) on the platform's ``kueue.version`` (the default
    without a platform). Paths point into ``platform`` when given."""
    release = platform.kueue.release if platform is not None else kueue_release()
    existing = {}
    for obj in current:
        metadata = obj.get("metadata") or {}
        existing[(obj.get("kind"), metadata.get("namespace", ""), metadata.get("name"))] = obj
    out = []
    for obj in desired:
        metadata = obj.get("metadata") or {}
        kind, namespace, name = str(obj.get("kind")), str(metadata.get("namespace", "")), str(metadata.get("name"))
        old = existing.get((kind, namespace, name))
        if old is None:
            continue
        reason = needs_recreate(obj, old, release)
        if reason is None:
            continue
        out.append(
            Recreate(
                path=_platform_path(platform, kind, name, namespace),
                message=f"{kind} {name!r} needs a recreate: this {reason}; {_RECREATE_ACTION[kind]}",
                severity="warning",
                kind=kind,
                name=name,
                namespace=namespace,
            )
        )
    return out
