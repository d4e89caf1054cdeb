"""The Helm chart against the real API server (SPEC §7, §8, §8b).

* every rendered object is accepted by the API server (server-side dry-run where the local control
  plane cannot run it, e.g. cert-manager's kinds are not installed, so those are left out and named);
* a second render of an installed release is identical to the first, and reuses the CA;
* with the webhook stopped and ``failurePolicy: Ignore``, the ValidatingAdmissionPolicy refuses an
  unlabelled Job in a team namespace with its own message;
* a Job of 16 pods reaches the webhook once: its pods are filtered out by ``matchConditions``;
* ``helm upgrade`` and a forced certificate rotation under a stream of Job creations: none fails,
  every Job carries its team's labels; ``helm uninstall`` leaves no configuration or policy behind;
* ``kgov certs`` publishes the caBundle into webhook configurations.

The local control plane runs no pods, so where the webhook has to answer it runs as a local
``kgov serve`` that reads what the chart rendered (its certificate Secret and policy ConfigMap,
copied to files as the kubelet would mount them; a token of the chart's ServiceAccount) and the
chart's webhook calls it through ``webhook.url`` (see :class:`e2e.helm_support.ChartServer`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import devcluster, support
from e2e.conftest import E2ECluster
from e2e.helm_support import (
    CHART,
    PLATFORM_VALUES,
    ChartServer,
    Helm,
    HelmError,
    bundled_governor_unregistered,
    by_kind,
)
from webhook.certs import load_certificate
from webhook.certs.store import split_bundle
from webhook.cli import main

pytestmark = pytest.mark.e2e

RESEARCH = "hyperpod-ns-research"
RESEARCH_QUEUE = "hyperpod-ns-research-localqueue"
DATA_SCIENCE = "hyperpod-ns-data-science"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
RELEASE = "kgov"
FULLNAME = "kgov-kueue-governor"
WEBHOOK = "kgov-helm"  # sorts before kueue-…; not the harness's kgov-governor
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}


@pytest.fixture
def helm(e2e_cluster: E2ECluster) -> Iterator[Helm]:
    tool = Helm(kubeconfig=e2e_cluster.kubeconfig)
    yield tool
    tool.close()


@pytest.fixture
def release_namespace() -> str:
    return f"kgov-helm-{secrets.token_hex(3)}"


@pytest.fixture
async def no_other_governor(
    api: k8s.ApiClient, dynamic: DynamicClient, e2e_cluster: E2ECluster, bundled_config: support.Generated
) -> AsyncIterator[None]:
    """The team namespaces exist, and only the chart's webhook answers (the harness's is unregistered).
    Local control plane only: the webhook these tests run listens on this machine's 127.0.0.1."""
    if e2e_cluster.local is None:
        pytest.skip("runs kgov serve on 127.0.0.1 next to the local control plane")
    async with bundled_governor_unregistered(api, dynamic):
        yield


@contextlib.asynccontextmanager
async def installed(helm: Helm, namespace: str, settings: dict[str, str], api: k8s.ApiClient) -> AsyncIterator[None]:
    """``helm upgrade --install`` for the block; ``helm uninstall`` after, then nothing of it is left
    (checked when the block succeeded; a failure of its own is not hidden behind that check)."""
    succeeded = False
    try:
        await asyncio.to_thread(helm.upgrade, settings=settings, namespace=namespace)
        yield
        succeeded = True
    finally:
        with contextlib.suppress(HelmError):
            await asyncio.to_thread(helm.uninstall, namespace)
        if succeeded:
            await assert_nothing_left(api, namespace)
        with contextlib.suppress(k8s.ApiException):
            await k8s.CoreV1Api(api).delete_namespace(namespace)


async def assert_nothing_left(api: k8s.ApiClient, namespace: str) -> None:
    registration = k8s.AdmissionregistrationV1Api(api)
    mutating = [w.metadata.name for w in (await registration.list_mutating_webhook_configuration()).items]
    assert WEBHOOK not in mutating
    policies = [p.metadata.name for p in (await registration.list_validating_admission_policy()).items]
    assert not [name for name in policies if name.startswith(f"{WEBHOOK}-")]
    bindings = [b.metadata.name for b in (await registration.list_validating_admission_policy_binding()).items]
    assert not [name for name in bindings if name.startswith(f"{WEBHOOK}-")]
    core = k8s.CoreV1Api(api)
    assert [
        c.metadata.name for c in (await core.list_namespaced_config_map(namespace)).items if "policy" in c.metadata.name
    ] == []
    assert [
        s.metadata.name for s in (await core.list_namespaced_secret(namespace)).items if FULLNAME in s.metadata.name
    ] == []


def job(
    name: str, labels: dict[str, str] | None = None, parallelism: int = 1, requests: dict[str, str] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"generateName": f"{name}-"}
    if labels is not None:
        metadata["labels"] = labels
    container: dict[str, Any] = {"name": "main", "image": "busybox:1.36", "command": ["true"]}
    if requests is not None:
        container["resources"] = {"requests": requests}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                }
            },
        },
    }


async def create(dynamic: DynamicClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    body = {**body, "metadata": {**body["metadata"], "namespace": namespace}}
    return (await support.create_with_warnings(dynamic, body)).obj


# --------------------------------------------------------------------------- rendered objects


@pytest.mark.parametrize(
    "values",
    [
        ["kueue-objects-values.yaml"],
        ["fail-open-values.yaml"],
        ["cert-manager-values.yaml"],
    ],
)
async def test_rendered_objects_are_accepted(
    helm: Helm,
    api: k8s.ApiClient,
    dynamic: DynamicClient,
    release_namespace: str,
    values: list[str],
    bundled_config: support.Generated,
) -> None:
    files = [PLATFORM_VALUES, *(CHART / "ci" / name for name in values)]
    objects = await asyncio.to_thread(
        helm.template, files, {"webhook.name": f'"{WEBHOOK}"'}, release_namespace, RELEASE
    )
    core = k8s.CoreV1Api(api)
    await core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=release_namespace)))
    accepted, left_out = [], []
    try:
        for obj in objects:
            if obj["kind"] in CERT_MANAGER_KINDS:
                left_out.append(obj["kind"])
                continue
            resource = await dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            body = dict(obj)
            if resource.namespaced:
                body["metadata"] = {"namespace": release_namespace, **obj["metadata"]}
            await dynamic.server_side_apply(
                resource, body, field_manager="kgov-helm-e2e", force_conflicts=True, dry_run="All"
            )
            accepted.append(obj["kind"])
    finally:
        await core.delete_namespace(release_namespace)
    assert {"Deployment", "Service", "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy"} <= set(accepted)
    assert accepted.count("ValidatingAdmissionPolicyBinding") == 3
    if values == ["cert-manager-values.yaml"]:
        assert sorted(left_out) == ["Certificate", "Certificate", "Issuer", "Issuer"]
    else:
        assert left_out == []
    if values == ["kueue-objects-values.yaml"]:
        assert {"ClusterQueue", "LocalQueue", "ResourceFlavor", "Topology", "Namespace"} <= set(accepted)


# --------------------------------------------------------------------------- install, render, uninstall


async def test_upgrades_reuse_the_ca_and_renders_are_identical(
    helm: Helm, api: k8s.ApiClient, release_namespace: str, bundled_config: support.Generated
) -> None:
    settings = {"webhook.name": f'"{WEBHOOK}"', "webhook.failurePolicy": '"Ignore"'}
    core = k8s.CoreV1Api(api)
    async with installed(helm, release_namespace, settings, api):
        ca = (await core.read_namespaced_secret(f"{FULLNAME}-ca", release_namespace)).data
        tls = (await core.read_namespaced_secret(f"{FULLNAME}-tls", release_namespace)).data
        first = await asyncio.to_thread(helm.template, [PLATFORM_VALUES], settings, release_namespace, RELEASE, True)
        second = await asyncio.to_thread(helm.template, [PLATFORM_VALUES], settings, release_namespace, RELEASE, True)
        assert first == second
        rendered = {s["metadata"]["name"]: s["data"] for s in by_kind(first, "Secret")}
        assert rendered[f"{FULLNAME}-ca"] == ca
        assert rendered[f"{FULLNAME}-tls"] == tls

        await asyncio.to_thread(
            helm.upgrade, settings={**settings, "webhook.timeoutSeconds": "4"}, namespace=release_namespace
        )
        assert (await core.read_namespaced_secret(f"{FULLNAME}-ca", release_namespace)).data == ca
        assert (await core.read_namespaced_secret(f"{FULLNAME}-tls", release_namespace)).data == tls
        registration = k8s.AdmissionregistrationV1Api(api)
        (hook,) = (await registration.read_mutating_webhook_configuration(WEBHOOK)).webhooks
        assert hook.timeout_seconds == 4
        assert base64.b64decode(hook.client_config.ca_bundle) == base64.b64decode(ca["ca.crt"])
        serving = load_certificate(base64.b64decode(tls["tls.crt"]))
        serving.verify_directly_issued_by(load_certificate(base64.b64decode(ca["ca.crt"])))


# --------------------------------------------------------------------------- the fail-safe


async def test_webhook_down_the_admission_policy_refuses_unlabelled_jobs(
    helm: Helm,
    api: k8s.ApiClient,
    dynamic: DynamicClient,
    release_namespace: str,
    namespace: str,
    no_other_governor: None,
    cleanup: support.Cleanup,
) -> None:
    down = f"https://127.0.0.1:{devcluster.free_port()}/mutate"  # nothing listens there
    settings = {"webhook.name": f'"{WEBHOOK}"', "webhook.failurePolicy": '"Ignore"', "webhook.url": f'"{down}"'}
    async with installed(helm, release_namespace, settings, api):
        await asyncio.sleep(2)  # the API server's policy informer picks the new policies up
        with pytest.raises(support.Refused) as refused:
            await create(dynamic, RESEARCH, job("unlabelled"))
        message = refused.value.status["message"]
        assert f"ValidatingAdmissionPolicy '{WEBHOOK}-queue-research'" in message
        assert (
            'kueue-governor: a workload in a namespace of team "research" needs the label '
            f"kueue.x-k8s.io/queue-name set to one of {RESEARCH_QUEUE}" in message
        )
        with pytest.raises(support.Refused) as other_queue:
            await create(dynamic, RESEARCH, job("other-queue", {QUEUE_LABEL: "hyperpod-ns-inference-localqueue"}))
        assert "needs the label kueue.x-k8s.io/queue-name set to one of" in other_queue.value.status["message"]
        with pytest.raises(support.Refused) as warn_team:  # a warn-only team still needs some queue
            await create(dynamic, DATA_SCIENCE, job("unlabelled"))
        assert 'team "data-science" needs the label kueue.x-k8s.io/queue-name' in warn_team.value.status["message"]

        labelled = cleanup.add(await create(dynamic, RESEARCH, job("labelled", {QUEUE_LABEL: RESEARCH_QUEUE})))
        assert labelled["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE
        elsewhere = cleanup.add(await create(dynamic, namespace, job("no-team")))  # no team: no policy
        assert QUEUE_LABEL not in (elsewhere["metadata"].get("labels") or {})


# --------------------------------------------------------------------------- matchConditions


async def _pods_of(api: k8s.ApiClient, namespace: str, uid: str) -> list[Any]:
    pods = (await k8s.CoreV1Api(api).list_namespaced_pod(namespace)).items
    return [p for p in pods if any(o.uid == uid for o in p.metadata.owner_references or [])]


async def test_a_sixteen_pod_job_reaches_the_webhook_once(
    helm: Helm,
    api: k8s.ApiClient,
    dynamic: DynamicClient,
    e2e_cluster: E2ECluster,
    release_namespace: str,
    no_other_governor: None,
    cleanup: support.Cleanup,
    tmp_path: Path,
) -> None:
    server = ChartServer(e2e_cluster.kubeconfig, release_namespace, FULLNAME, tmp_path / "server")
    settings = {
        "webhook.name": f'"{WEBHOOK}"',
        "webhook.url": f'"{server.url}/mutate"',
        "certs.selfManaged.ipAddresses": '["127.0.0.1"]',
    }
    core = k8s.CoreV1Api(api)
    uid = ""
    try:
        async with installed(helm, release_namespace, settings, api):
            await asyncio.to_thread(server.start)
            try:
                jobs_before, pods_before = server.requests("Job", "CREATE"), server.requests("Pod")
                created = cleanup.add(
                    await create(dynamic, RESEARCH, job("sixteen", parallelism=16, requests=SIXTEEN_REQUESTS))
                )
                assert created["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE
                uid = created["metadata"]["uid"]
                pods = await _sixteen_pods(api, dynamic, created)
                assert len(pods) == 16, await _workload_conditions(dynamic, uid)
                jobs = server.requests("Job", "CREATE") - jobs_before
                child_requests = server.requests("Pod") - pods_before
                print(
                    f"\n16-pod Job: webhook calls for the Job's CREATE {jobs:.0f}, for its 16 pods {child_requests:.0f}"
                )
                assert (jobs, child_requests) == (1, 0)
                # A bare Pod (no owner) in the same namespace is sent: Pods are counted when they reach us.
                bare = cleanup.add(await create(dynamic, RESEARCH, BARE_POD))
                assert bare["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE
                # Once, or twice when Kueue's pod webhook changes it after us (reinvocationPolicy IfNeeded).
                assert server.requests("Pod", "CREATE") - pods_before in (1, 2)
            finally:
                for pod in await _pods_of(api, RESEARCH, uid) if uid else []:
                    with contextlib.suppress(k8s.ApiException):
                        await core.delete_namespaced_pod(pod.metadata.name, RESEARCH, grace_period_seconds=0)
                await cleanup.run()  # while the webhook still answers
    finally:
        server.stop()


# The research ClusterQueue's only flavor is a TAS flavor (a TAS-only queue: Kueue treats every
# podset as asking for topology). Kueue's flavor assigner gives a podset a flavor per resource it
# requests that the queue covers (cpu, memory, GPUs, EFA; not ``pods``), so a podset that requests
# none of them gets no flavor and its Workload stays pending forever with "no TAS flavor assigned"
# (pkg/scheduler/flavorassigner/tas_flavorassigner.go, onlyTASFlavor), whatever the webhook writes.
# The Job's pods therefore request a little CPU, as every real job does.
SIXTEEN_REQUESTS = {"cpu": "100m"}


async def _workload_conditions(dynamic: DynamicClient, job_uid: str) -> str:
    """The conditions of the Workload Kueue made for the Job ``job_uid``: why its pods are missing."""
    resource = await dynamic.resources.get(api_version=support.KUEUE_API, kind="Workload")
    found = await dynamic.get(resource, namespace=RESEARCH, label_selector=f"kueue.x-k8s.io/job-uid={job_uid}")
    conditions = [
        f"{c['type']}={c['status']} ({c.get('reason')}: {c.get('message')})"
        for item in found.to_dict()["items"]
        for c in item.get("status", {}).get("conditions", [])
    ]
    return "Workload conditions: " + ("; ".join(conditions) or "none (no Workload)")


BARE_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"generateName": "bare-"},
    "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]},
}


async def _sixteen_pods(api: k8s.ApiClient, dynamic: DynamicClient, created: dict[str, Any]) -> list[Any]:
    """The Job's 16 pods. A Job controller (kube-controller-manager) creates them once Kueue admits
    the Job (which needs its pods to request a resource the queue covers: ``SIXTEEN_REQUESTS``);
    without one, the 16 Pods it would create are created here, with the Job as their controller owner:
    the API server evaluates the same matchConditions for them."""
    uid = created["metadata"]["uid"]
    if "kube-controller-manager" in devcluster.PROCESS_ORDER:
        deadline = time.monotonic() + 60
        pods = await _pods_of(api, RESEARCH, uid)
        while len(pods) < 16 and time.monotonic() < deadline:
            await asyncio.sleep(1)
            pods = await _pods_of(api, RESEARCH, uid)
        return pods
    name = created["metadata"]["name"]
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    for index in range(16):
        metadata = {
            "name": f"{name}-{index}",
            "ownerReferences": [owner],
            "labels": {"batch.kubernetes.io/job-completion-index": str(index)},
        }
        await create(
            dynamic,
            RESEARCH,
            {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": created["spec"]["template"]["spec"]},
        )
    return await _pods_of(api, RESEARCH, uid)


# --------------------------------------------------------------------------- upgrade and rotation under load


async def test_upgrade_and_certificate_rotation_under_load(
    helm: Helm,
    api: k8s.ApiClient,
    dynamic: DynamicClient,
    e2e_cluster: E2ECluster,
    release_namespace: str,
    no_other_governor: None,
    cleanup: support.Cleanup,
    tmp_path: Path,
) -> None:
    """While a bounded loop creates Jobs in a team namespace: (a) ``helm upgrade`` with changed values,
    (b) a forced certificate rotation (``certs.selfManaged.rotation``). No creation fails, every Job
    carries its team's labels; the CA and caBundle never change.

    The webhook runs as a local ``kgov serve`` reading what the chart renders (its certificate Secret
    and policy ConfigMap, synced to files like a kubelet-mounted volume), registered through
    ``webhook.url``: the local control plane runs no pods.
    """
    server = ChartServer(e2e_cluster.kubeconfig, release_namespace, FULLNAME, tmp_path / "server")
    settings = {
        "webhook.name": f'"{WEBHOOK}"',
        "webhook.url": f'"{server.url}/mutate"',
        "certs.selfManaged.ipAddresses": '["127.0.0.1"]',
    }
    core = k8s.CoreV1Api(api)
    created: list[dict[str, Any]] = []
    failures: list[str] = []
    stop = asyncio.Event()

    async def load() -> None:
        for index in range(400):  # bounded; `stop` ends it first
            if stop.is_set():
                return
            try:
                created.append(cleanup.add(await create(dynamic, RESEARCH, job(f"load-{index}"))))
            except Exception as exc:  # every kind of failure counts
                failures.append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(0.2)

    async with contextlib.AsyncExitStack() as stack:
        stack.callback(server.stop)  # after the uninstall: admission never fails closed
        await stack.enter_async_context(installed(helm, release_namespace, settings, api))
        ca_before = (await core.read_namespaced_secret(f"{FULLNAME}-ca", release_namespace)).data
        await asyncio.to_thread(server.start)
        try:
            serial_before = load_certificate(server.root.joinpath("tls", "tls.crt").read_bytes()).serial_number
            loop = asyncio.create_task(load())
            await asyncio.sleep(3)
            # (a) changed values: timeout, log level, pod annotations, PDB.
            upgraded = {
                **settings,
                "webhook.timeoutSeconds": "4",
                "server.logLevel": '"debug"',
                "podAnnotations": '{"example.com/rev": "2"}',
                "podDisruptionBudget.minAvailable": "2",
            }
            await asyncio.to_thread(helm.upgrade, settings=upgraded, namespace=release_namespace)
            after_upgrade = len(created)
            await asyncio.sleep(3)
            # (b) a forced rotation: a new serving certificate from the same CA.
            reloads_before = server.certificate_reloads()
            rotated = {**upgraded, "certs.selfManaged.rotation": '"forced-1"'}
            await asyncio.to_thread(helm.upgrade, settings=rotated, namespace=release_namespace)
            deadline = time.monotonic() + 60
            while server.certificate_reloads() <= reloads_before and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            after_rotation = len(created)
            await asyncio.sleep(3)
            stop.set()
            await asyncio.wait_for(loop, timeout=120)

            serial_after = load_certificate(server.root.joinpath("tls", "tls.crt").read_bytes()).serial_number
            ca_after = (await core.read_namespaced_secret(f"{FULLNAME}-ca", release_namespace)).data
            (hook,) = (await k8s.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(WEBHOOK)).webhooks
            unlabelled = [
                obj["metadata"]["name"]
                for obj in created
                if (obj["metadata"].get("labels") or {}).get(QUEUE_LABEL) != RESEARCH_QUEUE
                or (obj["metadata"].get("labels") or {}).get(PRIORITY_LABEL) != "training-priority"
            ]
            print(
                f"\nupgrade+rotation under load: {len(created)} Jobs created ({after_upgrade} by the end of the "
                f"upgrade, {after_rotation} by the end of the rotation), {len(failures)} failed, "
                f"{len(unlabelled)} without their team's labels; certificate reloads "
                f"{server.certificate_reloads() - reloads_before:.0f}"
            )
            assert failures == []
            assert unlabelled == []
            assert after_upgrade > 0 and after_rotation > after_upgrade and len(created) > after_rotation
            assert serial_after != serial_before
            assert server.certificate_reloads() > reloads_before
            assert ca_after == ca_before
            assert hook.timeout_seconds == 4
            assert base64.b64decode(hook.client_config.ca_bundle) == base64.b64decode(ca_before["ca.crt"])
        finally:
            stop.set()
            await cleanup.run()


# --------------------------------------------------------------------------- kgov certs inject


async def test_kgov_certs_publishes_the_ca_bundle(api: k8s.ApiClient, e2e_cluster: E2ECluster, tmp_path: Path) -> None:
    name = f"kgov-inject-{secrets.token_hex(3)}"
    never = k8s.V1LabelSelector(
        match_expressions=[k8s.V1LabelSelectorRequirement(key="kueue-governor.io/never", operator="Exists")]
    )

    def webhook_fields(path: str) -> dict[str, Any]:
        """A webhook on Job CREATE that selects no object and points at nothing (port 1)."""
        return {
            "name": "inject.kueue-governor.io",
            "admission_review_versions": ["v1"],
            "side_effects": "None",
            "failure_policy": "Ignore",
            "object_selector": never,
            "client_config": k8s.AdmissionregistrationV1WebhookClientConfig(url=f"https://127.0.0.1:1/{path}"),
            "rules": [
                k8s.V1RuleWithOperations(
                    api_groups=["batch"], api_versions=["v1"], operations=["CREATE"], resources=["jobs"]
                )
            ],
        }

    webhook = k8s.V1MutatingWebhook(**webhook_fields("mutate"))
    validating = k8s.V1ValidatingWebhook(**webhook_fields("validate"))
    registration = k8s.AdmissionregistrationV1Api(api)
    await registration.create_mutating_webhook_configuration(
        k8s.V1MutatingWebhookConfiguration(metadata=k8s.V1ObjectMeta(name=name), webhooks=[webhook])
    )
    await registration.create_validating_webhook_configuration(
        k8s.V1ValidatingWebhookConfiguration(metadata=k8s.V1ObjectMeta(name=name), webhooks=[validating])
    )
    directory = tmp_path / "certs"
    targets = [
        "--webhook-configuration",
        name,
        "--validating-webhook-configuration",
        name,
        "--kubeconfig",
        str(e2e_cluster.kubeconfig),
    ]

    def kgov(*args: str) -> str:
        result = CliRunner().invoke(main, ["certs", *args])
        assert result.exit_code == 0, result.output
        return result.output

    async def bundles() -> tuple[bytes, bytes]:
        m = (await registration.read_mutating_webhook_configuration(name)).webhooks[0].client_config.ca_bundle
        v = (await registration.read_validating_webhook_configuration(name)).webhooks[0].client_config.ca_bundle
        return base64.b64decode(m), base64.b64decode(v)

    try:
        output = await asyncio.to_thread(kgov, "create", str(directory), "--ip", "127.0.0.1", *targets)
        assert f"MutatingWebhookConfiguration {name}: caBundle set in inject.kueue-governor.io" in output
        first_ca = (directory / "ca.crt").read_bytes()
        assert await bundles() == (first_ca, first_ca)

        output = await asyncio.to_thread(kgov, "inject", str(directory), *targets)
        assert f"MutatingWebhookConfiguration {name}: caBundle already current" in output
        assert f"ValidatingWebhookConfiguration {name}: caBundle already current" in output

        # Renewing the serving certificate keeps the CA: nothing to publish.
        await asyncio.to_thread(kgov, "renew", str(directory), "--force")
        assert await bundles() == (first_ca, first_ca)

        # A new CA: published with the previous one, so servers still on the old certificate verify.
        await asyncio.to_thread(kgov, "create", str(directory), "--ip", "127.0.0.1", "--new-ca", *targets)
        new_ca = (directory / "ca.crt").read_bytes()
        mutating, validating_bundle = await bundles()
        assert split_bundle(mutating) == [new_ca, first_ca] == split_bundle(validating_bundle)
    finally:
        with contextlib.suppress(k8s.ApiException):
            await registration.delete_mutating_webhook_configuration(name)
        with contextlib.suppress(k8s.ApiException):
            await registration.delete_validating_webhook_configuration(name)
