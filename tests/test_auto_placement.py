"""Topology mode auto: co-placement of a driver with its workers, slices for podsets larger than a
domain, the autoConstraint option, and the reasoning ``--explain`` prints.

Inventories are the AWS-labelled p5 nodes of ``support.aws_nodes`` (blocks × racks × hosts, 8 GPUs
each) and the bundled ``examples/nodes.json``; the group rules checked are Kueue v0.19.2's
(``jobframework.ValidatePodSetGroupingTopology``, ``ValidateTASPodSetRequest``).
"""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from typing import Any

import pytest
from support import AWS_LEVELS, aws_nodes, platform_with, review_body, teams_from

from webhook.core.admission.review import review
from webhook.core.kueue.inventory import NodeInventory, PodConstraints
from webhook.core.kueue.kinds import KINDS, find_kind
from webhook.core.kueue.view import kueue_view
from webhook.core.plan.patch import apply_patch

SPINE, BLOCK, RACK, HOST = AWS_LEVELS
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
SLICE_LEVEL = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
GROUP = "kueue.x-k8s.io/podset-group-name"
AUTO: dict[str, Any] = {"queue": {"enforcement": "warn"}, "topology": {"mode": "auto"}}


def run(obj: dict[str, Any], policy: dict[str, Any] | None = None, **kw: Any) -> Any:
    teams = teams_from(platform_with(policy if policy is not None else AUTO))
    inventory = kw.pop("inventory", None)
    return review(review_body(obj, "ml", **kw), teams, inventory=inventory)


def pod(gpus: int = 8) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]}}


def pytorchjob(workers: int, masters: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": masters, "template": pod()},
                "Worker": {"replicas": workers, "template": pod()},
            }
        },
    }


def mpijob(workers: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "mpi"},
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": pod(1)},
                "Worker": {"replicas": workers, "template": pod()},
            }
        },
    }


def rayjob(*groups: tuple[str, int], mode: str = "K8sJobMode") -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "ray"},
        "spec": {
            "entrypoint": "python x.py",
            "submissionMode": mode,
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {"template": pod(1)},
                "workerGroupSpecs": [{"groupName": g, "replicas": n, "template": pod()} for g, n in groups],
            },
        },
    }


def annotations_by_podset(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    patched = apply_patch(obj, patch)
    row = find_kind(patched["apiVersion"], patched["kind"])
    assert row is not None
    return {p.name: dict(p.annotations) for p in kueue_view(patched, row).podsets}


# -- co-placement ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("obj", "driver", "workers", "level"),
    [
        (pytorchjob(3), "master", "worker", RACK),  # 4 pods: one rack of 4 hosts
        (mpijob(3), "launcher", "worker", RACK),  # a launcher of 1 GPU beside 3 workers
        (rayjob(("gpu", 2)), "head", "gpu", RACK),  # the submitter stays on its own
        (rayjob(("gpu", 2), mode="HTTPMode"), "head", "gpu", RACK),
    ],
)
def test_a_driver_is_grouped_with_its_workers_at_the_level_of_the_group(
    obj: dict[str, Any], driver: str, workers: str, level: str
) -> None:
    outcome = run(obj, inventory=aws_nodes(hosts=4))
    found = annotations_by_podset(obj, outcome.patch)
    group = {GROUP: f"{driver}-{workers}", REQUIRED: level}
    assert found[driver] == group and found[workers] == group
    assert GROUP not in found.get("submitter", {})
    assert outcome.plan.denials == []


def test_a_group_that_needs_a_broader_level_than_the_workers_is_not_made() -> None:
    # Racks of 2 hosts: 2 workers fill one, with their master they need a block.
    obj = pytorchjob(2)
    outcome = run(obj, inventory=aws_nodes())
    assert annotations_by_podset(obj, outcome.patch) == {"master": {REQUIRED: HOST}, "worker": {REQUIRED: RACK}}
    assert outcome.plan.notes[-1].endswith(f"; 'master' not grouped with 'worker': together they need {BLOCK}")


def test_a_master_and_one_worker_are_grouped_at_the_broader_level_the_pair_needs() -> None:
    # One worker of 8 GPUs alone needs a host; with its master of 8 GPUs, a rack. The worker is on
    # one host at any level, so the rack costs it nothing and brings the master next to it.
    obj = pytorchjob(1)
    outcome = run(obj, inventory=aws_nodes())
    found = annotations_by_podset(obj, outcome.patch)
    assert found["master"] == found["worker"] == {GROUP: "master-worker", REQUIRED: RACK}
    assert outcome.plan.denials == []


def test_user_multi_layer_slices_get_nothing_added() -> None:
    """Defect: a podset with only podset-slice-required-topology-constraints was taken as unplaced,
    so auto added podset-slice-required-topology and -size next to it, which Kueue refuses."""
    obj = job(4)
    constraints = json.dumps([{"topology": RACK, "size": 2}])
    obj["spec"]["template"]["metadata"] = {
        "annotations": {"kueue.x-k8s.io/podset-slice-required-topology-constraints": constraints}
    }
    assert run(obj, inventory=aws_nodes()).patch == [
        {"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "ml-queue"}},
        {"op": "add", "path": "/spec/suspend", "value": True},
    ]


def test_a_driver_that_takes_any_node_of_its_workers_is_grouped_whatever_it_selects() -> None:
    # Both pinned to block 1: every node the workers may use takes the master too.
    obj = pytorchjob(3)
    for role in ("Master", "Worker"):
        obj["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["nodeSelector"] = {BLOCK: "nn-block-1"}
    found = annotations_by_podset(obj, run(obj, inventory=aws_nodes(hosts=4)).patch)
    assert found["master"] == found["worker"] == {GROUP: "master-worker", REQUIRED: RACK}
    # The master pinned to block 1, the workers anywhere: apart, and --explain says why.
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].pop("nodeSelector")
    outcome = run(obj, inventory=aws_nodes(hosts=4))
    assert GROUP not in annotations_by_podset(obj, outcome.patch)["master"]
    assert outcome.plan.notes[0].endswith(
        "; 'master' not grouped with 'worker': some nodes its workers may use refuse it (Kueue places a "
        "group's driver on its workers' nodes)"
    )


def test_a_group_larger_than_every_domain_is_not_made() -> None:
    obj = pytorchjob(8)  # 9 pods of 8 GPUs on 8 hosts: the workers fill the spine, in blocks of 4
    outcome = run(obj, inventory=aws_nodes())
    assert annotations_by_podset(obj, outcome.patch) == {
        "master": {REQUIRED: HOST},
        "worker": {REQUIRED: SPINE, SLICE_LEVEL: BLOCK, SLICE_SIZE: "4"},
    }
    assert outcome.plan.notes[-1].endswith(
        "; 'master' not grouped with 'worker': no domain it may require holds them together"
    )


@pytest.mark.parametrize(
    "change",
    [
        "two masters",  # Kueue: at least one podset of the group has 1 pod; the driver must be it
        "user group",  # the user's own group is left as it is
        "user level on the workers",  # the user placed one of them
        "two worker groups",  # Ray: which group would the head join?
        "two worker groups, one placed by the user",  # still two: the head joins neither
        # Kueue places a group's driver on nodes chosen by the workers' constraints only.
        "a driver pinned to one block",
        # Kueue refuses podset-group-name (and the two-level slice annotations) next to it.
        "multi-layer slices on the workers",
    ],
)
def test_no_group_where_kueue_would_refuse_it_or_the_user_placed_the_pods(change: str) -> None:
    obj = pytorchjob(3)
    specs = obj["spec"]["pytorchReplicaSpecs"]
    if change == "two masters":
        specs["Master"]["replicas"] = 2
    elif change == "user group":
        specs["Worker"]["template"]["metadata"] = {"annotations": {GROUP: "mine"}}
    elif change == "multi-layer slices on the workers":
        constraints = json.dumps([{"topology": RACK, "size": 3}])
        specs["Worker"]["template"]["metadata"] = {
            "annotations": {"kueue.x-k8s.io/podset-slice-required-topology-constraints": constraints}
        }
    elif change == "a driver pinned to one block":
        specs["Master"]["template"]["spec"]["nodeSelector"] = {BLOCK: "nn-block-1"}
    elif change == "user level on the workers":
        specs["Worker"]["template"]["metadata"] = {"annotations": {PREFERRED: BLOCK}}
    else:
        obj = rayjob(("a", 1), ("b", 1), mode="HTTPMode")
        if change.endswith("by the user"):
            groups = obj["spec"]["rayClusterSpec"]["workerGroupSpecs"]
            groups[0]["template"]["metadata"] = {"annotations": {REQUIRED: RACK}}
    found = annotations_by_podset(obj, run(obj, inventory=aws_nodes(hosts=4)).patch)
    added = [name for name, values in found.items() if values.get(GROUP) not in (None, "mine")]
    assert added == []


def test_without_an_inventory_nothing_is_grouped() -> None:
    found = annotations_by_podset(pytorchjob(3), run(pytorchjob(3)).patch)
    assert found == {"master": {PREFERRED: HOST}, "worker": {PREFERRED: HOST}}


def test_every_kind_with_a_driver_role_gets_only_groups_kueue_accepts() -> None:
    """Kueue v0.19.2: a group has exactly 2 podsets, one of them of 1 pod, the same required or
    preferred level on both, no slice annotation, a name that is not a number."""
    import random

    from workloads import build

    seen = 0
    for row in KINDS:
        if not row.coplace:
            continue
        for seed in range(40):
            obj = build(row, random.Random(seed).choice, name="w")
            outcome = run(obj, inventory=aws_nodes(hosts=1 + seed % 4))
            patched = apply_patch(obj, outcome.patch)
            podsets = kueue_view(patched, row).podsets
            groups: dict[str, list[Any]] = {}
            for podset in podsets:
                if podset.group is not None:
                    groups.setdefault(podset.group, []).append(podset)
            for name, members in groups.items():
                seen += 1
                assert len(members) == 2 and min(p.count for p in members) == 1, (row.kind, name)
                levels = [(p.annotations.get(REQUIRED), p.annotations.get(PREFERRED)) for p in members]
                assert levels[0] == levels[1] and levels[0] != (None, None)
                assert not any(SLICE_LEVEL in p.annotations or SLICE_SIZE in p.annotations for p in members)
                assert not name.isdigit()
    assert seen > 0


# -- leader and workers counted as Kueue's TAS counts them -------------------------------------
def test_a_leader_takes_room_from_the_workers_of_its_node() -> None:
    inventory = aws_nodes(blocks=1, racks=1, hosts=2)
    shape = PodConstraints(requests={"nvidia.com/gpu": Decimal(4)})
    # Workers of 4 GPUs: 2 a host, 4 a rack; a leader of 1 GPU costs its host one worker.
    counts = inventory.domain_pods(AWS_LEVELS, {}, [shape], shape.requests, leader={"nvidia.com/gpu": Decimal(1)})
    assert counts[RACK_DEPTH] == {("nn-spine-1", "nn-block-1", "nn-rack-1-1"): 4}
    assert counts[-1] == {(): 4}
    # A leader no node can hold: the group fits nowhere.
    none = inventory.domain_pods(AWS_LEVELS, {}, [shape], shape.requests, leader={"nvidia.com/gpu": Decimal(9)})
    assert none[RACK_DEPTH] == {("nn-spine-1", "nn-block-1", "nn-rack-1-1"): 0}
    # Without a leader, the workers alone.
    alone = inventory.domain_pods(AWS_LEVELS, {}, [shape], shape.requests)
    assert alone[RACK_DEPTH] == {("nn-spine-1", "nn-block-1", "nn-rack-1-1"): 4}


RACK_DEPTH = AWS_LEVELS.index(RACK)


def test_a_group_whose_leader_costs_a_worker_needs_the_broader_level() -> None:
    # Workers of 4 GPUs: a rack of 2 hosts holds 4; a launcher of 1 GPU on one of them leaves 3.
    obj = mpijob(4)
    obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"] = pod(1)
    obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"] = pod(4)
    found = annotations_by_podset(obj, run(obj, inventory=aws_nodes()).patch)
    assert found["launcher"] == {REQUIRED: HOST}
    # Alone the workers fill a rack, 2 a host: in host slices of 2.
    assert found["worker"] == {REQUIRED: RACK, SLICE_LEVEL: HOST, SLICE_SIZE: "2"}
    obj["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3  # 1 + 3 fit the rack: grouped
    found = annotations_by_podset(obj, run(obj, inventory=aws_nodes()).patch)
    assert found["launcher"] == found["worker"] == {GROUP: "launcher-worker", REQUIRED: RACK}


# -- slices ------------------------------------------------------------------------------------
def job(pods: int, gpus: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"parallelism": pods, "completions": pods, "template": pod(gpus)},
    }


@pytest.mark.parametrize(
    ("racks", "hosts", "pods", "expected"),
    [
        # 3 racks of 3 hosts in a block, 8 pods: 4 do not fit a rack, 2-pod slices only 1 a rack
        # (3 in the block, 4 needed): no slices.
        (3, 3, 8, {REQUIRED: BLOCK}),
        # 6 pods: slices of 3, one a rack.
        (3, 3, 6, {REQUIRED: BLOCK, SLICE_LEVEL: RACK, SLICE_SIZE: "3"}),
        # 4 racks of 4 hosts, 12 pods: slices of 4 (a rack each); 6 would not fit a rack.
        (4, 4, 12, {REQUIRED: BLOCK, SLICE_LEVEL: RACK, SLICE_SIZE: "4"}),
        # 7 pods (prime): no slice size divides them.
        (4, 2, 7, {REQUIRED: BLOCK}),
    ],
)
def test_slices_only_when_all_of_them_fit_one_domain(
    racks: int, hosts: int, pods: int, expected: dict[str, str]
) -> None:
    found = annotations_by_podset(
        job(pods), run(job(pods), inventory=aws_nodes(blocks=1, racks=racks, hosts=hosts)).patch
    )
    assert found == {"main": expected}


def test_slices_count_whole_slices_per_rack_on_the_eligible_nodes() -> None:
    # Block 1: racks of 3 hosts with 8 GPUs; 4-GPU pods (2 a host): 6 a rack, 18 a block. 12 pods
    # in slices of 6: each rack holds one, the block three.
    inventory = aws_nodes(blocks=1, racks=3, hosts=3)
    outcome = run(job(12, gpus=4), inventory=inventory)
    assert annotations_by_podset(job(12, gpus=4), outcome.patch) == {
        "main": {REQUIRED: BLOCK, SLICE_LEVEL: RACK, SLICE_SIZE: "6"}
    }
    assert outcome.plan.notes == [
        f"topology auto: 'main' (12 pods of {{nvidia.com/gpu: 4}}): 12 pods; the largest domain holds {SPINE} 18, "
        f"{BLOCK} 18, {RACK} 6, {HOST} 2; all eligible nodes 18 → required {BLOCK}, the narrowest level one domain "
        f"of which holds them; slices of 6 pods at {RACK} (2 slices, the largest {BLOCK} domain holds 3)"
    ]


def test_user_slices_that_do_not_fit_one_domain_together_are_refused() -> None:
    """Defect: a required block with rack slices was judged by one slice in a rack and all pods in
    a block, while Kueue counts whole slices per rack: 4 slices of 2 on 3 racks of 3 never fit."""
    obj = job(8)
    obj["spec"]["template"]["metadata"] = {"annotations": {REQUIRED: BLOCK, SLICE_LEVEL: RACK, SLICE_SIZE: "2"}}
    policy = {"queue": {"enforcement": "warn"}, "topology": {"mode": "auto", "enforcement": "enforce"}}
    outcome = run(obj, policy, inventory=aws_nodes(blocks=1, racks=3, hosts=3))
    assert outcome.plan.denials == [
        "topology: podset 'main' can never be admitted: its 4 slices of 2 pods of {nvidia.com/gpu: 8}, each in one "
        f"{RACK} domain, must fit in one {BLOCK} domain, which hold at most 3 such slices on an empty cluster"
    ]
    outcome = run(obj, policy, inventory=aws_nodes(blocks=1, racks=4, hosts=3))
    assert outcome.plan.denials == []


# -- the invariants on what auto writes ----------------------------------------------------------
CASES = [pytorchjob(3), mpijob(4), rayjob(("gpu", 2)), job(4), job(6), job(12, gpus=4), pytorchjob(7)]


@pytest.mark.parametrize("obj", CASES)
@pytest.mark.parametrize("shape", [(2, 2, 2), (1, 3, 3), (2, 2, 4), (1, 4, 4)])
def test_auto_is_idempotent_additive_and_never_strands(obj: dict[str, Any], shape: tuple[int, int, int]) -> None:
    inventory = aws_nodes(*shape)
    policy = {"queue": {"enforcement": "warn"}, "topology": {"mode": "auto", "enforcement": "enforce"}}
    outcome = run(copy.deepcopy(obj), policy, inventory=inventory)
    assert outcome.plan.denials == []  # never stranded: any level auto requires is admissible
    assert all(op["op"] == "add" or op["path"].endswith("suspend") for op in outcome.patch)
    patched = apply_patch(obj, outcome.patch)
    again = run(patched, policy, inventory=inventory)
    assert again.patch == [] and again.plan.denials == []


def test_a_reapplied_manifest_gets_the_group_back_on_update() -> None:
    original = pytorchjob(3)
    stored = apply_patch(original, run(original, inventory=aws_nodes(hosts=4)).patch)
    reapplied = copy.deepcopy(original)
    reapplied["metadata"] = copy.deepcopy(stored["metadata"])
    reapplied["spec"]["runPolicy"] = stored["spec"]["runPolicy"]
    outcome = run(reapplied, operation="UPDATE", old=stored, inventory=aws_nodes(hosts=4))
    found = annotations_by_podset(reapplied, outcome.patch)
    assert found["master"] == found["worker"] == {GROUP: "master-worker", REQUIRED: RACK}


# -- autoConstraint --------------------------------------------------------------------------------
def test_auto_constraint_preferred_groups_at_preferred_strength() -> None:
    policy = {"queue": {}, "topology": {"mode": "auto", "autoConstraint": "preferred"}}
    found = annotations_by_podset(pytorchjob(3), run(pytorchjob(3), policy, inventory=aws_nodes(hosts=4)).patch)
    assert found["master"] == found["worker"] == {GROUP: "master-worker", PREFERRED: RACK}


def test_auto_constraint_is_for_mode_auto_only() -> None:
    from webhook.core.platform.platform import PlatformError, parse_platform

    with pytest.raises(PlatformError, match="autoConstraint applies to mode 'auto' only, not 'required'"):
        parse_platform(
            platform_with({"queue": {}, "topology": {"mode": "required", "level": RACK, "autoConstraint": "required"}})
        )


def test_the_bundled_inventory_explains_the_choice() -> None:
    from support import REPO

    nodes = json.loads((REPO / "examples" / "nodes.json").read_text())["items"]
    outcome = run(pytorchjob(6), inventory=NodeInventory.from_objects(nodes))
    # 16 p5 hosts: 2 blocks of 8, racks of 4; 7 pods need a block; the workers alone (6) too, where
    # they would be in 2 rack slices of 3: grouped, without the slices.
    found = annotations_by_podset(pytorchjob(6), outcome.patch)
    assert found["master"] == found["worker"] == {GROUP: "master-worker", REQUIRED: BLOCK}
    assert outcome.plan.notes == [
        "topology auto: 'master' (1 pod of {nvidia.com/gpu: 8}) + 'worker' (6 pods of {nvidia.com/gpu: 8}): "
        f"7 pods; the largest domain holds {SPINE} 16, {BLOCK} 8, {RACK} 4, {HOST} 1; all eligible nodes 16 → "
        f"required {BLOCK}, the narrowest level one domain of which holds them; grouped as 'master-worker': "
        "together they need no broader level than 'worker' alone (so no slices: Kueue takes none on a group)"
    ]
