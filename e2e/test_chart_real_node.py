"""The chart with its real image on the real node (SPEC §8, §10).

The module starts the real node (:mod:`e2e.devcluster.node`) in the session's cluster, installs
``helm/kueue-governor`` with the image built on this machine (``pullPolicy: Never``), a nodeSelector
and a toleration for the node, and ``helm --wait``; then:

* the Deployment is Ready with both pods on the real node, and the Service's EndpointSlice lists
  them (kube-controller-manager's EndpointSlice controller);
* the pods reached the API server through the ``kubernetes`` Service (they serve the policy read
  from the ConfigMap through the API);
* the API server calls the webhook through its Service (kube-proxy): a Job created in a team
  namespace gets its queue label, with the session's host-run governor unregistered, and the
  chart's pods count the admission in their metrics;
* ``helm upgrade`` with another policy: the next Job gets the new label; ``helm rollback``: the old one;
* a rolling restart under a stream of Job creations (dry-run): none fails, none is unlabelled.

Needs root (containerd, bridge, iptables) and ``make e2e-node-deps``; skipped otherwise, or with
``KGOV_E2E_REAL_NODE=0``. The node is stopped (and the machine restored) at the end of the module.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import devcluster, support
from e2e.conftest import E2ECluster
from e2e.devcluster import nodehost
from e2e.devcluster.node import NODE_NAME, REAL_NODE_SELECTOR, REAL_NODE_TOLERATION
from e2e.helm_support import CHART, PLATFORM_VALUES, Helm, bundled_governor_unregistered

pytestmark = pytest.mark.e2e

NAMESPACE = "kgov-real-node"
RELEASE = "kgov"
FULLNAME = "kgov-kueue-governor"
WEBHOOK = "kgov-real-node"  # not the harness's kgov-governor
RESEARCH = "hyperpod-ns-research"
RESEARCH_QUEUE = "hyperpod-ns-research-localqueue"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
DEFAULT_PRIORITY = "training-priority"
OTHER_PRIORITY = "experimentation-priority"
METRICS_PORT = 8080


def chart_settings(**extra: str) -> dict[str, str]:
    """``--set-json`` settings: the local image, on the real node, under its own webhook name."""
    return {
        "image.pullPolicy": '"Never"',
        "webhook.name": f'"{WEBHOOK}"',
        "nodeSelector": json.dumps(REAL_NODE_SELECTOR),
        "tolerations": json.dumps([REAL_NODE_TOLERATION]),
        **extra,
    }


def install(helm: Helm, settings: dict[str, str], values: tuple[Path, ...] = (PLATFORM_VALUES,)) -> float:
    """``helm upgrade --install --wait``; returns its seconds."""
    started = time.monotonic()
    args = ["upgrade", "--install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace"]
    helm.run(*args, *helm._value_args(values, settings), "--wait", "--timeout", "4m", timeout=300)
    return time.monotonic() - started


@pytest.fixture(scope="module")
def real_node(e2e_cluster: E2ECluster) -> Iterator[devcluster.ClusterInfo]:
    """The real node in the session's local cluster (started here, stopped at the module's end)."""
    if e2e_cluster.local is None:
        pytest.skip("the real node runs beside the local control plane only")
    if os.environ.get("KGOV_E2E_REAL_NODE") == "0":
        pytest.skip("KGOV_E2E_REAL_NODE=0")
    if os.geteuid() != 0:
        pytest.skip("the real node needs root")
    root = Path(e2e_cluster.local.state_dir)
    owner = nodehost.claim_owner()
    if owner is not None and owner != root and devcluster.process_alive(devcluster.Paths(owner), "containerd"):
        pytest.skip(f"the machine's one real node is in use (state {owner})")
    was_running = devcluster.process_alive(devcluster.Paths(root), "kubelet") is not None
    started = time.monotonic()
    info = devcluster.start_real_node(root)
    print(f"\nreal node Ready {time.monotonic() - started:.1f}s after start_real_node")
    try:
        yield info
    finally:
        if not was_running:
            devcluster.stop_real_node(devcluster.Paths(root))


@pytest.fixture(scope="module")
def chart(
    real_node: devcluster.ClusterInfo, e2e_cluster: E2ECluster, bundled_config: support.Generated
) -> Iterator[Helm]:
    """The chart installed with ``--wait`` on the real node; uninstalled afterwards."""
    helm = Helm(kubeconfig=e2e_cluster.kubeconfig)
    try:
        seconds = install(helm, chart_settings())
        print(f"\nchart Ready (helm --wait) in {seconds:.1f}s")
        yield helm
    finally:
        try:
            helm.run("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "2m", timeout=180)
        finally:
            helm.close()


async def chart_pods(api: k8s.ApiClient) -> list[k8s.V1Pod]:
    pods = await k8s.CoreV1Api(api).list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/instance=kgov")
    return [pod for pod in pods.items if pod.metadata.deletion_timestamp is None]


async def admitted(api: k8s.ApiClient) -> int:
    """Jobs the chart's running pods patched (their ``/metrics``, read from the host at the pod IPs)."""
    total = 0
    for pod in await chart_pods(api):
        if pod.status.pod_ip:
            metrics = await asyncio.to_thread(support.read_metrics, f"http://{pod.status.pod_ip}:{METRICS_PORT}")
            total += support.admission_count(metrics, "Job", "CREATE", "patched")
    return total


def plain_job(name: str) -> dict[str, Any]:
    template = {"spec": support.pause_pod_spec(gpus=0, cpu="100m")}
    return support.job_manifest(name, RESEARCH, 1, template)


async def test_chart_ready_on_the_real_node(chart: Helm, api: k8s.ApiClient) -> None:
    deployment = await k8s.AppsV1Api(api).read_namespaced_deployment(FULLNAME, NAMESPACE)
    assert deployment.status.ready_replicas == deployment.spec.replicas == 2
    pods = await chart_pods(api)
    assert [pod.spec.node_name for pod in pods] == [NODE_NAME, NODE_NAME]
    for pod in pods:
        (container,) = pod.status.container_statuses
        assert container.ready and container.state.running is not None
        assert pod.status.pod_ip.startswith("10.244.0.")
    slices = await k8s.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        NAMESPACE, label_selector=f"kubernetes.io/service-name={FULLNAME}"
    )
    ready = {address for s in slices.items for e in s.endpoints or [] if e.conditions.ready for address in e.addresses}
    assert ready == {pod.status.pod_ip for pod in pods}


async def test_pods_read_the_policy_through_the_api_server(chart: Helm, api: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(api)
    for pod in await chart_pods(api):
        log = await core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE)
        assert f"ConfigMap {NAMESPACE}/{FULLNAME}-policy" in log, log[-2000:]


async def test_apiserver_calls_the_webhook_through_its_service(
    chart: Helm, api: k8s.ApiClient, dynamic: DynamicClient
) -> None:
    async with bundled_governor_unregistered(api, dynamic):
        before = await admitted(api)
        name = f"real-node-{secrets.token_hex(3)}"
        created = await support.create(dynamic, plain_job(name))
        try:
            assert created["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE
            assert await admitted(api) == before + 1
        finally:
            await support.delete(dynamic, created)


async def stream_creates(dynamic: DynamicClient, until: asyncio.Event, counts: dict[str, int], pause: float) -> None:
    """Create dry-run Jobs in the research namespace until ``until`` is set, counting outcomes."""
    while not until.is_set():
        counts["attempted"] += 1
        try:
            result = await support.create_with_warnings(dynamic, plain_job(f"stream-{secrets.token_hex(4)}"), True)
        except support.Refused as refused:
            counts["failed"] += 1
            print(f"refused: {refused}")
        else:
            if result.obj["metadata"].get("labels", {}).get(QUEUE_LABEL) != RESEARCH_QUEUE:
                counts["unlabelled"] += 1
        await asyncio.sleep(pause)


async def test_rolling_restart_under_creates(chart: Helm, api: k8s.ApiClient, dynamic: DynamicClient) -> None:
    apps = k8s.AppsV1Api(api)
    counts = {"attempted": 0, "failed": 0, "unlabelled": 0}
    async with bundled_governor_unregistered(api, dynamic):
        done = asyncio.Event()
        stream = asyncio.create_task(stream_creates(dynamic, done, counts, 0.2))
        await asyncio.sleep(2)
        restarted_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        patch = {
            "spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": restarted_at}}}}
        }
        before = await apps.read_namespaced_deployment(FULLNAME, NAMESPACE)
        await apps.patch_namespaced_deployment(FULLNAME, NAMESPACE, patch)
        started = time.monotonic()
        deadline = started + 180
        while time.monotonic() < deadline:
            current = await apps.read_namespaced_deployment(FULLNAME, NAMESPACE)
            status = current.status
            if (
                status.observed_generation > before.metadata.generation
                and status.updated_replicas == status.replicas == status.ready_replicas == 2
                and not status.unavailable_replicas
            ):
                break
            await asyncio.sleep(0.5)
        rollout = time.monotonic() - started
        await asyncio.sleep(3)  # the old pods' shutdown delay: creations still go on
        done.set()
        await stream
    print(f"\nrolling restart in {rollout:.1f}s under creates: {counts}")
    assert rollout < 180, "the rollout did not finish"
    assert counts["attempted"] > 10
    assert counts["failed"] == 0 and counts["unlabelled"] == 0, counts


async def wait_priority(dynamic: DynamicClient, wanted: str, timeout: float = 60.0) -> dict[str, str]:
    """Create dry-run Jobs in research's namespace until one gets Kueue priority ``wanted``; its labels."""
    labels: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and labels.get(PRIORITY_LABEL) != wanted:
        result = await support.create_with_warnings(dynamic, plain_job(f"upgr-{secrets.token_hex(3)}"), True)
        labels = result.obj["metadata"].get("labels", {})
        await asyncio.sleep(1)
    return labels


async def test_helm_upgrade_and_rollback_of_the_policy(chart: Helm, api: k8s.ApiClient, dynamic: DynamicClient) -> None:
    """An upgrade whose policy gives the research team another default Kueue priority (one it
    allows): once the upgrade is Ready, Jobs get the new one; ``helm rollback`` brings the old one back."""
    values = yaml.safe_load(PLATFORM_VALUES.read_text())
    policy = json.loads(values["platform"]["policy"])
    research = next(team for team in policy["teams"] if team["team"] == "research")
    assert research["kueuePriority"]["default"] == DEFAULT_PRIORITY
    research["kueuePriority"]["default"] = OTHER_PRIORITY
    assert OTHER_PRIORITY in research["kueuePriority"]["allowed"]
    values["platform"]["policy"] = json.dumps(policy, indent=2)
    changed = chart.home / "changed-values.yaml"
    changed.write_text(yaml.safe_dump(values))
    async with bundled_governor_unregistered(api, dynamic):
        try:
            seconds = await asyncio.to_thread(install, chart, chart_settings(), (changed,))
            print(f"\nhelm upgrade with another policy Ready in {seconds:.1f}s")
            labels = await wait_priority(dynamic, OTHER_PRIORITY)
            assert labels.get(PRIORITY_LABEL) == OTHER_PRIORITY, labels
            assert labels.get(QUEUE_LABEL) == RESEARCH_QUEUE
            started = time.monotonic()
            rollback = ["rollback", RELEASE, "0", "-n", NAMESPACE, "--wait", "--timeout", "4m"]
            await asyncio.to_thread(chart.run, *rollback, timeout=300)
            labels = await wait_priority(dynamic, DEFAULT_PRIORITY)
            print(f"helm rollback: the old policy served after {time.monotonic() - started:.1f}s")
            assert labels.get(PRIORITY_LABEL) == DEFAULT_PRIORITY, labels
        finally:
            await asyncio.to_thread(install, chart, chart_settings())
