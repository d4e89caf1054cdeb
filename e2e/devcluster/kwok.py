"""KWOK and the fake nodes it keeps: KWOK's own stages (nodes Ready with a renewed Lease; pods
created, Running and, after their delay annotation, Succeeded), the copy of its ``pod-complete``
stage that completes any annotated pod, its command line and start, and the Node objects of the
node shape: created with their status as a kubelet registers, and waited for until Ready and
untainted."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import ConflictError

from e2e.devcluster.client import apply
from e2e.devcluster.processes import http_ok, start_process, wait_until
from e2e.devcluster.state import DevClusterError, Paths
from e2e.manifests import FAKE_NODE_LABEL

# Pod IPs KWOK hands out (no networking: only the pod status carries them).
KWOK_POD_CIDR = "10.0.0.1/16"
# KWOK's stages, from its module (kustomize/stage/...): nodes become Ready and renew a Lease as a
# kubelet does; pods are created, go Running and (owned by a Job, or any pod with the delay
# annotation: the annotated copy below) complete, and are deleted, each after the delay its
# ``<stage>.stage.kwok.x-k8s.io/delay`` annotation names.
KWOK_STAGES = [
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/general/pod-create.yaml",
    "kustomize/stage/pod/general/pod-init-container-running.yaml",
    "kustomize/stage/pod/general/pod-init-container-completed.yaml",
    "kustomize/stage/pod/general/pod-ready.yaml",
    "kustomize/stage/pod/general/pod-complete.yaml",
    "kustomize/stage/pod/general/pod-delete.yaml",
]
# KWOK's pod-complete stage completes only pods a Job owns; this copy of it (named
# ``pod-complete-annotated``) also completes any other pod, such as a Kueue pod group's bare Pods,
# that opts in with the ``pod-complete.stage.kwok.x-k8s.io/delay`` annotation. A Job's pod with the
# annotation matches both stages; they give it the same delay and status.
KWOK_POD_COMPLETE = "kustomize/stage/pod/general/pod-complete.yaml"
KWOK_POD_COMPLETE_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"


def annotated_pod_complete_stage(kwok_dir: Path) -> dict[str, Any]:
    """KWOK's own ``pod-complete`` Stage with its ``ownerReferences`` kind ``Job`` selector
    replaced by: the pod has the annotation :data:`KWOK_POD_COMPLETE_ANNOTATION`.

    Raises:
        DevClusterError: KWOK's stage no longer has the one selector expression replaced.
    """
    (stage,) = yaml.safe_load_all((kwok_dir / KWOK_POD_COMPLETE).read_text())
    expressions = stage["spec"]["selector"]["matchExpressions"]
    owner = [e for e in expressions if e["key"] == ".metadata.ownerReferences.[].kind"]
    if len(owner) != 1:
        raise DevClusterError(f"KWOK's {KWOK_POD_COMPLETE} has no single ownerReferences selector: {expressions}")
    stage["metadata"]["name"] = "pod-complete-annotated"
    annotated = {"key": f'.metadata.annotations["{KWOK_POD_COMPLETE_ANNOTATION}"]', "operator": "Exists"}
    stage["spec"]["selector"]["matchExpressions"] = [annotated if e is owner[0] else e for e in expressions]
    return dict(stage)


def kwok_command(binary: Path, kwok_dir: Path, port: int, kubeconfig: Path) -> list[str]:
    """KWOK's command line: :data:`KWOK_STAGES` and the annotated ``pod-complete`` copy (written
    next to ``kubeconfig``), the nodes labelled :data:`~e2e.manifests.FAKE_NODE_LABEL`."""
    extra = kubeconfig.parent / "kwok-pod-complete-annotated.yaml"
    extra.write_text(yaml.safe_dump(annotated_pod_complete_stage(kwok_dir), sort_keys=False))
    stages = [str(kwok_dir / stage) for stage in KWOK_STAGES] + [str(extra)]
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--config={','.join(stages)}",
        f"--manage-nodes-with-label-selector={FAKE_NODE_LABEL}=true",
        # a Lease per node renewed every 10 s, as a kubelet does (node-heartbeat-with-lease)
        "--node-lease-duration-seconds=40",
        f"--cidr={KWOK_POD_CIDR}",
        "--node-ip=127.0.0.1",
        f"--server-address=127.0.0.1:{port}",
        # INFO logs a line per Lease renewal: 25 lines a second with 256 nodes
        "--v=WARN",
    ]


def start_kwok(paths: Paths, binary: Path, kwok_dir: Path, port: int, kubeconfig: Path, timeout: float) -> None:
    """Start KWOK and wait up to ``timeout`` seconds for its ``/healthz``.

    Raises:
        DevClusterError: KWOK exited or did not become healthy (its log tail is included).
    """
    start_process(paths, "kwok", kwok_command(binary, kwok_dir, port, kubeconfig))
    wait_until("KWOK /healthz", lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout, paths, "kwok")


async def apply_nodes(dynamic: DynamicClient, nodes: list[dict[str, Any]], concurrency: int = 32) -> None:
    """Create (or update) the fake nodes, ``concurrency`` at a time.

    A Node is created with its status (capacity, allocatable, nodeInfo) in one request, as a
    kubelet registers itself; KWOK then sets its conditions (Ready) and renews its Lease, and the
    node lifecycle controller lifts the ``node.kubernetes.io/not-ready`` taint the API server's
    TaintNodesByCondition plugin put on it. A node that already exists gets its labels and
    status applied instead.
    """
    resource = await dynamic.resources.get(api_version="v1", kind="Node")
    limit = asyncio.Semaphore(concurrency)

    async def one(node: dict[str, Any]) -> None:
        async with limit:
            try:
                await dynamic.create(resource, body=node)
            except ConflictError:
                await apply(dynamic, {key: node[key] for key in ("apiVersion", "kind", "metadata", "spec")})
                await apply(
                    dynamic,
                    {"apiVersion": "v1", "kind": "Node", "metadata": node["metadata"], "status": node["status"]},
                    "status",
                )

    await asyncio.gather(*(one(node) for node in nodes))


async def wait_nodes_ready(dynamic: DynamicClient, names: list[str], timeout: float = 120.0) -> None:
    """Wait until every named node is Ready and carries no NoSchedule/NoExecute taint.

    Raises:
        DevClusterError: some are not after ``timeout`` seconds (up to 5 are named, with their
            conditions and taints).
    """
    resource = await dynamic.resources.get(api_version="v1", kind="Node")
    wanted = set(names)
    deadline = time.monotonic() + timeout
    pending: dict[str, Any] = {}
    while time.monotonic() < deadline:
        listed = (await dynamic.get(resource, label_selector=f"{FAKE_NODE_LABEL}=true")).to_dict()["items"]
        pending = {
            node["metadata"]["name"]: node
            for node in listed
            if node["metadata"]["name"] in wanted and not _ready_untainted(node)
        }
        missing = wanted - {node["metadata"]["name"] for node in listed}
        if not pending and not missing:
            return
        await asyncio.sleep(0.5)
    sample = {
        name: {
            "conditions": {c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []},
            "taints": (node.get("spec") or {}).get("taints"),
        }
        for name, node in sorted(pending.items())[:5]
    }
    raise DevClusterError(f"{len(pending)} nodes not Ready and untainted after {timeout:.0f}s, e.g. {sample}")


def _ready_untainted(node: dict[str, Any]) -> bool:
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    taints = (node.get("spec") or {}).get("taints") or []
    return conditions.get("Ready") == "True" and not any(t.get("effect") in ("NoSchedule", "NoExecute") for t in taints)
