"""The never-admitted recheck of an UPDATE (SPEC §3; :mod:`webhook.core.plan.update`).

An update that changes how Kueue counts or places a podset (its pod count, its per-pod requests,
any of its TAS annotations or its ``podset-group-name``) has the object it leaves checked as on
CREATE for a workload Kueue can never admit (:func:`~webhook.core.plan.rules.stranded.check_admissible`),
and for the TAS annotations Kueue's webhook refuses, podset groups among them
(:func:`~webhook.core.plan.rules.kueue_tas.kueue_tas_findings`, the very findings of CREATE). Each
finding is a warning, never a denial (Kueue and controllers resize workloads by UPDATE too),
naming what the update changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from webhook.core.kueue.inventory import NodeInventory
from webhook.core.kueue.kinds import WorkloadKind
from webhook.core.kueue.view import PodSet, kueue_view
from webhook.core.objects.paths import Key
from webhook.core.objects.quantity import format_quantity
from webhook.core.plan.draft import Draft, Plan
from webhook.core.plan.rules.kueue_tas import kueue_tas_findings
from webhook.core.plan.rules.queue import QUEUE_LABEL, workload_labels
from webhook.core.plan.rules.stranded import WAITS_FOR_NODES, check_admissible
from webhook.core.plan.rules.topology import GROUP_NAME, TAS_ANNOTATIONS, elastic_forbidden
from webhook.core.platform.policy import TeamPolicyCompiled

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
    among them, so the advice names making the pods fewer or smaller). TAS annotations Kueue refuses
    (a podset group among them) are said so as on CREATE, and their podsets get no placement
    finding (:func:`~webhook.core.plan.rules.stranded.check_topology_fits` skips them); a podset that
    only waits for nodes down now is told so, without advice to undo the update."""
    planned = kueue_view(draft.doc, row)
    what = "; ".join(changed)
    undo = ": set it back, or make the pods fewer or smaller so that they fit" if sized else ": set it back"
    for message, _ in kueue_tas_findings(planned, elastic_forbidden(draft.doc, row), team.kueue):
        plan.report("warn", "topology", f"{message}; this update {what}: set it back")
    found = Plan()
    check_admissible(planned, team, inventory, workload_labels(draft.doc, row).get(QUEUE_LABEL), found)
    for finding in [*found.denials, *found.warnings]:
        rule, _, message = finding.partition(": ")
        # A podset that waits for nodes down now fits the cluster: the update is not why it waits.
        advice = "" if WAITS_FOR_NODES in message else undo
        plan.report("warn", rule, f"{message}; this update {what}{advice}")
