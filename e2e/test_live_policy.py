"""``kgov serve --policy-configmap`` against the real kube-apiserver: the team policy lives in the
ConfigMap the Helm chart renders, and the server runs with the chart's RBAC.

The chart is rendered (``helm template``, release ``kgov-live`` in a fresh namespace); its
ServiceAccount, ClusterRole, Role, their bindings and the policy ConfigMap are applied, and
``kgov serve`` runs with the ``--policy-configmap`` argument of the rendered Deployment and a token
of that ServiceAccount (the local control plane runs no pods), registered as ``kgov-governor``. What
the team ``research`` of ``kueue-config/platform.yaml`` gets is read from server-side dry-run Jobs in
its namespace (through every webhook, stored nowhere):

* the Role's ``resourceNames`` holds for list and watch with ``fieldSelector=metadata.name``: the
  server syncs, while the same token may not list the namespace's ConfigMaps, nor get another one;
* a new default Kueue priority in the ConfigMap (``kgov generate`` of the platform edited) reaches
  new Jobs within seconds, without a restart;
* JSON cut short, an unknown field, the key removed, the ConfigMap deleted: each gives a Warning
  Event on the ConfigMap and ``kgov_policy_reloads_total{source="configmap",result="error"}``, and
  Jobs keep the last good policy; a valid ConfigMap created again is taken;
  (the same Events are listed through core/v1, as ``kubectl describe configmap`` lists them);
* the API server killed, etcd compacted while it is down: a policy change made the moment it
  accepts writes again is served. With the chart's ServiceAccount the watch comes back through a
  re-list (the restarted API server refuses it with 403 until its RBAC caches are filled, or answers
  410); with the server's own ``system:masters`` identity (authorized at once) the watch resumes from
  its compacted version, gets ``410 Gone`` and lists exactly once.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import devcluster, support
from e2e.conftest import E2ECluster
from e2e.helm_support import PLATFORM_VALUES, Helm, by_kind, one
from e2e.support import create_with_warnings, read_metrics, wait_for

pytestmark = pytest.mark.e2e

RELEASE = "kgov-live"
TEAM_NAMESPACE = "hyperpod-ns-research"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: How long a change may take to reach new Jobs before the test fails (a loaded machine); the time
#: it took is printed.
CATCH_UP = 30.0
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap")


def job() -> dict[str, Any]:
    """A suspended one-pod Job of team research (one GPU: it fits the team's nodes and quota)."""
    template = {"spec": support.pause_pod_spec(1, "1")}
    return support.job_manifest(f"live-{secrets.token_hex(4)}", TEAM_NAMESPACE, 1, template)


async def priority_of_a_new_job(dynamic: DynamicClient) -> str | None:
    created = await create_with_warnings(dynamic, job(), dry_run=True)
    value = ((created.obj.get("metadata") or {}).get("labels") or {}).get(PRIORITY_LABEL)
    return str(value) if value is not None else None


async def until_priority(dynamic: DynamicClient, wanted: str, what: str) -> float:
    """Poll new (dry-run) Jobs until they get ``wanted``; the seconds it took."""
    began = time.monotonic()
    seen: list[str | None] = []

    async def probe() -> bool:
        seen.append(await priority_of_a_new_job(dynamic))
        return seen[-1] == wanted

    try:
        await wait_for(probe, what, timeout=CATCH_UP, interval=0.2)
    except AssertionError as error:
        raise AssertionError(f"{error}; priorities seen, newest last: {seen[-5:]}") from None
    return time.monotonic() - began


def policy_with_default(platform_dir: Path, default: str) -> str:
    """``policy.json`` of ``kgov generate`` for the bundled platform with research's default Kueue
    priority set to ``default``."""
    text = support.BUNDLED_PLATFORM.read_text()
    line = "kueuePriority: {default: training, allowed: [training, experimentation], enforcement: enforce}"
    assert text.count(line) == 1
    platform = platform_dir / f"platform-{default}.yaml"
    platform.write_text(text.replace(line, line.replace("default: training", f"default: {default}")))
    generated = support.generate(platform, platform_dir / f"generated-{default}")
    (configmap,) = generated.of_kind("ConfigMap")
    return str(configmap["data"]["policy.json"])


class Governor:
    """The running server's metrics and the Events about its ConfigMap."""

    def __init__(self, e2e_cluster: E2ECluster, dynamic: DynamicClient, namespace: str, configmap: str) -> None:
        assert e2e_cluster.local is not None
        self.state = Path(e2e_cluster.local.state_dir)
        self.dynamic = dynamic
        self.namespace = namespace
        self.configmap = configmap

    def metric(self, name: str, **labels: str) -> float:
        info = devcluster.load_info(self.state)
        assert info is not None and info.governor_metrics_url is not None
        return read_metrics(info.governor_metrics_url).get((name, frozenset(labels.items())), 0.0)

    def errors(self) -> float:
        return self.metric("kgov_policy_reloads_total", source="configmap", result="error")

    async def errors_reach(self, count: float) -> None:
        await wait_for(lambda: _true(self.errors() == count), f"{count:g} rejections to be counted", timeout=CATCH_UP)

    async def events(self) -> dict[str, dict[str, Any]]:
        """The Events about the ConfigMap, by name."""
        items = await support.list_objects(self.dynamic, "events.k8s.io/v1", "Event", self.namespace)
        return {e["metadata"]["name"]: e for e in items if (e.get("regarding") or {}).get("name") == self.configmap}

    async def new_event(self, seen: set[str], reason: str) -> dict[str, Any]:
        """The one Event not among ``seen`` (waited for): of ``reason``, type Warning."""

        async def arrived() -> list[dict[str, Any]] | None:
            found = await self.events()
            fresh = [event for event_name, event in found.items() if event_name not in seen]
            return fresh or None

        (event,) = await wait_for(arrived, f"a {reason} Event on ConfigMap {self.configmap}", timeout=CATCH_UP)
        assert event["reason"] == reason and event["type"] == "Warning", event
        assert event["reportingController"] == "kueue-governor.io/governor"
        assert event["regarding"]["kind"] == "ConfigMap" and event["regarding"]["namespace"] == self.namespace
        return dict(event)


@pytest.fixture
async def chart_rbac(
    api: k8s.ApiClient, dynamic: DynamicClient, namespace: str, e2e_cluster: E2ECluster, tmp_path: Path
) -> AsyncIterator[tuple[dict[str, Any], list[str], Path]]:
    """The chart's RBAC and policy ConfigMap applied in ``namespace`` (the release namespace):
    (the ConfigMap, the Deployment's policy arguments, a kubeconfig with a token of the chart's
    ServiceAccount). Cluster-scoped objects are deleted afterwards."""
    helm = Helm()
    try:
        objects = await asyncio.to_thread(helm.template, [PLATFORM_VALUES], None, namespace, RELEASE)
    finally:
        helm.close()
    applied = [obj for obj in objects if obj["kind"] in RBAC_KINDS]
    for obj in applied:
        await devcluster.apply(dynamic, obj)
    container, *_ = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]  # the first process
    policy_args = [arg for arg in container["args"] if arg.startswith("--policy")]
    account = one(objects, "ServiceAccount")["metadata"]["name"]
    spec = k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    token = await k8s.CoreV1Api(api).create_namespaced_service_account_token(
        account, namespace, k8s.AuthenticationV1TokenRequest(spec=spec)
    )
    cluster = yaml.safe_load(e2e_cluster.kubeconfig.read_text())["clusters"][0]["cluster"]
    kubeconfig = tmp_path / "serviceaccount.kubeconfig"
    user = f"system:serviceaccount:{namespace}:{account}"
    ca_pem = base64.b64decode(cluster["certificate-authority-data"])
    devcluster.write_kubeconfig(kubeconfig, cluster["server"], ca_pem, user, token.status.token)
    try:
        yield one(objects, "ConfigMap"), policy_args, kubeconfig
    finally:
        rbac = k8s.RbacAuthorizationV1Api(api)
        for binding in by_kind(applied, "ClusterRoleBinding"):
            await rbac.delete_cluster_role_binding(binding["metadata"]["name"])
        for role in by_kind(applied, "ClusterRole"):
            await rbac.delete_cluster_role(role["metadata"]["name"])


async def test_policy_changes_are_served_live_and_bad_ones_rejected(
    api: k8s.ApiClient,
    dynamic: DynamicClient,
    namespace: str,
    e2e_cluster: E2ECluster,
    bundled_config: support.Generated,
    governor: Callable[..., str],
    chart_rbac: tuple[dict[str, Any], list[str], Path],
    tmp_path: Path,
) -> None:
    if e2e_cluster.local is None:
        pytest.skip("starts kgov serve next to the local control plane and restarts its API server")
    configmap, policy_args, kubeconfig = chart_rbac
    name = configmap["metadata"]["name"]
    assert policy_args == [f"--policy-configmap={namespace}/{name}"]
    core = k8s.CoreV1Api(api)
    training = configmap["data"]["policy.json"]
    labels = configmap["metadata"].get("labels")
    experimentation = await asyncio.to_thread(policy_with_default, tmp_path, "experimentation")

    # -- least privilege, as the real API server authorizes it --------------------------------------
    async with devcluster.api_client(kubeconfig) as account:
        as_account = k8s.CoreV1Api(account)
        listed = await as_account.list_namespaced_config_map(namespace, field_selector=f"metadata.name={name}")
        assert [item.metadata.name for item in listed.items] == [name]
        await core.create_namespaced_config_map(namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="other")))
        for call in (
            as_account.list_namespaced_config_map(namespace),
            as_account.list_namespaced_config_map(namespace, field_selector="metadata.name=other"),
            as_account.read_namespaced_config_map("other", namespace),
            as_account.list_namespaced_config_map(TEAM_NAMESPACE, field_selector=f"metadata.name={name}"),
        ):
            with pytest.raises(k8s.ApiException) as refused:
                await call
            assert refused.value.status == 403

    await asyncio.to_thread(governor, None, policy=policy_args, kubeconfig=kubeconfig)
    live = Governor(e2e_cluster, dynamic, namespace, name)
    assert await priority_of_a_new_job(dynamic) == "training-priority"
    assert live.metric("kgov_policy_reloads_total", source="configmap", result="ok") == 1.0

    async def write(policy: str | None, other: dict[str, str] | None = None) -> str:
        """Replace the ConfigMap's data; its new resourceVersion."""
        data = {**({"policy.json": policy} if policy is not None else {}), **(other or {})}
        body = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=name, labels=labels), data=data)
        stored = await core.replace_namespaced_config_map(name, namespace, body)
        return str(stored.metadata.resource_version)

    # -- a valid change: served within seconds ------------------------------------------------------
    await write(experimentation)
    took = await until_priority(dynamic, "experimentation-priority", "the new default priority to reach new Jobs")
    print(f"a new default priority reached new Jobs {took:.2f}s after the ConfigMap was written")

    # -- invalid versions: rejected, an Event each, the last good policy in force --------------------
    cases = [
        (experimentation[:200], None, "PolicyRejected", "data['policy.json'] is not JSON"),
        (
            experimentation.replace('"teams"', '"unknownField": 1, "teams"', 1),
            None,
            "PolicyRejected",
            "unknownField: Extra inputs are not permitted",
        ),
        (None, {"other.json": "{}"}, "PolicyRejected", "the ConfigMap has no data['policy.json']"),
    ]
    for policy, other, reason, message in cases:
        seen, errors = set(await live.events()), live.errors()
        version = await write(policy, other)
        event = await live.new_event(seen, reason)
        assert event["regarding"]["name"] == name and event["regarding"]["resourceVersion"] == version
        assert message in event["note"] and event["note"].endswith("; the last good policy stays in force")
        print(f"{reason}: {event['note']}")
        await live.errors_reach(errors + 1)
        assert live.metric("kgov_policy_rejected") == 1.0
        assert await priority_of_a_new_job(dynamic) == "experimentation-priority"

    seen, errors = set(await live.events()), live.errors()
    await core.delete_namespaced_config_map(name, namespace)
    event = await live.new_event(seen, "PolicyConfigMapDeleted")
    assert event["note"] == f"ConfigMap {namespace}/{name} was deleted; the last good policy stays in force"
    await live.errors_reach(errors + 1)
    assert await priority_of_a_new_job(dynamic) == "experimentation-priority"

    # The same Events through core/v1, as `kubectl describe configmap` lists them.
    selector = f"involvedObject.kind=ConfigMap,involvedObject.name={name}"
    described = (await core.list_namespaced_event(namespace, field_selector=selector)).items
    assert sorted(str(e.reason) for e in described) == ["PolicyConfigMapDeleted", *["PolicyRejected"] * 3]
    assert {(e.type, e.reporting_component) for e in described} == {("Warning", "kueue-governor.io/governor")}

    # Created again, valid: taken.
    body = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=name, labels=labels), data={"policy.json": training})
    await core.create_namespaced_config_map(namespace, body)
    await until_priority(dynamic, "training-priority", "the re-created ConfigMap's policy to reach new Jobs")
    assert live.metric("kgov_policy_rejected") == 0.0

    # -- the API server killed: the watch comes back (here through a 403 while the restarted API
    # server's RBAC warms up, or a 410), and a change made as soon as it answers is served.
    lists = await restart_and_change(api, dynamic, e2e_cluster, live, experimentation, "experimentation-priority")
    assert lists["expired"] + lists["error"] >= 1, lists
    assert live.metric("kgov_policy_rejected") == 0.0


async def test_a_410_on_the_policy_watch_lists_again_and_loses_nothing(
    api: k8s.ApiClient,
    dynamic: DynamicClient,
    namespace: str,
    e2e_cluster: E2ECluster,
    bundled_config: support.Generated,
    governor: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The server's own identity (``system:masters``: authorized at once after a restart), so the
    watch resumes from its version, which the compaction removed: ``410 Gone``, exactly one list."""
    if e2e_cluster.local is None:
        pytest.skip("starts kgov serve next to the local control plane and restarts its API server")
    (generated,) = bundled_config.of_kind("ConfigMap")
    name = "kgov-policy"
    body = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=name), data={"policy.json": generated["data"]["policy.json"]})
    await k8s.CoreV1Api(api).create_namespaced_config_map(namespace, body)
    experimentation = await asyncio.to_thread(policy_with_default, tmp_path, "experimentation")
    await asyncio.to_thread(governor, None, policy=["--policy-configmap", f"{namespace}/{name}"])
    live = Governor(e2e_cluster, dynamic, namespace, name)
    assert await priority_of_a_new_job(dynamic) == "training-priority"
    lists = await restart_and_change(api, dynamic, e2e_cluster, live, experimentation, "experimentation-priority")
    assert lists == {"expired": 1.0, "error": 0.0}


async def restart_and_change(
    api: k8s.ApiClient, dynamic: DynamicClient, e2e_cluster: E2ECluster, live: Governor, policy: str, wanted: str
) -> dict[str, float]:
    """Kill kube-apiserver, compact etcd while it is down, start it again; write ``policy`` into the
    ConfigMap the moment the API server accepts it (a fresh client) and wait until new Jobs get
    ``wanted``. Returns the ConfigMap watch's full lists since, by reason (``expired``, ``error``),
    once it has made one."""
    assert e2e_cluster.local is not None
    core = k8s.CoreV1Api(api)
    # A write after the ConfigMap's: etcd's revision moves past every version the watch holds.
    await core.create_namespaced_config_map(
        live.namespace,
        k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=f"bump-{secrets.token_hex(3)}"), data={"at": str(time.time())}),
    )

    def lists() -> dict[str, float]:
        return {
            reason: live.metric("kgov_cache_lists_total", cache="policy-configmap", reason=reason)
            for reason in ("expired", "error")
        }

    before = lists()
    state = Path(e2e_cluster.local.state_dir)
    compacted: list[int] = []
    down_for = await asyncio.to_thread(
        devcluster.restart_apiserver, state, lambda: compacted.append(devcluster.compact_etcd(state)), True
    )
    print(f"API server killed and restarted: unreachable for {down_for:.1f}s, etcd compacted at {compacted}")
    try:
        async with devcluster.api_client(e2e_cluster.kubeconfig) as fresh:

            async def written() -> bool:
                patch = {"data": {"policy.json": policy}}
                try:
                    await k8s.CoreV1Api(fresh).patch_namespaced_config_map(live.configmap, live.namespace, patch)
                except (aiohttp.ClientError, OSError, k8s.ApiException):
                    return False
                return True

            await wait_for(written, "the API server to accept the policy change", timeout=CATCH_UP, interval=0.1)
        took = await until_priority(dynamic, wanted, "a policy change made as soon as the API server was back")
        print(f"a change made as soon as the API server was back reached new Jobs in {took:.2f}s")

        async def relisted() -> dict[str, float] | None:
            after = lists()
            counts = {reason: after[reason] - before[reason] for reason in after}
            return counts if sum(counts.values()) >= 1 else None

        counts = await wait_for(relisted, "the ConfigMap watch to list again", timeout=CATCH_UP)
        print(f"the ConfigMap watch listed again after the restart: {counts}")
        return counts
    finally:
        # The nodes' leases could not be renewed while the API server was down.
        await devcluster.wait_nodes_ready(dynamic, e2e_cluster.node_names, timeout=180)


async def _true(value: bool) -> bool:
    return value
