"""A role without its pod template (a replica spec, a replicated job, a worker group whose
template is absent or null) is refused naming the path: Kueue would build that podset from an
empty pod, which the Workload refuses (docs/rules.md, "Malformed objects"). Absent templates that
are optional (a RayJob's submitter, a LeaderWorkerSet's leader) stay allowed."""

from __future__ import annotations

from typing import Any

import pytest
from test_malformed import answer

NAMESPACE = "hyperpod-ns-research"
WHY = "must be set: the role's pods are built from it (Kueue never creates a Workload of an empty pod)"
POD = {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}


def _pytorchjob(worker: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p", "namespace": NAMESPACE},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": POD}, "Worker": worker}},
    }


def _jobset(job_template: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": NAMESPACE},
        "spec": {"replicatedJobs": [{"name": "a", "replicas": 1, "template": job_template}]},
    }


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        (_pytorchjob({"replicas": 2}), "spec.pytorchReplicaSpecs.Worker.template"),
        (_pytorchjob({"replicas": 2, "template": None}), "spec.pytorchReplicaSpecs.Worker.template"),
        (_jobset({"spec": {"parallelism": 2}}), "spec.replicatedJobs[0].template.spec.template"),
        (_jobset(None), "spec.replicatedJobs[0].template"),
    ],
    ids=["pytorchjob-absent", "pytorchjob-null", "jobset-absent", "jobset-job-template-null"],
)
def test_a_role_without_its_pod_template_is_refused_by_its_path(obj: dict[str, Any], path: str) -> None:
    outcome = answer(obj)
    assert outcome.response["response"]["allowed"] is False
    assert outcome.plan.denials == [f"malformed object: {path} {WHY}"]
    assert outcome.patch == []


def test_a_role_whose_template_is_not_an_object_is_reported_once() -> None:
    outcome = answer(_pytorchjob({"replicas": 2, "template": 5}))
    assert outcome.plan.denials == [
        "malformed object: spec.pytorchReplicaSpecs.Worker.template must be an object, got number 5"
    ]


def test_a_leaderworkerset_without_a_leader_template_is_admitted() -> None:
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "l", "namespace": NAMESPACE},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": POD}},
    }
    assert answer(lws).response["response"]["allowed"] is True
