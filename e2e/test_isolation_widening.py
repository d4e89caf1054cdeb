"""The governor's account on the real API server: what topology widening may do, and nothing else.

The chart's RBAC (``helm template`` of ``helm/kueue-governor`` with the CI platform values, topology
widening on by default) is applied to the cluster, and the API server's RBAC authorizer is asked
(``SubjectAccessReview``, as the service account with its groups) about each request widening
needs, and about the requests next to them it must not be able to make: any other verb on
Workloads and the workload kinds, any kind without a suspend field (Pods, Deployments), another
Lease, Secrets, ConfigMaps other than its policy.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from e2e.devcluster.client import apply
from e2e.helm_support import Helm
from e2e.support import delete

pytestmark = pytest.mark.e2e

NAMESPACE = "kgov-isolation-widening"
RELEASE = "kgov"
ACCOUNT = f"{RELEASE}-kueue-governor"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]
LEASE = f"{ACCOUNT}-topology-widening"
TEAM = "hyperpod-ns-research"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@pytest.fixture
async def chart_rbac(dynamic: DynamicClient) -> AsyncIterator[list[dict[str, Any]]]:
    """The chart's service account and RBAC, applied in :data:`NAMESPACE` (deleted afterwards)."""
    helm = Helm()
    try:
        rendered = helm.template(namespace=NAMESPACE, release=RELEASE)
    finally:
        helm.close()
    objects = [obj for obj in rendered if obj.get("kind") in RBAC_KINDS]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    await apply(dynamic, namespace)
    for obj in objects:
        await apply(dynamic, obj)
    try:
        yield objects
    finally:  # the namespace stays (a namespace being deleted cannot be made again at once)
        for obj in objects:
            await delete(dynamic, obj)


async def allowed(
    api: k8s.ApiClient, verb: str, group: str, resource: str, namespace: str = "", name: str = ""
) -> bool:
    """Whether the API server's authorizer lets the governor's account make this request."""
    attributes = k8s.V1ResourceAttributes(verb=verb, group=group, resource=resource, namespace=namespace, name=name)
    spec = k8s.V1SubjectAccessReviewSpec(user=USER, groups=GROUPS, resource_attributes=attributes)
    review = await k8s.AuthorizationV1Api(api).create_subject_access_review(k8s.V1SubjectAccessReview(spec=spec))
    return bool(review.status.allowed)


WIDENING_NEEDS = [
    ("list", "kueue.x-k8s.io", "workloads", "", ""),
    ("watch", "kueue.x-k8s.io", "workloads", "", ""),
    ("get", "kueue.x-k8s.io", "workloads", TEAM, "w"),
    ("patch", "kueue.x-k8s.io", "workloads", TEAM, "w"),
    ("get", "batch", "jobs", TEAM, "j"),
    ("patch", "batch", "jobs", TEAM, "j"),
    ("patch", "jobset.x-k8s.io", "jobsets", TEAM, "j"),
    ("patch", "kubeflow.org", "pytorchjobs", TEAM, "j"),
    ("create", "events.k8s.io", "events", TEAM, ""),
    ("get", "coordination.k8s.io", "leases", NAMESPACE, LEASE),
    ("update", "coordination.k8s.io", "leases", NAMESPACE, LEASE),
    ("patch", "coordination.k8s.io", "leases", NAMESPACE, LEASE),  # given up on shutdown
    ("create", "coordination.k8s.io", "leases", NAMESPACE, ""),
]

NOTHING_ELSE = [
    ("create", "kueue.x-k8s.io", "workloads", TEAM, ""),
    ("update", "kueue.x-k8s.io", "workloads", TEAM, "w"),
    ("delete", "kueue.x-k8s.io", "workloads", TEAM, "w"),
    ("patch", "kueue.x-k8s.io", "workloads/status", TEAM, "w"),
    ("patch", "kueue.x-k8s.io", "clusterqueues", "", "cq"),
    ("create", "batch", "jobs", TEAM, ""),
    ("update", "batch", "jobs", TEAM, "j"),
    ("delete", "batch", "jobs", TEAM, "j"),
    ("list", "batch", "jobs", TEAM, ""),
    ("patch", "batch", "jobs/status", TEAM, "j"),
    ("patch", "batch", "cronjobs", TEAM, "c"),
    ("patch", "", "pods", TEAM, "p"),
    ("patch", "apps", "deployments", TEAM, "d"),
    ("get", "", "secrets", TEAM, "s"),
    ("get", "", "secrets", NAMESPACE, "s"),
    ("get", "", "configmaps", TEAM, "c"),
    ("delete", "events.k8s.io", "events", TEAM, "e"),
    ("get", "coordination.k8s.io", "leases", NAMESPACE, "another"),
    ("update", "coordination.k8s.io", "leases", "kube-system", LEASE),
    ("patch", "coordination.k8s.io", "leases", NAMESPACE, "another"),
    ("delete", "coordination.k8s.io", "leases", NAMESPACE, LEASE),
    ("patch", "", "nodes", "", "n"),
    ("patch", "", "namespaces", "", TEAM),
]


async def test_the_governors_account_may_do_what_widening_needs_and_nothing_else(
    chart_rbac: list[dict[str, Any]], api: k8s.ApiClient
) -> None:
    assert any(
        obj["kind"] == "ClusterRole" and obj["metadata"]["name"].endswith("-topology-widening") for obj in chart_rbac
    )
    refused = [case for case in WIDENING_NEEDS if not await allowed(api, *case)]
    assert refused == [], "widening needs these, refused"
    granted = [case for case in NOTHING_ELSE if await allowed(api, *case)]
    assert granted == [], "the governor's account may do these, which widening does not need"
