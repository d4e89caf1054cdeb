"""``kgov generate --apply`` against the real API server and Kueue, with exactly the rights the
chart's hook Job has (its ClusterRole, rendered by ``helm template -f platform.yaml``): every Kueue
object and the team's Namespace applied in order and taken by Kueue (the ClusterQueue Active), a
second apply with a changed quota updates it in place, and a right taken away is a clear error
naming the object, not a traceback. The chart's hook itself runs on the real node in
e2e/test_chart_helm_only.py.
"""

from __future__ import annotations

import base64
import copy
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client as k8s

from e2e import devcluster, support
from e2e.conftest import E2ECluster
from e2e.helm_support import Helm, by_kind
from webhook.kube.client import get_json

pytestmark = pytest.mark.e2e

ACCOUNT = "kgov-apply-e2e"
TEAM = "ga-team"
KUEUE = ("kueue.x-k8s.io", "v1beta2")

PLATFORM: dict[str, Any] = {
    "apiVersion": "kueue-governor.io/v1alpha1",
    "kind": "Platform",
    "topologies": [{"name": "ga-hosts", "levels": ["kubernetes.io/hostname"]}],
    "flavors": [{"name": "ga-cpu", "nodeLabels": {"kueue-governor.io/apply-e2e": "true"}, "topologyName": "ga-hosts"}],
    "cohorts": [{"name": "ga-cohort"}],
    "priorities": [{"name": "ga-high", "value": 800, "podPriorityClass": True}],
    "teams": [
        {
            "name": TEAM,
            "cohort": "ga-cohort",
            "quotas": [{"flavor": "ga-cpu", "resources": {"cpu": {"nominalQuota": 2}}}],
        }
    ],
}

#: (group, version, plural, name, namespace) of what --apply makes of PLATFORM.
APPLIED = [
    ("", "v1", "namespaces", TEAM, None),
    ("scheduling.k8s.io", "v1", "priorityclasses", "ga-high", None),
    (*KUEUE, "workloadpriorityclasses", "ga-high", None),
    (*KUEUE, "topologies", "ga-hosts", None),
    (*KUEUE, "resourceflavors", "ga-cpu", None),
    (*KUEUE, "cohorts", "ga-cohort", None),
    (*KUEUE, "clusterqueues", TEAM, None),
    (*KUEUE, "localqueues", f"{TEAM}-queue", TEAM),
]


def hook_cluster_role(platform_file: Path, namespace: str) -> k8s.V1ClusterRole:
    """The chart's hook ClusterRole for ``platform_file``, renamed for this module."""
    helm = Helm()
    try:
        objects = helm.template([platform_file], namespace=namespace)
    finally:
        helm.close()
    (role,) = [obj for obj in by_kind(objects, "ClusterRole") if obj["metadata"]["name"].endswith("-kueue-apply")]
    rules = [
        k8s.V1PolicyRule(api_groups=r["apiGroups"], resources=r["resources"], verbs=r["verbs"]) for r in role["rules"]
    ]
    return k8s.V1ClusterRole(metadata=k8s.V1ObjectMeta(name=ACCOUNT), rules=rules)


def _path(group: str, version: str, plural: str, name: str, namespace: str | None) -> str:
    root = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    return root + (f"/namespaces/{namespace}" if namespace else "") + f"/{plural}/{name}"


async def _object(api: k8s.ApiClient, group: str, version: str, plural: str, name: str, namespace: str | None) -> Any:
    found = await get_json(api, _path(group, version, plural, name, namespace))
    assert found is not None, f"{plural}/{name} is not there"
    return found


async def _delete_applied(api: k8s.ApiClient) -> None:
    """Every object of APPLIED deleted (in reverse order); one not there is fine."""
    for group, version, plural, name, namespace in reversed(APPLIED):
        response = await api.call_api(
            _path(group, version, plural, name, namespace),
            "DELETE",
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        assert response.status in (200, 202, 404), (plural, name, response.status)
        response.release()


@pytest.fixture
async def account(api: k8s.ApiClient, e2e_cluster: E2ECluster, tmp_path: Path) -> AsyncIterator[Path]:
    """A ServiceAccount bound to the chart's hook ClusterRole, in a release namespace of its own (a
    deleted one lingers a while); a kubeconfig with its token, next to a file ``namespace``."""
    namespace = f"kgov-apply-e2e-{secrets.token_hex(3)}"
    core, rbac = k8s.CoreV1Api(api), k8s.RbacAuthorizationV1Api(api)
    platform_file = tmp_path / "platform.yaml"
    platform_file.write_text(yaml.safe_dump(PLATFORM), encoding="utf-8")
    await _delete_applied(api)
    await core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
    await core.create_namespaced_service_account(
        namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=ACCOUNT))
    )
    await rbac.create_cluster_role(hook_cluster_role(platform_file, namespace))
    binding = k8s.V1ClusterRoleBinding(
        metadata=k8s.V1ObjectMeta(name=ACCOUNT),
        role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=ACCOUNT),
        subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name=ACCOUNT, namespace=namespace)],
    )
    await rbac.create_cluster_role_binding(binding)
    spec = k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    token = await core.create_namespaced_service_account_token(
        ACCOUNT, namespace, k8s.AuthenticationV1TokenRequest(spec=spec)
    )
    cluster = yaml.safe_load(e2e_cluster.kubeconfig.read_text())["clusters"][0]["cluster"]
    kubeconfig = tmp_path / "account.kubeconfig"
    (tmp_path / "namespace").write_text(namespace, encoding="utf-8")
    ca_pem = base64.b64decode(cluster["certificate-authority-data"])
    user = f"system:serviceaccount:{namespace}:{ACCOUNT}"
    devcluster.write_kubeconfig(kubeconfig, cluster["server"], ca_pem, user, token.status.token)
    try:
        yield kubeconfig
    finally:
        await _delete_applied(api)
        await rbac.delete_cluster_role_binding(ACCOUNT)
        await rbac.delete_cluster_role(ACCOUNT)
        await core.delete_namespace(namespace)


def kgov_apply(platform: dict[str, Any], kubeconfig: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    path = kubeconfig.with_name("applied-platform.yaml")
    path.write_text(yaml.safe_dump(platform), encoding="utf-8")
    command = [sys.executable, "-m", "webhook.cli", "generate", str(path), "--apply", "--kubeconfig", str(kubeconfig)]
    namespace = kubeconfig.with_name("namespace").read_text(encoding="utf-8")
    command += ["--policy-namespace", namespace, *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


async def test_apply_with_the_hooks_rights_makes_every_object_kueue_takes(api: k8s.ApiClient, account: Path) -> None:
    done = kgov_apply(PLATFORM, account, "--namespaces")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[-1] == f"applied {len(APPLIED)} objects"
    applied = [line for line in lines if line.endswith(" applied")]
    assert [line.split()[0] for line in applied] == [
        "Namespace",
        "PriorityClass",
        "WorkloadPriorityClass",
        "Topology",
        "ResourceFlavor",
        "Cohort",
        "ClusterQueue",
        "LocalQueue",
    ]
    for group, version, plural, name, namespace in APPLIED:
        obj = await _object(api, group, version, plural, name, namespace)
        managers = {(entry["manager"], entry["operation"]) for entry in obj["metadata"]["managedFields"]}
        assert ("kgov", "Apply") in managers, (plural, name, managers)

    async def active() -> bool:
        queue = await _object(api, *KUEUE, "clusterqueues", TEAM, None)
        return any(
            c["type"] == "Active" and c["status"] == "True" for c in queue.get("status", {}).get("conditions", [])
        )

    assert await support.wait_for(active, f"ClusterQueue {TEAM} to become Active", 60)

    changed = copy.deepcopy(PLATFORM)
    changed["teams"][0]["quotas"][0]["resources"]["cpu"]["nominalQuota"] = 3
    again = kgov_apply(changed, account, "--namespaces")
    assert again.returncode == 0, again.stderr
    queue = await _object(api, *KUEUE, "clusterqueues", TEAM, None)
    assert queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"] == [{"name": "cpu", "nominalQuota": 3}]


async def test_a_right_taken_away_is_a_clear_error_naming_the_object(api: k8s.ApiClient, account: Path) -> None:
    rbac = k8s.RbacAuthorizationV1Api(api)
    role = await rbac.read_cluster_role(ACCOUNT)
    for rule in role.rules:
        rule.resources = [resource for resource in rule.resources if resource != "clusterqueues"]
    await rbac.replace_cluster_role(ACCOUNT, role)
    done = kgov_apply(PLATFORM, account, "--namespaces")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert (
        "kgov generate: apply /apis/kueue.x-k8s.io/v1beta2/clusterqueues/ga-team: HTTP 403 Forbidden: " in done.stderr
    )
    assert 'cannot patch resource "clusterqueues"' in done.stderr
    assert "Cohort ga-cohort applied" in done.stderr  # the objects before it stay applied
