"""Reading a cluster for ``kgov topology`` and labelling its nodes, with kubernetes-asyncio
(the client of :mod:`webhook.kube.client`: kubeconfig as kubectl finds it, errors as :class:`ClusterError`).

Lists are read whole (``kubectl get … -o json``'s view), as plain dicts. Workloads are read at
``kueue.x-k8s.io/v1beta2``; a cluster without Kueue simply has none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.kube.client import ClusterError, get_json, items_of, open_client
from webhook.topology.ec2 import LabelChange

__all__ = [
    "ClusterError",
    "ClusterState",
    "apply_labels",
    "read_cluster",
    "read_nodes",
]

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"


@dataclass
class ClusterState:
    """Nodes, bound pods and Workloads of a cluster; ``levels`` of the Topology asked for (empty: none);
    ``tolerations`` of every ResourceFlavor."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    workloads: list[dict[str, Any]] = field(default_factory=list)
    levels: list[str] = field(default_factory=list)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


async def read_nodes(kubeconfig: str | Path | None) -> list[dict[str, Any]]:
    """Every Node of the cluster.

    Raises:
        ClusterError: see :class:`ClusterError`.
    """
    async with await open_client(kubeconfig) as api:
        return items_of(await get_json(api, "/api/v1/nodes"))


async def read_cluster(kubeconfig: str | Path | None, topology: str | None = None) -> ClusterState:
    """Nodes, bound pods (``spec.nodeName`` set), Workloads and the ResourceFlavors' tolerations;
    with ``topology``, the levels of that Kueue Topology (``spec.levels[].nodeLabel``).

    Raises:
        ClusterError: see :class:`ClusterError`; also when the Topology does not exist.
    """
    state = ClusterState()
    async with await open_client(kubeconfig) as api:
        if topology is not None:
            found = await get_json(api, f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}/topologies/{topology}")
            if found is None:
                raise ClusterError(f"Topology {topology!r} not found ({KUEUE_GROUP}/{KUEUE_VERSION})")
            levels = (found.get("spec") or {}).get("levels") or []
            state.levels = [str(level.get("nodeLabel")) for level in levels if isinstance(level, dict)]
        state.nodes = items_of(await get_json(api, "/api/v1/nodes"))
        state.pods = items_of(await get_json(api, "/api/v1/pods", [("fieldSelector", "spec.nodeName!=")]))
        workloads = await get_json(api, f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}/workloads")
        if workloads is None:
            state.notes.append(f"no {KUEUE_GROUP}/{KUEUE_VERSION} Workloads on this cluster (Kueue not installed?)")
        state.workloads = items_of(workloads)
        flavors = await get_json(api, f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}/resourceflavors")
        for flavor in items_of(flavors):
            found = (flavor.get("spec") or {}).get("tolerations")
            state.tolerations.extend(t for t in found or [] if isinstance(t, dict))
    return state


async def apply_labels(kubeconfig: str | Path | None, changes: list[LabelChange]) -> list[str]:
    """Patch each node's labels (strategic merge; a None value removes the label). Returns the
    names of the nodes patched.

    Raises:
        ClusterError: a node could not be patched (earlier nodes stay patched; the message says which).
    """
    import aiohttp
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    done: list[str] = []
    async with await open_client(kubeconfig) as api:
        core = client.CoreV1Api(api)
        for change in changes:
            try:
                await core.patch_node(change.node, {"metadata": {"labels": change.labels}})
            except ApiException as exc:
                already = f"; already labelled: {', '.join(done)}" if done else ""
                raise ClusterError(f"labelling node {change.node}: HTTP {exc.status} {exc.reason}{already}") from None
            except (TimeoutError, OSError, aiohttp.ClientError) as exc:
                raise ClusterError(f"labelling node {change.node}: {exc or type(exc).__name__}") from None
            done.append(change.node)
    return done
