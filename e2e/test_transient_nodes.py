"""Nodes down for now, with Kueue as the oracle (bundled platform, the governor watching nodes).

Every p5 node cordoned (``spec.unschedulable``, as ``kubectl cordon`` sets it): Kueue v0.19.2's TAS
leaves cordoned nodes out (``tas_nodes_cache.go``), so a data-science Job (topology ``enforce``,
required at the rack) of 2 pods of 8 GPUs, which a rack of 2 hosts holds, cannot be admitted
now. The governor admits it with a Warning that it waits for the nodes (not the denial "can never
be admitted"), Kueue leaves it pending, and admits it once the nodes are uncordoned; a Job of 3
such pods, which no rack holds even with every node back, is still refused.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import manifests
from e2e.support import (
    Cleanup,
    Refused,
    condition,
    create_with_warnings,
    is_true,
    job_manifest,
    pause_pod_spec,
    wait_for,
    workload_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

DATA_SCIENCE = "hyperpod-ns-data-science"  # topology: required at layer-3, enforce
RACK = "topology.k8s.aws/network-node-layer-3"
WAITS = "cannot be admitted until nodes come back"


def gpu_job(name: str, pods: int) -> dict[str, Any]:
    """A plain Job of ``pods`` pods of 8 GPUs (a whole p5 host each), no Kueue labels."""
    return job_manifest(name, DATA_SCIENCE, pods, {"spec": pause_pod_spec(8, "100m", "64Mi", "Never")})


async def cordon(api: k8s.ApiClient, names: list[str], unschedulable: bool) -> None:
    core = k8s.CoreV1Api(api)
    for name in names:
        await core.patch_node(name, {"spec": {"unschedulable": unschedulable or None}})


async def test_a_job_waiting_for_cordoned_nodes_is_admitted_by_kueue_once_they_are_back(
    api: k8s.ApiClient, dynamic: DynamicClient, cleanup: Cleanup
) -> None:
    core = k8s.CoreV1Api(api)
    selector = f"{manifests.INSTANCE_TYPE_LABEL}=p5.48xlarge"
    nodes = [n.metadata.name for n in (await core.list_node(label_selector=selector)).items]
    assert nodes
    await cordon(api, nodes, True)
    try:

        async def governor_sees_them() -> list[str] | None:
            probe = gpu_job(f"probe-{secrets.token_hex(3)}", 2)
            created = await create_with_warnings(dynamic, probe, dry_run=True)
            waits = [w for w in created.warnings if WAITS in w]
            return waits or None

        (warning,) = await wait_for(governor_sees_them, "the governor to see the cordoned nodes", timeout=60)
        assert warning == (
            f"kueue-governor: topology: podset 'main' {WAITS}: all its pods (2 pods of {{cpu: 0.1, memory: 67108864, "
            f"nvidia.com/gpu: 8}}) must fit in one {RACK} domain, and the largest holds 0 such pods on the nodes "
            f"Ready and schedulable now; {len(nodes)} of the team's nodes are down now ({len(nodes)} cordoned), "
            f"and it fits once 2 of them are Ready and schedulable (e.g. in {RACK} nn-rack-1-1-1)"
        )
        with pytest.raises(Refused) as refused:  # no rack holds 3 hosts, cordoned or not
            await create_with_warnings(dynamic, gpu_job(f"three-{secrets.token_hex(3)}", 3))
        assert "podset 'main' can never be admitted" in refused.value.status["message"]
        assert "the largest holds 2 such pods on an empty cluster" in refused.value.status["message"]

        body = cleanup.add(gpu_job(f"waits-{secrets.token_hex(3)}", 2))
        created = await create_with_warnings(dynamic, body)
        assert [w for w in created.warnings if WAITS in w] == [warning]
        uid = created.obj["metadata"]["uid"]

        async def pending() -> dict[str, Any] | None:
            workload = await workload_for(dynamic, DATA_SCIENCE, uid)
            reserved = condition(workload, "QuotaReserved") if workload else None
            return workload if reserved is not None and reserved["status"] == "False" else None

        waiting = await wait_for(pending, "Kueue to leave the Job pending while the nodes are cordoned", timeout=60)
        assert not is_true(waiting, "Admitted")
    finally:
        await cordon(api, nodes, False)

    async def admitted() -> dict[str, Any] | None:
        workload = await workload_for(dynamic, DATA_SCIENCE, uid)
        return workload if workload is not None and is_true(workload, "Admitted") else None

    await wait_for(admitted, "Kueue to admit the Job once the nodes are uncordoned", timeout=180)
