"""The platform file's models (SPEC §2): pydantic classes with Kueue's field names.

Every model forbids unknown fields, so a typo fails with its exact path. Cross-references are
checked by :mod:`webhook.core.platform.checks`; :mod:`webhook.core.platform.platform` loads a file through
both and is the module callers import.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from webhook.core.objects.quantity import QuantityError, parse_quantity
from webhook.core.platform.controllers import DEFAULT_CONTROLLERS, controller_name

API_VERSION = "kueue-governor.io/v1alpha1"
HOSTNAME_LABEL = "kubernetes.io/hostname"

# Used with fullmatch: "$" would also accept a trailing newline ("alpha\n"), which the API server refuses.
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _matching(value: str, pattern: re.Pattern[str], most: int, what: str) -> str:
    """``value`` when ``pattern`` matches all of it within ``most`` characters, else ValueError
    ``'{value}' is not {what}``."""
    if len(value) > most or not pattern.fullmatch(value):
        raise ValueError(f"{value!r} is not {what}")
    return value


def _dns1123_label(value: str) -> str:
    what = "lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters"
    return _matching(value, _DNS1123_LABEL, 63, f"a DNS-1123 label ({what})")


def dns1123_label_error(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 label (an object or namespace name), or None when it is one.

    Kubernetes names that also end up as label values (LocalQueue and WorkloadPriorityClass names
    in ``kueue.x-k8s.io/queue-name`` and ``kueue.x-k8s.io/priority-class``) must be labels too.
    """
    return _error_of(_dns1123_label, value)


def dns1123_subdomain_error(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 subdomain (the name most Kubernetes objects must have:
    Jobs, Workloads, ClusterQueues, Topologies, webhook configurations…), or None when it is one."""
    what = (
        "a valid object name: a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', starting and "
        "ending with a letter or digit, at most 253 characters)"
    )
    return _error_of(lambda name: _matching(name, _DNS1123_SUBDOMAIN, 253, what), value)


def label_value_error(value: str) -> str | None:
    """Why ``value`` is not a Kubernetes label value, or None when it is one."""
    return _error_of(_label_value, value)


def _error_of(check: Callable[[str], str], value: str) -> str | None:
    """The message of the ValueError ``check(value)`` raises, or None when it passes."""
    try:
        check(value)
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
    what = "a valid label value (at most 63 of [A-Za-z0-9-_.], starting and ending with a letter or digit)"
    return _matching(value, _LABEL_VALUE, 63, what)


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
    size and the node inventory, groups a driver of one pod with its workers and slices a podset
    larger than the domains of the level below (:mod:`webhook.core.plan.rules.auto`); ``none`` writes
    nothing.

    ``level`` must be a level of the Topology (checked by :func:`check_platform`). With
    ``required``/``preferred`` it is the level written. With ``auto`` it is optional and is the
    broadest level at which the webhook may *require* placement: ``auto`` requires the narrowest
    level where one domain of the node inventory holds the whole podset, never a level broader than
    ``level`` (unset: the Topology's broadest level). A podset larger than every ``level`` domain
    gets ``preferred`` at ``level`` instead, and so does every podset when there is no inventory
    (unset: at the narrowest level); ``preferred`` never blocks admission. ``autoConstraint``
    (``auto`` only): ``required`` (the default) or ``preferred`` at the level ``auto`` chooses;
    with ``preferred`` no slices are added.
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
    autoConstraint: Literal["required", "preferred"] | None = Field(
        None,
        description="mode auto only: the constraint written at the level auto chooses for a podset that fits "
        "one of its domains, required (default: placed there or not admitted; with slices of the next level "
        "for a podset larger than its domains) or preferred (Kueue tries that level, else spreads)",
    )
    enforcement: Enforcement = "default"

    @model_validator(mode="after")
    def _check_shape(self) -> TopologyRule:
        if self.mode in ("required", "preferred") and self.level is None:
            raise ValueError(f"mode {self.mode!r} needs a level")
        if self.autoConstraint is not None and self.mode != "auto":
            raise ValueError(f"autoConstraint applies to mode 'auto' only, not {self.mode!r}")
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
    controllers: list[Annotated[str, AfterValidator(controller_name)]] = Field(
        default_factory=lambda: list(DEFAULT_CONTROLLERS),
        description="the users (as the API server authenticates them: system:serviceaccount:NAMESPACE:NAME, "
        "system:serviceaccount:NAMESPACE:* for every service account of a namespace, or a user name such as "
        "system:kube-controller-manager) that may make an object a child of a workload Kueue manages; "
        "default: Kubernetes' controllers and the operators Kueue integrates with, as their releases install them",
    )
