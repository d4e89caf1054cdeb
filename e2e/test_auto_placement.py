"""Topology mode ``auto``'s co-placement and slices against the real Kueue v0.19.2.

A governor is started for the bundled platform with team research's ``topology`` set to ``auto``
with no level cap (the bundled one caps it at the rack level), on the default fake cluster
(1 spine × 2 blocks × 2 racks × 2 hosts of 8 GPUs). What it writes must pass Kueue's webhooks and
be admitted with the topology assignment it asks for:

* a PyTorchJob and an MPIJob whose driver (1 pod, 1 CPU) is grouped with 2 workers of 8 GPUs
  (``podset-group-name``, required at the rack): Kueue places driver and workers in one rack;
* a JobSet whose podset of 1 pod (its one other podset of 2 workers of 8 GPUs) is grouped the same
  way (``driver-workers``): Kueue's JobSet webhook accepts the group and places it in one rack;
* a JobSet of two podsets of 1 pod of 8 GPUs each, which need a rack together though each fits a
  host: grouped (``b-a``) at the rack, and placed by Kueue on two hosts of one rack;
* a Job of 4 pods of 8 GPUs, larger than a rack: required at the block, in slices of 2 at the
  rack: Kueue places 2 pods in each of the two racks of one block;
* a Kueue pod group of 3 bare Pods of 8 GPUs: each Pod, sized by its ``pod-group-total-count``
  (3, more than a rack holds), comes back required at the block, without ``podset-group-name``;
  Kueue admits the group with all 3 pods in one block.

Kueue's own refusals of the groups auto never makes (three podsets, a slice annotation on a
member, different levels) are checked in a namespace of no team, where only Kueue decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import ConflictError, NotFoundError

from e2e.support import (
    BUNDLED_PLATFORM,
    Cleanup,
    Generated,
    Refused,
    create_with_warnings,
    decode_topology_assignment,
    delete,
    is_true,
    job_manifest,
    list_objects,
    pause_pod_spec,
    wait_for,
    workload_for,
)

pytestmark = pytest.mark.e2e

RESEARCH = "hyperpod-ns-research"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
SLICE_LEVEL = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
GROUP = "kueue.x-k8s.io/podset-group-name"
BLOCK = "topology.k8s.aws/network-node-layer-2"
RACK = "topology.k8s.aws/network-node-layer-3"
HOSTNAME = "kubernetes.io/hostname"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_POD_FINALIZER = "kueue.x-k8s.io/managed"


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


@pytest.fixture
def uncapped_auto(bundled_config: Generated, governor: Callable[[Path], str], tmp_path: Path) -> str:
    """The bundled platform, research's topology ``auto`` without a level: the governor's URL."""
    platform = yaml.safe_load(BUNDLED_PLATFORM.read_text())
    (research,) = [team for team in platform["teams"] if team["name"] == "research"]
    research["policy"]["topology"] = {"mode": "auto", "enforcement": "default"}
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(platform))
    return governor(path)


def template(gpus: int, cpu: str, restart_policy: str = "Never") -> dict[str, Any]:
    return {"spec": pause_pod_spec(gpus, cpu, "64Mi", restart_policy)}


def kubeflow(kind: str, api_version: str, specs: str, driver: str, workers: int) -> dict[str, Any]:
    restart = {"restartPolicy": "OnFailure"}
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": unique(kind.lower()), "namespace": RESEARCH},
        "spec": {
            specs: {
                driver: {**restart, "replicas": 1, "template": template(0, "1", "OnFailure")},
                "Worker": {**restart, "replicas": workers, "template": template(8, "1", "OnFailure")},
            }
        },
    }


async def admitted(dynamic: DynamicClient, created: dict[str, Any]) -> dict[str, Any]:
    uid = created["metadata"]["uid"]

    async def probe() -> dict[str, Any] | None:
        workload = await workload_for(dynamic, RESEARCH, uid)
        return workload if workload is not None and is_true(workload, "Admitted") else None

    return await wait_for(probe, f"{created['kind']}'s Workload to be admitted", timeout=90)


async def hosts_by_podset(dynamic: DynamicClient, workload: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Podset → host → pods, from the Workload's topology assignment."""
    out: dict[str, dict[str, int]] = {}
    for assignment in workload["status"]["admission"]["podSetAssignments"]:
        levels, domains = decode_topology_assignment(assignment["topologyAssignment"])
        assert levels[-1] == HOSTNAME
        out[assignment["name"]] = {domain.values[-1]: domain.pods for domain in domains}
    return out


async def node_labels(dynamic: DynamicClient) -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in await list_objects(dynamic, "v1", "Node")}


@pytest.mark.parametrize(
    ("kind", "api_version", "specs", "driver", "name"),
    [
        ("PyTorchJob", "kubeflow.org/v1", "pytorchReplicaSpecs", "Master", "master"),
        ("MPIJob", "kubeflow.org/v2beta1", "mpiReplicaSpecs", "Launcher", "launcher"),
    ],
)
@pytest.mark.usefixtures("uncapped_auto")
async def test_a_driver_grouped_with_its_workers_is_admitted_in_one_rack(
    dynamic: DynamicClient, cleanup: Cleanup, kind: str, api_version: str, specs: str, driver: str, name: str
) -> None:
    body = cleanup.add(kubeflow(kind, api_version, specs, driver, workers=2))
    created = (await create_with_warnings(dynamic, body)).obj
    group = {GROUP: f"{name}-worker", REQUIRED: RACK}
    for role in (driver, "Worker"):
        annotations = created["spec"][specs][role]["template"]["metadata"]["annotations"]
        assert {key: annotations.get(key) for key in group} == group, role
        assert SLICE_LEVEL not in annotations
    workload = await admitted(dynamic, created)
    requests = {podset["name"]: podset["topologyRequest"] for podset in workload["spec"]["podSets"]}
    for podset in (name, "worker"):
        assert requests[podset]["required"] == RACK, requests
        assert requests[podset]["podSetGroupName"] == f"{name}-worker", requests
    placed = await hosts_by_podset(dynamic, workload)
    assert sum(placed[name].values()) == 1 and sum(placed["worker"].values()) == 2
    labels = await node_labels(dynamic)
    racks = {labels[host][RACK] for pods in placed.values() for host in pods}
    assert len(racks) == 1, f"driver and workers in racks {racks}: {placed}"


def replicated_job(name: str, replicas: int, gpus: int) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "template": {"spec": {"parallelism": 1, "completions": 1, "template": template(gpus, "1")}},
    }


@pytest.mark.usefixtures("uncapped_auto")
async def test_a_jobsets_podset_of_one_pod_grouped_with_the_other_is_admitted_in_one_rack(
    dynamic: DynamicClient, cleanup: Cleanup
) -> None:
    # The workers first: the driver is found by its 1 pod, not by its name or place.
    body = cleanup.add(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": unique("jobset"), "namespace": RESEARCH},
            "spec": {"replicatedJobs": [replicated_job("workers", 2, 8), replicated_job("driver", 1, 0)]},
        }
    )
    created = (await create_with_warnings(dynamic, body)).obj
    group = {GROUP: "driver-workers", REQUIRED: RACK}
    for job in created["spec"]["replicatedJobs"]:
        annotations = job["template"]["spec"]["template"]["metadata"]["annotations"]
        assert {key: annotations.get(key) for key in group} == group, job["name"]
        assert SLICE_LEVEL not in annotations
    workload = await admitted(dynamic, created)
    requests = {podset["name"]: podset["topologyRequest"] for podset in workload["spec"]["podSets"]}
    for podset in ("driver", "workers"):
        assert requests[podset]["required"] == RACK, requests
        assert requests[podset]["podSetGroupName"] == "driver-workers", requests
    placed = await hosts_by_podset(dynamic, workload)
    assert sum(placed["driver"].values()) == 1 and sum(placed["workers"].values()) == 2
    labels = await node_labels(dynamic)
    racks = {labels[host][RACK] for pods in placed.values() for host in pods}
    assert len(racks) == 1, f"driver and workers in racks {racks}: {placed}"


@pytest.mark.usefixtures("uncapped_auto")
async def test_two_podsets_of_one_pod_that_need_a_rack_together_are_grouped_and_admitted_in_one_rack(
    dynamic: DynamicClient, cleanup: Cleanup
) -> None:
    # Each pod of 8 GPUs alone fits a host; the pair needs a rack (2 hosts of 8 GPUs). The workers
    # are 1 pod, on one host at any level, so auto groups them at the rack the pair needs.
    body = cleanup.add(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": unique("jobset"), "namespace": RESEARCH},
            "spec": {"replicatedJobs": [replicated_job("a", 1, 8), replicated_job("b", 1, 8)]},
        }
    )
    created = (await create_with_warnings(dynamic, body)).obj
    group = {GROUP: "b-a", REQUIRED: RACK}
    for job in created["spec"]["replicatedJobs"]:
        annotations = job["template"]["spec"]["template"]["metadata"]["annotations"]
        assert {key: annotations.get(key) for key in group} == group, job["name"]
    workload = await admitted(dynamic, created)
    requests = {podset["name"]: podset["topologyRequest"] for podset in workload["spec"]["podSets"]}
    assert {name: (r["required"], r["podSetGroupName"]) for name, r in requests.items()} == {
        "a": (RACK, "b-a"),
        "b": (RACK, "b-a"),
    }
    placed = await hosts_by_podset(dynamic, workload)
    assert sum(placed["a"].values()) == 1 and sum(placed["b"].values()) == 1
    hosts = {host for pods in placed.values() for host in pods}
    assert len(hosts) == 2, f"two pods of 8 GPUs on hosts of 8 GPUs: {placed}"
    labels = await node_labels(dynamic)
    racks = {labels[host][RACK] for host in hosts}
    assert len(racks) == 1, f"the pair in racks {racks}: {placed}"


async def _delete_pods(dynamic: DynamicClient, pods: list[dict[str, Any]]) -> None:
    """Delete bare pods of a pod group and wait until they are gone: KWOK never stops their
    containers, so Kueue's finalizer on them is dropped here."""
    resource = await dynamic.resources.get(api_version="v1", kind="Pod")
    for pod in pods:
        await delete(dynamic, pod)

    async def gone() -> bool:
        left = 0
        for pod in pods:
            with contextlib.suppress(NotFoundError):
                current = dict(
                    (await dynamic.get(resource, name=pod["metadata"]["name"], namespace=RESEARCH)).to_dict()
                )
                left += 1
                finalizers = current["metadata"].get("finalizers") or []
                if KUEUE_POD_FINALIZER in finalizers:
                    kept = [f for f in finalizers if f != KUEUE_POD_FINALIZER]
                    patch = {
                        "metadata": {"resourceVersion": current["metadata"]["resourceVersion"], "finalizers": kept}
                    }
                    with contextlib.suppress(NotFoundError, ConflictError):  # changed since: the next poll
                        await dynamic.patch(
                            resource,
                            patch,
                            name=pod["metadata"]["name"],
                            namespace=RESEARCH,
                            content_type="application/merge-patch+json",
                        )
        return left == 0

    await wait_for(gone, "the pod group's pods to be deleted", timeout=90)


@pytest.mark.usefixtures("uncapped_auto")
async def test_a_pod_group_sized_by_its_total_count_is_admitted_in_one_block(dynamic: DynamicClient) -> None:
    group = unique("group")
    pods: list[dict[str, Any]] = []
    try:
        for index in range(3):
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{group}-{index}",
                    "namespace": RESEARCH,
                    "labels": {POD_GROUP_NAME: group},
                    "annotations": {POD_GROUP_TOTAL: "3"},
                },
                "spec": {"terminationGracePeriodSeconds": 1, **pause_pod_spec(8, "1", "64Mi")},
            }
            created = (await create_with_warnings(dynamic, body)).obj
            pods.append(created)
            annotations = created["metadata"]["annotations"]
            # 3 pods of 8 GPUs at most in the pod's role: more than a rack of 2 hosts, a block of 4.
            assert annotations.get(REQUIRED) == BLOCK, annotations
            assert PREFERRED not in annotations and GROUP not in annotations and SLICE_LEVEL not in annotations
        workload = await admitted(dynamic, pods[0])
        (podset,) = workload["spec"]["podSets"]  # one role: one podset of the whole group
        assert podset["count"] == 3 and podset["topologyRequest"]["required"] == BLOCK, podset
        (placed,) = (await hosts_by_podset(dynamic, workload)).values()
        assert sum(placed.values()) == 3, placed
        labels = await node_labels(dynamic)
        assert len({labels[host][BLOCK] for host in placed}) == 1, placed
    finally:
        await _delete_pods(dynamic, pods)


@pytest.mark.usefixtures("uncapped_auto")
async def test_a_pod_group_named_by_annotation_is_one_group_to_kueue_and_to_the_governor(
    dynamic: DynamicClient,
) -> None:
    """Kueue v0.19.2 names a pod group by the ``kueue.x-k8s.io/pod-group-name`` annotation too
    (WorkloadIdentifierAnnotations, on by default): 3 Pods so named are one Workload of 3 pods, and
    the governor plans each as one member. A member of 8 GPUs in a group of 13 is warned about the
    quota (were all 13 like it), not denied as one podset of 13 pods; a group name without its
    total count is refused, as Kueue's pod webhook refuses it."""

    def member(group: str, index: int, annotations: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{group}-{index}", "namespace": RESEARCH, "annotations": annotations},
            "spec": {"terminationGracePeriodSeconds": 1, **pause_pod_spec(8, "1", "64Mi")},
        }

    large = unique("large")
    created = await create_with_warnings(
        dynamic, member(large, 0, {POD_GROUP_NAME: large, POD_GROUP_TOTAL: "13"}), dry_run=True
    )
    assert any("were all 13 pods of its pod group" in w for w in created.warnings), created.warnings
    with pytest.raises(Refused) as refused:
        await create_with_warnings(dynamic, member(large, 1, {POD_GROUP_NAME: large}), dry_run=True)
    message = str(refused.value.status.get("message"))
    assert f"metadata.annotations.{POD_GROUP_TOTAL} must be set" in message, message

    group = unique("agroup")
    pods: list[dict[str, Any]] = []
    try:
        for index in range(3):
            body = member(group, index, {POD_GROUP_NAME: group, POD_GROUP_TOTAL: "3"})
            pods.append((await create_with_warnings(dynamic, body)).obj)
            assert POD_GROUP_NAME not in (pods[-1]["metadata"].get("labels") or {})
        workload = await admitted(dynamic, pods[0])
        (podset,) = workload["spec"]["podSets"]
        assert podset["count"] == 3, podset
    finally:
        await _delete_pods(dynamic, pods)


@pytest.mark.usefixtures("uncapped_auto")
async def test_a_job_larger_than_a_rack_is_admitted_in_rack_slices_of_one_block(
    dynamic: DynamicClient, cleanup: Cleanup
) -> None:
    body = cleanup.add(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": unique("sliced"), "namespace": RESEARCH},
            "spec": {"parallelism": 4, "completions": 4, "template": template(8, "1")},
        }
    )
    created = (await create_with_warnings(dynamic, body)).obj
    annotations = created["spec"]["template"]["metadata"]["annotations"]
    assert {key: annotations.get(key) for key in (REQUIRED, SLICE_LEVEL, SLICE_SIZE)} == {
        REQUIRED: BLOCK,
        SLICE_LEVEL: RACK,
        SLICE_SIZE: "2",
    }
    workload = await admitted(dynamic, created)
    (request,) = [podset["topologyRequest"] for podset in workload["spec"]["podSets"]]
    assert request["required"] == BLOCK and request["podSetSliceRequiredTopology"] == RACK
    assert request["podSetSliceSize"] == 2
    placed = (await hosts_by_podset(dynamic, workload))["main"]
    labels = await node_labels(dynamic)
    assert len({labels[host][BLOCK] for host in placed}) == 1, placed
    per_rack: dict[str, int] = {}
    for host, pods in placed.items():
        per_rack[labels[host][RACK]] = per_rack.get(labels[host][RACK], 0) + pods
    assert sorted(per_rack.values()) == [2, 2], per_rack


def mpijob(namespace: str, launcher: dict[str, str], worker: dict[str, str], launchers: int = 1) -> dict[str, Any]:
    body = kubeflow("MPIJob", "kubeflow.org/v2beta1", "mpiReplicaSpecs", "Launcher", workers=2)
    body["metadata"].update(namespace=namespace, labels={"kueue.x-k8s.io/queue-name": "user-queue"})
    specs = body["spec"]["mpiReplicaSpecs"]
    specs["Launcher"]["replicas"] = launchers
    specs["Launcher"]["template"]["metadata"] = {"annotations": launcher}
    specs["Worker"]["template"]["metadata"] = {"annotations": worker}
    return body


@pytest.mark.parametrize(
    ("launcher", "worker", "launchers", "refusal"),
    [
        (
            {GROUP: "g", REQUIRED: RACK},
            {GROUP: "g", REQUIRED: RACK, SLICE_LEVEL: HOSTNAME, SLICE_SIZE: "1"},
            1,
            f"may not be set when '{SLICE_SIZE}' is specified",
        ),
        ({GROUP: "g", REQUIRED: RACK}, {GROUP: "g", REQUIRED: BLOCK}, 1, "topology consistent with"),
        ({GROUP: "g", REQUIRED: RACK}, {GROUP: "g", REQUIRED: RACK}, 2, "at least one pod set has only 1 replica"),
        ({GROUP: "7", REQUIRED: RACK}, {GROUP: "7", REQUIRED: RACK}, 1, "must not be a number"),
    ],
)
async def test_kueue_refuses_the_groups_auto_never_makes(
    dynamic: DynamicClient,
    namespace: str,
    launcher: dict[str, str],
    worker: dict[str, str],
    launchers: int,
    refusal: str,
) -> None:
    body = mpijob(namespace, launcher, worker, launchers)
    with pytest.raises(Refused) as refused:
        await create_with_warnings(dynamic, body, dry_run=True)
    message = str(refused.value.status.get("message"))
    assert refusal in message and "kueue-governor" not in message, message
    # The same MPIJob as auto writes it (one launcher, the same level, no slices) is accepted.
    fine = mpijob(namespace, {GROUP: "launcher-worker", REQUIRED: RACK}, {GROUP: "launcher-worker", REQUIRED: RACK})
    await create_with_warnings(dynamic, copy.deepcopy(fine), dry_run=True)


async def test_kueue_refuses_a_group_of_three_podsets(dynamic: DynamicClient, namespace: str) -> None:
    job_template = {"spec": {"parallelism": 1, "completions": 1, "template": template(0, "1")}}
    grouped = copy.deepcopy(job_template)
    grouped["spec"]["template"]["metadata"] = {"annotations": {GROUP: "g", REQUIRED: RACK}}
    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": unique("js"), "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "replicatedJobs": [
                {"name": name, "replicas": 1, "template": copy.deepcopy(grouped)} for name in ("a", "b", "c")
            ]
        },
    }
    with pytest.raises(Refused) as refused:
        await create_with_warnings(dynamic, body, dry_run=True)
    assert "can only define groups of exactly 2 pod sets, got: 3 pod set(s)" in str(refused.value.status)


async def test_kueue_never_creates_the_workload_of_a_group_name_over_256_characters(
    dynamic: DynamicClient, namespace: str
) -> None:
    """Kueue copies a podset's ``podset-group-name`` (next to required or preferred) into its
    Workload's ``podSetGroupName``, whose CRD schema takes at most 256 characters: a Job whose
    group name is longer gets no Workload (the governor warns, ``kueue_tas``); one of 256 gets one."""
    jobs = {}
    for length in (256, 257):
        body = job_manifest(unique(f"g{length}"), namespace, 1, template(0, "1"), {"kueue.x-k8s.io/queue-name": "q"})
        body["spec"]["template"]["metadata"] = {"annotations": {GROUP: "g" * length, REQUIRED: RACK}}
        jobs[length] = (await create_with_warnings(dynamic, body)).obj
    try:
        fits = await wait_for(
            lambda: workload_for(dynamic, namespace, jobs[256]["metadata"]["uid"]),
            "the Workload of the 256",
            timeout=60,
        )
        assert fits["spec"]["podSets"][0]["topologyRequest"]["podSetGroupName"] == "g" * 256
        await asyncio.sleep(10)  # the 257 was created with it: well past its first reconcile, still none
        assert await workload_for(dynamic, namespace, jobs[257]["metadata"]["uid"]) is None
    finally:
        for job in jobs.values():
            await delete(dynamic, job)


@pytest.mark.usefixtures("uncapped_auto")
async def test_random_workloads_under_uncapped_auto_are_admitted_or_said_never_to_fit(
    dynamic: DynamicClient, cleanup: Cleanup
) -> None:
    """The seeded random Jobs, JobSets and PyTorchJobs of ``test_kueue_view`` (node selectors,
    taints, sidecars), with research's auto free to require any level, so with slices and
    co-placed masters: each is admitted within the bound or refused/warned as never fitting."""
    from e2e.test_kueue_view import random_workloads_admitted_or_said_never_to_fit

    await random_workloads_admitted_or_said_never_to_fit(dynamic, seed=20261202, total=100)
