"""Never-admitted workloads the API server lets through: an AppWrapper whose podset names Kueue
cannot take, and requests above limits in a custom resource's pod templates.

- Kueue v0.19.2 names an AppWrapper's podsets ``<name>-<index>`` lower-cased
  (``pkg/controller/jobs/appwrapper`` ``PodSets``); the Workload CRD's ``PodSetReference`` is a
  DNS label of at most 63 characters, so a name with a dot or of 62 characters never gets a
  Workload;
- ``workload.ValidateResources`` (``pkg/workload/resources.go``) leaves a Workload whose requests
  exceed its limits pending for ever; the API server refuses that only in built-in kinds' pod
  templates. Compared on Kueue's integers (millicores for cpu, rounded up).
"""

from __future__ import annotations

from typing import Any

import pytest
from support import platform_with, review_body, teams_from

from webhook.core.admission.review import ReviewOutcome, review

ENFORCE = {"queue": {"enforcement": "enforce"}}
WARN = {"queue": {"enforcement": "warn"}}


def run(obj: dict[str, Any], policy: dict[str, Any]) -> ReviewOutcome:
    return review(review_body(obj, "ml"), teams_from(platform_with(policy)))


def container(requests: dict[str, Any], limits: dict[str, Any] | None = None, name: str = "main") -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": requests}
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "x", "resources": resources}


def pytorch(master: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [master]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [container({"cpu": "1"})]}}},
            }
        },
    }


def appwrapper(name: str) -> dict[str, Any]:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "inner"},
        "spec": {"template": {"spec": {"containers": [container({"cpu": "1"})]}}},
    }
    return {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": name},
        "spec": {"components": [{"template": job}]},
    }


def test_requests_above_limits_in_a_pytorchjob_are_refused_with_the_numbers() -> None:
    result = run(pytorch(container({"cpu": "2", "memory": "1Gi"}, {"cpu": "1", "memory": "2Gi"})), ENFORCE)
    assert result.plan.denials == [
        "queue: podset 'master' can never be admitted: container 'main' requests cpu 2, above its limit 1; "
        "Kueue leaves such a Workload pending (ValidateResources: requests must not exceed its limits), and the "
        "API server checks this only for built-in kinds"
    ]
    warnings = run(pytorch(container({"cpu": "2"}, {"cpu": "1"})), WARN).plan.warnings
    assert len([w for w in warnings if "above its limit 1" in w]) == 1


@pytest.mark.parametrize(
    ("requests", "limits"),
    [
        ({"cpu": "1"}, {"cpu": "1"}),  # equal
        ({"cpu": "1"}, {"memory": "1Gi"}),  # no limit of that resource
        ({}, {"cpu": "1"}),  # the limit stands in for the request
        ({"memory": "1.7"}, {"memory": "1.5"}),  # Kueue's integers: both round up to 2 bytes
        ({"cpu": "1500u"}, {"cpu": "1.6m"}),  # both 2 millicores
    ],
)
def test_requests_within_limits_as_kueue_counts_them_pass(requests: dict[str, Any], limits: dict[str, Any]) -> None:
    result = run(pytorch(container(requests, limits)), ENFORCE)
    assert not [d for d in result.plan.denials if "above its limit" in d], result.plan.denials


def test_an_init_container_and_pod_level_resources_are_checked_too() -> None:
    body = pytorch(container({"cpu": "1"}))
    spec = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    spec["initContainers"] = [container({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1"}, name="setup")]
    spec["resources"] = {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}
    denials = [d for d in run(body, ENFORCE).plan.denials if "above its limit" in d]
    assert [d.split(" requests ")[0] for d in denials] == [
        "queue: podset 'master' can never be admitted: init container 'setup'",
        "queue: podset 'master' can never be admitted: the pod-level resources",
    ]


def test_a_built_in_kind_is_left_to_the_api_server() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"containers": [container({"cpu": "2"}, {"cpu": "1"})]}}},
    }
    assert not [d for d in run(job, ENFORCE).plan.denials if "above its limit" in d]


def test_a_ray_head_raised_by_fault_tolerance_above_its_limit_is_refused() -> None:
    """GCS fault tolerance raises the head's requests to 200m / 256Mi, limits untouched: a head
    limited to 100m CPU then asks more than its limit in Kueue's Workload."""
    head = container({"cpu": "100m", "memory": "1Gi"}, {"cpu": "100m", "memory": "1Gi"}, name="ray-head")
    body = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "annotations": {"ray.io/ft-enabled": "true"}},
        "spec": {"headGroupSpec": {"template": {"spec": {"containers": [head]}}}, "workerGroupSpecs": []},
    }
    denials = run(body, ENFORCE).plan.denials
    assert [d for d in denials if "above its limit" in d] == [
        "queue: podset 'head' can never be admitted: container 'ray-head' requests cpu 0.2, above its limit 0.1; "
        "Kueue leaves such a Workload pending (ValidateResources: requests must not exceed its limits), and the "
        "API server checks this only for built-in kinds"
    ]
    body["metadata"]["annotations"] = {}
    assert not [d for d in run(body, ENFORCE).plan.denials if "above its limit" in d]


@pytest.mark.parametrize("name", ["train.v1", "a" * 62])
def test_an_appwrapper_whose_podset_names_kueue_cannot_take_is_refused(name: str) -> None:
    denials = run(appwrapper(name), ENFORCE).plan.denials
    assert len(denials) == 1
    assert denials[0].startswith(
        "queue: the workload can never be admitted: Kueue never creates its Workload, as it names the "
        f"AppWrapper's podsets after it ('{name}-0')"
    )


@pytest.mark.parametrize("name", ["train-v1", "a" * 61])
def test_an_appwrapper_with_a_short_dns_label_name_passes(name: str) -> None:
    assert run(appwrapper(name), ENFORCE).plan.denials == []
