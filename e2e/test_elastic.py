"""Elastic Jobs (``kueue.x-k8s.io/elastic-job: "true"``) against the real Kueue: its Job webhook
refuses ``podset-required-topology`` and ``podset-preferred-topology`` on them (the oracle, in a
namespace of no team), so the governor sets neither in research's namespace (``topology: auto``)
and says why in a warning; the same Job without the annotation gets its TAS annotation."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from kubernetes_asyncio.dynamic import DynamicClient

from e2e.support import Refused, create_with_warnings

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

RESEARCH = "hyperpod-ns-research"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
LEVEL = "topology.k8s.aws/network-node-layer-3"


def _job(namespace: str, elastic: bool, template_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": f"elastic-{secrets.token_hex(3)}", "namespace": namespace}
    if elastic:
        metadata["annotations"] = {"kueue.x-k8s.io/elastic-job": "true"}
    template: dict[str, Any] = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "1"}}}
            ],
        }
    }
    if template_annotations:
        template["metadata"] = {"annotations": template_annotations}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"parallelism": 2, "completions": 2, "template": template},
    }


@pytest.mark.parametrize(("key", "mode"), [(REQUIRED, "required"), (PREFERRED, "preferred")])
async def test_kueue_refuses_topology_on_an_elastic_job(
    dynamic: DynamicClient, namespace: str, key: str, mode: str
) -> None:
    body = _job(namespace, elastic=True, template_annotations={key: LEVEL})
    body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "user-queue"}
    with pytest.raises(Refused) as refused:
        await create_with_warnings(dynamic, body, dry_run=True)
    message = str(refused.value.status.get("message"))
    assert f"{mode} topology is not supported with elastic jobs" in message
    assert "kueue-governor" not in message


async def test_an_elastic_job_gets_no_topology_kueue_refuses_and_is_admitted(dynamic: DynamicClient) -> None:
    created = await create_with_warnings(dynamic, _job(RESEARCH, elastic=True), dry_run=True)
    assert created.obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "hyperpod-ns-research-localqueue"
    annotations = (created.obj["spec"]["template"].get("metadata") or {}).get("annotations") or {}
    assert REQUIRED not in annotations and PREFERRED not in annotations
    assert any("no topology annotation set" in w and "elastic" in w for w in created.warnings), created.warnings
    plain = await create_with_warnings(dynamic, _job(RESEARCH, elastic=False), dry_run=True)
    plain_annotations = plain.obj["spec"]["template"]["metadata"]["annotations"]
    assert REQUIRED in plain_annotations or PREFERRED in plain_annotations
