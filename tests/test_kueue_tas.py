"""Kueue v0.19.2's TAS annotation rules (``jobframework/tas_validation.go``) on the planned object.

Each manifest is one that passed (or, worse, completed by mode ``auto``) silently though
Kueue refuses it; each now gets Kueue's own message, and the topology rule adds nothing to a group
of the user's that Kueue refuses whatever it asks for. Team 'research' of the bundled platform
(``auto`` at network-node-layer-3 under ``default``: warnings) on the bundled ``examples/nodes.json``.
"""

from __future__ import annotations

import json

import pytest
import yaml
from support import PLATFORM, REPO, review_body, teams_from

from webhook.core.admission.review import ReviewOutcome, review
from webhook.core.kueue.inventory import NodeInventory
from webhook.core.kueue.kinds import find_kind
from webhook.core.kueue.view import kueue_view
from webhook.core.plan.patch import apply_patch
from webhook.core.platform.resolve import TeamIndex

NS = "hyperpod-ns-research"
K = "kueue.x-k8s.io/"
GROUP, REQUIRED, PREFERRED = f"{K}podset-group-name", f"{K}podset-required-topology", f"{K}podset-preferred-topology"
UNCONSTRAINED = f"{K}podset-unconstrained-topology"
SLICE_LEVEL, SLICE_SIZE = f"{K}podset-slice-required-topology", f"{K}podset-slice-size"
L3, HOST = "topology.k8s.aws/network-node-layer-3", "kubernetes.io/hostname"
INVENTORY = NodeInventory.from_objects(json.loads((REPO / "examples" / "nodes.json").read_text())["items"])
GPU = "{containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 8}}}]}"


def teams(level: str = L3, enforcement: str = "default") -> TeamIndex:
    platform = yaml.safe_load(PLATFORM.read_text())
    research = next(t for t in platform["teams"] if t["name"] == "research")
    research["policy"]["topology"].update(level=level, enforcement=enforcement)
    return teams_from(platform)


def pytorch(master: dict[str, str], worker: dict[str, str], masters: int = 1, workers: int = 3) -> str:
    return f"""
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: pt}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: {masters}
      template:
        metadata: {{annotations: {json.dumps(master)}}}
        spec: {GPU}
    Worker:
      replicas: {workers}
      template:
        metadata: {{annotations: {json.dumps(worker)}}}
        spec: {GPU}
"""


def job(annotations: dict[str, str]) -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: j}}
spec:
  parallelism: 3
  completions: 3
  template:
    metadata: {{annotations: {json.dumps(annotations)}}}
    spec: {{restartPolicy: Never, containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: 8}}}}}}]}}
"""


TFJOB = f"""
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {{name: tf}}
spec:
  tfReplicaSpecs:
    Chief: {{replicas: 1, template: {{metadata: {{annotations: {{{GROUP}: g}}}}, spec: {GPU}}}}}
    PS: {{replicas: 1, template: {{metadata: {{annotations: {{{GROUP}: g}}}}, spec: {GPU}}}}}
    Worker: {{replicas: 2, template: {{metadata: {{annotations: {{{GROUP}: g}}}}, spec: {GPU}}}}}
"""

NEITHER = f"may not be set when neither '{PREFERRED}' nor '{REQUIRED}' is specified"
REQUEST = "(Kueue v0.19.2 ValidateTASPodSetRequest); Kueue refuses the workload"
GROUPING = "(Kueue v0.19.2 ValidatePodSetGroupingTopology)"
REFUSES = "; Kueue refuses the workload"


def assumes(kind: str) -> str:
    """The end of a group finding on a kind whose Kueue webhook does not check groups."""
    return (
        f"; Kueue's TAS assumes this rule, which it does not check for a {kind}: "
        "the workload may not be placed as asked"
    )


def run(manifest: str, team_index: TeamIndex | None = None) -> tuple[ReviewOutcome, dict[str, dict[str, str]]]:
    obj = yaml.safe_load(manifest)
    outcome = review(review_body(obj, NS), team_index or teams(), inventory=INVENTORY)
    patched = apply_patch(obj, outcome.patch)
    row = find_kind(patched["apiVersion"], patched["kind"])
    assert row is not None
    podsets = kueue_view(patched, row).podsets
    return outcome, {p.name: {k: v for k, v in p.annotations.items() if k.startswith(K)} for p in podsets}


CASES: list[tuple[str, str, list[str], dict[str, dict[str, str]], str]] = [
    (
        "lone-grouped-master",  # auto used to give the Master required: a group of 1
        pytorch({GROUP: "g"}, {}),
        [
            f"podset 'master': {GROUP} 'g': {NEITHER} {REQUEST}",
            f"podset 'master': {GROUP} 'g': can only define groups of exactly 2 pod sets, got: 1 pod set(s) "
            f"{GROUPING}, so no topology is set on it{assumes('PyTorchJob')}",
        ],
        {"master": {GROUP: "g"}, "worker": {REQUIRED: L3}},
        L3,
    ),
    (
        "job-in-a-group",
        job({GROUP: "g"}),
        [
            f"podset 'main': {GROUP} 'g': {NEITHER} {REQUEST}",
            f"podset 'main': {GROUP} 'g': can only define groups of exactly 2 pod sets, got: 1 pod set(s) "
            f"{GROUPING}, so no topology is set on it{assumes('Job')}",
        ],
        {"main": {GROUP: "g"}},
        L3,
    ),
    (
        "three-podsets-in-a-group",
        TFJOB,
        [
            *(f"podset '{name}': {GROUP} 'g': {NEITHER} {REQUEST}" for name in ("chief", "ps", "worker")),
            f"podset 'chief' + 'ps' + 'worker': {GROUP} 'g': can only define groups of exactly 2 pod sets, "
            f"got: 3 pod set(s) {GROUPING}, so no topology is set on it{assumes('TFJob')}",
        ],
        {"chief": {GROUP: "g"}, "ps": {GROUP: "g"}, "worker": {GROUP: "g"}},
        L3,
    ),
    (
        "group-of-2-and-3-pods",
        pytorch({GROUP: "g"}, {GROUP: "g"}, masters=2),
        [
            *(f"podset '{name}': {GROUP} 'g': {NEITHER} {REQUEST}" for name in ("master", "worker")),
            f"podset 'master' + 'worker': {GROUP} 'g': can only define groups where at least one pod set has "
            f"only 1 replica, got: 2 replica(s) and 3 replica(s) in the group {GROUPING}, so no topology is "
            f"set on it{assumes('PyTorchJob')}",
        ],
        {"master": {GROUP: "g"}, "worker": {GROUP: "g"}},
        "topology.k8s.aws/network-node-layer-1",
    ),
    (
        "group-named-a-number",
        pytorch({GROUP: "123"}, {GROUP: "123"}),
        [
            f"podset 'master': {GROUP} '123': must not be a number {REQUEST}",
            f"podset 'master': {GROUP} '123': {NEITHER} {REQUEST}",
            f"podset 'worker': {GROUP} '123': must not be a number {REQUEST}",
            f"podset 'worker': {GROUP} '123': {NEITHER} {REQUEST}",
        ],
        {"master": {GROUP: "123"}, "worker": {GROUP: "123"}},
        L3,
    ),
    (
        "group-of-required-and-preferred",
        pytorch({GROUP: "g", REQUIRED: L3}, {GROUP: "g", PREFERRED: L3}),
        [
            f"podset 'master' + 'worker': must specify '{REQUIRED}' or '{PREFERRED}' topology consistent with "
            f"each other in group 'g' {GROUPING}{assumes('PyTorchJob')}"
        ],
        {"master": {GROUP: "g", REQUIRED: L3}, "worker": {GROUP: "g", PREFERRED: L3}},
        L3,
    ),
    (
        "group-with-slices",
        pytorch({GROUP: "g"}, {GROUP: "g", SLICE_LEVEL: HOST, SLICE_SIZE: "1"}),
        [
            f"podset 'master': {GROUP} 'g': {NEITHER} {REQUEST}",
            f"podset 'worker': {GROUP} 'g': may not be set when '{SLICE_SIZE}' is specified {REQUEST}",
            f"podset 'worker': {GROUP} 'g': may not be set when '{SLICE_LEVEL}' is specified {REQUEST}",
            f"podset 'worker': {GROUP} 'g': {NEITHER} {REQUEST}",
        ],
        {"master": {GROUP: "g"}, "worker": {GROUP: "g", SLICE_LEVEL: HOST, SLICE_SIZE: "1"}},
        L3,
    ),
    (
        "group-with-unconstrained",
        pytorch({GROUP: "g", UNCONSTRAINED: "true"}, {GROUP: "g"}),
        [
            f"podset 'master': {GROUP} 'g': {NEITHER} {REQUEST}",
            f"podset 'worker': {GROUP} 'g': {NEITHER} {REQUEST}",
        ],
        {"master": {GROUP: "g", UNCONSTRAINED: "true"}, "worker": {GROUP: "g"}},
        L3,
    ),
    (
        "slice-size-alone",
        pytorch({}, {SLICE_SIZE: "2"}),
        [f"podset 'worker': {SLICE_SIZE}: may not be set when '{SLICE_LEVEL}' is not specified {REQUEST}"],
        {"master": {REQUIRED: HOST}, "worker": {SLICE_SIZE: "2"}},
        L3,
    ),
    (
        "slice-level-alone",
        pytorch({}, {SLICE_LEVEL: HOST}),
        [f"podset 'worker': {SLICE_SIZE}: must be set when '{SLICE_LEVEL}' is specified {REQUEST}"],
        {"master": {REQUIRED: HOST}, "worker": {SLICE_LEVEL: HOST}},
        L3,
    ),
    (
        "group-levels-differ",  # was warned with a capacity reason (one level read for both)
        pytorch({GROUP: "g", REQUIRED: HOST}, {GROUP: "g", REQUIRED: L3}),
        [
            f"podset 'master' + 'worker': must specify '{REQUIRED}' or '{PREFERRED}' topology consistent with "
            f"each other in group 'g' {GROUPING}{assumes('PyTorchJob')}"
        ],
        {"master": {GROUP: "g", REQUIRED: HOST}, "worker": {GROUP: "g", REQUIRED: L3}},
        L3,
    ),
    (
        "group-level-missing",  # was warned with a capacity reason
        pytorch({GROUP: "g", REQUIRED: HOST}, {GROUP: "g"}),
        [
            f"podset 'worker': {GROUP} 'g': {NEITHER} {REQUEST}",
            f"podset 'master': {GROUP} 'g': can only define groups of exactly 2 pod sets, got: 1 pod set(s) "
            f"{GROUPING}{assumes('PyTorchJob')}",
        ],
        {"master": {GROUP: "g", REQUIRED: HOST}, "worker": {GROUP: "g"}},
        L3,
    ),
    (
        "slice-larger-than-the-podset",  # was warned only as a slice no rack holds
        job({REQUIRED: "topology.k8s.aws/network-node-layer-2", SLICE_LEVEL: L3, SLICE_SIZE: "5"}),
        [
            f"podset 'main': {SLICE_SIZE} '5': must not be greater than pod set count 3 "
            f"(Kueue v0.19.2 ValidateSliceSizeAnnotationUpperBound){REFUSES}"
        ],
        {"main": {REQUIRED: "topology.k8s.aws/network-node-layer-2", SLICE_LEVEL: L3, SLICE_SIZE: "5"}},
        L3,
    ),
]


@pytest.mark.parametrize(
    ("manifest", "warnings", "annotations", "level"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_kueue_refusal_is_warned_and_nothing_added(
    manifest: str, warnings: list[str], annotations: dict[str, dict[str, str]], level: str
) -> None:
    outcome, found = run(manifest, teams(level))
    assert outcome.response["response"]["allowed"] is True
    topology = [w for w in outcome.plan.warnings if w.startswith("topology: ")]
    assert topology == [f"topology: {w}" for w in warnings]
    assert found == annotations


@pytest.mark.parametrize(("manifest", "findings"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_kueue_refusal_is_denied_under_enforce(manifest: str, findings: list[str]) -> None:
    """Under ``enforce`` what Kueue's webhook refuses is denied; a group rule Kueue's webhook does
    not check for the kind (a PyTorchJob's, a Job's) stays a warning: Kueue admits the workload."""
    outcome, _ = run(manifest, teams(enforcement="enforce"))
    refused = [f"topology: {f}" for f in findings if f.endswith(REFUSES)]
    assumed = [f"topology: {f}" for f in findings if not f.endswith(REFUSES)]
    assert outcome.response["response"]["allowed"] is (not refused)
    assert [d for d in outcome.plan.denials if d.startswith("topology: ")] == refused
    assert [w for w in outcome.plan.warnings if w.startswith("topology: ")] == assumed


def test_a_group_rule_kueue_does_not_check_for_the_kind_is_never_denied() -> None:
    """Defect: a PyTorchJob whose group's two podsets ask for different levels was denied under
    ``enforce``, though Kueue v0.19.2's PyTorchJob webhook does not run
    ``ValidatePodSetGroupingTopology`` and admits it (only the JobSet, LeaderWorkerSet, MPIJob and Ray
    webhooks refuse it)."""
    outcome, _ = run(pytorch({GROUP: "g", REQUIRED: HOST}, {GROUP: "g", REQUIRED: L3}), teams(enforcement="enforce"))
    assert outcome.response["response"]["allowed"] is True
    assert [w for w in outcome.plan.warnings if w.startswith("topology: ")] == [
        f"topology: podset 'master' + 'worker': must specify '{REQUIRED}' or '{PREFERRED}' topology consistent with "
        f"each other in group 'g' {GROUPING}{assumes('PyTorchJob')}"
    ]


def test_a_valid_user_group_is_completed_and_not_reported() -> None:
    outcome, found = run(pytorch({GROUP: "g"}, {GROUP: "g"}))
    assert outcome.response["response"]["allowed"] is True
    assert [w for w in outcome.plan.warnings if w.startswith("topology: ")] == []
    assert found == {"master": {GROUP: "g", REQUIRED: L3}, "worker": {GROUP: "g", REQUIRED: L3}}


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("123", True),
        ("007", True),
        ("18446744073709551615", True),
        ("18446744073709551616", False),
        ("-1", False),
        ("+1", False),
        ("1e3", False),
        ("g1", False),
        ("١٢", False),
    ],
)
def test_a_group_name_is_a_number_as_go_parses_uint64(name: str, number: bool) -> None:
    outcome, found = run(pytorch({GROUP: name}, {GROUP: name}))
    refused = f"topology: podset 'master': {GROUP} {name!r}: must not be a number {REQUEST}"
    assert (refused in outcome.plan.warnings) is number
    # a group Kueue refuses gets nothing; any other pair of 1 and 3 pods gets auto's level
    assert found["master"] == ({GROUP: name} if number else {GROUP: name, REQUIRED: L3})


def test_a_slice_size_of_zero_is_refused_as_malformed_before_any_rule() -> None:
    outcome, _ = run(job({REQUIRED: L3, SLICE_LEVEL: HOST, SLICE_SIZE: "0"}))
    assert outcome.plan.warnings == []
    assert outcome.plan.denials == [
        f"malformed object: spec.template.metadata.annotations.{SLICE_SIZE} must be a string holding a positive "
        'integer (e.g. "4"), got string "0"'
    ]


def test_a_slice_size_equal_to_the_pods_is_accepted() -> None:
    outcome, _ = run(job({REQUIRED: L3, SLICE_LEVEL: HOST, SLICE_SIZE: "3"}))
    assert not [w for w in outcome.plan.warnings if "Kueue v0.19.2" in w]


def test_a_group_kueues_webhook_checks_is_refused() -> None:
    mpi = f"""
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {{name: mpi}}
spec:
  mpiReplicaSpecs:
    Launcher: {{replicas: 1, template: {{metadata: {{annotations: {{{GROUP}: g, {REQUIRED}: {L3}}}}}, spec: {GPU}}}}}
    Worker: {{replicas: 3, template: {{metadata: {{annotations: {{{GROUP}: g, {PREFERRED}: {L3}}}}}, spec: {GPU}}}}}
"""
    outcome, _ = run(mpi, teams(enforcement="enforce"))
    assert outcome.response["response"]["allowed"] is False
    assert [d for d in outcome.plan.denials if d.startswith("topology: ")] == [
        f"topology: podset 'launcher' + 'worker': must specify '{REQUIRED}' or '{PREFERRED}' topology consistent "
        f"with each other in group 'g' {GROUPING}{REFUSES}"
    ]


POD = f"""
apiVersion: v1
kind: Pod
metadata: {{name: p, annotations: {{{REQUIRED}: {L3}, {SLICE_LEVEL}: {HOST}, {SLICE_SIZE}: "2"}}}}
spec: {GPU}
"""

STATEFULSET = f"""
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: s}}
spec:
  replicas: 3
  serviceName: s
  selector: {{matchLabels: {{app: s}}}}
  template:
    metadata: {{labels: {{app: s}}, annotations: {{{REQUIRED}: {L3}, {SLICE_LEVEL}: {HOST}, {SLICE_SIZE}: "5"}}}}
    spec: {GPU}
"""


@pytest.mark.parametrize(
    ("manifest", "kind", "finding"),
    [
        (POD, "Pod", f"podset 'main': {SLICE_SIZE} '2': must not be greater than pod set count 1"),
        (STATEFULSET, "StatefulSet", f"podset 'main': {SLICE_SIZE} '5': must not be greater than pod set count 3"),
    ],
    ids=["pod", "statefulset"],
)
def test_a_slice_size_above_the_pods_of_a_kind_the_pod_webhook_checks_is_only_warned(
    manifest: str, kind: str, finding: str
) -> None:
    """Defect: a Pod asking for slices of 2 was denied under ``enforce`` as refused by Kueue, but
    Kueue v0.19.2's Pod webhook (which also checks a Deployment's, ReplicaSet's and StatefulSet's
    pods) does not run ``ValidateSliceSizeAnnotationUpperBound``: it admits the pod."""
    outcome, _ = run(manifest, teams(enforcement="enforce"))
    assert outcome.response["response"]["allowed"] is True
    assert [w for w in outcome.plan.warnings if "Kueue v0.19.2" in w] == [
        f"topology: {finding} (Kueue v0.19.2 ValidateSliceSizeAnnotationUpperBound){assumes(kind)}"
    ]


@pytest.mark.parametrize("length", [256, 257])
def test_a_kept_group_name_over_256_characters_is_refused_for_every_kind(length: int) -> None:
    """Kueue copies the name into its Workload's podSetGroupName (maxLength 256 in the Workload
    CRD): longer, the Workload is never created, whatever the kind. Once passed in silence."""
    name = "g" * int(length)
    long_group = {GROUP: name, REQUIRED: L3}
    crd = (
        f": must be at most 256 characters, got {length}: Kueue copies it into its Workload's podSetGroupName, "
        "which the API server refuses longer, so the Workload is never created "
        "(Kueue v0.19.2 Workload CRD podSetGroupName maxLength)"
    )
    outcome, _ = run(pytorch(long_group, long_group), teams(enforcement="enforce"))
    expected = [f"topology: podset '{p}': {GROUP} {name!r}{crd}{REFUSES}" for p in ("master", "worker")]
    assert [d for d in outcome.plan.denials if d.startswith("topology: ")] == (expected if length == 257 else [])
    # Not kept (no required or preferred): Kueue drops the name, and refuses it for that reason alone.
    outcome, _ = run(job({GROUP: name}))
    assert [w for w in outcome.plan.warnings if "256" in w] == []


# -- a slice size that does not divide the podset's pods ------------------------------------------
L2 = "topology.k8s.aws/network-node-layer-2"
WHOLE_SLICES = (
    "(Kueue v0.19.2 TASFlavorSnapshot.findTopologyAssignment); Kueue's TAS assumes this rule (KEP-2724: the "
    'slice size "has to evenly divide the size of a PodSet"), which no Kueue webhook checks: the workload is '
    "admitted but not placed as asked"
)


def remainder(podset: str, size: int, count: int, placed: str, left: str) -> str:
    return (
        f"topology: podset {podset!r}: {SLICE_SIZE} '{size}': must divide pod set count {count}: Kueue's TAS places "
        f"{placed} and leaves the other {left} gated until pods of this podset end {WHOLE_SLICES}"
    )


@pytest.mark.parametrize("enforcement", ["default", "warn", "enforce"])
def test_a_slice_size_that_does_not_divide_the_pods_is_only_warned(enforcement: str) -> None:
    """Once passed in silence: Kueue v0.19.2 admits a Job of 3 pods in slices of 2 (no webhook
    checks it), places one slice of 2 pods and leaves the third gated until a pod ends (Kueue's
    own integration test "PodSet slice size does not divide the PodSet count"). Never denied, as
    Kueue admits it; nothing is added to the user's placement."""
    annotations = {REQUIRED: L2, SLICE_LEVEL: L3, SLICE_SIZE: "2"}
    outcome, found = run(job(annotations), teams(enforcement=enforcement))
    assert outcome.response["response"]["allowed"] is True
    assert outcome.plan.denials == []
    assert outcome.plan.warnings == [remainder("main", 2, 3, "1 whole slice (2 pods)", "1 pod")]
    assert found == {"main": annotations}


@pytest.mark.parametrize(
    ("workers", "size", "warning"),
    [
        (7, 3, remainder("worker", 3, 7, "2 whole slices (6 pods)", "1 pod")),
        (6, 4, remainder("worker", 4, 6, "1 whole slice (4 pods)", "2 pods")),
        (6, 3, None),
        (6, 6, None),
        (6, 1, None),
        (6, 7, None),  # above the pods: ValidateSliceSizeAnnotationUpperBound's finding, not this one
    ],
)
def test_only_a_slice_size_that_leaves_pods_out_of_every_slice_is_warned(
    workers: int, size: int, warning: str | None
) -> None:
    manifest = pytorch({}, {PREFERRED: L2, SLICE_LEVEL: L3, SLICE_SIZE: str(size)}, workers=workers)
    outcome, _ = run(manifest, teams(enforcement="enforce"))
    found = [w for w in outcome.plan.warnings + outcome.plan.denials if "findTopologyAssignment" in w]
    assert found == ([] if warning is None else [warning])
    if warning is not None:  # a warning only, under enforce too
        assert outcome.response["response"]["allowed"] is True and outcome.plan.denials == []


def test_a_slice_size_without_a_slice_level_is_not_said_to_leave_pods_out() -> None:
    # Kueue takes no slices without podset-slice-required-topology (and refuses the size alone).
    outcome, _ = run(job({REQUIRED: L2, SLICE_SIZE: "2"}))
    assert outcome.plan.warnings == [
        f"topology: podset 'main': {SLICE_SIZE}: may not be set when '{SLICE_LEVEL}' is not specified {REQUEST}"
    ]


def test_a_statefulsets_pods_are_counted_and_a_pod_groups_pod_is_not_judged() -> None:
    statefulset = STATEFULSET.replace(f"{SLICE_LEVEL}: {HOST}", f"{SLICE_LEVEL}: {L3}").replace('"5"', '"2"')
    outcome, _ = run(statefulset, teams(enforcement="enforce"))
    assert outcome.response["response"]["allowed"] is True
    assert [w for w in outcome.plan.warnings if "findTopologyAssignment" in w] == [
        remainder("main", 2, 3, "1 whole slice (2 pods)", "1 pod")
    ]
    # One Pod of a pod group of 3: its role's pods are unknown (at most 3), so no divisibility finding.
    pod = yaml.safe_load(POD.replace(f"{SLICE_LEVEL}: {HOST}", f"{SLICE_LEVEL}: {L3}"))
    pod["metadata"]["labels"] = {f"{K}pod-group-name": "grp"}
    pod["metadata"]["annotations"][f"{K}pod-group-total-count"] = "3"
    outcome, _ = run(yaml.safe_dump(pod), teams(enforcement="enforce"))
    assert outcome.response["response"]["allowed"] is True
    assert [w for w in outcome.plan.warnings if "findTopologyAssignment" in w] == []


def test_an_update_that_leaves_pods_out_of_every_slice_is_warned() -> None:
    stored = yaml.safe_load(job({REQUIRED: L2, SLICE_LEVEL: L3, SLICE_SIZE: "2"}))
    stored["spec"].update(parallelism=4, completions=4, suspend=True)
    created = review(review_body(stored, NS), teams(), inventory=INVENTORY)
    assert created.plan.warnings == [] and created.plan.denials == []
    updated = yaml.safe_load(yaml.safe_dump(stored))
    updated["spec"]["parallelism"] = 3
    outcome = review(review_body(updated, NS, operation="UPDATE", old=stored), teams(), inventory=INVENTORY)
    assert outcome.response["response"]["allowed"] is True
    assert outcome.plan.warnings == [
        remainder("main", 2, 3, "1 whole slice (2 pods)", "1 pod") + "; this update changes podset 'main' from 4 to "
        "3 pods: set it back"
    ]
