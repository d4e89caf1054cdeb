"""The Kueue releases the governor targets, and each rule that differs between them (SPEC §13).

One table, :data:`VERSIONS`: the platform file's ``kueue.version`` picks a row
(:func:`kueue_release`), and every rule that depends on the release reads that row instead of
branching on a version string. A row holds only what the governor enforces or predicts:

- ``unconstrained_false_refused``: whether Kueue's ``ValidateTASPodSetRequest`` refuses
  ``podset-unconstrained-topology`` values that Go's ``strconv.ParseBool`` reads as false
  (``"false"``, ``"0"``, ``"f"``…; gate ``TASRejectFalseUnconstrainedTopology``, Kueue #15262).
  The release notes and Kueue's test case name ``"false"`` only; the other spellings are taken
  alike. v0.19.2 accepts them and then fails admission ("topology level not specified");
- ``partial_slices``: whether Kueue's TAS places a podset whose pods are not a multiple of its
  ``podset-slice-size`` whole, the last slice partial (gate ``TASPartialSlices``, Beta and on by
  default, Kueue #15640). Without it (v0.19.2) TAS places ``count // size`` slices and the other
  pods stay gated, which the governor warns about. Only a single layer may be partial: with more
  than one slice layer the outermost size must divide the pods, which ``ValidateSliceSizeAnnotationUpperBound``
  then refuses otherwise;
- ``grouped_slicing``: whether ``podset-group-name`` may stand next to ``podset-slice-size``,
  ``podset-slice-required-topology`` and ``podset-slice-required-topology-constraints`` (gate
  ``TASGroupedPodSetSlicing``, Beta and on by default, Kueue #15111);
- ``topology_levels_mutable``: whether a Topology's ``spec.levels`` may change in place when
  ``kubernetes.io/hostname`` is the lowest level before and after (CRD rule "levels are mutable
  only when kubernetes.io/hostname is the lowest level both before and after the change",
  Kueue #13910); v0.19.2's rule is ``self == oldSelf``;
- ``tas_flavor_immutable``: the ResourceFlavor ``spec`` fields the CRD keeps once ``topologyName``
  is set (v0.19.2: ``nodeLabels``, ``tolerations``, ``topologyName``; v0.20: ``topologyName``
  only, Kueue #13738 and #13622);
- ``served_api_versions``: the ``kueue.x-k8s.io`` versions the CRDs serve (v0.20 no longer serves
  ``v1beta1``, Kueue #14558); ``api_version`` is the one the generator writes (``v1beta2``, served
  by both);
- ``gates``: the feature gates of the release behind the rows above (:data:`GATE_FIELDS`), each
  with its default; the platform file's ``kueue.featureGates`` sets them as the cluster's Kueue
  ``--feature-gates`` does (:func:`kueue_release`);
- ``source``: where the row was read.

Errors: :func:`kueue_release` raises :class:`UnsupportedKueueVersion` (a ``ValueError``) for a
version that has no row or a feature gate the release does not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

__all__ = [
    "DEFAULT_KUEUE_VERSION",
    "GATE_FIELDS",
    "HOSTNAME_LEVEL",
    "VERSIONS",
    "KueueRelease",
    "UnsupportedKueueVersion",
    "known_version",
    "kueue_release",
    "supported_versions",
]

#: The release SageMaker HyperPod's task-governance add-on ships: the default of ``kueue.version``.
DEFAULT_KUEUE_VERSION = "v0.19.2"
#: The level a Topology's ``spec.levels`` must end with before and after an in-place change (v0.20).
HOSTNAME_LEVEL = "kubernetes.io/hostname"


class UnsupportedKueueVersion(ValueError):
    """A ``kueue.version`` with no row in :data:`VERSIONS`, or a feature gate its release lacks."""


#: Kueue's feature gate → the :class:`KueueRelease` field it turns on or off.
GATE_FIELDS: Mapping[str, str] = {
    "TASRejectFalseUnconstrainedTopology": "unconstrained_false_refused",
    "TASPartialSlices": "partial_slices",
    "TASGroupedPodSetSlicing": "grouped_slicing",
}


@dataclass(frozen=True)
class KueueRelease:
    """What one Kueue release does that the governor's rules depend on (see the module)."""

    version: str
    unconstrained_false_refused: bool
    partial_slices: bool
    grouped_slicing: bool
    topology_levels_mutable: bool
    tas_flavor_immutable: frozenset[str]
    served_api_versions: tuple[str, ...]
    api_version: str
    source: str
    gates: Mapping[str, bool] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``Kueue <version>``, as the governor's messages name the release."""
        return f"Kueue {self.version}"


VERSIONS: dict[str, KueueRelease] = {
    "v0.19.2": KueueRelease(
        version="v0.19.2",
        unconstrained_false_refused=False,
        partial_slices=False,
        grouped_slicing=False,
        topology_levels_mutable=False,
        tas_flavor_immutable=frozenset({"nodeLabels", "tolerations", "topologyName"}),
        served_api_versions=("v1beta1", "v1beta2"),
        api_version="kueue.x-k8s.io/v1beta2",
        source=(
            "tag v0.19.2: pkg/controller/jobframework/tas_validation.go, apis/kueue/v1beta2/"
            "topology_types.go and resourceflavor_types.go (XValidation rules), config/components/crd"
        ),
    ),
    "v0.20.7": KueueRelease(
        version="v0.20.7",
        unconstrained_false_refused=True,
        partial_slices=True,
        grouped_slicing=True,
        topology_levels_mutable=True,
        tas_flavor_immutable=frozenset({"topologyName"}),
        served_api_versions=("v1beta2",),
        api_version="kueue.x-k8s.io/v1beta2",
        # The defaults: TASPartialSlices and TASGroupedPodSetSlicing are Beta and on (CHANGELOG-0.20).
        # TASRejectFalseUnconstrainedTopology's default is not in the release notes: taken as on
        # (v0.20 refuses "false"); kueue.featureGates turns it off for a cluster that runs it off.
        gates={"TASRejectFalseUnconstrainedTopology": True, "TASPartialSlices": True, "TASGroupedPodSetSlicing": True},
        source=(
            "CHANGELOG/CHANGELOG-0.20.md (#14558, #13910, #13738, #13622, #15262, #15640, #15111); "
            "apis/kueue/v1beta2/topology_types.go and resourceflavor_types.go XValidation rules on "
            "main at v0.20.0-devel; tas_validation_test.go cases of the TASRejectFalseUnconstrainedTopology, "
            "TASPartialSlices and TASGroupedPodSetSlicing gates"
        ),
    ),
}


def known_version(version: str) -> str:
    """``version`` when :data:`VERSIONS` has its row (a pydantic validator).

    Raises:
        UnsupportedKueueVersion: no row (see :func:`kueue_release`).
    """
    kueue_release(version)
    return version


def supported_versions() -> list[str]:
    """The versions :data:`VERSIONS` has a row for, oldest first."""
    return list(VERSIONS)


def kueue_release(version: str | None = None, gates: Mapping[str, bool] | None = None) -> KueueRelease:
    """The row of ``version`` (None: :data:`DEFAULT_KUEUE_VERSION`), with ``gates`` (Kueue feature
    gate → on) set over the release's defaults.

    Raises:
        UnsupportedKueueVersion: no row, e.g. ``Kueue v0.21.0 is not supported (supported: v0.19.2,
            v0.20.7)``; or a gate the governor does not follow for the release (one the release does
            not have, or one of its gates that changes no rule the governor applies, such as
            ``TopologyAwareScheduling``), e.g. ``feature gate TASPartialSlices is not one the governor
            follows for Kueue v0.19.2 (it follows: none)``.
    """
    name = DEFAULT_KUEUE_VERSION if version is None else version
    release = VERSIONS.get(name)
    if release is None:
        supported = ", ".join(VERSIONS)
        raise UnsupportedKueueVersion(f"Kueue {name} is not supported (supported: {supported})")
    if not gates:
        return release
    for gate in gates:
        if gate not in release.gates:
            known = ", ".join(release.gates) or "none"
            raise UnsupportedKueueVersion(
                f"feature gate {gate} is not one the governor follows for {release.label} (it follows: {known})"
            )
    merged = {**release.gates, **gates}
    return replace(
        release,
        gates=merged,
        unconstrained_false_refused=merged.get(
            "TASRejectFalseUnconstrainedTopology", release.unconstrained_false_refused
        ),
        partial_slices=merged.get("TASPartialSlices", release.partial_slices),
        grouped_slicing=merged.get("TASGroupedPodSetSlicing", release.grouped_slicing),
    )
