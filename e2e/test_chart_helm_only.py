"""Helm alone installs the governor (SPEC §8): the platform file itself is the chart's values.

On the real node (:mod:`e2e.devcluster.node`, the image built on this machine), ``helm upgrade
--install --wait -f platform.yaml`` (with only the settings that put the pods on that node) and no
``kgov`` run on the host:

* the hook Job applied the platform's Kueue objects (Topology, ResourceFlavor, Cohort,
  ClusterQueue, LocalQueue, WorkloadPriorityClass) and the team's Namespace, under the field manager
  ``kgov``, Kueue made the ClusterQueue Active, and the hook's Job, ServiceAccount and ClusterRole
  are gone once it succeeded;
* the servers compiled the policy from the ConfigMap's platform file: a Job created in the team's
  namespace gets the team's LocalQueue and default Kueue priority;
* ``helm upgrade`` with a changed platform file: the ClusterQueue's quota and the served default
  priority follow.

The platform's names (``ho-…``) are its own, so nothing the session applied can stand in for what
the chart applied. Needs the real node (root, ``make e2e-node-deps``), like test_chart_real_node.py;
the node is held for this module only.
"""

from __future__ import annotations

import asyncio
import copy
import json
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
from e2e.devcluster.node import NODE_NAME, REAL_NODE_SELECTOR, REAL_NODE_TOLERATION
from e2e.helm_support import CHART, Helm, bundled_governor_unregistered
from e2e.realnode import real_node

__all__ = ["real_node"]  # the module's fixture (e2e/realnode.py)

pytestmark = pytest.mark.e2e

NAMESPACE = "kgov-helm-only"
RELEASE = "kgov"
FULLNAME = "kgov-kueue-governor"
WEBHOOK = "kgov-helm-only"  # not the harness's kgov-governor
TEAM = "ho-team"
QUEUE = "ho-team-queue"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"

#: A platform of its own: one topology, flavor, cohort and team, two priorities.
PLATFORM: dict[str, Any] = {
    "apiVersion": "kueue-governor.io/v1alpha1",
    "kind": "Platform",
    "topologies": [{"name": "ho-hosts", "levels": ["kubernetes.io/hostname"]}],
    "flavors": [{"name": "ho-cpu", "nodeLabels": {"kueue-governor.io/helm-only": "true"}, "topologyName": "ho-hosts"}],
    "cohorts": [{"name": "ho-cohort"}],
    "priorities": [{"name": "ho-high", "value": 900}, {"name": "ho-low", "value": 100}],
    "teams": [
        {
            "name": TEAM,
            "cohort": "ho-cohort",
            "quotas": [
                {"flavor": "ho-cpu", "resources": {"cpu": {"nominalQuota": 4}, "memory": {"nominalQuota": "8Gi"}}}
            ],
            "policy": {
                "queue": {"enforcement": "enforce"},
                "kueuePriority": {"default": "ho-low", "allowed": ["ho-low", "ho-high"], "enforcement": "enforce"},
            },
        }
    ],
}

#: (plural, name, namespace) of every object the hook Job applies for :data:`PLATFORM`.
KUEUE_OBJECTS = [
    ("topologies", "ho-hosts", None),
    ("resourceflavors", "ho-cpu", None),
    ("cohorts", "ho-cohort", None),
    ("clusterqueues", TEAM, None),
    ("localqueues", QUEUE, TEAM),
    ("workloadpriorityclasses", "ho-high", None),
    ("workloadpriorityclasses", "ho-low", None),
]


def settings() -> dict[str, str]:
    """``--set-json`` settings: the local image, on the real node, under its own webhook name."""
    return {
        "image.pullPolicy": '"Never"',
        "webhook.name": f'"{WEBHOOK}"',
        "nodeSelector": json.dumps(REAL_NODE_SELECTOR),
        "tolerations": json.dumps([REAL_NODE_TOLERATION]),
    }


def install(helm: Helm, platform_file: Path) -> float:
    """``helm upgrade --install --wait -f platform_file``: the hook Job included; returns its seconds."""
    started = time.monotonic()
    args = ["upgrade", "--install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace"]
    helm.run(*args, *helm._value_args([platform_file], settings()), "--wait", "--timeout", "4m", timeout=300)
    return time.monotonic() - started


async def kueue_object(api: k8s.ApiClient, plural: str, name: str, namespace: str | None) -> dict[str, Any]:
    custom = k8s.CustomObjectsApi(api)
    if namespace is None:
        found = await custom.get_cluster_custom_object(*KUEUE, plural, name)
    else:
        found = await custom.get_namespaced_custom_object(*KUEUE, namespace, plural, name)
    return dict(found)


async def remove_kueue_objects(api: k8s.ApiClient) -> None:
    """What ``helm uninstall`` leaves on purpose (the Kueue objects hold the team's workloads)."""
    custom = k8s.CustomObjectsApi(api)
    for plural, name, namespace in reversed(KUEUE_OBJECTS):
        try:
            if namespace is None:
                await custom.delete_cluster_custom_object(*KUEUE, plural, name)
            else:
                await custom.delete_namespaced_custom_object(*KUEUE, namespace, plural, name)
        except k8s.ApiException as error:
            if error.status != 404:
                raise
    try:
        await k8s.CoreV1Api(api).delete_namespace(TEAM)
    except k8s.ApiException as error:
        if error.status != 404:
            raise


@pytest.fixture(scope="module")
def platform_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("helm-only") / "platform.yaml"
    path.write_text(yaml.safe_dump(PLATFORM, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def chart(real_node: devcluster.ClusterInfo, e2e_cluster: E2ECluster, platform_file: Path) -> Iterator[Helm]:
    """The chart installed from the platform file alone; uninstalled, and its Kueue objects removed, afterwards."""
    helm = Helm(kubeconfig=e2e_cluster.kubeconfig)
    try:
        seconds = install(helm, platform_file)
        print(f"\nhelm upgrade --install -f platform.yaml Ready (hook Job included) in {seconds:.1f}s")
        yield helm
    finally:
        try:
            helm.run("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "2m", timeout=180)
        finally:
            helm.close()
            asyncio.run(_remove(e2e_cluster))


async def _remove(e2e_cluster: E2ECluster) -> None:
    async with devcluster.api_client(e2e_cluster.kubeconfig) as api:
        await remove_kueue_objects(api)


async def test_the_hook_applied_the_teams_kueue_objects(chart: Helm, api: k8s.ApiClient) -> None:
    for plural, name, namespace in KUEUE_OBJECTS:
        obj = await kueue_object(api, plural, name, namespace)
        managers = {(entry["manager"], entry["operation"]) for entry in obj["metadata"]["managedFields"]}
        assert ("kgov", "Apply") in managers, (plural, name, managers)
    queue = await kueue_object(api, "clusterqueues", TEAM, None)
    assert queue["spec"]["cohortName"] == "ho-cohort"
    (group,) = queue["spec"]["resourceGroups"]
    # A quantity is an int-or-string: 4 through Helm's values may come back as "4", the same amount.
    assert {r["name"]: str(r["nominalQuota"]) for r in group["flavors"][0]["resources"]} == {
        "cpu": "4",
        "memory": "8Gi",
    }
    local = await kueue_object(api, "localqueues", QUEUE, TEAM)
    assert local["spec"]["clusterQueue"] == TEAM
    high = await kueue_object(api, "workloadpriorityclasses", "ho-high", None)
    assert high["value"] == 900
    team_namespace = await k8s.CoreV1Api(api).read_namespace(TEAM)
    assert team_namespace.metadata.labels["kueue-governor.io/team"] == TEAM

    # Kueue took them: the ClusterQueue (its flavor, topology and cohort there) is Active.
    async def active() -> bool:
        found = await kueue_object(api, "clusterqueues", TEAM, None)
        return any(
            c["type"] == "Active" and c["status"] == "True" for c in found.get("status", {}).get("conditions", [])
        )

    assert await support.wait_for(active, f"ClusterQueue {TEAM} to become Active", 60)


async def test_the_hook_leaves_no_job_and_no_rights_behind(chart: Helm, api: k8s.ApiClient) -> None:
    name = f"{FULLNAME}-kueue-apply"
    jobs = await k8s.BatchV1Api(api).list_namespaced_job(NAMESPACE)
    assert [job.metadata.name for job in jobs.items] == []
    accounts = await k8s.CoreV1Api(api).list_namespaced_service_account(NAMESPACE)
    assert name not in [account.metadata.name for account in accounts.items]
    roles = await k8s.RbacAuthorizationV1Api(api).list_cluster_role()
    assert name not in [role.metadata.name for role in roles.items]


async def test_the_servers_compiled_the_platform_file(chart: Helm, api: k8s.ApiClient, dynamic: DynamicClient) -> None:
    pods = await k8s.CoreV1Api(api).list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/component=webhook")
    assert [pod.spec.node_name for pod in pods.items] == [NODE_NAME, NODE_NAME]
    async with bundled_governor_unregistered(api, dynamic):
        labels = await job_labels(dynamic)
    assert labels.get(QUEUE_LABEL) == QUEUE, labels
    assert labels.get(PRIORITY_LABEL) == "ho-low", labels


async def job_labels(dynamic: DynamicClient) -> dict[str, str]:
    """The labels of a dry-run Job created in the team's namespace."""
    job = support.job_manifest(f"ho-{secrets.token_hex(3)}", TEAM, 1, {"spec": support.pause_pod_spec(0, "100m")})
    result = await support.create_with_warnings(dynamic, job, True)
    return dict(result.obj["metadata"].get("labels") or {})


async def test_an_upgrade_with_a_changed_platform_file(
    chart: Helm, api: k8s.ApiClient, dynamic: DynamicClient, platform_file: Path
) -> None:
    changed = copy.deepcopy(PLATFORM)
    (team,) = changed["teams"]
    team["quotas"][0]["resources"]["cpu"]["nominalQuota"] = 6
    team["policy"]["kueuePriority"]["default"] = "ho-high"
    path = platform_file.with_name("changed-platform.yaml")
    path.write_text(yaml.safe_dump(changed, sort_keys=False), encoding="utf-8")
    seconds = await asyncio.to_thread(install, chart, path)
    print(f"\nhelm upgrade with a changed platform file Ready in {seconds:.1f}s")
    queue = await kueue_object(api, "clusterqueues", TEAM, None)
    (group,) = queue["spec"]["resourceGroups"]
    assert {r["name"]: str(r["nominalQuota"]) for r in group["flavors"][0]["resources"]}["cpu"] == "6"
    async with bundled_governor_unregistered(api, dynamic):
        deadline = time.monotonic() + 60
        labels = await job_labels(dynamic)
        while labels.get(PRIORITY_LABEL) != "ho-high" and time.monotonic() < deadline:
            await asyncio.sleep(1)
            labels = await job_labels(dynamic)
    assert labels.get(PRIORITY_LABEL) == "ho-high", labels
    assert labels.get(QUEUE_LABEL) == QUEUE
