"""Team isolation on the real cluster: every way a team could leave its queue or raise its priority.

The bundled platform (``kueue-config/platform.yaml``): research enforces its queue and both
priorities (allowed: training, experimentation); data-science only warns. For each attempt the
test asserts what actually happens on the real API server with Kueue v0.19.2: refused, and by whom
with which message; put back, with kubectl's ``Warning:``; or Kueue never runs it outside the
team's queue (its Workload, or none). The escapes this suite found are fixed in the webhook and
asserted here in their fixed form: a child a user makes with a forged controller
``ownerReference``, a Kubeflow ``runPolicy.schedulingPolicy.priorityClass``, and the
training-operator's ``kubeflow.org/v1`` MPIJob. Objects are named uniquely; most attempts are
dry-run creates, which go through every admission webhook and store nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import secrets
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from e2e import devcluster
from e2e.conftest import E2ECluster
from e2e.support import (
    Cleanup,
    Refused,
    WaitTimeout,
    condition,
    create_with_warnings,
    get,
    is_true,
    job_manifest,
    list_objects,
    pause_pod_spec,
    wait_for,
    workload_for,
)
from webhook.core.platform.controllers import DEFAULT_CONTROLLERS
from webhook.generate.chart import kinds_cel, kinds_document

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
RESEARCH = "hyperpod-ns-research"
RESEARCH_QUEUE = "hyperpod-ns-research-localqueue"
INFERENCE_QUEUE = "hyperpod-ns-inference-localqueue"
DATA_SCIENCE = "hyperpod-ns-data-science"
DATA_SCIENCE_QUEUE = "hyperpod-ns-data-science-localqueue"
DENIED = 'admission webhook "governor.kueue-governor.io" denied the request: kueue-governor: '
ANOTHER_QUEUE = (
    f"queue: LocalQueue '{INFERENCE_QUEUE}' (metadata.labels.kueue.x-k8s.io/queue-name) is not allowed for team "
    f"'research'; allowed: {RESEARCH_QUEUE}; unless a LocalQueue of that name exists in this namespace, Kueue "
    f"never admits the workload (it stays suspended); use the team's LocalQueue '{RESEARCH_QUEUE}'"
)
RESEARCH_ALLOWED = "allowed: training-priority, experimentation-priority"
ADMISSION_GATE = "kueue.x-k8s.io/admission"  # Kueue's pod webhook gates a Pod it queues


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def template(gpus: int = 1, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod template of one pause container (100m CPU, ``gpus`` GPUs) that runs for 10 minutes."""
    metadata: dict[str, Any] = {
        "annotations": {
            "pod-complete.stage.kwok.x-k8s.io/delay": "10m",
            "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "10m",
        }
    }
    if labels:
        metadata["labels"] = dict(labels)
    return {"metadata": metadata, "spec": pause_pod_spec(gpus, "100m", "64Mi")}


def job(namespace: str, labels: dict[str, str] | None = None, name: str | None = None) -> dict[str, Any]:
    """A 1-pod Job of 1 GPU; ``name`` None: ``generateName`` (no name at admission)."""
    body = job_manifest(name or "unused", namespace, 1, template(), labels)
    if name is None:
        del body["metadata"]["name"]
        body["metadata"]["generateName"] = "iso-"
    return body


def pod(namespace: str, name: str, gpus: int = 1, **metadata: Any) -> dict[str, Any]:
    spec = template(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, **spec["metadata"], **metadata},
        "spec": spec["spec"],
    }


async def refused(dynamic: DynamicClient, body: dict[str, Any]) -> dict[str, Any]:
    """The ``Status`` of the API server's refusal of a dry-run create of ``body`` (fails if created)."""
    with pytest.raises(Refused) as caught:
        await create_with_warnings(dynamic, body, dry_run=True)
    return caught.value.status


def run_kubectl(kubeconfig: Path, home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH")
    return subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "NO_PROXY": "127.0.0.1,localhost"},
    )


async def admitted_workload(dynamic: DynamicClient, namespace: str, uid: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        workload = await workload_for(dynamic, namespace, uid)
        return workload if workload is not None and is_true(workload, "Admitted") else None

    return await wait_for(probe, f"the Workload of {uid} to be admitted", timeout=60)


# --------------------------------------------------------------------------- the queue label on CREATE


@pytest.mark.parametrize("named", [True, False], ids=["name", "generateName"])
async def test_another_teams_queue_on_create_is_refused(dynamic: DynamicClient, named: bool) -> None:
    """With a name or with ``generateName`` (no name at admission): the same refusal."""
    body = job(RESEARCH, {QUEUE_LABEL: INFERENCE_QUEUE}, unique("other-queue") if named else None)
    status = await refused(dynamic, body)
    assert status["code"] == 403
    assert status["message"] == DENIED + ANOTHER_QUEUE


@pytest.mark.parametrize("named", [True, False], ids=["name", "generateName"])
async def test_an_empty_queue_label_is_replaced(dynamic: DynamicClient, named: bool) -> None:
    """Kueue reads ``""`` as no queue: the governor puts the team's LocalQueue there, and says so."""
    created = await create_with_warnings(
        dynamic, job(RESEARCH, {QUEUE_LABEL: ""}, unique("empty") if named else None), dry_run=True
    )
    assert created.obj["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE
    assert created.obj["spec"]["suspend"] is True
    assert created.warnings == [
        f"kueue-governor: queue: an empty {QUEUE_LABEL} (metadata.labels) means no queue to Kueue; set to "
        f"{RESEARCH_QUEUE!r}"
    ]


async def test_another_teams_queue_in_a_warn_team_is_never_admitted(dynamic: DynamicClient, cleanup: Cleanup) -> None:
    """data-science only warns; research's LocalQueue does not exist in its namespace (LocalQueues
    are namespaced), so Kueue never admits the Job: it stays suspended, outside research's queue."""
    created = await create_with_warnings(dynamic, job(DATA_SCIENCE, {QUEUE_LABEL: RESEARCH_QUEUE}))
    cleanup.add(created.obj)
    assert created.warnings and "is not allowed for team 'data-science'" in created.warnings[0]

    async def pending() -> dict[str, Any] | None:
        workload = await workload_for(dynamic, DATA_SCIENCE, created.obj["metadata"]["uid"])
        reserved = condition(workload, "QuotaReserved") if workload else None
        return workload if reserved is not None and reserved["status"] == "False" else None

    workload = await wait_for(pending, "Kueue to leave the Workload pending", timeout=60)
    assert condition(workload, "QuotaReserved")["message"] == f"LocalQueue {RESEARCH_QUEUE} doesn't exist"  # type: ignore[index]
    await asyncio.sleep(2)
    stored = await get(dynamic, "batch/v1", "Job", created.obj["metadata"]["name"], DATA_SCIENCE)
    assert stored is not None and stored["spec"]["suspend"] is True
    assert not is_true(workload, "Admitted")


async def test_a_local_queue_of_its_own_on_another_teams_cluster_queue_is_never_admitted(
    dynamic: DynamicClient, cleanup: Cleanup
) -> None:
    """A team that may create LocalQueues points one at research's ClusterQueue: the generated
    ClusterQueue selects research's namespaces only, so Kueue never admits a workload of
    data-science through it (and data-science is warned that the queue is not its own)."""
    name = unique("borrowed")
    local_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": DATA_SCIENCE},
        "spec": {"clusterQueue": "hyperpod-ns-research-clusterqueue"},
    }
    await create_with_warnings(dynamic, local_queue)
    resource = await dynamic.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="LocalQueue")
    try:
        created = await create_with_warnings(dynamic, job(DATA_SCIENCE, {QUEUE_LABEL: name}))
        cleanup.add(created.obj)
        assert created.warnings and f"LocalQueue '{name}'" in created.warnings[0]

        async def pending() -> dict[str, Any] | None:
            workload = await workload_for(dynamic, DATA_SCIENCE, created.obj["metadata"]["uid"])
            reserved = condition(workload, "QuotaReserved") if workload else None
            return reserved if reserved is not None and reserved["status"] == "False" else None

        reserved = await wait_for(pending, "Kueue to leave the Workload pending", timeout=60)
        assert "doesn't match ClusterQueue selector" in reserved["message"], reserved
        workload = await workload_for(dynamic, DATA_SCIENCE, created.obj["metadata"]["uid"])
        assert workload is not None and not is_true(workload, "Admitted")
    finally:
        await cleanup.run()
        with contextlib.suppress(NotFoundError):
            await dynamic.delete(resource, name=name, namespace=DATA_SCIENCE)


# --------------------------------------------------------------------------- the labels on UPDATE


async def test_the_queue_and_priority_labels_on_update(
    dynamic: DynamicClient, e2e_cluster: E2ECluster, cleanup: Cleanup, tmp_path: Path
) -> None:
    """A governed Job of research, then every way kubectl changes, removes or empties its labels:
    a new value is refused (label, patch, apply --server-side, replace), a removed or emptied one
    is put back with a Warning; Kueue's one Workload stays in research's queue at priority 500."""
    name = unique("relabel")
    body = cleanup.add(job(RESEARCH, name=name))
    created = (await create_with_warnings(dynamic, body)).obj
    workload = await admitted_workload(dynamic, RESEARCH, created["metadata"]["uid"])

    def kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return run_kubectl(e2e_cluster.kubeconfig, tmp_path, *args, stdin=stdin)

    async def stored() -> dict[str, Any]:
        found = await get(dynamic, "batch/v1", "Job", name, RESEARCH)
        assert found is not None
        return found

    def manifest(labels: dict[str, str] | None) -> str:
        """What a user re-applies: the original manifest, with ``labels``."""
        applied = copy.deepcopy(body)
        applied["metadata"].pop("labels", None)
        if labels is not None:
            applied["metadata"]["labels"] = labels
        return json.dumps(applied)

    async def replaced(labels: dict[str, str]) -> str:
        """``kubectl replace`` input: the stored Job with ``labels`` instead of its own (no
        resourceVersion: an unconditional update, which Kueue's own writes cannot make conflict)."""
        current = await stored()
        for key in ("resourceVersion", "managedFields", "uid", "creationTimestamp", "generation"):
            current["metadata"].pop(key, None)
        current.pop("status", None)
        current["metadata"]["labels"] = labels
        return json.dumps(current)

    kept_labels = {k: v for k, v in created["metadata"]["labels"].items() if not k.startswith("kueue.x-k8s.io/")}
    job_args = ("job", name, "-n", RESEARCH)
    other_labels = json.dumps({"metadata": {"labels": {QUEUE_LABEL: INFERENCE_QUEUE}}})
    raising: dict[str, tuple[tuple[str, ...], str | None]] = {
        "label --overwrite": (("label", *job_args, "--overwrite", f"{QUEUE_LABEL}={INFERENCE_QUEUE}"), None),
        "patch": (("patch", *job_args, "--type=merge", "-p", other_labels), None),
        "apply --server-side": (
            ("apply", "--server-side", "--force-conflicts", "-f", "-"),
            manifest({QUEUE_LABEL: INFERENCE_QUEUE}),
        ),
        "replace": (("replace", "-f", "-"), await replaced({**kept_labels, QUEUE_LABEL: INFERENCE_QUEUE})),
    }
    for how, (args, stdin) in raising.items():
        result = await asyncio.to_thread(kubectl, *args, stdin=stdin)
        assert result.returncode == 1, (how, result.stdout)
        assert DENIED + ANOTHER_QUEUE in result.stderr, (how, result.stderr)
    result = await asyncio.to_thread(
        kubectl, "label", "job", name, "-n", RESEARCH, "--overwrite", f"{PRIORITY_LABEL}=inference-priority"
    )
    assert result.returncode == 1
    assert (
        DENIED + "kueuePriority: WorkloadPriorityClass 'inference-priority' (metadata.labels.kueue.x-k8s.io/"
        f"priority-class) is not allowed for team 'research'; {RESEARCH_ALLOWED}"
    ) in result.stderr

    kept = (
        f"Warning: kueue-governor: queue: this update removes metadata.labels.{QUEUE_LABEL}; kept {RESEARCH_QUEUE!r} "
        "(an update that leaves out a governed value keeps the stored one)"
    )
    emptied = (
        f"Warning: kueue-governor: queue: an empty {QUEUE_LABEL} (metadata.labels.{QUEUE_LABEL}) means no queue to "
        f"Kueue; kept {RESEARCH_QUEUE!r}"
    )
    dropping: dict[str, tuple[tuple[str, ...], dict[str, str] | None, str]] = {
        "label key-": (("label", *job_args, f"{QUEUE_LABEL}-"), None, kept),
        "patch null": (
            ("patch", *job_args, "--type=merge", "-p", json.dumps({"metadata": {"labels": {QUEUE_LABEL: None}}})),
            None,
            kept,
        ),
        'label ""': (("label", *job_args, "--overwrite", f"{QUEUE_LABEL}="), None, emptied),
        "replace without": (("replace", "-f", "-"), kept_labels, kept),
    }
    for how, (args, replacing, warning) in dropping.items():
        stdin = await replaced(replacing) if replacing is not None else None
        result = await asyncio.to_thread(kubectl, *args, stdin=stdin)
        assert result.returncode == 0, (how, result.stderr)
        assert any(line.startswith(warning) for line in result.stderr.splitlines()), (how, result.stderr)
        labels = (await stored())["metadata"]["labels"]
        assert labels[QUEUE_LABEL] == RESEARCH_QUEUE, how
        assert labels[PRIORITY_LABEL] == "training-priority", how
    # Re-applying the original manifest (no Kueue labels) server-side: the governor's labels are
    # no field of kubectl's, so they stay without a word.
    result = await asyncio.to_thread(
        kubectl, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=manifest(None)
    )
    assert result.returncode == 0, result.stderr
    assert (await stored())["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE

    workloads = [
        w
        for w in await list_objects(dynamic, "kueue.x-k8s.io/v1beta2", "Workload", RESEARCH)
        if any(o.get("uid") == created["metadata"]["uid"] for o in w["metadata"].get("ownerReferences", []))
    ]
    assert [w["metadata"]["name"] for w in workloads] == [workload["metadata"]["name"]]
    assert workloads[0]["spec"]["queueName"] == RESEARCH_QUEUE
    assert workloads[0]["spec"]["priority"] == 500


async def test_the_labels_through_the_status_subresource(
    dynamic: DynamicClient, e2e_cluster: E2ECluster, cleanup: Cleanup, tmp_path: Path
) -> None:
    """Regression: the API server keeps metadata changes made through a Job's or a Pod's ``status``
    subresource, and Kueue follows the priority label there (a Workload went to priority 1000). The
    governor is now registered for the built-in kinds' ``status`` (only for writes that change labels
    or owners: the registration's matchCondition, evaluated by the API server) and checks them."""
    name = unique("status")
    created = (await create_with_warnings(dynamic, cleanup.add(job(RESEARCH, name=name)))).obj
    bare = (await create_with_warnings(dynamic, cleanup.add(pod(RESEARCH, unique("status-pod"))))).obj
    raised = json.dumps({"metadata": {"labels": {PRIORITY_LABEL: "inference-priority"}}})
    refusal = (
        DENIED + "kueuePriority: WorkloadPriorityClass 'inference-priority' (metadata.labels.kueue.x-k8s.io/"
        f"priority-class) is not allowed for team 'research'; {RESEARCH_ALLOWED}"
    )
    for kind, obj in (("job", created), ("pod", bare)):
        result = await asyncio.to_thread(
            run_kubectl,
            e2e_cluster.kubeconfig,
            tmp_path,
            *("patch", kind, obj["metadata"]["name"], "-n", RESEARCH, "--subresource=status", "--type=merge"),
            *("-p", raised),
        )
        assert result.returncode == 1, (kind, result.stdout)
        assert refusal in result.stderr, (kind, result.stderr)
    dropped = json.dumps({"metadata": {"labels": {QUEUE_LABEL: None}}})
    result = await asyncio.to_thread(
        run_kubectl,
        e2e_cluster.kubeconfig,
        tmp_path,
        *("patch", "job", name, "-n", RESEARCH, "--subresource=status", "--type=merge", "-p", dropped),
    )
    assert result.returncode == 0, result.stderr
    assert f"this update removes metadata.labels.{QUEUE_LABEL}; kept {RESEARCH_QUEUE!r}" in result.stderr
    workload = await admitted_workload(dynamic, RESEARCH, created["metadata"]["uid"])
    stored = await get(dynamic, "batch/v1", "Job", name, RESEARCH)
    assert stored is not None
    assert {k: v for k, v in stored["metadata"]["labels"].items() if k.startswith("kueue.x-k8s.io/")} == {
        QUEUE_LABEL: RESEARCH_QUEUE,
        PRIORITY_LABEL: "training-priority",
    }
    assert (workload["spec"]["queueName"], workload["spec"]["priority"]) == (RESEARCH_QUEUE, 500)


async def test_starting_what_kueue_has_not_admitted_is_undone_by_kueue(
    dynamic: DynamicClient, e2e_cluster: E2ECluster, cleanup: Cleanup, tmp_path: Path
) -> None:
    """The one way around the queue left to Kueue itself: a user unsuspends a Job, or removes a
    Pod's scheduling gates, before Kueue admitted it (here never: data-science names research's
    LocalQueue). The API server takes the update, and Kueue stops the workload again ("Not admitted
    by cluster queue"): the Job is suspended and its pod deleted, the Pod is deleted."""
    name = unique("unsuspend")
    created = (
        await create_with_warnings(dynamic, cleanup.add(job(DATA_SCIENCE, {QUEUE_LABEL: RESEARCH_QUEUE}, name)))
    ).obj
    bare = cleanup.add(pod(DATA_SCIENCE, unique("ungated"), labels={QUEUE_LABEL: RESEARCH_QUEUE}))
    gated = (await create_with_warnings(dynamic, bare)).obj
    assert created["spec"]["suspend"] is True
    assert ADMISSION_GATE in [gate["name"] for gate in gated["spec"]["schedulingGates"]]
    for args in (
        ("patch", "job", name, "--type=merge", "-p", json.dumps({"spec": {"suspend": False}})),
        (
            "patch",
            "pod",
            gated["metadata"]["name"],
            "--type=json",
            "-p",
            '[{"op":"remove","path":"/spec/schedulingGates"}]',
        ),
    ):
        result = await asyncio.to_thread(run_kubectl, e2e_cluster.kubeconfig, tmp_path, *args, "-n", DATA_SCIENCE)
        assert result.returncode == 0, result.stderr

    async def reasons() -> set[tuple[str, str, str | None]]:
        events = await list_objects(dynamic, "v1", "Event", DATA_SCIENCE)
        return {
            (e["involvedObject"]["kind"], e["reason"], e.get("message"))
            for e in events
            if e["involvedObject"]["name"] in (name, gated["metadata"]["name"])
        }

    async def stopped() -> bool:
        stored = await get(dynamic, "batch/v1", "Job", name, DATA_SCIENCE)
        pods = await list_objects(dynamic, "v1", "Pod", DATA_SCIENCE, label_selector=f"job-name={name}")
        ungated = await get(dynamic, "v1", "Pod", gated["metadata"]["name"], DATA_SCIENCE)
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return (
            stored is not None
            and stored["spec"]["suspend"] is True
            and not live
            and (ungated is None or ungated["metadata"].get("deletionTimestamp") is not None)
        )

    await wait_for(stopped, "Kueue to suspend the Job again and delete the ungated Pod", timeout=60)
    # Kueue records its Event after it has stopped the object, and the recorder posts Events
    # asynchronously: the deletion can be seen before the Event is stored.
    expected = {(kind, "Stopped", "Not admitted by cluster queue") for kind in ("Job", "Pod")}

    async def recorded() -> bool:
        return expected <= await reasons()

    try:
        await wait_for(recorded, "Kueue's Stopped Events for the Job and the Pod", timeout=30)
    except WaitTimeout:
        seen = await reasons()
        assert expected <= seen, sorted(map(str, seen))


# --------------------------------------------------------------------------- children


@pytest.fixture
async def owners(dynamic: DynamicClient, cleanup: Cleanup) -> AsyncIterator[dict[str, dict[str, Any]]]:
    """Real owners a user could name: a Job and a JobSet of research, a Job of data-science."""
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": unique("owner-js"), "namespace": RESEARCH},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": template(0)}}}]},
    }
    made = {
        "job": (await create_with_warnings(dynamic, cleanup.add(job(RESEARCH, name=unique("owner-job"))))).obj,
        "jobset": (await create_with_warnings(dynamic, cleanup.add(jobset))).obj,
        "other-namespace-job": (
            await create_with_warnings(dynamic, cleanup.add(job(DATA_SCIENCE, name=unique("owner-ds"))))
        ).obj,
    }
    yield made


def owner_reference(owner: dict[str, Any], **changes: str) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
        **changes,
    }


async def test_a_user_cannot_make_a_workload_a_child_of_a_kueue_managed_owner(
    dynamic: DynamicClient, owners: dict[str, dict[str, Any]]
) -> None:
    """Regression (see test_a_forged_owner_is_what_kueue_leaves_alone for what happened): a Pod or
    Job whose controller ownerReference names a kind Kueue manages is refused when a user, not a
    controller, creates it, whichever owner it names."""
    ghost = owner_reference(owners["job"], name="ghost", uid="11111111-2222-4333-8444-555555555555")
    forged_job = job(RESEARCH, name=unique("forged"))
    forged_job["metadata"]["ownerReferences"] = [owner_reference(owners["jobset"])]
    generated = pod(RESEARCH, "unused", 8, ownerReferences=[owner_reference(owners["job"])])
    del generated["metadata"]["name"]
    generated["metadata"]["generateName"] = "forged-"
    job_name, other_name = owners["job"]["metadata"]["name"], owners["other-namespace-job"]["metadata"]["name"]
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "Pod of the team's own Job": (
            pod(RESEARCH, unique("forged"), 8, ownerReferences=[owner_reference(owners["job"])]),
            f"Pod {{name!r}} names Job {job_name!r}",
        ),
        "Pod of a Job that does not exist": (
            pod(RESEARCH, unique("forged"), 8, ownerReferences=[ghost]),
            "Pod {name!r} names Job 'ghost'",
        ),
        "Pod of a Job of another namespace": (
            pod(RESEARCH, unique("forged"), 8, ownerReferences=[owner_reference(owners["other-namespace-job"])]),
            f"Pod {{name!r}} names Job {other_name!r}",
        ),
        "Job of the team's JobSet": (
            forged_job,
            f"Job {{name!r}} names JobSet {owners['jobset']['metadata']['name']!r}",
        ),
        "generateName Pod of the team's Job": (generated, f"this Pod names Job {job_name!r}"),
    }
    for case, (body, expected) in cases.items():
        status = await refused(dynamic, body)
        message = expected.format(name=body["metadata"].get("name"))
        assert status["code"] == 403, case
        assert status["message"].startswith(DENIED + "queue: "), (case, status["message"])
        assert message in status["message"], (case, status["message"])
        assert (
            "it would run outside the queue of team 'research'. Only a controller makes such objects, not "
            in (status["message"])
        ), case


@contextlib.asynccontextmanager
async def dynamic_as(e2e_cluster: E2ECluster, user: str) -> AsyncIterator[DynamicClient]:
    """A client whose requests the API server authenticates as ``user``: the test's admin
    impersonating it (``Impersonate-User``, no groups: RBAC grants only what is bound to ``user``)."""
    async with devcluster.api_client(e2e_cluster.kubeconfig) as api:
        api.set_default_header("Impersonate-User", user)
        async with devcluster.CheckedDynamicClient(api) as client:
            yield client


@contextlib.asynccontextmanager
async def pod_creator(
    dynamic: DynamicClient, e2e_cluster: E2ECluster, cleanup: Cleanup, namespace: str, account: str
) -> AsyncIterator[DynamicClient]:
    """A client acting as the service account ``account`` (``system:serviceaccount:NS:NAME``), which a
    Role and RoleBinding let create Pods in ``namespace``: a workflow engine's account. Yields once
    RBAC lets it create a Pod there (a dry run of one without an owner)."""
    account_namespace, account_name = account.removeprefix("system:serviceaccount:").split(":")
    name = unique("pod-creator")
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account_name, "namespace": account_namespace}],
    }
    for body in (role, binding):
        await create_with_warnings(dynamic, cleanup.add(body))
    async with dynamic_as(e2e_cluster, account) as client:

        async def rbac_in_force() -> bool:
            try:
                await create_with_warnings(client, pod(namespace, unique("own"), 0), dry_run=True)
            except Refused:
                return False
            return True

        await wait_for(rbac_in_force, f"the RoleBinding to let {account} create Pods in {namespace}", timeout=30)
        yield client


async def test_a_service_account_of_another_namespace_is_no_controller(
    dynamic: DynamicClient, e2e_cluster: E2ECluster, owners: dict[str, dict[str, Any]], cleanup: Cleanup
) -> None:
    """Regression: any service account of another namespace counted as a controller, so a workflow
    engine's account that RBAC lets create Pods in a team namespace could create a Pod naming the
    team's Job as its controller owner, which Kueue leaves to the Job's Workload: it ran outside the
    team's queue. Only the platform's ``controllers`` (the default list here) make such children; the
    JobSet controller (``jobset-system:jobset-controller-manager``, listed) still makes its Jobs."""
    engine = "system:serviceaccount:kgov-e2e-workflows:engine"
    async with pod_creator(dynamic, e2e_cluster, cleanup, RESEARCH, engine) as as_engine:
        forged = pod(RESEARCH, unique("forged"), 8, ownerReferences=[owner_reference(owners["job"])])
        status = await refused(as_engine, forged)
    assert status["code"] == 403
    assert status["message"] == (
        f"{DENIED}queue: Pod {forged['metadata']['name']!r} names Job {owners['job']['metadata']['name']!r} as its "
        "controller owner, and Kueue leaves such an object to its owner's Workload: it would run outside the queue "
        f"of team 'research'. Only a controller makes such objects, not {engine!r}: create the Job itself, or leave "
        f"out the ownerReference (the team's policy then applies). If {engine!r} is a controller that makes such "
        "objects, a platform admin lists it in the platform file's controllers"
    )
    assert engine not in DEFAULT_CONTROLLERS
    assert "system:serviceaccount:jobset-system:jobset-controller-manager" in DEFAULT_CONTROLLERS


async def test_a_forged_owner_is_what_kueue_leaves_alone(
    dynamic: DynamicClient, namespace: str, cleanup: Cleanup
) -> None:
    """The oracle, in a namespace of no team (no governor): what Kueue and the garbage collector do
    with a Pod a user creates with a forged controller owner, each Pod with a queue label of its own.

    * owner a real Job that names a queue: Kueue's pod webhook leaves the Pod to the Job (no
      admission gate), and it runs at once, while its owner waits, suspended, for a LocalQueue that
      does not exist; the Job controller releases it (the Pod does not match the Job's selector), so
      it keeps running as an orphan: the escape the governor now refuses;
    * the same Pod without the owner: gated by Kueue, never bound;
    * owner of that name with another uid: not the owner for Kueue (queued as a Pod of its own), and the
      garbage collector deletes it (its owner is absent);
    * owner that does not exist: Kueue's pod webhook refuses it.
    """
    owner = (await create_with_warnings(dynamic, cleanup.add(job(namespace, {QUEUE_LABEL: "nowhere"}, "owner")))).obj
    assert owner["spec"]["suspend"] is True  # Kueue's webhook: it names a queue

    async def seen_by_kueue() -> dict[str, Any] | None:
        return await workload_for(dynamic, namespace, owner["metadata"]["uid"])

    # Kueue's pod webhook reads the owner from Kueue's informer cache: a Pod created before the cache
    # has the Job is refused as "not found" (seen on a busy machine). Its Workload shows Kueue has it.
    await wait_for(seen_by_kueue, "Kueue to make the owner Job's Workload", timeout=60)
    labels = {QUEUE_LABEL: "nowhere"}
    forged = await create_with_warnings(
        dynamic, pod(namespace, "forged", labels=labels, ownerReferences=[owner_reference(owner)])
    )
    assert ADMISSION_GATE not in [g["name"] for g in forged.obj["spec"].get("schedulingGates", [])]
    plain = await create_with_warnings(dynamic, pod(namespace, "plain", labels=labels))
    assert ADMISSION_GATE in [g["name"] for g in plain.obj["spec"].get("schedulingGates", [])]
    mismatched = await create_with_warnings(
        dynamic,
        pod(
            namespace,
            "mismatched",
            labels=labels,
            ownerReferences=[owner_reference(owner, uid="11111111-2222-4333-8444-555555555555")],
        ),
    )
    assert ADMISSION_GATE in [g["name"] for g in mismatched.obj["spec"].get("schedulingGates", [])]

    async def running_orphan() -> dict[str, Any] | None:
        found = await get(dynamic, "v1", "Pod", "forged", namespace)
        if found is None or found["status"].get("phase") != "Running" or found["metadata"].get("ownerReferences"):
            return None
        return found

    orphan = await wait_for(running_orphan, "the forged Pod to run, released by the Job controller", timeout=60)
    assert orphan["spec"]["nodeName"]
    assert (await get(dynamic, "batch/v1", "Job", "owner", namespace))["spec"]["suspend"] is True  # type: ignore[index]
    assert await workload_for(dynamic, namespace, orphan["metadata"]["uid"]) is None

    async def collected() -> bool:
        return await get(dynamic, "v1", "Pod", "mismatched", namespace) is None

    await wait_for(collected, "the garbage collector to delete the Pod of an absent owner", timeout=60)
    still = await get(dynamic, "v1", "Pod", "plain", namespace)
    assert still is not None and not still["spec"].get("nodeName")

    status = await refused(
        dynamic, pod(namespace, "ghost-child", ownerReferences=[owner_reference(owner, name="ghost")])
    )
    assert status["message"] == 'admission webhook "mpod.kb.io" denied the request: Job.batch "ghost" not found'
    with contextlib.suppress(NotFoundError):
        await dynamic.delete(
            await dynamic.resources.get(api_version="v1", kind="Pod"), name="forged", namespace=namespace
        )


async def test_the_charts_cel_refuses_a_users_child_and_passes_a_controllers(
    dynamic: DynamicClient, namespace: str, e2e_cluster: E2ECluster, cleanup: Cleanup
) -> None:
    """The chart's matchConditions and its ValidatingAdmissionPolicy check (files/kinds.yaml), compiled
    and evaluated by the API server: a policy made of them, bound to this namespace, refuses a Pod
    that the test's user (not a controller) makes a child of a Job, and lets through the Pods the Job
    controller creates for that Job. The CEL is the chart's render for the default controllers and
    every service account of ``kgov-e2e-workflows`` (the ``NAMESPACE:*`` form): such an account may
    make the child, one of another namespace may not."""
    cel = kinds_cel([*DEFAULT_CONTROLLERS, "system:serviceaccount:kgov-e2e-workflows:*"])
    name = unique("kgov-isolation")
    rules = [dict(rule, scope="Namespaced") for rule in kinds_document()["rules"]]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": rules},
            "matchConditions": [
                {"name": "not-a-kueue-managed-child", "expression": cel["notAManagedChild"]},
                {"name": "not-left-alone", "expression": cel["notLeftAlone"]},
            ],
            "validations": [
                {"expression": cel["childOfAController"], "message": "a child made by a user"},
                {"expression": cel["managedVersion"], "message": "a version Kueue does not manage"},
                {
                    "expression": "request.operation != 'CREATE' || object.kind != 'Job'",
                    "message": "a Job reached the policy",
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }
    owner_body = job_manifest("owner", namespace, 1, template(0))
    owner_body["spec"]["completions"] = 4
    owner_body["spec"]["template"]["metadata"]["annotations"] = {
        "pod-complete.stage.kwok.x-k8s.io/delay": "1s",
        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "1s",
    }
    owner = (await create_with_warnings(dynamic, owner_body)).obj
    created: list[dict[str, Any]] = []
    try:
        for body in (policy, binding):
            created.append((await create_with_warnings(dynamic, body)).obj)

        async def binding_in_force() -> dict[str, Any] | None:
            try:
                await create_with_warnings(dynamic, job_manifest("probe", namespace, 1, template(0)), dry_run=True)
            except Refused as refusal:
                return refusal.status
            return None

        status = await wait_for(binding_in_force, "the ValidatingAdmissionPolicy to be in force", timeout=30)
        assert "a Job reached the policy" in status["message"]
        status = await refused(dynamic, pod(namespace, "forged", 0, ownerReferences=[owner_reference(owner)]))
        assert status["message"] == (
            f"pods \"forged\" is forbidden: ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: "
            "a child made by a user"
        )
        listed, other = "system:serviceaccount:kgov-e2e-workflows:engine", "system:serviceaccount:kgov-e2e-other:engine"
        async with pod_creator(dynamic, e2e_cluster, cleanup, namespace, listed) as as_listed:
            await create_with_warnings(
                as_listed, pod(namespace, "by-listed", 0, ownerReferences=[owner_reference(owner)]), dry_run=True
            )
        async with pod_creator(dynamic, e2e_cluster, cleanup, namespace, other) as as_other:
            status = await refused(as_other, pod(namespace, "by-other", 0, ownerReferences=[owner_reference(owner)]))
        assert status["message"].endswith("denied request: a child made by a user")

        async def all_completed() -> bool:
            found = await get(dynamic, "batch/v1", "Job", "owner", namespace)
            return found is not None and (found.get("status") or {}).get("succeeded") == 4

        # The 4 pods run one after another: those after the first are created while the policy is in force.
        await wait_for(all_completed, "the Job controller's 4 pods to be created and complete", timeout=120)
    finally:
        for body in reversed(created):
            resource = await dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
            with contextlib.suppress(NotFoundError):
                await dynamic.delete(resource, name=name)


# --------------------------------------------------------------------------- priorities


def _with_pod_priority(body: dict[str, Any], name: str) -> dict[str, Any]:
    body["spec"]["template"]["spec"]["priorityClassName"] = name
    return body


async def test_priorities_above_the_allowance_are_refused(dynamic: DynamicClient) -> None:
    """research may use training and experimentation: every other priority is refused, wherever it
    is written (another team's classes, the cluster's critical class, a Kubeflow scheduling policy,
    a pod template's labels)."""
    pytorchjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": unique("sched"), "namespace": RESEARCH},
        "spec": {
            "runPolicy": {"schedulingPolicy": {"priorityClass": "system-cluster-critical"}},
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template()}},
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": unique("dep"), "namespace": RESEARCH},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "x"}},
            "template": template(1, {"app": "x", PRIORITY_LABEL: "inference-priority"}),
        },
    }
    bare = pod(RESEARCH, unique("critical"))
    bare["spec"]["priorityClassName"] = "system-cluster-critical"
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "Kueue priority of another team": (
            job(RESEARCH, {PRIORITY_LABEL: "inference-priority"}, unique("wpc")),
            "kueuePriority: WorkloadPriorityClass 'inference-priority' (metadata.labels.kueue.x-k8s.io/priority-class)",
        ),
        "PriorityClass of another team": (
            _with_pod_priority(job(RESEARCH, name=unique("pc")), "inference-priority"),
            "podPriority: PriorityClass 'inference-priority' (spec.template.spec.priorityClassName)",
        ),
        "system-cluster-critical in a Job": (
            _with_pod_priority(job(RESEARCH, name=unique("pc")), "system-cluster-critical"),
            "podPriority: PriorityClass 'system-cluster-critical' (spec.template.spec.priorityClassName)",
        ),
        "system-cluster-critical in a bare Pod": (
            bare,
            "podPriority: PriorityClass 'system-cluster-critical' (spec.priorityClassName)",
        ),
        "Kubeflow runPolicy.schedulingPolicy.priorityClass": (
            pytorchjob,
            "podPriority: PriorityClass 'system-cluster-critical' (spec.runPolicy.schedulingPolicy.priorityClass)",
        ),
        "a Deployment's pod template label": (
            deployment,
            "kueuePriority: WorkloadPriorityClass 'inference-priority' "
            "(spec.template.metadata.labels.kueue.x-k8s.io/priority-class)",
        ),
    }
    for case, (body, expected) in cases.items():
        status = await refused(dynamic, body)
        assert status["code"] == 403, case
        assert status["message"].startswith(DENIED + expected), (case, status["message"])
        assert f"is not allowed for team 'research'; {RESEARCH_ALLOWED}" in status["message"], case

    # The integer itself: the API server's Priority admission refuses it before any webhook.
    integer = pod(RESEARCH, unique("integer"))
    integer["spec"]["priority"] = 1000000
    status = await refused(dynamic, integer)
    assert "the integer value of priority (1000000) must not be provided in pod spec" in status["message"]


async def test_a_warn_teams_priority_above_its_allowance_is_warned(dynamic: DynamicClient) -> None:
    """data-science's Kueue priority rule is `warn`: the platform admits it, with a Warning."""
    created = await create_with_warnings(
        dynamic, job(DATA_SCIENCE, {PRIORITY_LABEL: "inference-priority"}, unique("ds-wpc")), dry_run=True
    )
    assert created.obj["metadata"]["labels"][PRIORITY_LABEL] == "inference-priority"
    assert created.warnings == [
        "kueue-governor: kueuePriority: WorkloadPriorityClass 'inference-priority' (metadata.labels.kueue.x-k8s.io/"
        "priority-class) is not allowed for team 'data-science'; allowed: experimentation-priority, "
        "fine-tuning-priority"
    ]


# --------------------------------------------------------------------------- kind-specific fields


async def test_another_teams_queue_in_kind_specific_places(dynamic: DynamicClient) -> None:
    """Where Kueue reads a kind's queue label other than the object's own labels: the pod template
    of a Deployment and a StatefulSet (Kueue admits their pods), a CronJob's jobTemplate."""
    other = {QUEUE_LABEL: INFERENCE_QUEUE}
    selector = {"matchLabels": {"app": "x"}}
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "Deployment": (
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": unique("dep"), "namespace": RESEARCH},
                "spec": {"replicas": 1, "selector": selector, "template": template(1, {"app": "x", **other})},
            },
            "spec.template.metadata.labels.kueue.x-k8s.io/queue-name",
        ),
        "StatefulSet": (
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": unique("sts"), "namespace": RESEARCH},
                "spec": {
                    "replicas": 1,
                    "serviceName": "x",
                    "selector": selector,
                    "template": template(1, {"app": "x", **other}),
                },
            },
            "spec.template.metadata.labels.kueue.x-k8s.io/queue-name",
        ),
        "CronJob": (
            {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": {"name": unique("cron"), "namespace": RESEARCH},
                "spec": {
                    "schedule": "0 0 1 1 *",
                    "jobTemplate": {"metadata": {"labels": other}, "spec": {"template": template()}},
                },
            },
            "spec.jobTemplate.metadata.labels.kueue.x-k8s.io/queue-name",
        ),
    }
    for case, (body, where) in cases.items():
        status = await refused(dynamic, body)
        assert status["message"].startswith(f"{DENIED}queue: LocalQueue '{INFERENCE_QUEUE}' ({where})"), (
            case,
            status["message"],
        )


async def test_a_pod_template_label_changed_on_update_is_refused(
    dynamic: DynamicClient, e2e_cluster: E2ECluster, cleanup: Cleanup, tmp_path: Path
) -> None:
    """Regression: an UPDATE that changed a StatefulSet's or Deployment's pod-template queue or
    priority label was not checked (CREATE checks them). Nothing ran outside the allowance: the
    governor refuses each new Pod of a Deployment that carries them (seen only as the ReplicaSet's
    FailedCreate events), and Kueue v0.19.2 takes a StatefulSet's pod group priority from the
    StatefulSet's own label. ``kubectl patch`` of either is now refused, as a CREATE would be."""
    for kind in ("StatefulSet", "Deployment"):
        body = {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {"name": unique(kind.lower()), "namespace": RESEARCH},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "x"}},
                "template": template(1, {"app": "x"}),
                **({"serviceName": "x"} if kind == "StatefulSet" else {}),
            },
        }
        body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
        created = (await create_with_warnings(dynamic, cleanup.add(body))).obj
        assert created["spec"]["template"]["metadata"]["labels"][PRIORITY_LABEL] == "training-priority"
        raised = {"spec": {"template": {"metadata": {"labels": {PRIORITY_LABEL: "inference-priority"}}}}}
        result = await asyncio.to_thread(
            run_kubectl,
            e2e_cluster.kubeconfig,
            tmp_path,
            *(
                "patch",
                kind.lower(),
                body["metadata"]["name"],
                "-n",
                RESEARCH,
                "--type=merge",
                "-p",
                json.dumps(raised),
            ),
        )
        assert result.returncode == 1, (kind, result.stdout)
        assert (
            DENIED + "kueuePriority: WorkloadPriorityClass 'inference-priority' (spec.template.metadata.labels."
            f"kueue.x-k8s.io/priority-class) is not allowed for team 'research'; {RESEARCH_ALLOWED}"
        ) in result.stderr, (kind, result.stderr)


async def test_fields_kueue_does_not_read_for_the_queue_change_nothing(
    dynamic: DynamicClient, cleanup: Cleanup
) -> None:
    """A JobSet's replicatedJobs template labels and a PyTorchJob's runPolicy.schedulingPolicy.queue
    (a gang scheduler's queue) naming inference's queue and priority: Kueue reads the workload's
    own labels, which the governor gives research's queue, and admits each in research's
    ClusterQueue at research's priority."""
    other = {QUEUE_LABEL: INFERENCE_QUEUE, PRIORITY_LABEL: "inference-priority"}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": unique("js-labels"), "namespace": RESEARCH},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 1,
                    "template": {"metadata": {"labels": other}, "spec": {"template": template(1, other)}},
                }
            ]
        },
    }
    pytorchjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": unique("sched-queue"), "namespace": RESEARCH},
        "spec": {
            "runPolicy": {"schedulingPolicy": {"queue": INFERENCE_QUEUE}},
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template()}},
        },
    }
    for body in (jobset, pytorchjob):
        created = (await create_with_warnings(dynamic, cleanup.add(body))).obj
        assert created["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE
        workload = await admitted_workload(dynamic, RESEARCH, created["metadata"]["uid"])
        assert workload["spec"]["queueName"] == RESEARCH_QUEUE, body["kind"]
        assert workload["status"]["admission"]["clusterQueue"] == "hyperpod-ns-research-clusterqueue"
        assert workload["spec"]["priority"] == 500, body["kind"]


async def test_spark_applications_are_not_served_here(dynamic: DynamicClient) -> None:
    """The e2e cluster has no SparkApplication CRD (Kueue v0.19.2's Spark integration is off by
    default): its fields (driver/executor priorityClassName, labels) are covered by the unit tests."""
    with pytest.raises(ResourceNotFoundError):
        await dynamic.resources.get(api_version="sparkoperator.k8s.io/v1beta2", kind="SparkApplication")


# --------------------------------------------------------------------------- versions


async def test_another_served_version_of_a_kueue_kind_is_governed(dynamic: DynamicClient) -> None:
    """The RayCluster CRD also serves ray.io/v1alpha1: the API server converts it for the governor's
    and Kueue's webhooks (matchPolicy Equivalent), so it gets research's queue like ray.io/v1."""
    body = {
        "apiVersion": "ray.io/v1alpha1",
        "kind": "RayCluster",
        "metadata": {"name": unique("ray-old"), "namespace": RESEARCH},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": template(0)}},
    }
    created = (await create_with_warnings(dynamic, body, dry_run=True)).obj
    assert created["apiVersion"] == "ray.io/v1alpha1"
    assert created["metadata"]["labels"] == {QUEUE_LABEL: RESEARCH_QUEUE, PRIORITY_LABEL: "training-priority"}
    assert created["spec"]["suspend"] is True
    refused_body = copy.deepcopy(body)
    refused_body["metadata"]["labels"] = {QUEUE_LABEL: INFERENCE_QUEUE}
    assert (await refused(dynamic, refused_body))["message"] == DENIED + ANOTHER_QUEUE


MPIJOBS_CRD = "mpijobs.kubeflow.org"


def _training_operator_mpijob_crd() -> dict[str, Any]:
    """An ``mpijobs.kubeflow.org`` CRD serving ``kubeflow.org/v1`` only, as the Kubeflow
    training-operator's does (its schema left open)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": MPIJOBS_CRD},
        "spec": {
            "group": "kubeflow.org",
            "scope": "Namespaced",
            "names": {"kind": "MPIJob", "listKind": "MPIJobList", "plural": "mpijobs", "singular": "mpijob"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


async def _swap_crd(dynamic: DynamicClient, body: dict[str, Any]) -> None:
    """Delete the CRD of ``body``'s name, wait until it is gone, create ``body``, wait until Established."""
    resource = await dynamic.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    with contextlib.suppress(NotFoundError):
        await dynamic.delete(resource, name=body["metadata"]["name"])

    async def gone() -> bool:
        return await get(dynamic, "apiextensions.k8s.io/v1", "CustomResourceDefinition", MPIJOBS_CRD) is None

    await wait_for(gone, f"CRD {MPIJOBS_CRD} to be deleted", timeout=60)
    await dynamic.create(resource, body=body)

    async def established() -> bool:
        found = await get(dynamic, "apiextensions.k8s.io/v1", "CustomResourceDefinition", MPIJOBS_CRD)
        return found is not None and is_true(found, "Established")

    await wait_for(established, f"CRD {MPIJOBS_CRD} to be Established", timeout=60)
    await dynamic.resources.invalidate_cache()


async def test_the_training_operators_mpijob_cannot_run_outside_kueue(dynamic: DynamicClient, namespace: str) -> None:
    """kubeflow.org/v1 MPIJob is the Kubeflow training-operator's (its CRD serves v1 only), not the
    mpi-operator's v2beta1 that Kueue manages. This cluster serves v2beta1, so the API server does not
    know v1; with the training-operator's CRD installed instead (done here, then put back), Kueue
    makes no Workload for a v1 MPIJob, so the training-operator would run it at once: in a namespace
    of no team it is created and stays unqueued; in research's namespace the governor refuses it."""
    with pytest.raises(ResourceNotFoundError):
        await dynamic.resources.get(api_version="kubeflow.org/v1", kind="MPIJob")
    original = await get(dynamic, "apiextensions.k8s.io/v1", "CustomResourceDefinition", MPIJOBS_CRD)
    assert original is not None and [v["name"] for v in original["spec"]["versions"]] == ["v2beta1"]
    restore = {
        "apiVersion": original["apiVersion"],
        "kind": original["kind"],
        "metadata": {
            key: original["metadata"][key] for key in ("name", "labels", "annotations") if key in original["metadata"]
        },
        "spec": original["spec"],
    }
    mpijob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": {"name": "mpi"},
        "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": template()}}},
    }
    try:
        await _swap_crd(dynamic, _training_operator_mpijob_crd())
        outside = copy.deepcopy(mpijob)
        outside["metadata"]["namespace"] = namespace
        created = (await create_with_warnings(dynamic, outside)).obj
        await asyncio.sleep(3)
        assert QUEUE_LABEL not in (created["metadata"].get("labels") or {})
        assert await workload_for(dynamic, namespace, created["metadata"]["uid"]) is None
        inside = copy.deepcopy(mpijob)
        inside["metadata"]["namespace"] = RESEARCH
        inside["metadata"]["labels"] = {QUEUE_LABEL: RESEARCH_QUEUE}
        status = await refused(dynamic, inside)
        assert status["message"] == (
            DENIED
            + "queue: kubeflow.org/v1 MPIJob is not a version Kueue manages (kubeflow.org/v2beta1): the Kubeflow "
            "training-operator runs a kubeflow.org/v1 MPIJob by itself, so it would run at once, outside the team's "
            "queue and quota; create it as kubeflow.org/v2beta1"
        )
        resource = await dynamic.resources.get(api_version="kubeflow.org/v1", kind="MPIJob")
        await dynamic.delete(resource, name="mpi", namespace=namespace)
    finally:
        await _swap_crd(dynamic, restore)
