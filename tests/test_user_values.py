"""A user's own values that Kueue or the API server can never act on are said so (SPEC §3,
never silently stranded), and the messages about them read well."""

from __future__ import annotations

import copy
from typing import Any

from support import aws_nodes, job, platform_with, review_body, teams_from

from webhook.core.admission.review import review
from webhook.core.plan.patch import apply_patch
from webhook.core.platform.resolve import TeamIndex

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"


def run(obj: dict[str, Any], policy: dict[str, Any], old: dict[str, Any] | None = None, inventory: Any = None) -> Any:
    operation = "CREATE" if old is None else "UPDATE"
    body = review_body(obj, "ml", operation=operation, old=old)
    return review(body, teams_from(platform_with(policy)), inventory=inventory)


def job_with_annotations(annotations: dict[str, str]) -> dict[str, Any]:
    obj = job()
    obj["spec"]["template"]["metadata"] = {"annotations": annotations}
    return obj


def test_a_topology_level_the_flavor_lacks_is_warned_under_default() -> None:
    """Defect: under topology enforcement ``default`` a user's required level that is not a level
    of the flavor's Topology passed silently; Kueue can never admit such a workload."""
    policy = {"topology": {"mode": "auto", "enforcement": "default"}}
    outcome = run(job_with_annotations({REQUIRED: "cloud.google.com/gke-nodepool"}), policy)
    assert outcome.plan.allowed
    assert outcome.plan.warnings == [
        "topology: kueue.x-k8s.io/podset-required-topology 'cloud.google.com/gke-nodepool' (podset 'main') "
        "is not a level of Topology 'aws' for team 'ml'; allowed: topology.k8s.aws/network-node-layer-1, "
        "topology.k8s.aws/network-node-layer-2, topology.k8s.aws/network-node-layer-3, kubernetes.io/hostname; "
        "Kueue can never admit the workload"
    ]


def test_a_slice_level_the_flavor_lacks_is_warned_under_default_and_refused_under_enforce() -> None:
    annotations = {
        REQUIRED: "topology.k8s.aws/network-node-layer-1",
        SLICE_REQUIRED: "rack",
        "kueue.x-k8s.io/podset-slice-size": "1",
    }
    warned = run(job_with_annotations(annotations), {"topology": {"mode": "auto", "enforcement": "default"}})
    assert warned.plan.allowed
    assert [w.split(" (")[0] for w in warned.plan.warnings] == [
        "topology: kueue.x-k8s.io/podset-slice-required-topology 'rack'"
    ]
    denied = run(
        job_with_annotations(annotations),
        {"topology": {"mode": "preferred", "level": "kubernetes.io/hostname", "enforcement": "enforce"}},
    )
    assert not denied.plan.allowed
    assert [d.split(" (")[0] for d in denied.plan.denials] == [
        "topology: kueue.x-k8s.io/podset-slice-required-topology 'rack'"
    ]


def test_known_levels_under_default_stay_quiet() -> None:
    policy = {"topology": {"mode": "auto", "enforcement": "default"}}
    outcome = run(job_with_annotations({REQUIRED: "kubernetes.io/hostname"}), policy)
    assert outcome.plan.allowed and outcome.plan.warnings == [] and outcome.plan.denials == []


def test_an_update_that_empties_the_queue_label_gets_the_stored_one_back() -> None:
    """Defect: CREATE with an empty queue label got the team's queue with a warning, but an UPDATE
    that emptied the stored label was refused with "LocalQueue '' … is not allowed"."""
    policy = {"queue": {"enforcement": "enforce"}}
    stored = apply_patch(job(), run(job(), policy).patch)
    assert stored["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "ml-queue"
    emptied = copy.deepcopy(stored)
    emptied["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = ""
    outcome = run(emptied, policy, old=stored)
    assert outcome.plan.allowed
    assert outcome.plan.warnings == [
        "queue: an empty kueue.x-k8s.io/queue-name (metadata.labels.kueue.x-k8s.io/queue-name) means no queue "
        "to Kueue; kept 'ml-queue'"
    ]
    assert apply_patch(emptied, outcome.patch) == stored


def test_the_kueue_priority_does_not_follow_a_pod_priority_with_no_priority_class() -> None:
    """Defect: in a team without a podPriority rule, a pod priorityClassName naming a platform
    priority without ``podPriorityClass`` (no PriorityClass exists) was accepted and the Kueue
    priority label followed it."""
    platform = platform_with({"kueuePriority": {"default": "low", "allowed": ["low", "batch"], "enforcement": "warn"}})
    platform["priorities"].append({"name": "batch", "value": 50})
    obj = job()
    obj["spec"]["template"]["spec"]["priorityClassName"] = "batch"
    outcome = review(review_body(obj, "ml"), teams_from(platform))
    assert outcome.plan.allowed
    assert apply_patch(obj, outcome.patch)["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "low"
    assert outcome.plan.warnings == [
        "kueuePriority: the pods' priorityClassName 'batch' is not a PriorityClass team 'ml''s policy lets its "
        "pods use, so the Kueue priority does not follow it (the API server refuses pods whose PriorityClass "
        "does not exist); set kueue.x-k8s.io/priority-class to choose one",
        # 'batch' has a WorkloadPriorityClass only: the pods would not be created.
        "podPriority: PriorityClass 'batch' (spec.template.spec.priorityClassName) is not created by the "
        "platform: 'batch' is a WorkloadPriorityClass only; unless a PriorityClass of that name exists in the "
        "cluster, the pods will not be created (PriorityClasses team 'ml' may use: low)",
    ]


def test_the_kueue_priority_follows_a_pod_priority_the_pod_priority_rule_allows() -> None:
    policy = {
        "kueuePriority": {"default": "high", "allowed": ["low", "high"], "enforcement": "enforce"},
        "podPriority": {"default": "high", "allowed": ["low", "high"], "enforcement": "enforce"},
    }
    obj = job()
    obj["spec"]["template"]["spec"]["priorityClassName"] = "low"
    outcome = run(obj, policy)
    assert outcome.plan.warnings == []
    assert apply_patch(obj, outcome.patch)["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "low"


def test_a_stranded_pod_without_requests_reads_well() -> None:
    """Defect: the message said "its 1 pods of {}" for one pod with no resource requests."""
    lone = job()
    lone["spec"]["parallelism"] = 1
    pod = lone["spec"]["template"]["spec"]
    pod["containers"][0].pop("resources")
    pod["nodeSelector"] = {"node.kubernetes.io/instance-type": "trn1.32xlarge"}
    outcome = run(lone, {"topology": {"mode": "auto", "enforcement": "default"}}, inventory=aws_nodes())
    assert outcome.plan.warnings == [
        "topology: podset 'main' can never be admitted: its 1 pod with no resource requests fits on no set of "
        "the team's nodes (they hold 0 such pods on an empty cluster)",
        "topology: podset 'main' may never be admitted: its pods request none of the resources team 'ml''s "
        "topology-aware ClusterQueue covers (nvidia.com/gpu), so Kueue assigns it no flavor and cannot place it "
        'by topology ("no TAS flavor assigned") unless a LimitRange of the namespace gives them default '
        "requests; request at least one of them",
    ]


def test_a_podset_requesting_nothing_the_tas_cluster_queue_covers_is_warned() -> None:
    """Defect: a Job whose pods request no resource the team's topology-aware ClusterQueue covers
    was labelled silently; Kueue gives its podset no flavor and never admits it ("no TAS flavor
    assigned", tas_flavorassigner.go). Checked against the real Kueue in e2e/test_kueue_view.py."""
    bare = job()
    bare["spec"]["template"]["spec"]["containers"][0].pop("resources")
    outcome = run(bare, {"topology": {"mode": "auto", "enforcement": "enforce"}}, inventory=aws_nodes())
    assert outcome.plan.allowed  # a LimitRange may still give the pods requests: warned, not refused
    assert [w.split(":")[0] + ":" + w.split(":")[1] for w in outcome.plan.warnings] == [
        "topology: podset 'main' may never be admitted"
    ]
    assert "(nvidia.com/gpu)" in outcome.plan.warnings[0]
    # Covering `pods` gives every podset a flavor: nothing to say.
    counted = platform_with({"topology": {"mode": "auto", "enforcement": "enforce"}})
    counted["teams"][0]["quotas"][0]["resources"]["pods"] = {"nominalQuota": 100}
    body = review_body(bare, "ml")
    assert review(body, teams_from(counted), inventory=aws_nodes()).plan.warnings == []
    # Without topology the podset needs no flavor: Kueue admits it.
    assert run(bare, {}, inventory=aws_nodes()).plan.warnings == []


def test_a_resource_the_cluster_queue_does_not_cover_is_warned() -> None:
    """Defect: pods requesting a resource the team's ClusterQueue does not cover were labelled
    silently; Kueue answers "resource cpu unavailable in ClusterQueue" and never admits them."""
    obj = job()
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "4"
    outcome = run(obj, {})
    assert outcome.plan.allowed
    assert outcome.plan.warnings == [
        "queue: podset 'main' may never be admitted: it requests cpu, which team 'ml''s ClusterQueue does not "
        "cover (it covers nvidia.com/gpu); Kueue admits it only if its Configuration excludes that resource "
        "(resources.excludeResourcePrefixes)"
    ]
    # A workload sent to another allowed LocalQueue goes to another ClusterQueue: not judged.
    other = copy.deepcopy(obj)
    other["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "shared"}
    policy = {"queue": {"allowed": ["shared"], "enforcement": "enforce"}}
    assert run(other, policy).plan.warnings == []
    # A policy compiled before the covered resources were recorded says nothing.
    policies = teams_from(platform_with({})).policies
    legacy = policies.model_copy(
        update={"teams": [team.model_copy(update={"coveredResources": None}) for team in policies.teams]}
    )
    assert review(review_body(obj, "ml"), TeamIndex(legacy)).plan.warnings == []


def test_spark_roles_under_auto_give_the_true_reason() -> None:
    """Defect: a SparkApplication's driver and executor were called "one member of a pod group";
    they are not: Spark builds their pods from its own fields, so their size is not judged."""
    spark = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "s"},
        "spec": {"driver": {"cores": 1}, "executor": {"instances": 2, "cores": 1}},
    }
    outcome = run(spark, {"topology": {"mode": "auto"}}, inventory=aws_nodes())
    reasons = {c.reason for c in outcome.plan.changes if c.rule == "topology"}
    assert reasons == {
        f"podset {name!r}: auto: the operator builds these pods from the object's own fields (such as Spark's "
        "cores and instances), so their size is not judged; preferred"
        for name in ("driver", "executor")
    }
