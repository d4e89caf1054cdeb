"""Kueue is the oracle: our view of a workload against the Workload the real Kueue builds.

For every served workload kind, and every case of ``../shared/cases/kueue-examples`` whose kind is
served, the object goes through the live governor into ``hyperpod-ns-research``; then:

- Kueue's ``Workload.spec.podSets`` (names and counts) must equal our view of the stored object
  (:func:`webhook.core.kueue.view.kueue_view`);
- once admitted, each ``status.admission.podSetAssignments[]`` ``count`` and ``resourceUsage``
  must equal our podset's count × per-pod requests.

A Deployment's pods are admitted one by one (a Workload per pod): each pod's Workload is compared
with our view of the Deployment. Kinds that need a controller's defaulting webhook (LWS) or a
controller this cluster lacks are skipped with the reason. Mismatches are collected and printed
with their count; the test asserts 0.
"""

from __future__ import annotations

import asyncio
import copy
import random
import secrets
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import ResourceNotFoundError

from e2e import devcluster
from e2e.support import (
    BUNDLED_PLATFORM,
    REPO,
    Cleanup,
    Refused,
    WaitTimeout,
    create_with_warnings,
    delete_workload_object,
    get,
    is_true,
    list_objects,
    load_yaml_documents,
    read_metrics,
    strip_kueue,
    wait_for,
    workload_for,
)
from webhook.core.kueue.kinds import find_kind
from webhook.core.kueue.view import kueue_view
from webhook.core.objects.quantity import parse_quantity

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

RESEARCH = "hyperpod-ns-research"
CASES = REPO.parent / "shared" / "cases" / "kueue-examples"
GPU = "nvidia.com/gpu"
NEVER = "never be admitted"  # "can never be admitted", or "may never be admitted" (first-fit)
#: Kinds whose Workload Kueue builds only from pods, which need a controller this cluster may lack.
#: Kinds whose pods Kueue admits one by one (a Workload per pod, owned by the pod): compared pod by pod.
POD_BY_POD = {"Deployment": "Kueue admits a Deployment's pods one by one; they need the ReplicaSet controller"}


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def container(name: str, cpu: str, gpus: int, **extra: Any) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": "64Mi"}
    if gpus:
        requests[GPU] = str(gpus)
    resources: dict[str, Any] = {"requests": requests}
    if gpus:
        resources["limits"] = {GPU: str(gpus)}
    return {"name": name, "image": "registry.k8s.io/pause:3.10", "resources": resources, **extra}


def template(gpus: int, restart: str = "Never", sidecar: bool = False, init: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": restart, "containers": [container("main", "500m", gpus)]}
    inits = []
    if sidecar:
        inits.append(container("proxy", "250m", 0, restartPolicy="Always"))
    if init:
        inits.append(container("setup", "2", 0))
    if inits:
        spec["initContainers"] = inits
    return {"spec": spec}


def kubeflow(kind: str, api_version: str, replica_specs: str, roles: dict[str, int]) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": unique(kind.lower())},
        "spec": {
            replica_specs: {
                role: {
                    "replicas": count,
                    "restartPolicy": "OnFailure",
                    "template": template(2, "OnFailure", sidecar=True),
                }
                for role, count in roles.items()
            }
        },
    }


def samples() -> dict[str, dict[str, Any]]:
    """One object per served kind, each with more than the trivial shape (sidecars, init
    containers, counts that differ from a naive reading)."""
    ray_cluster = {
        "headGroupSpec": {"rayStartParams": {}, "template": template(0, "Always")},
        "workerGroupSpecs": [
            {
                "groupName": "GPU-workers",
                "replicas": 2,
                "minReplicas": 0,
                "maxReplicas": 4,
                "numOfHosts": 2,
                "rayStartParams": {},
                "template": template(1, "Always", sidecar=True),
            }
        ],
    }
    return {
        "Job": {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": unique("job")},
            "spec": {"parallelism": 3, "completions": 2, "template": template(4, sidecar=True, init=True)},
        },
        "JobSet": {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": unique("jobset")},
            "spec": {
                "replicatedJobs": [
                    {"name": "driver", "replicas": 1, "template": {"spec": {"template": template(0)}}},
                    {
                        "name": "workers",
                        "replicas": 2,
                        "template": {"spec": {"parallelism": 2, "completions": 2, "template": template(2, init=True)}},
                    },
                ]
            },
        },
        "PyTorchJob": kubeflow("PyTorchJob", "kubeflow.org/v1", "pytorchReplicaSpecs", {"Master": 1, "Worker": 3}),
        "TFJob": kubeflow("TFJob", "kubeflow.org/v1", "tfReplicaSpecs", {"PS": 1, "Worker": 2}),
        "XGBoostJob": kubeflow("XGBoostJob", "kubeflow.org/v1", "xgbReplicaSpecs", {"Master": 1, "Worker": 2}),
        "PaddleJob": kubeflow("PaddleJob", "kubeflow.org/v1", "paddleReplicaSpecs", {"Worker": 2}),
        "JAXJob": kubeflow("JAXJob", "kubeflow.org/v1", "jaxReplicaSpecs", {"Worker": 2}),
        "MPIJob": {
            **kubeflow("MPIJob", "kubeflow.org/v2beta1", "mpiReplicaSpecs", {"Launcher": 1, "Worker": 2}),
        },
        "RayCluster": {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": unique("raycluster")},
            "spec": copy.deepcopy(ray_cluster),
        },
        "RayJob": {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": unique("rayjob")},
            "spec": {"entrypoint": "python -c 1", "submissionMode": "K8sJobMode", "rayClusterSpec": ray_cluster},
        },
        "LeaderWorkerSet": {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": unique("lws")},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 3, "workerTemplate": template(1, "Always")}},
        },
        "StatefulSet": {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": unique("sts")},
            "spec": {
                "replicas": 3,
                "serviceName": "sts",
                "selector": {"matchLabels": {"app": "sts"}},
                "template": {"metadata": {"labels": {"app": "sts"}}, **template(1, "Always")},
            },
        },
        "Pod": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": unique("pod")},
            **template(2, sidecar=True, init=True),
        },
        "CronJob": {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": unique("cron")},
            "spec": {
                "schedule": "* * * * *",
                "concurrencyPolicy": "Forbid",
                "jobTemplate": {"spec": {"parallelism": 3, "completions": 5, "template": template(1, sidecar=True)}},
            },
        },
        "Deployment": {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": unique("deploy")},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}}, **template(1, "Always")},
            },
        },
    }


def our_podsets(obj: dict[str, Any]) -> list[tuple[str, int]]:
    row = find_kind(obj["apiVersion"], obj["kind"])
    assert row is not None, obj["kind"]
    return [(p.name, p.count) for p in kueue_view(obj, row).podsets]


def our_usage(obj: dict[str, Any]) -> dict[str, tuple[int, dict[str, Decimal]]]:
    row = find_kind(obj["apiVersion"], obj["kind"])
    assert row is not None
    out = {}
    for podset in kueue_view(obj, row).podsets:
        usage = {name: amount * podset.count for name, amount in (podset.requests or {}).items() if amount}
        out[podset.name] = (podset.count, usage)
    return out


def kueue_usage(workload: dict[str, Any]) -> dict[str, tuple[int, dict[str, Decimal]]]:
    out = {}
    for assignment in workload["status"]["admission"]["podSetAssignments"]:
        usage = {
            name: parse_quantity(value)
            for name, value in (assignment.get("resourceUsage") or {}).items()
            if parse_quantity(value)
        }
        out[assignment["name"]] = (int(assignment.get("count", 0)), usage)
    return out


async def pods_of(dynamic: DynamicClient, deployment: dict[str, Any], replicas: int) -> list[str]:
    """The uids of a Deployment's ``replicas`` pods (owned by its ReplicaSets), once all exist."""
    uid = deployment["metadata"]["uid"]

    async def pods() -> list[str] | None:
        sets = {
            item["metadata"]["uid"]
            for item in await list_objects(dynamic, "apps/v1", "ReplicaSet", RESEARCH)
            if any(owner.get("uid") == uid for owner in item["metadata"].get("ownerReferences") or [])
        }
        found = [
            pod["metadata"]["uid"]
            for pod in await list_objects(dynamic, "v1", "Pod", RESEARCH)
            if any(owner.get("uid") in sets for owner in pod["metadata"].get("ownerReferences") or [])
        ]
        return found if len(found) >= replicas else None

    return await wait_for(pods, f"{replicas} pods of Deployment {deployment['metadata']['name']}", 60)


async def first_job_of(dynamic: DynamicClient, cron_job: dict[str, Any]) -> str:
    """The uid of the first Job a CronJob creates (within a minute and a half: it runs every minute)."""
    uid = cron_job["metadata"]["uid"]

    async def job() -> str | None:
        for item in await list_objects(dynamic, "batch/v1", "Job", RESEARCH):
            if any(owner.get("uid") == uid for owner in item["metadata"].get("ownerReferences") or []):
                return str(item["metadata"]["uid"])
        return None

    return await wait_for(job, f"a Job of CronJob {cron_job['metadata']['name']}", 90)


async def kueue_verdict(dynamic: DynamicClient, namespace: str, uid: str, timeout: float = 30) -> tuple[bool, str]:
    """Kueue's first verdict on the Workload of ``uid``: ``(True, "")`` once it is admitted, or
    ``(False, message)`` once its scheduler has tried and left it pending (``QuotaReserved``
    False with a message)."""

    async def verdict() -> tuple[bool, str] | None:
        workload = await workload_for(dynamic, namespace, uid)
        if workload is None:
            return None
        if is_true(workload, "Admitted"):
            return True, ""
        for item in (workload.get("status") or {}).get("conditions") or []:
            if item.get("type") == "QuotaReserved" and item.get("status") == "False" and item.get("message"):
                return False, str(item["message"])
        return None

    return await wait_for(verdict, f"Kueue's verdict on the Workload of {uid}", timeout)


class Differential:
    """Mismatches between our view and Kueue's Workloads, and what was compared."""

    def __init__(self) -> None:
        self.mismatches: list[str] = []
        self.podsets_compared = 0
        self.assignments_compared = 0
        self.waiting: list[str] = []

    async def check(self, dynamic: DynamicClient, cleanup: Cleanup, body: dict[str, Any], label: str) -> None:
        """Create ``body`` in research through the live governor; compare Kueue's Workload with our view."""
        body["metadata"]["namespace"] = RESEARCH
        cleanup.add(body)
        try:
            created = await create_with_warnings(dynamic, body)
        except Refused as refused:
            message = str(refused.status.get("message"))
            if NEVER in message:
                self.waiting.append(f"{label}: refused as never admissible ({message})")
                return
            raise
        stored = created.obj
        if any(NEVER in warning for warning in created.warnings):
            self.waiting.append(f"{label}: warned as never admissible ({created.warnings})")
            return
        if body["kind"] in POD_BY_POD:
            try:
                owners = await pods_of(dynamic, stored, int(stored["spec"]["replicas"]))
            except WaitTimeout:
                self.waiting.append(f"{label}: no pods within 60s ({POD_BY_POD[body['kind']]})")
                return
        elif body["kind"] == "CronJob":  # Kueue manages each Job the CronJob creates
            try:
                owners = [await first_job_of(dynamic, stored)]
            except WaitTimeout:
                self.waiting.append(f"{label}: no Job within 90s (needs the CronJob controller)")
                return
        else:
            owners = [stored["metadata"]["uid"]]
        for uid in owners:  # one Workload, or one per pod (Kueue's pod integration)
            await self._compare(dynamic, stored, uid, label)

    async def _compare(self, dynamic: DynamicClient, stored: dict[str, Any], uid: str, label: str) -> None:
        try:
            workload = await wait_for(lambda: workload_for(dynamic, RESEARCH, uid), f"{label}'s Workload", 30)
        except WaitTimeout:
            self.waiting.append(f"{label}: no Workload within 30s (no controller for {stored['kind']})")
            return
        # Order aside: the API server returns map-keyed roles (Kubeflow) sorted by key.
        ours = sorted(our_podsets(stored))
        theirs = sorted((p["name"], int(p["count"])) for p in workload["spec"]["podSets"])
        self.podsets_compared += len(theirs)
        if ours != theirs:
            self.mismatches.append(f"{label}: podsets ours {ours} != Kueue's {theirs}")
            return
        name = workload["metadata"]["name"]

        async def admitted() -> dict[str, Any] | None:
            for item in [await workload_for(dynamic, RESEARCH, uid)]:
                if item and is_true(item, "Admitted"):
                    return item
            return None

        try:
            workload = await wait_for(admitted, f"Workload {name} admitted", 60)
        except WaitTimeout:
            self.mismatches.append(f"{label}: Workload {name} not admitted within 60s (we did not warn)")
            return
        mine, kueue = our_usage(stored), kueue_usage(workload)
        self.assignments_compared += len(kueue)
        if mine != kueue:
            self.mismatches.append(f"{label}: assignments ours {mine} != Kueue's {kueue}")

    def report(self, what: str) -> None:
        print(
            f"\n{what}: {self.podsets_compared} podsets and {self.assignments_compared} admitted podset "
            f"assignments compared, {len(self.mismatches)} mismatches"
        )
        for line in self.mismatches:
            print(f"  MISMATCH {line}")
        for line in self.waiting:
            print(f"  not compared: {line}")


async def served(dynamic: DynamicClient, api_version: str, kind: str) -> bool:
    try:
        await dynamic.resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError:
        return False
    return True


@pytest.mark.parametrize("kind", sorted(samples()))
async def test_every_served_kind_is_seen_as_kueue_sees_it(dynamic: DynamicClient, cleanup: Cleanup, kind: str) -> None:
    body = samples()[kind]
    if not await served(dynamic, body["apiVersion"], kind):
        pytest.skip(f"{body['apiVersion']} {kind} is not served by this API server")
    differential = Differential()
    try:
        await differential.check(dynamic, cleanup, body, kind)
    except Refused as refused:
        if kind == "LeaderWorkerSet":
            pytest.skip(f"needs the LWS controller's defaulting webhook: {refused.status.get('message')}")
        raise
    differential.report(f"kind {kind}")
    assert differential.mismatches == []
    if differential.waiting and not differential.podsets_compared:
        pytest.skip(differential.waiting[0])  # named in the report (-rs), never a silent pass
    assert differential.podsets_compared, "nothing compared"
    if kind in POD_BY_POD:  # every pod's Workload, admitted one by one
        assert differential.assignments_compared == samples()[kind]["spec"]["replicas"], differential.waiting


def _case_params() -> list[Any]:
    if not CASES.is_dir():
        return [pytest.param("", 0, marks=pytest.mark.skip(reason=f"no Kueue example cases at {CASES}"))]
    params = []
    for path in sorted(CASES.glob("**/*.yaml")):
        for index, document in enumerate(load_yaml_documents(path)):
            if find_kind(str(document.get("apiVersion", "")), str(document.get("kind", ""))) is not None:
                case = f"{path.relative_to(CASES)}#{index}"
                params.append(pytest.param(str(path.relative_to(CASES)), index, id=case))
    return params


@pytest.mark.parametrize(("name", "index"), _case_params())
async def test_every_example_case_is_seen_as_kueue_sees_it(
    dynamic: DynamicClient, cleanup: Cleanup, name: str, index: int
) -> None:
    document = load_yaml_documents(CASES / name)[index]
    api_version, kind = str(document["apiVersion"]), str(document["kind"])
    if not await served(dynamic, api_version, kind):
        pytest.skip(f"{api_version} {kind} is not served by this API server")
    body = strip_kueue(document)
    metadata = body["metadata"]
    if "generateName" in metadata and "name" not in metadata:
        metadata["name"] = unique(metadata.pop("generateName").rstrip("-"))
    else:
        metadata["name"] = unique(str(metadata.get("name", kind.lower()))[:40])
    differential = Differential()
    try:
        await differential.check(dynamic, cleanup, body, f"{name}#{index}")
    except Refused as refused:
        pytest.skip(f"refused here (a controller or webhook this cluster lacks): {refused.status.get('message')}")
    differential.report(f"case {name}#{index}")
    assert differential.mismatches == []
    if not differential.podsets_compared:
        pytest.skip("; ".join(differential.waiting))


# ------------------------------------------------------------------ seeded random workloads

SEED = 20261201
RANDOM_WORKLOADS = 200
ADMISSION_BOUND = 45.0  # seconds for Kueue to admit a workload alone in an empty cluster
TAINT = {"key": "kgov-e2e/maintenance", "value": "true", "effect": "NoSchedule"}
DATA_SCIENCE = "hyperpod-ns-data-science"


def random_template(rng: Any, nodes: list[dict[str, Any]], restart: str = "Never") -> dict[str, Any]:
    """A pod template with the issue's knobs: CPU and GPU requests, sidecars and init containers,
    tolerations of the e2e taint, and node selectors."""
    gpus = rng.choice([0, 1, 2, 4, 8, 8, 8, 9])
    cpu = rng.choice(["500m", "4", "32", "96", "200"])
    spec: dict[str, Any] = {"restartPolicy": restart, "containers": [container("main", cpu, gpus)]}
    inits = []
    if rng.random() < 0.3:
        inits.append(
            container("sidecar", rng.choice(["100m", "8", "100"]), rng.choice([0, 0, 1]), restartPolicy="Always")
        )
    if rng.random() < 0.3:
        inits.append(container("setup", rng.choice(["1", "150"]), 0))
    if inits:
        spec["initContainers"] = inits
    if rng.random() < 0.4:
        spec["tolerations"] = [{"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}]
    choice = rng.random()
    labels = rng.choice(nodes)["metadata"]["labels"]
    if choice < 0.15:
        spec["nodeSelector"] = {
            "topology.k8s.aws/network-node-layer-3": labels["topology.k8s.aws/network-node-layer-3"]
        }
    elif choice < 0.25:
        spec["nodeSelector"] = {
            "topology.k8s.aws/network-node-layer-2": labels["topology.k8s.aws/network-node-layer-2"]
        }
    elif choice < 0.3:
        spec["nodeSelector"] = {"kubernetes.io/hostname": labels["kubernetes.io/hostname"]}
    elif choice < 0.33:
        spec["nodeSelector"] = {"kgov-e2e/no-such-label": "x"}
    return {"spec": spec}


def random_workload(rng: Any, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    kind = rng.choice(["Job", "Job", "JobSet", "PyTorchJob"])

    def pods() -> int:
        return int(rng.choice([1, 1, 2, 2, 3, 4, 5, 8, 9, 16]))

    if kind == "Job":
        count = pods()
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": unique("rnd-job")},
            "spec": {"parallelism": count, "completions": count, "template": random_template(rng, nodes)},
        }
    if kind == "JobSet":
        jobs = []
        for index in range(rng.choice([1, 2])):
            count = pods()
            jobs.append(
                {
                    "name": f"rj{index}",
                    "replicas": rng.choice([1, 1, 2]),
                    "template": {
                        "spec": {"parallelism": count, "completions": count, "template": random_template(rng, nodes)}
                    },
                }
            )
        return {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": unique("rnd-jobset")},
            "spec": {"replicatedJobs": jobs},
        }
    roles = {"Master": 1, "Worker": pods()}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": unique("rnd-pytorch")},
        "spec": {
            "pytorchReplicaSpecs": {
                role: {
                    "replicas": count,
                    "restartPolicy": "OnFailure",
                    "template": random_template(rng, nodes, "OnFailure"),
                }
                for role, count in roles.items()
            }
        },
    }


async def set_taints(dynamic: DynamicClient, nodes: list[dict[str, Any]], tainted: set[str]) -> None:
    resource = await dynamic.resources.get(api_version="v1", kind="Node")
    for node in nodes:
        name = node["metadata"]["name"]
        taints = [TAINT] if name in tainted else []
        await dynamic.patch(
            resource, name=name, body={"spec": {"taints": taints or None}}, content_type="application/merge-patch+json"
        )


async def test_random_workloads_are_admitted_or_said_never_to_fit(dynamic: DynamicClient, cleanup: Cleanup) -> None:
    """≥200 seeded random workloads through the live governor into an empty cluster: each is
    admitted by Kueue within a bound, or refused/warned by us as never fitting. Silent strands: 0.
    A warned workload is still created: Kueue must leave it pending (false warnings: 0)."""
    await random_workloads_admitted_or_said_never_to_fit(dynamic, SEED, RANDOM_WORKLOADS)


async def random_workloads_admitted_or_said_never_to_fit(dynamic: DynamicClient, seed: int, total: int) -> None:
    """``total`` workloads of ``random.Random(seed)``, one at a time, through whatever governor
    runs (see :func:`test_random_workloads_are_admitted_or_said_never_to_fit`)."""
    rng = random.Random(seed)
    nodes = [n for n in await list_objects(dynamic, "v1", "Node") if "nvidia.com/gpu" in n["status"]["allocatable"]]
    counts = {"admitted": 0, "refused": 0, "warned": 0, "false warnings": 0, "strands": 0, "mismatches": 0}
    strands: list[str] = []
    unconfirmed: list[str] = []
    mismatches: list[str] = []
    try:
        for number in range(total):
            if number % 25 == 0:
                tainted = {n["metadata"]["name"] for n in nodes if rng.random() < 0.25}
                await set_taints(dynamic, nodes, tainted)
                await asyncio.sleep(1.0)  # the governor's and Kueue's node caches follow by watch
            body = random_workload(rng, nodes)
            namespace = DATA_SCIENCE if rng.random() < 0.2 else RESEARCH
            body["metadata"]["namespace"] = namespace
            tracker = Cleanup(dynamic)
            tracker.add(body)
            try:
                created = await create_with_warnings(dynamic, body)
            except Refused as refused:
                message = str(refused.status.get("message"))
                assert NEVER in message, f"workload {number} refused for another reason: {message}"
                counts["refused"] += 1
                continue
            stored = created.obj
            uid = stored["metadata"]["uid"]
            if any(NEVER in warning for warning in created.warnings):
                counts["warned"] += 1
                # A warning must be true: Kueue tries the workload and leaves it pending.
                try:
                    admitted_anyway, _ = await kueue_verdict(dynamic, namespace, uid)
                except WaitTimeout:
                    unconfirmed.append(f"#{number} {body['kind']} in {namespace}: {created.warnings}")
                else:
                    if admitted_anyway:
                        counts["false warnings"] += 1
                        strands.append(f"#{number} warned yet admitted: {created.warnings}")
                await tracker.run()
                continue

            async def admitted(namespace: str = namespace, uid: str = uid) -> dict[str, Any] | None:
                item = await workload_for(dynamic, namespace, uid)
                return item if item and is_true(item, "Admitted") else None

            try:
                workload = await wait_for(admitted, f"random workload {number} admitted", ADMISSION_BOUND)
            except WaitTimeout:
                counts["strands"] += 1
                strands.append(f"#{number} {body['kind']} in {namespace}: {our_usage(stored)}")
            else:
                counts["admitted"] += 1
                if our_usage(stored) != kueue_usage(workload):
                    counts["mismatches"] += 1
                    mismatches.append(f"#{number}: ours {our_usage(stored)} != Kueue's {kueue_usage(workload)}")
            await tracker.run()
    finally:
        await set_taints(dynamic, nodes, set())
    print(f"\nrandom workloads (seed {seed}): {total} created; {counts}")
    for line in strands + mismatches:
        print(f"  {line}")
    for line in unconfirmed:
        print(f"  warned, no verdict from Kueue within 30s: {line}")
    assert counts["strands"] == 0, strands
    assert counts["false warnings"] == 0, strands
    assert counts["mismatches"] == 0, mismatches
    assert sum(counts[k] for k in ("admitted", "refused", "warned")) == total


# ------------------------------------------------------------------ podsets Kueue can give no flavor


def one_pod_job(resources: dict[str, Any] | None) -> dict[str, Any]:
    main: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    if resources is not None:
        main["resources"] = resources
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": unique("noflavor"), "namespace": RESEARCH},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [main]}}},
    }


@pytest.mark.parametrize(
    ("resources", "kueue_says", "we_say"),
    [
        pytest.param(None, "no TAS flavor assigned", "request none of the resources", id="requests-nothing"),
        pytest.param(
            {"requests": {"cpu": "1", "example.com/widget": "1"}, "limits": {"example.com/widget": "1"}},
            "resource example.com/widget unavailable in ClusterQueue",
            "it requests example.com/widget, which team 'research''s ClusterQueue does not cover",
            id="uncovered-resource",
        ),
    ],
)
async def test_a_podset_kueue_gives_no_flavor_is_warned_and_kueue_agrees(
    dynamic: DynamicClient, cleanup: Cleanup, resources: dict[str, Any] | None, kueue_says: str, we_say: str
) -> None:
    """Research's ClusterQueue is topology-aware and covers cpu, memory, GPUs and EFA: a pod that
    requests none of them gets no flavor (so no TAS flavor), and one requesting a resource it does
    not cover gets none for that resource. We warn at creation; Kueue leaves each pending, for
    the reason we name."""
    body = cleanup.add(one_pod_job(resources))
    created = await create_with_warnings(dynamic, body)
    assert [w for w in created.warnings if we_say in w], created.warnings
    admitted, message = await kueue_verdict(dynamic, RESEARCH, created.obj["metadata"]["uid"])
    print(f"\nKueue: {message}")
    assert not admitted
    assert kueue_says in message, message


# ------------------------------------------------------------------ policy narrowed under a queued job


def narrowed_platform(path: Any) -> Any:
    """The bundled platform with research narrowed: only ``experimentation`` priorities, and a
    ``required`` hostname topology under ``enforce`` (what its queued job does not have)."""
    platform = yaml.safe_load(BUNDLED_PLATFORM.read_text())
    (research,) = [team for team in platform["teams"] if team["name"] == "research"]
    narrow = {"default": "experimentation", "allowed": ["experimentation"], "enforcement": "enforce"}
    research["policy"]["kueuePriority"] = dict(narrow)
    research["policy"]["podPriority"] = dict(narrow)
    research["policy"]["topology"] = {"mode": "required", "level": "kubernetes.io/hostname", "enforcement": "enforce"}
    path.write_text(yaml.safe_dump(platform))
    return path


async def test_kueue_starts_and_evicts_a_job_after_the_policy_was_narrowed(
    dynamic: DynamicClient, cleanup: Cleanup, governor: Any, e2e_cluster: Any, tmp_path: Any
) -> None:
    """A job queued under the wide policy is started by Kueue (UPDATE: unsuspend, node selector,
    scheduling gates) and evicted again (UPDATE: suspend) after the team's policy was narrowed so
    that its priority and placement would be refused on CREATE. Neither UPDATE is refused."""
    gpus = sum(
        int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)) for n in await list_objects(dynamic, "v1", "Node")
    )
    pods = gpus // 8

    def full_job(prefix: str) -> dict[str, Any]:
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": unique(prefix), "namespace": RESEARCH},
            "spec": {"parallelism": pods, "completions": pods, "template": template(8)},
        }

    blocker = cleanup.add(full_job("blocker"))
    created = await create_with_warnings(dynamic, blocker)
    blocker_uid = created.obj["metadata"]["uid"]

    async def blocker_admitted() -> bool:
        item = await workload_for(dynamic, RESEARCH, blocker_uid)
        return bool(item and is_true(item, "Admitted"))

    await wait_for(blocker_admitted, "the blocker admitted", 60)
    queued = cleanup.add(full_job("queued"))
    stored = (await create_with_warnings(dynamic, queued)).obj
    assert stored["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "training-priority"
    assert stored["spec"]["suspend"] is True
    uid = stored["metadata"]["uid"]
    await wait_for(lambda: workload_for(dynamic, RESEARCH, uid), "the queued job's Workload", 30)

    await asyncio.to_thread(governor, narrowed_platform(tmp_path / "narrow.yaml"))
    await delete_workload_object(dynamic, blocker)

    async def running() -> dict[str, Any] | None:
        job = await get(dynamic, "batch/v1", "Job", queued["metadata"]["name"], RESEARCH)
        return job if job and job["spec"].get("suspend") is False else None

    started = await wait_for(running, "Kueue to start the queued job under the narrowed policy", 90)
    assert started["spec"]["template"]["spec"]["priorityClassName"] == "training-priority"
    workload = await workload_for(dynamic, RESEARCH, uid)
    assert workload is not None
    resource = await dynamic.resources.get(api_version=workload["apiVersion"], kind="Workload")
    await dynamic.patch(
        resource,
        {"spec": {"active": False}},
        name=workload["metadata"]["name"],
        namespace=RESEARCH,
        content_type="application/merge-patch+json",
    )

    async def suspended() -> dict[str, Any] | None:
        job = await get(dynamic, "batch/v1", "Job", queued["metadata"]["name"], RESEARCH)
        return job if job and job["spec"].get("suspend") is True else None

    await wait_for(suspended, "Kueue to suspend the evicted job under the narrowed policy", 90)
    info = devcluster.load_info(Path(e2e_cluster.local.state_dir))
    assert info is not None and info.governor_metrics_url is not None
    metrics = read_metrics(info.governor_metrics_url)
    denials = sum(v for (name, _), v in metrics.items() if name == "kgov_admission_denials_total")
    print(f"\nnarrowed policy: Kueue started and evicted the job; governor denials: {int(denials)}")
    assert denials == 0
