"""A governed Kubeflow Trainer TrainJob, with the Trainer and JobSet controllers on
(:mod:`e2e.devcluster.trainer`, ``start_jobset_controller``).

A ClusterTrainingRuntime shaped as Trainer's own ``torch-distributed`` (one replicated job
``node``, the trainer step, ``mlPolicy.torch``) holds the pod template, with research's
PriorityClass (a TrainJob's ``runtimePatches`` cannot set one, Trainer v2.2.1). A TrainJob of
2 nodes × 8 GPUs referencing it goes into research's namespace (topology mode ``auto``) without
Kueue labels: the governor gives it the team's LocalQueue, Kueue priority and, in its own
``runtimePatches`` entry, the rack level that holds both pods and the team's node affinity;
Trainer's webhooks accept it, Kueue builds the podsets the governor computed, admits it, Trainer
makes the JobSet, and each pod is bound on a host of the rack Kueue's topology assignment names.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.dynamic import DynamicClient

from benchmarks.placement.jobs import COMPLETE_DELAY, COMPLETE_JITTER
from e2e import devcluster
from e2e.conftest import E2ECluster
from e2e.devcluster.trainer import start_trainer_controller, stop_trainer_controller
from e2e.support import (
    GPU,
    KUEUE_API,
    PAUSE_IMAGE,
    create,
    decode_topology_assignment,
    delete,
    get,
    is_true,
    list_objects,
    wait_for,
    workload_for,
)
from webhook.core.kueue.kinds import find_kind
from webhook.core.kueue.resources import pod_requests
from webhook.core.kueue.trainer import expanded
from webhook.core.kueue.view import kueue_view

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

RESEARCH = "hyperpod-ns-research"
RESEARCH_QUEUE = "hyperpod-ns-research-localqueue"
TRAINING = "training-priority"
RACK = "topology.k8s.aws/network-node-layer-3"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
GOVERNOR_MANAGER = "kueue-governor.io/governor"


@pytest.fixture(scope="module")
def trainer_controllers(e2e_cluster: E2ECluster) -> Iterator[None]:
    """The JobSet and Trainer controllers for this module's tests, stopped after them."""
    if e2e_cluster.local is None:
        pytest.skip("starts the Trainer and JobSet controllers next to the local control plane")
    root = Path(e2e_cluster.local.state_dir)
    devcluster.start_jobset_controller(root)
    start_trainer_controller(root)
    yield
    stop_trainer_controller(root)
    devcluster.stop_process(devcluster.Paths(root), "jobset")


def runtime(name: str) -> dict[str, Any]:
    """Trainer's ``torch-distributed`` shape, with the fields JobSet's (unregistered) defaulting
    webhook would set, pods that KWOK completes after 5 s, and research's PriorityClass."""
    pod = {
        "metadata": {"annotations": {COMPLETE_DELAY: "5s", COMPLETE_JITTER: "5s"}},
        "spec": {
            "priorityClassName": TRAINING,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "node", "image": PAUSE_IMAGE}],
        },
    }
    return {
        "apiVersion": TRAINER_API,
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "successPolicy": {"operator": "All"},
                    "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
                    "network": {"enableDNSHostnames": False, "publishNotReadyAddresses": True},
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "replicas": 1,
                            "template": {
                                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                "spec": {"completionMode": "Indexed", "backoffLimit": 0, "template": pod},
                            },
                        }
                    ],
                }
            },
        },
    }


@pytest.mark.usefixtures("trainer_controllers")
async def test_a_governed_trainjob_is_admitted_and_placed_in_one_rack(dynamic: DynamicClient) -> None:
    suffix = secrets.token_hex(3)
    cluster_runtime = await create(dynamic, runtime(f"kgov-torch-{suffix}"))
    name = f"train-{suffix}"
    body = {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": RESEARCH},  # no Kueue label: the governor adds them
        "spec": {
            "runtimeRef": {"name": cluster_runtime["metadata"]["name"], "kind": "ClusterTrainingRuntime"},
            "trainer": {
                "numNodes": 2,
                "resourcesPerNode": {"requests": {"cpu": "8", GPU: "8"}, "limits": {GPU: "8"}},
            },
        },
    }
    created = await create(dynamic, body)
    try:
        labels = created["metadata"]["labels"]
        assert (labels[QUEUE_LABEL], labels[PRIORITY_LABEL]) == (RESEARCH_QUEUE, TRAINING)
        assert created["spec"]["suspend"] is True
        patches = {p["manager"]: p for p in created["spec"]["runtimePatches"]}
        assert "kueue.x-k8s.io/manager" in patches  # Kueue's own entry, after the governor's
        jobs = patches[GOVERNOR_MANAGER]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        pod = jobs[0]["template"]["spec"]["template"]
        assert jobs[0]["name"] == "node"
        assert pod["metadata"]["annotations"] == {REQUIRED: RACK}  # 2 × 8 GPUs: one rack, not one host
        assert pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]

        async def finished() -> dict[str, Any] | None:
            workload = await workload_for(dynamic, RESEARCH, created["metadata"]["uid"])
            return workload if workload is not None and is_true(workload, "Finished") else None

        workload = await wait_for(finished, "the TrainJob's Workload to be Finished", timeout=240, interval=2)
        # Kueue's podsets are the ones the governor planned on (names, counts, per-pod requests, level)
        row = find_kind(TRAINER_API, "TrainJob")
        assert row is not None
        view = kueue_view(expanded(created, cluster_runtime), row)
        podsets = workload["spec"]["podSets"]
        assert [(p["name"], p["count"]) for p in podsets] == [(p.name, p.count) for p in view.podsets] == [("node", 2)]
        requests = pod_requests(podsets[0]["template"]["spec"])
        assert requests == view.podsets[0].requests and requests[GPU] == Decimal(8)
        assert podsets[0]["topologyRequest"]["required"] == RACK
        assert podsets[0]["template"]["spec"]["priorityClassName"] == TRAINING
        stored = await get(dynamic, TRAINER_API, "TrainJob", name, RESEARCH)
        assert stored is not None and stored["spec"]["suspend"] is False  # Kueue resumed it

        pods = await list_objects(dynamic, "v1", "Pod", RESEARCH, f"{JOBSET_NAME_LABEL}={name}")
        assert len(pods) == 2 and all(p["status"]["phase"] == "Succeeded" for p in pods), [
            p["status"].get("phase") for p in pods
        ]
        assert all(p["spec"].get("priorityClassName") == TRAINING for p in pods)
        (assignment,) = workload["status"]["admission"]["podSetAssignments"]
        _, domains = decode_topology_assignment(assignment["topologyAssignment"])
        assigned = Counter({d.values[-1]: d.pods for d in domains})
        assert Counter(p["spec"]["nodeName"] for p in pods) == assigned
        nodes = {n["metadata"]["name"]: n for n in await list_objects(dynamic, "v1", "Node")}
        racks = {nodes[p["spec"]["nodeName"]]["metadata"]["labels"][RACK] for p in pods}
        assert len(racks) == 1, racks  # one domain of the level the governor chose
    finally:
        await delete(dynamic, created)
        for leftover in await list_objects(dynamic, KUEUE_API, "Workload", RESEARCH):
            if any(o.get("uid") == created["metadata"]["uid"] for o in leftover["metadata"].get("ownerReferences", [])):
                await delete(dynamic, leftover)
        await delete(dynamic, cluster_runtime)


def _trainers_runtime(file: str, name: str) -> dict[str, Any]:
    """One of Trainer v2.2.1's own runtimes (``tests/data/trainer``) under ``name``, each pod with
    research's PriorityClass."""
    path = Path(__file__).resolve().parent.parent / "tests" / "data" / "trainer" / file
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    document["metadata"]["name"] = name
    for job in document["spec"]["template"]["spec"]["replicatedJobs"]:
        job["template"]["spec"]["template"]["spec"]["priorityClassName"] = TRAINING
    return document


@pytest.mark.usefixtures("trainer_controllers")
@pytest.mark.parametrize(
    ("file", "trainer"),
    [
        ("runtime-torch_distributed.yaml", {"numNodes": 3, "resourcesPerNode": {"requests": {GPU: "4"}}}),
        ("runtime-deepspeed_distributed.yaml", {"numNodes": 4, "resourcesPerNode": {"limits": {GPU: "8"}}}),
        ("runtime-llama3_2_1B.yaml", {}),
    ],
    ids=["torch", "deepspeed-mpi", "torchtune-initializers"],
)
async def test_kueue_builds_the_podsets_the_governor_planned(
    dynamic: DynamicClient, file: str, trainer: dict[str, Any]
) -> None:
    """Kueue's Workload of a TrainJob on Trainer's own runtimes has the podsets (names, counts,
    per-pod requests) and the TAS requests the governor planned with."""
    suffix = secrets.token_hex(3)
    cluster_runtime = await create(dynamic, _trainers_runtime(file, f"kgov-rt-{suffix}"))
    body = {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": {"name": f"view-{suffix}", "namespace": RESEARCH},
        "spec": {"runtimeRef": {"name": cluster_runtime["metadata"]["name"]}, "trainer": trainer},
    }
    created = await create(dynamic, body)
    try:

        async def built() -> dict[str, Any] | None:
            return await workload_for(dynamic, RESEARCH, created["metadata"]["uid"])

        workload = await wait_for(built, "the TrainJob's Workload", timeout=60, interval=1)
        row = find_kind(TRAINER_API, "TrainJob")
        assert row is not None
        view = kueue_view(expanded(created, cluster_runtime), row)
        podsets = workload["spec"]["podSets"]
        assert [(p["name"], p["count"]) for p in podsets] == [(p.name, p.count) for p in view.podsets]
        assert [pod_requests(p["template"]["spec"]) for p in podsets] == [p.requests for p in view.podsets]
        for podset, planned in zip(podsets, view.podsets, strict=True):
            annotations = planned.annotations
            request = podset.get("topologyRequest") or {}
            assert request.get("required") == annotations.get(REQUIRED), podset["name"]
            assert request.get("podSetGroupName") == annotations.get("kueue.x-k8s.io/podset-group-name")
    finally:
        await delete(dynamic, created)
        await delete(dynamic, cluster_runtime)
