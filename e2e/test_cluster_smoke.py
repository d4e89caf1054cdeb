"""The control plane itself: Kueue admits a labelled Job with a topology-aware placement.

No governor here: the Job carries the queue label and the TAS annotation itself.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import manifests
from e2e.conftest import E2ECluster
from e2e.support import (
    KUEUE_API,
    condition,
    create,
    decode_topology_assignment,
    delete,
    delete_workload_object,
    get,
    is_true,
    job_manifest,
    list_objects,
    pause_pod_spec,
    wait_for,
    workload_for,
)

pytestmark = pytest.mark.e2e

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
RACK = manifests.TOPOLOGY_LEVELS[2]  # topology.k8s.aws/network-node-layer-3
HOSTNAME = "kubernetes.io/hostname"
INSTANCE_TYPE = "p5.48xlarge"


@pytest.fixture
async def gpu_queue(dynamic: DynamicClient, namespace: str) -> AsyncIterator[str]:
    """Topology, ResourceFlavor, ClusterQueue (for this namespace only) and a LocalQueue ``gpus``."""
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": KUEUE_API,
            "kind": "Topology",
            "metadata": {"name": f"net-{namespace}"},
            "spec": {"levels": [{"nodeLabel": level} for level in manifests.TOPOLOGY_LEVELS]},
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": f"p5-{namespace}"},
            "spec": {
                "nodeLabels": {manifests.INSTANCE_TYPE_LABEL: INSTANCE_TYPE},
                "topologyName": f"net-{namespace}",
            },
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "ClusterQueue",
            "metadata": {"name": f"cq-{namespace}"},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": f"p5-{namespace}",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "1536"},
                                    {"name": "memory", "nominalQuota": "16Ti"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "64"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": "gpus", "namespace": namespace},
            "spec": {"clusterQueue": f"cq-{namespace}"},
        },
    ]
    for obj in objects:
        await create(dynamic, obj)

    async def cluster_queue_active() -> bool:
        queue = await get(dynamic, KUEUE_API, "ClusterQueue", f"cq-{namespace}")
        return queue is not None and is_true(queue, "Active")

    await wait_for(cluster_queue_active, f"ClusterQueue cq-{namespace} to become Active")
    yield "gpus"
    # The Jobs first, waiting for the garbage collector to take their Workloads: an admitted
    # Workload would keep its topology capacity (two GPU hosts) until then.
    for job in await list_objects(dynamic, "batch/v1", "Job", namespace):
        await delete_workload_object(dynamic, {**job, "apiVersion": "batch/v1", "kind": "Job"})
    for obj in reversed(objects):
        await delete(dynamic, obj)


def gpu_job(name: str, namespace: str, queue: str, pods: int, gpus_per_pod: int) -> dict[str, Any]:
    """A Job labelled for ``queue`` whose pods must share one rack (network-node-layer-3)."""
    template = {"metadata": {"annotations": {REQUIRED_TOPOLOGY: RACK}}, "spec": pause_pod_spec(gpus_per_pod, "4")}
    return job_manifest(name, namespace, pods, template, {QUEUE_LABEL: queue})


async def gpu_nodes(dynamic: DynamicClient) -> dict[str, dict[str, str]]:
    """Name -> labels of the nodes of the test flavor's instance type."""
    return {
        node["metadata"]["name"]: node["metadata"]["labels"]
        for node in await list_objects(dynamic, "v1", "Node")
        if node["metadata"].get("labels", {}).get(manifests.INSTANCE_TYPE_LABEL) == INSTANCE_TYPE
    }


async def test_api_server_reports_a_release_version(api: k8s.ApiClient, e2e_cluster: E2ECluster) -> None:
    """Kueue parses /version at start; a locally built apiserver must carry real version ldflags."""
    version = await k8s.VersionApi(api).get_code()
    assert re.fullmatch(r"v1\.\d+\.\d+.*", version.git_version), version.git_version
    if e2e_cluster.local is not None:
        assert version.git_version == e2e_cluster.local.versions["kube-apiserver"]
        assert (version.major, version.minor) == ("1", version.git_version.split(".")[1])


async def test_nodes_are_ready_gpu_nodes_with_aws_topology(dynamic: DynamicClient, e2e_cluster: E2ECluster) -> None:
    if e2e_cluster.local is None:
        pytest.skip("checks the fake nodes of the local control plane")
    shape = manifests.TopologyShape.parse(e2e_cluster.local.shape)
    nodes = {node["metadata"]["name"]: node for node in await list_objects(dynamic, "v1", "Node")}
    # The real node (KGOV_E2E_REAL_NODE=1) is no fake GPU node: test_chart_real_node checks it.
    if e2e_cluster.local.real_node is not None:
        assert (
            nodes.pop(e2e_cluster.local.real_node)["metadata"]["labels"][manifests.INSTANCE_TYPE_LABEL] == INSTANCE_TYPE
        )
    assert sorted(nodes) == sorted(e2e_cluster.node_names)
    assert len(nodes) == shape.node_count
    for name, node in nodes.items():
        labels = node["metadata"]["labels"]
        assert labels[HOSTNAME] == name
        assert all(level in labels for level in manifests.TOPOLOGY_LEVELS)
        assert labels[manifests.INSTANCE_TYPE_LABEL] == INSTANCE_TYPE
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(shape.gpus_per_node)
        assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
        assert not node["spec"].get("taints"), f"{name} is tainted: {node['spec']['taints']}"
        assert not node["spec"].get("unschedulable")
    per_rack = Counter(node["metadata"]["labels"][RACK] for node in nodes.values())
    assert set(per_rack.values()) == {shape.hosts}
    assert len(per_rack) == shape.spines * shape.blocks * shape.racks


async def test_kueue_admits_labelled_job_with_topology_assignment(
    dynamic: DynamicClient, namespace: str, gpu_queue: str
) -> None:
    # Two pods of 8 GPUs: one rack of two hosts can hold them.
    created = await create(dynamic, gpu_job("train", namespace, gpu_queue, pods=2, gpus_per_pod=8))

    # Kueue's mutating webhook suspended the Job at creation: it cannot start before admission.
    assert created["spec"]["suspend"] is True
    uid = created["metadata"]["uid"]

    async def admitted_workload() -> dict[str, Any] | None:
        workload = await workload_for(dynamic, namespace, uid)
        return workload if workload is not None and is_true(workload, "Admitted") else None

    workload = await wait_for(admitted_workload, "the Job's Workload to be admitted", timeout=60)
    assert workload["spec"]["queueName"] == gpu_queue
    admission = workload["status"]["admission"]
    assert admission["clusterQueue"] == f"cq-{namespace}"
    (pod_set,) = admission["podSetAssignments"]
    assert pod_set["count"] == 2
    assert pod_set["flavors"]["nvidia.com/gpu"] == f"p5-{namespace}"
    assert pod_set["resourceUsage"]["nvidia.com/gpu"] == "16"

    levels, domains = decode_topology_assignment(pod_set["topologyAssignment"])
    assert levels[-1] == HOSTNAME
    assert sum(domain.pods for domain in domains) == 2
    hosts = [domain.values[-1] for domain in domains]
    nodes = await gpu_nodes(dynamic)
    assert set(hosts) <= set(nodes), f"assigned hosts {hosts} are not GPU nodes"
    # The required level was honoured: every assigned host is in one and the same rack.
    assert len({nodes[host][RACK] for host in hosts}) == 1, {host: nodes[host][RACK] for host in hosts}

    async def unsuspended() -> dict[str, Any] | None:
        job = await get(dynamic, "batch/v1", "Job", "train", namespace)
        return job if job is not None and job["spec"]["suspend"] is False else None

    job = await wait_for(unsuspended, "Kueue to unsuspend the admitted Job")
    template = job["spec"]["template"]
    # TAS placement: the flavor's node labels are injected, and pods are gated until Kueue
    # binds each one to its assigned domain.
    assert template["spec"]["nodeSelector"][manifests.INSTANCE_TYPE_LABEL] == INSTANCE_TYPE
    assert "kueue.x-k8s.io/topology" in [gate["name"] for gate in template["spec"].get("schedulingGates", [])]
    assert template["metadata"]["annotations"][REQUIRED_TOPOLOGY] == RACK


async def test_job_too_big_for_any_rack_stays_suspended(dynamic: DynamicClient, namespace: str, gpu_queue: str) -> None:
    """A required rack-level placement that no rack can hold is not admitted, though quota would be."""
    largest_rack = max(Counter(labels[RACK] for labels in (await gpu_nodes(dynamic)).values()).values())
    pods = largest_rack + 1  # 8 GPUs each: one pod more than the largest rack has hosts
    created = await create(dynamic, gpu_job("too-big", namespace, gpu_queue, pods=pods, gpus_per_pod=8))
    assert 8 * pods <= 64, "the test wants quota to fit, so only the topology can refuse"

    async def pending_workload() -> dict[str, Any] | None:
        workload = await workload_for(dynamic, namespace, created["metadata"]["uid"])
        reserved = condition(workload, "QuotaReserved") if workload else None
        return workload if reserved is not None and reserved["status"] == "False" else None

    workload = await wait_for(pending_workload, "Kueue to report the Workload pending", timeout=60)
    assert not is_true(workload, "Admitted")
    reserved = condition(workload, "QuotaReserved")
    assert reserved is not None and "topology" in reserved["message"], reserved
    job = await get(dynamic, "batch/v1", "Job", "too-big", namespace)
    assert job is not None and job["spec"]["suspend"] is True
