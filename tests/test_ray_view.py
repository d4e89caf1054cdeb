"""Kueue's view of a Ray head: the containers KubeRay injects, which Kueue counts in the podset.

Figures from Kueue v0.19.2 ``pkg/controller/jobs/raycluster/common.go`` (``BuildPodSets``: GCS
fault tolerance raises the head's first container to 200m / 256Mi, in-tree autoscaling adds the
autoscaler, 500m / 512Mi unless ``autoscalerOptions.resources``) and ``rayjob_controller.go``
(``SidecarMode`` adds the submitter, requests 500m / 200Mi, to the head; ``K8sJobMode`` adds the
``submitter`` podset). The e2e suite compares them with the real Kueue
(``e2e/test_kueue_view_ray.py``).
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest
import yaml
from support import CASES, needs_cases

from webhook.core.kueue.kinds import find_kind
from webhook.core.kueue.view import PodSet, kueue_view

MI = 1024 * 1024


def head(**resources: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "ray-head", "image": "ray", "resources": resources}]}}


def worker_group(name: str = "workers", replicas: int = 2, **extra: Any) -> dict[str, Any]:
    container = {"name": "w", "image": "ray", "resources": {"requests": {"cpu": "4", "nvidia.com/gpu": "1"}}}
    return {"groupName": name, "replicas": replicas, "template": {"spec": {"containers": [container]}}, **extra}


def cluster(**extra: Any) -> dict[str, Any]:
    return {
        "headGroupSpec": {"template": head(requests={"cpu": "1", "memory": "1Gi"})},
        "workerGroupSpecs": [worker_group()],
        **extra,
    }


def ray_job(mode: str | None = "K8sJobMode", annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "rj", "annotations": annotations or {}},
        "spec": {"entrypoint": "python x.py", "rayClusterSpec": cluster(), **spec},
    }
    if mode is not None:
        body["spec"]["submissionMode"] = mode
    return body


def ray_cluster(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "annotations": annotations or {}},
        "spec": cluster(**spec),
    }


def podsets(obj: dict[str, Any]) -> dict[str, PodSet]:
    row = find_kind(obj["apiVersion"], obj["kind"])
    assert row is not None
    view = kueue_view(obj, row)
    assert view.problems == ()
    return {p.name: p for p in view.podsets}


def sizes(obj: dict[str, Any]) -> dict[str, tuple[int, dict[str, Decimal]]]:
    return {name: (p.count, p.requests or {}) for name, p in podsets(obj).items()}


def test_a_plain_head_is_its_template() -> None:
    assert sizes(ray_cluster())["head"] == (1, {"cpu": Decimal(1), "memory": Decimal(1024 * MI)})


@pytest.mark.parametrize("value", ["true", "True", "TRUE"])
def test_the_ft_annotation_raises_a_small_head_to_200m_and_256mi(value: str) -> None:
    body = ray_cluster({"ray.io/ft-enabled": value})
    body["spec"]["headGroupSpec"]["template"] = head(requests={"cpu": "100m", "memory": "64Mi"})
    assert sizes(body)["head"] == (1, {"cpu": Decimal("0.2"), "memory": Decimal(256 * MI)})


def test_the_ft_annotation_false_changes_nothing() -> None:
    body = ray_cluster({"ray.io/ft-enabled": "false"})
    body["spec"]["headGroupSpec"]["template"] = head(requests={"cpu": "100m"})
    assert sizes(body)["head"] == (1, {"cpu": Decimal("0.1")})


def test_gcs_fault_tolerance_options_raise_the_head_and_keep_larger_requests() -> None:
    body = ray_cluster(gcsFaultToleranceOptions={"redisAddress": "redis:6379"})
    body["spec"]["headGroupSpec"]["template"] = head(requests={"cpu": "2", "memory": "100Mi"})
    assert sizes(body)["head"] == (1, {"cpu": Decimal(2), "memory": Decimal(256 * MI)})


def test_the_raised_request_hides_a_limit_kueue_would_have_used() -> None:
    """Kueue raises the requests before it fills missing requests from limits: a head with only a
    limit of 2 CPUs is sized at the 200m floor (and memory at 256Mi)."""
    body = ray_cluster({"ray.io/ft-enabled": "true"})
    body["spec"]["headGroupSpec"]["template"] = head(limits={"cpu": "2"})
    assert sizes(body)["head"] == (1, {"cpu": Decimal("0.2"), "memory": Decimal(256 * MI)})
    # Only the first container is raised; a second one keeps its own requests.
    body["spec"]["headGroupSpec"]["template"]["spec"]["containers"].append(
        {"name": "log", "image": "x", "resources": {"requests": {"cpu": "50m"}}}
    )
    assert sizes(body)["head"] == (1, {"cpu": Decimal("0.25"), "memory": Decimal(256 * MI)})


def test_rayservice_ft_reads_its_own_annotation_and_cluster_config() -> None:
    body = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "rs", "annotations": {"ray.io/ft-enabled": "true"}},
        "spec": {"rayClusterConfig": cluster()},
    }
    body["spec"]["rayClusterConfig"]["headGroupSpec"]["template"] = head()
    assert sizes(body)["head"] == (1, {"cpu": Decimal("0.2"), "memory": Decimal(256 * MI)})


def test_in_tree_autoscaling_adds_the_autoscaler_with_kuberay_defaults() -> None:
    body = ray_cluster(enableInTreeAutoscaling=True)
    assert sizes(body)["head"] == (1, {"cpu": Decimal("1.5"), "memory": Decimal(1024 * MI + 512 * MI)})
    assert [c["name"] for c in podsets(body)["head"].spec["containers"]] == ["ray-head", "autoscaler"]
    # The object itself is not changed: the container is Kueue's, not the user's.
    assert len(body["spec"]["headGroupSpec"]["template"]["spec"]["containers"]) == 1


def test_autoscaler_options_resources_replace_the_defaults_limits_filling_requests() -> None:
    resources = {"requests": {"cpu": "250m"}, "limits": {"cpu": "1", "memory": "300Mi"}}
    body = ray_cluster(enableInTreeAutoscaling=True, autoscalerOptions={"resources": resources})
    assert sizes(body)["head"] == (1, {"cpu": Decimal("1.25"), "memory": Decimal(1024 * MI + 300 * MI)})


def test_autoscaling_false_or_absent_adds_nothing() -> None:
    assert sizes(ray_cluster(enableInTreeAutoscaling=False))["head"][1]["cpu"] == Decimal(1)


def test_a_malformed_autoscaler_quantity_is_a_problem_at_its_own_path() -> None:
    body = ray_cluster(enableInTreeAutoscaling=True, autoscalerOptions={"resources": {"requests": {"cpu": "2x"}}})
    row = find_kind("ray.io/v1", "RayCluster")
    assert row is not None
    view = kueue_view(body, row)
    assert [p.path for p in view.problems] == [("spec", "autoscalerOptions", "resources", "requests", "cpu")]
    assert view.podsets[0].requests == {"cpu": Decimal(1), "memory": Decimal(1024 * MI)}


def test_sidecar_mode_puts_the_submitter_into_the_head() -> None:
    found = sizes(ray_job("SidecarMode"))
    assert found == {
        "head": (1, {"cpu": Decimal("1.5"), "memory": Decimal(1024 * MI + 200 * MI)}),
        "workers": (2, {"cpu": Decimal(4), "nvidia.com/gpu": Decimal(1)}),
    }


def test_sidecar_mode_ignores_the_submitter_pod_template() -> None:
    template = {"spec": {"containers": [{"name": "s", "image": "x", "resources": {"requests": {"cpu": "3"}}}]}}
    found = sizes(ray_job("SidecarMode", submitterPodTemplate=template))
    assert set(found) == {"head", "workers"}
    assert found["head"][1]["cpu"] == Decimal("1.5")


def test_k8s_job_mode_adds_the_submitter_podset_not_a_head_container() -> None:
    found = sizes(ray_job("K8sJobMode"))
    assert found["head"] == (1, {"cpu": Decimal(1), "memory": Decimal(1024 * MI)})
    assert found["submitter"] == (1, {"cpu": Decimal("0.5"), "memory": Decimal(200 * MI)})


def test_a_raycluster_has_no_submission_mode() -> None:
    body = ray_cluster()
    body["spec"]["submissionMode"] = "SidecarMode"
    assert sizes(body)["head"][1]["cpu"] == Decimal(1)


def test_all_three_add_up_on_one_head() -> None:
    body = ray_job("SidecarMode", {"ray.io/ft-enabled": "true"})
    body["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"] = head(requests={"cpu": "100m"})
    # ray-head raised to 200m/256Mi + autoscaler 500m/512Mi + submitter 500m/200Mi
    assert sizes(body)["head"] == (1, {"cpu": Decimal("1.2"), "memory": Decimal((256 + 512 + 200) * MI)})


@pytest.mark.parametrize(("hosts", "pods"), [(0, 3), (1, 3), (2, 6), (4, 12)])
def test_num_of_hosts_multiplies_only_above_one(hosts: int, pods: int) -> None:
    """Kueue's ``effectiveWorkerCount``: ``replicas`` × ``numOfHosts`` when ``numOfHosts`` > 1."""
    body = ray_cluster()
    body["spec"]["workerGroupSpecs"] = [worker_group(replicas=3, numOfHosts=hosts)]
    assert sizes(body)["workers"][0] == pods


@needs_cases
def test_kueues_autoscaling_sample_is_sized_as_kueue_sizes_it() -> None:
    """Kueue v0.19.2 ``site/static/examples/jobs/ray-job-autoscaling-sample.yaml`` as the API server
    stores it (``submissionMode`` defaulted to ``K8sJobMode`` by the RayJob CRD): the head's 1 CPU
    plus the autoscaler's 500m / 512Mi, the worker group's 1 CPU, the default submitter."""
    (sample,) = list(yaml.safe_load_all((CASES / "jobs/ray-job-autoscaling-sample.yaml").read_text()))
    stored = copy.deepcopy(sample)
    stored["spec"]["submissionMode"] = "K8sJobMode"
    assert sizes(stored) == {
        "head": (1, {"cpu": Decimal("1.5"), "memory": Decimal(512 * MI)}),
        "small-group": (1, {"cpu": Decimal(1)}),
        "submitter": (1, {"cpu": Decimal("0.5"), "memory": Decimal(200 * MI)}),
    }


@pytest.mark.parametrize(
    ("template", "path"),
    [
        ({"spec": {"containers": "ray-head"}}, ("spec", "headGroupSpec", "template", "spec", "containers")),
        (
            {"spec": {"containers": [{"name": "h", "resources": ["cpu"]}]}},
            ("spec", "headGroupSpec", "template", "spec", "containers", 0, "resources"),
        ),
        (
            {"spec": {"containers": [{"name": "h", "resources": {"requests": "1"}}]}},
            ("spec", "headGroupSpec", "template", "spec", "containers", 0, "resources", "requests"),
        ),
    ],
)
def test_a_malformed_head_is_still_reported_when_kueue_would_change_it(template: dict[str, Any], path: Any) -> None:
    """Regression: raising or appending containers must not hide what the user wrote wrong."""
    body = ray_cluster({"ray.io/ft-enabled": "true"}, enableInTreeAutoscaling=True)
    body["spec"]["headGroupSpec"]["template"] = template
    row = find_kind("ray.io/v1", "RayCluster")
    assert row is not None
    assert [p.path for p in kueue_view(body, row).problems] == [path]


def test_a_head_with_null_resources_is_raised() -> None:
    body = ray_cluster({"ray.io/ft-enabled": "true"})
    body["spec"]["headGroupSpec"]["template"] = {"spec": {"containers": [{"name": "h", "resources": None}]}}
    assert sizes(body)["head"] == (1, {"cpu": Decimal("0.2"), "memory": Decimal(256 * MI)})


def test_empty_autoscaler_resources_add_a_container_that_requests_nothing() -> None:
    """Kueue copies ``autoscalerOptions.resources`` as given: an empty map is no request at all
    (KubeRay's defaults apply only when it is unset)."""
    body = ray_cluster(enableInTreeAutoscaling=True, autoscalerOptions={"resources": {}})
    assert sizes(body)["head"] == (1, {"cpu": Decimal(1), "memory": Decimal(1024 * MI)})
    assert [c["name"] for c in podsets(body)["head"].spec["containers"]] == ["ray-head", "autoscaler"]
