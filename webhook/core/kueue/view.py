"""Kueue's view of a workload: its podsets as Kueue's ``PodSets()`` adapters build them.

:func:`kueue_view` reads an object once per request through its :class:`~webhook.core.kueue.kinds.WorkloadKind`
row and returns a :class:`WorkloadView`: for each podset Kueue's name (lower-cased, as
``kueue.NewPodSetReference``), the pod count, the per-pod requests (:mod:`webhook.core.kueue.resources`),
the pod's own node selector, required node affinity and tolerations, and its
``podset-group-name``. Every rule reads this view; none walks the object again to size a podset.

Kueue v0.19.2 sources: ``pkg/controller/jobs/*``; the e2e suite compares this view with the
Workloads the real Kueue builds (``e2e/test_kueue_view.py``, ``e2e/test_kueue_view_ray.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import lru_cache
from typing import Any

from webhook.core.kueue.injected import kueue_pod_spec, unbuildable
from webhook.core.kueue.kinds import Factor, PodSetRule, WorkloadKind, find_kind
from webhook.core.kueue.podgroup import group_member
from webhook.core.kueue.resources import Requests, pod_requests
from webhook.core.kueue.wellformed import (
    Problem,
    Problems,
    a_map,
    count,
    expand_checked,
    maps_of,
    missing_templates,
    required_terms,
    string_values,
    strings_at,
)
from webhook.core.objects.frozen import made
from webhook.core.objects.paths import Key, PathPattern, bound, child, lookup, parse_dotted
from webhook.core.objects.quantity import parse_quantity

__all__ = [
    "GROUP_NAME",
    "PREFERRED",
    "PRIORITY_LABEL",
    "QUEUE_LABEL",
    "REQUIRED",
    "SLICE_CONSTRAINTS",
    "SLICE_REQUIRED",
    "SLICE_SIZE",
    "UNCONSTRAINED",
    "PodSet",
    "WorkloadView",
    "kueue_view",
]

#: Podsets sharing this annotation are placed together (Kueue's cross-podset TAS, e.g. LWS).
GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
#: Kueue's TAS annotations on a pod template (KEP-2724): the level a podset's pods must (or
#: should) share one domain of, none at all, and the level and pods of its slices.
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
#: Pods per slice of a podset's sliced topology request (Kueue's TAS annotation: a count).
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
#: Up to 3 slice layers as JSON ``[{"topology": level, "size": pods}]``, broadest first (Kueue's
#: ``TASMultiLayerTopology``, on by default since v0.19); Kueue refuses it next to the two above
#: and next to ``podset-group-name``.
SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
#: Kueue's labels of a workload: the LocalQueue it is submitted to, its WorkloadPriorityClass.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def _map(value: Any) -> Mapping[str, Any]:
    return value if type(value) is dict or (value is not None and isinstance(value, Mapping)) else {}


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
    ``rule``: the row's rule it came from (where each pod field lives). ``annotations``: the
    pod template's annotations map in ``base`` ({} when absent or no map), read once. ``spec``:
    the pod spec as Kueue's Workload holds it (the template's, with :mod:`webhook.core.kueue.injected`).
    ``unbuilt``: why Kueue cannot build this podset, so refuses the workload
    (:func:`~webhook.core.kueue.injected.unbuildable`), else None.
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
    unbuilt: str | None = None
    annotations: Mapping[str, Any] = field(default_factory=dict)
    spec: Mapping[str, Any] = field(default_factory=dict)

    def at(self, *suffix: Key) -> tuple[Key, ...]:
        """Absolute path of a field below this podset's base."""
        return (*self.path, *suffix)


@dataclass(frozen=True)
class WorkloadView:
    """All podsets of one workload (embedded components' podsets included, AppWrapper).

    ``problems``: each value the view reads that Kueue could not (a count that is no non-negative
    integer, a quantity that is no Kubernetes quantity, a list where a map belongs…), with its
    path, in document order (:mod:`webhook.core.kueue.wellformed`); the podsets leave such values out.
    """

    row: WorkloadKind
    podsets: tuple[PodSet, ...]
    problems: tuple[Problem, ...] = ()

    def total(self, certain: bool = False) -> Requests:
        """Requests of the whole workload: Σ count × per-pod requests over sized podsets.
        ``certain``: a ``partial`` podset (one Pod of a pod group, whose count is the group's)
        counts its one pod only, the least the workload needs (the group's other pods may request
        none of a resource); otherwise its count is an upper bound."""
        out: Requests = {}
        for podset in self.podsets:
            count = 1 if certain and podset.partial else podset.count
            for name, amount in (podset.requests or {}).items():
                out[name] = out.get(name, Decimal(0)) + amount * count
        return out


def _read(
    obj: Mapping[str, Any], factor: Factor, pattern: PathPattern, bindings: tuple[Key, ...], problems: Problems
) -> int | None:
    path = bound(pattern, bindings)
    return count(lookup(obj, path), path, problems, factor.text)


def _count(obj: Mapping[str, Any], rule: PodSetRule, bindings: tuple[Key, ...], led: bool, problems: Problems) -> int:
    total = 1
    for factor in rule.count:
        value = _read(obj, factor, factor.path, bindings, problems)
        if value is None:  # unset: the API server's default (a Job's parallelism is 1)
            value = factor.default
        elif value < factor.one_below:
            value = 1
        if factor.cap is not None:
            cap = _read(obj, factor, factor.cap, bindings, problems)
            if cap is not None:
                value = min(value, cap)
        total *= value
    offset = rule.count_offset + (rule.leader.count_offset if led and rule.leader else 0)
    return max(total + offset, 0)


def _name(obj: Mapping[str, Any], rule: PodSetRule, bindings: tuple[Key, ...], led: bool, problems: Problems) -> str:
    """Kueue's podset name: lower-cased map key, a name field next to the template, or fixed."""
    if led and rule.leader is not None:
        return rule.leader.name
    if not bindings:
        return rule.name
    last = bindings[-1]
    if isinstance(last, str):
        return last.lower()
    at = bound(_upto_last_wildcard(rule.template), bindings)
    holder = lookup(obj, at)
    name = holder.get(rule.name) if isinstance(holder, Mapping) else None
    if isinstance(name, str):
        return name.lower()
    if name is not None:
        problems.append(Problem((*at, rule.name), name, "a string"))
    return f"{rule.name}-{last}"


@lru_cache(maxsize=256)
def _upto_last_wildcard(template: PathPattern) -> PathPattern:
    """The pattern of the item a podset's template is in (its name field's holder); one per kind row."""
    return template[: len(template) - template[::-1].index("*")]


def _strings(value: Any, at: tuple[Key, ...], problems: Problems) -> Mapping[str, Any]:
    """A map of strings (a node selector); a value of another type is a problem."""
    out = a_map(value, at, problems)
    string_values(out, at, problems)
    return out


def _podset(
    obj: Mapping[str, Any],
    rule: PodSetRule,
    path: tuple[Key, ...],
    bindings: tuple[Key, ...],
    base: Mapping[str, Any],
    problems: Problems,
    whole: bool = False,
) -> PodSet:
    layout = rule.layout
    led = rule.leader is not None and lookup(obj, rule.leader.path) is not None
    pods = _count(obj, rule, bindings, led, problems)  # read first: problems come in document order
    # Each value is read once below the base; a problem's path is built only for a value that is
    # set and not of the plain JSON type wanted (the common case: absent, or a dict).
    for suffix in (*layout.maps, layout.labels):  # the maps the rules read and write
        value = lookup(base, suffix)
        if value is not None and type(value) is not dict:
            a_map(value, (*path, *suffix), problems)
    requests: Requests | None = None
    spec: Mapping[str, Any] = {}
    unbuilt: str | None = None
    if layout.spec is not None:
        spec_path = (*path, *layout.spec)
        own = a_map(lookup(base, layout.spec), spec_path, problems)
        spec = kueue_pod_spec(obj, rule.changes, own, problems, whole)
        requests = pod_requests(spec, problems, spec_path, whole)
        unbuilt = unbuildable(obj, rule.changes, own)
    priority = lookup(base, layout.priority)  # a PriorityClass name (Go string): 12 is no name
    if priority is not None and type(priority) is not str:
        problems.append(Problem((*path, *layout.priority), priority, "a string"))
    annotations = lookup(base, layout.annotations)
    slice_size = child(annotations, SLICE_SIZE)
    if slice_size is not None:
        count(slice_size, (*path, *layout.annotations, SLICE_SIZE), problems, text=True)
    group = child(annotations, GROUP_NAME)
    if group is not None and not isinstance(group, str):
        problems.append(Problem((*path, *layout.annotations, GROUP_NAME), group, "a string"))
    labels = lookup(base, layout.labels)
    for suffix, value in ((layout.labels, labels), (layout.annotations, annotations)):
        if value is not None:
            string_values(value, (*path, *suffix), problems)
    name = _name(obj, rule, bindings, led, problems)
    node_selector = lookup(base, layout.node_selector)
    affinity = lookup(base, layout.affinity)
    tolerations = lookup(base, layout.tolerations)
    return made(  # PodSet(...) without its per-field __init__
        PodSet,
        name=name,
        path=path,
        count=pods,
        base=base,
        rule=rule,
        requests=requests,
        node_selector={}
        if node_selector is None
        else _strings(node_selector, (*path, *layout.node_selector), problems),
        affinity_terms=None if affinity is None else required_terms(affinity, (*path, *layout.affinity), problems),
        tolerations=[]
        if tolerations is None
        else [t for _, t in maps_of(tolerations, (*path, *layout.tolerations), problems)],
        group=group if isinstance(group, str) else None,
        partial=group_member(obj, rule, bindings, problems),
        present=True,
        unbuilt=unbuilt,
        annotations=_map(annotations),
        spec=spec,
    )


def kueue_reencodes(obj: Mapping[str, Any], row: WorkloadKind) -> bool:
    """Whether the API server's copy of ``obj`` (a custom resource of kind ``row``) is re-encoded by
    Kueue's mutating webhook before its CRD schema is checked, turning a fractional JSON quantity
    (``cpu: 0.5``) into a string (``"500m"``). Kueue's defaulter (controller-runtime) answers with a
    patch only when its defaulting changed the object, which it does for a workload submitted with
    a queue label and not yet suspended: it suspends it. With no queue label of the user's (the
    governor adds one, Kueue then changes nothing), the CRD's int-or-string schema refuses the
    number (e2e/test_malformed.py)."""
    labels = lookup(obj, (*row.labels_at, "labels"))
    queue = labels.get(QUEUE_LABEL) if isinstance(labels, Mapping) else None
    if not isinstance(queue, str) or not queue:
        return False
    return row.suspend is None or lookup(obj, row.suspend) is not True


def _iter(obj: Mapping[str, Any], row: WorkloadKind, problems: Problems) -> Iterator[PodSet]:
    whole = not row.built_in and not kueue_reencodes(obj, row)
    for rule in row.podsets:
        if rule.only_if is not None and lookup(obj, rule.only_if[0]) != rule.only_if[1]:
            continue
        found = False
        for path, bindings, base in expand_checked(obj, rule.template, problems, rule.keyed):
            if isinstance(base, Mapping):
                found = True
                yield _podset(obj, rule, path, bindings, base, problems, whole)
            elif base is not None:
                problems.append(Problem(path, base, "an object"))
        if rule.only_if is None:
            missing_templates(obj, rule.template, problems, rule.keyed)
        if not found and rule.only_if is not None:
            # Kueue assumes a default template (a RayJob's submitter): counted, nothing to govern.
            requests = {n: parse_quantity(v) for n, v in rule.default_requests}
            yield PodSet(rule.name, rule.template, 1, {}, rule, requests, present=False)
    for factor in row.counts:
        for path, _, value in expand_checked(obj, factor.path, problems):
            count(value, path, problems, factor.text)
    strings_at(obj, row.priority_classes, problems)
    if row.suspend is not None:
        suspend = lookup(obj, row.suspend)
        if suspend is not None and not isinstance(suspend, bool):
            problems.append(Problem(row.suspend, suspend, "a boolean"))
    for at in dict.fromkeys((("metadata",), row.labels_at)):
        for key in ("labels", "annotations"):
            string_values(lookup(obj, (*at, key)), (*at, key), problems)
    if row.embedded is not None:
        yield from _embedded(obj, row, problems)


_DECLARED = PodSetRule(template=())


def _declared(
    obj: Mapping[str, Any], at: tuple[Key, ...], component: Mapping[str, Any], declared: Any, problems: Problems
) -> list[PodSet]:
    """The podsets an AppWrapper component declares (``podSets``: ``path`` and ``replicas``)."""
    found: list[PodSet] = []
    for where, entry in maps_of(declared, (*at, "podSets"), problems):
        text = entry.get("path")
        if not isinstance(text, str):
            problems.append(Problem((*where, "path"), text, "a string (the path of a pod template)"))
            continue
        relative = parse_dotted(text)
        base = lookup(component, relative)
        replicas = count(entry.get("replicas"), (*where, "replicas"), problems)
        if not isinstance(base, Mapping):
            problems.append(Problem((*where, "path"), text, "the path of a pod template in the component"))
            continue
        podset = _podset(obj, _DECLARED, (*at, *relative), (), base, problems)
        found.append(replace(podset, count=1 if replicas is None else replicas))
    return found


def _embedded(obj: Mapping[str, Any], row: WorkloadKind, problems: Problems) -> Iterator[PodSet]:
    """Podsets of embedded objects (AppWrapper components): declared ones, else the inner row's."""
    assert row.embedded is not None
    owner = lookup(obj, ("metadata", "name"))
    index = 0
    for path, _, inner in expand_checked(obj, row.embedded, problems):
        if not isinstance(inner, Mapping):
            if inner is not None:
                problems.append(Problem(path, inner, "an object"))
            continue
        component = lookup(obj, path[:-1])
        declared = component.get(row.declared) if row.declared and isinstance(component, Mapping) else None
        found: list[PodSet] = []
        if declared is not None:
            found = _declared(obj, path[:-1], component, declared, problems)
        if not found and not declared:
            inner_row = find_kind(str(inner.get("apiVersion", "")), str(inner.get("kind", "")))
            if inner_row is None:
                continue
            inner_problems: Problems = []
            found = [replace(p, path=(*path, *p.path)) for p in _iter(inner, inner_row, inner_problems)]
            problems.extend(replace(p, path=(*path, *p.path)) for p in inner_problems)
        for podset in found:
            name = f"{owner}-{index}".lower() if isinstance(owner, str) else f"{inner.get('kind')}/{podset.name}"
            index += 1
            yield replace(podset, name=name)


def kueue_view(obj: Mapping[str, Any], row: WorkloadKind) -> WorkloadView:
    """Kueue's view of ``obj`` (a workload of kind ``row``).

    Only map-shaped podset bases are seen; each value Kueue could not read (a base that is no
    map, a malformed count or quantity…) is in the view's ``problems``, once per path.
    """
    problems: Problems = []
    podsets = tuple(_iter(obj, row, problems))
    unique: dict[tuple[Key, ...], Problem] = {}
    for problem in problems:  # a value read twice (a Job's parallelism and its cap) is said once
        unique.setdefault(problem.path, problem)
    return WorkloadView(row=row, podsets=podsets, problems=tuple(unique.values()))
