"""Never-admitted workloads the API server lets through, against the real Kueue v0.19.2.

What the governor's findings (``webhook/core/plan/rules/podset_limits.py``) say of them is what Kueue
does:

- an AppWrapper's podsets are named ``<name>-<index>``: with a dot in the name (or a name so long
  that the podset name passes 63 characters) Kueue never creates its Workload (the Workload CRD's
  ``PodSetReference``), in a namespace of no team; the governor refuses it in research;
- a PyTorchJob whose container requests more than its limit (no API server check for a custom
  resource) gets a Workload Kueue never admits (``ValidateResources``): warned in data-science
  (whose queue rule only warns), and Kueue leaves it pending for that reason; refused in research.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import pytest
from kubernetes_asyncio.dynamic import DynamicClient

from e2e.support import Cleanup, Refused, create_with_warnings, pause_pod_spec, wait_for, workload_for
from e2e.test_kueue_view import DATA_SCIENCE, RESEARCH, kueue_verdict

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

QUEUE = {"kueue.x-k8s.io/queue-name": "q"}
OVER = "requests cpu 0.2, above its limit 0.1"


def appwrapper(name: str, namespace: str) -> dict[str, Any]:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "inner"},
        "spec": {"parallelism": 1, "completions": 1, "template": {"spec": pause_pod_spec(0, "10m", "16Mi", "Never")}},
    }
    return {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(QUEUE)},
        "spec": {"components": [{"template": job}]},
    }


def over_limit_pytorchjob(namespace: str) -> dict[str, Any]:
    master = pause_pod_spec(0, "200m", "16Mi", "OnFailure")
    master["containers"][0]["resources"]["limits"] = {"cpu": "100m"}
    worker = pause_pod_spec(0, "100m", "16Mi", "OnFailure")
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": f"over-{secrets.token_hex(3)}", "namespace": namespace},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": master}},
                "Worker": {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": worker}},
            }
        },
    }


async def test_kueue_never_creates_the_workload_of_an_appwrapper_named_with_a_dot(
    dynamic: DynamicClient, namespace: str, cleanup: Cleanup
) -> None:
    plain = appwrapper(f"aw-{secrets.token_hex(3)}", namespace)
    dotted = appwrapper(f"aw.v1-{secrets.token_hex(3)}", namespace)
    long = appwrapper("a" * 55 + f"-{secrets.token_hex(3)}", namespace)  # 62 characters: 'a…-0' has 64
    created = {}
    for body in (plain, dotted, long):
        created[body["metadata"]["name"]] = (await create_with_warnings(dynamic, body)).obj
    workload = await wait_for(
        lambda: workload_for(dynamic, namespace, created[plain["metadata"]["name"]]["metadata"]["uid"]),
        "the plain AppWrapper's Workload",
        timeout=60,
    )
    assert [p["name"] for p in workload["spec"]["podSets"]] == [f"{plain['metadata']['name']}-0"]
    await asyncio.sleep(10)  # well past Kueue's first reconcile of the others
    for body in (dotted, long):
        assert await workload_for(dynamic, namespace, created[body["metadata"]["name"]]["metadata"]["uid"]) is None
    # In research the governor says so.
    refused = appwrapper(f"aw.v1-{secrets.token_hex(3)}", RESEARCH)
    refused["metadata"]["labels"] = {}
    cleanup.add(refused)
    with pytest.raises(Refused) as error:
        await create_with_warnings(dynamic, refused, dry_run=True)
    assert "names the AppWrapper's podsets after it" in str(error.value.status.get("message"))


async def test_kueue_never_admits_requests_above_limits_in_a_pytorchjob(
    dynamic: DynamicClient, cleanup: Cleanup
) -> None:
    with pytest.raises(Refused) as error:
        await create_with_warnings(dynamic, over_limit_pytorchjob(RESEARCH), dry_run=True)
    assert OVER in str(error.value.status.get("message"))
    body = cleanup.add(over_limit_pytorchjob(DATA_SCIENCE))
    created = await create_with_warnings(dynamic, body)
    assert [w for w in created.warnings if OVER in w], created.warnings
    admitted, message = await kueue_verdict(dynamic, DATA_SCIENCE, created.obj["metadata"]["uid"])
    print(f"\nKueue: {message}")
    assert not admitted
    assert "requests must not exceed its limits" in message, message
