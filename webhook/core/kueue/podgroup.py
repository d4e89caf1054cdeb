"""Whether a Pod is one member of a Kueue pod group, and the group's metadata problems.

Kueue v0.19.2 names a Pod's group by the ``kueue.x-k8s.io/pod-group-name`` annotation or label
(``GetPodGroupName``) and sizes it by the ``kueue.x-k8s.io/pod-group-total-count`` annotation; its
pod webhook refuses a Pod with one and not the other (``validatePodGroupMetadata``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.kueue.kinds import PodSetRule
from webhook.core.kueue.wellformed import Problem, Problems
from webhook.core.objects.paths import Key, bound, lookup

__all__ = ["group_member"]


def group_member(obj: Mapping[str, Any], rule: PodSetRule, bindings: tuple[Key, ...], problems: Problems) -> bool:
    """Whether the object is one member of a group (a path of ``rule.partial_if`` holds a non-empty
    name, as Kueue's ``GetPodGroupName`` reads it). The group's name and its total count (the
    rule's ``text`` count factors) go together: one without the other is a problem, as Kueue
    v0.19.2's pod webhook refuses it (``validatePodGroupMetadata``: "both the
    'kueue.x-k8s.io/pod-group-total-count' annotation and the 'kueue.x-k8s.io/pod-group-name'
    label should be set")."""
    if not rule.partial_if:
        return False
    names = [bound(p, bindings) for p in rule.partial_if]
    member = any(isinstance(lookup(obj, at), str) and lookup(obj, at) for at in names)
    totals = [bound(f.path, bindings) for f in rule.count if f.text]
    both = " and the ".join(f"{at[-1]!r} {str(at[-2]).removesuffix('s')}" for at in (*totals, names[-1]))
    why = f"Kueue v0.19.2's pod webhook refuses a Pod with one and not the other (both the {both} should be set)"
    if not all(isinstance(lookup(obj, at[:-1]), Mapping | None) for at in (*names, *totals)):
        return member  # a label or annotation map that is no map: a problem of its own
    if member:
        problems.extend(Problem(at, None, why, missing=True) for at in totals if lookup(obj, at) is None)
    elif any(lookup(obj, at) is not None for at in totals):
        # Kueue names the label (its getGroupNamePath) unless the annotation holds a name.
        at = names[-1]
        found = lookup(obj, at)
        if found is None:
            problems.append(Problem(at, None, why, missing=True))
        elif isinstance(found, str):
            problems.append(Problem(at, found, f"a pod group's name, not empty: {why}"))
    return member
