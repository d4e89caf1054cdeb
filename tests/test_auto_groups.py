"""Topology mode auto for the workloads whose shape the kind does not name: a JobSet's driver found
as the one podset of 1 pod beside its workers, and one Pod of a Kueue pod group sized by its
``kueue.x-k8s.io/pod-group-total-count``.

Inventories are the AWS-labelled p5 nodes of ``support.aws_nodes`` (blocks × racks × hosts, 8 GPUs
each); the group rules checked are Kueue v0.19.2's (``jobframework.ValidatePodSetGroupingTopology``,
``ValidateTASPodSetRequest``, ``tas_flavor_snapshot.findLeaderAndWorkers``), the pod group's podsets
are Kueue's (``pod_controller.constructGroupPodSets``: one per pod role).
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest
from support import AWS_LEVELS, CASES, aws_nodes, load_documents, needs_cases, platform_with, review_body, teams_from

from webhook.core.admission.review import review
from webhook.core.kueue.kinds import find_kind
from webhook.core.kueue.view import kueue_view
from webhook.core.plan.patch import apply_patch
from webhook.core.plan.rules.capacity import crowded_role

SPINE, BLOCK, RACK, HOST = AWS_LEVELS
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
SLICE_LEVEL = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
GROUP = "kueue.x-k8s.io/podset-group-name"
TOTAL = "kueue.x-k8s.io/pod-group-total-count"
AUTO: dict[str, Any] = {"queue": {"enforcement": "warn"}, "topology": {"mode": "auto"}}
STRICT: dict[str, Any] = {"queue": {"enforcement": "warn"}, "topology": {"mode": "auto", "enforcement": "enforce"}}


def run(obj: dict[str, Any], policy: dict[str, Any] | None = None, **kw: Any) -> Any:
    teams = teams_from(platform_with(policy if policy is not None else AUTO))
    inventory = kw.pop("inventory", None)
    return review(review_body(obj, "ml", **kw), teams, inventory=inventory)


def annotations_by_podset(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    patched = apply_patch(obj, patch)
    row = find_kind(patched["apiVersion"], patched["kind"])
    assert row is not None
    return {p.name: dict(p.annotations) for p in kueue_view(patched, row).podsets}


# -- JobSet: the driver by shape -----------------------------------------------------------------
def replicated_job(name: str, pods: int, gpus: int, replicas: int = 1) -> dict[str, Any]:
    requests = {"nvidia.com/gpu": str(gpus)}
    container = {"name": "main", "image": "trainer:1", "resources": {"requests": requests}}
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
            }
        },
    }


def jobset(*jobs: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {"replicatedJobs": list(jobs)},
    }


def pod_template(obj: dict[str, Any], index: int) -> dict[str, Any]:
    template: dict[str, Any] = obj["spec"]["replicatedJobs"][index]["template"]["spec"]["template"]
    return template


@pytest.mark.parametrize("driver_first", [True, False])
def test_a_jobsets_podset_of_one_pod_is_grouped_with_the_other(driver_first: bool) -> None:
    driver, workers = replicated_job("coordinator", 1, 1), replicated_job("trainers", 3, 8)
    obj = jobset(driver, workers) if driver_first else jobset(workers, driver)
    outcome = run(obj, inventory=aws_nodes(hosts=4))  # 4 pods: one rack of 4 hosts
    found = annotations_by_podset(obj, outcome.patch)
    group = {GROUP: "coordinator-trainers", REQUIRED: RACK}
    assert found == {"coordinator": group, "trainers": group}
    assert outcome.plan.denials == [] and outcome.plan.warnings == []
    (note,) = outcome.plan.notes
    assert note.endswith(
        f"→ required {RACK}, the narrowest level one domain of which holds them; grouped as 'coordinator-trainers' "
        "('coordinator' is the one of the workload's two podsets with 1 pod, 'trainers' its workers): together "
        "they need no broader level than 'trainers' alone"
    )


def test_workers_of_several_replicas_are_one_podset_grouped_with_the_driver() -> None:
    obj = jobset(replicated_job("driver", 1, 0), replicated_job("workers", 2, 8, replicas=2))
    found = annotations_by_podset(obj, run(obj, inventory=aws_nodes(hosts=4)).patch)
    assert found["driver"] == found["workers"] == {GROUP: "driver-workers", REQUIRED: RACK}


def test_of_two_podsets_of_one_pod_the_second_is_the_driver() -> None:
    # Kueue's findLeaderAndWorkers takes the second of a pair as the leader unless it has more pods.
    obj = jobset(replicated_job("a", 1, 2), replicated_job("b", 1, 4))
    outcome = run(obj, inventory=aws_nodes())
    found = annotations_by_podset(obj, outcome.patch)
    assert found["a"] == found["b"] == {GROUP: "b-a", REQUIRED: HOST}  # 2 + 4 GPUs on one host
    assert outcome.plan.notes[0].endswith(
        "grouped as 'b-a' ('b' and 'a', the workload's two podsets, have 1 pod each: the second is the driver, "
        "as Kueue's TAS takes it): together they need no broader level than 'a' alone"
    )
    # Two pods of 8 GPUs need a rack, one alone a host: the workers are 1 pod, on one host at any
    # level, so the rack only brings the driver next to them.
    obj = jobset(replicated_job("a", 1, 8), replicated_job("b", 1, 8))
    outcome = run(obj, inventory=aws_nodes())
    found = annotations_by_podset(obj, outcome.patch)
    assert found["a"] == found["b"] == {GROUP: "b-a", REQUIRED: RACK}
    assert outcome.plan.notes[-1].endswith(
        "grouped as 'b-a' ('b' and 'a', the workload's two podsets, have 1 pod each: the second is the driver, "
        "as Kueue's TAS takes it): 'a' is 1 pod, on one host at any level, so the group's broader level only "
        "brings the driver next to it"
    )
    assert outcome.plan.denials == []
    # Racks of 1 host: no rack holds the two, a block does, so they are grouped at the block.
    obj = jobset(replicated_job("a", 1, 8), replicated_job("b", 1, 8))
    found = annotations_by_podset(obj, run(obj, inventory=aws_nodes(hosts=1)).patch)
    assert found["a"] == found["b"] == {GROUP: "b-a", REQUIRED: BLOCK}


@pytest.mark.parametrize(
    "change",
    [
        "three podsets",  # Kueue takes a group of exactly 2 podsets
        "a driver of two pods",  # neither podset has 1 pod
        "a driver of two replicas",
        "a user group on the workers",
        "a user level on the driver",
        "a user level on the workers",
        "user slices on the workers",
    ],
)
def test_no_jobset_group_where_kueue_would_refuse_it_or_the_user_placed_the_pods(change: str) -> None:
    obj = jobset(replicated_job("driver", 1, 1), replicated_job("workers", 3, 8))
    if change == "three podsets":
        obj["spec"]["replicatedJobs"].append(replicated_job("evaluator", 2, 8))
    elif change == "a driver of two pods":
        obj["spec"]["replicatedJobs"][0] = replicated_job("driver", 2, 1)
    elif change == "a driver of two replicas":
        obj["spec"]["replicatedJobs"][0] = replicated_job("driver", 1, 1, replicas=2)
    else:
        annotations = {
            "a user group on the workers": {GROUP: "mine", REQUIRED: RACK},
            "a user level on the driver": {PREFERRED: BLOCK},
            "a user level on the workers": {REQUIRED: BLOCK},
            "user slices on the workers": {REQUIRED: BLOCK, SLICE_LEVEL: HOST, SLICE_SIZE: "1"},
        }[change]
        pod_template(obj, 0 if "driver" in change else 1)["metadata"] = {"annotations": annotations}
    outcome = run(obj, inventory=aws_nodes(hosts=4))
    found = annotations_by_podset(obj, outcome.patch)
    assert [name for name, values in found.items() if values.get(GROUP) not in (None, "mine")] == []
    assert not any("grouped as" in note for note in outcome.plan.notes)
    if change == "three podsets":  # each podset placed on its own, as before
        assert found["driver"] == {REQUIRED: HOST} and found["evaluator"] == {REQUIRED: RACK}


def test_a_jobset_group_larger_than_every_domain_leaves_the_workers_sliced() -> None:
    # 1 + 8 pods of 8 GPUs on 8 hosts: no domain holds them together; the workers alone fill the
    # spine in block slices of 4, exactly as without co-placement.
    obj = jobset(replicated_job("driver", 1, 8), replicated_job("workers", 8, 8))
    outcome = run(obj, inventory=aws_nodes())
    assert annotations_by_podset(obj, outcome.patch) == {
        "driver": {REQUIRED: HOST},
        "workers": {REQUIRED: SPINE, SLICE_LEVEL: BLOCK, SLICE_SIZE: "4"},
    }
    assert outcome.plan.notes[-1].endswith(
        "; 'driver' not grouped with 'workers': no domain it may require holds them together"
    )


def test_a_group_name_longer_than_kueue_takes_is_not_made() -> None:
    """Kueue v0.19.2's Workload takes a podSetGroupName of at most 256 characters; a Ray worker
    group's name is the user's and unbounded, so ``head-<groupName>`` can exceed it."""
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "ray"},
        "spec": {
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h", "image": "ray"}]}}},
            "workerGroupSpecs": [
                {
                    "groupName": "g" * 252,
                    "replicas": 1,
                    "template": {"spec": {"containers": [{"name": "w", "image": "ray"}]}},
                }
            ],
        },
    }
    found = annotations_by_podset(cluster, run(cluster, inventory=aws_nodes()).patch)
    assert GROUP not in found["head"]
    cluster["spec"]["workerGroupSpecs"][0]["groupName"] = "g" * 251  # head-ggg… is 256
    found = annotations_by_podset(cluster, run(cluster, inventory=aws_nodes()).patch)
    assert found["head"][GROUP] == "head-" + "g" * 251


def test_a_grouped_jobset_is_idempotent_and_never_stranded() -> None:
    obj = jobset(replicated_job("driver", 1, 1), replicated_job("workers", 3, 8))
    for shape in [(2, 2, 2), (1, 3, 3), (2, 2, 4), (1, 4, 4)]:
        inventory = aws_nodes(*shape)
        outcome = run(copy.deepcopy(obj), STRICT, inventory=inventory)
        assert outcome.plan.denials == []
        patched = apply_patch(obj, outcome.patch)
        again = run(patched, STRICT, inventory=inventory)
        assert again.patch == [] and again.plan.denials == [], shape


# -- a pod group's Pod, sized by its total count -------------------------------------------------
def group_pod(total: int, gpus: int, name: str = "sample-leader-x7k2p") -> dict[str, Any]:
    """A bare Pod of a Kueue pod group, as in Kueue's ``pods-kueue/kueue-pod-group.yaml``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": name.rsplit("-", 1)[0] + "-",
            "labels": {"kueue.x-k8s.io/pod-group-name": "sample-group"},
            "annotations": {TOTAL: str(total)},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "sleep",
                    "image": "busybox",
                    "command": ["sh", "-c", "sleep 3"],
                    "resources": {"requests": {"cpu": "3", "nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def pod_annotations(obj: dict[str, Any], outcome: Any) -> dict[str, str]:
    annotations: dict[str, str] = apply_patch(obj, outcome.patch)["metadata"]["annotations"]
    return {key: value for key, value in annotations.items() if key != TOTAL}


@pytest.mark.parametrize(
    ("total", "level"),
    [
        (1, HOST),  # one pod of 8 GPUs: a host
        (2, RACK),  # racks of 2 hosts
        (3, BLOCK),  # blocks of 4 hosts: 2 of them, each keeping room for any role of 1 to 3 pods
        (4, BLOCK),
        (8, SPINE),
    ],
)
def test_a_pod_groups_pod_requires_the_level_of_its_total_count(total: int, level: str) -> None:
    obj = group_pod(total, 8)
    outcome = run(obj, STRICT, inventory=aws_nodes())
    assert pod_annotations(obj, outcome) == {REQUIRED: level}  # never a podset-group-name
    assert outcome.plan.denials == [] and outcome.plan.warnings == []
    (note,) = outcome.plan.notes
    pods = "1 pod" if total == 1 else f"{total} pods"
    assert note.startswith(
        "topology auto: 'main' (1 pod of {cpu: 3, nvidia.com/gpu: 8}), one of a pod group of "
        f"{pods} (pod-group-total-count): its role has at most {pods} of its request, an upper bound; "
    )
    assert note.endswith(
        f"→ required {level}, the narrowest level one domain of which holds {total}; whichever nodes the "
        f"group's other pods take, a {level} domain keeps room for this pod's role"
    )


def test_a_pod_group_whose_other_pods_could_crowd_this_role_out_gets_preferred() -> None:
    # One rack of 2 hosts, pods of 4 GPUs (2 a host), a group of 4: only the rack holds 4 such
    # pods, and were this pod's role a single pod, the group's 3 others could take both hosts.
    obj = group_pod(4, 4)
    outcome = run(obj, STRICT, inventory=aws_nodes(blocks=1, racks=1, hosts=2))
    assert pod_annotations(obj, outcome) == {PREFERRED: RACK}
    assert outcome.plan.denials == [] and outcome.plan.warnings == []
    assert outcome.plan.notes[0].endswith(
        f"→ preferred {RACK}, where one domain holds 4: not required, as a role of 1 pod like this one could "
        f"find no {RACK} domain with room once the group's other 3 pods took their nodes"
    )
    # Two such racks: whatever hosts the other 4 - k pods take, a rack keeps room for k.
    outcome = run(obj, STRICT, inventory=aws_nodes(blocks=1, racks=2, hosts=2))
    assert pod_annotations(obj, outcome) == {REQUIRED: RACK}


def test_a_pod_group_larger_than_every_domain_it_may_require_is_preferred_at_the_cap() -> None:
    obj = group_pod(3, 8)
    policy = {"queue": {"enforcement": "warn"}, "topology": {"mode": "auto", "level": RACK}}
    outcome = run(obj, policy, inventory=aws_nodes())
    assert pod_annotations(obj, outcome) == {PREFERRED: RACK}
    assert outcome.plan.notes[0].endswith(f"→ preferred {RACK} (too large to require)")
    assert (
        "auto: a pod group of 3 pods (pod-group-total-count, an upper bound on this pod's role) exceeds the "
        f"largest {RACK} domain (2), so preferred"
    ) in [change.reason.partition(": ")[2] for change in outcome.plan.changes]


def test_a_pod_group_under_auto_constraint_preferred_is_preferred() -> None:
    obj = group_pod(2, 8)
    policy = {"queue": {}, "topology": {"mode": "auto", "autoConstraint": "preferred"}}
    assert pod_annotations(obj, run(obj, policy, inventory=aws_nodes())) == {PREFERRED: RACK}


def test_a_pod_group_pod_the_user_placed_gets_nothing() -> None:
    obj = group_pod(2, 8)
    obj["metadata"]["annotations"][PREFERRED] = HOST
    assert pod_annotations(obj, run(obj, inventory=aws_nodes())) == {PREFERRED: HOST}


def test_crowded_role_counts_whole_nodes_taken_by_the_other_pods() -> None:
    team = teams_from(platform_with(AUTO)).policies.teams[0]
    assert team.topology is not None
    row = find_kind("v1", "Pod")
    assert row is not None
    rack = AWS_LEVELS.index(RACK)
    cases = [
        # 2 racks of 2 hosts: the group's other pods take a host each.
        ((1, 2, 2), 2, 8, None),  # a role of 1: the other pod leaves 3 hosts; of 2: the racks are free
        ((1, 2, 2), 3, 8, 3),  # no rack holds 3 pods of 8 GPUs at all
        ((1, 2, 2), 4, 4, None),  # 2 a host: any 4 - k pods leave a rack with room for k
        # 1 rack of 2 hosts: a role of 1 pod, the group's 3 others on both hosts.
        ((1, 1, 2), 4, 4, 1),
        ((1, 1, 2), 2, 8, None),
        ((1, 1, 2), 3, 4, 1),
    ]
    for shape, total, gpus, crowded in cases:
        [member] = kueue_view(group_pod(total, gpus), row).podsets
        assert member.requests is not None and member.requests["nvidia.com/gpu"] == Decimal(gpus)
        found = crowded_role(member, rack, team.topology, aws_nodes(*shape), team)
        assert found == crowded, (shape, total, gpus)


@needs_cases
def test_kueues_own_pod_group_example_is_sized_by_its_total_count() -> None:
    """Kueue's ``pods-kueue/kueue-pod-group.yaml``: two Pods of 3 CPUs, a group of 2; a p5 host
    holds 64 such pods."""
    for pod in load_documents(CASES / "pods-kueue" / "kueue-pod-group.yaml"):
        pod["metadata"]["name"] = pod["metadata"]["generateName"] + "abcde"
        outcome = run(pod, STRICT, inventory=aws_nodes())
        assert pod_annotations(pod, outcome) == {REQUIRED: HOST}
        assert "one of a pod group of 2 pods (pod-group-total-count)" in outcome.plan.notes[0]


@pytest.mark.parametrize(
    "topology",
    [
        {"mode": "auto", "enforcement": "enforce"},
        {"mode": "auto", "autoConstraint": "preferred"},
        {"mode": "auto", "level": RACK},
    ],
    ids=["required", "autoConstraint-preferred", "capped-at-rack"],
)
def test_a_pod_groups_pod_gets_the_level_a_podset_of_its_total_count_gets(topology: dict[str, Any]) -> None:
    # The same narrowest level that fits, for a Pod of a group of N and a podset of N such pods;
    # only what goes with it differs (slices for the podset, crowding for the pod group).
    policy = {"queue": {"enforcement": "warn"}, "topology": topology}
    levels: dict[int, tuple[str, str]] = {}
    for total in range(1, 9):  # 9 would be refused: 8 hosts of 8 GPUs
        pod = group_pod(total, 8)
        pod_ann = pod_annotations(pod, run(pod, policy, inventory=aws_nodes()))
        js = jobset(replicated_job("workers", total, 8))
        (js_ann,) = annotations_by_podset(js, run(js, policy, inventory=aws_nodes()).patch).values()
        strength = REQUIRED if REQUIRED in js_ann else PREFERRED
        assert pod_ann == {strength: js_ann[strength]}, total
        levels[total] = (strength.rsplit("-", 2)[1], js_ann[strength])
    # aws_nodes(): 2 spines x 2 blocks x 2 racks x 2 hosts of 8 GPUs (a host holds one such pod).
    if topology.get("autoConstraint") == "preferred":
        assert levels == {
            1: ("preferred", HOST),
            2: ("preferred", RACK),
            **{n: ("preferred", BLOCK) for n in (3, 4)},
            **{n: ("preferred", SPINE) for n in range(5, 9)},
        }
    elif "level" in topology:  # never required broader than a rack: preferred there
        assert levels == {1: ("required", HOST), 2: ("required", RACK), **{n: ("preferred", RACK) for n in range(3, 9)}}
    else:
        assert levels == {
            1: ("required", HOST),
            2: ("required", RACK),
            **{n: ("required", BLOCK) for n in (3, 4)},
            **{n: ("required", SPINE) for n in range(5, 9)},
        }


def test_a_pod_groups_pod_under_auto_constraint_preferred_says_why() -> None:
    obj = group_pod(2, 8)
    policy = {"queue": {}, "topology": {"mode": "auto", "autoConstraint": "preferred"}}
    outcome = run(obj, policy, inventory=aws_nodes())
    assert outcome.plan.notes[0].endswith(f"→ preferred {RACK}")
    assert (
        "auto: a pod group of 2 pods (pod-group-total-count, an upper bound on this pod's role) fits in one "
        f"{RACK} domain (the largest holds 2); preferred there (autoConstraint)"
    ) in [change.reason.partition(": ")[2] for change in outcome.plan.changes]
