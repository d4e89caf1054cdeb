"""``kgov generate`` output on a real API server with Kueue: valid objects that admit work.

The bundled example and a programmatically written 50-team platform are generated with the real
command line, applied server-side, and checked the way Kueue sees them: every ClusterQueue
``Active``, and one small Job per team namespace admitted in that team's own ClusterQueue.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import NotFoundError

from e2e import manifests
from e2e.support import (
    GPU,
    KUEUE_API,
    Cleanup,
    Generated,
    apply_generated,
    create,
    generate,
    is_true,
    job_manifest,
    kgov_command,
    list_objects,
    pause_pod_spec,
    wait_cluster_queues_active,
    wait_for,
)

pytestmark = pytest.mark.e2e

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SCALE_TEAMS = 50
SCALE_PREFIX = "scale"


def small_job(namespace: str, queue: str, gpus: int = 1) -> dict[str, Any]:
    """One pod of ``gpus`` GPUs, labelled for ``queue`` (the generator's LocalQueue)."""
    template = {"spec": pause_pod_spec(gpus, "100m", "64Mi")}
    return job_manifest(f"small-{secrets.token_hex(3)}", namespace, 1, template, {QUEUE_LABEL: queue})


async def admit_one_job_per_namespace(
    dynamic: DynamicClient, generated: Generated, cleanup: Cleanup, timeout: float
) -> dict[str, str]:
    """Create a small Job in every team namespace, labelled with the generated LocalQueue there;
    wait until each one's Workload is admitted. Returns namespace → the admitting ClusterQueue."""
    jobs = [
        cleanup.add(small_job(namespace, generated.local_queue(namespace)["metadata"]["name"]))
        for namespace in generated.team_namespaces
    ]
    created = await asyncio.gather(*(create(dynamic, job) for job in jobs))
    owners = {job["metadata"]["uid"]: job["metadata"]["namespace"] for job in created}

    async def all_admitted() -> dict[str, str] | None:
        admitted: dict[str, str] = {}
        for workload in await list_objects(dynamic, KUEUE_API, "Workload"):
            for owner in workload["metadata"].get("ownerReferences", []):
                namespace = owners.get(owner.get("uid", ""))
                if namespace is not None and is_true(workload, "Admitted"):
                    assert workload["metadata"]["namespace"] == namespace
                    admitted[namespace] = workload["status"]["admission"]["clusterQueue"]
        return admitted if len(admitted) == len(owners) else None

    return await wait_for(all_admitted, f"{len(owners)} Workloads to be admitted", timeout=timeout, interval=0.5)


async def test_bundled_example_admits_a_job_in_every_team_namespace(
    dynamic: DynamicClient, bundled_config: Generated, cleanup: Cleanup
) -> None:
    queues = sorted(queue["metadata"]["name"] for queue in bundled_config.of_kind("ClusterQueue"))
    assert queues == [
        "hyperpod-ns-data-science-clusterqueue",
        "hyperpod-ns-inference-clusterqueue",
        "hyperpod-ns-research-clusterqueue",
    ]
    await wait_cluster_queues_active(dynamic, queues)
    assert {
        name: is_true(queue, "Active")
        for queue in await list_objects(dynamic, KUEUE_API, "ClusterQueue")
        if (name := queue["metadata"]["name"]) in queues
    } == dict.fromkeys(queues, True)

    admitted = await admit_one_job_per_namespace(dynamic, bundled_config, cleanup, timeout=60)
    assert admitted == {
        "ds-sandbox": "hyperpod-ns-data-science-clusterqueue",
        "hyperpod-ns-data-science": "hyperpod-ns-data-science-clusterqueue",
        "hyperpod-ns-inference": "hyperpod-ns-inference-clusterqueue",
        "hyperpod-ns-research": "hyperpod-ns-research-clusterqueue",
    }


def scale_platform(teams: int) -> dict[str, Any]:
    """``teams`` teams in one cohort sharing one TAS flavor of the GPU nodes, 1 GPU each."""
    return {
        "apiVersion": "kueue-governor.io/v1alpha1",
        "kind": "Platform",
        "topologies": [{"name": "e2e-scale-network", "levels": manifests.TOPOLOGY_LEVELS}],
        "flavors": [
            {
                "name": "e2e-scale-gpu",
                "nodeLabels": {manifests.INSTANCE_TYPE_LABEL: "p5.48xlarge"},
                "topologyName": "e2e-scale-network",
                "nodeResources": {"cpu": 192, "memory": "2Ti", GPU: 8},
            }
        ],
        "cohorts": [{"name": "e2e-scale"}],
        "teams": [
            {
                "name": f"{SCALE_PREFIX}-{index:02d}",
                "cohort": "e2e-scale",
                "quotas": [
                    {
                        "flavor": "e2e-scale-gpu",
                        "resources": {
                            "cpu": {"nominalQuota": 1},
                            "memory": {"nominalQuota": "1Gi"},
                            GPU: {"nominalQuota": 1},
                        },
                    }
                ],
            }
            for index in range(teams)
        ],
    }


@pytest.fixture
async def nodes_file(dynamic: DynamicClient, tmp_path: Path) -> Path:
    """The live nodes as ``kubectl get nodes -o json`` writes them (the generator's ``--nodes``)."""
    path = tmp_path / "nodes.json"
    nodes = await list_objects(dynamic, "v1", "Node")
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    return path


def test_generator_refuses_quota_above_the_live_gpu_capacity(nodes_file: Path, tmp_path: Path) -> None:
    """With ``--nodes --strict``, more nominal GPUs than the cluster's nodes have is an error."""
    gpus = sum(int(node["status"]["allocatable"].get(GPU, "0")) for node in json.loads(nodes_file.read_text())["items"])
    platform = tmp_path / "too-big.yaml"
    platform.write_text(yaml.safe_dump(scale_platform(gpus + 1)))
    output = tmp_path / "out"
    result = subprocess.run(
        [*kgov_command(), "generate", str(platform), "--out", str(output), "--nodes", str(nodes_file), "--strict"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert f"nominalQuota of {GPU} summed over teams is {gpus + 1}" in result.stderr
    assert f"above the allocatable {gpus} of the" in result.stderr
    assert not output.exists()


async def test_fifty_generated_teams_each_admit_a_job_in_their_own_cluster_queue(
    dynamic: DynamicClient, cleanup: Cleanup, nodes_file: Path, tmp_path: Path
) -> None:
    platform = tmp_path / "platform.yaml"
    platform.write_text(yaml.safe_dump(scale_platform(SCALE_TEAMS), sort_keys=False))
    generated = generate(
        platform,
        tmp_path / "generated",
        "--nodes",
        str(nodes_file),
        "--strict",
        "--policy-namespace",
        "kgov-e2e-scale",  # not the bundled platform's kgov-policy ConfigMap
    )
    teams = [f"{SCALE_PREFIX}-{index:02d}" for index in range(SCALE_TEAMS)]
    assert generated.team_namespaces == teams
    queues = [queue["metadata"]["name"] for queue in generated.of_kind("ClusterQueue")]
    assert sorted(queues) == teams
    assert all(queue["spec"]["cohortName"] == "e2e-scale" for queue in generated.of_kind("ClusterQueue"))

    try:
        await apply_generated(dynamic, generated)
        await wait_cluster_queues_active(dynamic, queues, timeout=90)
        admitted = await admit_one_job_per_namespace(dynamic, generated, cleanup, timeout=120)
        # Each team's LocalQueue points at its own ClusterQueue, named like the team here.
        assert admitted == {team: team for team in teams}
    finally:
        await cleanup.run()
        await _delete_generated_kueue_objects(dynamic, generated)


async def _delete_generated_kueue_objects(dynamic: DynamicClient, generated: Generated) -> None:
    """Remove what the 50-team platform added (namespaces stay: they could not finish deleting)."""
    for obj in reversed(generated.objects):
        if obj["apiVersion"] != KUEUE_API:
            continue
        resource = await dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        with contextlib.suppress(NotFoundError):
            await dynamic.delete(resource, name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
