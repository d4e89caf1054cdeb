"""UPDATE semantics (SPEC §3): never refuse what an update leaves as it was, check what it
introduces or changes, put back what it drops, never add to a pod template the API server freezes."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml
from support import aws_nodes, bundled_teams, job, platform_with, review_body, teams_from

from webhook.core.admission.review import review
from webhook.core.kueue.inventory import NodeInventory
from webhook.core.plan.patch import apply_patch

WIDE = {
    "queue": {"enforcement": "enforce"},
    "kueuePriority": {"default": "high", "allowed": ["low", "high"], "enforcement": "enforce"},
    "podPriority": {"default": "high", "allowed": ["low", "high"], "enforcement": "enforce"},
    "topology": {"mode": "preferred", "level": "topology.k8s.aws/network-node-layer-3", "enforcement": "enforce"},
    "nodeAffinity": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}],
}
NARROW = {
    **WIDE,
    "kueuePriority": {"default": "low", "allowed": ["low"], "enforcement": "enforce"},
    "podPriority": {"default": "low", "allowed": ["low"], "enforcement": "enforce"},
    "topology": {"mode": "required", "level": "kubernetes.io/hostname", "enforcement": "enforce"},
}


def run(obj: dict[str, Any], policy: dict[str, Any], old: dict[str, Any] | None = None) -> Any:
    operation = "CREATE" if old is None else "UPDATE"
    return review(review_body(obj, "ml", operation=operation, old=old), teams_from(platform_with(policy)))


def kueue_starts(stored: dict[str, Any]) -> dict[str, Any]:
    """What Kueue's UPDATE that starts an admitted job changes: unsuspend, node selector, gates."""
    started = copy.deepcopy(stored)
    started["spec"]["suspend"] = False
    pod = started["spec"]["template"]["spec"]
    pod["nodeSelector"] = {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    pod["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
    started["spec"]["template"]["metadata"].setdefault("labels", {})["kueue.x-k8s.io/tas"] = "true"
    return started


def test_kueue_starts_and_suspends_a_job_after_the_policy_was_narrowed() -> None:
    """Defect: after the team's allowed priorities were narrowed, the UPDATE that starts an
    admitted job was denied because its unchanged priorityClassName was no longer allowed."""
    stored = apply_patch(job(), run(job(), WIDE).patch)
    assert stored["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    started = kueue_starts(stored)
    outcome = run(started, NARROW, old=stored)
    assert outcome.plan.allowed and outcome.patch == [] and not outcome.plan.warnings
    # And Kueue suspends it again (eviction, preemption): the reverse update, also untouched.
    evicted = run(stored, NARROW, old=started)
    assert evicted.plan.allowed and evicted.patch == []


def test_objects_from_before_the_webhook_are_left_as_they_are() -> None:
    """Defect: workloads created before the webhook (or before their namespace joined a team)
    had their Kueue UPDATEs refused."""
    bare = job(metadata={"name": "t", "labels": {"kueue.x-k8s.io/queue-name": "ml-queue"}})
    bare["spec"]["suspend"] = True
    bare["spec"]["template"]["metadata"] = {}
    outcome = run(kueue_starts(bare), NARROW, old=bare)
    assert outcome.plan.allowed and outcome.patch == []


def test_a_changed_value_is_checked_as_on_create() -> None:
    stored = apply_patch(job(), run(job(), NARROW).patch)
    raised = copy.deepcopy(stored)
    raised["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high"
    outcome = run(raised, NARROW, old=stored)
    assert outcome.plan.denials == [
        "kueuePriority: WorkloadPriorityClass 'high' (metadata.labels.kueue.x-k8s.io/priority-class) "
        "is not allowed for team 'ml'; allowed: low"
    ]


def test_replace_with_the_original_manifest_gets_every_governed_value_back() -> None:
    """``kubectl replace -f job.yaml`` of the user's manifest on a suspended Job: what the webhook
    added is put back as stored, so the immutable pod template is unchanged and the API server accepts it."""
    original = job()
    stored = apply_patch(original, run(original, WIDE).patch)
    outcome = run(copy.deepcopy(original), NARROW, old=stored)
    assert outcome.plan.allowed and not outcome.plan.denials
    assert apply_patch(original, outcome.patch) == stored
    # Each value put back is named in a warning (rules in the order they are planned).
    assert outcome.plan.warned_rules == ["queue", "kueuePriority", "suspend", "podPriority", "topology", "nodeAffinity"]
    assert "suspend: this update removes spec.suspend; kept true (Kueue has not started it)" in outcome.plan.warnings


def test_a_pod_whose_queue_label_is_removed_is_told_it_was_put_back() -> None:
    """Defect: an UPDATE that removed a governed label was silently undone (``kubectl label``
    printed "unlabeled"); plain Pods carry the labels themselves."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"kueue.x-k8s.io/queue-name": "ml-queue"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    stored = apply_patch(pod, run(pod, WIDE).patch)
    unlabelled = copy.deepcopy(stored)
    del unlabelled["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    outcome = run(unlabelled, WIDE, old=stored)
    assert outcome.patch == [{"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "ml-queue"}]
    assert outcome.plan.warnings == [
        "queue: this update removes metadata.labels.kueue.x-k8s.io/queue-name; kept 'ml-queue' "
        "(an update that leaves out a governed value keeps the stored one)"
    ]


def test_a_started_job_never_gets_new_fields_in_its_pod_template() -> None:
    """The API server refuses any change to a started Job's pod template: on UPDATE nothing the
    stored template did not have is added, whatever the policy now says."""
    stored = job(metadata={"name": "t", "labels": {"kueue.x-k8s.io/queue-name": "ml-queue"}})
    stored["spec"]["suspend"] = False
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"]["team/owner"] = "ann"
    outcome = run(relabelled, NARROW, old=stored)
    assert outcome.plan.allowed
    assert [op for op in outcome.patch if op["path"].startswith("/spec/template")] == []


# -- an UPDATE that resizes a podset, or moves the Kueue priority away from the pods' -----------------
RECORDED = Path(__file__).resolve().parent / "data" / "admission" / "v1-job-update-queue-label.json"
HOSTNAME = "kubernetes.io/hostname"


def recorded_research_job() -> tuple[dict[str, Any], dict[str, Any]]:
    """The recorded kubectl UPDATE envelope of a Job in ``hyperpod-ns-research``, its stored Job
    made the user's ``grow2``: suspended, parallelism 2 of 8 completions, pods of {cpu: 1,
    nvidia.com/gpu: 4} that the policy's ``topology: auto`` required on one host."""
    review = json.loads(RECORDED.read_text())
    stored = review["request"]["oldObject"]
    stored["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "hyperpod-ns-research-localqueue"
    stored["spec"].update({"suspend": True, "parallelism": 2, "completions": 8})
    template = stored["spec"]["template"]
    template["metadata"]["annotations"].pop("kueue.x-k8s.io/podset-required-topology")
    template["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] = HOSTNAME
    template["spec"]["priorityClassName"] = "training-priority"
    template["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "4"},
        "requests": {"cpu": "1", "nvidia.com/gpu": "4"},
    }
    return review, stored


def replay(envelope: dict[str, Any], updated: dict[str, Any]) -> Any:
    envelope["request"]["object"] = updated
    return review(envelope, bundled_teams(), inventory=aws_nodes())


def test_an_update_growing_a_podset_past_its_required_domain_is_warned() -> None:
    """Defect: ``kubectl patch job grow2 -p '{"spec":{"parallelism":4}}'`` on a suspended Job whose
    pods the policy required on one 8-GPU host was accepted silently; Kueue's Workload of 4 × 4 GPUs
    can never be admitted. The resized object is now checked as on CREATE, and warned (not denied)."""
    review, stored = recorded_research_job()
    assert replay(review, copy.deepcopy(stored)).plan.warnings == []  # 2 × 4 GPUs fit one host
    grown = copy.deepcopy(stored)
    grown["spec"]["parallelism"] = 4
    outcome = replay(review, grown)
    assert outcome.plan.allowed and outcome.patch == []
    assert outcome.plan.warnings == [
        "topology: podset 'main' can never be admitted: all its pods (4 pods of {cpu: 1, nvidia.com/gpu: 4}) "
        f"must fit in one {HOSTNAME} domain, and the largest holds 2 such pods on an empty cluster; this "
        "update changes podset 'main' from 2 to 4 pods: set it back, or make the pods fewer or smaller "
        "so that they fit"
    ]


def test_an_update_growing_per_pod_requests_past_every_node_is_warned() -> None:
    """The same fault through the per-pod requests: 2 pods of 8 GPUs no longer fit one host."""
    review, stored = recorded_research_job()
    bigger = copy.deepcopy(stored)
    bigger["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "8"
    bigger["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "8"
    outcome = replay(review, bigger)
    assert outcome.plan.allowed and outcome.patch == []
    assert outcome.plan.warnings == [
        "topology: podset 'main' can never be admitted: all its pods (2 pods of {cpu: 1, nvidia.com/gpu: 8}) "
        f"must fit in one {HOSTNAME} domain, and the largest holds 1 such pods on an empty cluster; this "
        "update changes podset 'main''s per-pod requests from {cpu: 1, nvidia.com/gpu: 4} to "
        "{cpu: 1, nvidia.com/gpu: 8}: set it back, or make the pods fewer or smaller so that they fit"
    ]


def test_an_update_shrinking_a_podset_that_still_fits_is_silent() -> None:
    review, stored = recorded_research_job()
    shrunk = copy.deepcopy(stored)
    shrunk["spec"]["parallelism"] = 1
    outcome = replay(review, shrunk)
    assert outcome.plan.allowed and outcome.patch == [] and outcome.plan.warnings == []


def test_a_kueue_priority_change_that_the_pods_cannot_follow_is_warned() -> None:
    """Defect: ``kubectl label job lim kueue.x-k8s.io/priority-class=experimentation-priority
    --overwrite`` lowered the Workload's priority while the pods kept ``training-priority`` (set on
    CREATE to follow it), with no word. A Job's pod template cannot change priorityClassName (only
    node scheduling directives, and only while suspended), so the difference is warned."""
    review, stored = recorded_research_job()
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "experimentation-priority"
    outcome = replay(review, relabelled)
    assert outcome.plan.allowed and outcome.patch == []
    assert outcome.plan.warnings == [
        "podPriority: podset 'main': its pods keep priorityClassName 'training-priority' while Kueue's "
        "priority is now 'experimentation-priority' (label kueue.x-k8s.io/priority-class); a Job's pod "
        "template cannot change priorityClassName, even suspended; recreate the Job to change both"
    ]


def test_a_refused_kueue_priority_change_is_only_refused() -> None:
    """A priority the team may not use is denied as on CREATE; nothing is said of the pods' class."""
    review, stored = recorded_research_job()
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "inference-priority"
    outcome = replay(review, relabelled)
    assert not outcome.plan.allowed and outcome.plan.warnings == []
    assert len(outcome.plan.denials) == 1 and outcome.plan.denials[0].startswith("kueuePriority: ")


# -- an UPDATE that drops or changes a TAS annotation or a podset group --------------------------------
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GROUP = "kueue.x-k8s.io/podset-group-name"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
#: what follows a group finding on a PyTorchJob, whose Kueue webhook does not check groups
ASSUMED = (
    "; Kueue's TAS assumes this rule, which it does not check for a PyTorchJob: the workload may not be placed as asked"
)
LAYER_3 = "topology.k8s.aws/network-node-layer-3"


def bundled_nodes() -> NodeInventory:
    """``examples/nodes.json``: 16 p5 hosts, 2 blocks of 8, racks of 4."""
    return NodeInventory.from_objects(json.loads((EXAMPLES / "nodes.json").read_text())["items"])


def stored_pytorchjob() -> dict[str, Any]:
    """``examples/pytorchjob.yaml`` (Master 1 + Worker 3 pods of 8 GPUs) as CREATE leaves it in
    ``hyperpod-ns-research`` (topology ``auto``) on the bundled nodes: both grouped as 'master-worker'."""
    manifest = yaml.safe_load((EXAMPLES / "pytorchjob.yaml").read_text())
    created = review(review_body(manifest, "hyperpod-ns-research"), bundled_teams(), inventory=bundled_nodes())
    return apply_patch(manifest, created.patch)


def update_pytorchjob(stored: dict[str, Any], updated: dict[str, Any]) -> Any:
    body = review_body(updated, "hyperpod-ns-research", operation="UPDATE", old=stored)
    return review(body, bundled_teams(), inventory=bundled_nodes())


def test_an_update_dropping_one_podsets_group_name_gets_it_back() -> None:
    """Defect: an UPDATE that left out the Worker's ``podset-group-name`` (the Master keeping it)
    was allowed with no patch and no warning, leaving a group of one podset, which Kueue refuses."""
    stored = stored_pytorchjob()
    specs = stored["spec"]["pytorchReplicaSpecs"]
    for role in ("Master", "Worker"):
        assert specs[role]["template"]["metadata"]["annotations"] == {GROUP: "master-worker", REQUIRED: LAYER_3}
    ungrouped = copy.deepcopy(stored)
    del ungrouped["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][GROUP]
    outcome = update_pytorchjob(stored, ungrouped)
    assert outcome.plan.allowed
    assert outcome.patch == [
        {
            "op": "add",
            "path": "/spec/pytorchReplicaSpecs/Worker/template/metadata/annotations/kueue.x-k8s.io~1podset-group-name",
            "value": "master-worker",
        }
    ]
    assert outcome.plan.warnings == [
        f"topology: this update removes {GROUP} of podset 'worker'; kept 'master-worker' "
        "(an update that leaves out a governed value keeps the stored one)"
    ]
    assert apply_patch(ungrouped, outcome.patch) == stored


def test_an_update_growing_a_groups_one_pod_podset_is_warned_of_kueues_group_rule() -> None:
    """Master 1 → 2 pods in the group 'master-worker': Kueue v0.19.2 refuses a group with no podset
    of 1 pod (``ValidatePodSetGroupingTopology``); the warning says so, not a domain size."""
    stored = stored_pytorchjob()
    grown = copy.deepcopy(stored)
    grown["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    outcome = update_pytorchjob(stored, grown)
    assert outcome.plan.allowed and outcome.patch == []
    assert outcome.plan.warnings == [
        f"topology: podset 'master' + 'worker': {GROUP} 'master-worker': can only define groups where at least "
        "one pod set has only 1 replica, got: 2 replica(s) and 3 replica(s) in the group (Kueue v0.19.2 "
        f"ValidatePodSetGroupingTopology){ASSUMED}; this update changes podset 'master' from 1 to 2 pods: set it back"
    ]


def test_an_update_narrowing_a_podsets_required_level_is_checked_as_on_create() -> None:
    """Defect: a suspended Job of 2 pods of 8 GPUs required at network-node-layer-3 (a rack of two
    8-GPU hosts) changed by UPDATE to kubernetes.io/hostname was accepted silently, while the same
    object as a CREATE is warned that it can never be admitted. The update is now warned the same."""
    review_, stored = recorded_research_job()
    template = stored["spec"]["template"]
    stored["spec"]["parallelism"] = 2
    template["metadata"]["annotations"][REQUIRED] = LAYER_3
    template["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "8"},
        "requests": {"cpu": "1", "nvidia.com/gpu": "8"},
    }
    assert replay(copy.deepcopy(review_), copy.deepcopy(stored)).plan.warnings == []  # 2 hosts of a rack
    narrowed = copy.deepcopy(stored)
    narrowed["spec"]["template"]["metadata"]["annotations"][REQUIRED] = HOSTNAME
    finding = (
        "topology: podset 'main' can never be admitted: all its pods (2 pods of {cpu: 1, nvidia.com/gpu: 8}) "
        f"must fit in one {HOSTNAME} domain, and the largest holds 1 such pods on an empty cluster"
    )
    as_created = review_body(copy.deepcopy(narrowed), "hyperpod-ns-research")
    created = review(as_created, bundled_teams(), inventory=aws_nodes())
    assert created.plan.warnings == [finding]
    outcome = replay(review_, narrowed)
    assert outcome.plan.allowed and outcome.patch == []
    assert outcome.plan.warnings == [
        f"{finding}; this update changes podset 'main''s {REQUIRED} from '{LAYER_3}' to '{HOSTNAME}': set it back"
    ]


def test_an_update_dropping_one_grouped_podsets_level_is_warned_of_kueues_group_rule() -> None:
    """The Worker's required level left out, its group name kept: Kueue v0.19.2 refuses a group
    whose podsets do not ask for the same required or preferred level."""
    stored = stored_pytorchjob()
    unplaced = copy.deepcopy(stored)
    del unplaced["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][REQUIRED]
    outcome = update_pytorchjob(stored, unplaced)
    undo = f"this update removes podset 'worker''s {REQUIRED} ('{LAYER_3}'): set it back"
    assert outcome.plan.allowed and outcome.patch == []
    assert outcome.plan.warnings == [
        f"topology: podset 'worker': {GROUP} 'master-worker': may not be set when neither '{PREFERRED}' nor "
        f"'{REQUIRED}' is specified (Kueue v0.19.2 ValidateTASPodSetRequest); Kueue refuses the workload; {undo}",
        f"topology: podset 'master': {GROUP} 'master-worker': can only define groups of exactly 2 pod sets, got: "
        f"1 pod set(s) (Kueue v0.19.2 ValidatePodSetGroupingTopology){ASSUMED}; {undo}",
    ]


def test_an_update_introducing_a_group_name_on_a_lone_podset_is_warned() -> None:
    """A group name set by UPDATE on a Job's one podset: a group of one podset, which Kueue refuses."""
    review_, stored = recorded_research_job()
    grouped = copy.deepcopy(stored)
    grouped["spec"]["template"]["metadata"]["annotations"][GROUP] = "solo"
    outcome = replay(review_, grouped)
    assert outcome.plan.allowed and outcome.patch == []
    assert outcome.plan.warnings == [
        f"topology: podset 'main': {GROUP} 'solo': can only define groups of exactly 2 pod sets, got: 1 pod set(s) "
        "(Kueue v0.19.2 ValidatePodSetGroupingTopology); Kueue's TAS assumes this rule, which it does not check "
        f"for a Job: the workload may not be placed as asked; this update sets podset 'main''s {GROUP} to 'solo': "
        "set it back"
    ]
