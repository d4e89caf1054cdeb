"""Models of the Kueue v0.19.2 objects and fields (``kueue.x-k8s.io/v1beta2``) that ``kgov why`` reads.

As :mod:`webhook.why.kube_shapes`: only the fields read, strict types, null counts as absent.
Sources (``apis/kueue/v1beta2``): ``workload_types.go`` (``WorkloadSpec``, ``PodSet``,
``PodSetTopologyRequest``, ``WorkloadStatus``, ``Admission``, ``PodSetAssignment``,
``TopologyAssignment`` and its slices, ``PodSetRequest``), ``clusterqueue_types.go``
(``ResourceGroup``, ``FlavorQuotas``, ``ResourceQuota``, ``FlavorUsage``, the workload counts),
``localqueue_types.go``, ``cohort_types.go``, ``resourceflavor_types.go``, ``topology_types.go``;
v1beta1's ``topologyAssignment.domains`` too (read by :func:`webhook.topology.tree.assignment_domains`).
"""

from __future__ import annotations

from typing import Any

from pydantic import StrictStr, model_validator

from webhook.why.kube_shapes import (
    Bool,
    Condition,
    Count,
    Int,
    NonNegative,
    Object,
    PodTemplate,
    Quantities,
    Quantity,
    Shape,
    Str,
    StrMap,
    Toleration,
    expected,
)

__all__ = ["ClusterQueue", "Cohort", "LocalQueue", "ResourceFlavor", "Topology", "Workload"]


# Kueue v1beta2 Workload.
class TopologyRequest(Shape):
    required: Str = None
    preferred: Str = None
    unconstrained: Bool = None
    podIndexLabel: Str = None
    subGroupIndexLabel: Str = None
    subGroupCount: Count = None
    podSetGroupName: Str = None
    podSetSliceRequiredTopology: Str = None
    podSetSliceSize: Count = None
    podsetSliceRequiredTopologyConstraints: list[dict[str, Any]] | None = None


class PodSet(Shape):
    name: Str = None
    count: Count = None
    minCount: Count = None
    template: PodTemplate | None = None
    topologyRequest: TopologyRequest | None = None


class PriorityClassRef(Shape):
    name: Str = None


class WorkloadSpec(Shape):
    queueName: Str = None
    priority: Int = None
    active: Bool = None
    priorityClassRef: PriorityClassRef | None = None
    podSets: list[PodSet] | None = None


class Domain(Shape):
    values: list[StrictStr] | None = None
    count: Count = None


class Individual(Shape):
    prefix: Str = None
    suffix: Str = None
    roots: list[StrictStr] | None = None


class LevelValues(Shape):
    """Kueue's ``TopologyAssignmentSliceLevelValues``: exactly one of ``universal`` and
    ``individual`` (its CEL rule ``has(self.universal) != has(self.individual)``)."""

    universal: Str = None
    individual: Individual | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_of(cls, data: Any) -> Any:
        if isinstance(data, dict) and (data.get("universal") is None) == (data.get("individual") is None):
            raise expected("an object with exactly one of universal and individual")
        return data


class PodCounts(Shape):
    universal: Count = None
    individual: list[NonNegative] | None = None


class Slice(Shape):
    domainCount: Count = None
    valuesPerLevel: list[LevelValues] | None = None
    podCounts: PodCounts | None = None


class TopologyAssignment(Shape):
    levels: list[StrictStr] | None = None
    slices: list[Slice] | None = None
    domains: list[Domain] | None = None


class PodSetAssignment(Shape):
    name: Str = None
    flavors: StrMap = None
    resourceUsage: Quantities = None
    count: Count = None
    topologyAssignment: TopologyAssignment | None = None


class Admission(Shape):
    clusterQueue: Str = None
    podSetAssignments: list[PodSetAssignment] | None = None


class PodSetRequest(Shape):
    name: Str = None
    resources: Quantities = None


class WorkloadStatus(Shape):
    conditions: list[Condition] | None = None
    admission: Admission | None = None
    resourceRequests: list[PodSetRequest] | None = None


class Workload(Object):
    spec: WorkloadSpec | None = None
    status: WorkloadStatus | None = None


# Kueue v1beta2 ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Topology.
class ResourceQuota(Shape):
    name: Str = None
    nominalQuota: Quantity | None = None
    borrowingLimit: Quantity | None = None
    lendingLimit: Quantity | None = None


class FlavorQuotas(Shape):
    name: Str = None
    resources: list[ResourceQuota] | None = None


class ResourceGroup(Shape):
    coveredResources: list[StrictStr] | None = None
    flavors: list[FlavorQuotas] | None = None


class ResourceUsage(Shape):
    name: Str = None
    total: Quantity | None = None
    borrowed: Quantity | None = None


class FlavorUsage(Shape):
    name: Str = None
    resources: list[ResourceUsage] | None = None


class ClusterQueueSpec(Shape):
    cohortName: Str = None
    queueingStrategy: Str = None
    resourceGroups: list[ResourceGroup] | None = None


class ClusterQueueStatus(Shape):
    flavorsReservation: list[FlavorUsage] | None = None
    flavorsUsage: list[FlavorUsage] | None = None
    pendingWorkloads: Count = None
    reservingWorkloads: Count = None
    admittedWorkloads: Count = None


class ClusterQueue(Object):
    spec: ClusterQueueSpec | None = None
    status: ClusterQueueStatus | None = None


class CohortSpec(Shape):
    parentName: Str = None
    resourceGroups: list[ResourceGroup] | None = None


class Cohort(Object):
    spec: CohortSpec | None = None


class LocalQueueSpec(Shape):
    clusterQueue: Str = None


class LocalQueue(Object):
    spec: LocalQueueSpec | None = None


class ResourceFlavorSpec(Shape):
    topologyName: Str = None
    nodeLabels: StrMap = None
    tolerations: list[Toleration] | None = None


class ResourceFlavor(Object):
    spec: ResourceFlavorSpec | None = None


class TopologyLevel(Shape):
    nodeLabel: Str = None


class TopologySpec(Shape):
    levels: list[TopologyLevel] | None = None


class Topology(Object):
    spec: TopologySpec | None = None
