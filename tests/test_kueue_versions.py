"""The platform file's ``kueue.version`` and the rules keyed by it (SPEC §13,
:mod:`webhook.core.kueue.versions`): each rule that differs between Kueue v0.19.2 and v0.20.7 is
checked on both releases, through the same entry points the webhook and ``kgov generate`` use."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from support import platform_with, review_body

from e2e import build
from webhook.core.admission.review import ReviewOutcome, review
from webhook.core.kueue.versions import (
    DEFAULT_KUEUE_VERSION,
    GATE_FIELDS,
    VERSIONS,
    UnsupportedKueueVersion,
    kueue_release,
)
from webhook.core.platform.platform import Platform, PlatformError, parse_platform
from webhook.core.platform.policy import PolicySet, compile_policies
from webhook.core.platform.resolve import TeamIndex
from webhook.generate.manifests import build_manifests
from webhook.generate.recreate import needs_recreate, recreate_warnings

OLD, NEW = "v0.19.2", "v0.20.7"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
GROUP = "kueue.x-k8s.io/podset-group-name"
BLOCK = "topology.k8s.aws/network-node-layer-1"
RACK = "topology.k8s.aws/network-node-layer-3"


def platform(version: str | None, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    data = platform_with(policy or {"queue": {"enforcement": "enforce"}})
    if version is not None:
        data["kueue"] = {"version": version}
    return data


def teams(version: str | None, policy: dict[str, Any] | None = None) -> TeamIndex:
    return TeamIndex(compile_policies(parse_platform(platform(version, policy))))


def job(pod_annotations: dict[str, str], parallelism: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "metadata": {"annotations": pod_annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}],
                },
            },
        },
    }


def run(obj: dict[str, Any], version: str | None, policy: dict[str, Any] | None = None) -> ReviewOutcome:
    return review(review_body(obj, "ml"), teams(version, policy))


# --- the platform file and the compiled policy ---------------------------------------------------


def test_the_default_is_the_release_hyperpod_ships() -> None:
    parsed = parse_platform(platform(None))
    assert parsed.kueue.version == DEFAULT_KUEUE_VERSION == OLD
    assert compile_policies(parsed).teams[0].kueue is VERSIONS[OLD]


@pytest.mark.parametrize("version", [OLD, NEW])
def test_each_supported_release_is_accepted_and_reaches_every_team(version: str) -> None:
    policy = compile_policies(parse_platform(platform(version)))
    assert policy.kueueVersion == version
    assert [team.kueueVersion for team in policy.teams] == [version]
    assert policy.teams[0].kueue.version == version


@pytest.mark.parametrize("version", ["v0.20.6", "0.20.7", "v0.21.0", ""])
def test_an_unsupported_release_is_a_clear_error_at_its_path(version: str) -> None:
    with pytest.raises(PlatformError) as raised:
        parse_platform(platform(version))
    (problem,) = raised.value.problems
    assert problem.path == "kueue.version"
    assert problem.message == f"Kueue {version} is not supported (supported: v0.19.2, v0.20.7)"


def test_the_e2e_suites_kueue_is_a_supported_release_and_the_default() -> None:
    """The real Kueue the end-to-end suite runs (``e2e/build.py``) is the release the rules default to."""
    assert build.KUEUE_VERSION == DEFAULT_KUEUE_VERSION and build.KUEUE_VERSION in VERSIONS


def test_kueue_release_names_the_supported_ones() -> None:
    assert kueue_release(None) is VERSIONS[OLD]
    with pytest.raises(
        UnsupportedKueueVersion, match=r"^Kueue v1\.0\.0 is not supported \(supported: v0\.19\.2, v0\.20\.7\)$"
    ):
        kueue_release("v1.0.0")


def test_the_policy_configmap_reads_as_before_for_the_default_and_keeps_another_release() -> None:
    old = json.loads(compile_policies(parse_platform(platform(None))).model_dump_json())
    assert "kueueVersion" not in old and "kueueVersion" not in old["teams"][0]
    new = compile_policies(parse_platform(platform(NEW)))
    dumped = json.loads(new.model_dump_json())
    assert dumped["kueueVersion"] == NEW and dumped["teams"][0]["kueueVersion"] == NEW
    assert PolicySet.model_validate(dumped) == new
    assert PolicySet.model_validate(old).teams[0].kueue is VERSIONS[OLD]


def test_a_policy_configmap_naming_an_unknown_release_is_refused() -> None:
    dumped = json.loads(compile_policies(parse_platform(platform(NEW))).model_dump_json())
    dumped["teams"][0]["kueueVersion"] = "v0.18.0"
    with pytest.raises(ValueError, match=r"Kueue v0\.18\.0 is not supported"):
        PolicySet.model_validate(dumped)


# --- the TAS annotation rules ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["false", "0", "F"])
def test_a_false_unconstrained_flag_is_refused_only_by_v0_20(value: str) -> None:
    """Kueue #15262 (``TASRejectFalseUnconstrainedTopology``): v0.20 refuses it; v0.19.2 accepts it."""
    obj = job({UNCONSTRAINED: value})
    assert run(obj, OLD).plan.denials == []
    (denial,) = run(obj, NEW).plan.denials
    assert denial == (
        f"topology: podset 'main': {UNCONSTRAINED} {value!r}: must not be false (leave the annotation out for "
        "no topology request) (Kueue v0.20.7 ValidateTASPodSetRequest); Kueue refuses the workload"
    )


@pytest.mark.parametrize("version", [OLD, NEW])
def test_a_true_unconstrained_flag_and_a_non_boolean_are_judged_alike(version: str) -> None:
    assert run(job({UNCONSTRAINED: "true"}), version).plan.denials == []
    (denial,) = run(job({UNCONSTRAINED: "yes"}), version).plan.denials
    assert f"must be a boolean value (Kueue {version} ValidateTASPodSetRequest)" in denial


def test_a_slice_size_that_does_not_divide_the_pods_is_warned_only_before_partial_slices() -> None:
    """v0.19.2 places whole slices only; v0.20's ``TASPartialSlices`` (Kueue #15640) places a partial last one."""
    obj = job({REQUIRED: BLOCK, SLICE_REQUIRED: RACK, SLICE_SIZE: "2"}, parallelism=3)
    old = run(obj, OLD).plan
    assert old.allowed and old.denials == []
    (warning,) = [w for w in old.warnings if SLICE_SIZE in w]
    assert "must divide pod set count 3: Kueue's TAS places 1 whole slice (2 pods)" in warning
    assert "(Kueue v0.19.2 TASFlavorSnapshot.findTopologyAssignment)" in warning
    new = run(obj, NEW).plan
    assert new.allowed and [w for w in new.warnings if SLICE_SIZE in w] == []


@pytest.mark.parametrize("version", [OLD, NEW])
def test_a_slice_size_above_the_pods_is_refused_by_both(version: str) -> None:
    (denial,) = run(job({REQUIRED: BLOCK, SLICE_REQUIRED: RACK, SLICE_SIZE: "4"}, parallelism=3), version).plan.denials
    assert f"must not be greater than pod set count 3 (Kueue {version} ValidateSliceSizeAnnotationUpperBound)" in denial


def test_a_group_name_next_to_slices_is_refused_only_before_grouped_slicing() -> None:
    """v0.20's ``TASGroupedPodSetSlicing`` (Kueue #15111) lets a podset group carry slices."""
    obj = job({REQUIRED: BLOCK, SLICE_REQUIRED: RACK, SLICE_SIZE: "1", GROUP: "g"})
    old = run(obj, OLD).plan.denials
    assert sorted(d.split(": ", 3)[3].split(" (")[0] for d in old) == [
        f"may not be set when '{SLICE_REQUIRED}' is specified",
        f"may not be set when '{SLICE_SIZE}' is specified",
    ]
    assert all("(Kueue v0.19.2 ValidateTASPodSetRequest)" in d for d in old)
    new = [d for d in run(obj, NEW).plan.denials if "ValidateTASPodSetRequest" in d]
    assert new == []


@pytest.mark.parametrize("version", [OLD, NEW])
def test_a_group_name_without_required_or_preferred_is_refused_by_both(version: str) -> None:
    denials = run(job({SLICE_REQUIRED: RACK, SLICE_SIZE: "1", GROUP: "g"}), version).plan.denials
    neither = f"may not be set when neither 'kueue.x-k8s.io/podset-preferred-topology' nor '{REQUIRED}'"
    assert [d for d in denials if neither in d] != []
    assert len(denials) == (3 if version == OLD else 1)  # v0.19.2 also refuses the group next to slices


def test_the_team_topology_rule_sees_a_false_unconstrained_flag_as_malformed_on_v0_20() -> None:
    """The topology rule adds nothing to a podset whose annotations Kueue refuses (one finding, not two)."""
    policy = {"topology": {"mode": "required", "level": RACK, "enforcement": "enforce"}}
    obj = job({UNCONSTRAINED: "false"})
    new = run(obj, NEW, policy).plan.denials
    assert len(new) == 1 and "must not be false" in new[0]
    assert run(obj, OLD, policy).plan.denials != new


# --- kgov generate: apiVersion and what needs a recreate -------------------------------------------


@pytest.mark.parametrize("version", [OLD, NEW])
def test_generated_kueue_objects_are_in_an_api_version_the_release_serves(version: str) -> None:
    release = kueue_release(version)
    manifests = build_manifests(parse_platform(platform(version)))
    kinds = {(obj["apiVersion"], obj["kind"]) for objects in manifests.values() for obj in objects}
    kueue = {api for api, _ in kinds if api.startswith("kueue.x-k8s.io/")}
    assert kueue == {release.api_version} == {"kueue.x-k8s.io/v1beta2"}
    assert release.api_version.rpartition("/")[2] in release.served_api_versions


def test_v0_20_no_longer_serves_v1beta1() -> None:
    assert "v1beta1" in VERSIONS[OLD].served_api_versions
    assert "v1beta1" not in VERSIONS[NEW].served_api_versions


FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gpu"}}
TAS_FLAVOR = {"nodeLabels": {"pool": "gpu"}, "topologyName": "net"}


@pytest.mark.parametrize(
    ("desired", "old", "new"),
    [
        pytest.param(
            {"nodeLabels": {"pool": "gpu2"}, "topologyName": "net"},
            "changes nodeLabels of a ResourceFlavor with topologyName 'net'; Kueue refuses changes to nodeLabels, "
            "tolerations and topologyName once it is set",
            None,
            id="node-labels",
        ),
        pytest.param(
            {**TAS_FLAVOR, "tolerations": [{"key": "k", "operator": "Exists"}]},
            "changes tolerations of a ResourceFlavor with topologyName 'net'; Kueue refuses changes to nodeLabels, "
            "tolerations and topologyName once it is set",
            None,
            id="tolerations",
        ),
        pytest.param(
            {"nodeLabels": {"pool": "gpu"}, "topologyName": "net2"},
            "changes topologyName of a ResourceFlavor with topologyName 'net'; Kueue refuses changes to nodeLabels, "
            "tolerations and topologyName once it is set",
            "changes topologyName of a ResourceFlavor with topologyName 'net'; Kueue refuses changes to "
            "topologyName once it is set",
            id="topology-name",
        ),
        pytest.param(
            {**TAS_FLAVOR, "nodeTaints": [{"key": "k", "effect": "NoSchedule"}]},
            "changes nodeTaints of a ResourceFlavor with topologyName 'net'; newer Kueue releases keep the whole "
            "spec immutable once topologyName is set",
            None,
            id="node-taints",
        ),
    ],
)
def test_a_tas_flavor_change_needs_a_recreate_as_the_release_says(
    desired: dict[str, Any], old: str | None, new: str | None
) -> None:
    current = {**FLAVOR, "spec": TAS_FLAVOR}
    wanted = {**FLAVOR, "spec": desired}
    assert needs_recreate(wanted, current) == old  # the default release
    assert needs_recreate(wanted, current, VERSIONS[OLD]) == old
    assert needs_recreate(wanted, current, VERSIONS[NEW]) == new


def _topology(*labels: str) -> dict[str, Any]:
    return {"kind": "Topology", "metadata": {"name": "t"}, "spec": {"levels": [{"nodeLabel": n} for n in labels]}}


@pytest.mark.parametrize(
    ("before", "after", "new"),
    [
        pytest.param(("a", "kubernetes.io/hostname"), ("a", "b", "kubernetes.io/hostname"), None, id="hostname-kept"),
        pytest.param(("kubernetes.io/hostname",), ("a", "kubernetes.io/hostname"), None, id="level-added-above"),
        pytest.param(
            ("a",),
            ("a", "kubernetes.io/hostname"),
            "changes spec.levels; Kueue v0.20.7 changes a Topology's levels in place only when "
            "kubernetes.io/hostname is the lowest level both before and after",
            id="hostname-added",
        ),
        pytest.param(
            ("a", "kubernetes.io/hostname"),
            ("a", "b"),
            "changes spec.levels; Kueue v0.20.7 changes a Topology's levels in place only when "
            "kubernetes.io/hostname is the lowest level both before and after",
            id="hostname-dropped",
        ),
    ],
)
def test_a_topology_levels_change_needs_a_recreate_only_where_the_release_says(
    before: tuple[str, ...], after: tuple[str, ...], new: str | None
) -> None:
    current, desired = _topology(*before), _topology(*after)
    assert needs_recreate(desired, current, VERSIONS[OLD]) == (
        "changes spec.levels; Kueue keeps a Topology's levels immutable"
    )
    assert needs_recreate(desired, current, VERSIONS[NEW]) == new


def test_recreate_warnings_follow_the_platforms_release() -> None:
    """``kgov generate`` compares with the files on disk under the platform's ``kueue.version``."""
    for version, expected in ((OLD, 1), (NEW, 0)):
        parsed = parse_platform(platform(version))
        desired = [obj for objects in build_manifests(parsed).values() for obj in objects]
        current = copy.deepcopy(desired)
        for obj in current:
            if obj["kind"] == "ResourceFlavor":
                obj["spec"]["nodeLabels"] = {"pool": "old"}
        found = recreate_warnings(desired, current, parsed)
        assert [(w.kind, w.path) for w in found] == [("ResourceFlavor", "flavors[0]")] * expected


LAYERS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
TWO_LAYERS = '[{"topology":"' + RACK + '","size":16},{"topology":"kubernetes.io/hostname","size":4}]'
ONE_LAYER = '[{"topology":"' + RACK + '","size":16}]'


def test_more_than_one_layer_must_divide_the_pods_under_partial_slices() -> None:
    """Kueue's ``TestValidateSliceSizeAnnotationUpperBound`` cases of ``TASPartialSlices``: only a
    single layer may leave a partial last slice."""
    obj = job({REQUIRED: BLOCK, LAYERS: TWO_LAYERS}, parallelism=20)
    assert run(obj, OLD).plan.denials == []
    (denial,) = run(obj, NEW).plan.denials
    assert denial.startswith(
        f"topology: podset 'main': {LAYERS} 16: must evenly divide pod set count 20 when more than one layer is "
        "specified (Kueue v0.20.7 ValidateSliceSizeAnnotationUpperBound)"
    )
    assert run(job({REQUIRED: BLOCK, LAYERS: TWO_LAYERS}, parallelism=32), NEW).plan.denials == []
    assert run(job({REQUIRED: BLOCK, LAYERS: ONE_LAYER}, parallelism=20), NEW).plan.denials == []
    (above,) = run(job({REQUIRED: BLOCK, LAYERS: TWO_LAYERS}, parallelism=10), NEW).plan.denials
    assert "must not be greater than pod set count 10" in above  # one finding, not two


# --- kueue.featureGates ----------------------------------------------------------------------------


def test_each_gate_turns_its_rule_off_and_on() -> None:
    assert set(VERSIONS[NEW].gates) == set(GATE_FIELDS)
    for gate, name in GATE_FIELDS.items():
        assert getattr(VERSIONS[NEW], name) is VERSIONS[NEW].gates[gate] is True
        off = kueue_release(NEW, {gate: False})
        assert getattr(off, name) is False and off.gates[gate] is False
        assert [n for n in GATE_FIELDS.values() if getattr(off, n) != getattr(VERSIONS[NEW], n)] == [name]


def test_a_gate_set_in_the_platform_file_reaches_the_rules() -> None:
    data = platform(NEW)
    data["kueue"]["featureGates"] = {"TASRejectFalseUnconstrainedTopology": False}
    policy = compile_policies(parse_platform(data))
    assert policy.teams[0].kueueFeatureGates == {"TASRejectFalseUnconstrainedTopology": False}
    dumped = json.loads(policy.model_dump_json())
    assert dumped["kueueFeatureGates"] == dumped["teams"][0]["kueueFeatureGates"]
    assert PolicySet.model_validate(dumped) == policy
    outcome = review(review_body(job({UNCONSTRAINED: "false"}), "ml"), TeamIndex(policy))
    assert outcome.plan.denials == []  # the gate is off: Kueue v0.20.7 accepts it as v0.19.2 does


@pytest.mark.parametrize(
    ("version", "gate", "message"),
    [
        pytest.param(
            OLD,
            "TASPartialSlices",
            "feature gate TASPartialSlices is not one the governor follows for Kueue v0.19.2 (it follows: none)",
            id="gate-of-a-later-release",
        ),
        pytest.param(
            NEW,
            "TASPartialSlice",
            "feature gate TASPartialSlice is not one the governor follows for Kueue v0.20.7 (it follows: "
            "TASRejectFalseUnconstrainedTopology, TASPartialSlices, TASGroupedPodSetSlicing)",
            id="misspelt",
        ),
        pytest.param(
            OLD,
            "TopologyAwareScheduling",  # a gate of Kueue v0.19.2 (pkg/features), which changes no rule here
            "feature gate TopologyAwareScheduling is not one the governor follows for Kueue v0.19.2 (it follows: none)",
            id="a-real-gate-not-followed",
        ),
    ],
)
def test_an_unknown_gate_is_a_clear_error_at_its_path(version: str, gate: str, message: str) -> None:
    data = platform(version)
    data["kueue"]["featureGates"] = {gate: True}
    with pytest.raises(PlatformError) as raised:
        parse_platform(data)
    (problem,) = raised.value.problems
    assert (problem.path, problem.message) == ("kueue", message)


def test_the_platform_schema_lists_the_supported_releases() -> None:
    """Editors complete ``kueue.version`` from the exported JSON Schema (``kgov schema``)."""
    schema = Platform.model_json_schema()
    version = schema["$defs"]["KueueTarget"]["properties"]["version"]
    assert version["enum"] == list(VERSIONS) and version["default"] == DEFAULT_KUEUE_VERSION
