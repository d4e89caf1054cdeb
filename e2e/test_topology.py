"""``kgov topology`` and ``kgov topology label`` against the real kube-apiserver and Kueue.

The tree is read live: free accelerators are allocatable minus the requests of pods bound to a
node (a Pod created with ``spec.nodeName``, as a scheduler would bind it) and the usage Kueue's
topology assignment gives an admitted Workload. Labels from a DescribeInstanceTopology document
are applied to Node objects the test creates (cordoned and never Ready, so Kueue never places
anything there) and read back.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from e2e.conftest import E2ECluster
from e2e.support import (
    condition,
    create,
    decode_topology_assignment,
    get,
    is_true,
    kgov_command,
    wait_for,
    workload_for,
)
from e2e.test_cluster_smoke import gpu_job, gpu_queue

pytestmark = pytest.mark.e2e

__all__ = ["gpu_queue"]  # the fixture, shared with the smoke test

GPU = "nvidia.com/gpu"
LAYER = "topology.k8s.aws/network-node-layer-{}"
TAS_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
HOSTNAME = "kubernetes.io/hostname"


#: The label the test's own Node objects carry (not KWOK's fake-node label: those would turn Ready).
OWN_LABEL = "kueue-governor.io/e2e-topology-node"


def kgov(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*kgov_command(), *args], capture_output=True, text=True, check=False, timeout=120)


def live_tree(kubeconfig: Path, *options: str) -> dict[str, Any]:
    result = kgov("topology", "--kubeconfig", str(kubeconfig), "-o", "json", *options)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def hosts_of(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Host name → host entry of a ``--format json`` tree."""
    out: dict[str, dict[str, Any]] = {}

    def visit(domain: dict[str, Any]) -> None:
        for host in domain.get("hosts", []):
            out[host["name"]] = host
        for child in domain.get("domains", []):
            visit(child)

    visit(document)
    return out


def bound_pod(name: str, namespace: str, node: str, gpus: int, annotations: dict[str, str] | None = None) -> Any:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, annotations=annotations),
        spec=k8s.V1PodSpec(
            node_name=node,
            containers=[
                k8s.V1Container(
                    name="main",
                    image="registry.k8s.io/pause:3.10",
                    resources=k8s.V1ResourceRequirements(requests={GPU: str(gpus)}, limits={GPU: str(gpus)}),
                )
            ],
        ),
    )


async def test_live_tree_counts_bound_pods_and_admitted_workloads(
    api: k8s.ApiClient, dynamic: DynamicClient, namespace: str, gpu_queue: str, e2e_cluster: E2ECluster
) -> None:
    before = live_tree(e2e_cluster.kubeconfig)
    before_hosts = hosts_of(before)
    assert {name for name in before_hosts if name.startswith("gpu-")} >= set(e2e_cluster.node_names)
    assert before["levels"][:3] == [LAYER.format(i) for i in (1, 2, 3)]

    # A Job of 2 pods x 8 GPUs that must share a rack: Kueue admits it with a topology assignment.
    job = await create(dynamic, gpu_job("topo", namespace, gpu_queue, pods=2, gpus_per_pod=8))

    async def admitted() -> dict[str, Any] | None:
        workload = await workload_for(dynamic, namespace, job["metadata"]["uid"])
        return workload if workload is not None and is_true(workload, "Admitted") else None

    workload = await wait_for(admitted, "the Job's Workload to be admitted", timeout=60)
    _, domains = decode_topology_assignment(
        workload["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    )
    assigned = {domain.values[-1]: domain.pods for domain in domains}
    assert sum(assigned.values()) == 2

    # Pods bound by name to two other hosts that were wholly free: one plain (counted on its
    # node, as Kueue counts non-TAS pods), one TAS pod (left to its Workload, as Kueue does).
    free_hosts = [
        name
        for name, host in sorted(before_hosts.items())
        if name.startswith("gpu-") and name not in assigned and host["free"] == host["allocatable"] == 8
    ]
    assert len(free_hosts) >= 2, before_hosts
    plain, tas = free_hosts[:2]
    core = k8s.CoreV1Api(api)
    await core.create_namespaced_pod(namespace, bound_pod("plain", namespace, plain, 3))
    await core.create_namespaced_pod(namespace, bound_pod("tas", namespace, tas, 5, {TAS_ANNOTATION: LAYER.format(3)}))
    try:
        after = live_tree(e2e_cluster.kubeconfig)
        after_hosts = hosts_of(after)
        for host, pods in assigned.items():
            assert after_hosts[host]["free"] == before_hosts[host]["free"] - 8 * pods, host
        assert after_hosts[plain]["free"] == 8 - 3
        assert after_hosts[tas]["free"] == 8
        assert after["free"] == before["free"] - 16 - 3
        untouched = set(before_hosts) - set(assigned) - {plain}
        assert all(after_hosts[name]["free"] == before_hosts[name]["free"] for name in untouched)

        # The same tree, as a table, with the levels of the Kueue Topology object.
        table = kgov("topology", "--kubeconfig", str(e2e_cluster.kubeconfig), "--topology", f"net-{namespace}")
        assert table.returncode == 0, table.stderr
        assert f"{GPU}: " in table.stdout.splitlines()[0]
        assert f"{after['free']} free" in table.stdout.splitlines()[0]
        row = next(line.split() for line in table.stdout.splitlines() if line.split()[1:2] == [plain])
        assert row == ["host", plain, "1", "0", "8", "5"]

        # Kueue sees the same 5 free GPUs on that host: a pod pinned there asking for 6 is not
        # admitted (no domain fits), one asking for 5 is, and then nothing is free there.
        async def pinned(name: str, gpus: int) -> dict[str, Any]:
            body = gpu_job(name, namespace, gpu_queue, pods=1, gpus_per_pod=gpus)
            body["spec"]["template"]["spec"]["nodeSelector"] = {HOSTNAME: plain}
            return await create(dynamic, body)

        too_big = await pinned("six", 6)

        async def pending() -> dict[str, Any] | None:
            found = await workload_for(dynamic, namespace, too_big["metadata"]["uid"])
            reserved = condition(found, "QuotaReserved") if found else None
            return found if reserved is not None and reserved["status"] == "False" else None

        refused = await wait_for(pending, "Kueue to leave the 6-GPU pod pending", timeout=60)
        assert not is_true(refused, "Admitted")
        fits = await pinned("five", 5)

        async def fits_admitted() -> dict[str, Any] | None:
            found = await workload_for(dynamic, namespace, fits["metadata"]["uid"])
            return found if found is not None and is_true(found, "Admitted") else None

        placed = await wait_for(fits_admitted, "Kueue to admit the 5-GPU pod", timeout=60)
        _, on = decode_topology_assignment(placed["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"])
        assert [domain.values[-1] for domain in on] == [plain]
        assert hosts_of(live_tree(e2e_cluster.kubeconfig))[plain]["free"] == 0

        missing = kgov("topology", "--kubeconfig", str(e2e_cluster.kubeconfig), "--topology", "no-such-topology")
        assert missing.returncode == 2
        assert "Topology 'no-such-topology' not found" in missing.stderr
    finally:
        for name in ("plain", "tas"):
            # No kubelet confirms the deletion: remove at once.
            await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


@pytest.fixture
async def labelled_nodes(api: k8s.ApiClient) -> AsyncIterator[dict[str, str]]:
    """Three Node objects with AWS providerIDs (node name → instance id), cordoned and never
    Ready: without the fake-node label KWOK does not manage them, so nothing heartbeats for them.
    Deleted afterwards."""
    core = k8s.CoreV1Api(api)
    suffix = secrets.token_hex(3)
    nodes = {f"e2e-topology-{suffix}-{i}": f"i-0{secrets.token_hex(8)}" for i in range(3)}
    for name, instance in nodes.items():
        await core.create_node(
            k8s.V1Node(
                metadata=k8s.V1ObjectMeta(name=name, labels={OWN_LABEL: "true"}),
                spec=k8s.V1NodeSpec(provider_id=f"aws:///us-east-1a/{instance}", unschedulable=True),
            )
        )
    yield nodes
    for name in nodes:
        await core.delete_node(name)


def describe_instance_topology(instances: dict[str, list[str]]) -> dict[str, Any]:
    """A DescribeInstanceTopology response in the shape ``aws ec2 describe-instance-topology`` prints."""
    return {
        "Instances": [
            {
                "InstanceId": instance,
                "InstanceType": "p6-b200.48xlarge" if len(nodes) == 4 else "p5.48xlarge",
                "GroupName": "ml-cpg",
                "NetworkNodes": nodes,
                "ZoneId": "use1-az6",
                "AvailabilityZone": "us-east-1a",
            }
            for instance, nodes in instances.items()
        ]
    }


async def test_label_applies_describe_instance_topology(
    dynamic: DynamicClient, labelled_nodes: dict[str, str], e2e_cluster: E2ECluster, tmp_path: Path
) -> None:
    (first, first_id), (second, second_id), (third, _) = labelled_nodes.items()
    absent = "i-0fffffffffffffff0"
    document = tmp_path / "topology.json"
    document.write_text(
        json.dumps(
            describe_instance_topology(
                {
                    first_id: ["nn-e2e-1", "nn-e2e-2", "nn-e2e-3"],
                    second_id: ["nn-e2e-1", "nn-e2e-2", "nn-e2e-4", "nn-e2e-5"],
                    absent: ["nn-e2e-1", "nn-e2e-2", "nn-e2e-6"],
                }
            )
        )
    )
    kubeconfig = str(e2e_cluster.kubeconfig)

    printed = kgov("topology", "label", "--from", str(document), "--kubeconfig", kubeconfig)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines() == [
        f"kubectl label node {first} {LAYER.format(1)}=nn-e2e-1 {LAYER.format(2)}=nn-e2e-2 "
        f"{LAYER.format(3)}=nn-e2e-3 --overwrite",
        f"kubectl label node {second} {LAYER.format(1)}=nn-e2e-1 {LAYER.format(2)}=nn-e2e-2 "
        f"{LAYER.format(3)}=nn-e2e-4 {LAYER.format(4)}=nn-e2e-5 --overwrite",
    ]
    assert f"1 instances with no node: {absent}" in printed.stderr
    no_instance = next(line for line in printed.stderr.splitlines() if "nodes with no instance" in line)
    assert third in no_instance
    assert all(name in no_instance for name in e2e_cluster.node_names)  # the fake GPU nodes have no providerID
    node = await get(dynamic, "v1", "Node", first)
    assert node is not None and LAYER.format(1) not in node["metadata"].get("labels", {})  # printing changes nothing

    applied = kgov("topology", "label", "--from", str(document), "--kubeconfig", kubeconfig, "--apply")
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.splitlines() == [f"node/{first} labeled", f"node/{second} labeled"]
    for name, layers in (
        (first, ["nn-e2e-1", "nn-e2e-2", "nn-e2e-3"]),
        (second, ["nn-e2e-1", "nn-e2e-2", "nn-e2e-4", "nn-e2e-5"]),
    ):
        stored = await get(dynamic, "v1", "Node", name)
        assert stored is not None
        labels = stored["metadata"]["labels"]
        assert {key: labels.get(key) for key in (LAYER.format(i) for i in range(1, 5))} == {
            LAYER.format(i): layers[i - 1] if i <= len(layers) else None for i in range(1, 5)
        }
        assert labels[OWN_LABEL] == "true"  # other labels kept

    again = kgov("topology", "label", "--from", str(document), "--kubeconfig", kubeconfig, "--apply")
    assert again.returncode == 0, again.stderr
    assert again.stdout == ""
    assert "0 labelled, 2 already labelled" in again.stderr

    # The labelled nodes show in the tree under their network nodes, marked NotReady and cordoned.
    tree = kgov("topology", "--kubeconfig", kubeconfig, "-o", "tree")
    assert tree.returncode == 0, tree.stderr
    assert "nn-e2e-5 (layer-4)" in tree.stdout
    assert f"{second}  0/0 free  [NotReady, cordoned]" in tree.stdout


def test_label_refuses_a_document_of_the_wrong_shape(e2e_cluster: E2ECluster, tmp_path: Path) -> None:
    document = tmp_path / "reservations.json"
    document.write_text(json.dumps({"Reservations": [{"Instances": []}]}))
    result = kgov("topology", "label", "--from", str(document), "--kubeconfig", str(e2e_cluster.kubeconfig), "--apply")
    assert result.returncode == 2
    assert "an object with an Instances list" in result.stderr


async def test_a_node_with_a_taint_no_flavor_tolerates_is_marked_and_kueue_leaves_it_out(
    api: k8s.ApiClient, dynamic: DynamicClient, namespace: str, gpu_queue: str, e2e_cluster: E2ECluster
) -> None:
    """A wholly free host tainted ``key=yes:NoSchedule`` (no ResourceFlavor tolerates it) is shown
    tainted with nothing free, and Kueue agrees: a 1-GPU pod pinned there is not admitted until
    the taint is removed."""
    before_hosts = hosts_of(live_tree(e2e_cluster.kubeconfig))
    host = next(
        name
        for name, entry in sorted(before_hosts.items())
        if name.startswith("gpu-") and entry["free"] == entry["allocatable"] == 8 and not entry["taints"]
    )
    key = f"e2e-maint-{secrets.token_hex(3)}"
    core = k8s.CoreV1Api(api)

    async def set_taints(change: Any) -> None:
        """Read, change and replace the Node (its taints list is replaced, not merged); again on
        a conflict (KWOK's heartbeats update the Node too)."""
        for _ in range(10):
            node = await core.read_node(host)
            node.spec.taints = change(list(node.spec.taints or [])) or None
            try:
                await core.replace_node(host, node)
                return
            except k8s.ApiException as exc:
                if exc.status != 409:
                    raise
        raise AssertionError(f"Node {host} kept changing under the test")

    maintenance = k8s.V1Taint(key=key, value="yes", effect="NoSchedule")
    await set_taints(lambda taints: [*taints, maintenance])
    try:
        entry = hosts_of(live_tree(e2e_cluster.kubeconfig))[host]
        assert (entry["free"], entry["allocatable"], entry["taints"]) == (0, 8, [f"{key}=yes:NoSchedule"])
        table = kgov("topology", "--kubeconfig", str(e2e_cluster.kubeconfig))
        row = next(line.split() for line in table.stdout.splitlines() if line.split()[1:2] == [host])
        assert row == ["host", host, "1", "1", "8", "0", "tainted", f"{key}=yes:NoSchedule"]

        body = gpu_job("tainted", namespace, gpu_queue, pods=1, gpus_per_pod=1)
        body["spec"]["template"]["spec"]["nodeSelector"] = {HOSTNAME: host}
        job = await create(dynamic, body)

        async def pending() -> dict[str, Any] | None:
            found = await workload_for(dynamic, namespace, job["metadata"]["uid"])
            reserved = condition(found, "QuotaReserved") if found else None
            return found if reserved is not None and reserved["status"] == "False" else None

        refused = await wait_for(pending, "Kueue to leave the pod pinned to the tainted host pending", timeout=60)
        assert not is_true(refused, "Admitted")
    finally:
        await set_taints(lambda taints: [t for t in taints if t.key != key])

    async def admitted() -> dict[str, Any] | None:
        found = await workload_for(dynamic, namespace, job["metadata"]["uid"])
        return found if found is not None and is_true(found, "Admitted") else None

    await wait_for(admitted, "Kueue to admit the pinned pod once the taint is removed", timeout=180)
