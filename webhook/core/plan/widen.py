"""Bounded patience, then widening: what the governor does with a workload that waits on topology.

Topology mode ``auto`` (or ``required``) places a podset in one domain of a level; while other
jobs hold every such domain, Kueue keeps the workload pending however long. A team's topology
policy has a ``patience`` (:data:`webhook.core.platform.fields.DEFAULT_PATIENCE`, or ``never``):
a workload still pending *because of topology* after its patience gets the next step of the ladder
(:func:`~webhook.core.plan.widen_history.next_placement`) on the podsets Kueue could not place.

Kueue's word for "because of topology" (v0.19.2): the scheduler sets the Workload's condition
``QuotaReserved`` to ``False`` with the assignment's message (``scheduler.go``: reason ``Pending``,
or a granular reason under the ``UnadmittedWorkloadsObservability`` gate), which joins, per podset
that does not fit, ``couldn't assign flavors to pod set <name>: <reasons>``
(``flavorassigner.Assignment.Message``). TAS is asked only once the quota of the chosen flavor fits
(``flavorassigner.go``: ``FindTopologyAssignmentsForWorkload`` when the mode is ``Fit``), and its
failure adds ``topology "<name>" doesn't allow to fit any of N pod(s)`` or ``… allows to fit only K
out of N …`` (``tas_flavor_snapshot.go``: ``notFitMessage``, ``multiLayerNotFitMessage``). So a
podset whose reasons hold that sentence for the team's Topology waits for a domain, not for quota;
a message that ends ``Pending the preemption of N workload(s)`` waits for room being made, and is
left alone. A workload with quota reserved or admitted is never touched. Only Kueue's word on the
Workload as it is now counts: the condition's ``observedGeneration`` is the Workload's
``generation`` (``workload.UnsetQuotaReservationWithCondition`` sets it on each attempt), so a
message from before the governor's last step is not read as a refusal of the step.

Kueue asks TAS only when the quota fits, and while the podset waits at a level no free domain holds,
BestEffortFIFO gives the quota that frees to the jobs behind it; the Workload's message then says
quota again. The caller may remember Kueue's topology refusal of this Workload ``generation``
(``earlier``): a workload that waits for quota after such a refusal still waits *because of
topology*, and is widened once its patience is over, so that it fits when the quota comes back.

**The patience is the workload's, not each step's.** It counts from when the workload began to
wait (the Workload's creation, or its requeue after an eviction, as Kueue counts its queued wait:
:func:`waiting_since`), time spent waiting for quota or untried by Kueue included. Once it is over, each
further step follows as soon as Kueue has refused the previous one: a patience of ``60s`` bounds
the wait for a domain by about 60 s, not 60 s per level.

Only what the policy wrote is widened: a podset with no recorded step is widened only when its TAS
annotations (a level, or a level with slices) are exactly what the team's policy writes for it on
the current node inventory (:func:`~webhook.core.plan.create.plan_object` run on the object
without its TAS annotations), and one already widened only when it still holds the last step's
placement. The webhook does not mark its writes, so a user's own annotation that equals the
policy's choice is read as the policy's.

Kueue v0.19.2 does not rebuild a Workload when only a pod template's annotations change
(``jobframework.EquivalentToWorkload`` compares counts, containers and tolerations), so a step is
two patches: the object's pod templates and history (the truth, kept if Kueue rebuilds the
Workload), then the pending Workload's ``spec.podSets[*].topologyRequest`` (mutable until quota is
reserved: ``ValidateWorkloadUpdate``) (:func:`workload_patch`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.core.kueue.inventory import NodeInventory
from webhook.core.kueue.kinds import WorkloadKind
from webhook.core.kueue.view import PodSet, kueue_view
from webhook.core.objects.paths import lookup
from webhook.core.plan.create import plan_object
from webhook.core.plan.patch import pointer
from webhook.core.plan.rules.topology import TAS_ANNOTATIONS
from webhook.core.plan.widen_history import (
    Placement,
    Step,
    history_path,
    history_value,
    last_step_of,
    next_placement,
    placement_of,
    read_history,
    rfc3339,
    seconds_of,
    start_of,
)
from webhook.core.platform.policy import TeamPolicyCompiled

__all__ = [
    "Decision",
    "admitted",
    "decide",
    "kueue_has_tried",
    "kueue_refusal",
    "tas_no_fit",
    "topology_pending",
    "waiting_since",
    "workload_patch",
]

_PODSET = re.compile(r"couldn't assign flavors to pod set ([^:;,\s]+): ")
_PREEMPTING = "Pending the preemption of"


def _conditions(workload: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found = lookup(workload, ("status", "conditions"))
    out: dict[str, Mapping[str, Any]] = {}
    for item in found if isinstance(found, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("type"), str):
            out[item["type"]] = item
    return out


def admitted(workload: Mapping[str, Any]) -> bool:
    """Whether Kueue reserved quota for, or admitted, the Workload (``status.admission`` set, or
    condition ``QuotaReserved`` or ``Admitted`` ``True``): it is never touched then."""
    if lookup(workload, ("status", "admission")) is not None:
        return True
    conditions = _conditions(workload)
    return any(conditions.get(kind, {}).get("status") == "True" for kind in ("QuotaReserved", "Admitted"))


def kueue_has_tried(workload: Mapping[str, Any]) -> bool:
    """Whether the Workload's ``QuotaReserved`` condition is Kueue's word on its current spec: the
    condition's ``observedGeneration`` equals ``metadata.generation`` (either one missing: taken
    as current). False after a step the governor patched in and Kueue has not tried yet."""
    condition = _conditions(workload).get("QuotaReserved", {})
    generation, observed = lookup(workload, ("metadata", "generation")), condition.get("observedGeneration")
    return not (isinstance(generation, int) and isinstance(observed, int) and observed != generation)


def tas_no_fit(message: str, topology: str | None) -> dict[str, str]:
    """The podsets (Kueue's names) that a ``QuotaReserved=False`` message says Topology
    ``topology`` (None: any Topology) cannot place, each with its reasons; {} when it names none."""
    marks = list(_PODSET.finditer(message))
    name = re.escape(topology) if topology is not None else '[^"]*'
    sentence = re.compile(f'topology "{name}" (?:doesn\'t allow to fit|allows to fit only)')
    out: dict[str, str] = {}
    for index, mark in enumerate(marks):
        end = marks[index + 1].start() if index + 1 < len(marks) else len(message)
        reasons = message[mark.end() : end].rstrip("; ")
        if sentence.search(reasons):
            out[mark.group(1)] = reasons
    return out


def kueue_refusal(workload: Mapping[str, Any]) -> str | None:
    """Kueue's word on the Workload as it is now when it refuses it: the message of its
    ``QuotaReserved=False`` condition, if Kueue wrote it for the current generation
    (:func:`kueue_has_tried`) and the Workload holds no quota; else None."""
    if admitted(workload) or not kueue_has_tried(workload):
        return None
    condition = _conditions(workload).get("QuotaReserved", {})
    message = condition.get("message")
    return message if condition.get("status") == "False" and isinstance(message, str) else None


def topology_pending(workload: Mapping[str, Any], topology: str, earlier: str | None = None) -> dict[str, str]:
    """The podsets (Kueue's names) that Topology ``topology`` keeps the Workload from, each with
    Kueue's reasons: those its ``QuotaReserved=False`` message names (:func:`tas_no_fit`), or, when
    it names none (a wait for quota), those of ``earlier``, a message Kueue gave the same Workload
    generation before. {} when it is admitted, waits for a preemption it has started, or Kueue has
    not tried its current spec (:func:`kueue_refusal`)."""
    message = kueue_refusal(workload)
    if message is None or _PREEMPTING in message:
        return {}
    found = tas_no_fit(message, topology)
    if not found and earlier is not None and _PREEMPTING not in earlier:
        found = tas_no_fit(earlier, topology)
    return found


def waiting_since(workload: Mapping[str, Any]) -> float | None:
    """Since when the workload waits (seconds since the epoch), as Kueue v0.19.2 counts its queued
    wait (``workload.QueuedWaitTime``): the ``lastTransitionTime`` of its ``Requeued`` condition (set
    when it is queued again after an eviction), else its ``creationTimestamp``; None when that does
    not read. Not when Kueue first tried it: under ``SchedulingEquivalenceHashing`` Kueue sets aside
    the Workloads of the same shape as one it refused, untried and without a condition, and tries
    them one by one as room frees; each has waited since its creation."""
    requeued = _conditions(workload).get("Requeued")
    if requeued is not None:
        return seconds_of(requeued.get("lastTransitionTime"))
    return seconds_of(lookup(workload, ("metadata", "creationTimestamp")))


@dataclass
class Decision:
    """What to do with one pending workload.

    ``action``: ``widen`` (``object_patch`` then ``workload_patch``), ``sync`` (the Workload
    still asks for less than the object's recorded step: ``workload_patch`` only), ``wait``
    (until ``at``, seconds since the epoch) or ``leave`` (never, for now). ``why``: one line.
    ``step``: the step taken (``widen``)."""

    action: Literal["widen", "sync", "wait", "leave"]
    why: str
    at: float | None = None
    step: Step | None = None
    object_patch: list[dict[str, Any]] = field(default_factory=list)
    workload_patch: list[dict[str, Any]] = field(default_factory=list)


def _tas(podset: PodSet) -> dict[str, Any]:
    return {key: value for key, value in podset.annotations.items() if key in TAS_ANNOTATIONS}


def _policy_choice(
    obj: Mapping[str, Any], row: WorkloadKind, team: TeamPolicyCompiled, inventory: NodeInventory | None
) -> dict[str, dict[str, Any]]:
    """Podset name → the TAS annotations the policy writes on ``obj`` without its own."""
    bare = copy.deepcopy(dict(obj))
    for podset in kueue_view(bare, row).podsets:
        annotations = lookup(bare, podset.at(*podset.rule.layout.annotations))
        if isinstance(annotations, dict):
            for key in TAS_ANNOTATIONS:
                annotations.pop(key, None)
    planned = plan_object(bare, row, team, inventory)
    if planned.denials:
        return {}
    chosen: dict[str, dict[str, Any]] = {}
    for podset in kueue_view(bare, row).podsets:
        base = podset.at(*podset.rule.layout.annotations)
        for change in planned.changes:
            if (
                change.rule == "topology"
                and tuple(change.path[: len(base)]) == base
                and len(change.path) == len(base) + 1
            ):
                chosen.setdefault(podset.name, {})[str(change.path[-1])] = change.value
    return chosen


def _members(podsets: Mapping[str, PodSet], name: str) -> list[PodSet]:
    """``name`` and the podsets of its ``podset-group-name`` (Kueue places a group as one)."""
    podset = podsets[name]
    if podset.group is None:
        return [podset]
    return [p for p in podsets.values() if p.group == podset.group]


def decide(
    workload: Mapping[str, Any],
    obj: Mapping[str, Any],
    row: WorkloadKind,
    team: TeamPolicyCompiled,
    inventory: NodeInventory | None,
    now: float,
    earlier: str | None = None,
) -> Decision:
    """What the governor does with ``workload`` (a Kueue Workload) of ``obj`` (its owner, of kind
    ``row``) in a namespace of ``team``, at ``now`` (seconds since the epoch); ``earlier``: a
    ``QuotaReserved=False`` message Kueue gave this Workload generation before (see
    :func:`topology_pending`). See the module docstring for the rules."""
    placement = team.topology
    if admitted(workload):
        return Decision("leave", "quota is reserved or the workload is admitted")
    if placement is None or placement.patienceSeconds is None:
        return Decision("leave", f"team {team.team!r} has no patience (topology policy)")
    if row.suspend is None or lookup(obj, row.suspend) is not True:
        return Decision("leave", f"{row.kind} is not suspended (or has no suspend field)")
    history = read_history(obj, row)
    if history is None:
        return Decision("leave", "its widening history annotation is not one the governor wrote")
    podsets = {p.name: p for p in kueue_view(obj, row).podsets if p.present}
    synced = workload_patch(workload, {name: placement_of(_tas(p)) for name, p in podsets.items()}, history)
    if synced:
        return Decision("sync", "the Workload asks for less than the recorded widening", workload_patch=synced)
    if not kueue_has_tried(workload):
        return Decision("leave", "Kueue has not tried the Workload as it is now")
    failing = topology_pending(workload, placement.topologyName, earlier)
    if not failing:
        return Decision("leave", "not pending because of topology")
    since = waiting_since(workload)
    stepped = seconds_of(history[-1].at) if history else None
    spent = since is not None and stepped is not None and stepped >= since  # a step taken in this wait
    due = now if spent else (since or now) + placement.patienceSeconds
    if now < due:
        return Decision("wait", f"pending on topology; patience {placement.patienceSeconds}s", at=due)
    names = [p.name for name in failing if name in podsets for p in _members(podsets, name)]
    names = list(dict.fromkeys(names))
    if not names:
        return Decision("leave", "Kueue names no podset of the object")
    chosen: dict[str, dict[str, Any]] | None = None
    current = {name: placement_of(_tas(podsets[name])) for name in names}
    steps: set[tuple[Placement, Placement]] = set()
    for name in names:
        now_at = current[name]
        if now_at is None:
            return Decision("leave", f"podset {name!r} has no single required or preferred level")
        last = last_step_of(name, history)
        if last is None:
            chosen = _policy_choice(obj, row, team, inventory) if chosen is None else chosen
            if chosen.get(name) != _tas(podsets[name]):
                return Decision("leave", f"podset {name!r}: its topology is not the policy's choice (the user's)")
        elif last.after != now_at:
            return Decision("leave", f"podset {name!r}: changed since the governor widened it")
        start = start_of(name, now_at, history)
        after = next_placement(now_at, start, placement.levels)
        if after is None:
            return Decision("leave", f"podset {name!r}: {now_at.describe()} is the end of the ladder")
        steps.add((now_at, after))
    if len(steps) != 1:
        return Decision("leave", "the podsets of one group stand at different steps")
    (before, after) = steps.pop()
    reason = "; ".join(f"{name}: {failing[name]}" for name in failing if name in names)
    step = Step(tuple(names), before, after, rfc3339(now), reason)
    return Decision(
        "widen",
        f"waiting for {int(now - (since or now))}s, on topology{_now_quota(workload, placement.topologyName)} "
        f"(patience {placement.patienceSeconds}s): "
        f"{before.describe()} → {after.describe()}",
        step=step,
        object_patch=object_patch(obj, row, [podsets[n] for n in names], step, history),
        workload_patch=workload_patch(workload, {n: after for n in names}, [*history, step]),
    )


def _now_quota(workload: Mapping[str, Any], topology: str) -> str:
    """`` (now for quota)`` when the Workload's message no longer names the topology (the step
    rests on Kueue's earlier refusal of this generation), else ``""``."""
    message = kueue_refusal(workload)
    return "" if message is not None and tas_no_fit(message, topology) else " (now for quota)"


def object_patch(
    obj: Mapping[str, Any], row: WorkloadKind, podsets: Sequence[PodSet], step: Step, history: Sequence[Step]
) -> list[dict[str, Any]]:
    """The JSON Patch of one step on the object: a ``test`` of its ``resourceVersion`` (the patch
    applies to the object read, or fails), the podsets' TAS annotations of ``step.before`` removed
    and those of ``step.after`` added, the history written."""
    version = lookup(obj, ("metadata", "resourceVersion"))
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion", "value": version}]
    for podset in podsets:
        base = tuple(str(k) for k in podset.at(*podset.rule.layout.annotations))
        ops += [{"op": "remove", "path": pointer((*base, key))} for key in step.before.annotations()]
        ops += [{"op": "add", "path": pointer((*base, k)), "value": v} for k, v in step.after.annotations().items()]
    path = history_path(row)
    annotations = lookup(obj, path[:-1])
    value = history_value([*history, step])
    if isinstance(annotations, Mapping):
        ops.append({"op": "add", "path": pointer(tuple(str(k) for k in path)), "value": value})
    else:
        ops.append({"op": "add", "path": pointer(tuple(str(k) for k in path[:-1])), "value": {path[-1]: value}})
    return ops


#: The fields of a Workload podset's ``topologyRequest`` that a :class:`Placement` sets (v1beta2
#: ``PodSetTopologyRequest``); Kueue's others (``podIndexLabel``, ``subGroupIndexLabel``,
#: ``subGroupCount``, ``podSetGroupName``) come from the job and are kept.
_REQUEST_FIELDS = ("required", "preferred", "podSetSliceRequiredTopology", "podSetSliceSize")


def _request_of(placement: Placement) -> dict[str, Any]:
    """The ``topologyRequest`` fields ``placement`` asks for."""
    out: dict[str, Any] = {placement.mode: placement.level}
    if placement.slices is not None:
        out.update({"podSetSliceSize": placement.slices[0], "podSetSliceRequiredTopology": placement.slices[1]})
    return out


def workload_patch(
    workload: Mapping[str, Any], wanted: Mapping[str, Placement | None], history: Sequence[Step]
) -> list[dict[str, Any]]:
    """The JSON Patch that makes the Workload's ``spec.podSets[*].topologyRequest`` ask for
    ``wanted`` (podset name → placement) where a recorded step says so and it asks otherwise;
    [] when nothing differs. It starts with a ``test`` of the Workload's ``resourceVersion``."""
    podsets = lookup(workload, ("spec", "podSets"))
    ops: list[dict[str, Any]] = []
    for index, podset in enumerate(podsets if isinstance(podsets, list) else []):
        name = podset.get("name") if isinstance(podset, Mapping) else None
        target = wanted.get(name) if isinstance(name, str) else None
        last = last_step_of(name, history) if isinstance(name, str) else None
        if target is None or last is None or last.after != target:
            continue
        request = podset.get("topologyRequest")
        request = request if isinstance(request, Mapping) else {}
        asked = _request_of(target)
        if {k: request[k] for k in _REQUEST_FIELDS if k in request} == asked:
            continue
        at = ("spec", "podSets", str(index), "topologyRequest")
        if not request:
            ops.append({"op": "add", "path": pointer(at), "value": asked})
            continue
        ops += [{"op": "remove", "path": pointer((*at, k))} for k in _REQUEST_FIELDS if k in request and k not in asked]
        ops += [{"op": "add", "path": pointer((*at, k)), "value": v} for k, v in asked.items() if request.get(k) != v]
    if not ops:
        return []
    version = lookup(workload, ("metadata", "resourceVersion"))
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": version}, *ops]
