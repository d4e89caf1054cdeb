"""Kueue's view of a workload, and the defects of a hand-written reading of Kueue, from AdmissionReviews.

Each test names the defect it pins; the figures are Kueue v0.19.2's (``pkg/controller/jobs/*``
``PodSets()``, ``k8s.io/component-helpers/resource.PodRequests``, TAS node filtering). The e2e
suite compares the same view with the Workloads the real Kueue builds (``e2e/test_kueue_view.py``).
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest
from support import aws_nodes, job, platform_with, review_body, teams_from

from webhook.core.admission.review import review
from webhook.core.kueue.inventory import NodeInventory
from webhook.core.kueue.kinds import KINDS, find_kind
from webhook.core.kueue.registration import webhook_rules
from webhook.core.kueue.resources import pod_requests
from webhook.core.kueue.view import kueue_view
from webhook.core.plan.patch import apply_patch

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
AUTO = {"queue": {}, "topology": {"mode": "auto"}}
HOST, RACK, BLOCK = (
    "kubernetes.io/hostname",
    "topology.k8s.aws/network-node-layer-3",
    "topology.k8s.aws/network-node-layer-2",
)


def run(obj: dict[str, Any], policy: dict[str, Any], **kw: Any) -> Any:
    inventory = kw.pop("inventory", None)
    return review(review_body(obj, "ml", **kw), teams_from(platform_with(policy)), inventory=inventory)


def view_of(obj: dict[str, Any]) -> list[tuple[str, int]]:
    row = find_kind(obj["apiVersion"], obj["kind"])
    assert row is not None
    return [(p.name, p.count) for p in kueue_view(obj, row).podsets]


def container(name: str = "c", **requests: Any) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": {"requests": dict(requests)}}


def gpu_template(gpus: int = 8, **spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [container(**{"nvidia.com/gpu": str(gpus)})], **spec}}


def lws(leader: bool, size: int = 4) -> dict[str, Any]:
    lwt: dict[str, Any] = {"size": size, "workerTemplate": gpu_template()}
    if leader:
        lwt["leaderTemplate"] = gpu_template()
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "lws"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": lwt},
    }


def annotations(obj: dict[str, Any], *path: str | int) -> Any:
    node: Any = obj
    for key in path:
        node = node[key]
    return node.get("metadata", {}).get("annotations")


# --- podset names and counts -------------------------------------------------------------------


def test_lws_without_leader_template_is_one_podset_of_size_pods() -> None:
    """Defect: a LeaderWorkerSet without leaderTemplate was counted as size-1 pods (Kueue: size)."""
    assert view_of(lws(False)) == [("main", 4)]
    assert view_of(lws(True)) == [("leader", 1), ("worker", 3)]
    # 4 pods of 8 GPUs need a rack of 4 hosts; size-1 = 3 would have picked the same rack shape
    # only with 4-host racks, so use 2-host racks: 4 pods need a block, not a rack.
    outcome = run(lws(False), AUTO, inventory=aws_nodes(blocks=2, racks=2, hosts=2))
    patched = apply_patch(lws(False), outcome.patch)
    # (A block, in 2 slices of a rack each: one block holds both.)
    assert annotations(patched, "spec", "leaderWorkerTemplate", "workerTemplate") == {
        REQUIRED: BLOCK,
        "kueue.x-k8s.io/podset-slice-required-topology": "topology.k8s.aws/network-node-layer-3",
        "kueue.x-k8s.io/podset-slice-size": "2",
    }


def test_a_job_without_parallelism_runs_one_pod_at_a_time() -> None:
    """Defect: a Job with completions and no parallelism was sized at completions. The API server
    defaults parallelism to 1 and Kueue counts min(parallelism, completions) (its Job adapter's
    podsCount), so `kgov mutate` of such a manifest must see 1 pod, not 8."""
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"completions": 8, "template": gpu_template()},
    }
    assert view_of(body) == [("main", 1)]
    body["spec"]["parallelism"] = 3
    assert view_of(body) == [("main", 3)]
    body["spec"]["completions"] = 2
    assert view_of(body) == [("main", 2)]


def test_deployment_pods_are_admitted_one_by_one() -> None:
    """Defect: a Deployment's pods were sized by replicas (Kueue admits each pod as its own workload)."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 6, "selector": {"matchLabels": {"a": "b"}}, "template": gpu_template()},
    }
    assert view_of(deployment) == [("main", 1)]
    patched = apply_patch(deployment, run(deployment, AUTO, inventory=aws_nodes()).patch)
    assert annotations(patched, "spec", "template") == {REQUIRED: HOST}


def test_statefulset_is_one_pod_group_of_replicas() -> None:
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"}, "spec": {"replicas": 3}}
    sts["spec"]["template"] = gpu_template()
    assert view_of(sts) == [("main", 3)]


def test_kueue_lower_cases_role_names_and_defaults_counts() -> None:
    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"template": gpu_template()},
                "Worker": {"replicas": 3, "template": gpu_template()},
            }
        },
    }
    assert view_of(pytorch) == [("master", 1), ("worker", 3)]
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "j"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "Trainer",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 4, "completions": 3, "template": gpu_template()}},
                }
            ]
        },
    }
    assert view_of(jobset) == [("trainer", 6)]
    assert view_of(job(spec={"template": gpu_template()})) == [("main", 1)]


def test_rayjob_in_k8s_job_mode_has_a_submitter_podset() -> None:
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "r"},
        "spec": {
            "submissionMode": "K8sJobMode",
            "rayClusterSpec": {
                "headGroupSpec": {"template": gpu_template(0)},
                "workerGroupSpecs": [{"groupName": "GPU", "replicas": 2, "numOfHosts": 2, "template": gpu_template()}],
            },
        },
    }
    assert view_of(rayjob) == [("head", 1), ("gpu", 4), ("submitter", 1)]


# --- per-pod requests --------------------------------------------------------------------------


def test_sidecar_init_containers_add_to_the_pod_request() -> None:
    """Defect: sidecar init containers (restartPolicy: Always) were not added to the pod's request."""
    spec = {
        "containers": [container(cpu="2", **{"nvidia.com/gpu": "4"})],
        "initContainers": [
            {**container("proxy", cpu="1", **{"nvidia.com/gpu": "4"}), "restartPolicy": "Always"},
            container("setup", cpu="5"),
        ],
        "overhead": {"cpu": "250m"},
    }
    # app 2 + sidecar 1 = 3 CPUs; the plain init container needs 5 + the sidecar's 1 = 6; + overhead.
    assert pod_requests(spec) == {"cpu": Decimal("6.25"), "nvidia.com/gpu": Decimal(8)}
    # 2 pods of 4 + 4 sidecar GPUs need 2 hosts (a rack), not 1.
    two = job(spec={"parallelism": 2, "template": {"spec": spec}})
    patched = apply_patch(two, run(two, AUTO, inventory=aws_nodes()).patch)
    assert annotations(patched, "spec", "template") == {REQUIRED: RACK}


def test_limits_stand_in_for_missing_requests_and_pod_level_requests_win() -> None:
    spec = {
        "containers": [{"name": "c", "resources": {"limits": {"cpu": "3", "memory": "1Gi"}, "requests": {"cpu": "1"}}}],
        "resources": {"requests": {"cpu": "4"}},
    }
    assert pod_requests(spec) == {"cpu": Decimal(4), "memory": Decimal(2**30)}


# --- node eligibility --------------------------------------------------------------------------


def tainted(inventory: NodeInventory, names: set[str], taint: dict[str, str]) -> NodeInventory:
    objects = []
    for node in inventory.nodes:
        obj: dict[str, Any] = {
            "metadata": {"name": node.name, "labels": dict(node.labels)},
            "status": {
                "allocatable": {k: str(v) for k, v in node.allocatable.items()},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        if node.name in names:
            obj["spec"] = {"taints": [taint]}
        objects.append(obj)
    return NodeInventory.from_objects(objects)


def test_untolerated_taints_are_not_capacity() -> None:
    """Defect: nodes with a taint neither the flavor nor the pod tolerates counted as capacity."""
    taint = {"key": "maintenance", "value": "yes", "effect": "NoSchedule"}
    nodes = tainted(aws_nodes(blocks=1, racks=2, hosts=2), {"node-1-1-1"}, taint)
    two = job()  # 2 pods of 8 GPUs: rack 1-1 has one usable host left, rack 1-2 has two
    assert annotations(apply_patch(two, run(two, AUTO, inventory=nodes).patch), "spec", "template") == {REQUIRED: RACK}
    nodes = tainted(aws_nodes(blocks=1, racks=2, hosts=2), {"node-1-1-1", "node-1-2-1"}, taint)
    assert annotations(apply_patch(two, run(two, AUTO, inventory=nodes).patch), "spec", "template") == {REQUIRED: BLOCK}
    # The pod tolerating the taint gets the racks back.
    tolerant = job()
    tolerant["spec"]["template"]["spec"]["tolerations"] = [{"key": "maintenance", "operator": "Exists"}]
    assert annotations(apply_patch(tolerant, run(tolerant, AUTO, inventory=nodes).patch), "spec", "template") == {
        REQUIRED: RACK
    }


def test_the_pods_node_selector_limits_the_domains() -> None:
    one_rack = job()
    one_rack["spec"]["template"]["spec"]["nodeSelector"] = {RACK: "nn-rack-1-1"}
    one_rack["spec"]["parallelism"] = 3
    # Three 8-GPU pods confined to a 2-host rack never fit in one domain: preferred, not required.
    patched = apply_patch(one_rack, run(one_rack, AUTO, inventory=aws_nodes()).patch)
    assert REQUIRED not in annotations(patched, "spec", "template")


# --- kinds by group and version ----------------------------------------------------------------


def test_training_operator_mpijob_v1_is_not_kueues_mpijob() -> None:
    """Defect: rows matched on API group only, so a kubeflow.org/v1 MPIJob was suspended and queued.
    It is not Kueue's: never planned as one, and its CREATE in a team namespace is refused
    (tests/test_isolation.py)."""
    mpijob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": {"name": "m"},
        "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2, "template": gpu_template()}}},
    }
    outcome = run(mpijob, {"queue": {}})
    assert outcome.patch == []
    assert "not a version Kueue manages (kubeflow.org/v2beta1)" in outcome.plan.denials[0]
    v2 = {**mpijob, "apiVersion": "kubeflow.org/v2beta1"}
    assert {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}} in run(v2, {"queue": {}}).patch


def test_webhook_rules_list_explicit_versions() -> None:
    rules = webhook_rules()
    assert all(rule["apiVersions"] != ["*"] for rule in rules)
    kubeflow = [r["apiVersions"] for r in rules if r["apiGroups"] == ["kubeflow.org"]]
    assert sorted(kubeflow) == [["v1"], ["v2beta1"]]
    assert next(r for r in rules if r["apiVersions"] == ["v2beta1"])["resources"] == ["mpijobs"]


# --- escapes and silent skips ------------------------------------------------------------------


def test_empty_queue_name_is_replaced_with_the_teams_queue() -> None:
    """Defect: kueue.x-k8s.io/queue-name: "" passed, and Kueue reads it as no queue."""
    empty = job(metadata={"name": "t", "labels": {"kueue.x-k8s.io/queue-name": ""}})
    outcome = run(empty, {"queue": {"enforcement": "enforce"}})
    patched = apply_patch(empty, outcome.patch)
    assert patched["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "ml-queue"
    assert patched["spec"]["suspend"] is True
    assert any("an empty kueue.x-k8s.io/queue-name" in w for w in outcome.response["response"]["warnings"])


def spark(**driver: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "s"},
        "spec": {"driver": {"cores": 1, **driver}, "executor": {"instances": 2, "cores": 1}},
    }


POD_POLICY = {
    "queue": {},
    "podPriority": {"default": "low", "allowed": ["low"], "enforcement": "enforce"},
    "topology": {"mode": "required", "level": RACK, "enforcement": "enforce"},
    "nodeAffinity": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}],
}


def test_spark_driver_and_executor_fields_are_governed() -> None:
    """Defect: SparkApplication's driver/executor priorityClassName and affinity bypassed the policy;
    Spark without templates skipped topology, affinity and pod priority without a word."""
    denied = run(spark(priorityClassName="high"), POD_POLICY)
    assert not denied.plan.allowed
    assert "PriorityClass 'high' (spec.driver.priorityClassName) is not allowed" in denied.plan.denials[0]
    patched = apply_patch(spark(), run(spark(), POD_POLICY).patch)
    for role in ("driver", "executor"):
        assert patched["spec"][role]["priorityClassName"] == "low"
        assert patched["spec"][role]["annotations"] == {REQUIRED: RACK}
        terms = patched["spec"][role]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [{"matchExpressions": [POD_POLICY["nodeAffinity"][0]]}]


def trainjob() -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }


def test_trainjob_says_which_rules_it_cannot_take() -> None:
    """Defect: TrainJob skipped topology, affinity and pod priority without a word, even under enforce
    (without its runtime, its pods are unknown: tests/test_trainjob.py plans it with one)."""
    denied = run(trainjob(), POD_POLICY)
    assert not denied.plan.allowed
    assert denied.plan.denied_rules == ["podPriority", "topology"]
    assert (
        "not applied: TrainJob's pods come from its runtime: ClusterTrainingRuntime 'torch-distributed' is not known"
        in (denied.plan.denials[0])
    )
    warned = run(trainjob(), {**POD_POLICY, "podPriority": {"enforcement": "warn"}, "topology": {"mode": "auto"}})
    assert warned.plan.allowed
    assert warned.plan.warned_rules == ["podPriority", "topology", "nodeAffinity"]
    assert {"op": "add", "path": "/spec/suspend", "value": True} in warned.patch


def test_unconstrained_mode_leaves_podset_groups_alone() -> None:
    """Defect: mode unconstrained wrote its annotation next to a podset-group-name, which Kueue rejects."""
    grouped = lws(True)
    for key in ("leaderTemplate", "workerTemplate"):
        grouped["spec"]["leaderWorkerTemplate"][key]["metadata"] = {
            "annotations": {"kueue.x-k8s.io/podset-group-name": "g"}
        }
    outcome = run(grouped, {"queue": {}, "topology": {"mode": "unconstrained"}})
    assert not any(UNCONSTRAINED in op["path"] for op in outcome.patch)
    alone = run(lws(True), {"queue": {}, "topology": {"mode": "unconstrained"}})
    assert sum(UNCONSTRAINED in str(op["value"]) for op in alone.patch) == 2


def test_a_pod_priority_picked_on_one_podset_goes_to_the_others() -> None:
    """Defect: when a user picked a pod priority on one podset, the others got the team default."""
    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"template": gpu_template(priorityClassName="high")},
                "Worker": {"replicas": 2, "template": gpu_template()},
            }
        },
    }
    policy = {"queue": {}, "podPriority": {"default": "low", "allowed": ["low", "high"]}}
    patched = apply_patch(pytorch, run(pytorch, policy).patch)
    assert patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] == "high"


def test_without_a_pod_priority_rule_pods_are_held_to_the_kueue_priorities() -> None:
    """Defect: a team with no podPriority rule could take the cluster's highest PriorityClass silently."""
    greedy = job()
    greedy["spec"]["template"]["spec"]["priorityClassName"] = "system-cluster-critical"
    policy = {"queue": {}, "kueuePriority": {"default": "low", "allowed": ["low"], "enforcement": "enforce"}}
    outcome = run(greedy, policy)
    assert not outcome.plan.allowed
    assert "PriorityClass 'system-cluster-critical' (spec.template.spec.priorityClassName)" in outcome.plan.denials[0]


def test_an_empty_node_selector_term_is_not_widened() -> None:
    """Defect: an empty nodeSelectorTerm (matches nothing) was widened into the team's nodes."""
    narrow = job()
    terms = [{}, {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
    narrow["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": copy.deepcopy(terms)}}
    }
    patched = apply_patch(narrow, run(narrow, POD_POLICY).patch)
    result = patched["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert result["nodeSelectorTerms"][0] == {}
    assert result["nodeSelectorTerms"][1]["matchExpressions"][1] == POD_POLICY["nodeAffinity"][0]


@pytest.mark.parametrize("kind", ["Job", "JobSet"])
def test_view_podset_paths_point_at_templates(kind: str) -> None:
    obj = (
        job()
        if kind == "Job"
        else {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "j"},
            "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": gpu_template()}}}]},
        }
    )
    row = find_kind(obj["apiVersion"], obj["kind"])
    assert row is not None
    for podset in kueue_view(obj, row).podsets:
        node: Any = obj
        for key in podset.path:
            node = node[key]
        assert node is podset.base


# --- never silently stranded -------------------------------------------------------------------


def test_a_required_level_no_domain_can_hold_is_refused_with_the_numbers() -> None:
    """Defect: a 3-pod Job at required layer-3 when every rack holds 2 nodes was admitted silently."""
    three = job(spec={"parallelism": 3, "template": gpu_template()})
    enforce = {"queue": {}, "topology": {"mode": "required", "level": RACK, "enforcement": "enforce"}}
    outcome = run(three, enforce, inventory=aws_nodes())
    assert outcome.plan.denials == [
        "topology: podset 'main' can never be admitted: all its pods (3 pods of {nvidia.com/gpu: 8}) must fit in "
        f"one {RACK} domain, and the largest holds 2 such pods on an empty cluster"
    ]
    warned = run(
        three, {**enforce, "topology": {**enforce["topology"], "enforcement": "default"}}, inventory=aws_nodes()
    )
    assert warned.plan.allowed and warned.plan.warned_rules == ["topology"]
    # The user's own required annotation is judged the same way.
    own = job(spec={"parallelism": 3, "template": {**gpu_template(), "metadata": {"annotations": {REQUIRED: RACK}}}})
    assert run(own, {"queue": {}, "topology": {"mode": "auto"}}, inventory=aws_nodes()).plan.warned_rules == [
        "topology"
    ]
    assert run(job(), enforce, inventory=aws_nodes()).plan.allowed  # 2 pods fit a rack


def test_a_workload_above_the_teams_quota_ceiling_is_refused_with_the_numbers() -> None:
    big = job(spec={"parallelism": 9, "template": gpu_template()})
    outcome = run(big, {"queue": {}})
    assert outcome.plan.denials == [
        "queue: the workload can never be admitted: it needs 72 nvidia.com/gpu ('main' 9 × 8), more than team "
        "'ml''s nominalQuota + borrowingLimit of 64"
    ]
    assert run(job(spec={"parallelism": 8, "template": gpu_template()}), {"queue": {}}).plan.allowed


def test_a_podset_larger_than_all_the_teams_nodes_is_warned_even_when_preferred() -> None:
    nine = job(spec={"parallelism": 9, "template": gpu_template()})
    policy = {"queue": {"enforcement": "warn"}, "topology": {"mode": "auto"}}
    outcome = run(nine, policy, inventory=aws_nodes())
    topology = [w for w in outcome.plan.warnings if w.startswith("topology:")]
    assert topology == [
        "topology: podset 'main' can never be admitted: its 9 pods of {nvidia.com/gpu: 8} fit on no set of the "
        "team's nodes (they hold 8 such pods on an empty cluster)"
    ]
    assert not [w for w in run(job(), policy, inventory=aws_nodes()).plan.warnings if w.startswith("topology:")]


def test_podsets_that_fit_alone_but_not_together_are_warned() -> None:
    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 4, "template": gpu_template(8)},
                "Worker": {"replicas": 10, "template": gpu_template(3)},
            }
        },
    }
    # 4 hosts for the masters; 3-GPU workers go 2 per host: 10 need 5 more hosts, and there are 8.
    policy = {"queue": {"enforcement": "warn"}, "topology": {"mode": "auto"}}
    outcome = run(pytorch, policy, inventory=aws_nodes())
    assert outcome.plan.warnings == [
        "topology: the workload may never be admitted: its 14 pods ('master' 4 × {nvidia.com/gpu: 8}, "
        "'worker' 10 × {nvidia.com/gpu: 3}) do not fit the team's 8 nodes together on an empty cluster (2 left over)"
    ]
    pytorch["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 8
    assert not run(pytorch, policy, inventory=aws_nodes()).plan.warnings


def test_kinds_whose_workloads_belong_to_what_they_create() -> None:
    """`kgov why` follows ownerReferences down from these rows: Kueue's pod integration (a
    Deployment's or ReplicaSet's pods one by one, a StatefulSet's and an LWS group's pods as a pod
    group) and its CronJob support (one Workload per Job)."""
    below = sorted(row.kind for row in KINDS if row.workloads_below)
    assert below == ["CronJob", "Deployment", "LeaderWorkerSet", "ReplicaSet", "StatefulSet"]


def test_a_quantity_checked_once_for_one_resource_is_checked_again_for_another() -> None:
    """``500m`` is a CPU request but no GPU count: the check of a quantity string kept for one
    resource name must not let it through for another, read again or in any order."""
    spec: dict[str, Any] = {"containers": [{"name": "a", "resources": {"requests": {"cpu": "500m"}}}]}
    gpu: dict[str, Any] = {"containers": [{"name": "a", "resources": {"requests": {"nvidia.com/gpu": "500m"}}}]}
    for _ in range(2):
        problems: list[Any] = []
        assert pod_requests(spec, problems, ("spec",)) == {"cpu": Decimal("0.5")}
        assert problems == []
        assert pod_requests(gpu, problems, ("spec",)) == {}
        assert [(p.path, p.found) for p in problems] == [
            (("spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"), "500m")
        ]
    assert pod_requests(spec, None, ("spec",)) == {"cpu": Decimal("0.5")}
