"""Reading a cluster for ``kgov topology`` and labelling its nodes, with kubernetes-asyncio.

Lists are read whole (``kubectl get … -o json``'s view), as plain dicts. Workloads are read at
``kueue.x-k8s.io/v1beta2``; a cluster without Kueue simply has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.topology.ec2 import LabelChange

__all__ = [
    "ClusterError",
    "ClusterState",
    "apply_labels",
    "client_for",
    "get_json",
    "items_of",
    "read_cluster",
    "read_nodes",
]

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"


class ClusterError(RuntimeError):
    """The cluster could not be read or written (kubeconfig, connection, authorisation, absent object)."""


@dataclass
class ClusterState:
    """Nodes, bound pods and Workloads of a cluster; ``levels`` of the Topology asked for (empty: none)."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    workloads: list[dict[str, Any]] = field(default_factory=list)
    levels: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


async def _client(kubeconfig: str) -> Any:
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    try:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration, persist_config=False)
    except (OSError, config.ConfigException, TypeError, ValueError) as exc:
        raise ClusterError(f"cannot load kubeconfig {kubeconfig}: {exc}") from None
    return client.ApiClient(configuration)


async def _get(api: Any, path: str, query: list[tuple[str, str]] | None = None) -> dict[str, Any] | None:
    """GET a path as JSON; None on 404."""
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        response = await api.call_api(
            path,
            "GET",
            query_params=query or [],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        # Unread content is not checked by the client: the status is ours to check.
        status, reason = response.status, response.reason
        data = await response.json(content_type=None)
    except ApiException as exc:
        status, reason, data = exc.status, exc.reason, None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"GET {path}: {exc}") from None
    if status == 404:
        return None
    if not 200 <= status <= 299:
        message = data.get("message") if isinstance(data, dict) else None
        raise ClusterError(f"GET {path}: HTTP {status} {reason}" + (f": {message}" if message else ""))
    return data if isinstance(data, dict) else None


def _items(listing: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    items = (listing or {}).get("items")
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


#: Public names of the helpers above, for other readers of the cluster (``kgov why``, ``kgov status``).
client_for = _client
get_json = _get
items_of = _items


async def read_nodes(kubeconfig: str) -> list[dict[str, Any]]:
    """Every Node of the cluster.

    Raises:
        ClusterError: see :class:`ClusterError`.
    """
    async with await _client(kubeconfig) as api:
        return _items(await _get(api, "/api/v1/nodes"))


async def read_cluster(kubeconfig: str, topology: str | None = None) -> ClusterState:
    """Nodes, bound pods (``spec.nodeName`` set) and Workloads; with ``topology``, the levels of
    that Kueue Topology (``spec.levels[].nodeLabel``).

    Raises:
        ClusterError: see :class:`ClusterError`; also when the Topology does not exist.
    """
    state = ClusterState()
    async with await _client(kubeconfig) as api:
        if topology is not None:
            found = await _get(api, f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}/topologies/{topology}")
            if found is None:
                raise ClusterError(f"Topology {topology!r} not found ({KUEUE_GROUP}/{KUEUE_VERSION})")
            levels = (found.get("spec") or {}).get("levels") or []
            state.levels = [str(level.get("nodeLabel")) for level in levels if isinstance(level, dict)]
        state.nodes = _items(await _get(api, "/api/v1/nodes"))
        state.pods = _items(await _get(api, "/api/v1/pods", [("fieldSelector", "spec.nodeName!=")]))
        workloads = await _get(api, f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}/workloads")
        if workloads is None:
            state.notes.append(f"no {KUEUE_GROUP}/{KUEUE_VERSION} Workloads on this cluster (Kueue not installed?)")
        state.workloads = _items(workloads)
    return state


async def apply_labels(kubeconfig: str, changes: list[LabelChange]) -> list[str]:
    """Patch each node's labels (strategic merge; a None value removes the label). Returns the
    names of the nodes patched.

    Raises:
        ClusterError: a node could not be patched (earlier nodes stay patched; the message says which).
    """
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    done: list[str] = []
    async with await _client(kubeconfig) as api:
        core = client.CoreV1Api(api)
        for change in changes:
            try:
                await core.patch_node(change.node, {"metadata": {"labels": change.labels}})
            except ApiException as exc:
                already = f"; already labelled: {', '.join(done)}" if done else ""
                raise ClusterError(f"labelling node {change.node}: HTTP {exc.status} {exc.reason}{already}") from None
            except OSError as exc:
                raise ClusterError(f"labelling node {change.node}: {exc}") from None
            done.append(change.node)
    return done
