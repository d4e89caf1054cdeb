"""MutatingAdmissionPolicies as the fail-safe (SPEC §8b, ``failSafe.mode: mutate``), against the
real API server (v1.36.1: ``admissionregistration.k8s.io/v1``, served by default) and Kueue.

* the policies ``kgov generate --admission-policies`` writes are accepted by server-side apply;
* no webhook registered: unlabelled Jobs created in every team namespace of the bundled platform
  get their team's queue and Kueue priority labels (and a fixed topology level) from the
  policies, none is refused, and Kueue admits every one;
* the webhook back: updates of those Jobs (a re-apply of the user's manifest, a new label) are
  not refused;
* webhook and policies together give the same objects as the webhook alone.

The policies take a few seconds to be in force once applied (the API server's informer): a
dry-run create in a namespace of no team, bound to research's policy by a probe binding, shows
when they are (and, deleted, when they are gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import devcluster, support
from e2e.conftest import E2ECluster
from e2e.helm_support import PLATFORM_VALUES, Helm

pytestmark = pytest.mark.e2e

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
MARKER = "kueue-governor.io/filled-by-policy"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
USER = "kgov-e2e-user"
POLICY_KINDS = (
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
#: What the bundled platform's teams get from the policies: (queue, Kueue priority, TAS annotation).
TEAMS = {
    "hyperpod-ns-research": ("hyperpod-ns-research-localqueue", "training-priority", None),
    "hyperpod-ns-inference": (
        "hyperpod-ns-inference-localqueue",
        "inference-priority",
        (PREFERRED, "topology.k8s.aws/network-node-layer-2"),
    ),
    "hyperpod-ns-data-science": (
        "hyperpod-ns-data-science-localqueue",
        "experimentation-priority",
        (REQUIRED, "topology.k8s.aws/network-node-layer-3"),
    ),
    "ds-sandbox": (
        "hyperpod-ns-data-science-localqueue",
        "experimentation-priority",
        (REQUIRED, "topology.k8s.aws/network-node-layer-3"),
    ),
}
JOBS_PER_NAMESPACE = 52  # 208 creations in all


def fail_safe_objects() -> list[dict[str, Any]]:
    """The chart's admission policies and bindings with ``failSafe.mode: mutate``, as ``helm
    template`` renders them for the bundled platform (labels left out: no release is installed)."""
    helm = Helm()
    try:
        objects = helm.template([PLATFORM_VALUES], {"failSafe.mode": '"mutate"'})
    finally:
        helm.close()
    chosen = [obj for obj in objects if obj["kind"] in POLICY_KINDS]
    for obj in chosen:
        obj["metadata"].pop("labels", None)
    return chosen


def probe_binding(namespace: str) -> dict[str, Any]:
    """research's policy bound to ``namespace`` too (a namespace of no team: the webhook leaves
    its objects as they come, so the policy's labels show whether it is in force)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": f"kgov-e2e-probe-{namespace}"[:63]},
        "spec": {
            "policyName": "kgov-governor-fill-research",
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]}
                    ]
                }
            },
        },
    }


def user_job(name: str, namespace: str) -> dict[str, Any]:
    """A Job as a user writes it: no queue, no priority, no topology; one small pause pod."""
    return support.job_manifest(name, namespace, 1, {"spec": support.pause_pod_spec(0, "50m")})


async def apply_all(dynamic: DynamicClient, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    applied = []
    for obj in objects:
        resource = await dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        result = await dynamic.server_side_apply(
            resource, obj, field_manager=support.FIELD_MANAGER, force_conflicts=True
        )
        applied.append(result.to_dict())
    return applied


async def delete_all(dynamic: DynamicClient, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        resource = await dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        with contextlib.suppress(Exception):  # already gone
            await dynamic.delete(resource, name=obj["metadata"]["name"])


async def probe_labels(dynamic: DynamicClient, namespace: str) -> dict[str, str]:
    job = user_job(f"probe-{secrets.token_hex(3)}", namespace)
    created = (await support.create_with_warnings(dynamic, job, dry_run=True)).obj
    return dict(created["metadata"].get("labels") or {})


async def wait_in_force(dynamic: DynamicClient, namespace: str, in_force: bool) -> None:
    async def probe() -> bool:
        return (QUEUE_LABEL in await probe_labels(dynamic, namespace)) == in_force

    state = "in force" if in_force else "gone"
    await support.wait_for(probe, f"the MutatingAdmissionPolicies to be {state}", timeout=60)


@pytest.fixture
async def policies(dynamic: DynamicClient, namespace: str) -> AsyncIterator[list[dict[str, Any]]]:
    """The chart's policies (mutate mode) and a probe binding, applied and in force; removed after."""
    objects = [*fail_safe_objects(), probe_binding(namespace)]
    await apply_all(dynamic, objects)
    try:
        await wait_in_force(dynamic, namespace, True)
        yield objects
    finally:
        await delete_all(dynamic, objects)


async def test_generated_policies_are_accepted(dynamic: DynamicClient, tmp_path: Path) -> None:
    generated = support.generate(support.BUNDLED_PLATFORM, tmp_path, "--admission-policies")
    objects = support.load_yaml_documents(tmp_path / "admission-policies.yaml")
    assert [o["kind"] for o in objects] == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"] * 3
    assert objects == [o for o in generated.objects if o["kind"].startswith("MutatingAdmissionPolicy")]
    try:
        applied = await apply_all(dynamic, objects)
        for sent, stored in zip(objects, applied, strict=True):
            assert stored["apiVersion"] == "admissionregistration.k8s.io/v1"
            if sent["kind"] == "MutatingAdmissionPolicy":
                assert stored["spec"]["mutations"] == sent["spec"]["mutations"]
                assert stored["spec"]["variables"] == sent["spec"]["variables"]
                assert stored["spec"]["matchConstraints"]["resourceRules"] == [
                    {**rule, "scope": "Namespaced"} for rule in sent["spec"]["matchConstraints"]["resourceRules"]
                ]
            else:
                assert stored["spec"]["policyName"] == sent["spec"]["policyName"]
    finally:
        await delete_all(dynamic, objects)


def _assert_filled(job: dict[str, Any], namespace: str) -> None:
    queue, priority, topology = TEAMS[namespace]
    labels = job["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == queue and labels[PRIORITY_LABEL] == priority, job["metadata"]
    annotations = job["spec"]["template"]["metadata"].get("annotations") or {}
    marker = "queue,priority" + (",topology" if topology else "")
    assert job["metadata"]["annotations"][MARKER] == marker
    if topology is not None:
        assert annotations == {topology[0]: topology[1]}
    else:
        assert not any(key.startswith("kueue.x-k8s.io/podset-") for key in annotations)


async def test_outage_jobs_are_filled_admitted_and_updatable(
    dynamic: DynamicClient,
    bundled_config: support.Generated,
    policies: list[dict[str, Any]],
    governor: Callable[[Path], str],
    cleanup: support.Cleanup,
) -> None:
    namespaces = bundled_config.team_namespaces
    assert sorted(namespaces) == sorted(TEAMS)
    resource = await dynamic.resources.get(api_version="batch/v1", kind="Job")
    run = secrets.token_hex(3)
    originals = {
        (namespace, f"outage-{run}-{index}"): user_job(f"outage-{run}-{index}", namespace)
        for namespace in namespaces
        for index in range(JOBS_PER_NAMESPACE)
    }
    limit = asyncio.Semaphore(8)

    async def create(body: dict[str, Any]) -> dict[str, Any]:
        async with limit:  # created by server-side apply, as `kubectl apply --server-side` does
            applied = await dynamic.server_side_apply(
                resource, copy.deepcopy(body), namespace=body["metadata"]["namespace"], field_manager=USER
            )
            return dict(applied.to_dict())

    created = await asyncio.gather(*(create(body) for body in originals.values()))
    for job in created:
        cleanup.add(job)
        _assert_filled(job, job["metadata"]["namespace"])
    assert len(created) >= 200

    async def all_admitted() -> bool:
        admitted = 0
        for namespace in namespaces:
            workloads = await support.list_objects(dynamic, support.KUEUE_API, "Workload", namespace)
            admitted += sum(
                1
                for w in workloads
                if w["metadata"]["name"].startswith(f"job-outage-{run}-") and support.is_true(w, "Admitted")
            )
        return admitted == len(created)

    await support.wait_for(all_admitted, f"Kueue to admit the {len(created)} Jobs", timeout=240, interval=2)

    # The webhook is back: updates of Jobs created during the outage are not refused.
    await asyncio.to_thread(governor, support.BUNDLED_PLATFORM)
    updated = 0
    for (namespace, name), body in list(originals.items())[:: JOBS_PER_NAMESPACE // 5]:
        async with limit:
            again = await dynamic.server_side_apply(
                resource, copy.deepcopy(body), namespace=namespace, field_manager=USER
            )
        labels = again.to_dict()["metadata"]["labels"]
        assert labels[QUEUE_LABEL] == TEAMS[namespace][0] and labels[PRIORITY_LABEL] == TEAMS[namespace][1]
        patched = await dynamic.patch(
            resource,
            {"metadata": {"labels": {"kgov-e2e/touched": "yes"}}},
            name=name,
            namespace=namespace,
            content_type="application/merge-patch+json",
        )
        assert patched.to_dict()["metadata"]["labels"][QUEUE_LABEL] == TEAMS[namespace][0]
        updated += 1
    assert updated >= 20


CASES: dict[str, dict[str, Any]] = {
    "job-research": user_job("same-research", "hyperpod-ns-research"),
    "job-inference": user_job("same-inference", "hyperpod-ns-inference"),
    "job-data-science": user_job("same-ds", "hyperpod-ns-data-science"),
    "job-sandbox-pod-priority": {
        **user_job("same-sandbox", "ds-sandbox"),
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {"spec": {**support.pause_pod_spec(0, "50m"), "priorityClassName": "experimentation-priority"}},
        },
    },
    "job-own-topology": {
        **user_job("same-topology", "hyperpod-ns-data-science"),
        "spec": {
            "template": {
                "metadata": {"annotations": {REQUIRED: "kubernetes.io/hostname"}},
                "spec": support.pause_pod_spec(0, "50m"),
            }
        },
    },
    "job-own-queue": support.job_manifest(
        "same-own-queue",
        "hyperpod-ns-inference",
        1,
        {"spec": support.pause_pod_spec(0, "50m")},
        labels={QUEUE_LABEL: "hyperpod-ns-inference-localqueue"},
    ),
}


def _jobset(name: str, namespace: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, **({"labels": labels} if labels else {})},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "parallelism": 2,
                            "completions": 2,
                            "template": {"spec": support.pause_pod_spec(0, "50m")},
                        }
                    },
                }
            ]
        },
    }


CASES["jobset-inference"] = _jobset("same-jobset", "hyperpod-ns-inference")
CASES["jobset-data-science-priority"] = _jobset(
    "same-jobset-p", "hyperpod-ns-data-science", {PRIORITY_LABEL: "experimentation-priority"}
)
_VOLATILE = ("uid", "creationTimestamp", "resourceVersion", "managedFields", "generation")


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without what differs from one create to the next (its uid, also in a Job's selector)."""
    uid = obj["metadata"].get("uid")
    out: dict[str, Any] = json.loads(json.dumps(obj).replace(uid, "UID")) if uid else copy.deepcopy(obj)
    for key in _VOLATILE:
        out["metadata"].pop(key, None)
    out.pop("status", None)
    return out


async def _dry_run_all(dynamic: DynamicClient) -> dict[str, dict[str, Any]]:
    return {
        case: _comparable((await support.create_with_warnings(dynamic, copy.deepcopy(body), dry_run=True)).obj)
        for case, body in CASES.items()
    }


def _reviews_with_a_removal(state: Path, run: str) -> set[str]:
    """Names of the objects whose CREATE review by ``kgov serve`` (its log, lines after ``run``)
    took out a value a policy filled in (a ``remove`` change)."""
    names = set()
    after = False
    for line in devcluster.Paths(state).log("governor").read_text().splitlines():
        after = after or run in line
        if after and line.startswith("{"):
            entry = json.loads(line)
            if entry.get("event") == "admission" and any(c.endswith(":remove") for c in entry.get("changes") or []):
                names.add(str(entry.get("name")))
    return names


async def test_webhook_and_policies_give_what_the_webhook_gives(
    dynamic: DynamicClient,
    bundled_config: support.Generated,
    namespace: str,
    governor: Callable[[Path], str],
    e2e_cluster: E2ECluster,
) -> None:
    url = await asyncio.to_thread(governor, support.BUNDLED_PLATFORM)
    assert url
    alone = await _dry_run_all(dynamic)
    assert all(MARKER not in (obj["metadata"].get("annotations") or {}) for obj in alone.values())
    assert alone["job-research"]["metadata"]["labels"][QUEUE_LABEL] == TEAMS["hyperpod-ns-research"][0]
    objects = [*fail_safe_objects(), probe_binding(namespace)]
    await apply_all(dynamic, objects)
    try:
        await wait_in_force(dynamic, namespace, True)
        both = await _dry_run_all(dynamic)
    finally:
        await delete_all(dynamic, objects)
    for case in CASES:
        assert both[case] == alone[case], yaml.safe_dump({"alone": alone[case], "both": both[case]})
    # The webhook did see the policies' values (and took out their marker) in each case.
    assert e2e_cluster.local is not None
    removed = _reviews_with_a_removal(Path(e2e_cluster.local.state_dir), namespace)
    assert {body["metadata"]["name"] for body in CASES.values()} <= removed
