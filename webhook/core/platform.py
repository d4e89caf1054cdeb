"""The platform file: one declarative YAML document that describes teams, quotas and placement.

Shape (SPEC §2)::

    apiVersion: kueue-governor.io/v1alpha1
    kind: Platform
    naming: hyperpod | default
    topologies:  [{name, levels: [broadest … narrowest]}]
    flavors:     [{name, nodeLabels, nodeTaints, tolerations, topologyName, nodeResources}]
    cohorts:     [{name, parentName, fairSharing: {weight}}]
    priorities:  [{name, value, description, podPriorityClass}]
    teams:       [{name, namespaces | namespaceSelector, cohort, quotas, preemption,
                   fairSharing, queueingStrategy, policy}]

Every model forbids unknown fields, so a typo fails with its exact path. Field names follow
Kueue's API (``nominalQuota``, ``borrowingLimit``, ``lendingLimit``, ``topologyName``,
``nodeLabels``) so that a platform engineer reads them as Kueue objects.

Cross-references (a team naming a flavor that does not exist, …) are checked by
:func:`check_platform`, which reports every problem with its field path; :func:`load_platform`
runs both steps and raises :class:`PlatformError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from webhook.core.naming import (
    SYSTEM_NAMESPACES,
    cluster_queue_name,
    local_queue_name,
    priority_class_name,
    team_namespaces,
)
from webhook.core.quantity import QuantityError, parse_quantity

__all__ = [
    "API_VERSION",
    "HOSTNAME_LABEL",
    "CohortSpec",
    "Enforcement",
    "FlavorQuota",
    "FlavorSpec",
    "LabelSelector",
    "NodeSelectorRequirement",
    "Platform",
    "PlatformError",
    "PriorityRule",
    "PrioritySpec",
    "Problem",
    "QueueRule",
    "ResourceQuota",
    "TeamPolicy",
    "TeamSpec",
    "TopologyMode",
    "TopologyRule",
    "TopologySpec",
    "check_platform",
    "dns1123_label_error",
    "load_platform",
    "parse_platform",
    "platform_json_schema",
]

API_VERSION = "kueue-governor.io/v1alpha1"
HOSTNAME_LABEL = "kubernetes.io/hostname"

# Used with fullmatch: "$" would also accept a trailing newline ("alpha\n"), which the API server refuses.
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _dns1123_label(value: str) -> str:
    if len(value) > 63 or not _DNS1123_LABEL.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)"
        )
    return value


def dns1123_label_error(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 label (an object or namespace name), or None when it is one.

    Kubernetes names that also end up as label values (LocalQueue and WorkloadPriorityClass names
    in ``kueue.x-k8s.io/queue-name`` and ``kueue.x-k8s.io/priority-class``) must be labels too.
    """
    try:
        _dns1123_label(value)
    except ValueError as exc:
        return str(exc)
    return None


def _label_key(value: str) -> str:
    """Validate a Kubernetes label key ``[prefix/]name``; raise ValueError with the reason."""
    prefix, _, name = value.rpartition("/")
    if (
        (prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)))
        or len(name) > 63
        or not _LABEL_NAME.fullmatch(name)
    ):
        raise ValueError(
            f"{value!r} is not a valid label key ([prefix/]name; name: at most 63 of [A-Za-z0-9-_.], starting and "
            "ending with a letter or digit; prefix: a DNS-1123 subdomain)"
        )
    return value


def _label_value(value: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid label value (at most 63 of [A-Za-z0-9-_.], starting and ending with a "
            "letter or digit)"
        )
    return value


def _quantity(value: Any) -> Any:
    """Check a quantity as written, before pydantic coerces it (YAML ``true`` would become 1)."""
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc
    return value


def _never_negative(what: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if parse_quantity(value) < 0:
            raise ValueError(f"{what} is never negative")
        return value

    return check


DNSLabel = Annotated[str, AfterValidator(_dns1123_label)]
LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]
Quantity = Annotated[
    str | int | float, BeforeValidator(_quantity), Field(description="Kubernetes quantity, e.g. 8, 500m, 64Gi")
]
Enforcement = Literal["default", "enforce", "warn"]
TopologyMode = Literal["required", "preferred", "unconstrained", "auto", "none"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _Named(_Model):
    name: str = Field(description="DNS-1123 label")

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        return _dns1123_label(value)


class TopologySpec(_Named):
    """A Kueue Topology: node labels from the broadest domain (spine, block) to the narrowest."""

    levels: list[LabelKey] = Field(description="node label keys, broadest first; 1 to 16, unique")

    @field_validator("levels")
    @classmethod
    def _check_levels(cls, levels: list[str]) -> list[str]:
        # Rules from Kueue's Topology API validation (kueue.x-k8s.io/v1beta2 TopologySpec).
        if not 1 <= len(levels) <= 16:
            raise ValueError(f"a Topology has 1 to 16 levels, got {len(levels)}")
        seen: set[str] = set()
        for level in levels:
            if level in seen:
                raise ValueError(f"level {level!r} appears twice")
            seen.add(level)
        if HOSTNAME_LABEL in levels[:-1]:
            raise ValueError(f"{HOSTNAME_LABEL!r} may only be the last (narrowest) level")
        return levels


class Taint(_Model):
    key: LabelKey
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Toleration(_Model):
    key: str | None = Field(None, description="a label key; empty or absent: every key (operator Exists)")
    operator: Literal["Exists", "Equal"] | None = None
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: int | None = None

    @field_validator("key")
    @classmethod
    def _check_key(cls, value: str | None) -> str | None:
        return _label_key(value) if value else value


class FlavorSpec(_Named):
    """A Kueue ResourceFlavor plus what one of its nodes offers (for capacity checks)."""

    nodeLabels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    nodeTaints: list[Taint] = Field(default_factory=list)
    tolerations: list[Toleration] = Field(default_factory=list)
    topologyName: str | None = None
    nodeResources: dict[str, Annotated[Quantity, AfterValidator(_never_negative("a node resource"))]] = Field(
        default_factory=dict, description="allocatable resources of one node of this flavor"
    )

    @model_validator(mode="after")
    def _topology_needs_labels(self) -> FlavorSpec:
        # Kueue: a ResourceFlavor with topologyName must have at least one nodeLabel.
        if self.topologyName is not None and not self.nodeLabels:
            raise ValueError("a flavor with a topologyName needs at least one nodeLabel")
        return self


class FairSharing(_Model):
    weight: Annotated[Quantity, AfterValidator(_never_negative("a fair-sharing weight"))] = 1


class CohortSpec(_Named):
    parentName: str | None = None
    fairSharing: FairSharing | None = None


class PrioritySpec(_Named):
    """A WorkloadPriorityClass; with ``podPriorityClass`` also a Kubernetes PriorityClass."""

    value: int = Field(ge=-(2**31), le=10**9)
    description: str = ""
    podPriorityClass: bool = False


QuotaAmount = Annotated[Quantity, AfterValidator(_never_negative("a quota"))]


class ResourceQuota(_Model):
    nominalQuota: QuotaAmount
    borrowingLimit: QuotaAmount | None = None
    lendingLimit: QuotaAmount | None = None


class FlavorQuota(_Model):
    flavor: str
    resources: dict[str, ResourceQuota] = Field(min_length=1)


class BorrowWithinCohort(_Model):
    policy: Literal["Never", "LowerPriority"] = "Never"
    maxPriorityThreshold: int | None = None


class Preemption(_Model):
    reclaimWithinCohort: Literal["Never", "LowerPriority", "Any"] = "Never"
    withinClusterQueue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "Never"
    borrowWithinCohort: BorrowWithinCohort | None = None


_INT64 = re.compile(r"[+-]?[0-9]+")


def _requirement_value(value: str, info: ValidationInfo) -> str:
    """One entry of ``values``: a label value for ``In``/``NotIn``, an integer for ``Gt``/``Lt``."""
    operator = info.data.get("operator")
    if operator in ("In", "NotIn"):
        _label_value(value)
    elif operator in ("Gt", "Lt") and not (_INT64.fullmatch(value) and -(2**63) <= int(value) < 2**63):
        raise ValueError(f"operator {operator} needs an integer value, got {value!r}")
    return value


def _requirement_values(values: list[str], info: ValidationInfo) -> list[str]:
    """How many ``values`` an operator takes (Kubernetes' label-selector and node-selector rules)."""
    operator = info.data.get("operator")
    if operator in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"operator {operator} takes no values")
    if operator in ("In", "NotIn") and not values:
        raise ValueError(f"operator {operator} needs at least one value")
    if operator in ("Gt", "Lt") and len(values) != 1:
        raise ValueError(f"operator {operator} needs exactly one integer value")
    return values


RequirementValue = Annotated[str, AfterValidator(_requirement_value)]


class LabelSelectorRequirement(_Model):
    """One ``matchExpressions[]`` entry of a label selector (meta/v1 LabelSelectorRequirement)."""

    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[RequirementValue] = Field(default_factory=list, validate_default=True)

    _check_values = field_validator("values")(_requirement_values)


class LabelSelector(_Model):
    matchLabels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    matchExpressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class NodeSelectorRequirement(_Model):
    """One ``nodeSelectorTerms[].matchExpressions[]`` entry (core/v1 NodeSelectorRequirement)."""

    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[RequirementValue] = Field(default_factory=list, validate_default=True)

    _check_values = field_validator("values")(_requirement_values)


class QueueRule(_Model):
    """Which LocalQueue a workload lands in (label ``kueue.x-k8s.io/queue-name``).

    Every name is a LocalQueue of this team: a DNS-1123 label (it is a label value too), never
    the LocalQueue generated for another team.
    """

    default: DNSLabel | None = Field(default=None, description="LocalQueue name; default: the team's LocalQueue")
    allowed: list[DNSLabel] = Field(
        default_factory=list, description="further LocalQueues of this team a user may name"
    )
    enforcement: Enforcement = "enforce"


class PriorityRule(_Model):
    """A default and an allowed set of priority class names (platform ``priorities`` names)."""

    default: str | None = None
    allowed: list[str] | None = Field(None, description="None: any known priority is allowed")
    enforcement: Enforcement = "enforce"


class TopologyRule(_Model):
    """Kueue topology-aware scheduling annotations for each pod template (podset).

    ``mode``: ``required``/``preferred``/``unconstrained`` write the matching
    ``kueue.x-k8s.io/podset-<mode>-topology`` annotation; ``auto`` picks the level from the podset
    size and the node inventory; ``none`` writes nothing.

    ``level`` must be a level of the Topology (checked by :func:`check_platform`). With
    ``required``/``preferred`` it is the level written. With ``auto`` it is optional and is the
    broadest level at which the webhook may *require* placement: ``auto`` requires the narrowest
    level where one domain of the node inventory holds the whole podset, never a level broader than
    ``level`` (unset: the Topology's broadest level). A podset larger than every ``level`` domain
    gets ``preferred`` at ``level`` instead, and so does every podset when there is no inventory
    (unset: at the narrowest level); ``preferred`` never blocks admission.
    """

    mode: TopologyMode = "preferred"
    level: str | None = Field(
        None,
        description="a level of the team flavor's Topology; required/preferred: the level written; auto: the "
        "broadest level at which the webhook may require placement (a podset larger than its domains gets "
        "preferred at this level)",
    )
    topologyName: str | None = Field(None, description="default: the Topology of the team's flavors")
    sliceLevel: str | None = None
    sliceSize: int | None = Field(None, ge=1)
    enforcement: Enforcement = "default"

    @model_validator(mode="after")
    def _check_shape(self) -> TopologyRule:
        if self.mode in ("required", "preferred") and self.level is None:
            raise ValueError(f"mode {self.mode!r} needs a level")
        if (self.sliceLevel is None) != (self.sliceSize is None):
            raise ValueError("sliceLevel and sliceSize go together")
        if self.sliceLevel is not None and self.mode != "required":
            raise ValueError("a slice rule needs mode 'required' (Kueue: podset-slice-required-topology)")
        return self


class TeamPolicy(_Model):
    queue: QueueRule = Field(default_factory=lambda: QueueRule())
    kueuePriority: PriorityRule | None = None
    podPriority: PriorityRule | None = None
    topology: TopologyRule | None = None
    nodeAffinity: list[NodeSelectorRequirement] = Field(default_factory=list)


class TeamSpec(_Named):
    namespaces: list[DNSLabel] = Field(
        default_factory=list, description="namespace names; default from the naming preset"
    )
    namespaceSelector: LabelSelector | None = None
    cohort: str | None = None
    quotas: list[FlavorQuota] = Field(default_factory=list)
    preemption: Preemption | None = None
    fairSharing: FairSharing | None = None
    queueingStrategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"
    policy: TeamPolicy = Field(default_factory=TeamPolicy)


class Platform(_Model):
    apiVersion: Literal["kueue-governor.io/v1alpha1"] = "kueue-governor.io/v1alpha1"
    kind: Literal["Platform"] = "Platform"
    naming: Literal["default", "hyperpod"] = "default"
    topologies: list[TopologySpec] = Field(default_factory=list)
    flavors: list[FlavorSpec] = Field(default_factory=list)
    cohorts: list[CohortSpec] = Field(default_factory=list)
    priorities: list[PrioritySpec] = Field(default_factory=list)
    teams: list[TeamSpec] = Field(default_factory=list)


class Problem(BaseModel):
    """One finding about a platform file: ``path`` like ``teams[1].quotas[0].flavor``."""

    model_config = ConfigDict(frozen=True)

    path: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class PlatformError(ValueError):
    """A platform file that cannot be used; ``problems`` lists every finding with its path."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  {problem}" for problem in problems)
        super().__init__(f"{source}: invalid platform file\n{lines}")


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker for a mapping key (the key itself precedes it)
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _names(items: list[Any], what: str, path: str, problems: list[Problem]) -> set[str]:
    names: set[str] = set()
    for index, item in enumerate(items):
        if item.name in names:
            problems.append(Problem(path=f"{path}[{index}].name", message=f"duplicate {what} {item.name!r}"))
        names.add(item.name)
    return names


def check_platform(platform: Platform) -> list[Problem]:
    """Check references between sections; return every problem found (empty list: consistent).

    Checked (SPEC §2, §6): unique names; flavor → topology, team → flavor/cohort/priority,
    cohort → parent (no cycles); topology levels named in a team policy exist in the team
    flavor's Topology; ``borrowingLimit``/``lendingLimit`` only with a cohort; ``lendingLimit``
    not above ``nominalQuota``; every name the naming preset derives fits where it lands (label
    values, namespace names); each effective namespace belongs to one team, none is a system
    namespace, no two teams share a ``namespaceSelector``; ``policy.queue`` names no other team's
    LocalQueue.
    """
    problems: list[Problem] = []
    topologies = {t.name: t for t in platform.topologies}
    _names(platform.topologies, "topology", "topologies", problems)
    flavor_names = _names(platform.flavors, "flavor", "flavors", problems)
    cohort_names = _names(platform.cohorts, "cohort", "cohorts", problems)
    priority_names = _names(platform.priorities, "priority", "priorities", problems)
    _names(platform.teams, "team", "teams", problems)
    flavors = {f.name: f for f in platform.flavors}

    for index, flavor in enumerate(platform.flavors):
        if flavor.topologyName is not None and flavor.topologyName not in topologies:
            problems.append(
                Problem(
                    path=f"flavors[{index}].topologyName",
                    message=f"unknown topology {flavor.topologyName!r} (known: {sorted(topologies)})",
                )
            )

    parents = {c.name: c.parentName for c in platform.cohorts}
    for index, cohort in enumerate(platform.cohorts):
        if cohort.parentName is not None and cohort.parentName not in cohort_names:
            problems.append(
                Problem(
                    path=f"cohorts[{index}].parentName",
                    message=f"unknown cohort {cohort.parentName!r} (known: {sorted(cohort_names)})",
                )
            )
        seen = {cohort.name}
        parent = cohort.parentName
        while parent is not None and parent in parents:
            if parent in seen:
                problems.append(
                    Problem(path=f"cohorts[{index}].parentName", message=f"cohort cycle through {parent!r}")
                )
                break
            seen.add(parent)
            parent = parents[parent]

    for index, team in enumerate(platform.teams):
        base = f"teams[{index}]"
        if team.cohort is not None and team.cohort not in cohort_names:
            problems.append(
                Problem(
                    path=f"{base}.cohort", message=f"unknown cohort {team.cohort!r} (known: {sorted(cohort_names)})"
                )
            )
        for qindex, quota in enumerate(team.quotas):
            qpath = f"{base}.quotas[{qindex}]"
            if quota.flavor not in flavor_names:
                problems.append(
                    Problem(
                        path=f"{qpath}.flavor",
                        message=f"unknown flavor {quota.flavor!r} (known: {sorted(flavor_names)})",
                    )
                )
            for resource, limits in quota.resources.items():
                rpath = f"{qpath}.resources.{resource}"
                for field in ("borrowingLimit", "lendingLimit"):
                    if getattr(limits, field) is not None and team.cohort is None:
                        problems.append(
                            Problem(
                                path=f"{rpath}.{field}",
                                message=f"{field} needs the team to be in a cohort (Kueue ignores it otherwise)",
                            )
                        )
                if limits.lendingLimit is not None and parse_quantity(limits.lendingLimit) > parse_quantity(
                    limits.nominalQuota
                ):
                    problems.append(
                        Problem(
                            path=f"{rpath}.lendingLimit",
                            message=f"lendingLimit {limits.lendingLimit} is above nominalQuota {limits.nominalQuota}",
                        )
                    )
        policy = team.policy
        for field in ("kueuePriority", "podPriority"):
            rule: PriorityRule | None = getattr(policy, field)
            if rule is None:
                continue
            named = ([rule.default] if rule.default else []) + list(rule.allowed or [])
            for name in named:
                if name not in priority_names:
                    problems.append(
                        Problem(
                            path=f"{base}.policy.{field}",
                            message=f"unknown priority {name!r} (known: {sorted(priority_names)})",
                        )
                    )
            if rule.default and rule.allowed is not None and rule.default not in rule.allowed:
                problems.append(
                    Problem(
                        path=f"{base}.policy.{field}.default",
                        message=f"default {rule.default!r} is not in allowed {rule.allowed}",
                    )
                )
            if field == "podPriority":
                for name in named:
                    spec = next((p for p in platform.priorities if p.name == name), None)
                    if spec is not None and not spec.podPriorityClass:
                        problems.append(
                            Problem(
                                path=f"{base}.policy.podPriority",
                                message=f"priority {name!r} has no Kubernetes PriorityClass "
                                "(set podPriorityClass: true)",
                            )
                        )
        if policy.topology is not None and policy.topology.mode != "none":
            problems.extend(_check_topology_rule(base, team, flavors, topologies))
    problems.extend(_check_derived_names(platform))
    problems.extend(_check_namespaces(platform))
    problems.extend(_check_queues(platform))
    return problems


#: Kubernetes label values and namespace names have at most 63 characters.
_NAME_LIMIT = 63


def _check_derived_names(platform: Platform) -> list[Problem]:
    """Every name the naming preset derives is valid where it lands (SPEC §2).

    The LocalQueue, ClusterQueue and WorkloadPriorityClass names are label values too
    (``kueue.x-k8s.io/queue-name``, ``kueue.x-k8s.io/cluster-queue-name`` on the pods Kueue
    admits, ``kueue.x-k8s.io/priority-class``); a namespace name is a DNS-1123 label. The platform
    names are DNS-1123 labels already and the presets only add lower-case affixes, so only the
    length can go wrong.
    """
    problems: list[Problem] = []

    def check(path: str, kind: str, name: str, limited: str) -> None:
        if len(name) > _NAME_LIMIT:
            problems.append(
                Problem(
                    path=path,
                    message=f"{kind} name {name!r} would be {len(name)} characters; {limited} has at most "
                    f"{_NAME_LIMIT}",
                )
            )

    for index, team in enumerate(platform.teams):
        path = f"teams[{index}].name"
        if not team.namespaces:
            for namespace in team_namespaces(platform, team):
                check(path, "Namespace", namespace, "a namespace name")
        check(path, "ClusterQueue", cluster_queue_name(platform, team), "a label value")
        check(path, "LocalQueue", local_queue_name(platform, team), "a label value")
    for index, priority in enumerate(platform.priorities):
        name = priority_class_name(platform, priority.name)
        check(f"priorities[{index}].name", "WorkloadPriorityClass", name, "a label value")
        if priority.podPriorityClass and name.startswith("system-"):
            # kube-apiserver: the 'system-' prefix of PriorityClass names is reserved.
            problems.append(
                Problem(
                    path=f"priorities[{index}].name",
                    message=f"PriorityClass name {name!r}: the 'system-' prefix is reserved by Kubernetes",
                )
            )
    return problems


def _selector_key(selector: LabelSelector) -> frozenset[tuple[str, str, frozenset[str]]]:
    """A label selector as a set of requirements (``matchLabels`` entries as ``In`` with one value)."""
    requirements = {(key, "In", frozenset([value])) for key, value in selector.matchLabels.items()}
    requirements |= {(e.key, e.operator, frozenset(e.values)) for e in selector.matchExpressions}
    return frozenset(requirements)


def _check_namespaces(platform: Platform) -> list[Problem]:
    """Each effective namespace (listed, else from the naming preset) belongs to one team; no team
    claims a system namespace; no two teams have the same ``namespaceSelector``."""
    problems: list[Problem] = []
    owner: dict[str, int] = {}
    for index, team in enumerate(platform.teams):
        seen: set[str] = set()
        for nindex, namespace in enumerate(team_namespaces(platform, team)):
            if team.namespaces:
                path, what = f"teams[{index}].namespaces[{nindex}]", f"namespace {namespace!r}"
            else:
                path, what = f"teams[{index}].name", f"namespace {namespace!r} (the team's default namespace)"
            if namespace in seen:
                problems.append(Problem(path=path, message=f"{what} is listed twice"))
                continue
            seen.add(namespace)
            if namespace in SYSTEM_NAMESPACES:
                problems.append(
                    Problem(path=path, message=f"{what} is a system namespace, which the webhook never touches")
                )
                continue
            first = owner.setdefault(namespace, index)
            if first != index:
                problems.append(
                    Problem(
                        path=path,
                        message=f"{what} is claimed by team {platform.teams[first].name!r} (teams[{first}]) and "
                        f"team {team.name!r}; a namespace belongs to one team",
                    )
                )
    selectors: dict[frozenset[tuple[str, str, frozenset[str]]], int] = {}
    for index, team in enumerate(platform.teams):
        if team.namespaceSelector is None:
            continue
        first = selectors.setdefault(_selector_key(team.namespaceSelector), index)
        if first != index:
            problems.append(
                Problem(
                    path=f"teams[{index}].namespaceSelector",
                    message=f"same namespaceSelector as team {platform.teams[first].name!r} (teams[{first}]): "
                    "every namespace it selects would belong to both teams",
                )
            )
    return problems


def _check_queues(platform: Platform) -> list[Problem]:
    """``policy.queue`` names no LocalQueue generated for another team (SPEC §3: a queue of another
    team is denied, so defaulting or allowing one would hand out that team's quota)."""
    problems: list[Problem] = []
    queue_owner: dict[str, int] = {}
    for index, team in enumerate(platform.teams):
        queue_owner.setdefault(local_queue_name(platform, team), index)
    for index, team in enumerate(platform.teams):
        rule = team.policy.queue
        named = [("default", rule.default)] if rule.default is not None else []
        named += [(f"allowed[{qindex}]", name) for qindex, name in enumerate(rule.allowed)]
        for field, name in named:
            other = queue_owner.get(name, index)
            if other != index:
                problems.append(
                    Problem(
                        path=f"teams[{index}].policy.queue.{field}",
                        message=f"{name!r} is the LocalQueue of team {platform.teams[other].name!r} "
                        f"(teams[{other}]); a team may name only its own queues",
                    )
                )
    return problems


def _check_topology_rule(
    base: str, team: TeamSpec, flavors: dict[str, FlavorSpec], topologies: dict[str, TopologySpec]
) -> list[Problem]:
    rule = team.policy.topology
    assert rule is not None
    path = f"{base}.policy.topology"
    name = rule.topologyName
    if name is None:
        names = sorted({flavors[q.flavor].topologyName or "" for q in team.quotas if q.flavor in flavors} - {""})
        if len(names) != 1:
            return [
                Problem(
                    path=f"{path}.topologyName",
                    message="cannot tell which Topology applies: the team's flavors name "
                    f"{names or 'none'}; set topologyName",
                )
            ]
        name = names[0]
    if name not in topologies:
        return [Problem(path=f"{path}.topologyName", message=f"unknown topology {name!r}")]
    levels = topologies[name].levels
    problems = []
    for field in ("level", "sliceLevel"):
        level = getattr(rule, field)
        if level is not None and level not in levels:
            problems.append(
                Problem(path=f"{path}.{field}", message=f"{level!r} is not a level of Topology {name!r}: {levels}")
            )
    if (
        rule.level in levels
        and rule.sliceLevel in levels
        and levels.index(rule.sliceLevel) < levels.index(rule.level or "")
    ):
        problems.append(
            Problem(path=f"{path}.sliceLevel", message="sliceLevel must be at or below level (narrower or equal)")
        )
    return problems


def parse_platform(data: Any, source: str = "<platform>") -> Platform:
    """Validate a decoded platform document (dict) and its references.

    Raises:
        PlatformError: schema errors (with pydantic's field paths) or reference problems.
    """
    if not isinstance(data, dict):
        raise PlatformError(source, [Problem(path="", message="the platform file must be a YAML mapping")])
    try:
        platform = Platform.model_validate(data)
    except ValidationError as exc:
        problems = [
            Problem(path=_loc(err["loc"]), message=err["msg"].removeprefix("Value error, ")) for err in exc.errors()
        ]
        raise PlatformError(source, problems) from None
    errors = [p for p in check_platform(platform) if p.severity == "error"]
    if errors:
        raise PlatformError(source, errors)
    return platform


def _safe_load(text: str, source: str) -> Any:
    """``yaml.safe_load`` whose error marks name ``source`` (not ``<unicode string>``) and keep the
    line snippet that PyYAML shows for text."""
    loader = yaml.SafeLoader(text)
    loader.name = source
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_platform(path: str | Path) -> Platform:
    """Read and validate a platform YAML file.

    Every file-level message names the file, since some callers print only the problems.

    Raises:
        PlatformError: unreadable file, YAML syntax error, schema or reference problems.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise PlatformError(source, [Problem(path="", message=f"cannot read {source}: {reason}")]) from None
    except UnicodeDecodeError as exc:
        raise PlatformError(
            source, [Problem(path="", message=f"{source} is not UTF-8 text: {exc.reason} at byte {exc.start}")]
        ) from None
    try:
        data = _safe_load(text, source)
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: e.g. an integer of over 4300 digits
        raise PlatformError(source, [Problem(path="", message=f"not valid YAML: {exc}")]) from None
    except RecursionError:
        raise PlatformError(source, [Problem(path="", message="not valid YAML: nested too deeply")]) from None
    return parse_platform(data, source)


def platform_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the platform file, for editors."""
    schema = Platform.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "kueue-governor platform file"
    return schema


def quota_total(team: TeamSpec, flavor: str, resource: str) -> Decimal:
    """Sum of a team's ``nominalQuota`` for one flavor and resource (GPUs, CPUs, bytes)."""
    return sum(
        (
            parse_quantity(q.resources[resource].nominalQuota)
            for q in team.quotas
            if q.flavor == flavor and resource in q.resources
        ),
        Decimal(0),
    )
