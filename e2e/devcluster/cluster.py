"""The whole cluster composed from its parts: ``up`` (every component started in turn, each
waited for, then the fake nodes), ``down``, ``status``, :func:`running_cluster` and
:func:`apply_platform`.

A component is one module of this package with a ``start_…`` function; adding one means: its
process name in :data:`PROCESS_ORDER` (and :data:`CONTROL_PLANE` if ``up`` always runs it), its
token user in :data:`~e2e.devcluster.pki.TOKEN_USERS`, a kubeconfig in :data:`KUBECONFIG_USERS`,
its ports from the one :func:`~e2e.devcluster.processes.free_ports` call and a line in :func:`up`.
The real node (:mod:`.node`) is such a component, started last when ``up`` is asked for it (or
later, on the running cluster) and stopped first by ``down``, which also restores the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import sys
import urllib.error
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from e2e import build
from e2e.devcluster.apiserver import start_apiserver
from e2e.devcluster.client import dynamic_client
from e2e.devcluster.controllers import start_controller_manager, start_scheduler, wait_controllers_healthy
from e2e.devcluster.etcd import start_etcd
from e2e.devcluster.governor import start_governor
from e2e.devcluster.jobset import start_jobset_controller
from e2e.devcluster.kueue import ensure_kueue_metrics_cert, install_kueue_crds, register_kueue_webhooks, start_kueue
from e2e.devcluster.kwok import apply_nodes, start_kwok, wait_nodes_ready
from e2e.devcluster.node import NODE_PROCESSES, start_real_node, stop_real_node
from e2e.devcluster.pki import write_kubeconfig, write_pki
from e2e.devcluster.processes import free_ports, http_ok, process_alive, stop_process, tls_context
from e2e.devcluster.state import ClusterInfo, DevClusterError, Paths, load_info, save_info, state_dir
from e2e.manifests import TopologyShape, fake_nodes

PROCESS_ORDER = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kueue",
    "kwok",
    "jobset",
    "governor",
    *NODE_PROCESSES,
]
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue", "kwok")
# The kubeconfig ``up`` writes for each component, ``<component>.kubeconfig`` in the state
# directory with the component's token: component -> the user's name in the file.
KUBECONFIG_USERS = {
    "kueue": "kueue-manager",
    "kube-controller-manager": "kube-controller-manager",
    "kube-scheduler": "kube-scheduler",
    "kwok": "kwok",
}


def up(
    root: Path | None = None,
    shape: TopologyShape | None = None,
    governor_platform: Path | None = None,
    timeout: float = 180.0,
    *,
    jobset_controller: bool = False,
    real_node: bool = False,
) -> ClusterInfo:
    """Bring the cluster up (building binaries first if needed) and return its info.

    A cluster already running in the same state directory is returned as it is (with the JobSet
    controller and the governor started if asked for and not running). It returns once every fake
    node is Ready and untainted. ``jobset_controller`` also runs the JobSet controller manager
    (:func:`start_jobset_controller`); ``real_node`` also starts the real node
    (:func:`~e2e.devcluster.node.start_real_node`: root, ``make e2e-node-deps``).

    Raises:
        DevClusterError: a component did not start or become ready (its log tail is included).
        e2e.image.ImageError: the real node's images could not be built.
    """
    paths = Paths(root or state_dir())
    shape = shape or TopologyShape()
    existing = load_info(paths.root)
    if existing is not None and all(process_alive(paths, n) for n in CONTROL_PLANE):
        if jobset_controller:
            existing = start_jobset_controller(paths.root)
        if real_node:
            existing = start_real_node(paths.root, timeout)
        if governor_platform is not None and existing.governor_url is None:
            start_governor(paths.root, governor_platform)
            existing = load_info(paths.root) or existing
        return existing
    down(paths.root)  # whatever is left of an earlier run: stop it, start clean
    for stale in (paths.etcd_data, paths.pki, paths.pids, paths.logs, paths.cluster_json, paths.discovery_cache):
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink(missing_ok=True)
    paths.root.mkdir(parents=True, exist_ok=True)

    binaries = build.ensure_binaries()
    kueue_dir = build.module_dir("sigs.k8s.io/kueue", build.KUEUE_VERSION)
    tokens = write_pki(paths)
    ca_pem = paths.ca_crt.read_bytes()
    ensure_kueue_metrics_cert(ca_pem, paths.ca_key.read_bytes())
    kwok_dir = build.dependency_dir("kwok", "sigs.k8s.io/kwok")
    ports_list = free_ports(9)
    etcd_client, etcd_peer, apiserver, kueue_webhook, kueue_health, kueue_metrics = ports_list[:6]
    controller_manager_port, scheduler_port, kwok_port = ports_list[6:]
    ports = {"kueue_webhook": kueue_webhook, "kueue_health": kueue_health, "kueue_metrics": kueue_metrics}
    etcd_url = f"http://127.0.0.1:{etcd_client}"
    apiserver_url = f"https://127.0.0.1:{apiserver}"
    info = ClusterInfo(
        state_dir=str(paths.root),
        kubeconfig=str(paths.kubeconfig),
        ca_file=str(paths.ca_crt),
        apiserver_url=apiserver_url,
        etcd_url=etcd_url,
        kueue_webhook_port=kueue_webhook,
        kueue_health_port=kueue_health,
        kueue_metrics_port=kueue_metrics,
        shape=str(shape),
        controller_manager_port=controller_manager_port,
        scheduler_port=scheduler_port,
        kwok_port=kwok_port,
        versions={
            "etcd": build.ETCD_VERSION,
            **{component: build.KUBERNETES_VERSION for component in build.KUBERNETES_COMPONENTS},
            "kueue": build.KUEUE_VERSION,
            "kwok": build.KWOK_VERSION,
        },
    )

    start_etcd(paths, binaries["etcd"], etcd_client, etcd_peer)
    start_apiserver(paths, binaries["kube-apiserver"], etcd_url, apiserver, tokens["admin"], timeout)
    write_kubeconfig(paths.kubeconfig, apiserver_url, ca_pem, "kgov-admin", tokens["admin"])
    kubeconfigs = {}
    for component, user in KUBECONFIG_USERS.items():
        kubeconfigs[component] = paths.root / f"{component}.kubeconfig"
        write_kubeconfig(kubeconfigs[component], apiserver_url, ca_pem, user, tokens[component])

    start_controller_manager(
        paths, binaries["kube-controller-manager"], controller_manager_port, kubeconfigs["kube-controller-manager"]
    )
    start_scheduler(paths, binaries["kube-scheduler"], scheduler_port, kubeconfigs["kube-scheduler"])
    install_kueue_crds(paths, kueue_dir, kueue_webhook, ca_pem)
    start_kueue(paths, binaries["kueue"], kueue_dir, ports, kubeconfigs["kueue"], timeout)
    wait_controllers_healthy(paths, controller_manager_port, scheduler_port, timeout)
    start_kwok(paths, binaries["kwok"], kwok_dir, kwok_port, kubeconfigs["kwok"], timeout)

    nodes = fake_nodes(shape)

    async def install_rest() -> None:
        async with dynamic_client(paths.kubeconfig, paths.discovery_cache) as dynamic:
            await register_kueue_webhooks(dynamic, kueue_dir, kueue_webhook, ca_pem)
            await apply_nodes(dynamic, nodes)
            await wait_nodes_ready(dynamic, [node["metadata"]["name"] for node in nodes], timeout)

    asyncio.run(install_rest())
    info.node_names = [node["metadata"]["name"] for node in nodes]
    save_info(paths, info)
    if jobset_controller:
        info = start_jobset_controller(paths.root, timeout)
    if real_node:
        info = start_real_node(paths.root, timeout)
    if governor_platform is not None:
        info = start_governor(paths.root, governor_platform)
    return info


def down(root: Path | None = None, purge: bool = False) -> list[str]:
    """Stop every process ``up`` started (newest first); returns the names that were running.

    With ``purge`` the whole state directory goes too; otherwise logs and certificates stay
    for inspection and are replaced by the next ``up``.
    """
    paths = Paths(root or state_dir())
    # The real node first: its pods are removed through containerd and the machine restored.
    stopped = stop_real_node(paths)
    stopped += [name for name in reversed(PROCESS_ORDER) if stop_process(paths, name)]
    paths.cluster_json.unlink(missing_ok=True)
    if purge and paths.root.exists():
        shutil.rmtree(paths.root)
    return stopped


def status(root: Path | None = None) -> dict[str, Any]:
    """Processes (pid or None), readiness of the API server and Kueue, and the saved info."""
    paths = Paths(root or state_dir())
    info = load_info(paths.root)
    result: dict[str, Any] = {
        "state_dir": str(paths.root),
        "processes": {name: process_alive(paths, name) for name in PROCESS_ORDER},
    }
    if info is not None:
        result["kubeconfig"] = info.kubeconfig
        token = yaml.safe_load(paths.kubeconfig.read_text())["users"][0]["user"]["token"]
        context = tls_context(paths.ca_crt)
        with contextlib.suppress(OSError, urllib.error.URLError, ssl.SSLError):
            result["apiserver_ready"] = http_ok(f"{info.apiserver_url}/readyz", context, token)
        with contextlib.suppress(OSError, urllib.error.URLError):
            result["kueue_ready"] = http_ok(f"http://127.0.0.1:{info.kueue_health_port}/readyz")
        result["info"] = asdict(info)
    return result


@contextlib.contextmanager
def running_cluster(
    root: Path,
    shape: TopologyShape | None = None,
    governor_platform: Path | None = None,
    *,
    jobset_controller: bool = False,
    real_node: bool = False,
) -> Iterator[ClusterInfo]:
    """``up`` on entry, ``down`` on exit (also when ``up`` fails half-way)."""
    try:
        yield up(
            root,
            shape=shape,
            governor_platform=governor_platform,
            jobset_controller=jobset_controller,
            real_node=real_node,
        )
    finally:
        down(root)


def apply_platform(root: Path, platform: Path) -> None:
    """``kgov generate PLATFORM --namespaces`` into the state directory, applied to the cluster
    (team namespaces with a ``default`` ServiceAccount), ClusterQueues waited for until Active: a
    person can then ``kubectl create`` a plain Job in a team namespace and watch Kueue admit it."""
    from e2e import support  # support builds on this module

    info = load_info(root)
    if info is None:
        raise DevClusterError("no cluster is running")
    generated = support.generate(platform, Paths(root).root / "generated")

    async def apply() -> None:
        async with dynamic_client(info.kubeconfig) as dynamic:
            await support.apply_generated(dynamic, generated)
            queues = [queue["metadata"]["name"] for queue in generated.of_kind("ClusterQueue")]
            await support.wait_cluster_queues_active(dynamic, queues)

    asyncio.run(apply())
    print(f"applied {len(generated.objects)} generated objects from {platform}", file=sys.stderr)
