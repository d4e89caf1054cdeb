"""Team policies as the webhook reads them: the platform file compiled to concrete Kueue names.

The platform file speaks of teams, priorities and topologies; the webhook needs, per team, the
exact LocalQueue names, WorkloadPriorityClass names, PriorityClass names and Topology levels.
:func:`compile_policies` resolves the naming preset once (SPEC §2) and yields a
:class:`PolicySet`, a plain JSON document that the generator also ships as the webhook's
ConfigMap, so the server never needs the platform file itself. The preset's functions live in
:mod:`webhook.core.platform.naming` and stay importable from here.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from webhook.core.objects.quantity import format_quantity, parse_quantity
from webhook.core.platform.controllers import DEFAULT_CONTROLLERS, controller_name
from webhook.core.platform.fields import DEFAULT_PATIENCE, patience_seconds
from webhook.core.platform.naming import (
    SYSTEM_NAMESPACES,
    cluster_queue_name,
    local_queue_name,
    priority_class_name,
    team_namespaces,
)
from webhook.core.platform.platform import (
    Enforcement,
    LabelSelector,
    NodeSelectorRequirement,
    Platform,
    PriorityRule,
    TeamSpec,
    TopologyMode,
)

__all__ = [
    "ALWAYS_EXCLUDED_NAMESPACES",
    "DEFAULT_PATIENCE_SECONDS",
    "POLICY_API_VERSION",
    "PolicySet",
    "TeamPolicyCompiled",
    "TopologyPlacement",
    "ValueRule",
    "cluster_queue_name",
    "compile_policies",
    "local_queue_name",
    "priority_class_name",
    "team_namespaces",
]

POLICY_API_VERSION = "kueue-governor.io/v1alpha1"
DEFAULT_PATIENCE_SECONDS = patience_seconds(DEFAULT_PATIENCE)
#: SPEC §3: never touched, whatever the platform file says.
ALWAYS_EXCLUDED_NAMESPACES = SYSTEM_NAMESPACES


def _quantity_text(value: str) -> str:
    """A quota limit as :func:`compile_policies` writes it: a non-negative Kubernetes quantity."""
    if parse_quantity(value) < 0:  # QuantityError (a ValueError) for what is no quantity
        raise ValueError(f"{value!r} is negative; a quota limit is a non-negative quantity")
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ValueRule(_Frozen):
    """A label or field value with a default and an allowed set (None: anything)."""

    default: str | None = None
    allowed: list[str] | None = None
    enforcement: Enforcement = "enforce"


class TopologyPlacement(_Frozen):
    """What TAS annotation each podset gets (SPEC §3 topology rule)."""

    mode: TopologyMode
    topologyName: str
    levels: list[str] = Field(description="the Topology's levels, broadest first")
    level: str | None = None
    sliceLevel: str | None = None
    sliceSize: int | None = None
    autoConstraint: Literal["required", "preferred"] = Field(
        "required", description="mode auto: the constraint written at the level it chooses"
    )
    enforcement: Enforcement = "default"
    nodeLabels: dict[str, str] = Field(
        default_factory=dict, description="labels selecting the team's TAS nodes (auto mode)"
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, description="the flavor's tolerations: node taints Kueue's TAS lets its pods pass"
    )
    patienceSeconds: int | None = Field(
        DEFAULT_PATIENCE_SECONDS,
        description="seconds a workload waits on topology before the governor widens its required level "
        "(webhook.core.plan.widen); None: never",
    )

    @model_serializer(mode="wrap")
    def _without_default_constraint(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Defaults are left out: a policy ConfigMap reads the same as before the options existed.
        out: dict[str, Any] = handler(self)
        if out.get("autoConstraint") == "required":
            del out["autoConstraint"]
        if out.get("patienceSeconds") == DEFAULT_PATIENCE_SECONDS:
            del out["patienceSeconds"]
        return out


class TeamPolicyCompiled(_Frozen):
    team: str
    namespaces: list[str]
    namespaceSelector: LabelSelector | None = None
    queue: ValueRule
    kueuePriority: ValueRule | None = None
    podPriority: ValueRule | None = None
    topology: TopologyPlacement | None = None
    nodeAffinity: list[NodeSelectorRequirement] = Field(default_factory=list)
    quotaLimits: dict[str, Annotated[str, AfterValidator(_quantity_text)]] = Field(
        default_factory=dict,
        description="resource → the most the team's ClusterQueue can ever hold (nominalQuota + "
        "borrowingLimit over its flavors, base units); resources whose borrowing has no limit are left out",
    )
    coveredResources: list[str] | None = Field(
        default=None,
        description="the resources the team's ClusterQueue covers (its resourceGroups' coveredResources); "
        "None when unknown (a policy compiled before this field existed)",
    )
    priorityClasses: list[str] | None = Field(
        default=None,
        description="the Kubernetes PriorityClass names the platform generates (its priorities with "
        "podPriorityClass: true); None when unknown (a policy compiled before this field existed)",
    )
    workloadPriorityOnly: list[str] = Field(
        default_factory=list,
        description="the platform's priorities without podPriorityClass, by name: a WorkloadPriorityClass "
        "is generated for each, no PriorityClass",
    )


class PolicySet(_Frozen):
    """Everything the webhook needs; serialised as JSON in the policy ConfigMap."""

    apiVersion: Literal["kueue-governor.io/v1alpha1"] = "kueue-governor.io/v1alpha1"
    kind: Literal["PolicySet"] = "PolicySet"
    teams: list[TeamPolicyCompiled] = Field(default_factory=list)
    excludedNamespaces: list[str] = Field(default_factory=lambda: list(ALWAYS_EXCLUDED_NAMESPACES))
    controllers: list[Annotated[str, AfterValidator(controller_name)]] = Field(
        default_factory=lambda: list(DEFAULT_CONTROLLERS),
        description="the platform file's controllers: the users that may make an object a child of a "
        "workload Kueue manages (a policy compiled before this field existed: the default list)",
    )


def _value_rule(platform: Platform, rule: PriorityRule | None, pods: bool = False) -> ValueRule | None:
    """A priority rule with concrete names; ``pods``: a ``podPriority`` rule, whose "anything"
    (no ``allowed``) is every priority that has a PriorityClass, not every priority."""
    if rule is None:
        return None
    known = [p.name for p in platform.priorities if p.podPriorityClass or not pods]
    allowed = rule.allowed if rule.allowed is not None else known
    return ValueRule(
        default=priority_class_name(platform, rule.default) if rule.default else None,
        allowed=[priority_class_name(platform, name) for name in allowed],
        enforcement=rule.enforcement,
    )


def _topology(platform: Platform, team: TeamSpec) -> TopologyPlacement | None:
    rule = team.policy.topology
    if rule is None or rule.mode == "none":
        return None
    flavors = {f.name: f for f in platform.flavors}
    team_flavors = [flavors[q.flavor] for q in team.quotas if q.flavor in flavors]
    name = rule.topologyName or next(f.topologyName for f in team_flavors if f.topologyName)
    topology = next(t for t in platform.topologies if t.name == name)
    node_labels: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    for flavor in team_flavors:
        if flavor.topologyName == name:
            node_labels.update(flavor.nodeLabels)
            tolerations = [t.model_dump(exclude_none=True) for t in flavor.tolerations]
            break
    return TopologyPlacement(
        mode=rule.mode,
        topologyName=name,
        levels=list(topology.levels),
        level=rule.level,
        sliceLevel=rule.sliceLevel,
        sliceSize=rule.sliceSize,
        autoConstraint=rule.autoConstraint or "required",
        enforcement=rule.enforcement,
        nodeLabels=node_labels,
        tolerations=tolerations,
        patienceSeconds=patience_seconds(rule.patience or DEFAULT_PATIENCE),
    )


def _quota_limits(team: TeamSpec) -> dict[str, str]:
    """nominalQuota + borrowingLimit per resource over the team's flavors. Without a cohort there
    is nothing to borrow; in a cohort a flavor without a borrowingLimit may borrow any amount, so
    that resource has no limit here."""
    limits: dict[str, Decimal] = {}
    unlimited: set[str] = set()
    for quota in team.quotas:
        for resource, amount in quota.resources.items():
            total = parse_quantity(amount.nominalQuota)
            if team.cohort is not None:
                if amount.borrowingLimit is None:
                    unlimited.add(resource)
                else:
                    total += parse_quantity(amount.borrowingLimit)
            limits[resource] = limits.get(resource, Decimal(0)) + total
    return {name: format_quantity(value) for name, value in sorted(limits.items()) if name not in unlimited}


def compile_policies(platform: Platform, extra_excluded: list[str] | None = None) -> PolicySet:
    """Resolve every team's policy to concrete names.

    Input must have passed :func:`webhook.core.platform.platform.check_platform` (references resolve).
    ``extra_excluded``: further namespaces never mutated (the webhook's own namespace).
    """
    teams = []
    # The same source as the generator's PriorityClasses (webhook.generate.manifests.priority_classes).
    generated = [priority_class_name(platform, p.name) for p in platform.priorities if p.podPriorityClass]
    workload_only = [priority_class_name(platform, p.name) for p in platform.priorities if not p.podPriorityClass]
    for team in platform.teams:
        own_queue = local_queue_name(platform, team)
        queue = team.policy.queue
        default_queue = queue.default or own_queue
        allowed = list(dict.fromkeys([own_queue, default_queue, *queue.allowed]))
        teams.append(
            TeamPolicyCompiled(
                team=team.name,
                namespaces=team_namespaces(platform, team),
                namespaceSelector=team.namespaceSelector,
                queue=ValueRule(default=default_queue, allowed=allowed, enforcement=queue.enforcement),
                kueuePriority=_value_rule(platform, team.policy.kueuePriority),
                podPriority=_value_rule(platform, team.policy.podPriority, pods=True),
                topology=_topology(platform, team),
                quotaLimits=_quota_limits(team),
                coveredResources=sorted({name for quota in team.quotas for name in quota.resources}),
                nodeAffinity=list(team.policy.nodeAffinity),
                priorityClasses=generated,
                workloadPriorityOnly=workload_only,
            )
        )
    excluded = list(dict.fromkeys([*ALWAYS_EXCLUDED_NAMESPACES, *(extra_excluded or [])]))
    return PolicySet(teams=teams, excludedNamespaces=excluded, controllers=list(platform.controllers))
