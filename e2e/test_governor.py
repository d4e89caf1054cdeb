"""The governor on a real API server, with Kueue deciding admission (bundled platform).

Users submit plain workloads with no Kueue labels; ``kgov-governor`` (``kueue-config/platform.yaml``)
gives them their team's queue, priority and topology, and Kueue admits them. Each test names its
objects uniquely in the fixed team namespaces and deletes them (with their Workloads) at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import secrets
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import ConflictError, NotFoundError

from e2e import manifests
from e2e.conftest import E2ECluster, GovernorInfo
from e2e.support import (
    FIELD_MANAGER,
    GPU,
    Cleanup,
    Generated,
    Refused,
    admission_count,
    condition,
    create_with_warnings,
    decode_topology_assignment,
    get,
    history,
    is_true,
    job_manifest,
    kgov_review,
    list_objects,
    narrowest_level_holding,
    pause_pod_spec,
    resource_version,
    wait_for,
    workload_for,
)
from webhook.core.objects.paths import lookup

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
TAS_ANNOTATIONS = (
    REQUIRED,
    PREFERRED,
    "kueue.x-k8s.io/podset-unconstrained-topology",
    "kueue.x-k8s.io/podset-slice-required-topology",
    "kueue.x-k8s.io/podset-slice-size",
)
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
INSTANCE_TYPE = {manifests.INSTANCE_TYPE_LABEL: "p5.48xlarge"}

RESEARCH = "hyperpod-ns-research"
RESEARCH_QUEUE = "hyperpod-ns-research-localqueue"
RESEARCH_CLUSTER_QUEUE = "hyperpod-ns-research-clusterqueue"
TRAINING = "training-priority"  # research's default, value 500
DATA_SCIENCE = "hyperpod-ns-data-science"
DENIED_PREFIX = 'admission webhook "governor.kueue-governor.io" denied the request: kueue-governor: '

JOB_SUSPEND = ("spec", "suspend")
KUBEFLOW_SUSPEND = ("spec", "runPolicy", "suspend")


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def pod_template(gpus: int, restart_policy: str = "Never") -> dict[str, Any]:
    """A pod template with no Kueue annotation, no priority and no affinity: what a user writes."""
    return {"spec": pause_pod_spec(gpus, "100m", "64Mi", restart_policy)}


def job(name: str, namespace: str, pods: int, gpus: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return job_manifest(name, namespace, pods, pod_template(gpus), labels)


def jobset(name: str, namespace: str, replicated: dict[str, int], gpus: int) -> dict[str, Any]:
    """A JobSet with one replica of each replicated job, ``replicated``: name → pods (parallelism)."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicatedJobs": [
                {
                    "name": job_name,
                    "replicas": 1,
                    "template": {"spec": {"parallelism": pods, "completions": pods, "template": pod_template(gpus)}},
                }
                for job_name, pods in replicated.items()
            ]
        },
    }


def pytorchjob(name: str, namespace: str, workers: int, gpus: int) -> dict[str, Any]:
    replica = {"restartPolicy": "OnFailure", "template": pod_template(gpus, "OnFailure")}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {**copy.deepcopy(replica), "replicas": 1},
                "Worker": {**copy.deepcopy(replica), "replicas": workers},
            }
        },
    }


@dataclass(frozen=True)
class PodSet:
    """One podset as Kueue names it, where its template is, and its shape."""

    name: str
    template: tuple[str | int, ...]
    pods: int
    gpus: int


def team_policy(generated: Generated, team: str) -> dict[str, Any]:
    """One team's compiled policy, from the generated ``kgov-policy`` ConfigMap."""
    (configmap,) = generated.of_kind("ConfigMap")
    policies = json.loads(configmap["data"]["policy.json"])
    (policy,) = [entry for entry in policies["teams"] if entry["team"] == team]
    return dict(policy)


def expected_placement(nodes: list[dict[str, Any]], topology: dict[str, Any], podset: PodSet) -> tuple[str, str]:
    """What ``topology: auto`` should write for a podset, read independently from the live nodes:
    ``required`` at the narrowest level (none broader than the policy's ``level``) one domain of
    which holds the whole podset, else ``preferred`` at that broadest level. (annotation, level)"""
    levels, cap = list(topology["levels"]), topology.get("level")
    assert topology["mode"] == "auto", topology
    level = narrowest_level_holding(
        nodes, levels, dict(topology["nodeLabels"]), podset.pods, GPU, podset.gpus, broadest=cap
    )
    if level is not None:
        return REQUIRED, level
    return PREFERRED, cap or levels[0]


async def check_governed_admitted_and_started(
    dynamic: DynamicClient,
    generated: Generated,
    created: dict[str, Any],
    suspend: tuple[str, ...],
    podsets: list[PodSet],
    since: str,
) -> dict[str, Any]:
    """The whole story of one workload created without Kueue labels in the research namespace.

    1. The create call returned it labelled with research's LocalQueue and default priority,
       suspended, and each pod template with exactly one TAS annotation: ``required`` at the
       narrowest level (up to the team's ``level``) one domain of which holds the podset, read
       here from the live nodes, else ``preferred`` at the team's level.
    2. Kueue admitted its Workload in research's ClusterQueue with a topology assignment; every
       pod of a ``required`` podset sits in one domain of its level.
    3. Kueue unsuspended it, and no version of it before that was unsuspended: the first
       unsuspended version already carries what Kueue injects when it starts an admitted
       workload (the flavor's nodeSelector, the TAS scheduling gate).

    Returns the Workload.
    """
    labels = created["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == RESEARCH_QUEUE
    assert labels[PRIORITY_LABEL] == TRAINING
    assert lookup(created, suspend) is True, f"{created['kind']} was created unsuspended"

    topology = team_policy(generated, "research")["topology"]
    nodes = await list_objects(dynamic, "v1", "Node")
    node_labels = {node["metadata"]["name"]: node["metadata"].get("labels", {}) for node in nodes}
    expected: dict[str, tuple[str, str]] = {}
    for podset in podsets:
        expected[podset.name] = expected_placement(nodes, topology, podset)
        template = lookup(created, podset.template)
        annotations = template["metadata"]["annotations"]
        tas = {key: value for key, value in annotations.items() if key in TAS_ANNOTATIONS}
        assert tas == dict([expected[podset.name]]), f"podset {podset.name} ({podset.pods} pods)"
        assert template["spec"]["priorityClassName"] == TRAINING
        terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert terms == [
            {"matchExpressions": [{"key": manifests.INSTANCE_TYPE_LABEL, "operator": "In", "values": ["p5.48xlarge"]}]}
        ]

    uid = created["metadata"]["uid"]

    async def admitted_workload() -> dict[str, Any] | None:
        workload = await workload_for(dynamic, RESEARCH, uid)
        return workload if workload is not None and is_true(workload, "Admitted") else None

    workload = await wait_for(admitted_workload, f"{created['kind']}'s Workload to be admitted", timeout=60)
    assert workload["spec"]["queueName"] == RESEARCH_QUEUE
    assert workload["spec"]["priorityClassRef"]["name"] == TRAINING
    assert workload["spec"]["priority"] == 500
    admission = workload["status"]["admission"]
    assert admission["clusterQueue"] == RESEARCH_CLUSTER_QUEUE
    requested = {podset["name"]: podset for podset in workload["spec"]["podSets"]}
    assigned = {assignment["name"]: assignment for assignment in admission["podSetAssignments"]}
    assert set(assigned) == set(expected), f"Kueue's podsets {sorted(assigned)} are not {sorted(expected)}"
    for podset in podsets:
        annotation, level = expected[podset.name]
        mode = "required" if annotation == REQUIRED else "preferred"
        assert requested[podset.name]["topologyRequest"][mode] == level
        assignment = assigned[podset.name]
        assert assignment["count"] == podset.pods
        assert assignment["resourceUsage"][GPU] == str(podset.pods * podset.gpus)
        assignment_levels, domains = decode_topology_assignment(assignment["topologyAssignment"])
        assert assignment_levels[-1] == "kubernetes.io/hostname"
        assert sum(domain.pods for domain in domains) == podset.pods
        hosts = [domain.values[-1] for domain in domains]
        assert set(hosts) <= set(node_labels), f"assigned hosts {hosts} are not nodes"
        if mode == "required":
            chosen = {node_labels[host][level] for host in hosts}
            assert len(chosen) == 1, f"podset {podset.name}: pods spread over {level} domains {chosen}"

    versions = await history(dynamic, created, since, until=lambda version: lookup(version, suspend) is False)
    assert [lookup(version, suspend) for version in versions[:-1]] == [True] * (len(versions) - 1)
    started = versions[-1]
    for podset in podsets:
        spec = lookup(started, podset.template)["spec"]
        assert spec["nodeSelector"] == INSTANCE_TYPE, spec.get("nodeSelector")
        assert TOPOLOGY_GATE in [gate["name"] for gate in spec.get("schedulingGates", [])]
    return workload


async def test_plain_job_is_governed_and_admitted_by_kueue_with_its_topology(
    dynamic: DynamicClient, bundled_config: Generated, cleanup: Cleanup
) -> None:
    """2 pods × 8 GPUs, no Kueue labels: labelled, suspended, placed in one domain, started."""
    since = await resource_version(dynamic, "batch/v1", "Job", RESEARCH)
    body = cleanup.add(job(unique("plain"), RESEARCH, pods=2, gpus=8))
    created = (await create_with_warnings(dynamic, body)).obj
    await check_governed_admitted_and_started(
        dynamic, bundled_config, created, JOB_SUSPEND, [PodSet("main", ("spec", "template"), 2, 8)], since
    )


async def test_jobset_podsets_each_get_their_own_level(
    dynamic: DynamicClient, bundled_config: Generated, cleanup: Cleanup
) -> None:
    """A 1-pod leader and a 2-pod worker group: each podset gets the level that holds it."""
    since = await resource_version(dynamic, "jobset.x-k8s.io/v1alpha2", "JobSet", RESEARCH)
    body = cleanup.add(jobset(unique("jobset"), RESEARCH, {"leader": 1, "workers": 2}, gpus=8))
    created = (await create_with_warnings(dynamic, body)).obj
    podsets = [
        PodSet("leader", ("spec", "replicatedJobs", 0, "template", "spec", "template"), 1, 8),
        PodSet("workers", ("spec", "replicatedJobs", 1, "template", "spec", "template"), 2, 8),
    ]
    await check_governed_admitted_and_started(dynamic, bundled_config, created, JOB_SUSPEND, podsets, since)


async def test_pytorchjob_master_and_workers_get_their_own_level(
    dynamic: DynamicClient, bundled_config: Generated, cleanup: Cleanup
) -> None:
    """Master (1 pod) and 3 workers: runPolicy.suspend set, each role placed at its own level."""
    since = await resource_version(dynamic, "kubeflow.org/v1", "PyTorchJob", RESEARCH)
    body = cleanup.add(pytorchjob(unique("pytorch"), RESEARCH, workers=3, gpus=8))
    created = (await create_with_warnings(dynamic, body)).obj
    replicas = ("spec", "pytorchReplicaSpecs")
    podsets = [
        PodSet("master", (*replicas, "Master", "template"), 1, 8),
        PodSet("worker", (*replicas, "Worker", "template"), 3, 8),
    ]
    workload = await check_governed_admitted_and_started(
        dynamic, bundled_config, created, KUBEFLOW_SUSPEND, podsets, since
    )
    # With 8 GPUs per node (the fake nodes; kind's patched ones) one host holds the master but
    # not the 3 workers: the two roles of one job get different placements.
    requests = {podset["name"]: podset["topologyRequest"] for podset in workload["spec"]["podSets"]}
    assert requests["master"]["required"] == "kubernetes.io/hostname", requests
    assert requests["worker"].get("required") != "kubernetes.io/hostname", requests


# --------------------------------------------------------------------------- webhook order


MUTATING = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")
LATE_CONFIGURATION = "zz-kgov-governor"


def _stored_configuration(configuration: dict[str, Any], name: str) -> dict[str, Any]:
    """A copy of a webhook configuration under another name, without server-set metadata."""
    return {
        "apiVersion": configuration["apiVersion"],
        "kind": configuration["kind"],
        "metadata": {"name": name, "labels": configuration["metadata"].get("labels") or {}},
        "webhooks": copy.deepcopy(configuration["webhooks"]),
    }


async def _webhook_calls_for_labelled_job(dynamic: DynamicClient, governor: GovernorInfo) -> int | None:
    """How many times one create of a Job that already names its queue calls the governor.

    Kueue's webhook suspends such a Job: when ours runs before Kueue's, that change makes the API
    server call ours again (``reinvocationPolicy: IfNeeded``), so 2; when ours runs after, 1.
    None when the governor's metrics cannot be read from here.
    """
    before = governor.metrics()
    if before is None:
        return None
    body = job(unique("order-probe"), RESEARCH, pods=1, gpus=1, labels={QUEUE_LABEL: RESEARCH_QUEUE})
    await create_with_warnings(dynamic, body, dry_run=True)
    after = governor.metrics()
    assert after is not None
    return admission_count(after, "Job", "CREATE") - admission_count(before, "Job", "CREATE")


@pytest.fixture
async def governor_after_kueue(dynamic: DynamicClient, bundled_governor: GovernorInfo) -> AsyncIterator[dict[str, Any]]:
    """The governor registered as ``zz-kgov-governor`` (same URL, caBundle, rules), which the API
    server calls after Kueue's ``kueue-mutating-webhook-configuration``; ``kgov-governor`` is put
    back afterwards. Yields the moved configuration."""
    resource = await dynamic.resources.get(api_version=MUTATING[0], kind=MUTATING[1])
    original = await get(dynamic, *MUTATING, manifests.GOVERNOR_WEBHOOK_CONFIGURATION)
    assert original is not None, "kgov-governor is not registered"
    late = _stored_configuration(original, LATE_CONFIGURATION)
    assert sorted([LATE_CONFIGURATION, "kueue-mutating-webhook-configuration"])[-1] == LATE_CONFIGURATION
    await dynamic.create(resource, body=late)
    try:
        await dynamic.delete(resource, name=manifests.GOVERNOR_WEBHOOK_CONFIGURATION)
        if bundled_governor.local:
            # The API server reloads webhook configurations asynchronously: wait until a probe
            # shows the governor is called once, i.e. after Kueue.
            async def moved() -> bool:
                return await _webhook_calls_for_labelled_job(dynamic, bundled_governor) == 1

            await wait_for(moved, "the API server to call the governor after Kueue", timeout=30, interval=0.5)
        else:
            await asyncio.sleep(3)
        yield late
    finally:
        restored_body = _stored_configuration(original, manifests.GOVERNOR_WEBHOOK_CONFIGURATION)
        await dynamic.server_side_apply(resource, restored_body, field_manager=FIELD_MANAGER, force_conflicts=True)
        with contextlib.suppress(NotFoundError):
            await dynamic.delete(resource, name=LATE_CONFIGURATION)
        if bundled_governor.local:

            async def restored() -> bool:
                return await _webhook_calls_for_labelled_job(dynamic, bundled_governor) == 2

            await wait_for(restored, "the API server to call the governor before Kueue again", timeout=30)
        else:
            await asyncio.sleep(3)


async def test_governor_is_called_before_kueue_by_default(
    dynamic: DynamicClient, bundled_governor: GovernorInfo
) -> None:
    """``kgov-governor`` sorts before ``kueue-…``: Kueue's suspend makes the API server re-call us."""
    if not bundled_governor.local:
        pytest.skip("reads the governor's /metrics, reachable for a local kgov serve only")
    assert await _webhook_calls_for_labelled_job(dynamic, bundled_governor) == 2


async def test_job_never_runs_before_admission_when_governor_runs_after_kueue(
    dynamic: DynamicClient, bundled_config: Generated, governor_after_kueue: dict[str, Any], cleanup: Cleanup
) -> None:
    """Kueue's webhook sees no queue label (ours comes later) and does not suspend; we do."""
    since = await resource_version(dynamic, "batch/v1", "Job", RESEARCH)
    body = cleanup.add(job(unique("late"), RESEARCH, pods=2, gpus=8))
    created = (await create_with_warnings(dynamic, body)).obj
    assert created["spec"]["suspend"] is True
    await check_governed_admitted_and_started(
        dynamic, bundled_config, created, JOB_SUSPEND, [PodSet("main", ("spec", "template"), 2, 8)], since
    )


# --------------------------------------------------------------------------- denials and warnings


# case → (labels, pod template priorityClassName, the governor's message)
DENIALS: dict[str, tuple[dict[str, str], str | None, str]] = {
    "another-teams-queue": (
        {QUEUE_LABEL: "hyperpod-ns-inference-localqueue"},
        None,
        "queue: LocalQueue 'hyperpod-ns-inference-localqueue' (metadata.labels.kueue.x-k8s.io/queue-name) "
        "is not allowed for team 'research'; allowed: hyperpod-ns-research-localqueue; unless a LocalQueue of that "
        "name exists in this namespace, Kueue never admits the workload (it stays suspended); use the team's "
        "LocalQueue 'hyperpod-ns-research-localqueue'",
    ),
    "kueue-priority-above-the-team": (
        {PRIORITY_LABEL: "inference-priority"},
        None,
        "kueuePriority: WorkloadPriorityClass 'inference-priority' (metadata.labels.kueue.x-k8s.io/priority-class) "
        "is not allowed for team 'research'; allowed: training-priority, experimentation-priority",
    ),
    "pod-priority-above-the-team": (
        {},
        "inference-priority",
        "podPriority: PriorityClass 'inference-priority' (spec.template.spec.priorityClassName) "
        "is not allowed for team 'research'; allowed: training-priority, experimentation-priority",
    ),
}


def _denied_job(case: str) -> dict[str, Any]:
    labels, priority_class, _ = DENIALS[case]
    body = job(unique("denied"), RESEARCH, pods=1, gpus=1, labels=labels)
    if priority_class is not None:
        body["spec"]["template"]["spec"]["priorityClassName"] = priority_class
    return body


@pytest.mark.parametrize("case", sorted(DENIALS))
async def test_research_may_not_use_what_is_not_its_own(dynamic: DynamicClient, case: str) -> None:
    body = _denied_job(case)
    with pytest.raises(Refused) as refused:
        await create_with_warnings(dynamic, body)
    status = refused.value.status
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    assert status["message"] == DENIED_PREFIX + DENIALS[case][2]
    assert await get(dynamic, "batch/v1", "Job", body["metadata"]["name"], RESEARCH) is None


WARNED_QUEUE = "hyperpod-ns-research-localqueue"
WARNING = (
    f"kueue-governor: queue: LocalQueue '{WARNED_QUEUE}' (metadata.labels.kueue.x-k8s.io/queue-name) "
    "is not allowed for team 'data-science'; allowed: hyperpod-ns-data-science-localqueue; unless a LocalQueue of "
    "that name exists in this namespace, Kueue never admits the workload (it stays suspended); use the team's "
    "LocalQueue 'hyperpod-ns-data-science-localqueue'"
)


async def test_data_science_is_warned_not_denied_for_another_queue(dynamic: DynamicClient, cleanup: Cleanup) -> None:
    """data-science's queue rule is ``warn``: created as asked, with the warning in the response."""
    body = cleanup.add(job(unique("warned"), DATA_SCIENCE, pods=1, gpus=1, labels={QUEUE_LABEL: WARNED_QUEUE}))
    created = await create_with_warnings(dynamic, body)
    assert created.warnings == [WARNING]
    labels = created.obj["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == WARNED_QUEUE  # the user's value stays
    assert labels[PRIORITY_LABEL] == "experimentation-priority"  # data-science's default
    assert created.obj["spec"]["suspend"] is True  # Kueue's webhook: the Job names a queue


async def test_a_queue_absent_from_the_namespace_is_warned_and_kueue_never_admits_it(
    dynamic: DynamicClient, cleanup: Cleanup
) -> None:
    """The warning's claim, checked against Kueue: a Job naming a LocalQueue its namespace does
    not have stays suspended, its Workload inadmissible."""
    body = cleanup.add(job(unique("typo"), DATA_SCIENCE, pods=1, gpus=1, labels={QUEUE_LABEL: "typo-queue"}))
    created = await create_with_warnings(dynamic, body)
    assert created.warnings == [WARNING.replace(repr(WARNED_QUEUE), "'typo-queue'")]

    async def pending() -> dict[str, Any] | None:
        workload = await workload_for(dynamic, DATA_SCIENCE, created.obj["metadata"]["uid"])
        reserved = condition(workload, "QuotaReserved") if workload else None
        return reserved if reserved is not None and reserved["status"] == "False" else None

    reserved = await wait_for(pending, "Kueue to leave the Workload pending", timeout=60)
    assert reserved["message"] == "LocalQueue typo-queue doesn't exist", reserved
    stored = await get(dynamic, "batch/v1", "Job", body["metadata"]["name"], DATA_SCIENCE)
    assert stored is not None and stored["spec"]["suspend"] is True


async def test_a_pod_priority_the_platform_makes_no_priority_class_for_is_warned(
    dynamic: DynamicClient, namespace: str
) -> None:
    """data-science may use 'fine-tuning-priority' as a Kueue priority, but the platform makes no
    PriorityClass of that name: the governor warns, and the API server indeed refuses such pods."""
    body = job(unique("ft"), DATA_SCIENCE, pods=1, gpus=1)
    body["spec"]["template"]["spec"]["priorityClassName"] = "fine-tuning-priority"
    created = await create_with_warnings(dynamic, body, dry_run=True)
    assert (
        "kueue-governor: podPriority: PriorityClass 'fine-tuning-priority' (spec.template.spec.priorityClassName) "
        "is not created by the platform: 'fine-tuning-priority' is a WorkloadPriorityClass only; unless a "
        "PriorityClass of that name exists in the cluster, the pods will not be created (PriorityClasses team "
        "'data-science' may use: experimentation-priority)"
    ) in created.warnings
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ft", "namespace": namespace},
        "spec": {**pause_pod_spec(0, "100m"), "priorityClassName": "fine-tuning-priority"},
    }
    with pytest.raises(Refused) as refused:
        await create_with_warnings(dynamic, pod, dry_run=True)
    assert "no PriorityClass with name fine-tuning-priority was found" in refused.value.status["message"]


def _kubectl(
    kubectl: str, e2e_cluster: E2ECluster, home: Path, body: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """``kubectl create -f - -o json`` with the cluster's kubeconfig (no proxy: all loopback)."""
    return subprocess.run(
        [kubectl, f"--kubeconfig={e2e_cluster.kubeconfig}", "create", "-f", "-", "-o", "json"],
        input=json.dumps(body),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "NO_PROXY": "127.0.0.1,localhost"},
    )


async def test_kubectl_shows_the_denial_and_the_warning(
    e2e_cluster: E2ECluster, cleanup: Cleanup, tmp_path: Path
) -> None:
    """What a data scientist sees: ``kubectl create`` fails with our message, or prints ``Warning:``."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH")
    denied = _denied_job("another-teams-queue")
    result = await asyncio.to_thread(_kubectl, kubectl, e2e_cluster, tmp_path, denied)
    assert result.returncode == 1, result
    assert f'Error from server (Forbidden): error when creating "STDIN": {DENIED_PREFIX}' in result.stderr
    assert DENIALS["another-teams-queue"][2] in result.stderr

    warned = cleanup.add(job(unique("kubectl"), DATA_SCIENCE, pods=1, gpus=1, labels={QUEUE_LABEL: WARNED_QUEUE}))
    result = await asyncio.to_thread(_kubectl, kubectl, e2e_cluster, tmp_path, warned)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [f"Warning: {WARNING}"]
    assert json.loads(result.stdout)["metadata"]["labels"][QUEUE_LABEL] == WARNED_QUEUE


async def test_kubectl_unlabel_of_the_governed_queue_warns_that_it_is_kept(
    dynamic: DynamicClient, e2e_cluster: E2ECluster, cleanup: Cleanup, tmp_path: Path
) -> None:
    """Regression: ``kubectl label job … kueue.x-k8s.io/queue-name-`` printed "unlabeled" with no
    warning while the governor put the label back; now kubectl prints a ``Warning:`` naming it."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH")
    body = cleanup.add(job(unique("unlabel"), RESEARCH, pods=1, gpus=1))
    await create_with_warnings(dynamic, body)
    name = body["metadata"]["name"]
    result = await asyncio.to_thread(
        subprocess.run,
        [kubectl, f"--kubeconfig={e2e_cluster.kubeconfig}", "label", "job", name, f"{QUEUE_LABEL}-", "-n", RESEARCH],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NO_PROXY": "127.0.0.1,localhost"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"Warning: kueue-governor: queue: this update removes metadata.labels.{QUEUE_LABEL}; kept "
        f"{RESEARCH_QUEUE!r} (an update that leaves out a governed value keeps the stored one)"
    ]
    stored = await get(dynamic, "batch/v1", "Job", name, RESEARCH)
    assert stored is not None and stored["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE


def _kubectl_args(kubeconfig: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH")
    return subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "NO_PROXY": "127.0.0.1,localhost"},
    )


async def test_a_resize_past_the_required_domain_is_warned(
    dynamic: DynamicClient, e2e_cluster: E2ECluster, cleanup: Cleanup, tmp_path: Path
) -> None:
    """A Job of 2 pods x 4 GPUs gets the host level from `auto` (8-GPU hosts); `kubectl patch`
    to 4 pods at once is accepted (never refused) with a Warning that it can never be admitted."""
    body = cleanup.add(job(unique("resize"), RESEARCH, pods=2, gpus=4))
    body["spec"]["completions"] = 8
    created = (await create_with_warnings(dynamic, body)).obj
    annotations = created["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kueue.x-k8s.io/podset-required-topology"] == "kubernetes.io/hostname"
    name = body["metadata"]["name"]
    patch = json.dumps({"spec": {"parallelism": 4}})
    result = await asyncio.to_thread(
        _kubectl_args,
        e2e_cluster.kubeconfig,
        tmp_path,
        *("patch", "job", name, "-n", RESEARCH, "--type=merge", "-p", patch),
    )
    assert result.returncode == 0, result.stderr
    [warning] = [line for line in result.stderr.splitlines() if line.startswith("Warning:")]
    assert "podset 'main' can never be admitted" in warning
    assert "one kubernetes.io/hostname domain" in warning
    assert "this update changes podset 'main' from 2 to 4 pods" in warning
    stored = await get(dynamic, "batch/v1", "Job", name, RESEARCH)
    assert stored is not None and stored["spec"]["parallelism"] == 4


async def test_a_suspended_jobs_priority_class_cannot_change(
    dynamic: DynamicClient, e2e_cluster: E2ECluster, namespace: str, cleanup: Cleanup, tmp_path: Path
) -> None:
    """What the UPDATE warning about a Kueue-priority relabel rests on: the API server refuses a
    new priorityClassName in the pod template of a Job, even suspended and never started."""
    body = cleanup.add(job(unique("pclass"), namespace, pods=1, gpus=0))
    body["spec"]["suspend"] = True
    await create_with_warnings(dynamic, body)
    op = [{"op": "add", "path": "/spec/template/spec/priorityClassName", "value": "system-cluster-critical"}]
    result = await asyncio.to_thread(
        _kubectl_args,
        e2e_cluster.kubeconfig,
        tmp_path,
        "patch",
        "job",
        body["metadata"]["name"],
        "-n",
        namespace,
        "--type=json",
        "-p",
        json.dumps(op),
    )
    assert result.returncode != 0
    assert "field is immutable" in result.stderr, result.stderr


# --------------------------------------------------------------------------- untouched namespaces


@pytest.fixture(params=["kube-system", "no-team"])
def untouched_namespace(request: pytest.FixtureRequest) -> str:
    """kube-system, and a fresh namespace no team lists (the ``namespace`` fixture's)."""
    if request.param == "kube-system":
        return "kube-system"
    return str(request.getfixturevalue("namespace"))


async def test_job_outside_team_namespaces_is_untouched(
    dynamic: DynamicClient, untouched_namespace: str, cleanup: Cleanup
) -> None:
    body = cleanup.add(job(unique("untouched"), untouched_namespace, pods=1, gpus=1))
    created = (await create_with_warnings(dynamic, body)).obj
    assert QUEUE_LABEL not in (created["metadata"].get("labels") or {})
    assert PRIORITY_LABEL not in (created["metadata"].get("labels") or {})
    assert created["spec"]["suspend"] is False
    template = created["spec"]["template"]
    assert not [key for key in (template["metadata"].get("annotations") or {}) if key in TAS_ANNOTATIONS]
    assert "affinity" not in template["spec"] and "priorityClassName" not in template["spec"]


# --------------------------------------------------------------------------- idempotence


def _review(governor: GovernorInfo, nodes: list[dict[str, Any]], request: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """``kgov review`` (the server's code path) of one AdmissionReview request, with the live nodes."""
    nodes_file = tmp / "nodes.json"
    nodes_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return kgov_review(["--platform", str(governor.platform), "--nodes", str(nodes_file)], review)


def _request(operation: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "batch", "version": "v1", "kind": "Job"},
        "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
        "operation": operation,
        "namespace": obj["metadata"]["namespace"],
        "name": obj["metadata"]["name"],
        "object": obj,
        "oldObject": old,
        "dryRun": True,
        "userInfo": {"username": "kgov-admin"},
    }


async def test_governed_job_is_a_fixed_point(
    dynamic: DynamicClient,
    e2e_cluster: E2ECluster,
    bundled_governor: GovernorInfo,
    cleanup: Cleanup,
    tmp_path: Path,
) -> None:
    """Re-applying what the server stored changes nothing.

    * the stored Job (our mutation, the API server's defaults, Kueue's changes at admission),
      reviewed as a CREATE and as an UPDATE by ``kgov review``: allowed, no patch;
    * a server-side dry-run UPDATE of it (a label added) goes through every webhook and comes
      back with the governed fields as stored, and (local governor) no UPDATE was patched;
    * (local governor) a create that Kueue's webhook changes after ours makes the API server call
      ours again on the result (``reinvocationPolicy: IfNeeded``): that second call patches nothing.
    """
    body = cleanup.add(job(unique("fixed-point"), RESEARCH, pods=2, gpus=8))
    await create_with_warnings(dynamic, body)

    async def started() -> dict[str, Any] | None:
        found = await get(dynamic, "batch/v1", "Job", body["metadata"]["name"], RESEARCH)
        return found if found is not None and found["spec"]["suspend"] is False else None

    stored = await wait_for(started, "Kueue to admit and start the Job", timeout=60)
    nodes = await list_objects(dynamic, "v1", "Node")

    def review(request: dict[str, Any]) -> dict[str, Any]:
        return _review(bundled_governor, nodes, request, tmp_path)

    as_create = await asyncio.to_thread(review, _request("CREATE", stored))
    assert as_create["allowed"] is True
    assert "patch" not in as_create and "warnings" not in as_create, as_create
    touched = copy.deepcopy(stored)
    touched["metadata"]["labels"]["e2e.kueue-governor.io/touched"] = "yes"
    as_update = await asyncio.to_thread(review, _request("UPDATE", touched, stored))
    assert as_update["allowed"] is True and "patch" not in as_update, as_update

    resource = await dynamic.resources.get(api_version="batch/v1", kind="Job")
    for _attempt in range(5):
        before = bundled_governor.metrics()
        try:
            replaced = (await dynamic.replace(resource, body=touched, namespace=RESEARCH, dry_run="All")).to_dict()
        except ConflictError:  # a controller (kind's job controller) wrote the Job meanwhile
            current = await get(dynamic, "batch/v1", "Job", body["metadata"]["name"], RESEARCH)
            assert current is not None
            stored, touched = current, copy.deepcopy(current)
            touched["metadata"]["labels"]["e2e.kueue-governor.io/touched"] = "yes"
            continue
        break
    else:
        pytest.fail("the Job kept changing under a dry-run UPDATE")
    after = bundled_governor.metrics()
    assert replaced["metadata"]["labels"]["e2e.kueue-governor.io/touched"] == "yes"
    assert replaced["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]  # dry run: not stored
    for path in (
        ("metadata", "labels", QUEUE_LABEL),
        ("metadata", "labels", PRIORITY_LABEL),
        ("spec", "suspend"),
        ("spec", "template", "metadata", "annotations"),
        ("spec", "template", "spec", "affinity"),
        ("spec", "template", "spec", "priorityClassName"),
        ("spec", "template", "spec", "nodeSelector"),
    ):
        assert lookup(replaced, path) == lookup(stored, path), path
    if before is None or after is None:
        return
    assert admission_count(after, "Job", "UPDATE", "patched") == admission_count(before, "Job", "UPDATE", "patched")
    assert admission_count(after, "Job", "UPDATE") > admission_count(before, "Job", "UPDATE")

    labelled = job(unique("reinvoked"), RESEARCH, pods=1, gpus=1, labels={QUEUE_LABEL: RESEARCH_QUEUE})
    before = bundled_governor.metrics()
    await create_with_warnings(dynamic, labelled, dry_run=True)
    after = bundled_governor.metrics()
    assert before is not None and after is not None
    calls = {
        result: admission_count(after, "Job", "CREATE", result) - admission_count(before, "Job", "CREATE", result)
        for result in ("patched", "allowed")
    }
    assert calls == {"patched": 1, "allowed": 1}, calls
