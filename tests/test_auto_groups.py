"""Topology mode auto for the workloads whose shape the kind does not name: a JobSet's driver found
as the one podset of 1 pod beside its workers.

Inventories are the AWS-labelled p5 nodes of ``support.aws_nodes`` (blocks × racks × hosts, 8 GPUs
each); the group rules checked are Kueue v0.19.2's (``jobframework.ValidatePodSetGroupingTopology``,
``ValidateTASPodSetRequest``, ``tas_flavor_snapshot.findLeaderAndWorkers``).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from support import AWS_LEVELS, aws_nodes, platform_with, review_body, teams_from

from webhook.core.kinds import find_kind
from webhook.core.patch import apply_patch
from webhook.core.review import review
from webhook.core.view import kueue_view

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
    # Two pods of 8 GPUs need a rack, one alone a host: apart, as for any kind.
    obj = jobset(replicated_job("a", 1, 8), replicated_job("b", 1, 8))
    outcome = run(obj, inventory=aws_nodes())
    assert annotations_by_podset(obj, outcome.patch) == {"a": {REQUIRED: HOST}, "b": {REQUIRED: HOST}}
    assert outcome.plan.notes[-1].endswith(f"; 'b' not grouped with 'a': together they need {RACK}")


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
