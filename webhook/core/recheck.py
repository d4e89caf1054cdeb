"""The never-admitted recheck of an UPDATE (SPEC §3; :mod:`webhook.core.update`).

An update that changes how Kueue counts or places a podset (its pod count, its per-pod requests,
any of its TAS annotations or its ``podset-group-name``) has the object it leaves checked as on
CREATE for a workload Kueue can never admit (:func:`~webhook.core.rules.stranded.check_admissible`),
plus Kueue's rules of a podset group: exactly 2 podsets, at least one of 1 pod, both asking for
the same required or preferred level (``jobframework.ValidatePodSetGroupingTopology`` in Kueue
v0.19.2). Each finding is a warning,
never a denial (Kueue and controllers resize workloads by UPDATE too), naming what the update
changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from webhook.core.draft import Draft, Plan
from webhook.core.inventory import NodeInventory
from webhook.core.kinds import WorkloadKind
from webhook.core.paths import Key
from webhook.core.policy import TeamPolicyCompiled
from webhook.core.quantity import format_quantity
from webhook.core.rules.queue import QUEUE_LABEL, workload_labels
from webhook.core.rules.stranded import WAITS_FOR_NODES, check_admissible
from webhook.core.rules.topology import GROUP_NAME, PREFERRED, REQUIRED, TAS_ANNOTATIONS, podset_groups
from webhook.core.view import PodSet, kueue_view

__all__ = ["recheck_admissible", "resized", "retopologized"]

_PLACEMENT = (*TAS_ANNOTATIONS, GROUP_NAME)


def _requests(podset: PodSet) -> str:
    items = [f"{name}: {format_quantity(amount)}" for name, amount in sorted((podset.requests or {}).items()) if amount]
    return "{" + ", ".join(items) + "}"


def resized(podsets: Sequence[PodSet], old_podsets: Mapping[tuple[Key, ...], PodSet]) -> list[str]:
    """What the update changes in Kueue's counting of each podset (pods, per-pod requests), e.g.
    ``changes podset 'main' from 2 to 4 pods``; a podset the update adds is named with its pods."""
    found: list[str] = []
    for podset in podsets:
        if not podset.present:
            continue
        before = old_podsets.get(podset.path)
        if before is None:
            found.append(f"adds podset {podset.name!r} ({podset.count} pods)")
            continue
        if podset.count != before.count:
            found.append(f"changes podset {podset.name!r} from {before.count} to {podset.count} pods")
        if podset.requests is not None and before.requests is not None and podset.requests != before.requests:
            found.append(
                f"changes podset {podset.name!r}'s per-pod requests from {_requests(before)} to {_requests(podset)}"
            )
    return found


def retopologized(podsets: Sequence[PodSet], old_podsets: Mapping[tuple[Key, ...], PodSet]) -> list[str]:
    """What the update introduces, changes or removes among each stored podset's TAS annotations
    and ``podset-group-name`` (``podsets``: the object as planned, with dropped values put back),
    e.g. ``changes podset 'main''s kueue.x-k8s.io/podset-required-topology from 'a' to 'b'``."""
    found: list[str] = []
    for podset in podsets:
        before = old_podsets.get(podset.path)
        if not podset.present or before is None:
            continue
        now, then = podset.annotations, before.annotations
        for key in _PLACEMENT:
            value, stored = now.get(key), then.get(key)
            if value == stored:
                continue
            if stored is None:
                found.append(f"sets podset {podset.name!r}'s {key} to {value!r}")
            elif value is None:
                found.append(f"removes podset {podset.name!r}'s {key} ({stored!r})")
            else:
                found.append(f"changes podset {podset.name!r}'s {key} from {stored!r} to {value!r}")
    return found


def _broken_groups(podsets: Sequence[PodSet]) -> list[tuple[str, str]]:
    """Each podset group Kueue v0.19.2 refuses (``ValidatePodSetGroupingTopology``): (the members'
    names as findings name them, why)."""
    found: list[tuple[str, str]] = []
    for members in podset_groups([p for p in podsets if p.present]):
        if members[0].group is None or any(p.partial for p in members):
            continue
        names = ", ".join(repr(p.name) for p in members)
        counts = ", ".join(f"{p.name!r} {p.count} {'pod' if p.count == 1 else 'pods'}" for p in members)
        if len(members) != 2:
            why = f"Kueue takes a group of exactly 2 podsets (it has {len(members)}: {names})"
        elif all(p.count != 1 for p in members):
            why = f"Kueue takes a group only when one of its 2 podsets has 1 pod ({counts})"
        elif not _same_level(members[0].annotations, members[1].annotations):
            asked = "; ".join(f"{p.name!r} {_level(p.annotations)}" for p in members)
            why = f"Kueue takes a group only when both podsets ask for the same required or preferred level ({asked})"
        else:
            continue
        group = f"podset group {members[0].group!r} ({GROUP_NAME})"
        found.append((names, f"{group} can never be admitted: {why} ({_RULE})"))
    return found


_RULE = "Kueue's jobframework.ValidatePodSetGroupingTopology"


def _same_level(first: Mapping[str, object], second: Mapping[str, object]) -> bool:
    """Both ask for a required or preferred level, the same one (Kueue's ``topologyRequestsValid``)."""
    asks = any(first.get(key) is not None for key in (REQUIRED, PREFERRED))
    return asks and all(first.get(key) == second.get(key) for key in (REQUIRED, PREFERRED))


def _level(annotations: Mapping[str, object]) -> str:
    found = [f"{key}={annotations[key]}" for key in (REQUIRED, PREFERRED) if annotations.get(key) is not None]
    return ", ".join(found) or "no required or preferred level"


def recheck_admissible(
    draft: Draft,
    row: WorkloadKind,
    team: TeamPolicyCompiled,
    inventory: NodeInventory | None,
    plan: Plan,
    changed: list[str],
    sized: bool,
) -> None:
    """The never-admitted checks of CREATE on the object this update leaves (``draft.doc``), each
    finding a warning naming ``changed`` (what the update changed; ``sized``: pods or requests
    among them, so the advice names making the pods fewer or smaller). A podset group Kueue refuses
    is said so, in place of the placement findings of its podsets; a podset that only
    waits for nodes down now is told so, without advice to undo the update."""
    planned = kueue_view(draft.doc, row)
    what = "; ".join(changed)
    undo = ": set it back, or make the pods fewer or smaller so that they fit" if sized else ": set it back"
    broken = _broken_groups(planned.podsets)
    for _, message in broken:
        plan.report("warn", "topology", f"{message}; this update {what}: set it back")
    found = Plan()
    check_admissible(planned, team, inventory, workload_labels(draft.doc, row).get(QUEUE_LABEL), found)
    for finding in [*found.denials, *found.warnings]:
        rule, _, message = finding.partition(": ")
        if any(message.startswith(f"podset {names} ") for names, _ in broken):
            continue  # a group Kueue refuses is never placed: its rule is the finding
        # A podset that waits for nodes down now fits the cluster: the update is not why it waits.
        advice = "" if WAITS_FOR_NODES in message else undo
        plan.report("warn", rule, f"{message}; this update {what}{advice}")
