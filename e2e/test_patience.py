"""Topology patience against the real Kueue v0.19.2: widened after the patience, never otherwise.

A governor is started for the bundled platform with team research's ``topology`` set to ``auto``
(no level cap, ``enforce``) and a patience of a few seconds, with ``--topology-widening`` on two
replicas (one Lease, one acts), on the default fake cluster (1 spine × 2 blocks × 2 racks × 2 hosts of 8 GPUs):

* two holder Jobs of one pod of 8 GPUs, each pinned to a host of a different rack of one block,
  leave that block one free host per rack; a Job of 2 such pods restricted to that block is
  required at the rack by ``auto`` and waits: Kueue's TAS cannot fit it in a rack. After its
  patience the governor widens it to the block (its pod template and its Workload), records the
  step in its history annotation and an Event, the webhook accepts the governor's UPDATE under
  ``enforce``, and Kueue admits it across the two racks; ``kgov why`` shows the step;
* a Job of 4 pods that ``auto`` requires in one block in slices of a rack loses its slices, then,
  as soon as Kueue refused that step too (no second patience), climbs to the spine;
* a Job of 2 pods restricted to the other, free block fits its rack at once and is never touched;
* under ``required`` at the rack with ``enforce``, a user's own widening of a waiting Job is refused
  (less locality than the policy) while the governor's step passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import json
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import DynamicApiError, NotFoundError

from e2e import support
from e2e.conftest import E2ECluster
from e2e.devcluster.client import dynamic_client
from e2e.devcluster.governor import start_replica, stop_replica
from e2e.support import (
    BUNDLED_PLATFORM,
    Cleanup,
    Generated,
    create_with_warnings,
    is_true,
    job_manifest,
    list_objects,
    pause_pod_spec,
    wait_for,
    workload_for,
)
from webhook.kube.widener import TopologyWidener

pytestmark = pytest.mark.e2e

RESEARCH = "hyperpod-ns-research"
QUEUE = {"kueue.x-k8s.io/queue-name": "hyperpod-ns-research-localqueue"}
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
WIDENED = "kueue-governor.io/widened"
BLOCK = "topology.k8s.aws/network-node-layer-2"
RACK = "topology.k8s.aws/network-node-layer-3"
SPINE = "topology.k8s.aws/network-node-layer-1"
SLICE_LEVEL = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
HOSTNAME = "kubernetes.io/hostname"
PATIENCE = 5  # seconds
WIDENING = ["--topology-widening", "default/kgov-topology-widening"]
RUN_LONG = {"pod-complete.stage.kwok.x-k8s.io/delay": "10m", "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "10m"}


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


@pytest.fixture
def patient(
    bundled_config: Generated, governor: Callable[..., str], tmp_path: Path, e2e_cluster: E2ECluster
) -> Iterator[str]:
    """The bundled platform, research's topology ``auto`` with a patience of :data:`PATIENCE`
    seconds, served with topology widening on by two replicas contending for its Lease (one
    registered as the webhook): the registered one's URL."""
    platform = yaml.safe_load(BUNDLED_PLATFORM.read_text())
    (research,) = [team for team in platform["teams"] if team["name"] == "research"]
    research["policy"]["topology"] = {"mode": "auto", "enforcement": "enforce", "patience": f"{PATIENCE}s"}
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(platform))
    url = governor(path, extra=WIDENING)
    assert e2e_cluster.local is not None
    state = Path(e2e_cluster.local.state_dir)
    start_replica(state, path, WIDENING)
    try:
        yield url
    finally:
        stop_replica(state)


def gpu_job(name: str, pods: int, selector: dict[str, str]) -> dict[str, Any]:
    template = {
        "metadata": {"annotations": dict(RUN_LONG)},
        "spec": {**pause_pod_spec(8, "1"), "nodeSelector": selector},
    }
    return job_manifest(name, RESEARCH, pods, template, QUEUE)


async def blocks(dynamic: DynamicClient) -> dict[str, dict[str, list[str]]]:
    """Block → rack → host names of the fake cluster's GPU nodes."""
    out: dict[str, dict[str, list[str]]] = {}
    for node in await list_objects(dynamic, "v1", "Node"):
        labels = node["metadata"].get("labels", {})
        if labels.get("node.kubernetes.io/instance-type") != "p5.48xlarge" or not support.is_ready_schedulable(node):
            continue
        out.setdefault(labels[BLOCK], {}).setdefault(labels[RACK], []).append(labels[HOSTNAME])
    return out


async def admitted(
    dynamic: DynamicClient, created: dict[str, Any], namespace: str = RESEARCH, timeout: float = 90
) -> dict[str, Any]:
    uid = created["metadata"]["uid"]

    async def probe() -> dict[str, Any] | None:
        workload = await workload_for(dynamic, namespace, uid)
        return workload if workload is not None and is_true(workload, "Admitted") else None

    return await wait_for(probe, f"{created['metadata']['name']}'s Workload to be admitted", timeout=timeout)


async def submit(dynamic: DynamicClient, cleanup: Cleanup, body: dict[str, Any]) -> dict[str, Any]:
    cleanup.add(body)
    return (await create_with_warnings(dynamic, body)).obj


def kgov_why(cluster: E2ECluster, name: str) -> Any:
    done = subprocess.run(
        [
            *support.kgov_command(),
            "why",
            f"job/{name}",
            "-n",
            RESEARCH,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_a_job_waiting_for_a_rack_is_widened_to_the_block_after_its_patience(
    patient: str, dynamic: DynamicClient, cleanup: Cleanup, e2e_cluster: E2ECluster
) -> None:
    layout = await blocks(dynamic)
    block, racks = sorted(layout.items())[0]
    assert len(racks) >= 2 and all(len(hosts) >= 2 for hosts in racks.values()), layout
    holders = []
    for rack in sorted(racks)[:2]:
        holder = await submit(dynamic, cleanup, gpu_job(unique("holder"), 1, {HOSTNAME: racks[rack][0]}))
        holders.append(holder)
    for holder in holders:
        await admitted(dynamic, holder)

    waiting = await submit(dynamic, cleanup, gpu_job(unique("wide"), 2, {BLOCK: block}))
    assert waiting["spec"]["template"]["metadata"]["annotations"][REQUIRED] == RACK  # auto: one rack holds 2 hosts

    workload = await admitted(dynamic, waiting, timeout=120)
    (podset,) = workload["spec"]["podSets"]
    assert podset["topologyRequest"]["required"] == BLOCK
    job = await support.get(dynamic, "batch/v1", "Job", waiting["metadata"]["name"], RESEARCH)
    assert job is not None
    assert job["spec"]["template"]["metadata"]["annotations"][REQUIRED] == BLOCK
    (step,) = json.loads(job["metadata"]["annotations"][WIDENED])
    assert (step["podsets"], step["from"], step["to"]) == (["main"], f"required:{RACK}", f"required:{BLOCK}")
    assert "allow" in step["reason"] and "to fit" in step["reason"]
    events = await list_objects(dynamic, "events.k8s.io/v1", "Event", RESEARCH)
    notes = [
        e["note"]
        for e in events
        if e.get("reason") == "TopologyWidened" and e["regarding"].get("uid") == waiting["metadata"]["uid"]
    ]
    assert len(notes) == 1 and f"→ required at {BLOCK}" in notes[0]  # once, by one of the two replicas
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    levels, domains = support.decode_topology_assignment(assignment["topologyAssignment"])
    assert levels[-1] == HOSTNAME
    placed = {domain.values[-1] for domain in domains}
    assert len(placed) == 2 and not placed & {racks[r][0] for r in racks}  # the two free hosts of two racks

    lease = await support.get(dynamic, "coordination.k8s.io/v1", "Lease", "kgov-topology-widening", "default")
    assert lease is not None and lease["spec"]["holderIdentity"]  # the one replica that widens

    answer = kgov_why(e2e_cluster, waiting["metadata"]["name"])
    (widened,) = answer["widened"]
    assert (widened["from"], widened["to"]) == (f"required:{RACK}", f"required:{BLOCK}")


async def test_a_sliced_job_loses_its_slices_then_climbs_and_kueue_admits_it(
    patient: str, dynamic: DynamicClient, cleanup: Cleanup, e2e_cluster: E2ECluster
) -> None:
    """4 pods of 8 GPUs: ``auto`` requires a block in slices of 2 at the rack. A holder on one host
    of each block leaves no block 4 free hosts: the governor drops the slices (still a block: no
    room), then widens to the spine, where the real Kueue admits it; Kueue's Workload takes both
    steps, slice fields removed, its own fields kept."""
    layout = await blocks(dynamic)
    assert len(layout) == 2 and all(len(racks) == 2 for racks in layout.values()), layout
    holders = [
        await submit(dynamic, cleanup, gpu_job(unique("holder"), 1, {HOSTNAME: sorted(racks.items())[0][1][0]}))
        for _, racks in sorted(layout.items())
    ]
    for holder in holders:
        await admitted(dynamic, holder)
    waiting = await submit(dynamic, cleanup, gpu_job(unique("sliced"), 4, {}))
    annotations = waiting["spec"]["template"]["metadata"]["annotations"]
    assert (annotations[REQUIRED], annotations[SLICE_LEVEL], annotations[SLICE_SIZE]) == (BLOCK, RACK, "2")

    workload = await admitted(dynamic, waiting, timeout=150)
    (podset,) = workload["spec"]["podSets"]
    request = podset["topologyRequest"]
    assert request["required"] == SPINE
    assert "podSetSliceSize" not in request and "podSetSliceRequiredTopology" not in request
    assert request.get("podIndexLabel") == "batch.kubernetes.io/job-completion-index"  # Kueue's own, kept
    job = await support.get(dynamic, "batch/v1", "Job", waiting["metadata"]["name"], RESEARCH)
    assert job is not None
    tas = {k: v for k, v in job["spec"]["template"]["metadata"]["annotations"].items() if "podset-" in k}
    assert tas == {REQUIRED: SPINE}
    steps = json.loads(job["metadata"]["annotations"][WIDENED])
    assert [(s["from"], s["to"]) for s in steps] == [
        (f"required:{BLOCK};slices:2@{RACK}", f"required:{BLOCK}"),
        (f"required:{BLOCK}", f"required:{SPINE}"),
    ]
    assert "slice(s)" in steps[0]["reason"] and "pod(s)" in steps[1]["reason"]  # Kueue's words at each step
    # the patience is the job's: the second step follows Kueue's refusal of the first, not a second patience
    gap = _seconds(steps[1]["at"]) - _seconds(steps[0]["at"])
    assert gap < PATIENCE, steps
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    _, domains = support.decode_topology_assignment(assignment["topologyAssignment"])
    held = {sorted(racks.items())[0][1][0] for racks in layout.values()}
    placed = {domain.values[-1] for domain in domains}
    assert sum(domain.pods for domain in domains) == 4 and not placed & held
    answer = kgov_why(e2e_cluster, waiting["metadata"]["name"])
    assert [(w["from"], w["to"]) for w in answer["widened"]] == [(s["from"], s["to"]) for s in steps]


async def test_a_job_that_fits_its_rack_is_never_touched(
    patient: str, dynamic: DynamicClient, cleanup: Cleanup
) -> None:
    layout = await blocks(dynamic)
    block = sorted(layout)[-1]
    fits = await submit(dynamic, cleanup, gpu_job(unique("fits"), 2, {BLOCK: block}))
    workload = await admitted(dynamic, fits)
    assert workload["spec"]["podSets"][0]["topologyRequest"]["required"] == RACK
    await asyncio.sleep(PATIENCE + 4)  # well past its patience
    job = await support.get(dynamic, "batch/v1", "Job", fits["metadata"]["name"], RESEARCH)
    assert job is not None
    assert WIDENED not in job["metadata"].get("annotations", {})
    assert job["spec"]["template"]["metadata"]["annotations"][REQUIRED] == RACK


QUOTA_TEAM = "patience-quota"
QUOTA_PATIENCE = 20  # seconds: the quota wait below is set up well within it


@pytest.fixture
def quota_team(
    bundled_config: Generated, governor: Callable[..., str], tmp_path: Path, e2e_cluster: E2ECluster
) -> Iterator[tuple[str, dict[str, str]]]:
    """The bundled platform and one more team, :data:`QUOTA_TEAM`, in no cohort (no borrowing) with
    a quota of 40 GPUs (the cluster has 64), topology ``auto`` with a patience of
    :data:`QUOTA_PATIENCE` seconds, served with topology widening on; its namespace and queue label.
    Its ClusterQueue and LocalQueue are deleted afterwards (the namespace stays, as in
    test_generator.py)."""
    platform = yaml.safe_load(BUNDLED_PLATFORM.read_text())
    (research,) = [team for team in platform["teams"] if team["name"] == "research"]
    gpus = {"cpu": {"nominalQuota": 1536}, "memory": {"nominalQuota": "16Ti"}, "nvidia.com/gpu": {"nominalQuota": 40}}
    policy = copy.deepcopy(research["policy"])
    policy["topology"] = {"mode": "auto", "enforcement": "enforce", "patience": f"{QUOTA_PATIENCE}s"}
    platform["teams"].append(
        {
            "name": QUOTA_TEAM,
            "quotas": [{"flavor": research["quotas"][0]["flavor"], "resources": gpus}],
            "queueingStrategy": "BestEffortFIFO",
            "policy": policy,
        }
    )
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(platform))
    generated = support.generate(path, tmp_path / "generated", "--policy-namespace", "kgov-e2e-patience")
    mine = [
        obj
        for obj in generated.objects
        if QUOTA_TEAM in obj["metadata"]["name"] or QUOTA_TEAM in obj["metadata"].get("namespace", "")
    ]
    (namespace,) = [obj["metadata"]["name"] for obj in mine if obj["kind"] == "Namespace"]
    (queue,) = [obj["metadata"]["name"] for obj in mine if obj["kind"] == "LocalQueue"]
    (cluster_queue,) = [obj["metadata"]["name"] for obj in mine if obj["kind"] == "ClusterQueue"]

    async def apply() -> None:
        async with dynamic_client(e2e_cluster.kubeconfig) as dynamic:
            await support.apply_generated(dynamic, support.Generated(directory=generated.directory, objects=mine))
            await support.wait_cluster_queues_active(dynamic, [cluster_queue])

    async def delete() -> None:
        async with dynamic_client(e2e_cluster.kubeconfig) as dynamic:
            for obj in reversed([o for o in mine if o["apiVersion"] == support.KUEUE_API]):
                resource = await dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
                with contextlib.suppress(NotFoundError):
                    await dynamic.delete(
                        resource, name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace")
                    )

    asyncio.run(apply())
    governor(path, extra=WIDENING)
    try:
        yield namespace, {"kueue.x-k8s.io/queue-name": queue}
    finally:
        asyncio.run(delete())


async def _message(dynamic: DynamicClient, namespace: str, created: dict[str, Any]) -> str:
    workload = await workload_for(dynamic, namespace, created["metadata"]["uid"])
    reserved = [c for c in (workload or {}).get("status", {}).get("conditions", []) if c["type"] == "QuotaReserved"]
    return str(reserved[0].get("message", "")) if reserved and reserved[0]["status"] == "False" else ""


async def test_a_job_refused_on_topology_then_waiting_for_quota_is_widened_before_the_quota_returns(
    quota_team: tuple[str, dict[str, str]], dynamic: DynamicClient, cleanup: Cleanup
) -> None:
    """Kueue asks TAS only while the quota fits. A Job of 2 pods restricted to a block whose racks
    have one free host each is refused on topology; a filler then takes the quota and another
    Job's deletion makes Kueue try the first again, which now says quota. Past its patience the
    governor widens it all the same (remembered: Kueue's refusal of this Workload generation), so
    that when the filler goes, the real Kueue admits it at the block at once."""
    namespace, queue = quota_team
    layout = await blocks(dynamic)
    (block_a, racks_a), (block_b, racks_b) = sorted(layout.items())[:2]

    def job(prefix: str, pods: int, selector: dict[str, str]) -> dict[str, Any]:
        template = {
            "metadata": {"annotations": dict(RUN_LONG)},
            "spec": {**pause_pod_spec(8, "1"), "nodeSelector": selector},
        }
        return job_manifest(unique(prefix), namespace, pods, template, queue)

    holders = [await submit(dynamic, cleanup, job("holder", 1, {HOSTNAME: racks_a[r][0]})) for r in sorted(racks_a)[:2]]
    third = await submit(dynamic, cleanup, job("third", 1, {HOSTNAME: sorted(racks_b.items())[0][1][0]}))
    for holder in [*holders, third]:
        await admitted(dynamic, holder, namespace)
    # 24 of 40 GPUs in use: the 16 the waiting Job asks for fit the quota, no rack of block A holds it
    waiting = await submit(dynamic, cleanup, job("waiting", 2, {BLOCK: block_a}))
    assert waiting["spec"]["template"]["metadata"]["annotations"][REQUIRED] == RACK

    async def refused_on_topology() -> bool:
        return "to fit" in await _message(dynamic, namespace, waiting)

    await wait_for(refused_on_topology, "Kueue's topology refusal of the waiting Job", timeout=30)
    filler = await submit(dynamic, cleanup, job("filler", 2, {BLOCK: block_b}))
    await admitted(dynamic, filler, namespace)  # 40 of 40 GPUs
    await support.delete_workload_object(dynamic, third)  # 32 of 40: Kueue tries the waiting Job again

    async def refused_on_quota() -> bool:
        return "quota" in await _message(dynamic, namespace, waiting)

    await wait_for(refused_on_quota, "Kueue's quota refusal of the waiting Job", timeout=30)
    started = await support.get(dynamic, "batch/v1", "Job", waiting["metadata"]["name"], namespace)
    assert started is not None and WIDENED not in started["metadata"].get("annotations", {})  # within its patience

    async def widened() -> dict[str, Any] | None:
        current = await support.get(dynamic, "batch/v1", "Job", waiting["metadata"]["name"], namespace)
        return current if current and WIDENED in current["metadata"].get("annotations", {}) else None

    job_now = await wait_for(widened, "the governor's step", timeout=QUOTA_PATIENCE + 30)
    (step,) = json.loads(job_now["metadata"]["annotations"][WIDENED])
    assert (step["from"], step["to"]) == (f"required:{RACK}", f"required:{BLOCK}")
    assert "to fit" in step["reason"]  # Kueue's topology refusal, remembered
    assert "quota" in await _message(dynamic, namespace, waiting)  # still waiting for quota: never admitted yet
    events = await list_objects(dynamic, "events.k8s.io/v1", "Event", namespace)
    notes = [e["note"] for e in events if e.get("reason") == "TopologyWidened"]
    assert any("on topology (now for quota)" in note for note in notes), notes

    await support.delete_workload_object(dynamic, filler)  # the quota comes back
    workload = await admitted(dynamic, waiting, namespace, timeout=60)
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    _, domains = support.decode_topology_assignment(assignment["topologyAssignment"])
    held = {racks_a[r][0] for r in racks_a}
    assert {domain.values[-1] for domain in domains}.isdisjoint(held) and sum(d.pods for d in domains) == 2


@pytest.fixture
def strict(bundled_config: Generated, governor: Callable[..., str], tmp_path: Path) -> str:
    """research ``required`` at the rack under ``enforce``, a patience of 20 s, widening on."""
    platform = yaml.safe_load(BUNDLED_PLATFORM.read_text())
    (research,) = [team for team in platform["teams"] if team["name"] == "research"]
    research["policy"]["topology"] = {"mode": "required", "level": RACK, "enforcement": "enforce", "patience": "20s"}
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(platform))
    return governor(path, extra=WIDENING)


async def test_under_enforce_the_webhook_takes_the_governors_step_and_refuses_a_users(
    strict: str, dynamic: DynamicClient, cleanup: Cleanup
) -> None:
    """research ``required`` at the rack, ``enforce``: a user's own widening of the waiting Job (the
    same change the governor makes) asks for less locality than the policy and is refused; the
    governor's step, recorded in its history, passes and Kueue admits the Job at the block."""
    layout = await blocks(dynamic)
    block, racks = sorted(layout.items())[0]
    holders = [
        await submit(dynamic, cleanup, gpu_job(unique("holder"), 1, {HOSTNAME: racks[rack][0]}))
        for rack in sorted(racks)[:2]
    ]
    for holder in holders:
        await admitted(dynamic, holder)
    waiting = await submit(dynamic, cleanup, gpu_job(unique("strict"), 2, {BLOCK: block}))
    assert waiting["spec"]["template"]["metadata"]["annotations"][REQUIRED] == RACK
    resource = await dynamic.resources.get(api_version="batch/v1", kind="Job")
    mine = {"spec": {"template": {"metadata": {"annotations": {REQUIRED: BLOCK}}}}}  # the same change, by a user
    with pytest.raises(DynamicApiError) as refused:
        await dynamic.patch(
            resource,
            mine,
            name=waiting["metadata"]["name"],
            namespace=RESEARCH,
            content_type="application/merge-patch+json",
        )
    assert refused.value.status == 403 and "asks for less locality" in refused.value.summary()
    workload = await admitted(dynamic, waiting, timeout=150)
    assert workload["spec"]["podSets"][0]["topologyRequest"]["required"] == BLOCK
    job = await support.get(dynamic, "batch/v1", "Job", waiting["metadata"]["name"], RESEARCH)
    assert job is not None and len(json.loads(job["metadata"]["annotations"][WIDENED])) == 1


async def test_a_stopping_leader_gives_its_lease_up_and_the_other_replica_takes_over_at_once(
    api: k8s.ApiClient, dynamic: DynamicClient
) -> None:
    """Two widening replicas in this process on one fresh Lease: the one that leads, stopped, empties
    the Lease's holder (as client-go's ``ReleaseOnCancel``), and the other leads before the stopped
    one's Lease would have run out (renew time + 15 s): a rolling update hands widening over in one
    retry period, not a lease duration."""
    lease = unique("kgov-widening-lease")
    replicas = [
        TopologyWidener(api, lambda: None, lambda _namespace: None, lambda: None, ("default", lease)) for _ in range(2)
    ]
    first, second = replicas
    first.start()
    try:
        await wait_for(lambda: _true(first.leading), "the first replica to lead", timeout=30)
        second.start()
        await asyncio.sleep(3)  # two retry periods: the Lease is held, the second only follows
        assert not second.leading
        held = await support.get(dynamic, "coordination.k8s.io/v1", "Lease", lease, "default")
        assert held is not None and held["spec"]["holderIdentity"] == first.identity
        await first.stop()
        released = await support.get(dynamic, "coordination.k8s.io/v1", "Lease", lease, "default")
        assert released is not None and released["spec"].get("holderIdentity", "") in ("", second.identity)
        expiry = (
            time.time() + 15 if not released["spec"].get("renewTime") else _seconds(released["spec"]["renewTime"]) + 15
        )
        await wait_for(lambda: _true(second.leading), "the second replica to take over", timeout=30)
        assert time.time() < expiry, "the second replica waited out the lease duration"
        taken = await support.get(dynamic, "coordination.k8s.io/v1", "Lease", lease, "default")
        assert taken is not None and taken["spec"]["holderIdentity"] == second.identity
    finally:
        for replica in replicas:
            await replica.stop()
        with contextlib.suppress(Exception):
            resource = await dynamic.resources.get(api_version="coordination.k8s.io/v1", kind="Lease")
            await dynamic.delete(resource, name=lease, namespace="default")


async def _true(value: bool) -> bool | None:
    return True if value else None


def _seconds(stamp: str) -> float:
    """An RFC 3339 ``MicroTime`` (``2026-12-05T07:01:02.123456Z``) as seconds since the epoch."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
