"""Kueue's view of the planned object, from the view of the request's object and the plan's changes.

The never-admitted checks (:mod:`webhook.core.plan.rules.stranded`) judge what Kueue will see once the
patch is applied. Reading the whole planned object again (:func:`~webhook.core.kueue.view.kueue_view`)
would repeat every count, every container's quantities and every check of the first read, while
the rules write only a few pod fields that leave counts and requests alone. :func:`planned_view`
starts from the first view and re-reads only what the changes can alter: each podset's base
(the map its annotations are read from), its required node affinity and its pod spec. A change anywhere else,
or into a label or annotation that the view itself reads (a podset group, a pod group's size or
name), makes it read the whole planned object instead, so the result is always the view
:func:`~webhook.core.kueue.view.kueue_view` would give (``tests/test_planned_view.py`` compares the two).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from webhook.core.kueue.injected import kueue_pod_spec
from webhook.core.kueue.kinds import KINDS
from webhook.core.kueue.view import GROUP_NAME, PodSet, WorkloadView, kueue_view
from webhook.core.kueue.wellformed import terms_of
from webhook.core.objects.paths import Key, PathPattern, lookup
from webhook.core.plan.draft import Change

__all__ = ["VIEW_READ_KEYS", "planned_view"]


def _read_keys() -> frozenset[str]:
    """Label and annotation keys whose values the view reads (counts, groups, pod-group members)."""
    keys = {GROUP_NAME}
    for row in KINDS:
        paths: list[PathPattern] = [factor.path for factor in row.counts]
        for rule in row.podsets:
            paths += [factor.path for factor in rule.count]
            paths += [factor.cap for factor in rule.count if factor.cap is not None]
            paths += [*rule.partial_if, *([rule.leader.path] if rule.leader else [])]
            if rule.only_if is not None:
                paths.append(rule.only_if[0])
        keys.update(str(p[-1]) for p in paths if len(p) >= 2 and p[-2] in ("labels", "annotations"))
    return frozenset(keys)


#: Keys in labels and annotations that :func:`~webhook.core.kueue.view.kueue_view` reads.
VIEW_READ_KEYS = _read_keys()


def _only_into(relative: tuple[Key, ...], value: Any, fields: Sequence[PathPattern]) -> bool:
    """Whether writing ``value`` at ``relative`` (below a podset's base, or the object root) puts
    something only into ``fields`` (never one of :data:`VIEW_READ_KEYS` of a label or annotation
    map); a change that creates a missing map (``metadata: {annotations: {...}}``) is followed into it."""
    for field in fields:
        if relative[: len(field)] == field:
            if field[-1:] not in (("labels",), ("annotations",)):
                return True
            if len(relative) > len(field):
                return relative[len(field)] not in VIEW_READ_KEYS
            return isinstance(value, Mapping) and not VIEW_READ_KEYS.intersection(value)
    if isinstance(value, Mapping) and any(field[: len(relative)] == relative for field in fields):
        return all(_only_into((*relative, key), item, fields) for key, item in value.items())
    return False


_OUTSIDE = -1


def _owner(
    change: Change, podsets: Sequence[PodSet], bases: dict[tuple[Key, ...], int], lengths: list[int]
) -> int | None:
    """The index of the present podset below whose base ``change`` writes, when it writes only its
    labels, annotations, priorityClassName or affinity; :data:`_OUTSIDE` when it writes below no
    present podset's base; None when it may alter something else the view reads. ``bases``: the
    present podsets' paths → their index; ``lengths``: the lengths of those paths."""
    path = change.path
    for length in lengths:
        index = bases.get(path[:length]) if len(path) > length else None
        if index is not None:
            layout = podsets[index].rule.layout
            fields = (layout.labels, layout.annotations, layout.priority, layout.affinity)
            return index if _only_into(path[length:], change.value, fields) else None
    return _OUTSIDE


def planned_view(view: WorkloadView, doc: Mapping[str, Any], changes: Sequence[Change]) -> WorkloadView:
    """Kueue's view of ``doc``: the object ``view`` was read from with ``changes`` applied.

    ``view`` must have no problems (the planner stops before planning otherwise); the result has
    none either (the changes are well-formed values), and equals ``kueue_view(doc, view.row)``.
    """
    row = view.row
    if row.embedded is not None:  # components planned by their own rows: read it again
        return kueue_view(doc, row)
    workload = [(*row.labels_at, "labels")] + ([row.suspend] if row.suspend is not None else [])
    bases = {p.path: index for index, p in enumerate(view.podsets) if p.present}
    if len(bases) < sum(p.present for p in view.podsets):  # two podsets at one path: cannot be
        return kueue_view(doc, row)
    lengths = sorted({len(path) for path in bases})
    if len(lengths) > 1 and any(o != b and o[: len(b)] == b for b in bases for o in bases):
        return kueue_view(doc, row)  # a podset's base inside another's: cannot be
    touched: set[int] = set()
    for change in changes:
        owner = _owner(change, view.podsets, bases, lengths)
        if owner is None or (owner == _OUTSIDE and not _only_into(change.path, change.value, workload)):
            return kueue_view(doc, row)
        if owner != _OUTSIDE:
            touched.add(owner)
    podsets = list(view.podsets)
    for index in touched:
        podset = podsets[index]
        base = lookup(doc, podset.path)
        if not isinstance(base, Mapping):  # cannot be: the changes only wrote below it
            return kueue_view(doc, row)
        layout = podset.rule.layout
        terms = terms_of(lookup(base, layout.affinity))  # the changes are well-formed
        annotations = lookup(base, layout.annotations)
        spec = lookup(base, layout.spec) if layout.spec is not None else None
        podsets[index] = _replaced(
            podset,
            base=base,
            affinity_terms=terms,
            annotations=annotations if isinstance(annotations, Mapping) else {},
            # the pod spec Kueue holds: the changes may write its priorityClassName and affinity
            spec={} if layout.spec is None else kueue_pod_spec(doc, podset.rule.changes, _map(spec), []),
        )
    return _replaced(view, podsets=tuple(podsets))


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


_Frozen = TypeVar("_Frozen", PodSet, WorkloadView)


def _replaced(item: _Frozen, **changes: Any) -> _Frozen:
    """``dataclasses.replace`` of a podset or a view (frozen dataclasses with no ``__post_init__``
    and every field set by ``__init__``): the same fields with ``changes``, without the generic
    function's field-by-field ``__init__`` call (several times as slow, on the request path)."""
    assert changes.keys() <= item.__dict__.keys(), f"no such field: {changes.keys() - item.__dict__.keys()}"
    new = object.__new__(type(item))
    new.__dict__.update(item.__dict__, **changes)
    return new
