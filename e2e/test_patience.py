"""Topology patience against the real Kueue v0.19.2: widened after the patience, never otherwise.

A governor is started for the bundled platform with team research's ``topology`` set to ``auto``
(no level cap, ``enforce``) and a patience of a few seconds, with ``--topology-widening``, on the
default fake cluster (1 spine × 2 blocks × 2 racks × 2 hosts of 8 GPUs):

* two holder Jobs of one pod of 8 GPUs, each pinned to a host of a different rack of one block,
  leave that block one free host per rack; a Job of 2 such pods restricted to that block is
  required at the rack by ``auto`` and waits: Kueue's TAS cannot fit it in a rack. After its
  patience the governor widens it to the block (its pod template and its Workload), records the
  step in its history annotation and an Event, the webhook accepts the governor's UPDATE under
  ``enforce``, and Kueue admits it across the two racks; ``kgov why`` shows the step;
* a Job of 2 pods restricted to the other, free block fits its rack at once and is never touched.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import support
from e2e.conftest import E2ECluster
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

pytestmark = pytest.mark.e2e

RESEARCH = "hyperpod-ns-research"
QUEUE = {"kueue.x-k8s.io/queue-name": "hyperpod-ns-research-localqueue"}
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
WIDENED = "kueue-governor.io/widened"
BLOCK = "topology.k8s.aws/network-node-layer-2"
RACK = "topology.k8s.aws/network-node-layer-3"
HOSTNAME = "kubernetes.io/hostname"
PATIENCE = 5  # seconds
RUN_LONG = {"pod-complete.stage.kwok.x-k8s.io/delay": "10m", "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "10m"}


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


@pytest.fixture
def patient(bundled_config: Generated, governor: Callable[..., str], tmp_path: Path) -> str:
    """The bundled platform, research's topology ``auto`` with a patience of :data:`PATIENCE`
    seconds, served with topology widening on: the governor's URL."""
    platform = yaml.safe_load(BUNDLED_PLATFORM.read_text())
    (research,) = [team for team in platform["teams"] if team["name"] == "research"]
    research["policy"]["topology"] = {"mode": "auto", "enforcement": "enforce", "patience": f"{PATIENCE}s"}
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(platform))
    return governor(path, extra=["--topology-widening", "default/kgov-topology-widening"])


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


async def admitted(dynamic: DynamicClient, created: dict[str, Any], timeout: float = 90) -> dict[str, Any]:
    uid = created["metadata"]["uid"]

    async def probe() -> dict[str, Any] | None:
        workload = await workload_for(dynamic, RESEARCH, uid)
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
    assert len(notes) == 1 and f"→ required at {BLOCK}" in notes[0]
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    levels, domains = support.decode_topology_assignment(assignment["topologyAssignment"])
    assert levels[-1] == HOSTNAME
    placed = {domain.values[-1] for domain in domains}
    assert len(placed) == 2 and not placed & {racks[r][0] for r in racks}  # the two free hosts of two racks

    answer = kgov_why(e2e_cluster, waiting["metadata"]["name"])
    (widened,) = answer["widened"]
    assert (widened["from"], widened["to"]) == (f"required:{RACK}", f"required:{BLOCK}")


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
