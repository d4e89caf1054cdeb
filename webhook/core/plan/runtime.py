"""Planning a workload whose pods come from a runtime it references (a TrainJob, SPEC §4).

The kind's row has a :class:`~webhook.core.kueue.kind_model.RuntimeSource`. :func:`plan_with_runtime`
finds the runtime (the server's cache, ``kgov mutate --runtime``), plans the object's working
copy with the resolved pod templates (:func:`webhook.core.kueue.trainer.expanded`) exactly as any
workload, then writes back what the rules set in those templates as the object's own patch to the
runtime: one ``runtimePatches`` entry whose ``manager`` is the governor's, one ``replicatedJobs``
item per job it changes, holding only the fields it sets (labels and annotations key by key, the
whole ``nodeSelectorTerms`` list, which a strategic merge patch replaces). Trainer merges the entries
in order into the runtime's template, Kueue v0.19.2 builds the TrainJob's podsets from the result
(:mod:`webhook.core.kueue.trainer`), so the governed values reach both.

A change the patch cannot carry (``priorityClassName``: Trainer v2.2.1's ``PodSpecPatch`` has no
such field) is reported under its rule instead ("not applied", a denial under ``enforce``), and so
is every pod rule when the runtime is not known. On UPDATE the entry is written only while the
TrainJob is suspended before or after the update (Trainer's webhook refuses other changes of
``runtimePatches``, ``checkRuntimePatchesImmutability``); of a running one, an entry the update
drops is put back as it was, at its place (a re-apply of the original manifest), and any other
value is only reported.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any

from webhook.core.kueue.kind_model import RuntimeSource, WorkloadKind
from webhook.core.kueue.trainer import RuntimeLookup, expanded, find_runtime
from webhook.core.objects.paths import Key, dotted, lookup
from webhook.core.plan.draft import Change, Draft, Plan, Rule, Shape, json_value, malformed
from webhook.core.plan.patch import apply_patch, to_json_patch
from webhook.core.platform.policy import TeamPolicyCompiled

__all__ = ["plan_with_runtime", "say_not_applied"]

#: A podset's pod template below the resolved jobs: (resolved, "replicatedJobs", i, ...).
_TEMPLATE = ("template", "spec", "template")


def say_not_applied(team: TeamPolicyCompiled, plan: Plan, why: str, warn_only: bool = False) -> None:
    """Report that the pod rules of ``team`` cannot be applied, and ``why``: under each rule's
    enforcement (``default`` as a warning: the rule would have set something; every one as a
    warning with ``warn_only``)."""
    levels = [
        ("podPriority", team.podPriority.enforcement if team.podPriority else None),
        ("topology", team.topology.enforcement if team.topology else None),
        ("nodeAffinity", "warn" if team.nodeAffinity else None),
    ]
    for rule, enforcement in levels:
        if enforcement is not None:
            level = "warn" if enforcement == "default" or warn_only else enforcement
            plan.report(level, rule, f"not applied: {why}")


def _enforcement(team: TeamPolicyCompiled, rule: str) -> Any:
    if rule == "podPriority" and team.podPriority is not None:
        return team.podPriority.enforcement
    if rule == "topology" and team.topology is not None:
        return team.topology.enforcement
    return "warn"


def _suspended(obj: Mapping[str, Any] | None) -> bool:
    return obj is not None and lookup(obj, ("spec", "suspend")) is True


def plan_with_runtime(
    new: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    namespace: str,
    row: WorkloadKind,
    team: TeamPolicyCompiled,
    runtimes: RuntimeLookup | None,
    plan_doc: Callable[[Mapping[str, Any], Mapping[str, Any] | None], Plan],
) -> Plan:
    """Plan ``new`` (and ``old`` on UPDATE) of kind ``row`` on its runtime's resolved templates;
    ``plan_doc(new, old)`` is the ordinary planning (CREATE or UPDATE) of a working copy."""
    source = row.runtime
    assert source is not None
    bad = _malformed_entries(new, old, source)
    if bad:
        return malformed(*bad)
    runtime, described = find_runtime(new, namespace, runtimes)
    if runtime is None:
        plan = plan_doc(new, old)
        if not plan.skipped and not plan.invalid:  # an UPDATE is only warned: it never blocks Kueue
            say_not_applied(team, plan, f"{row.kind}'s pods come from its runtime: {described}", old is not None)
        return plan
    doc = expanded(new, runtime)
    plan = plan_doc(doc, expanded(old, runtime) if old is not None else None)
    jobs = doc[source.resolved]["replicatedJobs"]
    names = [job.get("name") if isinstance(job, Mapping) else None for job in jobs]
    _reword(plan, source, described, names)
    if not plan.changes or not plan.allowed:
        return plan
    try:
        planned = apply_patch(doc, to_json_patch(plan.changes))
        writes, kept = _writes(plan, doc, planned, source, names, team, described)
        if writes and old is not None and not _suspended(old) and not _suspended(new):
            plan.changes = _frozen(plan, new, old, source, kept, writes, row.kind)
        else:
            plan.changes = _written(new, source, kept, writes)
    except Shape as shape:
        return malformed(shape)
    if not plan.changes and not plan.denials and not plan.warnings and old is not None:
        plan.skipped = "UPDATE: no governed value introduced, changed or dropped"
    return plan


def _malformed_entries(new: Mapping[str, Any], old: Mapping[str, Any] | None, source: RuntimeSource) -> list[Shape]:
    """The ``runtimePatches`` entries (Trainer v2.2.1 ``RuntimePatch``, a struct) that are no
    object, or whose ``trainingRuntimeSpec`` is no object: the CRD's schema refuses them, and the
    merge of the runtime cannot read them. On UPDATE only when the update changes the list."""
    patches = lookup(new, source.patches)
    if not isinstance(patches, list) or (old is not None and lookup(old, source.patches) == patches):
        return []
    bad: list[Shape] = []
    for index, entry in enumerate(patches):
        if not isinstance(entry, Mapping):
            bad.append(Shape((*source.patches, index), entry))
        elif entry.get("trainingRuntimeSpec") is not None and not isinstance(entry["trainingRuntimeSpec"], Mapping):
            bad.append(Shape((*source.patches, index, "trainingRuntimeSpec"), entry["trainingRuntimeSpec"]))
    return bad


def _entry_index(obj: Mapping[str, Any], source: RuntimeSource) -> int | None:
    patches = lookup(obj, source.patches)
    items = patches if isinstance(patches, list) else []
    return next((i for i, e in enumerate(items) if isinstance(e, Mapping) and e.get("manager") == source.manager), None)


def _frozen(
    plan: Plan,
    new: Mapping[str, Any],
    old: Mapping[str, Any],
    source: RuntimeSource,
    kept: list[Change],
    writes: list[_Write],
    kind: str,
) -> list[Change]:
    """An UPDATE of a running workload (suspended neither before nor after), whose patch list
    Trainer lets no one change: the governor's entry the update drops is put back as it was, at its
    place (no change to Trainer, and a re-apply of the original manifest keeps working); any other
    write is reported, not made."""
    at_old, at_new = _entry_index(old, source), _entry_index(new, source)
    if at_old is not None and at_new is None:
        patches = lookup(new, source.patches)
        entry = lookup(old, (*source.patches, at_old))
        rule, reason = writes[0][3], writes[0][4]
        draft = Draft(new)
        where = dotted(source.patches)
        if isinstance(patches, list):
            draft.set(
                (*source.patches, min(at_old, len(patches))), entry, rule, f"put back: the update drops it ({reason})"
            )
        elif patches is None:
            draft.set(source.patches, [entry], rule, f"put back: the update drops it ({reason})")
        plan.report("warn", rule, f"the governor's entry of {where} (manager {source.manager!r}) is put back as it was")
        return [*kept, *draft.changes]
    for rule, reason in dict.fromkeys((w[3], w[4]) for w in writes):
        plan.report(
            "warn",
            rule,
            f"not written ({reason}): {dotted(source.patches)} can change only while the {kind} is suspended",
        )
    return kept


#: One field of one job's pod template to write: (job name, path below the pod template, value, rule, reason).
_Write = tuple[str, tuple[Key, ...], Any, Rule, str]


def _writes(
    plan: Plan,
    doc: Mapping[str, Any],
    planned: Mapping[str, Any],
    source: RuntimeSource,
    names: list[Any],
    team: TeamPolicyCompiled,
    described: str,
) -> tuple[list[_Write], list[Change]]:
    """The pod template fields the plan sets, as writes of a runtime patch, and the plan's other
    changes (on the object itself); each change no patch can carry is reported."""
    kept: list[Change] = []
    fields: dict[tuple[int, tuple[Key, ...]], tuple[Rule, str]] = {}
    for change in plan.changes:
        path = change.path
        if not path or path[0] != source.resolved:
            kept.append(change)
            continue
        index, below = path[2], path[3 + len(_TEMPLATE) :]
        if not isinstance(index, int):
            continue
        writable = next((w for w in source.writable if below[: len(w)] == w), None)
        if writable is not None:
            fields.setdefault((index, writable), (change.rule, change.reason))
            continue
        if len(below) < 2 and isinstance(change.value, Mapping):  # a whole map added: split by field
            for w in source.writable:
                if w[: len(below)] == below and lookup(change.value, w[len(below) :]) is not None:
                    fields.setdefault((index, w), (change.rule, change.reason))
            continue
        rule = change.rule
        where = f"{dotted(below)} of replicatedJob {names[index]!r}"
        message = (
            f"not applied: {where} is set by the runtime only ({described}): {dotted(source.patches)} "
            f"cannot set it; set {json_value(change.value)} there ({change.reason})"
        )
        enforcement = _enforcement(team, rule)
        plan.report("warn" if enforcement == "default" else enforcement, rule, message)
    writes: list[_Write] = []
    for (index, field), (rule, reason) in fields.items():
        before = lookup(doc, (source.resolved, "replicatedJobs", index, *_TEMPLATE, *field))
        after = lookup(planned, (source.resolved, "replicatedJobs", index, *_TEMPLATE, *field))
        name = names[index]
        if not isinstance(name, str):
            continue
        if isinstance(after, Mapping) and field[-1] != "affinity":  # labels, annotations, nodeSelector: by key
            old = before if isinstance(before, Mapping) else {}
            for key, value in after.items():
                if old.get(key) != value:
                    writes.append((name, (*field, key), value, rule, reason))
        elif field[-1] == "affinity":  # the required node affinity, whose nodeSelectorTerms a patch replaces
            required = ("nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
            if lookup(after, required) != lookup(before, required):
                writes.append((name, (*field, *required), lookup(after, required), rule, reason))
        elif after != before:
            writes.append((name, field, after, rule, reason))
    return writes, kept


def _written(new: Mapping[str, Any], source: RuntimeSource, kept: list[Change], writes: list[_Write]) -> list[Change]:
    """The plan's changes on the object: ``kept`` (outside the resolved templates, the working
    copy and the object are the same there) then ``writes`` into the governor's patch entry."""
    if not writes:
        return kept
    draft = Draft(new)
    patches = draft.get(source.patches)
    if patches is not None and not isinstance(patches, list):
        raise Shape(source.patches, patches, "array")
    mine = next(
        (i for i, e in enumerate(patches or []) if isinstance(e, Mapping) and e.get("manager") == source.manager),
        None,
    )
    if mine is None:
        jobs: list[dict[str, Any]] = []
        for name, path, value, _, _ in writes:
            job = next((j for j in jobs if j["name"] == name), None)
            if job is None:
                job = _job(name)
                jobs.append(job)
            _put(job["template"]["spec"]["template"], path, copy.deepcopy(value))
        entry = {"manager": source.manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs}}}}
        rule, reason = writes[0][3], writes[0][4]
        if patches is None:
            draft.set(source.patches, [entry], rule, reason)
        else:
            draft.append(source.patches, entry, rule, reason)
        return [*kept, *draft.changes]
    base: tuple[Key, ...] = (*source.patches, mine, "trainingRuntimeSpec", "template", "spec", "replicatedJobs")
    for name, path, value, rule, reason in writes:
        listed = draft.get(base)
        items = listed if isinstance(listed, list) else []
        at = next((i for i, j in enumerate(items) if isinstance(j, Mapping) and j.get("name") == name), None)
        if at is not None:
            draft.set((*base, at, *_TEMPLATE, *path), value, rule, reason)
            continue
        job = _job(name)
        _put(job["template"]["spec"]["template"], path, copy.deepcopy(value))
        if listed is None:
            draft.set(base, [job], rule, reason)
        else:
            draft.append(base, job, rule, reason)
    return [*kept, *draft.changes]


def _job(name: str) -> dict[str, Any]:
    return {"name": name, "template": {"spec": {"template": {}}}}


def _put(node: dict[str, Any], path: tuple[Key, ...], value: Any) -> None:
    for key in path[:-1]:
        node = node.setdefault(str(key), {})
    node[str(path[-1])] = value


def _reword(plan: Plan, source: RuntimeSource, described: str, names: list[Any]) -> None:
    """Messages name a resolved pod template as the job of the runtime it comes from."""
    pattern = re.compile(re.escape(source.resolved) + r"\.replicatedJobs\[(\d+)\](\.template\.spec\.template)?")

    def name(match: re.Match[str]) -> str:
        index = int(match.group(1))
        job = names[index] if index < len(names) else index
        return f"<replicatedJob {job!r} of {described} with spec.runtimePatches>"

    # Kueue's trainjob webhook adds the same advice to the TAS findings of its podsets.
    advice = f"; adjust the annotations in spec.runtimePatches or in the template of {described}"
    for messages in (plan.denials, plan.warnings, plan.notes):
        messages[:] = [pattern.sub(name, m) + (advice if "(Kueue v0.19.2 Validate" in m else "") for m in messages]
