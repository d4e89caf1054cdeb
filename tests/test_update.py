"""UPDATE semantics (SPEC §3): never refuse what an update leaves as it was, check what it
introduces or changes, put back what it drops, never add to a pod template the API server freezes."""

from __future__ import annotations

import copy
from typing import Any

from support import job, platform_with, review_body, teams_from

from webhook.core.patch import apply_patch
from webhook.core.review import review

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
