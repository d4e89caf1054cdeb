"""Pods on the simulated cluster: the last step of Kueue's admission, seen on real Pod objects.

The Job, ReplicaSet and StatefulSet controllers of kube-controller-manager create the pods,
kube-scheduler binds them, KWOK (simulated kubelets, its own stages) runs them and, for a Job's
pods, completes them after the delay of the ``pod-complete.stage.kwok.x-k8s.io/delay``
annotation. Every workload here is submitted plain to the research team's namespace, so the
governor (``kueue-config/platform.yaml``) labels it and Kueue admits it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import watch
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import NotFoundError

from e2e import manifests
from e2e.support import (
    KUEUE_API,
    WaitTimeout,
    condition,
    create,
    decode_topology_assignment,
    delete,
    history,
    is_true,
    job_manifest,
    list_objects,
    pause_pod_spec,
    resource_version,
    wait_for,
    workload_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

RESEARCH = "hyperpod-ns-research"
RESEARCH_QUEUE = "hyperpod-ns-research-localqueue"
RESEARCH_CLUSTER_QUEUE = "hyperpod-ns-research-clusterqueue"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
# KWOK's pod-complete stage (kustomize/stage/pod/general/pod-complete.yaml) reads its delay here.
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
# ... capped by the stage's jitter bound (5 s unless this annotation raises it): lifecycle.go Delay.
COMPLETE_JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"
RUN_LABEL = "kueue-governor.io/e2e-run"
RACK = manifests.TOPOLOGY_LEVELS[2]
HOSTNAME = manifests.TOPOLOGY_LEVELS[3]
KUEUE_POD_FINALIZER = "kueue.x-k8s.io/managed"


@pytest.fixture
def run_id() -> str:
    """A label value that marks every object (and pod) one test makes."""
    return secrets.token_hex(3)


@pytest.fixture
async def pod_cleanup(dynamic: DynamicClient, run_id: str) -> AsyncIterator[list[dict[str, Any]]]:
    """Objects appended are deleted after the test; then it waits until no pod of the test and
    no Workload of those pods is left (so their quota and node capacity are free again)."""
    objects: list[dict[str, Any]] = []
    yield objects
    for body in objects:
        await delete(dynamic, body)
    # KWOK's general pod-delete stage removes a deleted pod only once it has no finalizer; a
    # kubelet would stop the containers, and Kueue would then drop the finalizer it keeps on a
    # bare pod group's pods. Drop it here for those still running.
    pods = await dynamic.resources.get(api_version="v1", kind="Pod")
    for pod in await list_objects(dynamic, "v1", "Pod", RESEARCH, label_selector=f"{RUN_LABEL}={run_id}"):
        if pod["metadata"].get("deletionTimestamp") and KUEUE_POD_FINALIZER in pod["metadata"].get("finalizers", []):
            kept = [f for f in pod["metadata"]["finalizers"] if f != KUEUE_POD_FINALIZER]
            with contextlib.suppress(NotFoundError):
                await dynamic.patch(
                    pods,
                    {"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"], "finalizers": kept}},
                    name=pod["metadata"]["name"],
                    namespace=RESEARCH,
                    content_type="application/merge-patch+json",
                )

    async def gone() -> bool:
        pods = await list_objects(dynamic, "v1", "Pod", RESEARCH, label_selector=f"{RUN_LABEL}={run_id}")
        workloads = [
            workload
            for workload in await list_objects(dynamic, KUEUE_API, "Workload", RESEARCH)
            if workload["metadata"].get("labels", {}).get(RUN_LABEL) == run_id
            or any(o.get("uid") in {b.get("metadata", {}).get("uid") for b in objects} for o in _owners(workload))
        ]
        return not pods and not workloads

    await wait_for(gone, f"the pods and Workloads of run {run_id} to go", timeout=90)


def _owners(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj["metadata"].get("ownerReferences") or [])


def pod_template(run_id: str, gpus: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod template with no Kueue label: one container asking for ``gpus`` GPUs."""
    return {
        "metadata": {"labels": {RUN_LABEL: run_id}, "annotations": dict(annotations or {})},
        "spec": {
            # KWOK deletes a pod at a random time before its deletionTimestamp (pod-delete stage)
            "terminationGracePeriodSeconds": 1,
            **pause_pod_spec(gpus, "1", restart_policy=None),
        },
    }


def plain_job(name: str, run_id: str, pods: int, gpus: int, complete_after: str) -> dict[str, Any]:
    """A Job as a data scientist writes it (no Kueue label), whose pods KWOK completes after
    ``complete_after`` (a duration, e.g. ``"10s"``)."""
    template = pod_template(run_id, gpus, {COMPLETE_DELAY: complete_after, COMPLETE_JITTER: complete_after})
    template["spec"]["restartPolicy"] = "Never"
    return job_manifest(name, RESEARCH, pods, template, {RUN_LABEL: run_id})


async def node_labels(dynamic: DynamicClient) -> dict[str, dict[str, str]]:
    return {node["metadata"]["name"]: node["metadata"]["labels"] for node in await list_objects(dynamic, "v1", "Node")}


async def running_pods(dynamic: DynamicClient, run_id: str, count: int, timeout: float = 240) -> list[dict[str, Any]]:
    """Wait until ``count`` pods of the run are Running (bound, started by KWOK). The wait is long:
    the node capacity Kueue assigned may still hold earlier tests' pods in their grace period.
    (A run's pods once completed in KWOK's 5 s jitter bound whatever their delay, and a busy
    machine polled past that window: see ``COMPLETE_JITTER``.)"""

    async def running() -> list[dict[str, Any]] | None:
        pods = await list_objects(dynamic, "v1", "Pod", RESEARCH, label_selector=f"{RUN_LABEL}={run_id}")
        up = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Running"]
        return up if len(up) >= count else None

    try:
        return await wait_for(running, f"{count} pods of run {run_id} to be Running", timeout=timeout)
    except WaitTimeout as timeout_error:
        raise WaitTimeout(f"{timeout_error}\n{await pod_report(dynamic, run_id)}") from None


async def pod_report(dynamic: DynamicClient, run_id: str) -> str:
    """Why the run's pods are not Running: each pod's phase, node, gates and scheduling condition,
    and every other pod bound to a fake node that is not finished (what holds node capacity)."""
    lines = []
    for pod in await list_objects(dynamic, "v1", "Pod", RESEARCH, label_selector=f"{RUN_LABEL}={run_id}"):
        status = pod.get("status") or {}
        scheduled = condition(pod, "PodScheduled") or {}
        gates = [gate["name"] for gate in pod["spec"].get("schedulingGates") or []]
        lines.append(
            f"  {pod['metadata']['name']}: phase={status.get('phase')} node={pod['spec'].get('nodeName')} "
            f"gates={gates} nodeSelector={pod['spec'].get('nodeSelector')} "
            f"PodScheduled={scheduled.get('status')} {scheduled.get('reason')}: {scheduled.get('message')}"
        )
    for pod in await list_objects(dynamic, "v1", "Pod"):
        status = pod.get("status") or {}
        if pod["spec"].get("nodeName") and status.get("phase") not in ("Succeeded", "Failed"):
            lines.append(
                f"  holding {pod['spec']['nodeName']}: {pod['metadata']['namespace']}/{pod['metadata']['name']} "
                f"phase={status.get('phase')} deleting={pod['metadata'].get('deletionTimestamp')}"
            )
    for node in await list_objects(dynamic, "v1", "Node"):
        ready = (condition(node, "Ready") or {}).get("status")
        taints = [taint["key"] for taint in node["spec"].get("taints") or []]
        if ready != "True" or taints or node["spec"].get("unschedulable"):
            lines.append(f"  node {node['metadata']['name']}: Ready={ready} taints={taints}")
    return "\n".join(lines)


async def admitted(dynamic: DynamicClient, owner_uid: str, timeout: float = 60) -> dict[str, Any]:
    async def workload() -> dict[str, Any] | None:
        found = await workload_for(dynamic, RESEARCH, owner_uid)
        return found if found is not None and is_true(found, "Admitted") else None

    return await wait_for(workload, f"the Workload of {owner_uid} to be admitted", timeout=timeout)


async def first_pod_versions(
    dynamic: DynamicClient, since: str, run_id: str, count: int, timeout: float = 60
) -> list[dict[str, Any]]:
    """The first version (as created) of each of ``count`` pods of the run, from a watch opened
    at resourceVersion ``since``, so a pod created and changed before the watch is still seen
    as it was created."""
    resource = await dynamic.resources.get(api_version="v1", kind="Pod")
    first: dict[str, dict[str, Any]] = {}
    watcher = watch.Watch()

    async def collect() -> None:
        async for event in dynamic.watch(
            resource,
            namespace=RESEARCH,
            label_selector=f"{RUN_LABEL}={run_id}",
            resource_version=since,  # type: ignore[arg-type]  # typed int; the API takes the string
            timeout=int(timeout) + 5,
            watcher=watcher,
        ):
            raw = dict(event["raw_object"])
            first.setdefault(raw["metadata"]["name"], raw)
            if len(first) >= count:
                return

    try:
        await asyncio.wait_for(collect(), timeout)
    finally:
        watcher.stop()
        await watcher.close()
    return list(first.values())


async def test_job_pods_start_only_after_admission_and_land_in_the_assigned_rack(
    dynamic: DynamicClient, run_id: str, pod_cleanup: list[dict[str, Any]]
) -> None:
    since = await resource_version(dynamic, "v1", "Pod", RESEARCH)
    name = f"rack-{run_id}"
    # 2 pods of 8 GPUs: research's `topology: auto` makes that `required` at layer-3 (a rack
    # holds two hosts), and KWOK keeps them Running for an hour.
    created = await create(dynamic, plain_job(name, run_id, pods=2, gpus=8, complete_after="1h"))
    pod_cleanup.append(created)
    template = created["spec"]["template"]
    assert created["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE
    assert template["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] == RACK

    workload = await admitted(dynamic, created["metadata"]["uid"])
    assert workload["status"]["admission"]["clusterQueue"] == RESEARCH_CLUSTER_QUEUE
    pods = await running_pods(dynamic, run_id, 2)

    # Where Kueue's topology assignment put the pods, host by host.
    (pod_set,) = workload["status"]["admission"]["podSetAssignments"]
    levels, domains = decode_topology_assignment(pod_set["topologyAssignment"])
    assert levels[-1] == HOSTNAME, levels
    assigned = Counter({domain.values[-1]: domain.pods for domain in domains})
    nodes = await node_labels(dynamic)
    # The scheduler bound each pod to a host of the assignment, as many pods per host.
    bound = Counter(pod["spec"]["nodeName"] for pod in pods)
    assert bound == assigned, (bound, assigned)
    racks = {nodes[host][RACK] for host in bound}
    assert len(racks) == 1, {host: nodes[host][RACK] for host in bound}
    if RACK in levels:  # the assignment names the rack itself
        assert {domain.values[levels.index(RACK)] for domain in domains} == racks
    # Kueue's topology ungater lifted the gate and pinned each pod with node selectors that
    # only its node satisfies at the assigned levels.
    for pod in pods:
        assert TOPOLOGY_GATE not in [gate["name"] for gate in pod["spec"].get("schedulingGates") or []]
        selector = {k: v for k, v in (pod["spec"].get("nodeSelector") or {}).items() if k in manifests.TOPOLOGY_LEVELS}
        assert selector, pod["spec"].get("nodeSelector")
        assert all(nodes[pod["spec"]["nodeName"]][key] == value for key, value in selector.items()), selector

    # No pod existed before Kueue admitted the Workload: each pod was created after the version
    # of the Workload that first says Admitted (one etcd orders every write by revision), and
    # was created gated, unbound.
    admitted_versions = await history(
        dynamic,
        {"apiVersion": KUEUE_API, "kind": "Workload", "metadata": workload["metadata"]},
        since,
        lambda version: is_true(version, "Admitted"),
    )
    admitted_at = int(admitted_versions[-1]["metadata"]["resourceVersion"])
    for first in await first_pod_versions(dynamic, since, run_id, 2):
        assert int(first["metadata"]["resourceVersion"]) > admitted_at, first["metadata"]["name"]
        assert TOPOLOGY_GATE in [gate["name"] for gate in first["spec"].get("schedulingGates") or []]
        assert not first["spec"].get("nodeName")


async def test_deployment_statefulset_and_pod_group_run_through_pod_integration(
    dynamic: DynamicClient, run_id: str, pod_cleanup: list[dict[str, Any]]
) -> None:
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"serve-{run_id}", "namespace": RESEARCH, "labels": {RUN_LABEL: run_id}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": f"serve-{run_id}"}},
            "template": pod_template(run_id, 1),
        },
    }
    deployment["spec"]["template"]["metadata"]["labels"]["app"] = f"serve-{run_id}"
    statefulset: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": f"shard-{run_id}", "namespace": RESEARCH, "labels": {RUN_LABEL: run_id}},
        "spec": {
            "replicas": 2,
            "serviceName": f"shard-{run_id}",
            "selector": {"matchLabels": {"app": f"shard-{run_id}"}},
            "template": pod_template(run_id, 1),
        },
    }
    statefulset["spec"]["template"]["metadata"]["labels"]["app"] = f"shard-{run_id}"
    group = f"group-{run_id}"
    group_pods = []
    for index in range(2):
        template = pod_template(run_id, 1)
        template["metadata"]["labels"][POD_GROUP_NAME] = group
        template["metadata"]["annotations"][POD_GROUP_TOTAL] = "2"
        group_pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{group}-{index}", "namespace": RESEARCH, **template["metadata"]},
                "spec": {**template["spec"], "restartPolicy": "Never"},
            }
        )

    created = []
    for body in (deployment, statefulset, *group_pods):
        created.append(await create(dynamic, body))
        pod_cleanup.append(created[-1])
    # Governed: the queue label on each object and on the pod templates, where Kueue reads it.
    for obj in created:
        assert obj["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE, obj["kind"]
        if obj["kind"] != "Pod":
            assert obj["spec"]["template"]["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE

    pods = await running_pods(dynamic, run_id, 6)
    by_owner = Counter(((_owners(pod) or [{"kind": "none"}])[0]["kind"]) for pod in pods)
    assert by_owner == {"ReplicaSet": 2, "StatefulSet": 2, "none": 2}, by_owner
    for pod in pods:
        # Kueue's pod webhook gated each pod at creation; admission lifted the gate.
        assert ADMISSION_GATE not in [gate["name"] for gate in pod["spec"].get("schedulingGates") or []]
        assert pod["spec"]["nodeName"]
        assert pod["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE
    # Each workload was admitted by Kueue in research's ClusterQueue: one Workload per
    # Deployment pod (serving pods are admitted one by one), one for the StatefulSet's pod group
    # and one for the bare pod group.
    workloads = [
        workload
        for workload in await list_objects(dynamic, KUEUE_API, "Workload", RESEARCH)
        if {owner.get("uid") for owner in _owners(workload)} & {pod["metadata"]["uid"] for pod in pods}
    ]
    assert all(is_true(w, "Admitted") for w in workloads), [w["metadata"]["name"] for w in workloads]
    assert {w["status"]["admission"]["clusterQueue"] for w in workloads} == {RESEARCH_CLUSTER_QUEUE}
    pod_counts = sorted(sum(ps["count"] for ps in w["spec"]["podSets"]) for w in workloads)
    assert pod_counts == [1, 1, 2, 2], pod_counts


async def test_job_completes_after_the_kwok_delay_and_frees_its_quota_for_the_next(
    dynamic: DynamicClient, run_id: str, pod_cleanup: list[dict[str, Any]]
) -> None:
    nodes = [name for name, labels in (await node_labels(dynamic)).items() if manifests.FAKE_NODE_LABEL in labels]
    if len(nodes) * 8 > 64:
        pytest.skip("wants a Job of one pod per node to fit research's 64-GPU quota (default shape)")
    # Each Job takes every GPU of every node: the second fits only once the first is done.
    first = await create(dynamic, plain_job(f"first-{run_id}", run_id, len(nodes), 8, complete_after="10s"))
    pod_cleanup.append(first)
    first_workload = await admitted(dynamic, first["metadata"]["uid"])
    second = await create(dynamic, plain_job(f"second-{run_id}", run_id, len(nodes), 8, complete_after="1s"))
    pod_cleanup.append(second)

    async def pending() -> dict[str, Any] | None:
        workload = await workload_for(dynamic, RESEARCH, second["metadata"]["uid"])
        reserved = condition(workload, "QuotaReserved") if workload else None
        return workload if reserved is not None and reserved["status"] == "False" else None

    await wait_for(pending, "the second Job's Workload to wait for the first", timeout=60)

    async def complete(name: str) -> dict[str, Any] | None:
        jobs = await list_objects(dynamic, "batch/v1", "Job", RESEARCH, label_selector=f"{RUN_LABEL}={run_id}")
        job = next((j for j in jobs if j["metadata"]["name"] == name), None)
        return job if job is not None and is_true(job, "Complete") else None

    done = await wait_for(lambda: complete(first["metadata"]["name"]), "the first Job to complete", timeout=120)
    assert done["status"]["succeeded"] == len(nodes)
    finished = await wait_for(
        lambda: _finished(dynamic, first_workload), "Kueue to mark the first Workload Finished", timeout=60
    )
    second_workload = await admitted(dynamic, second["metadata"]["uid"], timeout=120)
    # Admitted only once the first had finished and given its quota back.
    finished_at = condition(finished, "Finished")["lastTransitionTime"]  # type: ignore[index]
    admitted_at = condition(second_workload, "Admitted")["lastTransitionTime"]  # type: ignore[index]
    assert admitted_at >= finished_at, (admitted_at, finished_at)
    await wait_for(lambda: complete(second["metadata"]["name"]), "the second Job to complete", timeout=120)


async def _finished(dynamic: DynamicClient, workload: dict[str, Any]) -> dict[str, Any] | None:
    objects = await list_objects(dynamic, KUEUE_API, "Workload", RESEARCH)
    current = next((w for w in objects if w["metadata"]["uid"] == workload["metadata"]["uid"]), None)
    return current if current is not None and is_true(current, "Finished") else None
