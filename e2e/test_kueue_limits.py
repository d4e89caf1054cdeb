"""Kueue v0.19.2's limits on a Workload's podsets, against the real Kueue, in a namespace of no team.

What :func:`webhook.core.plan.rules.podset_limits.check_podsets` says of them is what Kueue does:

- a JobSet of 19 replicatedJobs is accepted, but its Workload (``spec.podSets`` ``maxItems: 18``)
  is never created; one of 18 gets one;
- a RayCluster of head + 18 worker groups is refused by Kueue's webhook (``MaxPodSets``);
- a RayCluster whose worker groups ``Worker`` and ``worker`` collide once lower-cased is accepted
  and gets no Workload;
- a PyTorchJob's ``worker`` key next to ``Worker`` is no podset of Kueue's (only
  ``OrderedReplicaTypes``, case-sensitive): its Workload has the one podset ``worker`` of
  ``Worker``'s count. The governor does not judge such keys (Kubeflow's webhook refuses them).
- a Job whose required node affinity has an empty ``nodeSelectorTerms`` is refused by the API
  server (``ValidateNodeSelector``).
- a RayCluster with GCS fault tolerance whose head template has no container is refused by Kueue's
  webhook (``BuildPodSets``: "head pod template must include the Ray container"); the same head
  with its container gets a Workload.
"""

from __future__ import annotations

import asyncio
import copy
import secrets
from typing import Any

import pytest
from kubernetes_asyncio.dynamic import DynamicClient

from e2e.support import Refused, create_with_warnings, pause_pod_spec, wait_for, workload_for

pytestmark = pytest.mark.e2e

QUEUE = {"kueue.x-k8s.io/queue-name": "q"}


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def template(restart_policy: str = "Never") -> dict[str, Any]:
    return {"spec": pause_pod_spec(0, "10m", "16Mi", restart_policy)}


def jobset(namespace: str, jobs: int) -> dict[str, Any]:
    job = {"spec": {"parallelism": 1, "completions": 1, "template": template()}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": unique(f"js{jobs}"), "namespace": namespace, "labels": QUEUE},
        "spec": {
            "replicatedJobs": [{"name": f"r{i}", "replicas": 1, "template": copy.deepcopy(job)} for i in range(jobs)]
        },
    }


def raycluster(namespace: str, *groups: str) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": unique("rc"), "namespace": namespace, "labels": QUEUE},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": template("Always")},
            "workerGroupSpecs": [
                {
                    "groupName": g,
                    "replicas": 1,
                    "minReplicas": 0,
                    "maxReplicas": 1,
                    "rayStartParams": {},
                    "template": template("Always"),
                }
                for g in groups
            ],
        },
    }


async def _no_workload(dynamic: DynamicClient, namespace: str, created: dict[str, Any]) -> None:
    await asyncio.sleep(10)  # well past Kueue's first reconcile of the object
    assert await workload_for(dynamic, namespace, created["metadata"]["uid"]) is None


async def test_kueue_never_creates_the_workload_of_a_jobset_of_19_replicated_jobs(
    dynamic: DynamicClient, namespace: str
) -> None:
    fits = (await create_with_warnings(dynamic, jobset(namespace, 18))).obj
    over = (await create_with_warnings(dynamic, jobset(namespace, 19))).obj  # Kueue's webhook accepts it
    workload = await wait_for(
        lambda: workload_for(dynamic, namespace, fits["metadata"]["uid"]), "the Workload of the 18", timeout=60
    )
    assert [p["name"] for p in workload["spec"]["podSets"]] == [f"r{i}" for i in range(18)]
    await _no_workload(dynamic, namespace, over)


async def test_kueue_refuses_a_raycluster_of_19_podsets(dynamic: DynamicClient, namespace: str) -> None:
    with pytest.raises(Refused) as refused:
        await create_with_warnings(dynamic, raycluster(namespace, *(f"g{i}" for i in range(18))), dry_run=True)
    message = str(refused.value.status.get("message"))
    assert "spec.workerGroupSpecs: Too many: 19: must have at most 18 items" in message, message
    await create_with_warnings(dynamic, raycluster(namespace, *(f"g{i}" for i in range(17))), dry_run=True)


async def test_kueue_never_creates_the_workload_of_ray_worker_groups_that_collide_lower_cased(
    dynamic: DynamicClient, namespace: str
) -> None:
    apart = (await create_with_warnings(dynamic, raycluster(namespace, "Worker", "other"))).obj
    collide = (await create_with_warnings(dynamic, raycluster(namespace, "Worker", "worker"))).obj
    workload = await wait_for(
        lambda: workload_for(dynamic, namespace, apart["metadata"]["uid"]), "the Workload of Worker + other", timeout=60
    )
    assert [p["name"] for p in workload["spec"]["podSets"]] == ["head", "worker", "other"]
    await _no_workload(dynamic, namespace, collide)


async def test_kueue_reads_only_its_own_kubeflow_replica_types(dynamic: DynamicClient, namespace: str) -> None:
    restart = {"restartPolicy": "OnFailure"}
    body = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": unique("pt"), "namespace": namespace, "labels": QUEUE},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {**restart, "replicas": 1, "template": template("OnFailure")},
                "worker": {**restart, "replicas": 2, "template": template("OnFailure")},
            }
        },
    }
    # Only the CRDs run here (no Kubeflow webhook, which would refuse the 'worker' key).
    created = (await create_with_warnings(dynamic, body)).obj
    workload = await wait_for(
        lambda: workload_for(dynamic, namespace, created["metadata"]["uid"]), "the PyTorchJob's Workload", timeout=60
    )
    assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [("worker", 1)]


async def test_kubernetes_refuses_a_job_of_empty_node_selector_terms(dynamic: DynamicClient, namespace: str) -> None:
    """What the governor's finding on an empty ``nodeSelectorTerms`` (no team node affinity) says."""
    pod = template()
    pod["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
    }
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": unique("terms"), "namespace": namespace, "labels": QUEUE},
        "spec": {"parallelism": 1, "completions": 1, "template": pod},
    }
    with pytest.raises(Refused) as refused:
        await create_with_warnings(dynamic, body, dry_run=True)
    assert "must have at least one node selector term" in str(refused.value.status.get("message"))


async def test_kueue_refuses_a_fault_tolerant_ray_head_without_its_container(
    dynamic: DynamicClient, namespace: str
) -> None:
    """Kueue v0.19.2 raises a fault-tolerant head's first container to KubeRay's Redis cleanup
    requests; without one it builds no podsets, and its webhook refuses the RayCluster (the row of
    Kueue's TestBuildPodSets "spec with gcs fault tolerance and missing head container")."""
    whole = raycluster(namespace, "workers")
    whole["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
    bare = copy.deepcopy(whole)
    bare["metadata"]["name"] = unique("rc-bare")
    bare["spec"]["headGroupSpec"]["template"] = {"spec": {"containers": []}}
    with pytest.raises(Refused) as refused:
        await create_with_warnings(dynamic, bare, dry_run=True)
    message = str(refused.value.status.get("message"))
    assert "head pod template must include the Ray container" in message, message
    built = (await create_with_warnings(dynamic, whole)).obj
    workload = await wait_for(
        lambda: workload_for(dynamic, namespace, built["metadata"]["uid"]), "the fault-tolerant head's Workload", 60
    )
    assert [p["name"] for p in workload["spec"]["podSets"]] == ["head", "workers"]
