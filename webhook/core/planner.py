"""Mutation planning: an admission request and a team policy in, a list of changes out. Pure.

The rules (SPEC §3), each applied to a workload created in a team's namespace:

========== ======================================================= ==============================
rule        where it lands                                          user value outside the policy
========== ======================================================= ==============================
queue       label ``kueue.x-k8s.io/queue-name`` (kind's labels_at)  enforce: deny / warn: warning
kueuePrio.  label ``kueue.x-k8s.io/priority-class``                 enforce: deny / warn: warning
podPrio.    ``spec.priorityClassName`` of every pod template        enforce: deny / warn: warning
topology    one ``kueue.x-k8s.io/podset-*-topology`` annotation     level not in the Topology
            per pod template, never when the user set any TAS one
nodeAff.    matchExpressions ANDed into every nodeSelectorTerm      (always added, never denied)
suspend     ``true`` when the queue label is added (Kueue's own     —
            webhook only suspends jobs already labelled)
========== ======================================================= ==============================

Nothing is planned on UPDATE (pod templates of Jobs are immutable): a changed or removed queue or
priority label and a changed pod template are validated instead (:func:`validate_update`).
Children of a Kueue-managed owner get nothing. Every change is an ``add`` of something missing,
except setting a present ``suspend: false`` to ``true``. Paths are tuples;
:mod:`webhook.core.patch` turns them into RFC 6902 operations.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from webhook.core.admission import AdmissionRequest, json_type
from webhook.core.inventory import NodeInventory, pod_requests
from webhook.core.kinds import (
    Key,
    PodTemplateRef,
    WorkloadKind,
    child,
    find_kind,
    is_managed_owner,
    iter_pod_templates,
    lookup,
)
from webhook.core.platform import Enforcement
from webhook.core.policy import TeamPolicyCompiled, TopologyPlacement, ValueRule

__all__ = [
    "PRIORITY_LABEL",
    "QUEUE_LABEL",
    "TAS_ANNOTATIONS",
    "Change",
    "Plan",
    "plan_admission",
    "plan_object",
]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
#: Kueue's TAS annotations on a pod template (KEP-2724, user-facing API).
TAS_ANNOTATIONS = (REQUIRED, PREFERRED, UNCONSTRAINED, SLICE_REQUIRED, SLICE_SIZE)
#: Podsets sharing this annotation are placed together (Kueue's cross-podset TAS, e.g. LWS).
GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
_LEVEL_ANNOTATIONS = (REQUIRED, PREFERRED, SLICE_REQUIRED)

Rule = Literal["queue", "kueuePriority", "podPriority", "topology", "nodeAffinity", "suspend"]


@dataclass(frozen=True)
class Change:
    """One edit: ``op`` at ``path`` (keys from the object root) with ``value``, and why."""

    op: Literal["add", "replace"]
    path: tuple[Key, ...]
    value: Any
    rule: Rule
    reason: str


@dataclass
class Plan:
    """The outcome for one request.

    ``denials`` non-empty → the request is refused with those messages; ``warnings`` go back as
    AdmissionReview warnings; ``skipped`` says why no rule applied (untouched object).
    """

    changes: list[Change] = field(default_factory=list)
    denials: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: str = ""
    invalid: bool = False
    #: The rule of each denial and warning, in order (bounded values, for metrics).
    denied_rules: list[str] = field(default_factory=list)
    warned_rules: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.denials

    def report(self, enforcement: Enforcement, rule: str, message: str) -> None:
        """Record ``rule: message`` as a denial (``enforce``) or a warning (``warn``); nothing for
        ``default``, which only fills in what is missing."""
        if enforcement == "enforce":
            self.denials.append(f"{rule}: {message}")
            self.denied_rules.append(rule)
        elif enforcement == "warn":
            self.warnings.append(f"{rule}: {message}")
            self.warned_rules.append(rule)


class _Draft:
    """A working copy of the object plus the changes that produced it.

    Copy-on-write: the draft shares the caller's maps and lists until a change touches them; then
    each container on the changed path is copied once (the request object is never modified).
    """

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.doc: dict[str, Any] = dict(obj)
        self._owned: set[int] = {id(self.doc)}
        self.changes: list[Change] = []

    def get(self, path: tuple[Key, ...]) -> Any:
        return lookup(self.doc, path)

    def set(self, path: tuple[Key, ...], value: Any, rule: Rule, reason: str) -> None:
        """Set ``path`` to ``value``, adding missing maps as one whole map (never replacing one).

        Raises:
            _Shape: a value on the way is not the map (or list) the next key needs.
        """
        node: Any = self.doc
        for index, key in enumerate(path[:-1]):
            found = child(node, key)
            if found is None:
                nested: Any = value
                for inner in reversed(path[index + 1 :]):
                    nested = {inner: nested}
                self._record("add", path[: index + 1], nested, rule, reason)
                return
            _expect_container(path[: index + 1], found, path[index + 1])
            node = found
        existed = isinstance(node, dict) and node.get(path[-1]) is not None
        self._record("replace" if existed else "add", path, value, rule, reason)

    def append(self, list_path: tuple[Key, ...], value: Any, rule: Rule, reason: str) -> None:
        """Append to the list at ``list_path`` (which must exist)."""
        items = self.get(list_path)
        assert isinstance(items, list)
        self._record("add", (*list_path, len(items)), value, rule, reason)

    def _own(self, path: tuple[Key, ...]) -> Any:
        """The container at ``path``, with it and every container above it copied into the draft."""
        node: Any = self.doc
        for key in path:
            found = child(node, key)
            if id(found) not in self._owned:
                found = dict(found) if isinstance(found, dict) else list(found)
                self._owned.add(id(found))
                node[key] = found
            node = found
        return node

    def _record(
        self, op: Literal["add", "replace"], path: tuple[Key, ...], value: Any, rule: Rule, reason: str
    ) -> None:
        parent = self._own(path[:-1])
        key = path[-1]
        if isinstance(parent, list):
            assert isinstance(key, int)
            parent.insert(key, _clone(value))
        else:
            parent[key] = _clone(value)
        # The change keeps its own copy: later edits of the draft, or another change made from the
        # same policy value, must not show through it (nor make YAML anchors in `kgov mutate`).
        self.changes.append(Change(op, path, _clone(value), rule, reason))


def _expect_container(path: tuple[Key, ...], found: Any, next_key: Key) -> None:
    """Raise :class:`_Shape` unless ``found`` can take ``next_key`` (a map for names, a list for indexes)."""
    if isinstance(next_key, int):
        if not isinstance(found, list):
            raise _Shape(path, found, "array")
    elif not isinstance(found, dict):
        raise _Shape(path, found)


def _clone(value: Any) -> Any:
    """A deep copy of a JSON value (maps, lists, scalars); much cheaper than ``copy.deepcopy``."""
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


class _Shape(Exception):
    """A value of the wrong JSON type where the plan must write (``expected``: object or array)."""

    def __init__(self, path: tuple[Key, ...], found: Any, expected: str = "object") -> None:
        self.path = path
        self.found = found
        self.expected = expected


def _dotted(path: tuple[Key, ...]) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out or "<object>"


def _check_value(
    plan: Plan, rule_name: str, rule: ValueRule, value: Any, where: str, team: TeamPolicyCompiled, what: str
) -> None:
    if rule.allowed is None or value in rule.allowed:
        return
    allowed = ", ".join(rule.allowed) or "none"
    message = f"{what} {json_value(value)} ({where}) is not allowed for team {team.team!r}; allowed: {allowed}"
    plan.report(rule.enforcement, rule_name, message)


def _string_map(draft: _Draft, path: tuple[Key, ...]) -> dict[str, Any]:
    value = draft.get(path)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Shape(path, value)
    return value


def plan_admission(request: AdmissionRequest, team: TeamPolicyCompiled, inventory: NodeInventory | None = None) -> Plan:
    """Plan the changes for one request of a team namespace.

    CREATE → :func:`plan_object`; UPDATE → validation only (:func:`validate_update`); other
    operations and subresources → nothing.
    """
    row = find_kind(request.api_version, request.kind)
    if request.sub_resource:
        return Plan(skipped=f"subresource {request.sub_resource!r}")
    if row is None:
        return Plan(skipped=f"kind {request.api_version} {request.kind} is not a workload kind")
    if request.operation == "CREATE" and request.object is not None:
        return plan_object(request.object, row, team, inventory)
    if request.operation == "UPDATE" and request.object is not None and request.old_object is not None:
        return validate_update(request.object, request.old_object, row, team)
    return Plan(skipped=f"operation {request.operation} is not mutated")


def _labels(obj: Mapping[str, Any], row: WorkloadKind) -> Mapping[str, Any]:
    labels = lookup(obj, (*row.labels_at, "labels"))
    return labels if isinstance(labels, Mapping) else {}


def _managed_child(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    owners = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    for owner in owners if isinstance(owners, list) else []:
        if isinstance(owner, Mapping) and owner.get("controller") is True and is_managed_owner(owner):
            return f"controlled by {owner.get('kind')} {owner.get('name')!r}: Kueue manages the owner"
    return ""


def validate_update(
    new: Mapping[str, Any], old: Mapping[str, Any], row: WorkloadKind, team: TeamPolicyCompiled
) -> Plan:
    """UPDATE: nothing is mutated (Job pod templates are immutable; SPEC §3). Validated:

    - a queue or priority label that changes, or is removed (removing the queue label would let a
      suspended job run outside Kueue's quota);
    - pod templates that change (Deployments, StatefulSets, LWS, RayClusters allow it): their
      priorityClassName and TAS annotations, as on CREATE.
    """
    skipped = _managed_child(new)
    if skipped and _managed_child(old):  # an owner added by this very update proves nothing
        return Plan(skipped=skipped)
    plan = Plan()
    new_labels, old_labels = _labels(new, row), _labels(old, row)
    where = _dotted((*row.labels_at, "labels"))
    for rule_name, rule, label, what in (
        ("queue", team.queue, QUEUE_LABEL, "LocalQueue"),
        ("kueuePriority", team.kueuePriority, PRIORITY_LABEL, "WorkloadPriorityClass"),
    ):
        value, before = new_labels.get(label), old_labels.get(label)
        if rule is None or value == before:
            continue
        if value is None:
            message = f"the label {label} ({where}) may not be removed from a {row.kind} of team {team.team!r}"
            plan.report(rule.enforcement, rule_name, message)
            continue
        _check_value(plan, rule_name, rule, value, f"{where}.{label}", team, what)
    changed = False
    for ref in iter_pod_templates(new, row):
        before_template = lookup(old, ref.path) if ref.path else old
        if ref.path and before_template == ref.template:
            continue
        if not ref.path and lookup(old, ("spec",)) == lookup(new, ("spec",)) and _annotations(old) == _annotations(new):
            continue
        changed = True
        _validate_template(ref, team, plan)
    if changed:
        _check_removals(new, old, row, team, plan)
    if not plan.denials and not plan.warnings:
        plan.skipped = "UPDATE: nothing to validate changed"
    return plan


def _check_removals(
    new: Mapping[str, Any], old: Mapping[str, Any], row: WorkloadKind, team: TeamPolicyCompiled, plan: Plan
) -> None:
    """An UPDATE may not take out of a pod template what the policy put there: whatever CREATE
    would now add to the new object but not to the old one was removed by this update."""
    levels: dict[str, Enforcement] = {
        "podPriority": team.podPriority.enforcement if team.podPriority else "default",
        "topology": team.topology.enforcement if team.topology else "default",
        "nodeAffinity": "warn",  # no enforcement setting: always added, so its removal is warned
    }
    refs = list(iter_pod_templates(new, row))
    before = {(c.rule, c.path) for c in plan_object(old, row, team).changes}
    reported: set[tuple[str, str]] = set()
    for change in plan_object(new, row, team).changes:
        if change.rule not in levels or (change.rule, change.path) in before:
            continue
        # The podset whose template the change lands in: the longest template path it starts with.
        owner = max((r for r in refs if change.path[: len(r.path)] == r.path), key=lambda r: len(r.path))
        if (change.rule, owner.podset) in reported:
            continue
        reported.add((change.rule, owner.podset))
        existed = not owner.path or lookup(old, owner.path) is not None
        what = f"removes from podset {owner.podset!r}" if existed else f"adds podset {owner.podset!r} without"
        message = (
            f"this update {what} what team {team.team!r} requires there "
            f"({_dotted(change.path)}); UPDATE is never mutated, so set it in the object"
        )
        plan.report(levels[change.rule], change.rule, message)


def _annotations(template: Mapping[str, Any]) -> Mapping[str, Any]:
    value = lookup(template, ("metadata", "annotations"))
    return value if isinstance(value, Mapping) else {}


def plan_object(
    obj: Mapping[str, Any], row: WorkloadKind, team: TeamPolicyCompiled, inventory: NodeInventory | None = None
) -> Plan:
    """Plan every rule of ``team`` for a new object of kind ``row``.

    Returns a :class:`Plan`; a field of the wrong JSON type on a path we must read or write
    (``labels`` as a list, a pod template that is a string …) gives a denial naming the path, with
    ``invalid`` set.
    """
    if not isinstance(obj.get("metadata", {}), Mapping | None):
        return _malformed(_Shape(("metadata",), obj.get("metadata")))
    skipped = _managed_child(obj)
    if skipped:
        return Plan(skipped=skipped)
    for path in row.skip_if:
        if lookup(obj, path) is not None:
            return Plan(skipped=f"{_dotted(path)} is set: {row.kind} is left alone")
    draft = _Draft(obj)
    plan = Plan()
    try:
        refs = list(iter_pod_templates(obj, row))
        for ref in refs:  # every map the rules read or write must be a map
            for suffix in ((), ("spec",), ("metadata",), ("metadata", "annotations")):
                _string_map(draft, (*ref.path, *suffix))
        _plan_labels(draft, row, team, refs, plan)
        affinity = [_normalize(e.model_dump()) for e in team.nodeAffinity]
        user_priority = _labels(obj, row).get(PRIORITY_LABEL)
        for ref in refs:
            _plan_template(draft, ref, team, affinity, user_priority, plan)
        if team.topology is not None:
            _plan_topology(draft, refs, team.topology, inventory, plan, team)
    except _Shape as shape:
        return _malformed(shape)
    plan.changes = draft.changes
    return plan


def _malformed(shape: _Shape) -> Plan:
    plan = Plan(invalid=True)
    plan.report(
        "enforce",
        "malformed object",
        f"{_dotted(shape.path)} must be an {shape.expected}, got {json_type(shape.found)}",
    )
    return plan


def _user_pod_priority(refs: list[PodTemplateRef]) -> str | None:
    """The one priorityClassName every pod template that sets one agrees on, else None."""
    values = [lookup(ref.template, ("spec", "priorityClassName")) for ref in refs]
    names = {value for value in values if isinstance(value, str)}
    return next(iter(names)) if len(names) == 1 else None


def _plan_labels(
    draft: _Draft, row: WorkloadKind, team: TeamPolicyCompiled, refs: list[PodTemplateRef], plan: Plan
) -> None:
    labels_path = (*row.labels_at, "labels")
    labels = _string_map(draft, labels_path)
    where = _dotted(labels_path)
    queue = labels.get(QUEUE_LABEL)
    managed = queue is not None
    if queue is None and team.queue.default:
        managed = True
        draft.set((*labels_path, QUEUE_LABEL), team.queue.default, "queue", f"the LocalQueue of team {team.team!r}")
        if row.suspend is not None and draft.get(row.suspend) is not True:
            draft.set(row.suspend, True, "suspend", "queue label added: Kueue starts the workload once admitted")
    elif queue is not None:
        _check_value(plan, "queue", team.queue, queue, f"{where}.{QUEUE_LABEL}", team, "LocalQueue")
    if managed:
        for need in row.requires:
            if need.unless is not None and lookup(draft.doc, need.unless[0]) == need.unless[1]:
                continue
            current = draft.get(need.path)
            if need.forbid:
                if current == need.value:
                    message = f"Kueue refuses a {row.kind} with {_dotted(need.path)}: {json_value(need.value)}"
                    plan.report("enforce", "queue", f"{message} ({need.why})")
            elif current is None:
                draft.set(need.path, need.value, "queue", f"Kueue requires it of a {row.kind}: {need.why}")
            elif current != need.value:
                message = f"Kueue manages a {row.kind} only with {_dotted(need.path)}: {json_value(need.value)}"
                plan.report("enforce", "queue", f"{message}, got {json_value(current)} ({need.why})")
    _plan_priority_label(draft, labels_path, labels, team, refs, plan)
    if row.pod_labels:
        _plan_pod_labels(draft, labels_path, team, refs, plan)


def _plan_pod_labels(
    draft: _Draft, labels_path: tuple[Key, ...], team: TeamPolicyCompiled, refs: list[PodTemplateRef], plan: Plan
) -> None:
    """The workload's queue and priority labels in every pod template too (``pod_labels`` rows);
    a template's own value is checked like the workload's."""
    checks: tuple[tuple[str, Rule, ValueRule | None, str], ...] = (
        (QUEUE_LABEL, "queue", team.queue, "LocalQueue"),
        (PRIORITY_LABEL, "kueuePriority", team.kueuePriority, "WorkloadPriorityClass"),
    )
    for label, rule_name, rule, what in checks:
        value = draft.get((*labels_path, label))
        for ref in refs:
            path = (*ref.path, "metadata", "labels")
            own = _string_map(draft, path).get(label)
            if own is None and value is not None:
                draft.set(
                    (*path, label), value, rule_name, f"podset {ref.podset!r}: Kueue admits these pods one by one"
                )
            elif own is not None and rule is not None:
                _check_value(plan, rule_name, rule, own, f"{_dotted(path)}.{label}", team, what)


def _plan_priority_label(
    draft: _Draft,
    labels_path: tuple[Key, ...],
    labels: Mapping[str, Any],
    team: TeamPolicyCompiled,
    refs: list[PodTemplateRef],
    plan: Plan,
) -> None:
    where = _dotted(labels_path)
    rule = team.kueuePriority
    if rule is None:
        return
    priority = labels.get(PRIORITY_LABEL)
    if priority is None:
        # The user's explicit pod priority drives the Kueue priority when the team may use it.
        chosen = _user_pod_priority(refs)
        reason = f"the pod priority class the workload asks for ({chosen})"
        if chosen is None or (rule.allowed is not None and chosen not in rule.allowed):
            chosen, reason = rule.default, f"the default of team {team.team!r}"
        if chosen:
            draft.set((*labels_path, PRIORITY_LABEL), chosen, "kueuePriority", reason)
    else:
        _check_value(plan, "kueuePriority", rule, priority, f"{where}.{PRIORITY_LABEL}", team, "WorkloadPriorityClass")


def json_value(value: Any) -> str:
    """``true``/``false``/``null`` and quoted strings, as a user wrote them in YAML or JSON."""
    if isinstance(value, str):
        return repr(value)
    return json.dumps(value)


def _validate_template(ref: PodTemplateRef, team: TeamPolicyCompiled, plan: Plan) -> None:
    """The checks of one pod template that do not change it (CREATE and UPDATE alike)."""
    rule = team.podPriority
    current = lookup(ref.template, ("spec", "priorityClassName"))
    if rule is not None and current is not None:
        where = f"{_dotted((*ref.path, 'spec'))}.priorityClassName"
        _check_value(plan, "podPriority", rule, current, where, team, "PriorityClass")
    if team.topology is not None:
        _check_user_topology(ref, _annotations(ref.template), team.topology, team, plan)


def _plan_template(
    draft: _Draft,
    ref: PodTemplateRef,
    team: TeamPolicyCompiled,
    affinity: list[dict[str, Any]],
    user_priority: Any,
    plan: Plan,
) -> None:
    spec_path = (*ref.path, "spec")
    spec = _string_map(draft, spec_path)
    where = f"podset {ref.podset!r}"
    _validate_template(ref, team, plan)
    rule = team.podPriority
    if rule is not None and spec.get("priorityClassName") is None and spec.get("priority") is None:
        # The user's explicit Kueue priority drives the pod priority when the team may use it.
        chosen: str | None = rule.default
        reason = f"{where}: the default of team {team.team!r}"
        if isinstance(user_priority, str) and (rule.allowed is None or user_priority in rule.allowed):
            chosen, reason = user_priority, f"{where}: the Kueue priority the workload asks for"
        if chosen:
            draft.set((*spec_path, "priorityClassName"), chosen, "podPriority", reason)
    if affinity:
        _plan_node_affinity(draft, spec_path, affinity, where, plan)


_STRENGTH = {REQUIRED: 2, PREFERRED: 1}


def _user_request(annotations: Mapping[str, Any], levels: list[str]) -> tuple[int, int]:
    """How strongly a podset's own TAS annotations bind it: (2 required | 1 preferred | 0 other, depth)."""
    for key, strength in _STRENGTH.items():
        level = annotations.get(key)
        if level is not None:
            return strength, levels.index(level) if level in levels else -1
    return 0, -1


def _check_user_topology(
    ref: PodTemplateRef,
    annotations: Mapping[str, Any],
    placement: TopologyPlacement,
    team: TeamPolicyCompiled,
    plan: Plan,
) -> None:
    """Under ``enforce``/``warn``: a podset's own TAS annotations must name levels of the team's
    Topology and may not ask for less locality than the policy (a weaker mode or a broader level)."""
    if placement.enforcement == "default" or not any(key in annotations for key in TAS_ANNOTATIONS):
        return
    enforcement = placement.enforcement
    where = f"podset {ref.podset!r}"
    malformed = False
    for key in _LEVEL_ANNOTATIONS:
        level = annotations.get(key)
        if level is not None and level not in placement.levels:
            malformed = True
            message = (
                f"{key} {level!r} ({where}) is not a level of Topology {placement.topologyName!r} "
                f"for team {team.team!r}; allowed: {', '.join(placement.levels)}"
            )
            plan.report(enforcement, "topology", message)
    unconstrained = annotations.get(UNCONSTRAINED)
    if unconstrained is not None and unconstrained not in ("true", "false"):
        malformed = True
        plan.report(
            enforcement, "topology", f"{UNCONSTRAINED} must be 'true' or 'false' ({where}), got {unconstrained!r}"
        )
    if malformed or placement.mode not in ("required", "preferred") or placement.level is None:
        return  # malformed annotations are reported once, without a second reason
    wanted = (
        _STRENGTH[REQUIRED if placement.mode == "required" else PREFERRED],
        placement.levels.index(placement.level),
    )
    asked = _user_request(annotations, placement.levels)
    if asked[0] < wanted[0] or (asked[0] == wanted[0] and asked[1] < wanted[1]):
        message = (
            f"{where} asks for less locality than team {team.team!r} allows: the policy is "
            f"{placement.mode} at {placement.level}"
        )
        plan.report(enforcement, "topology", message)


def _plan_topology(
    draft: _Draft,
    refs: list[PodTemplateRef],
    placement: TopologyPlacement,
    inventory: NodeInventory | None,
    plan: Plan,
    team: TeamPolicyCompiled,
) -> None:
    """One TAS annotation set per podset; podsets sharing ``podset-group-name`` are planned as one
    (Kueue requires the members of a group to ask for the same topology)."""
    groups: dict[str, list[PodTemplateRef]] = {}
    for index, ref in enumerate(refs):
        name = _annotations(ref.template).get(GROUP_NAME)
        groups.setdefault(f"group:{name}" if isinstance(name, str) else f"podset:{index}", []).append(ref)
    for members in groups.values():
        if any(key in _annotations(ref.template) for ref in members for key in TAS_ANNOTATIONS):
            continue  # the user placed this podset (or a member of its group): never add one
        wanted = _topology_annotations(members, placement, inventory)
        for ref in members:
            for key, (value, reason) in wanted.items():
                path = (*ref.path, "metadata", "annotations", key)
                draft.set(path, value, "topology", f"podset {ref.podset!r}: {reason}")


def _topology_annotations(
    members: list[PodTemplateRef], placement: TopologyPlacement, inventory: NodeInventory | None
) -> dict[str, tuple[str, str]]:
    """The TAS annotations for one podset or podset group (key → (value, reason))."""
    mode = placement.mode
    if mode == "unconstrained":
        return {UNCONSTRAINED: ("true", "team policy: unconstrained")}
    if mode == "auto":
        return _auto(members, placement, inventory)
    assert placement.level is not None
    out = {
        REQUIRED if mode == "required" else PREFERRED: (placement.level, f"team policy: {mode} at {placement.level}")
    }
    if len(members) == 1:
        out.update(_slice(members[0].count, placement))
    return out


def _slice(count: int, placement: TopologyPlacement) -> dict[str, tuple[str, str]]:
    """Slice annotations when the podset divides into whole slices (Kueue rejects partial slices)."""
    size = placement.sliceSize
    if placement.sliceLevel is None or size is None or count < size or count % size:
        return {}
    reason = f"{count} pods in slices of {size} at {placement.sliceLevel}"
    return {SLICE_REQUIRED: (placement.sliceLevel, reason), SLICE_SIZE: (str(size), reason)}


def _auto(
    members: list[PodTemplateRef], placement: TopologyPlacement, inventory: NodeInventory | None
) -> dict[str, tuple[str, str]]:
    """Topology mode ``auto`` (SPEC §3): the narrowest level at which one domain holds the whole
    podset (or group) gets ``required``, never broader than ``placement.level`` when set; too large
    for that, a slice rule if one fits, else ``preferred`` at that broadest level. Without an
    inventory, or for a podset whose size is unknown (one Pod of a pod group), ``preferred``."""
    levels = placement.levels
    top = levels.index(placement.level) if placement.level in levels else 0
    if inventory is None or not len(inventory):
        level = placement.level or levels[-1]
        return {PREFERRED: (level, "auto: no node inventory, so preferred (never blocks admission)")}
    if any(ref.partial for ref in members):
        level = placement.level or levels[-1]
        return {PREFERRED: (level, "auto: one member of a pod group, its size unknown, so preferred")}
    count = sum(ref.count for ref in members)
    requests: dict[str, Decimal] = {}
    for ref in members:  # a group is sized by its largest pod: never too optimistic
        spec = ref.template.get("spec")
        for resource, amount in pod_requests(spec if isinstance(spec, Mapping) else {}).items():
            requests[resource] = max(requests.get(resource, Decimal(0)), amount)
    capacity = inventory.largest_domain(levels, placement.nodeLabels, requests)
    pods, fit = ("pod", "fits") if count == 1 else ("pods", "fit")
    for depth in range(len(levels) - 1, top - 1, -1):
        if capacity[depth] >= count:
            return {
                REQUIRED: (
                    levels[depth],
                    f"auto: {count} {pods} {fit} in one {levels[depth]} domain (the largest holds {capacity[depth]})",
                )
            }
    if len(members) == 1:
        sliced = _slice(count, placement)
        if sliced:
            return sliced
    return {
        PREFERRED: (
            levels[top],
            f"auto: {count} {pods} {'exceeds' if count == 1 else 'exceed'} the largest {levels[top]} domain "
            f"({capacity[top]}), so preferred",
        )
    }


def _plan_node_affinity(
    draft: _Draft, spec_path: tuple[Key, ...], expressions: list[dict[str, Any]], where: str, plan: Plan
) -> None:
    """AND ``expressions`` (normalized) into every nodeSelectorTerm (terms are ORed), or add one term.

    A term whose own ``In`` expression on the same key shares no value with the team's can then
    match no node: admitted, with a warning naming the term.
    """
    required_path = (*spec_path, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    terms_path = (*required_path, "nodeSelectorTerms")
    for key_path in (
        (*spec_path, "affinity"),
        (*spec_path, "affinity", "nodeAffinity"),
        required_path,
    ):
        _string_map(draft, key_path)
    terms = draft.get(terms_path)
    reason = f"{where}: team node affinity"
    new_term = {"matchExpressions": expressions}
    if terms is None:
        draft.set(terms_path, [new_term], "nodeAffinity", reason)
        return
    if not isinstance(terms, list):
        raise _Shape(terms_path, terms, "array")
    if not terms:
        draft.append(terms_path, new_term, "nodeAffinity", reason)
        return
    for index, term in enumerate(terms):
        term_path = (*terms_path, index)
        if not isinstance(term, dict):
            raise _Shape(term_path, term)
        existing = term.get("matchExpressions")
        if existing is None:
            draft.set((*term_path, "matchExpressions"), expressions, "nodeAffinity", reason)
            continue
        if not isinstance(existing, list):
            raise _Shape((*term_path, "matchExpressions"), existing, "array")
        for expression in expressions:
            _warn_disjoint(existing, expression, f"{where}: nodeSelectorTerms[{index}]", plan)
            if not any(_normalize(e) == expression for e in existing if isinstance(e, Mapping)):
                draft.append((*term_path, "matchExpressions"), expression, "nodeAffinity", reason)
                existing = draft.get((*term_path, "matchExpressions"))


def _warn_disjoint(existing: list[Any], expression: Mapping[str, Any], where: str, plan: Plan) -> None:
    if expression.get("operator") != "In":
        return
    wanted = set(expression.get("values") or [])
    for own in existing:
        if not isinstance(own, Mapping) or own.get("key") != expression.get("key") or own.get("operator") != "In":
            continue
        values = own.get("values")
        if isinstance(values, list) and not wanted.intersection(v for v in values if isinstance(v, str)):
            message = (
                f"{where} asks for {own.get('key')} in {json.dumps(values)}, but team nodes have "
                f"{json.dumps(sorted(wanted))}: pods of this term can match no node"
            )
            plan.report("warn", "nodeAffinity", message)


def _normalize(expression: Mapping[str, Any]) -> dict[str, Any]:
    """Key, operator and values, for comparing a user's expression with the team's; a value of
    the wrong type is kept as is (then it equals nothing of ours)."""
    out: dict[str, Any] = {"key": expression.get("key"), "operator": expression.get("operator")}
    values = expression.get("values")
    if values:
        out["values"] = list(values) if isinstance(values, list) else values
    return out
