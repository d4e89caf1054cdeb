"""Offline equals live: ``kgov mutate`` and ``kgov review`` plan the object the API server stores,
with the defaults of the workload CRDs Kueue pins (``webhook/core/kueue/crd_defaults.json``, generated
from the CRD files by ``python -m e2e.crd_defaults``; ``make crd-defaults-check``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from support import PLATFORM

from webhook.cli import main
from webhook.core.kueue.crd_defaults import crd_defaults, default_review, with_crd_defaults
from webhook.core.kueue.kinds import find_kind
from webhook.core.kueue.view import kueue_view

NAMESPACE = "hyperpod-ns-research"


def worker_group(index: int, **extra: Any) -> dict[str, Any]:
    container = {"name": "w", "image": "ray", "resources": {"requests": {"cpu": "1"}}}
    return {"groupName": f"g{index}", "template": {"spec": {"containers": [container]}}, **extra}


def ray_job(groups: int, **spec: Any) -> dict[str, Any]:
    head = {"spec": {"containers": [{"name": "head", "image": "ray", "resources": {"requests": {"cpu": "1"}}}]}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "many-groups"},
        "spec": {
            "entrypoint": "python x.py",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {"template": head},
                "workerGroupSpecs": [worker_group(i, replicas=1) for i in range(groups)],
            },
            **spec,
        },
    }


def names(obj: dict[str, Any]) -> list[tuple[str, int]]:
    row = find_kind(obj["apiVersion"], obj["kind"])
    assert row is not None
    return [(p.name, p.count) for p in kueue_view(obj, row).podsets]


def mutate(tmp_path: Path, obj: dict[str, Any], *extra: str) -> Any:
    source = tmp_path / "in.yaml"
    source.write_text(yaml.safe_dump(obj))
    args = ["mutate", "--platform", str(PLATFORM), "-n", NAMESPACE, "-f", str(source), *extra]
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_the_data_holds_the_ray_defaults_kueue_sizes_depend_on() -> None:
    job = {tuple(path): value for path, value, _ in crd_defaults()["ray.io/v1/RayJob"]}
    assert job[("spec", "submissionMode")] == "K8sJobMode"
    assert job[("spec", "rayClusterSpec", "workerGroupSpecs", "*", "replicas")] == 0
    assert job[("spec", "rayClusterSpec", "workerGroupSpecs", "*", "numOfHosts")] == 1
    cluster = {tuple(path): value for path, value, _ in crd_defaults()["ray.io/v1/RayCluster"]}
    assert cluster[("spec", "workerGroupSpecs", "*", "replicas")] == 0
    lws = {tuple(path): value for path, value, _ in crd_defaults()["leaderworkerset.x-k8s.io/v1/LeaderWorkerSet"]}
    assert lws[("spec", "leaderWorkerTemplate", "size")] == 1
    # Nothing below a pod spec, nothing of status.
    for entries in crd_defaults().values():
        for path, _, _ in entries:
            assert "containers" not in path and path[0] != "status", path


def test_a_rayjob_without_submission_mode_gets_the_submitter_podset() -> None:
    given = ray_job(1)
    assert names(given) == [("head", 1), ("g0", 1)]
    stored = with_crd_defaults(given)
    assert stored["spec"]["submissionMode"] == "K8sJobMode"
    assert names(stored) == [("head", 1), ("g0", 1), ("submitter", 1)]
    assert "submissionMode" not in given["spec"]  # the input is not changed


def test_a_worker_group_without_replicas_has_none_as_the_api_server_stores_it() -> None:
    given = ray_job(0)
    given["spec"]["rayClusterSpec"]["workerGroupSpecs"] = [worker_group(0)]
    stored = with_crd_defaults(given)
    assert stored["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 0
    assert names(stored) == [("head", 1), ("g0", 0), ("submitter", 1)]


def test_a_set_value_wins_a_null_is_defaulted_a_missing_parent_stays_missing() -> None:
    given = ray_job(1, submissionMode="HTTPMode")
    given["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["numOfHosts"] = None
    stored = with_crd_defaults(given)
    assert stored["spec"]["submissionMode"] == "HTTPMode"
    assert stored["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["numOfHosts"] == 1
    assert "deletionStrategy" not in stored["spec"]  # its defaults are below an object not given
    pytorch = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p"}, "spec": {}}
    assert with_crd_defaults(pytorch) == pytorch  # runPolicy.suspend only once runPolicy is there


def test_built_in_and_unknown_kinds_and_non_objects_are_returned_as_they_are() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {}}
    assert with_crd_defaults(job) is job
    assert with_crd_defaults("text") == "text"
    body = {"request": {"object": job}}
    assert default_review(body) is body
    assert default_review([1]) == [1]


def test_an_admission_review_gets_defaults_in_object_and_old_object() -> None:
    job = ray_job(1)
    body = {"request": {"object": job, "oldObject": copy.deepcopy(job)}}
    out = default_review(body)
    assert out["request"]["object"]["spec"]["submissionMode"] == "K8sJobMode"
    assert out["request"]["oldObject"]["spec"]["submissionMode"] == "K8sJobMode"
    assert "submissionMode" not in body["request"]["object"]["spec"]


def test_kgov_mutate_refuses_seventeen_worker_groups_without_submission_mode(tmp_path: Path) -> None:
    """Regression: offline, a RayJob of 17 worker groups without ``submissionMode`` had 18 podsets
    and passed; the API server defaults it to ``K8sJobMode``, so Kueue's Workload would have 19
    (a submitter) and the Workload CRD refuses more than 18: the job is never admitted."""
    result = mutate(tmp_path, ray_job(17), "--explain")
    assert result.exit_code == 1, result.stderr
    assert "a Workload holds at most 18 podsets and it has 19" in result.stderr
    assert "podset 'submitter' (Kueue's view): 1 pod of {cpu: 0.5, memory: 209715200}" in result.stderr
    # 16 worker groups: 18 podsets, admitted, printed as the API server stores it.
    result = mutate(tmp_path, ray_job(16))
    assert result.exit_code == 0, result.stderr
    (stored,) = list(yaml.safe_load_all(result.stdout))
    assert stored["spec"]["submissionMode"] == "K8sJobMode"


def test_kgov_review_applies_the_defaults_before_planning(tmp_path: Path) -> None:
    from support import review_body

    body = review_body(ray_job(17), NAMESPACE)
    result = CliRunner().invoke(main, ["review", "--platform", str(PLATFORM)], input=json.dumps(body))
    assert result.exit_code == 0, result.stderr
    response = json.loads(result.stdout)["response"]
    assert response["allowed"] is False
    assert "it has 19" in response["status"]["message"]


def test_structural_defaulting_over_lists_maps_and_nulls() -> None:
    """``_fill`` as the API server defaults: every list item and map value for ``*``, a null
    replaced unless the field is nullable, nothing created where the parent is missing."""
    from webhook.core.kueue.crd_defaults import _fill

    node: dict[str, Any] = {"items": [{}, {"mode": "set"}, {"mode": None}], "byName": {"a": {}, "b": {"mode": "x"}}}
    _fill(node, ("items", "*", "mode"), "default", False)
    _fill(node, ("byName", "*", "mode"), "default", False)
    _fill(node, ("absent", "*", "mode"), "default", False)
    assert node == {
        "items": [{"mode": "default"}, {"mode": "set"}, {"mode": "default"}],
        "byName": {"a": {"mode": "default"}, "b": {"mode": "x"}},
    }
    kept: dict[str, Any] = {"mode": None}
    _fill(kept, ("mode",), "default", True)
    assert kept == {"mode": None}
    value: dict[str, Any] = {}
    default = {"nested": [1]}
    _fill(value, ("object",), default, False)
    assert value == {"object": {"nested": [1]}} and value["object"] is not default
