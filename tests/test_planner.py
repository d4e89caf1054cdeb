"""The admission path (parse → resolve → plan → patch) on hand-made workloads, one rule at a time."""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import replace
from typing import Any

import pytest
from support import aws_nodes, job, platform_with, review_body, teams_from

from webhook.core.admission.review import review
from webhook.core.plan.patch import apply_patch

FULL_POLICY = {
    "queue": {"enforcement": "enforce"},
    "kueuePriority": {"default": "low", "allowed": ["low"], "enforcement": "enforce"},
    "podPriority": {"default": "low", "allowed": ["low"], "enforcement": "enforce"},
    "topology": {"mode": "required", "level": "topology.k8s.aws/network-node-layer-3"},
    "nodeAffinity": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}],
}
AFFINITY_EXPR = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}


def run(obj: dict[str, Any], policy: dict[str, Any] | None = None, namespace: str = "ml", **kw: Any) -> Any:
    teams = teams_from(platform_with(policy if policy is not None else FULL_POLICY))
    inventory = kw.pop("inventory", None)
    return review(review_body(obj, namespace, **kw), teams, inventory=inventory)


def ops(outcome: Any) -> list[dict[str, Any]]:
    return outcome.patch


def test_unlabelled_job_gets_every_rule_as_whole_maps() -> None:
    outcome = run(job())
    assert ops(outcome) == [
        {"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "ml-queue"}},
        {"op": "add", "path": "/spec/suspend", "value": True},
        {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1priority-class", "value": "low"},
        {"op": "add", "path": "/spec/template/spec/priorityClassName", "value": "low"},
        {
            "op": "add",
            "path": "/spec/template/spec/affinity",
            "value": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [AFFINITY_EXPR]}]
                    }
                }
            },
        },
        {
            "op": "add",
            "path": "/spec/template/metadata",
            "value": {
                "annotations": {"kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-3"}
            },
        },
    ]
    response = outcome.response["response"]
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == ops(outcome)


def test_existing_maps_get_keys_added_never_replaced() -> None:
    obj = job(metadata={"name": "t", "labels": {"app": "x"}})
    obj["spec"]["template"]["metadata"] = {"annotations": {"team/owner": "ann"}, "labels": {"a": "b"}}
    paths = {op["path"]: op["op"] for op in ops(run(obj))}
    assert paths["/metadata/labels/kueue.x-k8s.io~1queue-name"] == "add"
    assert paths["/spec/template/metadata/annotations/kueue.x-k8s.io~1podset-required-topology"] == "add"
    assert "/metadata/labels" not in paths
    assert "/spec/template/metadata" not in paths


def test_rfc6901_escapes_tilde_before_slash() -> None:
    """A replica key holding ``~`` and ``/`` gets ``~0`` and ``~1`` (``~`` first), and the patch
    lands on that very key: escaping only ``/`` turns ``W~1`` into ``W/``, a key that is not there."""
    template = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "t", "labels": {"weird~key/x": "1"}},
        "spec": {
            "pytorchReplicaSpecs": {
                "W~1": {"replicas": 1, "template": copy.deepcopy(template)},
                "Master/0": {"replicas": 1, "template": copy.deepcopy(template)},
            }
        },
    }
    policy = {"queue": {}, "podPriority": {"default": "low", "allowed": ["low"]}, "nodeAffinity": []}
    patch = ops(run(obj, policy))
    assert [op["path"] for op in patch] == [
        "/metadata/labels/kueue.x-k8s.io~1queue-name",
        "/spec/runPolicy",
        "/spec/pytorchReplicaSpecs/W~01/template/spec/priorityClassName",
        "/spec/pytorchReplicaSpecs/Master~10/template/spec/priorityClassName",
    ]
    patched = apply_patch(obj, patch)
    assert patched["metadata"]["labels"] == {"weird~key/x": "1", "kueue.x-k8s.io/queue-name": "ml-queue"}
    specs = patched["spec"]["pytorchReplicaSpecs"]
    assert sorted(specs) == ["Master/0", "W~1"]
    for key in ("W~1", "Master/0"):
        assert specs[key]["template"]["spec"]["priorityClassName"] == "low", key


def test_suspend_false_is_set_true_only_when_we_add_the_queue_label() -> None:
    obj = job()
    obj["spec"]["suspend"] = False
    assert {"op": "replace", "path": "/spec/suspend", "value": True} in ops(run(obj, {"queue": {}}))
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "ml-queue"}
    assert ops(run(obj, {"queue": {}})) == []


@pytest.mark.parametrize(
    ("enforcement", "allowed", "warnings"),
    [("enforce", False, 0), ("warn", True, 1), ("default", True, 0)],
)
def test_queue_of_another_team(enforcement: str, allowed: bool, warnings: int) -> None:
    obj = job(metadata={"name": "t", "labels": {"kueue.x-k8s.io/queue-name": "other-team-queue"}})
    outcome = run(obj, {"queue": {"enforcement": enforcement}})
    assert outcome.plan.allowed is allowed
    assert len(outcome.plan.warnings) == warnings
    if not allowed:
        status = outcome.response["response"]["status"]
        assert status["code"] == 403
        assert status["message"] == (
            "kueue-governor: queue: LocalQueue 'other-team-queue' "
            "(metadata.labels.kueue.x-k8s.io/queue-name) is not allowed for team 'ml'; allowed: ml-queue; "
            "unless a LocalQueue of that name exists in this namespace, Kueue never admits the workload "
            "(it stays suspended); use the team's LocalQueue 'ml-queue'"
        )
        assert "patch" not in outcome.response["response"]
    if warnings:
        assert outcome.response["response"]["warnings"][0].startswith("kueue-governor: queue: LocalQueue")


def test_priority_outside_allowed_set_is_denied_with_allowed_values() -> None:
    obj = job(metadata={"name": "t", "labels": {"kueue.x-k8s.io/priority-class": "high"}})
    outcome = run(obj)
    assert not outcome.plan.allowed
    assert "kueuePriority: WorkloadPriorityClass 'high'" in outcome.plan.denials[0]
    assert outcome.plan.denials[0].endswith("allowed: low")


def test_pod_priority_class_checked_in_every_template() -> None:
    obj = job()
    obj["spec"]["template"]["spec"]["priorityClassName"] = "high"
    outcome = run(obj)
    assert outcome.plan.denials == [
        "podPriority: PriorityClass 'high' (spec.template.spec.priorityClassName) is not allowed "
        "for team 'ml'; allowed: low"
    ]


def test_bare_pod_with_spec_priority_gets_no_priority_class() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"priority": 5, "containers": [{"name": "c", "image": "busybox"}]},
    }
    paths = [op["path"] for op in ops(run(pod))]
    assert "/spec/priorityClassName" not in paths
    assert "/metadata/labels" in paths  # a Pod carries the queue label itself
    assert "/spec/suspend" not in paths  # Pods have no suspend field: Kueue gates them


@pytest.mark.parametrize(
    "annotation",
    [
        "kueue.x-k8s.io/podset-required-topology",
        "kueue.x-k8s.io/podset-preferred-topology",
        "kueue.x-k8s.io/podset-slice-required-topology",
    ],
)
def test_user_tas_annotation_means_none_added(annotation: str) -> None:
    obj = job()
    obj["spec"]["template"]["metadata"] = {"annotations": {annotation: "kubernetes.io/hostname"}}
    outcome = run(obj)
    assert not [op for op in ops(outcome) if "topology" in op["path"]]
    assert outcome.plan.allowed


def test_unconstrained_annotation_counts_as_a_user_tas_annotation() -> None:
    obj = job()
    obj["spec"]["template"]["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-unconstrained-topology": "true"}}
    assert not [op for op in ops(run(obj)) if "topology" in op["path"]]


@pytest.mark.parametrize(("enforcement", "allowed", "warned"), [("enforce", False, False), ("warn", True, True)])
def test_user_tas_level_outside_the_topology(enforcement: str, allowed: bool, warned: bool) -> None:
    policy = {**FULL_POLICY, "topology": {**FULL_POLICY["topology"], "enforcement": enforcement}}
    obj = job()
    obj["spec"]["template"]["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": "rack"}}
    outcome = run(obj, policy)
    assert outcome.plan.allowed is allowed
    assert bool(outcome.plan.warnings) is warned
    message = (outcome.plan.denials or outcome.plan.warnings)[0]
    assert "'rack' (podset 'main') is not a level of Topology 'aws'" in message


def test_node_affinity_is_anded_into_every_term_without_duplicates() -> None:
    obj = job()
    other = {"key": "zone", "operator": "In", "values": ["a"]}
    obj["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [other]},
                    {"matchExpressions": [dict(AFFINITY_EXPR)]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                ]
            }
        },
        "podAffinity": {"x": 1},
    }
    outcome = run(obj)
    patched = apply_patch(obj, ops(outcome))
    terms = patched["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"] == [other, AFFINITY_EXPR]
    assert terms[1]["matchExpressions"] == [AFFINITY_EXPR]
    assert terms[2]["matchExpressions"] == [AFFINITY_EXPR]
    assert terms[2]["matchFields"][0]["key"] == "metadata.name"
    assert patched["spec"]["template"]["spec"]["affinity"]["podAffinity"] == {"x": 1}


def test_empty_node_selector_terms_get_one_term_appended_not_replaced() -> None:
    """Regression (found by the property test): [] was replaced, which rewrote a user field."""
    obj = job()
    obj["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
    }
    affinity_ops = [op for op in ops(run(obj)) if "affinity" in op["path"]]
    assert affinity_ops == [
        {
            "op": "add",
            "path": "/spec/template/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
            "/nodeSelectorTerms/0",
            "value": {"matchExpressions": [AFFINITY_EXPR]},
        }
    ]
    obj["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": {"not": "a list"}
    }
    assert run(obj).plan.denials == [
        "malformed object: spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms must be an array, got object"
    ]


def test_affinity_without_node_affinity_gets_it_added_beside() -> None:
    obj = job()
    obj["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {"y": 2}}
    affinity_ops = [op for op in ops(run(obj)) if "affinity" in op["path"]]
    assert affinity_ops == [
        {
            "op": "add",
            "path": "/spec/template/spec/affinity/nodeAffinity",
            "value": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [AFFINITY_EXPR]}]
                }
            },
        }
    ]


def test_child_of_a_managed_owner_is_untouched_but_a_cronjob_child_is_not() -> None:
    owned = job(
        metadata={
            "name": "js-workers-0",
            "ownerReferences": [
                {
                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "kind": "JobSet",
                    "name": "js",
                    "uid": "1",
                    "controller": True,
                }
            ],
        }
    )
    outcome = run(owned)
    assert ops(outcome) == [] and "controlled by JobSet 'js'" in outcome.plan.skipped
    cron_child = copy.deepcopy(owned)
    cron_child["metadata"]["ownerReferences"][0].update(apiVersion="batch/v1", kind="CronJob", name="nightly")
    assert ops(run(cron_child))[0]["path"] == "/metadata/labels"
    pod_of_replicaset = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-abc",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": True}],
        },
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }
    # Kueue admits a ReplicaSet's pods one by one as Pods: they are no children, and a Pod that
    # names a ReplicaSet as its owner (regression: to carry another team's priority) gets the policy.
    planned = run(pod_of_replicaset)
    assert planned.patch[0]["path"] == "/metadata/labels"
    pod_of_replicaset["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": "high"}
    assert not run(pod_of_replicaset).plan.allowed
    pod_of_job = copy.deepcopy(pod_of_replicaset)
    pod_of_job["metadata"]["ownerReferences"][0].update(apiVersion="batch/v1", kind="Job", name="train")
    assert ops(run(pod_of_job)) == []


def test_rayjob_on_an_existing_cluster_is_left_alone() -> None:
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "r"},
        "spec": {"entrypoint": "python x.py", "clusterSelector": {"ray.io/cluster": "shared"}},
    }
    outcome = run(rayjob)
    assert ops(outcome) == [] and "clusterSelector" in outcome.plan.skipped


def test_cronjob_policy_goes_into_the_job_template() -> None:
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": job()["spec"]}},
    }
    paths = [op["path"] for op in ops(run(cron))]
    assert paths[:2] == ["/spec/jobTemplate/metadata", "/spec/jobTemplate/spec/suspend"]
    assert "/spec/jobTemplate/spec/template/spec/priorityClassName" in paths
    assert "/metadata/labels" not in paths


def test_appwrapper_components_are_planned_by_their_own_rows() -> None:
    wrapper = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "aw"},
        "spec": {"components": [{"template": {"apiVersion": "batch/v1", "kind": "Job", "spec": job()["spec"]}}]},
    }
    paths = [op["path"] for op in ops(run(wrapper))]
    assert paths[:2] == ["/metadata/labels", "/spec/suspend"]
    assert "/spec/components/0/template/spec/template/spec/priorityClassName" in paths
    assert "/spec/components/0/template/spec/template/metadata" in paths
    assert "/spec/components/0/template/metadata" not in paths  # the inner Job gets no queue label


def test_update_mutates_nothing_and_validates_a_changed_queue_label() -> None:
    old = job(metadata={"name": "t", "labels": {"kueue.x-k8s.io/queue-name": "ml-queue"}})
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "stolen-queue"
    denied = run(new, operation="UPDATE", old=old)
    assert not denied.plan.allowed and "'stolen-queue'" in denied.plan.denials[0]
    unchanged = copy.deepcopy(new)
    grandfathered = run(unchanged, operation="UPDATE", old=copy.deepcopy(new))
    assert grandfathered.plan.allowed and grandfathered.patch == []
    bare = job()
    assert run(bare, operation="UPDATE", old=copy.deepcopy(bare)).patch == []


def test_delete_and_subresources_pass() -> None:
    body = review_body(job(), "ml", operation="DELETE")
    body["request"]["object"] = None
    body["request"]["oldObject"] = job()
    outcome = review(body, teams_from(platform_with(FULL_POLICY)))
    assert outcome.response["response"] == {"uid": body["request"]["uid"], "allowed": True}
    status = review_body(job(), "ml")
    status["request"]["subResource"] = "status"
    assert review(status, teams_from(platform_with(FULL_POLICY))).patch == []


def test_dry_run_gets_the_same_answer() -> None:
    wet, dry = run(job()), run(job(), dry_run=True)
    assert wet.patch == dry.patch


@pytest.mark.parametrize("namespace", ["kube-system", "kube-node-lease", "kube-public", "unowned", ""])
def test_namespaces_of_no_team_are_untouched(namespace: str) -> None:
    outcome = run(job(), namespace=namespace)
    assert outcome.patch == [] and outcome.response["response"]["allowed"] is True
    assert "patchType" not in outcome.response["response"]


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": {}},
        {"apiVersion": "example.com/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {}},
    ],
)
def test_unknown_and_config_kinds_pass_unchanged(obj: dict[str, Any]) -> None:
    assert run(obj).patch == []


def test_wrongly_typed_field_on_our_path_is_refused_with_its_path() -> None:
    obj = job(metadata={"name": "t", "labels": ["not", "a", "map"]})
    outcome = run(obj)
    assert outcome.plan.denials == ["malformed object: metadata.labels must be an object, got array"]
    assert outcome.response["response"]["status"]["code"] == 422
    assert outcome.plan.denied_rules == ["malformed object"]
    obj = job()
    obj["spec"]["template"]["spec"]["affinity"] = "near"
    assert run(obj).plan.denials == [
        'malformed object: spec.template.spec.affinity must be an object, got string "near"'
    ]


def test_namespace_selected_by_labels_and_conflicts() -> None:
    platform = platform_with(FULL_POLICY, namespaces=[], namespaceSelector={"matchLabels": {"team": "ml"}})
    second = copy.deepcopy(platform["teams"][0])
    second.update(name="ml2", namespaceSelector={"matchExpressions": [{"key": "team", "operator": "Exists"}]})
    teams = teams_from(platform)
    labelled = review(review_body(job(), "research-x"), teams, {"research-x": {"team": "ml"}}.get)
    assert labelled.resolution.team is not None and labelled.resolution.team.team == "ml"
    assert review(review_body(job(), "other"), teams, {"other": {"team": "x"}}.get).patch == []
    platform["teams"].append(second)
    both = review(review_body(job(), "research-x"), teams_from(platform), {"research-x": {"team": "ml"}}.get)
    assert not both.plan.allowed
    assert "selected by teams 'ml', 'ml2'" in both.plan.denials[0]
    assert both.plan.denied_rules == ["namespace"]  # a bounded metrics label, not the message


def test_v1beta1_review_is_answered_in_v1beta1() -> None:
    outcome = run(job(), api_version="admission.k8s.io/v1beta1")
    assert outcome.response["apiVersion"] == "admission.k8s.io/v1beta1"
    assert outcome.response["kind"] == "AdmissionReview"


# -- topology mode auto: inventory of 2 blocks × 2 racks × 2 hosts × 8 GPUs -----------------------
AUTO = {"queue": {}, "topology": {"mode": "auto"}}


def _sliced(level: str, size: int) -> dict[str, str]:
    return {"kueue.x-k8s.io/podset-slice-required-topology": level, "kueue.x-k8s.io/podset-slice-size": str(size)}


@pytest.mark.parametrize(
    ("pods", "key", "level", "slices"),
    [
        (1, "required", "kubernetes.io/hostname", {}),
        (2, "required", "topology.k8s.aws/network-node-layer-3", {}),
        # 3 pods: no slice size divides them into racks (1 rack holds 2).
        (3, "required", "topology.k8s.aws/network-node-layer-2", {}),
        # Larger than a rack: a block, in racks of 2 (a block holds 2 such slices).
        (4, "required", "topology.k8s.aws/network-node-layer-2", _sliced("topology.k8s.aws/network-node-layer-3", 2)),
        (8, "required", "topology.k8s.aws/network-node-layer-1", _sliced("topology.k8s.aws/network-node-layer-2", 4)),
        (9, "preferred", "topology.k8s.aws/network-node-layer-1", {}),
    ],
)
def test_auto_picks_the_lowest_level_whose_domain_holds_the_podset(
    pods: int, key: str, level: str, slices: dict[str, str]
) -> None:
    obj = job()
    obj["spec"]["parallelism"] = pods
    # 9 pods × 8 GPUs exceed the team's 64-GPU quota: warned (queue under warn), still placed.
    outcome = run(obj, {**AUTO, "queue": {"enforcement": "warn"}}, inventory=aws_nodes())
    annotations = apply_patch(obj, outcome.patch)["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {f"kueue.x-k8s.io/podset-{key}-topology": level, **slices}
    # The same choice at preferred strength, and never slices, under autoConstraint: preferred.
    policy = {"queue": {"enforcement": "warn"}, "topology": {"mode": "auto", "autoConstraint": "preferred"}}
    annotations = apply_patch(obj, run(obj, policy, inventory=aws_nodes()).patch)["spec"]["template"]["metadata"]
    assert annotations["annotations"] == {"kueue.x-k8s.io/podset-preferred-topology": level}


def test_auto_without_inventory_prefers_and_never_requires() -> None:
    annotations = apply_patch(job(), run(job(), AUTO).patch)["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"kueue.x-k8s.io/podset-preferred-topology": "kubernetes.io/hostname"}


def test_auto_ignores_nodes_of_another_flavor_and_counts_nodes_not_ready_for_now() -> None:
    inventory = aws_nodes()
    other = {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    inventory.nodes[:2] = [replace(n, labels={**n.labels, **other}) for n in inventory.nodes[:2]]  # rack 1-1
    obj = job()
    obj["spec"]["parallelism"] = 4
    annotations = apply_patch(obj, run(obj, AUTO, inventory=inventory).patch)["spec"]["template"]["metadata"]
    assert annotations["annotations"] == {  # block 2 holds 2 racks of 2; block 1 one rack
        "kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-2",
        **_sliced("topology.k8s.aws/network-node-layer-3", 2),
    }
    obj["spec"]["parallelism"] = 7  # 6 nodes of the flavor in the spine: no longer fits
    annotations = apply_patch(obj, run(obj, AUTO, inventory=inventory).patch)["spec"]["template"]["metadata"]
    assert annotations["annotations"] == {
        "kueue.x-k8s.io/podset-preferred-topology": "topology.k8s.aws/network-node-layer-1"
    }
    # Not Ready is a passing state: the level is chosen from the nodes the cluster holds.
    down = aws_nodes()
    down.nodes[:2] = [replace(n, schedulable=False, ready=False) for n in down.nodes[:2]]
    annotations = apply_patch(obj, run(obj, AUTO, inventory=down).patch)["spec"]["template"]["metadata"]
    assert annotations["annotations"] == {
        "kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-1"
    }


def test_slice_rule_only_when_the_podset_divides_into_whole_slices() -> None:
    policy = {
        "queue": {},
        "topology": {
            "mode": "required",
            "level": "topology.k8s.aws/network-node-layer-2",
            "sliceLevel": "topology.k8s.aws/network-node-layer-3",
            "sliceSize": 2,
        },
    }
    obj = job()
    obj["spec"]["parallelism"] = 4
    annotations = apply_patch(obj, run(obj, policy).patch)["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {
        "kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-2",
        "kueue.x-k8s.io/podset-slice-required-topology": "topology.k8s.aws/network-node-layer-3",
        "kueue.x-k8s.io/podset-slice-size": "2",
    }
    obj["spec"]["parallelism"] = 3
    annotations = apply_patch(obj, run(obj, policy).patch)["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-2"}


# -- groups, updates, enforcement strength, priorities, Kueue's own requirements ------------------
def test_pod_group_member_is_sized_by_the_groups_total_count() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p0",
            "labels": {"kueue.x-k8s.io/pod-group-name": "grp"},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"},
        },
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
    }
    from webhook.core.kueue.kinds import find_kind
    from webhook.core.kueue.view import kueue_view

    row = find_kind("v1", "Pod")
    assert row is not None
    [ref] = kueue_view(pod, row).podsets
    assert (ref.count, ref.partial) == (2, True)
    annotations = apply_patch(pod, run(pod, AUTO, inventory=aws_nodes()).patch)["metadata"]["annotations"]
    # 2 pods of 8 GPUs at most in its role: a rack of 2 hosts; 4 such racks, so required is safe.
    assert annotations["kueue.x-k8s.io/podset-required-topology"] == "topology.k8s.aws/network-node-layer-3"
    assert "kueue.x-k8s.io/podset-preferred-topology" not in annotations
    assert "kueue.x-k8s.io/podset-group-name" not in annotations


def _lws(group: bool) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": 8}}}]}}
    if group:
        template["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-group-name": "g"}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "lws"},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 4,
                "leaderTemplate": copy.deepcopy(template),
                "workerTemplate": copy.deepcopy(template),
            },
        },
    }


def test_lws_counts_one_group_and_a_podset_group_gets_one_level() -> None:
    from webhook.core.kueue.kinds import find_kind
    from webhook.core.kueue.view import kueue_view

    row = find_kind("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    assert row is not None
    assert [(r.name, r.count) for r in kueue_view(_lws(False), row).podsets] == [("leader", 1), ("worker", 3)]
    # Co-placed by auto: the leader (1 pod) and the workers (3) fit one rack of 4 hosts, the
    # level the workers alone get, so they are grouped there.
    coplaced = apply_patch(_lws(False), run(_lws(False), AUTO, inventory=aws_nodes(hosts=4)).patch)
    lwt = coplaced["spec"]["leaderWorkerTemplate"]
    for name in ("leaderTemplate", "workerTemplate"):
        assert lwt[name]["metadata"]["annotations"] == {
            "kueue.x-k8s.io/podset-group-name": "leader-worker",
            "kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-3",
        }
    # 3 hosts a rack: the workers fill one, the group needs a block; placed apart.
    apart = apply_patch(_lws(False), run(_lws(False), AUTO, inventory=aws_nodes(hosts=3)).patch)
    lwt = apart["spec"]["leaderWorkerTemplate"]
    assert lwt["leaderTemplate"]["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname"
    }
    assert lwt["workerTemplate"]["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-3"
    }
    # Grouped: Kueue needs one request for the group; 4 pods fit a rack of 4 hosts.
    grouped = apply_patch(_lws(True), run(_lws(True), AUTO, inventory=aws_nodes(hosts=4)).patch)
    lwt = grouped["spec"]["leaderWorkerTemplate"]
    for name in ("leaderTemplate", "workerTemplate"):
        assert lwt[name]["metadata"]["annotations"] == {
            "kueue.x-k8s.io/podset-group-name": "g",
            "kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-3",
        }


def test_user_topology_on_one_group_member_means_none_added_to_the_group() -> None:
    lws = _lws(True)
    lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["annotations"][
        "kueue.x-k8s.io/podset-required-topology"
    ] = "kubernetes.io/hostname"
    assert not [op for op in run(lws, AUTO).patch if "topology" in op["path"]]


def test_update_that_drops_the_queue_label_gets_it_back() -> None:
    """SPEC §3: a governed value the update drops is put back (``replace`` of the original manifest)."""
    old = job(metadata={"name": "t", "labels": {"kueue.x-k8s.io/queue-name": "ml-queue"}})
    new = job(metadata={"name": "t", "labels": {}})
    outcome = run(new, operation="UPDATE", old=old)
    assert outcome.plan.allowed
    assert outcome.patch == [{"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "ml-queue"}]


def test_update_of_a_changed_pod_template_is_validated() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"kueue.x-k8s.io/queue-name": "ml-queue"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    }
    changed = copy.deepcopy(deployment)
    changed["spec"]["template"]["spec"]["priorityClassName"] = "high"
    outcome = run(changed, operation="UPDATE", old=deployment)
    assert outcome.patch == []
    assert outcome.plan.denials == [
        "podPriority: PriorityClass 'high' (spec.template.spec.priorityClassName) is not allowed for team 'ml'; "
        "allowed: low"
    ]
    # The same forbidden value, unchanged by this UPDATE (e.g. Kueue unsuspending), is left alone.
    assert run(changed, operation="UPDATE", old=copy.deepcopy(changed)).plan.allowed


@pytest.mark.parametrize(
    ("annotations", "allowed"),
    [
        ({"kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-3"}, True),
        ({"kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname"}, True),
        ({"kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-1"}, False),
        ({"kueue.x-k8s.io/podset-preferred-topology": "kubernetes.io/hostname"}, False),
        ({"kueue.x-k8s.io/podset-unconstrained-topology": "true"}, False),
        ({"kueue.x-k8s.io/podset-unconstrained-topology": "banana"}, False),
        ({"kueue.x-k8s.io/podset-required-topology": "rack"}, False),
    ],
)
def test_topology_enforce_refuses_less_locality_than_the_policy(annotations: dict[str, str], allowed: bool) -> None:
    policy = {**FULL_POLICY, "topology": {**FULL_POLICY["topology"], "enforcement": "enforce"}}
    obj = job()
    obj["spec"]["template"]["metadata"] = {"annotations": annotations}
    outcome = run(obj, policy)
    assert outcome.plan.allowed is allowed, outcome.plan.denials
    if not allowed:
        assert len(outcome.plan.denials) == 1, outcome.plan.denials  # one reason, not two
        assert outcome.plan.denials[0].startswith("topology: ")


PRIORITIES = {
    "queue": {},
    "kueuePriority": {"default": "low", "allowed": ["low", "high"]},
    "podPriority": {"default": "low", "allowed": ["low", "high"]},
}


def test_the_users_kueue_priority_drives_the_pod_priority_and_back() -> None:
    obj = job(metadata={"name": "t", "labels": {"kueue.x-k8s.io/priority-class": "high"}})
    patched = apply_patch(obj, run(obj, PRIORITIES).patch)
    assert patched["spec"]["template"]["spec"]["priorityClassName"] == "high"
    obj = job()
    obj["spec"]["template"]["spec"]["priorityClassName"] = "high"
    patched = apply_patch(obj, run(obj, PRIORITIES).patch)
    assert patched["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    patched = apply_patch(job(), run(job(), PRIORITIES).patch)
    assert patched["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "low"
    assert patched["spec"]["template"]["spec"]["priorityClassName"] == "low"


def test_auto_level_caps_where_placement_is_required() -> None:
    capped = {"queue": {}, "topology": {"mode": "auto", "level": "topology.k8s.aws/network-node-layer-3"}}
    obj = job()
    obj["spec"]["parallelism"] = 2  # fits a rack: required there
    annotations = apply_patch(obj, run(obj, capped, inventory=aws_nodes()).patch)["spec"]["template"]["metadata"]
    assert annotations["annotations"] == {
        "kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-3"
    }
    obj["spec"]["parallelism"] = 4  # needs a block, broader than the cap: preferred at the cap
    annotations = apply_patch(obj, run(obj, capped, inventory=aws_nodes()).patch)["spec"]["template"]["metadata"]
    assert annotations["annotations"] == {
        "kueue.x-k8s.io/podset-preferred-topology": "topology.k8s.aws/network-node-layer-3"
    }


def test_rayjob_gets_what_kueue_requires_or_a_clear_denial() -> None:
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "r"},
        "spec": {"entrypoint": "python x.py", "rayClusterSpec": {"headGroupSpec": {"template": {"spec": {}}}}},
    }
    assert {"op": "add", "path": "/spec/shutdownAfterJobFinishes", "value": True} in run(rayjob, {"queue": {}}).patch
    rayjob["spec"]["shutdownAfterJobFinishes"] = False
    outcome = run(rayjob, {"queue": {}})
    assert outcome.plan.denials == [
        "queue: Kueue manages a RayJob only with spec.shutdownAfterJobFinishes: true, got false "
        "(a kueue managed job should delete the cluster after finishing)"
    ]
    rayjob["spec"]["shutdownAfterJobFinishes"] = True
    rayjob["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    denial = run(rayjob, {"queue": {}}).plan.denials[0]
    assert denial.startswith(
        "queue: Kueue refuses a RayJob with spec.rayClusterSpec.enableInTreeAutoscaling: true (a kueue managed job "
        "should only use autoscaling when workload slicing is enabled"
    )
    rayjob["metadata"]["annotations"] = {"kueue.x-k8s.io/elastic-job": "true"}
    assert run(rayjob, {"queue": {}}).plan.allowed


def test_node_affinity_term_that_can_match_no_node_is_warned() -> None:
    obj = job()
    obj["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g5"]}
                        ]
                    }
                ]
            }
        }
    }
    outcome = run(obj)
    assert outcome.plan.allowed
    assert outcome.plan.warnings == [
        "nodeAffinity: podset 'main': nodeSelectorTerms[0] asks for node.kubernetes.io/instance-type in [\"g5\"], "
        'but team nodes have ["p5.48xlarge"]: pods of this term can match no node'
    ]


def test_job_podset_is_min_of_parallelism_and_completions() -> None:
    """Kueue sizes a Job's podset at parallelism, capped by completions."""
    obj = job()
    obj["spec"].update(parallelism=8, completions=2)  # 2 pods: one rack holds them
    annotations = apply_patch(obj, run(obj, AUTO, inventory=aws_nodes()).patch)["spec"]["template"]["metadata"]
    assert annotations["annotations"] == {
        "kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-3"
    }


def test_ray_multi_host_groups_count_every_host() -> None:
    from webhook.core.kueue.kinds import find_kind
    from webhook.core.kueue.view import kueue_view

    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "r"},
        "spec": {
            "headGroupSpec": {"template": {"spec": {}}},
            "workerGroupSpecs": [{"groupName": "tpu", "replicas": 2, "numOfHosts": 3, "template": {"spec": {}}}],
        },
    }
    row = find_kind("ray.io/v1", "RayCluster")
    assert row is not None
    assert [(r.name, r.count) for r in kueue_view(cluster, row).podsets] == [("head", 1), ("tpu", 6)]


def test_bare_replicaset_is_governed_through_its_pod_template() -> None:
    replicaset = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "rs"},
        "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": []}}},
    }
    patched = apply_patch(replicaset, run(replicaset).patch)
    assert patched["spec"]["template"]["metadata"]["labels"] == {
        "app": "x",
        "kueue.x-k8s.io/queue-name": "ml-queue",
        "kueue.x-k8s.io/priority-class": "low",
    }
    owned = copy.deepcopy(replicaset)
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "controller": True}
    ]
    assert run(owned).patch == []


def test_non_ascii_digits_are_not_counts() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "labels": {"kueue.x-k8s.io/pod-group-name": "g"},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": "\u00b2"},
        },
        "spec": {"containers": []},
    }
    # Not counted as 2 (nor a crash of int()): Kueue's strconv.Atoi refuses it, and so do we, by path.
    plan = run(pod, AUTO, inventory=aws_nodes()).plan
    assert plan.invalid
    assert plan.denials == [
        "malformed object: metadata.annotations.kueue.x-k8s.io/pod-group-total-count must be a string holding "
        'a positive integer (e.g. "4"), got string "\u00b2"'
    ]


def test_update_that_strips_governed_fields_from_a_template_gets_them_back() -> None:
    policy = {**FULL_POLICY, "topology": {**FULL_POLICY["topology"], "enforcement": "enforce"}}
    created = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    }
    governed = apply_patch(created, run(created, policy).patch)
    stripped = copy.deepcopy(governed)
    template = stripped["spec"]["template"]
    del template["metadata"]["annotations"]
    del template["spec"]["affinity"]
    del template["spec"]["priorityClassName"]
    del stripped["metadata"]["labels"]
    outcome = run(stripped, policy, operation="UPDATE", old=governed)
    assert outcome.plan.allowed
    # Each value put back is named in a warning (the user removed it and is told it stays).
    assert outcome.plan.warned_rules == ["queue", "kueuePriority", "podPriority", "topology", "nodeAffinity"]
    assert apply_patch(stripped, outcome.patch) == governed
    # A template that never had them (created before the policy) may still change: an image bump.
    bumped = copy.deepcopy(created)
    bumped["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    bare = run(bumped, policy, operation="UPDATE", old=created)
    assert bare.plan.allowed and bare.patch == []


def test_deployment_pods_get_the_kueue_labels_in_their_template() -> None:
    """Kueue copies only the queue label of a Deployment into its pods (which it admits one by
    one), so the priority label goes into the pod template as well."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}},
    }
    patched = apply_patch(deployment, run(deployment).patch)
    assert patched["metadata"]["labels"] == {
        "kueue.x-k8s.io/queue-name": "ml-queue",
        "kueue.x-k8s.io/priority-class": "low",
    }
    assert patched["spec"]["template"]["metadata"]["labels"] == {
        "app": "web",
        "kueue.x-k8s.io/queue-name": "ml-queue",
        "kueue.x-k8s.io/priority-class": "low",
    }
    deployment["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = ["not", "a", "string"]
    # Labels are strings (Kubernetes' map[string]string): malformed, not a value the policy judges.
    assert run(deployment).plan.denials == [
        "malformed object: spec.template.metadata.labels.kueue.x-k8s.io/priority-class must be a string, got array"
    ]


def test_jobset_podset_caps_parallelism_by_completions() -> None:
    from webhook.core.kueue.kinds import find_kind
    from webhook.core.kueue.view import kueue_view

    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [
                {"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 8, "completions": 1, "template": {}}}}
            ]
        },
    }
    row = find_kind("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert row is not None
    assert [(r.name, r.count) for r in kueue_view(jobset, row).podsets] == [("w", 2)]


def test_update_that_adds_a_managed_owner_is_still_validated() -> None:
    """Regression: adding an ownerReference in the same update skipped every check."""
    old = job(metadata={"name": "t", "labels": {"kueue.x-k8s.io/queue-name": "ml-queue"}})
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high"
    new["metadata"]["ownerReferences"] = [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "controller": True}
    ]
    assert not run(new, operation="UPDATE", old=old).plan.allowed
    # A real child, owned before and after, is left to its owner.
    assert run(copy.deepcopy(new), operation="UPDATE", old=copy.deepcopy(new)).plan.allowed


def test_priority_class_name_of_the_wrong_type_is_refused_not_a_crash() -> None:
    """Regression (fuzz): a list as priorityClassName made the planner raise (HTTP 500); it is a
    malformed object, as any value of the wrong type (it was refused as a PriorityClass not allowed)."""
    obj = job()
    obj["spec"]["template"]["spec"]["priorityClassName"] = ["high"]
    outcome = run(obj)
    assert outcome.plan.invalid
    assert outcome.plan.denials == [
        "malformed object: spec.template.spec.priorityClassName must be a string, got array"
    ]


def test_update_adding_a_podset_gets_the_policy_as_on_create() -> None:
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "r", "labels": {"kueue.x-k8s.io/queue-name": "ml-queue"}},
        "spec": {"headGroupSpec": {"template": {"spec": {"priorityClassName": "low"}}}, "workerGroupSpecs": []},
    }
    grown = copy.deepcopy(cluster)
    grown["spec"]["workerGroupSpecs"] = [{"groupName": "b", "replicas": 1, "template": {"spec": {}}}]
    outcome = run(
        grown, {"queue": {}, "podPriority": {"default": "low", "allowed": ["low"]}}, operation="UPDATE", old=cluster
    )
    assert outcome.plan.allowed
    assert outcome.patch == [
        {"op": "add", "path": "/spec/workerGroupSpecs/0/template/spec/priorityClassName", "value": "low"}
    ]
