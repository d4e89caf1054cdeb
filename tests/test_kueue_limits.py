"""Workloads whose Workload Kueue v0.19.2 can never create, and podsets that match no node.

- more than 18 podsets (``jobframework.MaxPodSets``; the Workload CRD's ``spec.podSets``
  ``maxItems: 18``): a JobSet of 19 replicatedJobs is refused under ``enforce``; 9 (a JobSet, and a
  RayCluster of a head and 8 worker groups) are fine;
- podset names: two that collide once lower-cased (``NewPodSetReference``, ``+listMapKey=name``),
  or one that is no ``PodSetReference``; a Kubeflow job's replica keys are not judged (Kueue reads
  only its own replica types, Kubeflow's webhook refuses the others);
- an empty ``nodeSelectorTerms``: with a team node affinity the governor appends the team's term,
  and topology mode auto and the never-admitted checks judge that term; without one the podset
  matches no node, said plainly instead of "the largest holds 0".
"""

from __future__ import annotations

import copy
from typing import Any

from support import aws_nodes, platform_with, review_body, teams_from

from webhook.core.admission.review import ReviewOutcome, review
from webhook.core.kueue.inventory import NodeInventory

RACK = "topology.k8s.aws/network-node-layer-3"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
AFFINITY = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}]
NEVER = "queue: the workload can never be admitted: Kueue never creates its Workload, as "


def run(obj: dict[str, Any], policy: dict[str, Any], inventory: NodeInventory | None = None) -> ReviewOutcome:
    return review(review_body(obj, "ml"), teams_from(platform_with(policy)), inventory=inventory)


def pod(gpus: int = 8) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]}}


def jobset(*names: str) -> dict[str, Any]:
    job = {"spec": {"parallelism": 1, "completions": 1, "template": pod(1)}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {"replicatedJobs": [{"name": n, "replicas": 1, "template": copy.deepcopy(job)} for n in names]},
    }


def raycluster(*groups: str) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc"},
        "spec": {
            "headGroupSpec": {"template": pod(0)},
            "workerGroupSpecs": [{"groupName": g, "replicas": 1, "template": pod(1)} for g in groups],
        },
    }


def empty_terms_job(parallelism: int = 4) -> dict[str, Any]:
    template = pod()
    template["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "emptyterms"},
        "spec": {"parallelism": parallelism, "completions": parallelism, "template": template},
    }


ENFORCE = {"queue": {"enforcement": "enforce"}}
WARN = {"queue": {"enforcement": "warn"}}


def test_a_jobset_of_19_replicated_jobs_is_refused_naming_kueues_limit() -> None:
    names = [f"r{i}" for i in range(19)]
    listed = ", ".join(repr(n) for n in names)
    assert run(jobset(*names), ENFORCE).plan.denials == [
        f"{NEVER}a Workload holds at most 18 podsets and it has 19 ({listed})"
    ]
    assert run(jobset(*names), WARN).plan.warnings == [
        f"{NEVER}a Workload holds at most 18 podsets and it has 19 ({listed})"
    ]


def test_18_podsets_and_a_jobset_and_a_raycluster_of_nine_pass() -> None:
    """Regression: a JobSet of 9 replicatedJobs and a RayCluster of head + 8 worker
    groups are within Kueue v0.19.2's 18 (the 8 of older Kueue docs is no longer the limit)."""
    for obj in (jobset(*(f"r{i}" for i in range(18))), jobset(*(f"r{i}" for i in range(9)))):
        result = run(obj, ENFORCE)
        assert result.plan.denials == [] and result.plan.warnings == []
    result = run(raycluster(*(f"g{i}" for i in range(8))), ENFORCE)
    assert result.plan.denials == [] and result.plan.warnings == []


def test_a_raycluster_of_head_and_18_worker_groups_is_refused() -> None:
    """Kueue's RayCluster webhook refuses it too (``ExpectedPodSetsCount`` > ``MaxPodSets``)."""
    denials = run(raycluster(*(f"g{i}" for i in range(18))), ENFORCE).plan.denials
    assert len(denials) == 1 and denials[0].startswith(f"{NEVER}a Workload holds at most 18 podsets and it has 19")
    assert denials[0].endswith("'g16', 'g17')")


def test_podset_names_that_collide_once_lower_cased_are_refused() -> None:
    assert run(raycluster("Worker", "worker"), ENFORCE).plan.denials == [
        f"{NEVER}2 of its podsets are named 'worker' (Kueue lower-cases them)"
    ]
    # A worker group named like the head podset collides with it (Kueue's webhook refuses it too).
    assert run(raycluster("head"), ENFORCE).plan.denials == [
        f"{NEVER}2 of its podsets are named 'head' (Kueue lower-cases them)"
    ]


def test_a_fault_tolerant_ray_head_without_its_container_is_refused() -> None:
    """Kueue v0.19.2 builds no podsets for it (``accountForRedisCleanupInHeadPodSet``: "head pod
    template must include the Ray container"), and its webhook refuses it (the row of Kueue's
    TestBuildPodSets "spec with gcs fault tolerance and missing head container",
    tests/data/kueue/v0.19.2/raycluster_common_test.yaml; e2e/test_kueue_limits.py)."""
    why = (
        "queue: Kueue refuses the workload, as it cannot build podset 'head': its pod template has no "
        "container, and with GCS fault tolerance Kueue raises the first one's requests (KubeRay's Redis "
        "cleanup): 'head pod template must include the Ray container'"
    )
    for head in ({}, {"spec": {"containers": []}}):
        for fault_tolerance in (
            {"spec": {"gcsFaultToleranceOptions": {"redisAddress": "redis:6379"}}},
            {"metadata": {"annotations": {"ray.io/ft-enabled": "True"}}},
        ):
            body = raycluster("workers")
            body["spec"]["headGroupSpec"]["template"] = head
            for key, value in fault_tolerance.items():
                body[key] |= value
            assert run(body, ENFORCE).plan.denials == [why], (head, fault_tolerance)
            assert run(body, WARN).plan.warnings[-1:] == [why]
    # Without fault tolerance, or with the head's container, Kueue builds the podsets.
    bare = raycluster("workers")
    bare["spec"]["headGroupSpec"]["template"] = {}
    assert run(bare, ENFORCE).plan.allowed
    whole = raycluster("workers")
    whole["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
    assert run(whole, ENFORCE).plan.allowed


def test_a_podset_name_kueue_does_not_take_is_refused() -> None:
    long = "g" * 64
    denials = run(raycluster("My_Group", "ok-1", long, "g" * 63), ENFORCE).plan.denials
    rule = "(lower-case letters, digits and '-', starting and ending alphanumeric, at most 63 characters)"
    assert denials == [
        f"{NEVER}its podset name 'my_group' is no podset name Kueue takes {rule}",
        f"{NEVER}its podset name {long!r} is no podset name Kueue takes {rule}",
    ]


def test_kubeflow_replica_keys_are_not_judged() -> None:
    """Regression (esc.yaml document 3): ``Worker`` and ``worker`` keys. Kueue v0.19.2 builds
    podsets only from ``OrderedReplicaTypes`` (``Master``, ``Worker``, case-sensitive), so the
    ``worker`` key is no podset of its Workload; Kubeflow's webhook refuses that key
    (``ValidateReplicaSpecs``: replica type not supported). No finding of ours."""
    obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "both-case"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {"replicas": 1, "template": pod()},
                "worker": {"replicas": 2, "template": pod()},
                "Mas/ter~0": {"replicas": 1, "template": pod()},
            }
        },
    }
    result = run(obj, ENFORCE)
    assert result.plan.denials == [] and result.plan.warnings == []


def _annotations(result: ReviewOutcome) -> dict[str, str]:
    for op in result.patch:
        if op["path"] == "/spec/template/metadata":
            annotations: dict[str, str] = op["value"]["annotations"]
            return annotations
    return {}


def test_empty_terms_filled_by_the_team_are_judged_as_filled() -> None:
    """Regression (emptyterms.yaml in the research namespace): auto chose preferred "(the largest
    holds 0)" as if no node matched the empty list the governor fills with the team's term."""
    policy = {**ENFORCE, "topology": {"mode": "auto", "level": RACK}, "nodeAffinity": AFFINITY}
    result = run(empty_terms_job(), policy, aws_nodes(blocks=2, racks=2, hosts=4))
    assert result.plan.denials == [] and result.plan.warnings == []
    assert _annotations(result) == {REQUIRED: RACK}
    # The same Job without affinity gets the same level.
    plain = empty_terms_job()
    del plain["spec"]["template"]["spec"]["affinity"]
    assert _annotations(run(plain, policy, aws_nodes(blocks=2, racks=2, hosts=4))) == {REQUIRED: RACK}


def test_empty_terms_filled_by_the_team_pass_the_never_admitted_check() -> None:
    """The never-admitted check judges the planned podset, whose list holds the team's term."""
    policy = {**ENFORCE, "topology": {"mode": "required", "level": RACK, "enforcement": "enforce"}}
    result = run(empty_terms_job(), {**policy, "nodeAffinity": AFFINITY}, aws_nodes(blocks=2, racks=2, hosts=4))
    assert result.plan.denials == [] and result.plan.warnings == []


def test_empty_terms_without_a_team_affinity_are_said_to_match_no_node() -> None:
    """Regression (emptyterms.yaml in ds-sandbox, a team without node affinity): denied with
    "can never be admitted … the largest holds 0 such pods". The list stays empty: no node
    matches it (and Kubernetes refuses the pods), said once under the queue rule instead."""
    policy = {"topology": {"mode": "required", "level": RACK, "enforcement": "enforce"}}
    message = (
        "queue: podset 'main' can never be admitted: its required node affinity has no nodeSelectorTerms, "
        "which matches no node (Kubernetes refuses such pods: must have at least one node selector term)"
    )
    inventory = aws_nodes(blocks=2, racks=2, hosts=4)
    refused = run(empty_terms_job(), {**policy, **ENFORCE}, inventory).plan
    assert (refused.denials, refused.warnings) == ([message], [])
    warned = run(empty_terms_job(), {**policy, **WARN}, inventory).plan
    assert (warned.denials, warned.warnings) == ([], [message])
