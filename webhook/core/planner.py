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

Nothing is planned on UPDATE (pod templates of Jobs are immutable); an UPDATE that changes the
queue or priority label is validated. Children of a Kueue-managed owner get nothing. Every
change is an ``add`` of something missing, except setting a present ``suspend: false`` to
``true``. Paths are tuples; :mod:`webhook.core.patch` turns them into RFC 6902 operations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.core.admission import AdmissionRequest
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

    @property
    def allowed(self) -> bool:
        return not self.denials


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
            _Shape: a key on the way holds a non-map value.
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
            if not isinstance(found, dict | list):
                raise _Shape(path[: index + 1], found)
            node = found
        if not isinstance(node, dict | list):
            raise _Shape(path[:-1], node)
        existed = isinstance(node, dict) and path[-1] in node and node[path[-1]] is not None
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
        self.changes.append(Change(op, path, value, rule, reason))


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


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(
        type(value), type(value).__name__
    )


def _check_value(
    plan: Plan, rule_name: str, rule: ValueRule, value: str, where: str, team: TeamPolicyCompiled, what: str
) -> None:
    if rule.allowed is None or value in rule.allowed or rule.enforcement == "default":
        return
    message = (
        f"{rule_name}: {what} {value!r} ({where}) is not allowed for team {team.team!r}; "
        f"allowed: {', '.join(rule.allowed) or 'none'}"
    )
    if rule.enforcement == "enforce":
        plan.denials.append(message)
    else:
        plan.warnings.append(message)


def _string_map(draft: _Draft, path: tuple[Key, ...]) -> dict[str, Any]:
    value = draft.get(path)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Shape(path, value)
    return value


def plan_admission(request: AdmissionRequest, team: TeamPolicyCompiled, inventory: NodeInventory | None = None) -> Plan:
    """Plan the changes for one request of a team namespace.

    CREATE → :func:`plan_object`; UPDATE → validation of a changed queue/priority label only;
    other operations and subresources → nothing.
    """
    row = find_kind(request.api_version, request.kind)
    if request.sub_resource:
        return Plan(skipped=f"subresource {request.sub_resource!r}")
    if row is None:
        return Plan(skipped=f"kind {request.api_version} {request.kind} is not a workload kind")
    if request.operation == "CREATE" and request.object is not None:
        return plan_object(request.object, row, team, inventory)
    if request.operation == "UPDATE" and request.object is not None and request.old_object is not None:
        return _validate_update(request.object, request.old_object, row, team)
    return Plan(skipped=f"operation {request.operation} is not mutated")


def _labels(obj: Mapping[str, Any], row: WorkloadKind) -> Mapping[str, Any]:
    node: Any = obj
    for key in (*row.labels_at, "labels"):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def _validate_update(
    new: Mapping[str, Any], old: Mapping[str, Any], row: WorkloadKind, team: TeamPolicyCompiled
) -> Plan:
    plan = Plan()
    new_labels, old_labels = _labels(new, row), _labels(old, row)
    where = _dotted((*row.labels_at, "labels"))
    for rule_name, rule, label, what in (
        ("queue", team.queue, QUEUE_LABEL, "LocalQueue"),
        ("kueuePriority", team.kueuePriority, PRIORITY_LABEL, "WorkloadPriorityClass"),
    ):
        value = new_labels.get(label)
        if rule is None or value is None or value == old_labels.get(label):
            continue
        _check_value(plan, rule_name, rule, str(value), f"{where}.{label}", team, what)
    if not plan.denials and not plan.warnings:
        plan.skipped = "UPDATE: no queue or priority label change to validate"
    return plan


def plan_object(
    obj: Mapping[str, Any], row: WorkloadKind, team: TeamPolicyCompiled, inventory: NodeInventory | None = None
) -> Plan:
    """Plan every rule of ``team`` for a new object of kind ``row``.

    Returns a :class:`Plan`; a field of the wrong JSON type on a path we must write (``labels`` as a
    list, a pod template that is a string …) gives a denial naming the path, with ``invalid`` set.
    """
    metadata = obj.get("metadata") or {}
    for owner in metadata.get("ownerReferences") or []:
        if isinstance(owner, Mapping) and owner.get("controller") is True and is_managed_owner(owner):
            return Plan(skipped=f"controlled by {owner.get('kind')} {owner.get('name')!r}: Kueue manages the owner")
    for path in row.skip_if:
        if _Draft(obj).get(path) is not None:
            return Plan(skipped=f"{_dotted(path)} is set: {row.kind} is left alone")
    draft = _Draft(obj)
    plan = Plan()
    try:
        _plan_labels(draft, row, team, plan)
        affinity = [e.model_dump() for e in team.nodeAffinity]
        for ref in iter_pod_templates(draft.doc, row):
            _plan_template(draft, ref, team, affinity, inventory, plan)
    except _Shape as shape:
        plan.denials.append(
            f"malformed object: {_dotted(shape.path)} must be an {shape.expected}, got {_json_type(shape.found)}"
        )
        plan.invalid = True
        return plan
    plan.changes = draft.changes
    return plan


def _plan_labels(draft: _Draft, row: WorkloadKind, team: TeamPolicyCompiled, plan: Plan) -> None:
    labels_path = (*row.labels_at, "labels")
    labels = _string_map(draft, labels_path)
    where = _dotted(labels_path)
    queue = labels.get(QUEUE_LABEL)
    if queue is None and team.queue.default:
        draft.set((*labels_path, QUEUE_LABEL), team.queue.default, "queue", f"team {team.team!r}'s LocalQueue")
        if row.suspend is not None and draft.get(row.suspend) is not True:
            draft.set(row.suspend, True, "suspend", "queue label added: Kueue starts the workload once admitted")
    elif queue is not None:
        _check_value(plan, "queue", team.queue, str(queue), f"{where}.{QUEUE_LABEL}", team, "LocalQueue")
    rule = team.kueuePriority
    if rule is None:
        return
    priority = labels.get(PRIORITY_LABEL)
    if priority is None and rule.default:
        draft.set((*labels_path, PRIORITY_LABEL), rule.default, "kueuePriority", f"team {team.team!r}'s default")
    elif priority is not None:
        _check_value(
            plan, "kueuePriority", rule, str(priority), f"{where}.{PRIORITY_LABEL}", team, "WorkloadPriorityClass"
        )


def _plan_template(
    draft: _Draft,
    ref: PodTemplateRef,
    team: TeamPolicyCompiled,
    affinity: list[dict[str, Any]],
    inventory: NodeInventory | None,
    plan: Plan,
) -> None:
    spec_path = (*ref.path, "spec")
    spec = _string_map(draft, spec_path)
    where = f"podset {ref.podset!r}"
    rule = team.podPriority
    if rule is not None:
        current = spec.get("priorityClassName")
        if current is None and spec.get("priority") is None and rule.default:
            draft.set((*spec_path, "priorityClassName"), rule.default, "podPriority", f"{where}: team default")
        elif current is not None:
            _check_value(
                plan,
                "podPriority",
                rule,
                str(current),
                f"{_dotted(spec_path)}.priorityClassName",
                team,
                "PriorityClass",
            )
    if team.topology is not None:
        _plan_topology(draft, ref, team.topology, inventory, plan, team)
    if affinity:
        _plan_node_affinity(draft, spec_path, affinity, where)


def _plan_topology(
    draft: _Draft,
    ref: PodTemplateRef,
    placement: TopologyPlacement,
    inventory: NodeInventory | None,
    plan: Plan,
    team: TeamPolicyCompiled,
) -> None:
    annotations_path = (*ref.path, "metadata", "annotations")
    annotations = _string_map(draft, annotations_path)
    present = [key for key in TAS_ANNOTATIONS if key in annotations]
    if present:
        if placement.enforcement == "default":
            return
        for key in _LEVEL_ANNOTATIONS:
            level = annotations.get(key)
            if level is not None and level not in placement.levels:
                message = (
                    f"topology: {key} {level!r} (podset {ref.podset!r}) is not a level of Topology "
                    f"{placement.topologyName!r} for team {team.team!r}; allowed: {', '.join(placement.levels)}"
                )
                (plan.denials if placement.enforcement == "enforce" else plan.warnings).append(message)
        return
    wanted = _topology_annotations(ref, placement, inventory)
    for key, (value, reason) in wanted.items():
        draft.set((*annotations_path, key), value, "topology", f"podset {ref.podset!r}: {reason}")


def _topology_annotations(
    ref: PodTemplateRef, placement: TopologyPlacement, inventory: NodeInventory | None
) -> dict[str, tuple[str, str]]:
    """The TAS annotations for one podset (key → (value, reason))."""
    out: dict[str, tuple[str, str]] = {}
    mode = placement.mode
    if mode == "unconstrained":
        return {UNCONSTRAINED: ("true", "team policy: unconstrained")}
    if mode == "auto":
        return _auto(ref, placement, inventory)
    assert placement.level is not None
    key = REQUIRED if mode == "required" else PREFERRED
    out[key] = (placement.level, f"team policy: {mode} at {placement.level}")
    slice_ = _slice(ref, placement)
    if slice_:
        out.update(slice_)
    return out


def _slice(ref: PodTemplateRef, placement: TopologyPlacement) -> dict[str, tuple[str, str]]:
    """Slice annotations when the podset divides into whole slices (Kueue rejects partial slices)."""
    size = placement.sliceSize
    if placement.sliceLevel is None or size is None or ref.count < size or ref.count % size:
        return {}
    reason = f"{ref.count} pods in slices of {size} at {placement.sliceLevel}"
    return {SLICE_REQUIRED: (placement.sliceLevel, reason), SLICE_SIZE: (str(size), reason)}


def _auto(
    ref: PodTemplateRef, placement: TopologyPlacement, inventory: NodeInventory | None
) -> dict[str, tuple[str, str]]:
    levels = placement.levels
    spec = ref.template.get("spec")
    requests = pod_requests(spec if isinstance(spec, Mapping) else {})
    if inventory is None or not len(inventory):
        level = placement.level or levels[-1]
        return {PREFERRED: (level, "auto: no node inventory, so preferred (never blocks admission)")}
    capacity = inventory.largest_domain(levels, placement.nodeLabels, requests)
    for depth in range(len(levels) - 1, -1, -1):
        if capacity[depth] >= ref.count:
            return {
                REQUIRED: (
                    levels[depth],
                    f"auto: {ref.count} pods fit in one {levels[depth]} domain (largest holds {capacity[depth]})",
                )
            }
    sliced = _slice(ref, placement)
    if sliced:
        return sliced
    return {
        PREFERRED: (
            levels[0],
            f"auto: {ref.count} pods exceed the largest {levels[0]} domain ({capacity[0]}), so preferred",
        )
    }


def _plan_node_affinity(
    draft: _Draft, spec_path: tuple[Key, ...], expressions: list[dict[str, Any]], where: str
) -> None:
    """AND ``expressions`` into every nodeSelectorTerm (terms are ORed), or add one term."""
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
    term = {"matchExpressions": [_normalize(e) for e in expressions]}
    if terms is None:
        draft.set(terms_path, [term], "nodeAffinity", reason)
        return
    if not isinstance(terms, list):
        raise _Shape(terms_path, terms, "array")
    if not terms:
        draft.append(terms_path, term, "nodeAffinity", reason)
        return
    for index, term in enumerate(terms):
        term_path = (*terms_path, index)
        if not isinstance(term, dict):
            raise _Shape(term_path, term)
        existing = term.get("matchExpressions")
        if existing is None:
            draft.set((*term_path, "matchExpressions"), [_normalize(e) for e in expressions], "nodeAffinity", reason)
            continue
        if not isinstance(existing, list):
            raise _Shape((*term_path, "matchExpressions"), existing, "array")
        for expression in expressions:
            normalized = _normalize(expression)
            if not any(_normalize(e) == normalized for e in existing if isinstance(e, Mapping)):
                draft.append((*term_path, "matchExpressions"), normalized, "nodeAffinity", reason)
                existing = draft.get((*term_path, "matchExpressions"))


def _normalize(expression: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"key": expression.get("key"), "operator": expression.get("operator")}
    values = expression.get("values")
    if values:
        out["values"] = list(values)
    return out
