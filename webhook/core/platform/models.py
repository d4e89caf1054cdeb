"""The platform file's models (SPEC §2): pydantic classes with Kueue's field names.

Every model forbids unknown fields, so a typo fails with its exact path, and every field has a
description, which ``kgov schema`` emits and the docs' platform-file reference is generated from.
The value types and their checks are in :mod:`webhook.core.platform.fields`; cross-references are
checked by :mod:`webhook.core.platform.checks`; :mod:`webhook.core.platform.platform` loads a file
through both and is the module callers import.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from webhook.core.platform.controllers import DEFAULT_CONTROLLERS, controller_name
from webhook.core.platform.fields import (
    API_VERSION,
    DEFAULT_PATIENCE,
    HOSTNAME_LABEL,
    DNSLabel,
    Enforcement,
    LabelKey,
    LabelValue,
    Patience,
    Quantity,
    QuotaAmount,
    RequirementValue,
    TopologyMode,
    dns1123_label,
    label_key,
    never_negative,
    requirement_values,
)
from webhook.core.platform.target import KueueTarget

_EFFECT = "the taint effect: NoSchedule, PreferNoSchedule or NoExecute"
_ENFORCEMENT = (
    "default: fill in only what is missing; enforce: also deny a value outside the allowed set; "
    "warn: admit such a value with an AdmissionReview warning"
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _Named(_Model):
    name: str = Field(description="the name: a DNS-1123 label", examples=["research"])

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        return dns1123_label(value)


class TopologySpec(_Named):
    """A Kueue Topology: node labels from the broadest domain (spine, block) to the narrowest."""

    levels: list[LabelKey] = Field(
        description="node label keys, broadest first; 1 to 16, unique; kubernetes.io/hostname only as the last",
        examples=[["topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2"]],
    )

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
    """A taint the nodes of a flavor carry (ResourceFlavor ``spec.nodeTaints``)."""

    key: LabelKey = Field(description="the taint key: a label key")
    value: LabelValue | None = Field(default=None, description="the taint value: a label value")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(description=_EFFECT)


class Toleration(_Model):
    """A toleration Kueue adds to the pods admitted on a flavor (ResourceFlavor ``spec.tolerations``)."""

    key: str | None = Field(default=None, description="a label key; empty or absent: every key (operator Exists)")
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists, or Equal (absent: Equal, as Kubernetes defaults it)"
    )
    value: LabelValue | None = Field(default=None, description="the value to match with operator Equal")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description=f"{_EFFECT}; absent: every effect"
    )
    tolerationSeconds: int | None = Field(
        default=None, description="NoExecute only: how long the pod stays bound after the taint appears"
    )

    @field_validator("key")
    @classmethod
    def _check_key(cls, value: str | None) -> str | None:
        return label_key(value) if value else value


class FlavorSpec(_Named):
    """A Kueue ResourceFlavor, plus what one of its nodes offers."""

    nodeLabels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description="labels that select the flavor's nodes (ResourceFlavor spec.nodeLabels)",
        examples=[{"node.kubernetes.io/instance-type": "p5.48xlarge"}],
    )
    nodeTaints: list[Taint] = Field(default_factory=list, description="taints the flavor's nodes carry")
    tolerations: list[Toleration] = Field(
        default_factory=list, description="tolerations Kueue adds to the pods it admits on this flavor"
    )
    topologyName: str | None = Field(
        default=None, description="a topology of the platform: the flavor is topology-aware (needs nodeLabels)"
    )
    nodeResources: dict[str, Annotated[Quantity, AfterValidator(never_negative("a node resource"))]] = Field(
        default_factory=dict,
        description="allocatable resources of one node of this flavor, as a record (kgov import-hyperpod writes it); "
        "extended resources in whole units",
        examples=[{"cpu": 192, "memory": "2Ti", "nvidia.com/gpu": 8}],
    )

    @model_validator(mode="after")
    def _topology_needs_labels(self) -> FlavorSpec:
        # Kueue: a ResourceFlavor with topologyName must have at least one nodeLabel.
        if self.topologyName is not None and not self.nodeLabels:
            raise ValueError("a flavor with a topologyName needs at least one nodeLabel")
        return self


class FairSharing(_Model):
    """Kueue's fair sharing of a ClusterQueue or Cohort."""

    weight: Annotated[Quantity, AfterValidator(never_negative("a fair-sharing weight"))] = Field(
        default=1, description="the share of unused quota this queue or cohort gets against its siblings"
    )


class CohortSpec(_Named):
    """A Kueue Cohort: teams in one cohort borrow each other's unused quota."""

    parentName: str | None = Field(default=None, description="a cohort of the platform this one belongs to (no cycles)")
    fairSharing: FairSharing | None = Field(default=None, description="the cohort's fair-sharing weight")


class PrioritySpec(_Named):
    """A WorkloadPriorityClass; with ``podPriorityClass`` also a Kubernetes PriorityClass."""

    value: int = Field(ge=-(2**31), le=10**9, description="the priority value: higher is higher")
    description: str = Field(default="", description="free text, copied to the generated objects")
    podPriorityClass: bool = Field(
        default=False, description="also generate a Kubernetes PriorityClass of this name, for pods' priorityClassName"
    )


class ResourceQuota(_Model):
    """The quota of one resource of one flavor (ClusterQueue ``resourceGroups[].flavors[].resources[]``)."""

    nominalQuota: QuotaAmount = Field(description="the quota the team owns", examples=[64])
    borrowingLimit: QuotaAmount | None = Field(
        default=None, description="the most the team may borrow from its cohort (needs a cohort); absent: no limit"
    )
    lendingLimit: QuotaAmount | None = Field(
        default=None, description="the most of its unused quota the team lends to its cohort (needs a cohort)"
    )


class FlavorQuota(_Model):
    """A team's quotas on one flavor."""

    flavor: str = Field(description="a flavor of the platform")
    resources: dict[str, ResourceQuota] = Field(
        min_length=1,
        description="per resource name (cpu, memory, nvidia.com/gpu…): its quota; list every resource the "
        "team's pods request, cpu and memory too: Kueue admits no workload requesting a resource its "
        "ClusterQueue does not cover (unless its Configuration excludes the resource)",
    )


class BorrowWithinCohort(_Model):
    """Kueue's ``preemption.borrowWithinCohort``."""

    policy: Literal["Never", "LowerPriority"] = Field(
        default="Never", description="whether a workload that borrows may preempt lower-priority ones in the cohort"
    )
    maxPriorityThreshold: int | None = Field(
        default=None, description="only workloads at or below this priority may be preempted so"
    )


class Preemption(_Model):
    """Kueue's ClusterQueue ``preemption``."""

    reclaimWithinCohort: Literal["Never", "LowerPriority", "Any"] = Field(
        default="Never", description="which workloads of the cohort borrowing this queue's quota may be preempted"
    )
    withinClusterQueue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        default="Never", description="which of the queue's own workloads a pending one may preempt"
    )
    borrowWithinCohort: BorrowWithinCohort | None = Field(default=None, description="preemption while borrowing")


class LabelSelectorRequirement(_Model):
    """One ``matchExpressions[]`` entry of a label selector (meta/v1 LabelSelectorRequirement)."""

    key: LabelKey = Field(description="a label key")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="how the key is matched")
    values: list[RequirementValue] = Field(
        default_factory=list,
        validate_default=True,
        description="label values: at least one for In and NotIn, none for Exists and DoesNotExist",
    )

    _check_values = field_validator("values")(requirement_values)


class LabelSelector(_Model):
    """A meta/v1 LabelSelector: every label and expression must match."""

    matchLabels: dict[LabelKey, LabelValue] = Field(default_factory=dict, description="labels that must be set so")
    matchExpressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, description="expressions that must all hold"
    )


class NodeSelectorRequirement(_Model):
    """One ``nodeSelectorTerms[].matchExpressions[]`` entry (core/v1 NodeSelectorRequirement)."""

    key: LabelKey = Field(description="a node label key", examples=["node.kubernetes.io/instance-type"])
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(description="how the key is matched")
    values: list[RequirementValue] = Field(
        default_factory=list,
        validate_default=True,
        description="label values for In and NotIn (at least one), one integer for Gt and Lt, none otherwise",
    )

    _check_values = field_validator("values")(requirement_values)


class QueueRule(_Model):
    """Which LocalQueue a workload lands in (label ``kueue.x-k8s.io/queue-name``).

    Every name is a LocalQueue of this team: a DNS-1123 label (it is a label value too), never
    the LocalQueue generated for another team.
    """

    default: DNSLabel | None = Field(default=None, description="LocalQueue name; default: the team's LocalQueue")
    allowed: list[DNSLabel] = Field(
        default_factory=list, description="further LocalQueues of this team a user may name"
    )
    enforcement: Enforcement = Field(default="enforce", description=_ENFORCEMENT)


class PriorityRule(_Model):
    """A default and an allowed set of priority class names (platform ``priorities`` names)."""

    default: str | None = Field(
        default=None, description="a priority of the platform, set when the workload names none"
    )
    allowed: list[str] | None = Field(
        default=None, description="priorities of the platform; absent: any known priority"
    )
    enforcement: Enforcement = Field(default="enforce", description=_ENFORCEMENT)


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

    mode: TopologyMode = Field(
        default="preferred",
        description="required, preferred or unconstrained: that podset-<mode>-topology annotation; auto: the "
        "level chosen per podset from its size and the nodes; none: no annotation",
    )
    level: str | None = Field(
        default=None,
        description="a level of the team flavor's Topology; required/preferred: the level written; auto: the "
        "broadest level at which the webhook may require placement (a podset larger than its domains gets "
        "preferred at this level)",
    )
    topologyName: str | None = Field(default=None, description="default: the Topology of the team's flavors")
    sliceLevel: str | None = Field(
        default=None, description="mode required only, with sliceSize: the level of podset-slice-required-topology"
    )
    sliceSize: int | None = Field(default=None, ge=1, description="with sliceLevel: podset-slice-size, pods per slice")
    autoConstraint: Literal["required", "preferred"] | None = Field(
        default=None,
        description="mode auto only: the constraint written at the level auto chooses for a podset that fits "
        "one of its domains, required (default: placed there or not admitted; with slices of the next level "
        "for a podset larger than its domains) or preferred (Kueue tries that level, else spreads)",
    )
    enforcement: Enforcement = Field(default="default", description=_ENFORCEMENT + " (less locality than the policy)")
    patience: Patience | None = Field(
        default=None,
        description="how long a workload may wait for a domain of the level it requires before the governor "
        "widens it one level, then one more each time Kueue refuses the step (up to preferred at its first "
        f"level): a duration such as 60s, 5m or 1h30m, or never; default {DEFAULT_PATIENCE}",
        examples=["5m", "never"],
    )

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
    """What the webhook sets on, or refuses of, the team's workloads."""

    queue: QueueRule = Field(default_factory=lambda: QueueRule(), description="the queue label")
    kueuePriority: PriorityRule | None = Field(
        default=None, description="the kueue.x-k8s.io/priority-class label (a WorkloadPriorityClass)"
    )
    podPriority: PriorityRule | None = Field(
        default=None, description="each podset's priorityClassName (a PriorityClass)"
    )
    topology: TopologyRule | None = Field(default=None, description="the TAS annotations of each podset")
    nodeAffinity: list[NodeSelectorRequirement] = Field(
        default_factory=list, description="matchExpressions ANDed into every nodeSelectorTerm of every podset"
    )


class TeamSpec(_Named):
    """A team: its namespaces, ClusterQueue (quotas, cohort, preemption) and policy."""

    namespaces: list[DNSLabel] = Field(
        default_factory=list, description="namespace names; default from the naming preset"
    )
    namespaceSelector: LabelSelector | None = Field(default=None, description="the team's namespaces by their labels")
    cohort: str | None = Field(default=None, description="a cohort of the platform, to borrow and lend quota")
    quotas: list[FlavorQuota] = Field(default_factory=list, description="the ClusterQueue's quotas, per flavor")
    preemption: Preemption | None = Field(default=None, description="the ClusterQueue's preemption")
    fairSharing: FairSharing | None = Field(default=None, description="the ClusterQueue's fair-sharing weight")
    queueingStrategy: Literal["BestEffortFIFO", "StrictFIFO"] = Field(
        default="BestEffortFIFO", description="the ClusterQueue's queueing strategy"
    )
    policy: TeamPolicy = Field(default_factory=TeamPolicy, description="what the webhook does with its workloads")


class Platform(_Model):
    """The platform file: topologies, flavors, cohorts, priorities and teams."""

    apiVersion: Literal["kueue-governor.io/v1alpha1"] = Field(
        default="kueue-governor.io/v1alpha1", description="always " + API_VERSION
    )
    kind: Literal["Platform"] = Field(default="Platform", description="always Platform")
    naming: Literal["default", "hyperpod"] = Field(
        default="default",
        description="object names: default (the platform names) or hyperpod (SageMaker HyperPod's: "
        "hyperpod-ns-<team>, hyperpod-ns-<team>-localqueue, <priority>-priority)",
    )
    kueue: KueueTarget = Field(default_factory=KueueTarget, description="the Kueue release the cluster runs")
    topologies: list[TopologySpec] = Field(default_factory=list, description="Kueue Topologies")
    flavors: list[FlavorSpec] = Field(default_factory=list, description="Kueue ResourceFlavors")
    cohorts: list[CohortSpec] = Field(default_factory=list, description="Kueue Cohorts")
    priorities: list[PrioritySpec] = Field(default_factory=list, description="WorkloadPriorityClasses")
    teams: list[TeamSpec] = Field(default_factory=list, description="teams: a ClusterQueue and LocalQueues each")
    controllers: list[Annotated[str, AfterValidator(controller_name)]] = Field(
        default_factory=lambda: list(DEFAULT_CONTROLLERS),
        description="the users (as the API server authenticates them: system:serviceaccount:NAMESPACE:NAME, "
        "system:serviceaccount:NAMESPACE:* for every service account of a namespace, or a user name such as "
        "system:kube-controller-manager) that may make an object a child of a workload Kueue manages; "
        "default: Kubernetes' controllers and the operators Kueue integrates with, as their releases install them",
    )
