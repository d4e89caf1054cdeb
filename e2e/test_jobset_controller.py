"""A governed JobSet runs to completion with the optional JobSet controller on (``devcluster``'s
``start_jobset_controller``): the shape the placement benchmark submits.

The JobSet (``benchmarks.placement.run.job_jobset``: a ``driver`` replicatedJob of one pod and a
``workers`` one of two, written with the fields JobSet's unregistered defaulting webhook would
set) goes into research's namespace without Kueue labels: the governor labels it with the team's
LocalQueue, Kueue suspends and admits it, the JobSet controller creates its two Jobs, the Job
controller their pods, the scheduler binds each pod to the host of its podset's topology
assignment, KWOK runs and completes them; the JobSet ends ``Completed`` and its Workload
``Finished``.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.dynamic import DynamicClient

from benchmarks.placement.jobs import job_jobset
from benchmarks.placement.metrics import pod_job_and_role, workload_job
from benchmarks.placement.stream import Job
from e2e import devcluster
from e2e.conftest import E2ECluster
from e2e.support import (
    KUEUE_API,
    create,
    decode_topology_assignment,
    delete,
    get,
    is_true,
    list_objects,
    wait_for,
    workload_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

RESEARCH = "hyperpod-ns-research"
RESEARCH_QUEUE = "hyperpod-ns-research-localqueue"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


@pytest.fixture(scope="module")
def jobset_controller(e2e_cluster: E2ECluster) -> Iterator[None]:
    """The JobSet controller for this module's tests, stopped after them (the rest of the suite
    runs without it)."""
    if e2e_cluster.local is None:
        pytest.skip("starts the JobSet controller next to the local control plane")
    root = Path(e2e_cluster.local.state_dir)
    devcluster.start_jobset_controller(root)
    yield
    devcluster.stop_process(devcluster.Paths(root), "jobset")


@pytest.mark.usefixtures("jobset_controller")
async def test_a_governed_jobset_runs_to_completion(dynamic: DynamicClient) -> None:
    job = Job(index=0, arrival=0.0, runtime=10, gpus_per_pod=4, workers=2)
    body = job_jobset(job)
    name = f"bench-shape-{secrets.token_hex(3)}"
    body["metadata"] = {"name": name, "namespace": RESEARCH}  # no queue label: the governor adds it
    created = await create(dynamic, body)
    try:
        assert created["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE
        assert created["spec"]["suspend"] is True  # by the governor or Kueue's webhook: created suspended

        async def finished() -> dict[str, Any] | None:
            workload = await workload_for(dynamic, RESEARCH, created["metadata"]["uid"])
            return workload if workload is not None and is_true(workload, "Finished") else None

        workload = await wait_for(finished, "the JobSet's Workload to be Finished", timeout=240, interval=2)
        # what the benchmark's metrics read: the Workload's job by its JobSet owner, each pod's
        # job and role by the JobSet's labels
        assert workload_job(workload) == name
        stored = await get(dynamic, JOBSET_API, "JobSet", name, RESEARCH)
        assert stored is not None
        assert is_true(stored, "Completed"), stored.get("status")
        assert stored["spec"]["suspend"] is False  # Kueue resumed it

        # The JobSet controller made one Job per replicatedJob; every pod Succeeded on a host
        # of its podset's topology assignment (podsets named after the replicatedJobs).
        jobs = [
            j
            for j in await list_objects(dynamic, "batch/v1", "Job", RESEARCH, f"{JOBSET_NAME_LABEL}={name}")
            if j["metadata"]["labels"].get(JOBSET_NAME_LABEL) == name
        ]
        assert sorted(j["metadata"]["labels"][REPLICATED_JOB_LABEL] for j in jobs) == ["driver", "workers"]
        assert all(is_true(j, "Complete") for j in jobs), [j.get("status") for j in jobs]
        pods = await list_objects(dynamic, "v1", "Pod", RESEARCH, f"{JOBSET_NAME_LABEL}={name}")
        assert Counter(p["metadata"]["labels"][REPLICATED_JOB_LABEL] for p in pods) == {"driver": 1, "workers": 2}
        assert all(p["status"]["phase"] == "Succeeded" for p in pods), [p["status"].get("phase") for p in pods]
        assert Counter(pod_job_and_role(p) for p in pods) == {(name, "driver"): 1, (name, "worker"): 2}
        assignments = workload["status"]["admission"]["podSetAssignments"]
        assert sorted(a["name"] for a in assignments) == ["driver", "workers"]
        for assignment in assignments:
            _, domains = decode_topology_assignment(assignment["topologyAssignment"])
            assigned = Counter({d.values[-1]: d.pods for d in domains})
            bound = Counter(
                p["spec"]["nodeName"]
                for p in pods
                if p["metadata"]["labels"][REPLICATED_JOB_LABEL] == assignment["name"]
            )
            assert bound == assigned, (assignment["name"], bound, assigned)
    finally:
        await delete(dynamic, created)
        workloads = await list_objects(dynamic, KUEUE_API, "Workload", RESEARCH)
        for leftover in workloads:
            if any(o.get("uid") == created["metadata"]["uid"] for o in leftover["metadata"].get("ownerReferences", [])):
                await delete(dynamic, leftover)
