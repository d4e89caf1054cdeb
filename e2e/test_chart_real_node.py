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
* under a stream of dry-run Job creations (:mod:`e2e.chart_stream`, at least 20 per second over the
  team namespaces), a rolling restart, a certificate rotation, a drain under the
  PodDisruptionBudget and a ``kill -9`` of a server process (:mod:`e2e.chart_events`): none fails,
  none is unlabelled; each prints its row (attempted, rate, failed, unlabelled, p99 round trip);
* ``helm uninstall`` leaves no webhook configuration, admission policy, Secret or ConfigMap; the
  last test prints the rows as the table of docs/performance.md.

Needs root (containerd, bridge, iptables) and ``make e2e-node-deps``; skipped otherwise, or with
``KGOV_E2E_REAL_NODE=0``. The node is stopped (and the machine restored) at the end of the module.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import chart_events, devcluster, support
from e2e.chart_stream import CreationStream, WindowStats
from e2e.conftest import E2ECluster
from e2e.devcluster.node import NODE_NAME, REAL_NODE_SELECTOR, REAL_NODE_TOLERATION
from e2e.helm_support import CHART, PLATFORM_VALUES, Helm, bundled_governor_unregistered
from e2e.image import image_name
from e2e.realnode import real_node

__all__ = ["real_node"]  # the module's fixture (e2e/realnode.py)

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
WEBHOOK_PORT = 8443
#: kgov serve processes per pod (``server.processes``); 1 reproduces the single-process row of
#: docs/performance.md (a ``kill -9`` then fails the calls the pod gets until its endpoint goes).
PROCESSES = int(os.environ.get("KGOV_E2E_CHART_PROCESSES", "2"))


def chart_settings(**extra: str) -> dict[str, str]:
    """``--set-json`` settings: the local image, on the real node, under its own webhook name."""
    return {
        "image.pullPolicy": '"Never"',
        "webhook.name": f'"{WEBHOOK}"',
        "nodeSelector": json.dumps(REAL_NODE_SELECTOR),
        "tolerations": json.dumps([REAL_NODE_TOLERATION]),
        "server.processes": str(PROCESSES),
        **extra,
    }


def install(helm: Helm, settings: dict[str, str], values: tuple[Path, ...] = (PLATFORM_VALUES,)) -> float:
    """``helm upgrade --install --wait``; returns its seconds."""
    started = time.monotonic()
    args = ["upgrade", "--install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace"]
    helm.run(*args, *helm._value_args(values, settings), "--wait", "--timeout", "4m", timeout=300)
    return time.monotonic() - started


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
            if RELEASE in helm.run("list", "-q", "-n", NAMESPACE).split():  # not uninstalled by the last test
                helm.run("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "2m", timeout=180)
        finally:
            helm.close()


async def chart_pods(api: k8s.ApiClient) -> list[k8s.V1Pod]:
    pods = await k8s.CoreV1Api(api).list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/instance=kgov")
    return [pod for pod in pods.items if pod.metadata.deletion_timestamp is None]


async def admitted(api: k8s.ApiClient) -> int:
    """Jobs the chart's running processes patched (the ``/metrics`` of each, on its own metrics
    port, read from the host at the pod IPs)."""
    total = 0
    for pod in await chart_pods(api):
        for index in range(PROCESSES if pod.status.pod_ip else 0):
            url = f"http://{pod.status.pod_ip}:{METRICS_PORT + index}"
            metrics = await asyncio.to_thread(support.read_metrics, url)
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
        containers = pod.status.container_statuses
        assert len(containers) == PROCESSES
        assert all(container.ready and container.state.running is not None for container in containers)
        assert pod.status.pod_ip.startswith("10.244.0.")
    slices = await k8s.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        NAMESPACE, label_selector=f"kubernetes.io/service-name={FULLNAME}"
    )
    ready = {address for s in slices.items for e in s.endpoints or [] if e.conditions.ready for address in e.addresses}
    assert ready == {pod.status.pod_ip for pod in pods}


async def test_pods_read_the_policy_through_the_api_server(chart: Helm, api: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(api)
    for pod in await chart_pods(api):
        for container in pod.spec.containers:
            log = await core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE, container=container.name)
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


async def wait_priority(dynamic: DynamicClient, wanted: str, timeout: float = 60.0) -> dict[str, str]:
    """Create dry-run Jobs in research's namespace until one gets Kueue priority ``wanted``; its labels."""
    labels: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and labels.get(PRIORITY_LABEL) != wanted:
        result = await support.create_with_warnings(dynamic, plain_job(f"upgr-{secrets.token_hex(3)}"), True)
        labels = result.obj["metadata"].get("labels", {})
        await asyncio.sleep(1)
    return labels


async def test_helm_upgrade_and_rollback_under_creates(
    chart: Helm, api: k8s.ApiClient, dynamic: DynamicClient, e2e_cluster: E2ECluster
) -> None:
    """Two rows: ``helm upgrade`` to a policy that gives the research team another default Kueue
    priority (one it allows) and to another image tag (the same image, tagged again in the node's
    containerd), until Jobs get the new priority; then ``helm rollback`` until they get the old one."""
    assert e2e_cluster.local is not None
    values = yaml.safe_load(PLATFORM_VALUES.read_text())
    policy = json.loads(values["platform"]["policy"])
    research = next(team for team in policy["teams"] if team["team"] == "research")
    assert research["kueuePriority"]["default"] == DEFAULT_PRIORITY
    research["kueuePriority"]["default"] = OTHER_PRIORITY
    assert OTHER_PRIORITY in research["kueuePriority"]["allowed"]
    values["platform"]["policy"] = json.dumps(policy, indent=2)
    changed = chart.home / "changed-values.yaml"
    changed.write_text(yaml.safe_dump(values))
    image = image_name()
    upgraded_tag = f"{image.rsplit(':', 1)[1]}-upgraded"
    chart_events.tag_image(Path(e2e_cluster.local.state_dir), image, f"{image.rsplit(':', 1)[0]}:{upgraded_tag}")
    upgraded = chart_settings(**{"image.tag": json.dumps(upgraded_tag)})

    async def upgrade() -> None:
        seconds = await asyncio.to_thread(install, chart, upgraded, (changed,))
        print(f"\nhelm upgrade (policy and image tag) Ready in {seconds:.1f}s")
        labels = await wait_priority(dynamic, OTHER_PRIORITY)
        assert labels.get(PRIORITY_LABEL) == OTHER_PRIORITY, labels
        assert labels.get(QUEUE_LABEL) == RESEARCH_QUEUE

    async def rollback() -> None:
        arguments = ["rollback", RELEASE, "0", "-n", NAMESPACE, "--wait", "--timeout", "4m"]
        await asyncio.to_thread(chart.run, *arguments, timeout=300)
        labels = await wait_priority(dynamic, DEFAULT_PRIORITY)
        assert labels.get(PRIORITY_LABEL) == DEFAULT_PRIORITY, labels

    try:
        await under_stream(api, dynamic, "`helm upgrade` (another policy and image tag)", upgrade)
        assert {i.rsplit(":", 1)[1] for i in await chart_events.pod_images(api, NAMESPACE)} == {upgraded_tag}
        await under_stream(api, dynamic, "`helm rollback`", rollback)
        assert upgraded_tag not in {i.rsplit(":", 1)[1] for i in await chart_events.pod_images(api, NAMESPACE)}
    finally:
        await asyncio.to_thread(install, chart, chart_settings())


# --------------------------------------------------------------------------- events under a stream

#: Creations per second of the stream (at least 20 per second are required of every row).
STREAM_RATE = 25.0
MIN_RATE = 20.0
#: Seconds of stream before an event (the steady-state latency) and after it (late effects).
STEADY_SECONDS, AFTER_SECONDS = 6.0, 4.0
#: Event → (steady window, event window, event seconds), printed as the docs' table at the end.
ROWS: dict[str, tuple[WindowStats, WindowStats, float]] = {}


async def under_stream(
    api: k8s.ApiClient,
    dynamic: DynamicClient,
    event: str,
    action: Callable[[], Awaitable[None]],
    burst: int = 1,
    broken_allowed: Callable[[], int] = lambda: 0,
) -> WindowStats:
    """Run ``action`` under a :class:`CreationStream` (only the chart's webhook registered) and
    record the row: the creations started from the event's start to :data:`AFTER_SECONDS` after
    its end, against the steady seconds before it. None may fail but at most ``broken_allowed()``
    whose connection broke under the call."""
    stream_of = CreationStream(dynamic, rate=STREAM_RATE, burst=burst)
    async with bundled_governor_unregistered(api, dynamic), stream_of as stream:
        opened = time.monotonic()
        await asyncio.sleep(STEADY_SECONDS)
        started = time.monotonic()
        await action()
        seconds = time.monotonic() - started
        await asyncio.sleep(AFTER_SECONDS)
        ended = time.monotonic()
    steady = stream.stats(opened + 1, started)
    during = stream.stats(started, ended)
    ROWS[event] = (steady, during, seconds)
    print(f"\n{event} ({seconds:.1f}s): {during.row()}; steady: {steady.row()}")
    for message in during.failures:
        print(f"  failed: {message}")
    assert during.rate >= MIN_RATE, f"the stream reached {during.rate:.1f} creations/s only"
    assert during.unlabelled == 0, during
    assert during.failed == during.broken <= broken_allowed(), during
    return during


async def test_rolling_restart_under_creates(chart: Helm, api: k8s.ApiClient, dynamic: DynamicClient) -> None:
    apps = k8s.AppsV1Api(api)

    async def restart() -> None:
        restarted_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        annotations = {"kubectl.kubernetes.io/restartedAt": restarted_at}
        await apps.patch_namespaced_deployment(
            FULLNAME, NAMESPACE, {"spec": {"template": {"metadata": {"annotations": annotations}}}}
        )
        await chart_events.wait_ready(api, NAMESPACE, FULLNAME)

    await under_stream(api, dynamic, "rolling restart (`kubectl rollout restart`)", restart)


async def test_certificate_rotation_under_creates(chart: Helm, api: k8s.ApiClient, dynamic: DynamicClient) -> None:
    """``helm upgrade`` with a new ``certs.selfManaged.rotation``: a new serving certificate from the
    same CA in the Secret, which the kubelet writes into the pods' volume and the servers reload
    (no restart); the event lasts until both pods present it on the webhook port."""
    secret = f"{FULLNAME}-tls"
    old = await chart_events.secret_certificate(api, NAMESPACE, secret)
    settings = chart_settings(**{"certs.selfManaged.rotation": json.dumps(secrets.token_hex(4))})

    async def rotate() -> None:
        await asyncio.to_thread(install, chart, settings)
        new = await chart_events.secret_certificate(api, NAMESPACE, secret)
        assert new.serial_number != old.serial_number and new.issuer == old.issuer
        waited = await chart_events.wait_served(api, NAMESPACE, new, WEBHOOK_PORT)
        print(f"\nnew certificate served by both pods {waited:.1f}s after the upgrade")

    pods = [pod.metadata.uid for pod in await chart_events.chart_pods(api, NAMESPACE)]
    await under_stream(api, dynamic, "certificate rotation (self-managed, `helm upgrade`)", rotate)
    assert [pod.metadata.uid for pod in await chart_events.chart_pods(api, NAMESPACE)] == pods, "no pod restarts"


async def test_drain_under_creates(chart: Helm, api: k8s.ApiClient, dynamic: DynamicClient) -> None:
    """A drain of the machine's one real node, as ``kubectl drain`` does it, with the node's return
    standing in for a second node: cordon; evict both replicas through the Eviction API (the first
    goes, the PodDisruptionBudget refuses the second while the first's replacement cannot be
    scheduled); uncordon; the second eviction is retried until the budget allows it (once the
    replacement is ready); the event ends when both replacements are ready."""
    refusals: list[int] = []

    async def drain() -> None:
        first, second = await chart_events.chart_pods(api, NAMESPACE)
        await chart_events.cordon(api, True)
        try:
            assert await chart_events.evict(api, first) == 201
            assert await chart_events.evict(api, second) == 429, "the budget let both replicas go"
            await chart_events.wait_gone(api, first)
        finally:
            await chart_events.cordon(api, False)
        refusals.append(1 + await chart_events.evict_until_allowed(api, second))
        await chart_events.wait_gone(api, second)
        await chart_events.wait_ready(api, NAMESPACE, FULLNAME)

    await under_stream(api, dynamic, "drain (cordon, Eviction API under the PodDisruptionBudget)", drain)
    print(f"the PodDisruptionBudget refused the second eviction {refusals[0]} times")


async def test_killed_server_process_under_creates(
    chart: Helm, api: k8s.ApiClient, dynamic: DynamicClient, e2e_cluster: E2ECluster
) -> None:
    """``kill -9`` of the server process (a container's main process) holding the most webhook
    connections (no SIGTERM, no preStop, no drain); the event lasts until the kubelet restarted it
    and it is ready."""
    assert e2e_cluster.local is not None
    state_dir = Path(e2e_cluster.local.state_dir)

    held: list[int] = []

    async def kill() -> None:
        killed = await chart_events.kill_server_process(api, NAMESPACE, state_dir, METRICS_PORT)
        pod, container, restarts, connections = killed
        held.append(int(connections))
        print(f"\nkilled {pod}/{container}, which had {connections:.0f} open webhook connections")
        await chart_events.wait_restarted(api, NAMESPACE, pod, container, restarts)
        await chart_events.wait_ready(api, NAMESPACE, FULLNAME)

    # Creations 5 at a time: the API server keeps several connections, over both pods, and dials
    # new ones after the kill. A call in flight on the killed process's connections is lost (over
    # HTTP/1.1 at most one per connection): kube-apiserver sends a webhook call once and client-go
    # never sends a POST again after a broken connection (docs/performance.md). Anything else (a
    # connection refused by the killed pod, a timeout) fails the row.
    await under_stream(api, dynamic, "`kill -9` of a server process", kill, burst=5, broken_allowed=lambda: sum(held))


def markdown_table() -> str:
    lines = [
        "| event | seconds | attempted | creations/s | failed (broken) | unlabelled | p99 ms | p99 added ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for event, (steady, during, seconds) in ROWS.items():
        added = max(0.0, during.p99_ms - steady.p99_ms)
        lines.append(
            f"| {event} | {seconds:.0f} | {during.attempted} | {during.rate:.1f} | {during.failed} ({during.broken}) | "
            f"{during.unlabelled} | {during.p99_ms:.0f} | {added:.0f} |"
        )
    return "\n".join(lines)


async def test_helm_uninstall_leaves_nothing_behind(chart: Helm, api: k8s.ApiClient) -> None:
    """``helm uninstall``: no webhook configuration, admission policy or binding, Secret or
    ConfigMap of the release is left (the CA Secret included). Runs last: it prints the events' table."""
    print(f"\n{markdown_table()}")
    await asyncio.to_thread(chart.run, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "2m", timeout=180)
    selector = f"app.kubernetes.io/instance={RELEASE}"
    registration = k8s.AdmissionregistrationV1Api(api)
    core = k8s.CoreV1Api(api)
    left: dict[str, Any] = {
        "MutatingWebhookConfiguration": await registration.list_mutating_webhook_configuration(label_selector=selector),
        "ValidatingAdmissionPolicy": await registration.list_validating_admission_policy(label_selector=selector),
        "ValidatingAdmissionPolicyBinding": await registration.list_validating_admission_policy_binding(
            label_selector=selector
        ),
        "MutatingAdmissionPolicy": await registration.list_mutating_admission_policy(label_selector=selector),
        "MutatingAdmissionPolicyBinding": await registration.list_mutating_admission_policy_binding(
            label_selector=selector
        ),
        "Secret": await core.list_namespaced_secret(NAMESPACE),
        "ConfigMap": await core.list_namespaced_config_map(NAMESPACE, label_selector=selector),
    }
    names = {kind: [item.metadata.name for item in found.items] for kind, found in left.items()}
    assert all(not found for found in names.values()), names
    with pytest.raises(k8s.ApiException) as missing:
        await registration.read_mutating_webhook_configuration(WEBHOOK)
    assert missing.value.status == 404
