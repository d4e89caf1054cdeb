"""Workload kinds as data: where each kind keeps its labels, pod templates and suspend field.

One :class:`WorkloadKind` row per kind and API version Kueue can manage (SPEC §4; Kueue's job
framework adapters in ``pkg/controller/jobs/*``, v0.19.2). Nothing here reads an object: the rows
say *where* things are, :mod:`webhook.core.kueue.view` reads them the way Kueue's ``PodSets()`` does.
Adding a kind is adding a row.

Paths are tuples of keys. ``"*"`` stands for every item of a list or every value of a map (in
document order); the n-th ``"*"`` of a count path is bound to the same item as the n-th ``"*"`` of
its template path, so ``("spec", "replicatedJobs", "*", "replicas")`` reads the replicas of the
very replicated job whose template is being planned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.kueue.injected import ray_head_changes
from webhook.core.kueue.kind_model import (
    SPARK_ROLE,
    CoPlacement,
    Factor,
    Leader,
    PodLayout,
    PodSetRule,
    Requirement,
    WorkloadKind,
)
from webhook.core.kueue.trainer import TRAINER
from webhook.core.objects.paths import PathPattern

__all__ = [
    "KINDS",
    "CoPlacement",
    "Factor",
    "Leader",
    "PodLayout",
    "PodSetRule",
    "Requirement",
    "WorkloadKind",
    "find_kind",
    "is_managed_owner",
    "kind_of_group",
]


#: A Job runs min(parallelism, completions) pods at once; Kueue's ``Job.podsCount``.
def _job_pods(spec: PathPattern) -> Factor:
    return Factor((*spec, "parallelism"), cap=(*spec, "completions"))


def _kubeflow(
    kind: str,
    group: str,
    version: str,
    replica_specs: str,
    extra_counts: tuple[Factor, ...] = (),
    coplace: tuple[CoPlacement, ...] = (),
    unmanaged: tuple[tuple[str, str], ...] = (),
) -> WorkloadKind:
    base = ("spec", replica_specs, "*")
    return WorkloadKind(
        group=group,
        kind=kind,
        resource=kind.lower() + "s",
        versions=(version,),
        podsets=(
            PodSetRule(template=(*base, "template"), count=(Factor((*base, "replicas")),), name="role", keyed=True),
        ),
        suspend=("spec", "runPolicy", "suspend"),
        counts=(Factor(("spec", "runPolicy", "schedulingPolicy", "minAvailable")), *extra_counts),
        coplace=coplace,
        # Kueue's priority when no priority-class label is set (KubeflowJob/MPIJob.PriorityClass).
        priority_classes=(("spec", "runPolicy", "schedulingPolicy", "priorityClass"),),
        unmanaged_versions=unmanaged,
    )


def _no_autoscaling(cluster: PathPattern) -> Requirement:
    return Requirement(
        (*cluster, "enableInTreeAutoscaling"),
        True,
        forbid=True,
        unless=(("metadata", "annotations", "kueue.x-k8s.io/elastic-job"), "true"),
        why="a kueue managed job should only use autoscaling when workload slicing is enabled "
        '(annotation kueue.x-k8s.io/elastic-job: "true" and Kueue\'s ElasticJobsViaWorkloadSlices)',
    )


def _ray_podsets(cluster: PathPattern, job: bool) -> tuple[PodSetRule, ...]:
    """Kueue's ``raycluster.BuildPodSets``: ``head`` (1 pod, with the containers KubeRay injects,
    :func:`~webhook.core.kueue.injected.ray_head_changes`) and one podset per worker group (``replicas``
    × ``numOfHosts`` pods; a ``numOfHosts`` below 2 counts 1)."""
    groups = (*cluster, "workerGroupSpecs", "*")
    head = (*cluster, "headGroupSpec", "template")
    return (
        PodSetRule(template=head, name="head", changes=ray_head_changes(cluster, sidecar_submitter=job)),
        PodSetRule(
            template=(*groups, "template"),
            count=(Factor((*groups, "replicas")), Factor((*groups, "numOfHosts"), one_below=2)),
            name="groupName",
        ),
    )


def _ray(
    kind: str,
    cluster: PathPattern,
    suspend: PathPattern | None,
    skip_if: tuple[PathPattern, ...] = (),
    requires: tuple[Requirement, ...] = (),
    extra: tuple[PodSetRule, ...] = (),
) -> WorkloadKind:
    return WorkloadKind(
        group="ray.io",
        kind=kind,
        resource=kind.lower() + "s",
        versions=("v1",),
        podsets=(*_ray_podsets(cluster, kind == "RayJob"), *extra),
        suspend=suspend,
        counts=tuple(Factor((*cluster, "workerGroupSpecs", "*", field)) for field in ("minReplicas", "maxReplicas")),
        skip_if=skip_if,
        requires=requires,
        # The head with the one worker group (a RayJob's submitter stays on its own).
        coplace=(CoPlacement("head", besides=("submitter",)),),
    )


def _pods_of(kind: str, resource: str, count: tuple[Factor, ...], notes: str, **extra: Any) -> WorkloadKind:
    return WorkloadKind(
        group="apps",
        kind=kind,
        resource=resource,
        versions=("v1",),
        podsets=(PodSetRule(template=("spec", "template"), count=count),),
        pod_labels=True,
        workloads_below=True,
        notes=notes,
        **extra,
    )


_SPARK_ROLES = ("driver", "executor")

KINDS: tuple[WorkloadKind, ...] = (
    WorkloadKind(
        group="batch",
        kind="Job",
        resource="jobs",
        versions=("v1",),
        podsets=(PodSetRule(template=("spec", "template"), count=(_job_pods(("spec",)),)),),
        suspend=("spec", "suspend"),
        # Kueue's partial admission reads it with strconv.Atoi (``Job.minPodsCount``).
        counts=(Factor(("metadata", "annotations", "kueue.x-k8s.io/job-min-parallelism"), text=True),),
        frozen_unless=(("spec", "suspend"), True),
        # Kueue's JobWebhook.validateTopologyRequest: "required/preferred topology is not supported
        # with elastic jobs" (only unconstrained is).
        elastic_forbids=("kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology"),
    ),
    WorkloadKind(
        group="batch",
        kind="CronJob",
        resource="cronjobs",
        versions=("v1",),
        podsets=(
            PodSetRule(
                template=("spec", "jobTemplate", "spec", "template"),
                count=(_job_pods(("spec", "jobTemplate", "spec")),),
            ),
        ),
        labels_at=("spec", "jobTemplate", "metadata"),
        suspend=("spec", "jobTemplate", "spec", "suspend"),
        owns_workloads=False,
        workloads_below=True,
        notes="Kueue manages each Job the CronJob creates; the policy is written into jobTemplate.",
    ),
    WorkloadKind(
        group="jobset.x-k8s.io",
        kind="JobSet",
        resource="jobsets",
        versions=("v1alpha2",),
        podsets=(
            PodSetRule(
                template=("spec", "replicatedJobs", "*", "template", "spec", "template"),
                count=(
                    Factor(("spec", "replicatedJobs", "*", "replicas")),
                    _job_pods(("spec", "replicatedJobs", "*", "template", "spec")),
                ),
                name="name",
            ),
        ),
        suspend=("spec", "suspend"),
        # Its replicatedJobs are named by the user: a driver of 1 pod beside one other podset.
        coplace=(CoPlacement(None),),
    ),
    # The rank-0 replica (Master, Chief) or the launcher is placed with the workers.
    _kubeflow("PyTorchJob", "kubeflow.org", "v1", "pytorchReplicaSpecs", coplace=(CoPlacement("master", "worker"),)),
    _kubeflow("TFJob", "kubeflow.org", "v1", "tfReplicaSpecs", coplace=(CoPlacement("chief", "worker"),)),
    _kubeflow("XGBoostJob", "kubeflow.org", "v1", "xgbReplicaSpecs", coplace=(CoPlacement("master", "worker"),)),
    _kubeflow("PaddleJob", "kubeflow.org", "v1", "paddleReplicaSpecs", coplace=(CoPlacement("master", "worker"),)),
    _kubeflow("JAXJob", "kubeflow.org", "v1", "jaxReplicaSpecs"),
    # Kueue's MPIJob is mpi-operator's v2beta1; the training-operator's kubeflow.org/v1 MPIJob (a CRD
    # of its own: a cluster serves one or the other) is not one Kueue manages: it would run at once.
    _kubeflow(
        "MPIJob",
        "kubeflow.org",
        "v2beta1",
        "mpiReplicaSpecs",
        (Factor(("spec", "slotsPerWorker")),),
        coplace=(CoPlacement("launcher", "worker"),),
        unmanaged=(
            (
                "v1",
                "the Kubeflow training-operator runs a kubeflow.org/v1 MPIJob by itself, so it would run at once, "
                "outside the team's queue and quota",
            ),
        ),
    ),
    # Its pods are those of the JobSet Trainer builds from the runtime it references: the podsets
    # are read from the resolved replicated jobs (webhook.core.kueue.trainer), as JobSet's.
    WorkloadKind(
        group="trainer.kubeflow.org",
        kind="TrainJob",
        resource="trainjobs",
        versions=("v1alpha1",),
        podsets=(
            PodSetRule(
                template=(TRAINER.resolved, "replicatedJobs", "*", "template", "spec", "template"),
                count=(
                    Factor((TRAINER.resolved, "replicatedJobs", "*", "replicas")),
                    _job_pods((TRAINER.resolved, "replicatedJobs", "*", "template", "spec")),
                ),
                name="name",
            ),
        ),
        suspend=("spec", "suspend"),
        counts=(Factor(("spec", "trainer", "numNodes")),),
        runtime=TRAINER,
        coplace=(CoPlacement(None),),
    ),
    # A RayJob with clusterSelector runs on an existing RayCluster: Kueue does not manage it.
    _ray(
        "RayJob",
        ("spec", "rayClusterSpec"),
        ("spec", "suspend"),
        skip_if=(("spec", "clusterSelector"),),
        requires=(
            Requirement(
                ("spec", "shutdownAfterJobFinishes"),
                True,
                why="a kueue managed job should delete the cluster after finishing",
            ),
            _no_autoscaling(("spec", "rayClusterSpec")),
        ),
        extra=(
            PodSetRule(
                template=("spec", "submitterPodTemplate"),
                name="submitter",
                only_if=(("spec", "submissionMode"), "K8sJobMode"),
                default_requests=(("cpu", "500m"), ("memory", "200Mi")),
            ),
        ),
    ),
    _ray("RayCluster", ("spec",), ("spec", "suspend"), requires=(_no_autoscaling(("spec",)),)),
    _ray("RayService", ("spec", "rayClusterConfig"), None),
    WorkloadKind(
        group="leaderworkerset.x-k8s.io",
        kind="LeaderWorkerSet",
        resource="leaderworkersets",
        versions=("v1",),
        workloads_below=True,
        podsets=(
            # Kueue admits each LWS group as one workload: `main` of `size` pods, or with a
            # leaderTemplate `leader` (1 pod) and `worker` (size - 1 pods).
            PodSetRule(template=("spec", "leaderWorkerTemplate", "leaderTemplate"), name="leader"),
            PodSetRule(
                template=("spec", "leaderWorkerTemplate", "workerTemplate"),
                count=(Factor(("spec", "leaderWorkerTemplate", "size")),),
                leader=Leader(("spec", "leaderWorkerTemplate", "leaderTemplate"), "worker", -1),
            ),
        ),
        counts=(Factor(("spec", "replicas")),),
        coplace=(CoPlacement("leader", "worker"),),
    ),
    WorkloadKind(
        group="",
        kind="Pod",
        resource="pods",
        versions=("v1",),
        podsets=(
            PodSetRule(
                template=(),
                count=(Factor(("metadata", "annotations", "kueue.x-k8s.io/pod-group-total-count"), text=True),),
                # Kueue's GetPodGroupName: the annotation (WorkloadIdentifierAnnotations, on by
                # default since v0.18) when not empty, else the label.
                partial_if=(
                    ("metadata", "annotations", "kueue.x-k8s.io/pod-group-name"),
                    ("metadata", "labels", "kueue.x-k8s.io/pod-group-name"),
                ),
            ),
        ),
    ),
    # Kueue admits a Deployment's (and a ReplicaSet's) pods one by one: each pod is a workload of
    # one pod, so the podset has 1 pod whatever `replicas` says.
    _pods_of(
        "Deployment",
        "deployments",
        (),
        "Each pod is its own Kueue workload.",
        counts=(Factor(("spec", "replicas")),),
    ),
    _pods_of(
        "ReplicaSet",
        "replicasets",
        (),
        "A ReplicaSet of a Deployment is a child (the Deployment carries the policy).",
        # Its pods are Kueue workloads themselves (Kueue's pod integration), not children: they are
        # planned like any Pod, so a Pod naming a ReplicaSet as owner cannot skip the policy.
        owns_workloads=False,
        counts=(Factor(("spec", "replicas")),),
    ),
    # A StatefulSet is one pod group: one workload, podset `main` of `replicas` pods.
    _pods_of("StatefulSet", "statefulsets", (Factor(("spec", "replicas")),), "One pod group per StatefulSet."),
    WorkloadKind(
        group="workload.codeflare.dev",
        kind="AppWrapper",
        resource="appwrappers",
        versions=("v1beta2",),
        suspend=("spec", "suspend"),
        embedded=("spec", "components", "*", "template"),
        declared="podSets",
    ),
    WorkloadKind(
        group="sparkoperator.k8s.io",
        kind="SparkApplication",
        resource="sparkapplications",
        versions=("v1beta2",),
        podsets=(
            PodSetRule(template=("spec", "driver"), name="driver", layout=SPARK_ROLE),
            PodSetRule(
                template=("spec", "executor"),
                count=(Factor(("spec", "executor", "instances"), default=0),),
                name="executor",
                layout=SPARK_ROLE,
            ),
        ),
        suspend=("spec", "suspend"),
        counts=tuple(
            Factor(("spec", "dynamicAllocation", field))
            for field in ("initialExecutors", "minExecutors", "maxExecutors")
        ),
        notes="Kueue builds the driver and executor pods from spec.driver / spec.executor fields.",
    ),
    WorkloadKind(
        group="sagemaker.amazonaws.com",
        kind="HyperPodPyTorchJob",
        resource="hyperpodpytorchjobs",
        versions=("v1",),
        podsets=(
            PodSetRule(
                template=("spec", "replicaSpecs", "*", "template"),
                count=(Factor(("spec", "replicaSpecs", "*", "replicas")),),
                name="name",
            ),
        ),
    ),
)

_BY_GVK: dict[tuple[str, str, str], WorkloadKind] = {
    (k.group, version, k.kind): k for k in KINDS for version in k.versions
}
_GROUP_KINDS: dict[tuple[str, str], WorkloadKind] = {(k.group, k.kind): k for k in KINDS}


def _split(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def find_kind(api_version: str, kind: str) -> WorkloadKind | None:
    """The row for an object's ``apiVersion``/``kind`` (group **and** version), or None."""
    group, version = _split(api_version)
    return _BY_GVK.get((group, version, kind))


def kind_of_group(api_version: str, kind: str) -> WorkloadKind | None:
    """A row of the same group and kind at another version (to say why an object is not governed)."""
    return _GROUP_KINDS.get((_split(api_version)[0], kind))


def is_managed_owner(owner_reference: Mapping[str, Any]) -> bool:
    """True when an ownerReference points to an owner Kueue manages as the workload."""
    row = find_kind(str(owner_reference.get("apiVersion", "")), str(owner_reference.get("kind", "")))
    return row is not None and row.owns_workloads
