"""MutatingAdmissionPolicies: what CEL states exactly of a team's policy (SPEC §8b).

``kgov generate --admission-policies`` writes ``admission-policies.yaml``, and ``kgov chart
values`` the same mutations for the chart (``failSafe.mode: mutate``): one
``admissionregistration.k8s.io/v1`` MutatingAdmissionPolicy per team (GA and served by default
since Kubernetes 1.36: feature gate ``MutatingAdmissionPolicy``, on by default at 1.36, and the
``MutatingAdmissionPolicy`` admission plugin, which runs before the mutating webhooks) and a
binding per way the team's namespaces are chosen. On CREATE of a workload of the kinds table
(:data:`webhook.core.kueue.kinds.KINDS`, every row read from the table, none written here by kind) in
a namespace of the team, the API server itself, webhook or not:

1. writes :data:`~webhook.core.plan.policy_fill.FILLED_BY_POLICY` (``queue,priority,topology``: what
   steps 2–4 fill in) next to the kind's labels;
2. sets the queue label (``kueue.x-k8s.io/queue-name``) to the team's LocalQueue when missing
   or ``""`` (Kueue reads ``""`` as no queue), and the kind's suspend field to ``true`` (as the
   webhook does: Kueue starts it once admitted);
3. sets the Kueue priority label to the team's default when missing or ``""`` and no pod
   template names a ``priorityClassName`` (the webhook may follow that one; Kueue then takes the
   pods' PriorityClass anyway); not on a kind whose pod templates are embedded objects
   (AppWrapper);
4. copies both labels into the pod templates of kinds whose pods Kueue admits one by one
   (``pod_labels``), where missing;
5. with a fixed topology mode (``required``/``preferred`` at a level, or ``unconstrained``; not
   ``auto``, which reads the live nodes, nor a slice rule, which depends on the podset's size)
   adds the mode's annotation to the single static pod template of a kind
   (:func:`~webhook.core.plan.policy_fill.topology_template`) that carries no TAS annotation nor
   ``podset-group-name``, unless the workload is elastic and Kueue refuses that annotation on it;
6. fills the static fields Kueue's webhook insists on for a managed workload (``requires``).

Nothing a user set is changed (each patch is an RFC 6902 ``add`` of a missing value, or of the
missing map around it; ``""`` labels excepted, as above). Children of Kueue-managed owners that
a controller makes and workloads the webhook leaves alone are skipped with the chart's own
``matchConditions``. ``failurePolicy: Ignore``: a policy that fails leaves the object to the
ValidatingAdmissionPolicy, which still refuses a workload without its team's queue label.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from webhook.core.kueue.kind_model import TEMPLATE, WorkloadKind
from webhook.core.kueue.kinds import KINDS
from webhook.core.kueue.view import PRIORITY_LABEL, QUEUE_LABEL
from webhook.core.objects.paths import Key
from webhook.core.plan.patch import pointer
from webhook.core.plan.policy_fill import (
    FILLED_BY_POLICY,
    marker_path,
    static_templates,
    topology_fill,
    topology_template,
)
from webhook.core.plan.rules.topology import ELASTIC_JOB, GROUP_NAME, TAS_ANNOTATIONS
from webhook.core.platform.platform import Platform
from webhook.core.platform.policy import PolicySet, TeamPolicyCompiled, compile_policies
from webhook.generate.cel import controller_expression, left_alone_expression, not_a_child_expression
from webhook.generate.manifests import (
    DEFAULT_POLICY_NAMESPACE,
    INSTANCE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    TEAM_LABEL,
    Manifest,
)

__all__ = [
    "API_VERSION",
    "DEFAULT_PREFIX",
    "FILLED_BY_POLICY",
    "admission_policy_files",
    "admission_policy_manifests",
    "fill_rules",
    "policy_name",
    "team_mutations",
    "team_variables",
]

API_VERSION = "admissionregistration.k8s.io/v1"
DEFAULT_PREFIX = "kgov-governor"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _literal(value: Any) -> str:
    """A JSON value as a CEL literal (strings in single quotes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return json.dumps(value)


def _optional(base: str, path: Sequence[Key]) -> str:
    """CEL optional of the value at ``path`` (no ``"*"``) from ``base``: ``object.?spec.?template``,
    ``[?'key']`` for a map key that is no identifier."""
    out = base
    for key in path:
        out += f".?{key}" if isinstance(key, str) and _IDENTIFIER.match(key) else f"[?{_literal(key)}]"
    return out


def _present(path: Sequence[Key]) -> str:
    return f"{_optional('object', path)}.hasValue()" if path else "true"


def _empty(path: Sequence[Key]) -> str:
    """CEL: the string at ``path`` is missing or ``""``."""
    return f"{_optional('object', path)}.orValue('') == ''"


def _any_set(base: str, path: Sequence[Key], keyed: bool, depth: int = 0) -> str:
    """CEL: some item the ``"*"`` of ``path`` runs over has a non-empty string at the rest."""
    if "*" not in path:
        return f"{_optional(base, path)}.orValue('') != ''"
    star = list(path).index("*")
    head, rest = path[:star], path[star + 1 :]
    name = f"x{depth}"
    items = f"{_optional(base, head)}.orValue({'{}' if keyed else '[]'})"
    if keyed:  # a map of role names: the item is read through the key
        plain = base + "".join(_plain_step(key) for key in head)
        return f"{items}.exists({name}, {_any_set(f'{plain}[{name}]', rest, False, depth + 1)})"
    return f"{items}.exists({name}, {_any_set(name, rest, False, depth + 1)})"


def _plain_step(key: Key) -> str:
    return f".{key}" if isinstance(key, str) and _IDENTIFIER.match(key) else f"[{_literal(key)}]"


def _set(path: Sequence[Key], value: str) -> str:
    """CEL list of JSONPatch: ``path`` set to the CEL ``value``, adding the missing maps around it
    as one map (never replacing one that is there)."""
    out = f"[JSONPatch{{op: 'add', path: {_literal(pointer(tuple(path)))}, value: {value}}}]"
    for depth in range(len(path) - 1, 0, -1):
        nested = value
        for key in reversed(path[depth:]):
            nested = f"{{{_literal(key)}: {nested}}}"
        head = path[:depth]
        if head == ("metadata",):
            continue  # every object has metadata (its name)
        add = f"[JSONPatch{{op: 'add', path: {_literal(pointer(tuple(head)))}, value: {nested}}}]"
        out = f"(!{_present(head)} ? {add} : {out})"
    return out


def _kind_names(row: WorkloadKind) -> list[str]:
    return [f"{row.group}/{version}/{row.kind}" for version in row.versions]


#: The ``kind`` variable: the request's kind as ``group/version/Kind`` (``/v1/Pod`` for core).
KIND_VARIABLE = "request.kind.group + '/' + request.kind.version + '/' + request.kind.kind"


class _Row:
    """The conditions and patches of one kind for one team."""

    def __init__(self, row: WorkloadKind, team: TeamPolicyCompiled) -> None:
        self.row = row
        labels = (*row.labels_at, "labels")
        self.queue_path, self.priority_path = (*labels, QUEUE_LABEL), (*labels, PRIORITY_LABEL)
        self.queue = team.queue.default or None
        priority = team.kueuePriority.default if team.kueuePriority else None
        self.priority = priority if priority and row.embedded is None else None
        self.topology = topology_fill(team.topology)
        self.template = topology_template(row) if self.topology else None

    def need_queue(self) -> str | None:
        return _empty(self.queue_path) if self.queue else None

    def need_priority(self) -> str | None:
        if self.priority is None:
            return None
        # A kind whose pods come from a runtime (a TrainJob) shows no pod template in the object.
        templates = self.row.podsets if self.row.runtime is None else ()
        asked = [
            _any_set("object", (*rule.template, *rule.layout.priority), rule.keyed)
            for rule in templates
            if rule.layout.priority
        ]
        return " && ".join([_empty(self.priority_path), *(f"!({a})" for a in asked)])

    def need_topology(self) -> str | None:
        if self.template is None or self.topology is None:
            return None
        base = self.template.template
        annotations = f"{_optional('object', (*base, *TEMPLATE.annotations))}.orValue({{}})"
        keys = _literal([*TAS_ANNOTATIONS, GROUP_NAME])
        conditions = [_present(base), f"!({keys}.exists(k, k in {annotations}))"]
        if self.topology[0] in self.row.elastic_forbids:
            elastic = ("metadata", "annotations", ELASTIC_JOB)
            conditions.append(f"{_optional('object', elastic)}.orValue('') != 'true'")
        return " && ".join(conditions)

    def marker(self) -> str | None:
        if not any((self.need_queue(), self.need_priority(), self.need_topology())):
            return None
        return _set(marker_path(self.row), "variables.filled")

    def queue_patch(self) -> str | None:
        if self.queue is None:
            return None
        patch = _set(self.queue_path, _literal(self.queue))
        suspend = self.row.suspend
        if suspend is not None:
            patch = f"{patch} + ({_optional('object', suspend)}.orValue(false) == true ? [] : {_set(suspend, 'true')})"
        return patch

    def priority_patch(self) -> str | None:
        return None if self.priority is None else _set(self.priority_path, _literal(self.priority))

    def pod_labels_patch(self) -> str | None:
        if not self.row.pod_labels:
            return None
        parts = []
        for rule in static_templates(self.row):
            for label in (QUEUE_LABEL, PRIORITY_LABEL):
                workload = _optional("object", (*self.row.labels_at, "labels", label))
                own = (*rule.template, *TEMPLATE.labels, label)
                parts.append(
                    f"({workload}.orValue('') != '' && {_empty(own)} ? {_set(own, f'{workload}.value()')} : [])"
                )
        return " + ".join(parts) if parts else None

    def topology_patch(self) -> str | None:
        if self.template is None or self.topology is None:
            return None
        key, value = self.topology
        return _set((*self.template.template, *TEMPLATE.annotations, key), _literal(value))

    def requirements_patch(self) -> str | None:
        parts = []
        for need in self.row.requires:
            if need.forbid or "*" in need.path or (need.unless is not None and "*" in need.unless[0]):
                continue
            condition = [_present(self.queue_path), f"!{_present(need.path)}"]
            if need.unless is not None:
                where, value = need.unless
                found = _optional("object", where)
                condition.append(f"!({found}.hasValue() && {found}.value() == {_literal(value)})")
            parts.append(f"({' && '.join(condition)} ? {_set(need.path, _literal(need.value))} : [])")
        return " + ".join(parts) if parts else None


#: Each mutation: the _Row method giving a kind's patches, and the variable that gates it ("" none).
_STEPS = (
    ("marker", "variables.filled != ''"),
    ("queue_patch", "variables.needQueue"),
    ("priority_patch", "variables.needPriority"),
    ("pod_labels_patch", ""),
    ("topology_patch", "variables.needTopology"),
    ("requirements_patch", ""),
)
_NEEDS = (
    ("needQueue", "need_queue", "queue"),
    ("needPriority", "need_priority", "priority"),
    ("needTopology", "need_topology", "topology"),
)


def _by_kind(rows: list[_Row], method: str, otherwise: str) -> str | None:
    """CEL: the value of ``method`` for the request's kind; kinds with the same value share one
    branch; ``otherwise`` for kinds without one (None when no kind has one)."""
    branches: dict[str, list[WorkloadKind]] = {}
    for row in rows:
        value = getattr(row, method)()
        if value is not None:
            branches.setdefault(value, []).append(row.row)
    if not branches:
        return None
    expression = otherwise
    for value, kinds in reversed(list(branches.items())):
        names = [name for kind in kinds for name in _kind_names(kind)]
        expression = f"variables.kind in {_literal(names)} ? ({value}) : ({expression})"
    return expression


def team_variables(team: TeamPolicyCompiled) -> list[dict[str, str]]:
    """The policy's ``variables``: ``kind`` (``group/version/Kind`` of the request), ``needQueue``,
    ``needPriority``, ``needTopology`` (what the
    request's kind lacks that the team's policy fills) and ``filled`` (the marker's value).
    Variables are evaluated against the object each mutation sees, so the first mutation, which
    writes the marker, reads the object as it came."""
    rows = [_Row(row, team) for row in KINDS]
    out = [{"name": "kind", "expression": KIND_VARIABLE}]
    out += [{"name": name, "expression": _by_kind(rows, method, "false") or "false"} for name, method, _ in _NEEDS]
    tokens = ", ".join(f"variables.{name} ? {_literal(token)} : ''" for name, _, token in _NEEDS)
    out.append({"name": "filled", "expression": f"[{tokens}].filter(t, t != '').join(',')"})
    return out


def team_mutations(team: TeamPolicyCompiled) -> list[dict[str, Any]]:
    """The ``mutations`` of the team's MutatingAdmissionPolicy, in order (each sees the object the
    previous ones made); one JSONPatch mutation per step, branching on the request's kind."""
    rows = [_Row(row, team) for row in KINDS]
    mutations = []
    for method, gate in _STEPS:
        expression = _by_kind(rows, method, "[]")
        if expression is None:
            continue
        if gate:
            expression = f"{gate} ? ({expression}) : []"
        mutations.append({"patchType": "JSONPatch", "jsonPatch": {"expression": expression}})
    return mutations


def fill_rules() -> list[dict[str, Any]]:
    """``matchConstraints.resourceRules``: CREATE of every kind and version Kueue manages (not a
    row's ``unmanaged_versions``, which the ValidatingAdmissionPolicy refuses)."""
    by_group: dict[tuple[str, str], set[str]] = {}
    for row in KINDS:
        for version in row.versions:
            by_group.setdefault((row.group, version), set()).add(row.resource)
    return [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "operations": ["CREATE"],
            "resources": sorted(resources),
            "scope": "Namespaced",
        }
        for (group, version), resources in sorted(by_group.items())
    ]


def policy_name(team: str, prefix: str = DEFAULT_PREFIX) -> str:
    """``<prefix>-fill-<team>``, cut to 63 characters (as the chart names it)."""
    return f"{prefix}-fill-{team}"[:63].rstrip("-")


def admission_policy_manifests(policy: PolicySet, prefix: str = DEFAULT_PREFIX) -> list[Manifest]:
    """Per team with something to fill: its MutatingAdmissionPolicy and bindings (one for its
    namespace names, one for its ``namespaceSelector``), in the policy's team order."""
    out: list[Manifest] = []
    not_a_child = not_a_child_expression(controller_expression(policy.controllers))
    for team in policy.teams:
        mutations = team_mutations(team)
        if not mutations:
            continue
        name = policy_name(team.team, prefix)
        labels = {MANAGED_BY_LABEL: MANAGED_BY, TEAM_LABEL: team.team}
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "MutatingAdmissionPolicy",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "failurePolicy": "Ignore",
                    "reinvocationPolicy": "Never",
                    "matchConstraints": {"resourceRules": fill_rules()},
                    "variables": team_variables(team),
                    "matchConditions": [
                        {"name": "not-a-kueue-managed-child", "expression": not_a_child},
                        {"name": "not-left-alone", "expression": left_alone_expression()},
                    ],
                    "mutations": mutations,
                },
            }
        )
        selectors: list[tuple[str, dict[str, Any]]] = []
        if team.namespaces:
            names = {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(team.namespaces)}
            selectors.append(("", {"matchExpressions": [names]}))
        if team.namespaceSelector is not None:
            selectors.append(("-selected", team.namespaceSelector.model_dump(exclude_none=True)))
        for suffix, selector in selectors:
            out.append(
                {
                    "apiVersion": API_VERSION,
                    "kind": "MutatingAdmissionPolicyBinding",
                    "metadata": {"name": f"{name}{suffix}", "labels": dict(labels)},
                    "spec": {"policyName": name, "matchResources": {"namespaceSelector": selector}},
                }
            )
    return out


def admission_policy_files(
    platform: Platform, policy_namespace: str = DEFAULT_POLICY_NAMESPACE, instance: str | None = None
) -> dict[str, list[Manifest]]:
    """``{"admission-policies.yaml": [...]}`` for ``kgov generate --admission-policies`` (nothing
    when no team has a value to fill); ``instance`` as :class:`~webhook.generate.manifests.GenerateOptions`."""
    objects = admission_policy_manifests(compile_policies(platform, extra_excluded=[policy_namespace]))
    if instance is not None:
        for obj in objects:
            obj["metadata"]["labels"][INSTANCE_LABEL] = instance
    return {"admission-policies.yaml": objects} if objects else {}
