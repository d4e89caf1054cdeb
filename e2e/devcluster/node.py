"""One real node beside the KWOK nodes: containerd, runc, a CNI bridge, kubelet and kube-proxy.

containerd 1.6, runc and the CNI plugins are Debian's (``make e2e-node-deps``); kubelet and
kube-proxy are built from the same Kubernetes module as the API server (:mod:`e2e.build`); the
pause image and the project's image are built on this machine (:mod:`e2e.image`) and imported into
containerd's ``k8s.io`` namespace, so nothing is pulled. Pods run on a bridge (``10.244.0.0/24``);
the node's address is the bridge's, 10.244.0.1.

The node (``kgov-node``) carries the labels of one host of the shape plus
:data:`REAL_NODE_LABEL`, and the taint ``kgov.test/real-node=true:NoSchedule``: only pods that
tolerate it (the chart's, in the tests that ask for the node) land there. Pods reach the API server
through the ``kubernetes`` Service: kube-proxy sends 10.96.0.1:443 to a relay on the node's
address (:mod:`.relay`) that forwards to the API server on 127.0.0.1 (a hand-made
``default/kubernetes`` EndpointSlice names it).

Settings this machine kind needs (no ``CAP_SYS_RESOURCE``, cgroup v1): containerd's
``restrict_oom_score_adj`` and the kubelet's ``failCgroupV1: false``. The machine changes are
recorded and undone by :mod:`.nodehost`; only one real node runs on a machine at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.dynamic.exceptions import DynamicApiError

from e2e import build, image, oci
from e2e.devcluster import nodehost
from e2e.devcluster.client import apply, dynamic_client
from e2e.devcluster.nodeconfig import (
    APISERVER_RELAY_PORT,
    NODE_NAME,
    NODE_PROCESSES,
    REAL_NODE_LABEL,
    REAL_NODE_SELECTOR,
    REAL_NODE_TAINT,
    REAL_NODE_TOLERATION,
    NodePaths,
    cni_config,
    containerd_config,
    kube_proxy_configuration,
    kubelet_configuration,
    kubernetes_endpoints,
    node_labels,
)
from e2e.devcluster.nodehost import NODE_IP, check_machine
from e2e.devcluster.pki import token_of, write_kubeconfig
from e2e.devcluster.processes import free_ports, process_alive, start_process, stop_process, wait_until
from e2e.devcluster.state import ClusterInfo, DevClusterError, Paths, load_info, save_info
from e2e.manifests import TopologyShape

__all__ = [
    "NODE_NAME",
    "NODE_PROCESSES",
    "REAL_NODE_LABEL",
    "REAL_NODE_SELECTOR",
    "REAL_NODE_TAINT",
    "REAL_NODE_TOLERATION",
    "NodePaths",
    "import_images",
    "start_real_node",
    "stop_real_node",
]


def _token_of(paths: Paths, user: str) -> str:
    """``user``'s token, or the admin's for a cluster started before that user had one."""
    try:
        return token_of(paths, user)
    except DevClusterError:
        return token_of(paths, "kgov-admin")


def _ctr(node: NodePaths, *args: str) -> subprocess.CompletedProcess[str]:
    command = ["ctr", "-a", str(node.socket), "-n", "k8s.io", *args]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def import_images(node: NodePaths, archives: list[Path]) -> None:
    """Import each archive into containerd's ``k8s.io`` namespace unless the same manifest is there
    (an older image of the same name is removed first).

    Raises:
        DevClusterError: ``ctr images import`` failed.
    """
    listed = _ctr(node, "images", "ls").stdout.splitlines()[1:]
    present = {fields[0]: fields[2] for fields in (line.split() for line in listed) if len(fields) > 2}
    for archive in archives:
        with contextlib.suppress(ValueError):
            name, digest, _ = oci.read_archive(archive)
            if present.get(name) == digest:
                continue
            if name in present:  # an older build: its content and snapshot go (the store is in the cache)
                _ctr(node, "images", "rm", "--sync", name)
        imported = _ctr(node, "images", "import", str(archive))
        if imported.returncode != 0:
            raise DevClusterError(f"ctr images import {archive} failed: {imported.stderr.strip()}")
    # The CRI plugin also names each image by its ID (``sha256:…``); such a name left from an older
    # build keeps its layers alive in the cached store: it goes once no other name has its target.
    refs = [line.split() for line in _ctr(node, "images", "ls").stdout.splitlines()[1:]]
    named = {fields[2] for fields in refs if len(fields) > 2 and not fields[0].startswith("sha256:")}
    for fields in refs:
        if len(fields) > 2 and fields[0].startswith("sha256:") and fields[2] not in named:
            _ctr(node, "images", "rm", "--sync", fields[0])


def start_real_node(root: Path, timeout: float = 180.0) -> ClusterInfo:
    """Start the real node in the running cluster of ``root`` and wait until it is Ready.

    Builds (or takes from the cache) the pause image and the project's image first. Returns the
    saved cluster info, with ``real_node`` set.

    Raises:
        DevClusterError: no running cluster, the machine lacks what the node needs, another real
            node runs on this machine, or a part did not start (its log tail is included).
        e2e.image.ImageError: an image could not be built.
    """
    paths = Paths(root)
    info = load_info(paths.root)
    if info is None:
        raise DevClusterError(f"no running cluster in {paths.root}; run `up` first")
    if info.real_node and process_alive(paths, "kubelet"):
        return info
    check_machine()
    node = NodePaths(paths)
    # The images and binaries first: between its claim and its containerd a node looks dead to
    # another start, which would then put the machine back (flushing this node's rules) under it.
    archives = [image.ensure_pause_image(), image.ensure_image()]
    binaries = build.ensure_binaries()
    owner = nodehost.claim_owner()
    owner_alive = owner is not None and process_alive(Paths(owner), "containerd") is not None
    previous = nodehost.claim_machine(paths.root, owner_alive)
    if previous is not None:  # a node that died without ``down``: put the machine back first
        nodehost.restore_host(NodePaths(Paths(previous)).root, None)
    try:
        _start(paths, info, node, archives, binaries, timeout)
    except BaseException:
        stop_real_node(paths)  # nothing half-started stays on the machine
        raise
    info.real_node = NODE_NAME
    save_info(paths, info)
    return info


def _start(
    paths: Paths, info: ClusterInfo, node: NodePaths, archives: list[Path], binaries: dict[str, Path], timeout: float
) -> None:
    started = time.monotonic()
    nodehost.record_host(node.host_record)
    nodehost.setup_network()
    for directory in (node.containerd_root, node.containerd_state, node.cni_conf, node.cni_ipam, node.pod_logs):
        directory.mkdir(parents=True, exist_ok=True)
    node.containerd_config.write_text(containerd_config(node))
    (node.cni_conf / "10-kgov-bridge.conflist").write_text(json.dumps(cni_config(node), indent=2))
    start_process(paths, "containerd", ["nice", "-n", "10", "containerd", "--config", str(node.containerd_config)])
    wait_until("containerd", lambda: _ctr(node, "version").returncode == 0, 30.0, paths, "containerd")
    import_images(node, archives)

    kubelet_healthz, proxy_healthz, proxy_metrics = free_ports(3)
    ca_pem = paths.ca_crt.read_bytes()
    write_kubeconfig(
        node.kubelet_kubeconfig, info.apiserver_url, ca_pem, "kubelet", _token_of(paths, f"system:node:{NODE_NAME}")
    )
    write_kubeconfig(
        node.proxy_kubeconfig, info.apiserver_url, ca_pem, "kube-proxy", _token_of(paths, "system:kube-proxy")
    )
    node.kubelet_config.write_text(yaml.safe_dump(kubelet_configuration(node, paths, kubelet_healthz)))
    labels = ",".join(f"{k}={v}" for k, v in node_labels(TopologyShape.parse(info.shape)).items())
    start_process(
        paths,
        "kubelet",
        [
            str(binaries["kubelet"]),
            f"--config={node.kubelet_config}",
            f"--kubeconfig={node.kubelet_kubeconfig}",
            f"--root-dir={node.kubelet_root}",
            f"--cert-dir={node.kubelet_pki}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={NODE_IP}",
            f"--node-labels={labels}",
            "--v=1",
        ],
    )
    port = info.apiserver_url.rsplit(":", 1)[1]
    relay = [sys.executable, "-m", "e2e.devcluster.relay", f"{NODE_IP}:{APISERVER_RELAY_PORT}", f"127.0.0.1:{port}"]
    start_process(
        paths, "apiserver-relay", relay, {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    )
    node.proxy_config.write_text(yaml.safe_dump(kube_proxy_configuration(node, proxy_healthz, proxy_metrics)))
    start_process(paths, "kube-proxy", [str(binaries["kube-proxy"]), f"--config={node.proxy_config}", "--v=1"])
    asyncio.run(_register_and_wait(paths, timeout))
    print(f"real node {NODE_NAME} Ready in {time.monotonic() - started:.1f}s", file=sys.stderr)


async def _register_and_wait(paths: Paths, timeout: float) -> None:
    async with dynamic_client(paths.kubeconfig, paths.discovery_cache) as dynamic:
        await apply(dynamic, kubernetes_endpoints())
        nodes = await dynamic.resources.get(api_version="v1", kind="Node")
        deadline = time.monotonic() + timeout
        conditions: dict[str, str] = {}
        while time.monotonic() < deadline:
            for name in ("kubelet", "kube-proxy", "containerd"):
                if process_alive(paths, name) is None:
                    raise DevClusterError(f"{name} exited: see {paths.log(name)}")
            with contextlib.suppress(ApiException):
                found = (await dynamic.get(nodes, name=NODE_NAME)).to_dict()
                conditions = {c["type"]: c["status"] for c in (found.get("status") or {}).get("conditions") or []}
                if conditions.get("Ready") == "True":
                    return
            await asyncio.sleep(0.5)
        raise DevClusterError(
            f"node {NODE_NAME} not Ready after {timeout:.0f}s: {conditions}; see {paths.log('kubelet')}"
        )


def _remove_pods(node: NodePaths) -> None:
    """Kill and delete every task and container of containerd's ``k8s.io`` namespace (the kubelet
    leaves its pods running when it stops)."""
    for line in _ctr(node, "tasks", "ls", "-q").stdout.split():
        _ctr(node, "tasks", "kill", "-s", "SIGKILL", line)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        remaining = _ctr(node, "tasks", "ls", "-q").stdout.split()
        for task in remaining:
            _ctr(node, "tasks", "delete", "-f", task)
        if not remaining:
            break
        time.sleep(0.2)
    containers = _ctr(node, "containers", "ls", "-q").stdout.split()
    if containers:
        _ctr(node, "containers", "rm", *containers)


def _stop_shims(node: NodePaths) -> None:
    """Stop the runc shims that serve our containerd (they outlive it in their own sessions)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            if cmdline[0].endswith(b"containerd-shim-runc-v2") and str(node.socket).encode() in cmdline:
                os.kill(int(proc.name), 9)


async def _unregister(paths: Paths) -> None:
    """Delete the Node and the ``kubernetes`` EndpointSlice (a stopped kubelet leaves its Node behind)."""
    async with dynamic_client(paths.kubeconfig, paths.discovery_cache) as dynamic:
        for api_version, kind, name, namespace in (
            ("v1", "Node", NODE_NAME, None),
            ("discovery.k8s.io/v1", "EndpointSlice", "kubernetes", "default"),
        ):
            resource = await dynamic.resources.get(api_version=api_version, kind=kind)
            with contextlib.suppress(ApiException, DynamicApiError):
                await dynamic.delete(resource, name=name, namespace=namespace)


def stop_real_node(paths: Paths) -> list[str]:
    """Stop the node's processes, remove its pods, stop containerd and restore the machine; with
    the API server still running, delete the Node and the ``kubernetes`` EndpointSlice.

    Returns the names of the processes that were running. Does nothing on the machine when this
    state directory never ran a node (no ``node/host.json`` and no claim).
    """
    node = NodePaths(paths)
    stopped = [name for name in ("kube-proxy", "apiserver-relay", "kubelet") if stop_process(paths, name)]
    if stopped and process_alive(paths, "kube-apiserver") is not None:
        asyncio.run(asyncio.wait_for(_unregister(paths), 30.0))
    if node.socket.exists() and process_alive(paths, "containerd") is not None:
        _remove_pods(node)
    if stop_process(paths, "containerd"):
        stopped.append("containerd")
    _stop_shims(node)
    if node.host_record.exists() or nodehost.claim_owner() == paths.root:
        nodehost.restore_host(node.root, build.cache_dir() / "bin" / f"kube-proxy-{build.KUBERNETES_VERSION}")
        nodehost.release_machine(paths.root)
    info = load_info(paths.root)
    if info is not None and info.real_node is not None:
        info.real_node = None
        save_info(paths, info)
    return stopped
