"""SageMaker HyperPod task governance definitions mapped to a platform file.

Inputs are read and checked by :mod:`webhook.generate.hyperpod_api`.

The mapping itself is documented in ``docs/hyperpod-mapping.md``; :func:`import_hyperpod` is pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from webhook.core.objects.quantity import QuantityError, format_quantity, parse_quantity
from webhook.core.platform.platform import HOSTNAME_LABEL, Platform, Problem, parse_platform
from webhook.generate.hyperpod_api import (
    ClusterSchedulerConfig,
    ComputeQuota,
    HyperPodError,
    QuotaResource,
    parse_compute_quotas,
    parse_scheduler_config,
)

__all__ = [
    "ACCELERATOR_RESOURCES",
    "AWS_TOPOLOGY_LEVELS",
    "DEFAULT_BORROW_LIMIT",
    "DEFAULT_COHORT",
    "INSTANCE_TYPE_LABEL",
    "ClusterSchedulerConfig",
    "ComputeQuota",
    "HyperPodError",
    "flavor_name",
    "import_hyperpod",
    "parse_compute_quotas",
    "parse_instance_resources",
    "parse_scheduler_config",
]

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
#: Network node labels HyperPod (EC2 instance topology) puts on nodes, broadest first.
AWS_TOPOLOGY_LEVELS = [
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    HOSTNAME_LABEL,
]
AWS_TOPOLOGY_NAME = "aws-network"
DEFAULT_COHORT = "shared-pool"
#: SageMaker's default for ``ResourceSharingConfig.BorrowLimit`` (percent).
DEFAULT_BORROW_LIMIT = 50
#: Extended resources that ``Accelerators`` counts, in the order they are looked for.
ACCELERATOR_RESOURCES = ("nvidia.com/gpu", "aws.amazon.com/neuron", "aws.amazon.com/neuroncore", "amd.com/gpu")


def parse_instance_resources(values: list[str]) -> dict[str, dict[str, Decimal]]:
    """``TYPE=RESOURCE=QTY[,RESOURCE=QTY…]`` options → instance type → resource → amount.

    ``"ml.p5.48xlarge=cpu=192,memory=2Ti,nvidia.com/gpu=8"`` → ``{"ml.p5.48xlarge": {"cpu":
    Decimal(192), "memory": Decimal(2199023255552), "nvidia.com/gpu": Decimal(8)}}``.

    Raises:
        ValueError: malformed option or quantity; the message quotes the option.
    """
    out: dict[str, dict[str, Decimal]] = {}
    for value in values:
        instance_type, sep, rest = value.partition("=")
        if not sep or not instance_type or not rest:
            raise ValueError(f"{value!r}: expected TYPE=RESOURCE=QUANTITY[,RESOURCE=QUANTITY…]")
        resources: dict[str, Decimal] = {}
        for pair in rest.split(","):
            resource, sep, amount = pair.partition("=")
            if not sep or not resource.strip():
                raise ValueError(f"{value!r}: {pair!r} is not RESOURCE=QUANTITY")
            try:
                resources[resource.strip()] = parse_quantity(amount.strip())
            except QuantityError as exc:
                raise ValueError(f"{value!r}: {exc}") from None
        out[_short(instance_type.strip())] = resources
    return out


def _short(instance_type: str) -> str:
    """``ml.p5.48xlarge`` and ``p5.48xlarge`` name the same instance type."""
    return instance_type.removeprefix("ml.")


def flavor_name(instance_type: str) -> str:
    """ResourceFlavor name of an instance type: ``ml.p5.48xlarge`` → ``ml-p5-48xlarge``."""
    return instance_type.lower().replace(".", "-")


def _render(resource: str, amount: Decimal) -> int | str:
    """A computed amount as a platform quantity: memory in the largest exact binary unit, CPU in
    cores or millicores, every other resource in whole units (rounded down)."""
    if resource == "memory" or resource.endswith("storage"):
        amount = Decimal(math.floor(amount))
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount and amount % size == 0:
                return f"{format_quantity(amount / size)}{suffix}"
        return int(amount)
    if resource == "cpu":
        millis = math.floor(amount * 1000)
        return millis // 1000 if millis % 1000 == 0 else f"{millis}m"
    return math.floor(amount)


def _accelerator(node: Mapping[str, Decimal]) -> str | None:
    return next((name for name in ACCELERATOR_RESOURCES if node.get(name)), None)


def _amounts(entry: QuotaResource, node: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """What one ``ComputeQuotaResourceConfig`` grants, per resource, given one node's resources.

    ``Count`` instances give ``Count`` times each node resource. Otherwise the share follows SageMaker's
    ratio rule: ``Accelerators`` sets the share (CPU and memory in proportion), else ``VCpu`` or
    ``MemoryInGiB`` sets it and accelerators are 0; explicit values win over proportional ones.
    """
    if entry.Count is not None:
        return {name: amount * entry.Count for name, amount in node.items()}
    accelerator = _accelerator(node)
    if entry.Accelerators is not None and accelerator is not None:
        ratio = Decimal(entry.Accelerators) / node[accelerator]
        amounts = {name: amount * ratio for name, amount in node.items()}
        amounts[accelerator] = Decimal(entry.Accelerators)
    elif entry.VCpu is not None and node.get("cpu"):
        ratio = Decimal(str(entry.VCpu)) / node["cpu"]
        amounts = {name: (amount * ratio if name in ("cpu", "memory") else Decimal(0)) for name, amount in node.items()}
    elif entry.MemoryInGiB is not None and node.get("memory"):
        ratio = Decimal(str(entry.MemoryInGiB)) * 2**30 / node["memory"]
        amounts = {name: (amount * ratio if name in ("cpu", "memory") else Decimal(0)) for name, amount in node.items()}
    else:
        return {name: Decimal(0) for name in node}
    if entry.VCpu is not None:
        amounts["cpu"] = Decimal(str(entry.VCpu))
    if entry.MemoryInGiB is not None:
        amounts["memory"] = Decimal(str(entry.MemoryInGiB)) * 2**30
    return amounts


def _team(
    quota: ComputeQuota,
    source: str,
    instances: Mapping[str, Mapping[str, Decimal]],
    cohort: str,
    fair_share: bool,
    has_priorities: bool,
    problems: list[Problem],
) -> dict[str, Any]:
    config = quota.ComputeQuotaConfig
    sharing = config.ResourceSharingConfig
    target = quota.ComputeQuotaTarget
    borrow_percent = Decimal(sharing.BorrowLimit if sharing.BorrowLimit is not None else DEFAULT_BORROW_LIMIT)
    absolute = {_short(entry.InstanceType): entry for entry in sharing.AbsoluteBorrowLimits}
    quotas: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, entry in enumerate(config.ComputeQuotaResources):
        path = f"{source}.ComputeQuotaConfig.ComputeQuotaResources[{index}]"
        short = _short(entry.InstanceType)
        if short in seen:
            problems.append(Problem(path=f"{path}.InstanceType", message=f"{entry.InstanceType} is listed twice"))
            continue
        seen.add(short)
        if entry.AcceleratorPartition is not None:
            problems.append(
                Problem(path=f"{path}.AcceleratorPartition", message="accelerator partitions (MIG) are not supported")
            )
            continue
        node = instances.get(short)
        if node is None:
            problems.append(
                Problem(
                    path=f"{path}.InstanceType",
                    message=f"no --instance-resources for {entry.InstanceType}: give "
                    f"--instance-resources {entry.InstanceType}=cpu=N,memory=QTY[,RESOURCE=N…] with the allocatable "
                    "resources of one such node (`kubectl get nodes -l "
                    f"node.kubernetes.io/instance-type={entry.InstanceType} -o "
                    "jsonpath='{.items[0].status.allocatable}'`)",
                )
            )
            continue
        shares = (entry.Count, entry.Accelerators, entry.VCpu, entry.MemoryInGiB)
        if all(value is None for value in shares):
            problems.append(Problem(path=path, message="no Count, Accelerators, VCpu or MemoryInGiB"))
            continue
        if entry.Count is None and entry.Accelerators is not None and _accelerator(node) is None:
            problems.append(
                Problem(
                    path=f"{path}.Accelerators",
                    message=f"--instance-resources for {entry.InstanceType} name no accelerator "
                    f"({', '.join(ACCELERATOR_RESOURCES)})",
                )
            )
            continue
        nominal = _amounts(entry, node)
        borrow = _amounts(absolute[short], node) if short in absolute else None
        resources: dict[str, Any] = {}
        for resource, amount in nominal.items():
            limits: dict[str, Any] = {"nominalQuota": _render(resource, amount)}
            if sharing.Strategy == "LendAndBorrow":
                limit = borrow[resource] if borrow is not None else amount * borrow_percent / 100
                limits["borrowingLimit"] = _render(resource, limit)
            else:
                limits["borrowingLimit"] = 0
            if sharing.Strategy == "DontLend":
                limits["lendingLimit"] = 0
            resources[resource] = limits
        quotas.append({"flavor": flavor_name(entry.InstanceType), "resources": resources})
    # Kueue puts a resource in one resource group, and every flavor of a group quotes every
    # resource of it: a flavor without a resource (no GPUs on a CPU instance) quotes zero.
    covered = list(dict.fromkeys(resource for flavor_quota in quotas for resource in flavor_quota["resources"]))
    for flavor_quota in quotas:
        have = flavor_quota["resources"]
        flavor_quota["resources"] = {
            resource: have.get(resource, {"nominalQuota": 0, "borrowingLimit": 0}) for resource in covered
        }
    team: dict[str, Any] = {"name": target.TeamName, "cohort": cohort, "quotas": quotas}
    team["preemption"] = {
        "reclaimWithinCohort": "Never" if sharing.Strategy == "DontLend" else "Any",
        "withinClusterQueue": config.PreemptTeamTasks,
    }
    if fair_share:
        team["fairSharing"] = {"weight": target.FairShareWeight}
    policy: dict[str, Any] = {"queue": {"enforcement": "enforce"}}
    if has_priorities:
        policy["kueuePriority"] = {"enforcement": "enforce"}
    team["policy"] = policy
    return team


def import_hyperpod(
    quotas: list[tuple[str, ComputeQuota]],
    scheduler: ClusterSchedulerConfig | None,
    instances: Mapping[str, Mapping[str, Decimal]],
    *,
    cohort: str = DEFAULT_COHORT,
    topology: bool = False,
) -> tuple[dict[str, Any], Platform, list[Problem]]:
    """Map compute allocations (each with the file it came from) and a cluster policy to a
    platform document with ``naming: hyperpod``.

    ``instances``: per instance type (with or without the ``ml.`` prefix) the allocatable resources
    of one node, used to turn instance counts into quotas and as the flavors' ``nodeResources``;
    ``cohort``: the cohort every team joins; ``topology``: add the AWS network Topology and name it
    on every flavor. Disabled allocations are skipped with a warning.

    Returns (document, validated platform, warnings).

    Raises:
        HyperPodError: an allocation cannot be mapped, or the result is not a valid platform file.
    """
    problems: list[Problem] = []
    warnings: list[Problem] = []
    has_priorities = bool(scheduler and scheduler.SchedulerConfig.PriorityClasses)
    fair_share = scheduler is None or scheduler.SchedulerConfig.FairShare == "Enabled"
    teams: dict[str, dict[str, Any]] = {}
    used_types: dict[str, str] = {}
    for source, quota in quotas:
        name = quota.ComputeQuotaTarget.TeamName
        if quota.ActivationState == "Disabled":
            warnings.append(
                Problem(
                    path=f"{source}.ActivationState", message=f"team {name!r} is Disabled: skipped", severity="warning"
                )
            )
            continue
        if name in teams:
            problems.append(
                Problem(
                    path=f"{source}.ComputeQuotaTarget.TeamName", message=f"team {name!r} appears in two allocations"
                )
            )
            continue
        teams[name] = _team(quota, source, instances, cohort, fair_share, has_priorities, problems)
        for entry in quota.ComputeQuotaConfig.ComputeQuotaResources:
            used_types.setdefault(flavor_name(entry.InstanceType), entry.InstanceType)
    if problems:
        raise HyperPodError(problems)

    flavors = []
    for name in sorted(used_types):
        instance_type = used_types[name]
        node = instances.get(_short(instance_type), {})
        flavor: dict[str, Any] = {"name": name, "nodeLabels": {INSTANCE_TYPE_LABEL: instance_type}}
        if topology:
            flavor["topologyName"] = AWS_TOPOLOGY_NAME
        flavor["nodeResources"] = {resource: _render(resource, amount) for resource, amount in node.items()}
        flavors.append(flavor)

    document: dict[str, Any] = {
        "apiVersion": "kueue-governor.io/v1alpha1",
        "kind": "Platform",
        "naming": "hyperpod",
    }
    if topology:
        document["topologies"] = [{"name": AWS_TOPOLOGY_NAME, "levels": list(AWS_TOPOLOGY_LEVELS)}]
    document["flavors"] = flavors
    document["cohorts"] = [{"name": cohort}]
    if scheduler is not None and scheduler.SchedulerConfig.PriorityClasses:
        document["priorities"] = [
            {
                "name": entry.Name,
                "value": entry.Weight,
                "description": f"HyperPod priority class {entry.Name} (weight {entry.Weight}).",
            }
            for entry in sorted(scheduler.SchedulerConfig.PriorityClasses, key=lambda e: (-e.Weight, e.Name))
        ]
    document["teams"] = [teams[name] for name in sorted(teams)]
    try:
        platform = parse_platform(document, "imported platform")
    except ValueError as exc:
        raise HyperPodError(list(getattr(exc, "problems", [Problem(path="", message=str(exc))]))) from None
    return document, platform, warnings
