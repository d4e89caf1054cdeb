"""Kueue's view of a workload: its podsets as Kueue's ``PodSets()`` adapters build them.

:func:`kueue_view` reads an object once per request through its :class:`~webhook.core.kinds.WorkloadKind`
row and returns a :class:`WorkloadView`: for each podset Kueue's name (lower-cased, as
``kueue.NewPodSetReference``), the pod count, the per-pod requests (:mod:`webhook.core.resources`),
the pod's own node selector, required node affinity and tolerations, and its
``podset-group-name``. Every rule reads this view; none walks the object again to size a podset.

Kueue v0.19.2 sources: ``pkg/controller/jobs/{job,jobset,kubeflow,mpijob,raycluster,rayjob,
leaderworkerset,statefulset,deployment,pod,sparkapplication}``. The e2e suite compares this view
with the Workloads the real Kueue builds (``e2e/test_kueue_view.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from webhook.core.kinds import PodSetRule, WorkloadKind, find_kind
from webhook.core.paths import Key, bind, expand, lookup, number
from webhook.core.quantity import parse_quantity
from webhook.core.resources import Requests, pod_requests

__all__ = ["GROUP_NAME", "PodSet", "WorkloadView", "kueue_view"]

#: Podsets sharing this annotation are placed together (Kueue's cross-podset TAS, e.g. LWS).
GROUP_NAME = "kueue.x-k8s.io/podset-group-name"


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class PodSet:
    """One Kueue podset of a workload.

    ``name``: Kueue's podset name. ``path``: keys from the object root to the podset's base (its
    ``PodTemplateSpec``; ``()`` for a bare Pod). ``count``: pods (≥ 0). ``base``: the map at
    ``path`` (not a copy; an empty map when Kueue assumes a default template). ``requests``: one
    pod's requests in base units, None when unknown (``sized`` False layouts). ``node_selector``,
    ``affinity_terms`` (required ``nodeSelectorTerms``, None when the pod has none),
    ``tolerations``: the pod's own node constraints. ``group``: its ``podset-group-name``.
    ``partial``: one member of a group whose other members are not visible (size unknown).
    ``rule``: the row's rule it came from (where each pod field lives).
    """

    name: str
    path: tuple[Key, ...]
    count: int
    base: Mapping[str, Any]
    rule: PodSetRule
    requests: Requests | None
    node_selector: Mapping[str, Any] = field(default_factory=dict)
    affinity_terms: list[Any] | None = None
    tolerations: list[Mapping[str, Any]] = field(default_factory=list)
    group: str | None = None
    partial: bool = False
    present: bool = True

    def at(self, *suffix: Key) -> tuple[Key, ...]:
        """Absolute path of a field below this podset's base."""
        return (*self.path, *suffix)

    @property
    def annotations(self) -> Mapping[str, Any]:
        return _map(lookup(self.base, self.rule.layout.annotations))


@dataclass(frozen=True)
class WorkloadView:
    """All podsets of one workload (embedded components' podsets included, AppWrapper)."""

    row: WorkloadKind
    podsets: tuple[PodSet, ...]

    def total(self) -> Requests:
        """Requests of the whole workload: Σ count × per-pod requests over sized podsets."""
        out: Requests = {}
        for podset in self.podsets:
            for name, amount in (podset.requests or {}).items():
                out[name] = out.get(name, Decimal(0)) + amount * podset.count
        return out


def _count(obj: Mapping[str, Any], rule: PodSetRule, bindings: tuple[Key, ...], led: bool) -> int:
    total = 1
    for factor in rule.count:
        value = number(bind(obj, factor.path, bindings))
        if factor.cap is not None:
            cap = number(bind(obj, factor.cap, bindings))
            if cap is not None:
                value = cap if value is None else min(value, cap)
        total *= factor.default if value is None else value
    offset = rule.count_offset + (rule.leader.count_offset if led and rule.leader else 0)
    return max(total + offset, 0)


def _name(obj: Mapping[str, Any], rule: PodSetRule, bindings: tuple[Key, ...], led: bool) -> str:
    """Kueue's podset name: lower-cased map key, a name field next to the template, or fixed."""
    if led and rule.leader is not None:
        return rule.leader.name
    if not bindings:
        return rule.name
    last = bindings[-1]
    if isinstance(last, str):
        return last.lower()
    upto_last_wildcard = rule.template[: len(rule.template) - rule.template[::-1].index("*")]
    holder = bind(obj, upto_last_wildcard, bindings)
    if isinstance(holder, Mapping) and isinstance(holder.get(rule.name), str):
        return str(holder[rule.name]).lower()
    return f"{rule.name}-{last}"


def _defaults(rule: PodSetRule) -> Requests:
    return {name: parse_quantity(value) for name, value in rule.default_requests}


def _podset(
    obj: Mapping[str, Any], rule: PodSetRule, path: tuple[Key, ...], bindings: tuple[Key, ...], base: Mapping[str, Any]
) -> PodSet:
    layout = rule.layout
    led = rule.leader is not None and lookup(obj, rule.leader.path) is not None
    spec = _map(lookup(base, layout.spec)) if layout.spec is not None else None
    affinity = lookup(base, layout.affinity)
    terms = lookup(affinity, ("nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"))
    tolerations = lookup(base, layout.tolerations)
    group = lookup(base, (*layout.annotations, GROUP_NAME))
    return PodSet(
        name=_name(obj, rule, bindings, led),
        path=path,
        count=_count(obj, rule, bindings, led),
        base=base,
        rule=rule,
        requests=pod_requests(spec) if spec is not None else None,
        node_selector=_map(lookup(base, layout.node_selector)),
        affinity_terms=terms if isinstance(terms, list) else None,
        tolerations=[t for t in tolerations if isinstance(t, Mapping)] if isinstance(tolerations, list) else [],
        group=group if isinstance(group, str) else None,
        partial=rule.partial_if is not None and bind(obj, rule.partial_if, bindings) is not None,
    )


def _iter(obj: Mapping[str, Any], row: WorkloadKind) -> Iterator[PodSet]:
    for rule in row.podsets:
        if rule.only_if is not None and lookup(obj, rule.only_if[0]) != rule.only_if[1]:
            continue
        found = False
        for path, bindings, base in expand(obj, rule.template):
            if isinstance(base, Mapping):
                found = True
                yield _podset(obj, rule, path, bindings, base)
        if not found and rule.only_if is not None:
            # Kueue assumes a default template (a RayJob's submitter): counted, nothing to govern.
            yield PodSet(
                name=rule.name, path=rule.template, count=1, base={}, rule=rule, requests=_defaults(rule), present=False
            )
    if row.embedded is not None:
        yield from _embedded(obj, row)


def _aw_path(text: str) -> tuple[Key, ...]:
    """``template.spec.replicatedJobs[0].template`` → ``("template", "spec", "replicatedJobs", 0, "template")``."""
    out: list[Key] = []
    for part in text.split("."):
        name, _, rest = part.partition("[")
        if name:
            out.append(name)
        while rest:
            index, _, rest = rest.partition("]")
            out.append(int(index) if index.isdigit() else index)
            rest = rest.lstrip("[")
    return tuple(out)


_DECLARED = PodSetRule(template=())


def _embedded(obj: Mapping[str, Any], row: WorkloadKind) -> Iterator[PodSet]:
    """Podsets of embedded objects (AppWrapper components): declared ones, else the inner row's."""
    assert row.embedded is not None
    owner = lookup(obj, ("metadata", "name"))
    index = 0
    for path, _, inner in expand(obj, row.embedded):
        if not isinstance(inner, Mapping):
            continue
        component = lookup(obj, path[:-1])
        declared = component.get(row.declared) if row.declared and isinstance(component, Mapping) else None
        found: list[PodSet] = []
        if isinstance(declared, list) and declared:
            for entry in declared:
                if not isinstance(entry, Mapping) or not isinstance(entry.get("path"), str):
                    continue
                relative = _aw_path(entry["path"])
                base = lookup(component, relative)
                if isinstance(base, Mapping):
                    podset = _podset(obj, _DECLARED, (*path[:-1], *relative), (), base)
                    count = number(entry.get("replicas"))
                    found.append(replace(podset, count=1 if count is None else count))
        else:
            inner_row = find_kind(str(inner.get("apiVersion", "")), str(inner.get("kind", "")))
            if inner_row is None:
                continue
            found = [replace(p, path=(*path, *p.path)) for p in _iter(inner, inner_row)]
        for podset in found:
            name = f"{owner}-{index}".lower() if isinstance(owner, str) else f"{inner.get('kind')}/{podset.name}"
            index += 1
            yield replace(podset, name=name)


def kueue_view(obj: Mapping[str, Any], row: WorkloadKind) -> WorkloadView:
    """Kueue's view of ``obj`` (a workload of kind ``row``).

    Only map-shaped podset bases are seen: one of another JSON type gets no policy, and the API
    server refuses such an object anyway (typed decoding for built-in kinds, the CRD's schema for
    the others).
    """
    return WorkloadView(row=row, podsets=tuple(_iter(obj, row)))
