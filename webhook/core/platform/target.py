"""The platform file's ``kueue`` section (SPEC §13): which Kueue release the cluster runs and the
feature gates it sets otherwise than the release's defaults. The rules keyed by them are the rows
of :data:`webhook.core.kueue.versions.VERSIONS`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, model_validator

from webhook.core.kueue.versions import (
    DEFAULT_KUEUE_VERSION,
    KueueRelease,
    known_version,
    kueue_release,
    supported_versions,
)

__all__ = ["KueueTarget"]


class KueueTarget(BaseModel):
    """The Kueue release the platform runs: the rules that differ between releases follow it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Annotated[str, AfterValidator(known_version)] = Field(
        default=DEFAULT_KUEUE_VERSION,
        description="the Kueue release of the cluster, one of "
        + ", ".join(supported_versions())
        + f" (default {DEFAULT_KUEUE_VERSION}, SageMaker HyperPod's task-governance add-on)",
        json_schema_extra={"enum": list[JsonValue](supported_versions())},
    )
    featureGates: dict[str, bool] = Field(
        default_factory=dict,
        description="the Kueue feature gates the cluster's Kueue sets otherwise than the release's default "
        "(its --feature-gates), among those the governor's rules follow: v0.20.7's "
        "TASRejectFalseUnconstrainedTopology, TASPartialSlices and TASGroupedPodSetSlicing",
    )

    @property
    def release(self) -> KueueRelease:
        """The row of :data:`webhook.core.kueue.versions.VERSIONS` with :attr:`featureGates` set."""
        return kueue_release(self.version, self.featureGates)

    @model_validator(mode="after")
    def _known_gates(self) -> KueueTarget:
        kueue_release(self.version, self.featureGates)  # UnsupportedKueueVersion names the release's gates
        return self
