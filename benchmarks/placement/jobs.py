"""What the placement benchmark submits: the policies (each team's topology rule), the platform
file of a run, and each job of the stream as a JobSet or as a Kueue pod group's Pods.

Job shapes (``--shape-kind``):

- ``jobset`` (default): one JobSet (``jobset.x-k8s.io/v1alpha2``) with a replicatedJob ``driver``
  (one Job of one pod, its container declaring a port) and, with workers, a replicatedJob
  ``workers`` (one Job of ``workers`` pods, parallelism = completions); Kueue makes one Workload of
  it with a podset per replicatedJob, and the governor sees the whole job in one admission
  request (what topology mode ``auto`` needs to place driver and workers together);
- ``podgroup``: a Kueue pod group (plain Pods labelled ``kueue.x-k8s.io/pod-group-name``,
  ``pod-group-total-count`` annotated), a driver pod whose container declares a port (so Kueue
  gives it a role of its own: a podset) and its workers. Each Pod reaches the governor alone, so
  a rule that needs the whole job cannot apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from e2e.manifests import INSTANCE_TYPE_LABEL, TOPOLOGY_LEVELS, TopologyShape
from e2e.support import GPU, PAUSE_IMAGE
from webhook.core.platform import fields

from .metrics import JOB_LABEL, ROLE_LABEL
from .stream import Job

NAMESPACE = "bench"
LOCAL_QUEUE = "bench-queue"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
COMPLETE_JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"
DRIVER_PORT = 29500  # torch.distributed's usual master port
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
SHAPE_DESCRIPTIONS = {
    "jobset": "one JobSet each (replicatedJobs driver and workers; the governor sees the whole job)",
    "podgroup": "one Kueue pod group of Pods each (driver and workers; the governor sees one Pod at a time)",
}
SHAPE_KINDS = tuple(SHAPE_DESCRIPTIONS)
RACK = TOPOLOGY_LEVELS[2]

#: (name, the team's topology rule) in the order they run; ``auto-patient`` is added by
#: :func:`policies` with its patience.
POLICIES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("implicit", {"mode": "none"}),
    ("required-L3", {"mode": "required", "level": RACK}),
    ("preferred-L3", {"mode": "preferred", "level": RACK}),
    ("auto", {"mode": "auto"}),
    ("auto-preferred", {"mode": "auto", "autoConstraint": "preferred"}),
)
PATIENT = "auto-patient"
#: Every policy name ``--policies`` takes, in the order they run.
POLICY_NAMES = (*(name for name, _ in POLICIES), PATIENT)
#: ``auto-patient``'s patience when not given: the product's default for a policy that names none.
DEFAULT_PATIENCE = fields.DEFAULT_PATIENCE
#: The ``kgov serve`` options every policy's governor runs with: topology widening on (the chart's
#: default with ``watchCluster``), its Lease in ``default``.
WIDENING_OPTIONS = ("--topology-widening", "default/kgov-topology-widening")


def patience_order(patience: str) -> float:
    """Sort key of a patience (the platform file's grammar: ``90s``, ``5m``, ``1h30m``, ``never``):
    its seconds, ``never`` last.

    Raises:
        ValueError: not a patience (the platform file's message).
    """
    seconds = fields.patience_seconds(patience)
    return float("inf") if seconds is None else float(seconds)


def policies(names: Sequence[str], patiences: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """(column name, topology rule) of each policy of ``names``, in :data:`POLICY_NAMES` order.

    ``auto-patient`` (``mode: auto`` with a ``patience``, the platform file's grammar) gives one
    policy per patience, shortest first, named ``auto-patient-<patience>`` (``auto-patient-30s``),
    so that one run measures a frontier; ``never`` is ``auto`` that never widens.

    Raises:
        ValueError: a name not in :data:`POLICY_NAMES`, no name, ``auto-patient`` without a
            patience, or a patience the platform file refuses.
    """
    unknown = sorted(set(names) - set(POLICY_NAMES))
    if unknown or not names:
        raise ValueError(f"unknown policies {unknown}; choose from {list(POLICY_NAMES)}")
    chosen = [(name, rule) for name, rule in POLICIES if name in names]
    if PATIENT in names:
        if not patiences:
            raise ValueError(f"{PATIENT} needs at least one patience")
        chosen += [
            (f"{PATIENT}-{p}", {"mode": "auto", "patience": p}) for p in sorted(set(patiences), key=patience_order)
        ]
    return chosen


def platform_file(shape: TopologyShape, topology_rule: dict[str, Any]) -> dict[str, Any]:
    """One team, ``bench``, in namespace ``bench``, with the whole cluster as quota (so only the
    nodes, never the quota, limit admission) and ``topology_rule`` as its topology policy."""
    nodes = shape.node_count
    return {
        "apiVersion": "kueue-governor.io/v1alpha1",
        "kind": "Platform",
        "topologies": [{"name": "network", "levels": list(TOPOLOGY_LEVELS)}],
        "flavors": [
            {
                "name": "gpu-node",
                "nodeLabels": {INSTANCE_TYPE_LABEL: shape.instance_type},
                "topologyName": "network",
                "nodeResources": {"cpu": 192, GPU: shape.gpus_per_node},
            }
        ],
        "teams": [
            {
                "name": NAMESPACE,
                "quotas": [
                    {
                        "flavor": "gpu-node",
                        "resources": {
                            "cpu": {"nominalQuota": nodes * 192},
                            GPU: {"nominalQuota": nodes * shape.gpus_per_node},
                        },
                    }
                ],
                "policy": {"topology": topology_rule},
            }
        ],
    }


def _container(job: Job, driver: bool) -> dict[str, Any]:
    """The one container of a pod of ``job``: ``job.gpus_per_pod`` GPUs and 4 CPUs per GPU; the
    driver's declares the port :data:`DRIVER_PORT`."""
    container: dict[str, Any] = {
        "name": "main",
        "image": PAUSE_IMAGE,
        "resources": {
            "requests": {"cpu": str(4 * job.gpus_per_pod), GPU: str(job.gpus_per_pod)},
            "limits": {GPU: str(job.gpus_per_pod)},
        },
    }
    if driver:
        container["ports"] = [{"containerPort": DRIVER_PORT, "name": "master"}]
    return container


def _completion(job: Job) -> dict[str, str]:
    """KWOK's pod-complete annotations: each pod Succeeded ``job.runtime`` seconds after it runs."""
    return {COMPLETE_DELAY: f"{job.runtime}s", COMPLETE_JITTER: f"{job.runtime}s"}


def job_jobset(job: Job) -> dict[str, Any]:
    """One job as a JobSet in the team's LocalQueue: replicatedJob ``driver`` (one Job of one
    pod) and, when ``job.workers``, ``workers`` (one Job of ``job.workers`` pods), each pod as
    :func:`_container` says, completed by KWOK ``job.runtime`` seconds after it runs.

    No JobSet webhook runs in the benchmark's cluster, so the fields JobSet's defaulting webhook
    (v0.12.0, ``pkg/webhooks/jobset_webhook.go``) would set are written here: success policy
    ``All``, startup policy ``AnyOrder``, Indexed completion, the network block (DNS hostnames off:
    no headless Service per job, nothing here resolves names). Kueue suspends it on creation.
    """

    def replicated_job(name: str, pods: int) -> dict[str, Any]:
        return {
            "name": name,
            "replicas": 1,
            "template": {
                "spec": {
                    "parallelism": pods,
                    "completions": pods,
                    "completionMode": "Indexed",
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"annotations": _completion(job)},
                        "spec": {
                            "restartPolicy": "Never",
                            "terminationGracePeriodSeconds": 1,
                            "containers": [_container(job, driver=name == "driver")],
                        },
                    },
                }
            },
        }

    replicated = [replicated_job("driver", 1)]
    if job.workers:
        replicated.append(replicated_job("workers", job.workers))
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {"name": job.name, "namespace": NAMESPACE, "labels": {QUEUE_LABEL: LOCAL_QUEUE}},
        "spec": {
            "replicatedJobs": replicated,
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "network": {"enableDNSHostnames": False, "publishNotReadyAddresses": True},
        },
    }


def job_pods(job: Job) -> list[dict[str, Any]]:
    """The pods of one job: a Kueue pod group of a driver (container port :data:`DRIVER_PORT`, a
    role of its own) and ``job.workers`` workers, each asking for ``job.gpus_per_pod`` GPUs and 4
    CPUs per GPU, completed by KWOK ``job.runtime`` seconds after they run."""
    pods = []
    for index in range(job.pods):
        role = "driver" if index == 0 else "worker"
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job.name}-{'driver' if index == 0 else f'worker-{index}'}",
                    "namespace": NAMESPACE,
                    "labels": {QUEUE_LABEL: LOCAL_QUEUE, GROUP_NAME: job.name, JOB_LABEL: job.name, ROLE_LABEL: role},
                    "annotations": {GROUP_TOTAL: str(job.pods), **_completion(job)},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [_container(job, driver=role == "driver")],
                },
            }
        )
    return pods
