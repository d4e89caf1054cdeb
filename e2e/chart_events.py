"""What happens to the chart's pods on the real node in :mod:`e2e.test_chart_real_node`: an
image under a second tag (an upgrade's new image), a certificate rotation seen in the served
certificate, a drain under the PodDisruptionBudget, a ``kill -9`` of a server process, and the
readiness waits between them.

Every function takes the test's API client and the chart's namespace and Deployment name; times are
seconds. They raise ``AssertionError`` (with what was seen) when the cluster does not get where it
should within their timeout.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import ssl
import subprocess
import time
from pathlib import Path

from cryptography import x509
from kubernetes_asyncio import client as k8s

from e2e import devcluster, support
from e2e.devcluster.node import NODE_NAME
from e2e.devcluster.nodeconfig import NodePaths

SELECTOR = "app.kubernetes.io/instance=kgov"


async def chart_pods(api: k8s.ApiClient, namespace: str) -> list[k8s.V1Pod]:
    """The chart's pods that are not being deleted, by name."""
    pods = await k8s.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=SELECTOR)
    alive = [pod for pod in pods.items if pod.metadata.deletion_timestamp is None]
    return sorted(alive, key=lambda pod: pod.metadata.name)


async def wait_ready(api: k8s.ApiClient, namespace: str, name: str, replicas: int = 2, timeout: float = 180) -> None:
    """Wait until the Deployment controller saw the Deployment's last change and it has
    ``replicas`` ready, updated pods, none unavailable, and no other pod of the chart is left (an
    evicted or replaced one still shutting down)."""
    apps = k8s.AppsV1Api(api)
    core = k8s.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        deployment = await apps.read_namespaced_deployment(name, namespace)
        status = deployment.status
        pods = await core.list_namespaced_pod(namespace, label_selector=SELECTOR)
        if (
            status.observed_generation == deployment.metadata.generation
            and status.updated_replicas == status.replicas == status.ready_replicas == replicas
            and not status.unavailable_replicas
            and len(pods.items) == replicas
        ):
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"Deployment {namespace}/{name} not back to {replicas} ready pods in {timeout}s: {status}")


# --------------------------------------------------------------------------- certificate rotation


def served_certificate(host: str, port: int) -> x509.Certificate:
    """The certificate the server at ``host:port`` presents (not verified: only compared)."""
    pem = ssl.get_server_certificate((host, port), timeout=5)
    return x509.load_pem_x509_certificate(pem.encode())


async def secret_certificate(api: k8s.ApiClient, namespace: str, secret: str) -> x509.Certificate:
    data = (await k8s.CoreV1Api(api).read_namespaced_secret(secret, namespace)).data
    return x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))


async def wait_served(
    api: k8s.ApiClient, namespace: str, wanted: x509.Certificate, port: int, timeout: float = 180
) -> float:
    """Wait until every chart pod presents ``wanted`` on ``port`` (the kubelet updates the mounted
    Secret within its sync period, then the server reloads it); returns the seconds it took."""
    started = time.monotonic()
    deadline = started + timeout
    serials: dict[str, int] = {}
    while time.monotonic() < deadline:
        pods = await chart_pods(api, namespace)
        serials = {}
        for pod in pods:
            try:
                cert = await asyncio.to_thread(served_certificate, pod.status.pod_ip, port)
            except OSError:
                continue
            serials[pod.metadata.name] = cert.serial_number
        if len(serials) == len(pods) == 2 and set(serials.values()) == {wanted.serial_number}:
            return time.monotonic() - started
        await asyncio.sleep(1)
    raise AssertionError(f"the pods serve {serials}, not serial {wanted.serial_number}, after {timeout}s")


# --------------------------------------------------------------------------- drain


async def cordon(api: k8s.ApiClient, unschedulable: bool) -> None:
    await k8s.CoreV1Api(api).patch_node(NODE_NAME, {"spec": {"unschedulable": unschedulable}})


async def evict(api: k8s.ApiClient, pod: k8s.V1Pod) -> int:
    """Ask the Eviction API to evict ``pod``: 201 when it may go, 429 when the
    PodDisruptionBudget refuses (any other answer raises)."""
    body = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=pod.metadata.name, namespace=pod.metadata.namespace))
    try:
        await k8s.CoreV1Api(api).create_namespaced_pod_eviction(pod.metadata.name, pod.metadata.namespace, body)
    except k8s.ApiException as error:
        if error.status == 429:
            return 429
        raise
    return 201


async def evict_until_allowed(api: k8s.ApiClient, pod: k8s.V1Pod, timeout: float = 180) -> int:
    """Evict ``pod`` as ``kubectl drain`` does: again every second while the budget refuses;
    returns how many times it was refused."""
    refused = 0
    deadline = time.monotonic() + timeout
    while await evict(api, pod) == 429:
        refused += 1
        assert time.monotonic() < deadline, f"the PodDisruptionBudget refused {pod.metadata.name} for {timeout}s"
        await asyncio.sleep(1)
    return refused


async def wait_gone(api: k8s.ApiClient, pod: k8s.V1Pod, timeout: float = 90) -> None:
    core = k8s.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            await core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        except k8s.ApiException as error:
            if error.status == 404:
                return
            raise
        await asyncio.sleep(0.5)
    raise AssertionError(f"pod {pod.metadata.name} still there after {timeout}s")


def tag_image(state_dir: Path, source: str, target: str) -> None:
    """Name the real node's image ``source`` also ``target`` in its containerd (``ctr images tag``),
    so that an upgrade to another ``image.tag`` runs without a registry."""
    socket = NodePaths(devcluster.Paths(state_dir)).socket
    command = ["ctr", "-a", str(socket), "-n", "k8s.io", "images", "tag", "--force", source, target]
    subprocess.run(command, capture_output=True, text=True, check=True)


async def pod_images(api: k8s.ApiClient, namespace: str) -> set[str]:
    """The images of the chart's running pods' containers."""
    return {c.image for pod in await chart_pods(api, namespace) for c in pod.spec.containers}


# --------------------------------------------------------------------------- kill -9


def container_pid(state_dir: Path, container_id: str) -> int:
    """The host PID of a container's main process, from the real node's containerd (``ctr task ls``)."""
    socket = NodePaths(devcluster.Paths(state_dir)).socket
    command = ["ctr", "-a", str(socket), "-n", "k8s.io", "task", "ls"]
    listing = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    for line in listing.splitlines()[1:]:
        task, pid, status = line.split()
        if task == container_id and status == "RUNNING":
            return int(pid)
    raise AssertionError(f"no running task {container_id} in: {listing}")


def open_connections(pod_ip: str, metrics_port: int) -> float:
    """``kgov_connections_open`` of the process whose metrics port is ``metrics_port``."""
    metrics = support.read_metrics(f"http://{pod_ip}:{metrics_port}")
    return sum(value for (name, _), value in metrics.items() if name == "kgov_connections_open")


async def kill_server_process(
    api: k8s.ApiClient, namespace: str, state_dir: Path, metrics_port: int
) -> tuple[str, str, int, float]:
    """``kill -9`` the chart's server process that holds the most open webhook connections (the
    API server's kept-alive ones: the kill breaks them, and the API server dials again); the
    process of container ``i`` of a pod serves its metrics on ``metrics_port + i``. Returns the
    pod's name, the container's name, its restart count before the kill and its open connections."""
    candidates = []
    for pod in await chart_pods(api, namespace):
        for index, container in enumerate(pod.spec.containers):
            opened = await asyncio.to_thread(open_connections, pod.status.pod_ip, metrics_port + index)
            candidates.append((opened, pod, container.name))
    opened, pod, name = max(candidates, key=lambda candidate: candidate[0])
    (status,) = [s for s in pod.status.container_statuses if s.name == name]
    container_id = status.container_id.removeprefix("containerd://")
    os.kill(container_pid(state_dir, container_id), signal.SIGKILL)
    return pod.metadata.name, name, status.restart_count, opened


async def wait_restarted(api: k8s.ApiClient, namespace: str, pod: str, container: str, before: int) -> None:
    """Wait until the kubelet restarted ``container`` of ``pod`` and it is ready again."""
    core = k8s.CoreV1Api(api)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = await core.read_namespaced_pod(pod, namespace)
        (status,) = [s for s in found.status.container_statuses if s.name == container]
        if status.restart_count > before and status.ready:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{pod}/{container} not restarted and ready in 120s")
