"""SageMaker HyperPod task governance documents, read and checked (:mod:`.hyperpod` maps them).

Inputs are the JSON that the SageMaker API returns (``aws sagemaker describe-compute-quota``,
``list-compute-quotas`` and ``describe-cluster-scheduler-config``; a ``create-*`` request body has
the same fields). Shapes, from the SageMaker API reference (CreateComputeQuota,
CreateClusterSchedulerConfig):

- ``ComputeQuotaConfig.ComputeQuotaResources[]``: ``InstanceType`` and ``Count`` (instances), or
  ``Accelerators`` / ``VCpu`` / ``MemoryInGiB`` (a share of instances);
- ``ComputeQuotaConfig.ResourceSharingConfig``: ``Strategy`` (``Lend`` | ``DontLend`` |
  ``LendAndBorrow``, default ``LendAndBorrow``), ``BorrowLimit`` (percent of the team's quota,
  default 50), ``AbsoluteBorrowLimits[]`` (same shape as the resources);
- ``ComputeQuotaConfig.PreemptTeamTasks``: ``Never`` | ``LowerPriority`` (default);
- ``ComputeQuotaTarget``: ``TeamName``, ``FairShareWeight`` (0 to 100, default 0);
- ``SchedulerConfig.PriorityClasses[]``: ``Name``, ``Weight`` (0 to 100); ``SchedulerConfig.FairShare``:
  ``Enabled`` (default) | ``Disabled``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from webhook.core.objects.paths import field_path
from webhook.core.platform.platform import Problem

__all__ = [
    "ClusterSchedulerConfig",
    "ComputeQuota",
    "HyperPodError",
    "QuotaResource",
    "parse_compute_quotas",
    "parse_scheduler_config",
]


class HyperPodError(ValueError):
    """Input that cannot be mapped; ``problems`` name the file and field of each reason."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class _Api(BaseModel):
    # Describe responses carry many more fields (ARNs, timestamps, status): ignore them.
    model_config = ConfigDict(extra="ignore", frozen=True)


class QuotaResource(_Api):
    """``ComputeQuotaResourceConfig``: instances of one type, or a share of them."""

    InstanceType: str
    Count: int | None = Field(default=None, ge=0)
    Accelerators: int | None = Field(default=None, ge=0)
    VCpu: float | None = Field(default=None, ge=0)
    MemoryInGiB: float | None = Field(default=None, ge=0)
    AcceleratorPartition: dict[str, Any] | None = None


class ResourceSharing(_Api):
    Strategy: Literal["Lend", "DontLend", "LendAndBorrow"] = "LendAndBorrow"
    BorrowLimit: int | None = Field(default=None, ge=0, le=10000)
    AbsoluteBorrowLimits: list[QuotaResource] = Field(default_factory=list)


class QuotaConfig(_Api):
    ComputeQuotaResources: list[QuotaResource] = Field(default_factory=list)
    ResourceSharingConfig: ResourceSharing = Field(default_factory=ResourceSharing)
    PreemptTeamTasks: Literal["Never", "LowerPriority"] = "LowerPriority"


class QuotaTarget(_Api):
    TeamName: str
    FairShareWeight: int = Field(default=0, ge=0, le=100)


class ComputeQuota(_Api):
    """One compute allocation (``describe-compute-quota`` output)."""

    Name: str | None = None
    ActivationState: Literal["Enabled", "Disabled"] = "Enabled"
    ComputeQuotaConfig: QuotaConfig
    ComputeQuotaTarget: QuotaTarget


class PriorityClassEntry(_Api):
    Name: str
    Weight: int = Field(ge=0, le=100)


class SchedulerSettings(_Api):
    PriorityClasses: list[PriorityClassEntry] = Field(default_factory=list)
    FairShare: Literal["Enabled", "Disabled"] = "Enabled"


class ClusterSchedulerConfig(_Api):
    """A cluster policy (``describe-cluster-scheduler-config`` output)."""

    Name: str | None = None
    SchedulerConfig: SchedulerSettings = Field(default_factory=SchedulerSettings)


def _validation_problems(source: str, exc: ValidationError, prefix: tuple[int | str, ...] = ()) -> list[Problem]:
    return [
        Problem(path=field_path((*prefix, *err["loc"]), source), message=err["msg"].removeprefix("Value error, "))
        for err in exc.errors()
    ]


def parse_compute_quotas(data: Any, source: str) -> list[tuple[str, ComputeQuota]]:
    """Compute allocations in one decoded file: a ``describe-compute-quota`` response, or a
    ``list-compute-quotas`` response (``ComputeQuotaSummaries[]``). Each comes with where it was
    found (``source``, or ``source.ComputeQuotaSummaries[i]``), for messages.

    Raises:
        HyperPodError: the file has neither shape, or a field is invalid (paths start at ``source``).
    """
    items: list[tuple[tuple[int | str, ...], Any]]
    if isinstance(data, Mapping) and isinstance(data.get("ComputeQuotaSummaries"), list):
        items = [(("ComputeQuotaSummaries", index), item) for index, item in enumerate(data["ComputeQuotaSummaries"])]
    elif isinstance(data, Mapping):
        items = [((), data)]
    else:
        raise HyperPodError([Problem(path=source, message="expected a JSON object from describe-compute-quota")])
    quotas: list[tuple[str, ComputeQuota]] = []
    problems: list[Problem] = []
    for where, item in items:
        try:
            quotas.append((field_path(where, source), ComputeQuota.model_validate(item)))
        except ValidationError as exc:
            problems.extend(_validation_problems(source, exc, where))
    if problems:
        raise HyperPodError(problems)
    return quotas


def parse_scheduler_config(data: Any, source: str) -> ClusterSchedulerConfig:
    """A cluster policy from a decoded ``describe-cluster-scheduler-config`` response.

    Raises:
        HyperPodError: not an object, or a field is invalid.
    """
    if not isinstance(data, Mapping):
        raise HyperPodError(
            [Problem(path=source, message="expected a JSON object from describe-cluster-scheduler-config")]
        )
    try:
        return ClusterSchedulerConfig.model_validate(data)
    except ValidationError as exc:
        raise HyperPodError(_validation_problems(source, exc)) from None
