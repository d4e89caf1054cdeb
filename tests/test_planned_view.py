"""The planned object's view (webhook.core.plan.planned.planned_view) is the view a fresh read gives.

The never-admitted checks judge what Kueue will see after the patch; ``planned_view`` builds that
from the request's view and the plan's changes instead of reading the whole object again. These
tests hold it to ``kueue_view`` of the patched object: over every kind and generated policies, on
the benchmark's JobSet (where it must not read the object again), and for changes it must not
take a shortcut on (a count, a podset group, a pod group's size).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import aws_nodes, platform_with, teams_from
from test_properties import policies, workloads
from workloads import examples

from webhook.core.kueue.kinds import KINDS, find_kind
from webhook.core.kueue.view import GROUP_NAME, kueue_view
from webhook.core.plan import planned
from webhook.core.plan.draft import Change
from webhook.core.plan.patch import apply_patch, to_json_patch
from webhook.core.plan.planned import VIEW_READ_KEYS, planned_view
from webhook.core.plan.planner import plan_object

TEAM_POLICY: dict[str, Any] = {
    "queue": {},
    "kueuePriority": {"default": "low", "allowed": ["low", "high"]},
    "podPriority": {"default": "low", "allowed": ["low", "high"]},
    "topology": {"mode": "required", "level": "topology.k8s.aws/network-node-layer-3"},
    "nodeAffinity": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}],
}


def _compare(obj: dict[str, Any], policy: dict[str, Any], with_nodes: bool = False) -> int:
    """Plan ``obj``; assert planned_view == kueue_view of the patched object; return the change count."""
    teams = teams_from(platform_with(policy))
    team = teams.resolve("ml", None).team
    row = find_kind(obj["apiVersion"], obj["kind"])
    assert team is not None and row is not None
    view = kueue_view(obj, row)
    plan = plan_object(obj, row, team, aws_nodes() if with_nodes else None)
    if view.problems or plan.invalid:
        return 0
    doc = apply_patch(obj, to_json_patch(plan.changes))
    assert planned_view(view, doc, plan.changes).podsets == kueue_view(doc, row).podsets
    return len(plan.changes)


def test_every_kind_under_a_full_policy() -> None:
    changed = [_compare(obj, TEAM_POLICY, with_nodes=True) for obj in examples()]
    assert len(changed) == len(KINDS) and sum(changed) > len(KINDS)  # the policy did change them


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=workloads(), policy=policies(), with_nodes=st.booleans())
def test_generated_workloads_and_policies(obj: dict[str, Any], policy: dict[str, Any], with_nodes: bool) -> None:
    _compare(obj, policy, with_nodes)


def _jobset() -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [
                {"name": name, "replicas": 2, "template": {"spec": {"template": {**template, "metadata": {}}}}}
                for name in ("a", "b")
            ]
        },
    }


def test_the_planned_jobset_is_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Labels, suspend, priorities, TAS annotations and node affinity: only the bases are re-read."""
    obj = _jobset()
    row = find_kind(obj["apiVersion"], obj["kind"])
    team = teams_from(platform_with(TEAM_POLICY)).resolve("ml", None).team
    assert row is not None and team is not None
    view = kueue_view(obj, row)
    plan = plan_object(obj, row, team)
    rules = {c.rule for c in plan.changes}
    assert rules == {"queue", "suspend", "kueuePriority", "podPriority", "topology", "nodeAffinity"}
    doc = apply_patch(obj, to_json_patch(plan.changes))
    expected = kueue_view(doc, row)

    def no_second_read(*_: Any) -> Any:
        raise AssertionError("the planned object was read again")

    monkeypatch.setattr(planned, "kueue_view", no_second_read)
    result = planned_view(view, doc, plan.changes)
    assert result.podsets == expected.podsets
    assert result.podsets[0].affinity_terms == [{"matchExpressions": [TEAM_POLICY["nodeAffinity"][0]]}]
    assert view.podsets[0].affinity_terms is None  # the first view is left as it was


def _replanned(obj: dict[str, Any], change: Change) -> tuple[Any, Any]:
    row = find_kind(obj["apiVersion"], obj["kind"])
    assert row is not None
    doc = apply_patch(obj, to_json_patch([change]))
    return planned_view(kueue_view(obj, row), doc, [change]).podsets, kueue_view(doc, row).podsets


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "replicatedJobs", 0, "replicas"), 5),  # a count
        (("spec", "replicatedJobs", 1, "template", "spec", "template", "metadata", "annotations"), {GROUP_NAME: "g"}),
        (("spec", "replicatedJobs", 1, "template", "spec", "template", "metadata"), {"annotations": {GROUP_NAME: "g"}}),
        (("spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "containers", 0, "resources"), {}),
        (("spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "nodeSelector"), {"a": "b"}),
    ],
)
def test_a_change_the_view_reads_makes_it_read_again(path: tuple[Any, ...], value: Any) -> None:
    fast, fresh = _replanned(_jobset(), Change("add", path, value, "topology", "test"))
    assert fast == fresh
    assert fast != kueue_view(_jobset(), find_kind("jobset.x-k8s.io/v1alpha2", "JobSet")).podsets  # it did change


def test_a_pod_groups_own_keys_are_read_again() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    assert {"kueue.x-k8s.io/pod-group-name", "kueue.x-k8s.io/pod-group-total-count", GROUP_NAME} <= VIEW_READ_KEYS
    change = Change("add", ("metadata", "labels"), {"kueue.x-k8s.io/pod-group-name": "g"}, "queue", "test")
    fast, fresh = _replanned(pod, change)
    assert fast == fresh and fresh[0].partial


def test_a_podset_replaced_in_place_of_dataclasses_replace_keeps_every_other_field() -> None:
    from dataclasses import fields, replace

    row = find_kind("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert row is not None
    view = kueue_view(_jobset(), row)
    podset = view.podsets[0]
    base = {"metadata": {"annotations": {"a": "b"}}}
    fast = planned._replaced(podset, base=base, affinity_terms=[{"matchExpressions": []}])
    assert fast == replace(podset, base=base, affinity_terms=[{"matchExpressions": []}])
    assert fast.base is base and fast is not podset and podset.base is not base
    assert [getattr(fast, f.name) for f in fields(fast) if f.name not in ("base", "affinity_terms")] == [
        getattr(podset, f.name) for f in fields(podset) if f.name not in ("base", "affinity_terms")
    ]
    assert planned._replaced(view, podsets=()) == replace(view, podsets=())
    with pytest.raises(AssertionError, match="no such field"):
        planned._replaced(podset, bsae=base)


@pytest.mark.parametrize(
    "affinity",
    [
        None,
        {},
        "x",
        {"nodeAffinity": None},
        {"nodeAffinity": []},
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "x"}},
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": {}}}},
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}, "bad"]
                }
            }
        },
    ],
)
def test_the_planned_views_terms_are_the_terms_a_checked_read_gives(affinity: Any) -> None:
    from webhook.core.kueue.wellformed import required_terms, terms_of

    assert terms_of(affinity) == required_terms(affinity, ("spec", "affinity"), [])
    checked = required_terms(affinity, ("spec", "affinity"), [])
    assert (terms_of(affinity) is None) == (checked is None)
    if checked is not None:
        assert terms_of(affinity) is checked


def test_a_ray_head_with_injected_containers_is_the_view_a_fresh_read_gives() -> None:
    """Regression: the planned head's pod spec (the one Kueue holds, with the autoscaler and the
    sidecar submitter, its first container raised by fault tolerance) was the request's, without
    the priorityClassName and affinity the plan writes."""
    head = {"spec": {"containers": [{"name": "ray-head", "resources": {"requests": {"cpu": "100m"}}}]}}
    worker = {"spec": {"containers": [{"name": "w", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}
    obj = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "rj", "annotations": {"ray.io/ft-enabled": "true", "kueue.x-k8s.io/elastic-job": "true"}},
        "spec": {
            "submissionMode": "SidecarMode",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "enableInTreeAutoscaling": True,
                "headGroupSpec": {"template": head},
                "workerGroupSpecs": [{"groupName": "g", "replicas": 2, "template": worker}],
            },
        },
    }
    assert _compare(obj, TEAM_POLICY, with_nodes=True) > 0
    row = find_kind("ray.io/v1", "RayJob")
    assert row is not None
    names = [c["name"] for c in kueue_view(obj, row).podsets[0].spec["containers"]]
    assert names == ["ray-head", "autoscaler", "ray-job-submitter"]
