"""GitOps-safe certificates (``certs.mode: in-cluster``, SPEC §7, §8) against the real API server,
and with the chart's real image on the real node.

First, the servers' share of the work with the API server alone (:class:`CertificateKeeper`, two
replicas in this process): one Secret for both (create-if-absent), the caBundle published, an
older bundle never put back, and a CA rotation in which every pair served stays verifiable.

Then the chart as Argo CD or Flux deploy it: ``helm template`` offline (no cluster, no lookup),
the objects applied server-side (as ``kubectl apply --server-side``), twice, the second render
rolling the Deployment, under a stream of Job creations: none fails, none goes unlabelled, and the
CA, the serving pair and the caBundle are the same before and after.

The real node part needs root and ``make e2e-node-deps``; it waits (up to
``KGOV_E2E_REAL_NODE_WAIT`` seconds, 1200 by default) while another run holds the machine's one
real node, and stops it at the module's end.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import secrets
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import build, devcluster, support
from e2e.conftest import E2ECluster
from e2e.devcluster.node import REAL_NODE_SELECTOR, REAL_NODE_TOLERATION
from e2e.helm_support import CHART, PLATFORM_VALUES, Helm, bundled_governor_unregistered
from e2e.realnode import real_node
from webhook.certs import load_certificate
from webhook.certs.keeper import SERIAL, CertificateKeeper, KeeperConfig
from webhook.certs.rotation import Material, Settings, initial_material
from webhook.certs.store import split_bundle

__all__ = ["real_node"]  # the module's fixture (e2e/realnode.py)

pytestmark = pytest.mark.e2e

NAMESPACE = "kgov-gitops"
RELEASE = "kgov"
FULLNAME = "kgov-kueue-governor"
SECRET = f"{FULLNAME}-certs"
WEBHOOK = "kgov-gitops"  # sorts before Kueue's; not the harness's kgov-governor
RESEARCH = "hyperpod-ns-research"
RESEARCH_QUEUE = "hyperpod-ns-research-localqueue"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
NAMES = [f"{FULLNAME}.{NAMESPACE}.svc", f"{FULLNAME}.{NAMESPACE}.svc.cluster.local"]


# --- The servers' share, with the API server alone -------------------------------------------


def probe_configuration(name: str) -> dict[str, Any]:
    """A MutatingWebhookConfiguration no request ever matches (a group nobody serves), two webhooks."""
    hook = {
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": "https://127.0.0.1:9/never"},
        "rules": [
            {"apiGroups": ["none.kgov.test"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["x"]}
        ],
        "sideEffects": "None",
        "failurePolicy": "Ignore",
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{**hook, "name": "one.kgov.test"}, {**hook, "name": "two.kgov.test"}],
    }


@pytest.fixture
async def keeper_target(
    e2e_cluster: E2ECluster, namespace: str, dynamic: DynamicClient, tmp_path: Path
) -> AsyncIterator[tuple[str, str]]:
    """(namespace, webhook configuration name) for keepers; the configuration is removed afterwards."""
    name = f"kgov-keeper-{secrets.token_hex(3)}"
    created = await support.create(dynamic, probe_configuration(name))
    try:
        yield namespace, name
    finally:
        await support.delete(dynamic, created)


def keeper(e2e_cluster: E2ECluster, target: tuple[str, str], root: Path, **settings: Any) -> CertificateKeeper:
    namespace, webhook = target
    config = KeeperConfig(
        namespace=namespace,
        secret="serving-certs",
        settings=Settings(dns_names=NAMES, **settings),
        mutating=[webhook],
        interval=1.0,
        settle=0.0,
    )
    root.mkdir(parents=True, exist_ok=True)
    return CertificateKeeper(config, root / "tls.crt", root / "tls.key", str(e2e_cluster.kubeconfig))


async def published(api: k8s.ApiClient, name: str) -> tuple[list[str], str | None]:
    stored = await k8s.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(name)
    bundles = [w.client_config.ca_bundle for w in stored.webhooks]
    return bundles, (stored.metadata.annotations or {}).get(SERIAL)


async def secret_material(api: k8s.ApiClient, namespace: str, name: str) -> tuple[Material, Any]:
    secret = await k8s.CoreV1Api(api).read_namespaced_secret(name, namespace)
    return Material.from_data(secret.data), secret


async def test_replicas_starting_together_share_one_secret(
    e2e_cluster: E2ECluster, keeper_target: tuple[str, str], api: k8s.ApiClient, tmp_path: Path
) -> None:
    namespace, webhook = keeper_target
    replicas = [keeper(e2e_cluster, keeper_target, tmp_path / f"r{i}") for i in range(3)]
    try:
        await asyncio.gather(*(r.start(timeout=30) for r in replicas))
        material, secret = await secret_material(api, namespace, "serving-certs")
        assert secret.type == "Opaque"
        for replica in replicas:
            assert replica.cert_file.read_bytes() == material.tls_crt
            assert replica.key_file.read_bytes() == material.tls_key
            assert replica.key_file.stat().st_mode & 0o777 == 0o600
        bundles, serial = await published(api, webhook)
        assert bundles == [base64.b64encode(material.ca_bundle).decode()] * 2
        assert serial == secret.metadata.annotations[SERIAL]
        # Another round changes nothing: same Secret version, same configuration.
        version = secret.metadata.resource_version
        await replicas[1].sync()
        assert (await secret_material(api, namespace, "serving-certs"))[1].metadata.resource_version == version
    finally:
        for replica in replicas:
            await replica.close()


async def test_without_a_webhook_configuration_the_pair_is_served_at_once(
    e2e_cluster: E2ECluster, namespace: str, api: k8s.ApiClient, tmp_path: Path
) -> None:
    """No configuration to publish to (the caBundle is set by hand): nothing to wait for."""
    config = KeeperConfig(namespace=namespace, secret="serving-certs", settings=Settings(dns_names=NAMES))
    alone = CertificateKeeper(config, tmp_path / "tls.crt", tmp_path / "tls.key", str(e2e_cluster.kubeconfig))
    try:
        await alone.start(timeout=30)
        material, _ = await secret_material(api, namespace, "serving-certs")
        assert alone.cert_file.read_bytes() == material.tls_crt
    finally:
        await alone.close()


async def test_an_older_bundle_is_never_put_back(
    e2e_cluster: E2ECluster, keeper_target: tuple[str, str], api: k8s.ApiClient, tmp_path: Path
) -> None:
    namespace, webhook = keeper_target
    replica = keeper(e2e_cluster, keeper_target, tmp_path / "r")
    try:
        await replica.start(timeout=30)
        material, _ = await secret_material(api, namespace, "serving-certs")
        # A replica that read the Secret before a newer bundle was published (serial 1).
        newer = base64.b64encode(b"".join(split_bundle(material.ca_bundle) * 2)).decode()
        patch = [
            {"op": "add", "path": "/metadata/annotations", "value": {SERIAL: str(time.time_ns() + 10**12)}},
            *({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": newer} for i in range(2)),
        ]
        await k8s.AdmissionregistrationV1Api(api).patch_mutating_webhook_configuration(webhook, patch)
        assert await replica._publish(material, 1) == base64.b64decode(newer)
        assert (await published(api, webhook))[0] == [newer, newer]
    finally:
        await replica.close()


async def test_ca_rotation_keeps_every_served_pair_verifiable(
    e2e_cluster: E2ECluster, keeper_target: tuple[str, str], api: k8s.ApiClient, tmp_path: Path
) -> None:
    """A Secret whose CA has 10 days left (the keepers renew a CA 365 days before expiry): one
    round makes a new CA, publishes both, then issues a pair of the new CA; the lagging replica's
    old pair still verifies with what is published; the next round brings it the new pair."""
    namespace, webhook = keeper_target
    old = initial_material(
        Settings(
            dns_names=NAMES,
            days=5,
            ca_days=10,
            renew_before=datetime.timedelta(days=1),
            ca_renew_before=datetime.timedelta(days=1),
        )
    )
    body: Any = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "serving-certs", "namespace": namespace, "annotations": {SERIAL: "1"}},
        "type": "Opaque",
        "data": old.data(),
    }
    await k8s.CoreV1Api(api).create_namespaced_secret(namespace, body)
    lagging = keeper(e2e_cluster, keeper_target, tmp_path / "lagging", ca_renew_before=datetime.timedelta(days=365))
    leading = keeper(e2e_cluster, keeper_target, tmp_path / "leading", ca_renew_before=datetime.timedelta(days=365))
    try:
        lagging._write_files(old)  # a replica that started before the rotation, serving the old pair
        await leading.start(timeout=30)
        material, _ = await secret_material(api, namespace, "serving-certs")
        cas = split_bundle(material.ca_bundle)
        assert cas == [material.ca_crt, old.ca_crt]
        assert leading.cert_file.read_bytes() == material.tls_crt != old.tls_crt
        bundles, _ = await published(api, webhook)
        trusted = base64.b64decode(bundles[0])
        for pair in (lagging.cert_file.read_bytes(), leading.cert_file.read_bytes()):
            assert _verifies(pair, trusted)
        await lagging.start(timeout=30)  # its next round
        assert lagging.cert_file.read_bytes() == material.tls_crt
    finally:
        await lagging.close()
        await leading.close()


async def test_a_deleted_secret_is_made_again_keeping_the_published_ca(
    e2e_cluster: E2ECluster, keeper_target: tuple[str, str], api: k8s.ApiClient, tmp_path: Path
) -> None:
    namespace, webhook = keeper_target
    first = keeper(e2e_cluster, keeper_target, tmp_path / "first")
    second = keeper(e2e_cluster, keeper_target, tmp_path / "second")
    try:
        await first.start(timeout=30)
        old, _ = await secret_material(api, namespace, "serving-certs")
        await k8s.CoreV1Api(api).delete_namespaced_secret("serving-certs", namespace)
        await second.start(timeout=30)
        new, _ = await secret_material(api, namespace, "serving-certs")
        assert new.ca_crt != old.ca_crt
        assert split_bundle(new.ca_bundle) == [new.ca_crt, old.ca_crt]
        bundles, _ = await published(api, webhook)
        trusted = base64.b64decode(bundles[0])
        assert trusted == new.ca_bundle
        # The first replica still serves the old pair, the second the new one: both verify.
        assert first.cert_file.read_bytes() == old.tls_crt
        assert second.cert_file.read_bytes() == new.tls_crt
        assert _verifies(old.tls_crt, trusted) and _verifies(new.tls_crt, trusted)
    finally:
        await first.close()
        await second.close()


def _verifies(tls_crt: bytes, bundle: bytes) -> bool:
    leaf = load_certificate(tls_crt)
    for ca in split_bundle(bundle):
        try:
            leaf.verify_directly_issued_by(load_certificate(ca))
        except Exception:  # InvalidSignature, ValueError: another CA
            continue
        return True
    return False


# --- The chart from offline renders, on the real node ------------------------------------------


def render(helm: Helm, rollout: str) -> str:
    """``helm template`` with no cluster: the in-cluster mode, on the real node, under WEBHOOK.
    ``rollout`` goes into a pod annotation (a new value rolls the Deployment)."""
    settings = {
        "certs.mode": '"in-cluster"',
        "certs.inCluster.syncIntervalSeconds": "5",
        "image.pullPolicy": '"Never"',
        "webhook.name": f'"{WEBHOOK}"',
        "nodeSelector": json.dumps(REAL_NODE_SELECTOR),
        "tolerations": json.dumps([REAL_NODE_TOLERATION]),
        "podAnnotations": json.dumps({"kueue-governor.io/render": rollout}),
    }
    args = ["template", RELEASE, str(CHART), "-n", NAMESPACE, *helm._value_args([PLATFORM_VALUES], settings)]
    return helm.run(*args, "--kube-version", build.KUBERNETES_VERSION)


async def apply(dynamic: DynamicClient, text: str) -> list[dict[str, Any]]:
    """Server-side apply every object of a render, in order (``kubectl apply --server-side``)."""
    objects = [doc for doc in yaml.safe_load_all(text) if doc]
    for obj in objects:
        resource = await dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace") if resource.namespaced else None
        await dynamic.server_side_apply(
            resource, obj, namespace=namespace, field_manager="gitops-sync", force_conflicts=True
        )
    return objects


def plain_job(name: str) -> dict[str, Any]:
    return support.job_manifest(name, RESEARCH, 1, {"spec": support.pause_pod_spec(gpus=0, cpu="100m")})


async def stream_creates(dynamic: DynamicClient, until: asyncio.Event, counts: dict[str, int]) -> None:
    """Create dry-run Jobs in the research namespace until ``until`` is set, counting outcomes."""
    while not until.is_set():
        counts["attempted"] += 1
        try:
            result = await support.create_with_warnings(dynamic, plain_job(f"gitops-{secrets.token_hex(4)}"), True)
        except support.Refused as refused:
            counts["failed"] += 1
            print(f"refused: {refused}")
        else:
            if result.obj["metadata"].get("labels", {}).get(QUEUE_LABEL) != RESEARCH_QUEUE:
                counts["unlabelled"] += 1
        await asyncio.sleep(0.2)


async def rolled_out(api: k8s.ApiClient, generation: int) -> bool:
    status = (await k8s.AppsV1Api(api).read_namespaced_deployment(FULLNAME, NAMESPACE)).status
    return bool(
        (status.observed_generation or 0) >= generation
        and status.updated_replicas == status.replicas == status.ready_replicas == 2
        and not status.unavailable_replicas
    )


async def state(api: k8s.ApiClient) -> tuple[str, bytes, bytes]:
    """(published caBundle, the Secret's CA, its serving certificate)."""
    material, _ = await secret_material(api, NAMESPACE, SECRET)
    bundles, _ = await published(api, WEBHOOK)
    assert len(set(bundles)) == 1
    return bundles[0], material.ca_crt, material.tls_crt


async def test_two_offline_renders_applied_under_creates_lose_no_admission(
    real_node: devcluster.ClusterInfo,
    e2e_cluster: E2ECluster,
    bundled_config: support.Generated,
    api: k8s.ApiClient,
    dynamic: DynamicClient,
) -> None:
    helm = Helm()  # no kubeconfig: a render with no cluster to look up
    core, apps = k8s.CoreV1Api(api), k8s.AppsV1Api(api)
    first, second = render(helm, "1"), render(helm, "2")
    helm.close()
    for text in (first, second):
        for marker in ("PRIVATE KEY", "BEGIN CERTIFICATE", "LS0tLS1", "caBundle"):
            assert marker not in text.replace("publishes the caBundle", ""), marker
    assert first.replace('kueue-governor.io/render: "1"', 'kueue-governor.io/render: "2"') == second
    counts = {"attempted": 0, "failed": 0, "unlabelled": 0}
    applied: list[dict[str, Any]] = []
    rollout = float("nan")
    first_pods: set[str] = set()
    running: set[str] = set()
    try:
        await support._apply(dynamic, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        started = time.monotonic()
        applied = await apply(dynamic, first)
        deployment = await apps.read_namespaced_deployment(FULLNAME, NAMESPACE)
        await support.wait_for(lambda: rolled_out(api, deployment.metadata.generation), "the first render", 240, 1)
        await support.wait_for(lambda: _published_now(api), "the caBundle", 60, 0.5)
        print(f"\nfirst render Ready and its caBundle published in {time.monotonic() - started:.1f}s")
        before = await state(api)
        first_pods = {p.metadata.name for p in (await core.list_namespaced_pod(NAMESPACE)).items}
        async with bundled_governor_unregistered(api, dynamic):
            done = asyncio.Event()
            stream = asyncio.create_task(stream_creates(dynamic, done, counts))
            await asyncio.sleep(3)
            started = time.monotonic()
            await apply(dynamic, second)
            deployment = await apps.read_namespaced_deployment(FULLNAME, NAMESPACE)
            await support.wait_for(
                lambda: rolled_out(api, deployment.metadata.generation), "the second render", 240, 0.5
            )
            rollout = time.monotonic() - started
            await asyncio.sleep(8)  # the old pods' shutdown delay, and one more round of the new ones
            done.set()
            await stream
        after = await state(api)
        listed = await core.list_namespaced_pod(NAMESPACE, label_selector=f"app.kubernetes.io/instance={RELEASE}")
        running = {p.metadata.name for p in listed.items if p.metadata.deletion_timestamp is None}
        logs = [await core.read_namespaced_pod_log(name, NAMESPACE, container="governor") for name in sorted(running)]
        rotation = await ca_rotation_under_creates(api, dynamic)
    finally:
        await teardown(api, dynamic, applied)
    print(f"second render rolled out in {rollout:.1f}s under creates: {counts}")
    assert counts["attempted"] > 20
    assert counts["failed"] == 0 and counts["unlabelled"] == 0, counts
    assert after == before  # the same caBundle, CA and serving certificate
    assert len(running) == 2 and not first_pods & running, f"not rolled: {first_pods} then {running}"
    created = sum("created the certificate Secret" in log for log in logs)
    assert created == 0, "a pod of the second render made a new Secret"
    print(f"CA rotation in the cluster under creates: {rotation}")
    assert rotation["attempted"] > 20
    assert rotation["failed"] == 0 and rotation["unlabelled"] == 0, rotation


async def served_certificates(api: k8s.ApiClient) -> set[bytes]:
    """The serving certificate (PEM) each running chart pod presents, read over TLS at its IP."""
    pods = await k8s.CoreV1Api(api).list_namespaced_pod(
        NAMESPACE, label_selector=f"app.kubernetes.io/instance={RELEASE}"
    )
    served: set[bytes] = set()
    for pod in pods.items:
        if pod.metadata.deletion_timestamp is None and pod.status.pod_ip:
            pem = await asyncio.to_thread(ssl.get_server_certificate, (pod.status.pod_ip, 8443), timeout=5)
            served.add(load_certificate(pem.encode()).public_bytes(serialization.Encoding.PEM))
    return served


async def ca_rotation_under_creates(api: k8s.ApiClient, dynamic: DynamicClient) -> dict[str, int]:
    """The Secret as a server of long ago left it: a CA with 10 days left (the servers renew a CA
    1217 days before expiry) and its pair, beside the CA published now. Under a stream of Job
    creations the servers publish the bundle, serve that pair, make a new CA, publish it, and
    after one sync interval issue and serve a pair of it; returns the stream's counts."""
    core = k8s.CoreV1Api(api)
    current, secret = await secret_material(api, NAMESPACE, SECRET)
    aged = initial_material(
        Settings(
            dns_names=NAMES,
            days=5,
            ca_days=10,
            renew_before=datetime.timedelta(days=1),
            ca_renew_before=datetime.timedelta(days=1),
        ),
        keep=current.ca_bundle,
    )
    counts = {"attempted": 0, "failed": 0, "unlabelled": 0}
    async with bundled_governor_unregistered(api, dynamic):
        done = asyncio.Event()
        stream = asyncio.create_task(stream_creates(dynamic, done, counts))
        await asyncio.sleep(3)
        started = time.monotonic()
        secret.data = aged.data()
        secret.metadata.annotations[SERIAL] = str(time.time_ns())
        await core.replace_namespaced_secret(SECRET, NAMESPACE, secret)

        async def rotated() -> bool:
            material, _ = await secret_material(api, NAMESPACE, SECRET)
            if material.ca_crt in (aged.ca_crt, current.ca_crt):
                return False
            bundles, _ = await published(api, WEBHOOK)
            if set(bundles) != {base64.b64encode(material.ca_bundle).decode()}:
                return False
            return await served_certificates(api) == {material.tls_crt}

        await support.wait_for(rotated, "every server on a pair of the new CA", 120, 1)
        print(f"\nCA rotated and every server on the new pair {time.monotonic() - started:.1f}s after the aged Secret")
        await asyncio.sleep(3)
        done.set()
        await stream
    material, _ = await secret_material(api, NAMESPACE, SECRET)
    assert split_bundle(material.ca_bundle) == [material.ca_crt, aged.ca_crt, current.ca_crt]
    return counts


async def _published_now(api: k8s.ApiClient) -> bool:
    bundles, _ = await published(api, WEBHOOK)
    return all(bundles)


async def teardown(api: k8s.ApiClient, dynamic: DynamicClient, applied: list[dict[str, Any]]) -> None:
    """Delete the applied objects (the webhook configuration first), the servers' Secret and the namespace."""
    for obj in sorted(applied, key=lambda o: o["kind"] != "MutatingWebhookConfiguration"):
        await support.delete(dynamic, obj)
    with contextlib.suppress(k8s.ApiException):
        await k8s.CoreV1Api(api).delete_namespaced_secret(SECRET, NAMESPACE)
    with contextlib.suppress(k8s.ApiException):
        await k8s.CoreV1Api(api).delete_namespace(NAMESPACE)
