"""The shape of a workload-kind row: where a kind keeps its podsets, labels and suspend field.

Data only (SPEC §4): :mod:`webhook.core.kueue.kinds` holds the rows, :mod:`webhook.core.kueue.view` reads
objects through them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.core.kueue.injected import PodChange
from webhook.core.objects.paths import PathPattern

__all__ = [
    "SPARK_ROLE",
    "TEMPLATE",
    "CoPlacement",
    "Factor",
    "Leader",
    "PodLayout",
    "PodSetRule",
    "Requirement",
    "RuntimeSource",
    "WorkloadKind",
]


@dataclass(frozen=True)
class Factor:
    """A pod-count factor read at ``path``: ``default`` when unset, at most the value at ``cap``
    when that is set (a Job runs min(parallelism, completions) pods at once). ``text``: the count
    is a string holding the integer (an annotation), not an integer field. ``one_below``: a value
    below it counts 1 (Kueue multiplies a Ray group's pods by ``numOfHosts`` only above 1)."""

    path: PathPattern
    cap: PathPattern | None = None
    default: int = 1
    text: bool = False
    one_below: int = 0


@dataclass(frozen=True)
class Leader:
    """A leader template at ``path`` (relative to the object) takes one pod of the group when set:
    the podset is then called ``name`` and has ``count_offset`` pods more (Kueue's LWS adapter)."""

    path: PathPattern
    name: str
    count_offset: int


@dataclass(frozen=True)
class PodLayout:
    """Where a podset's pod fields live, relative to its base path.

    A ``PodTemplateSpec`` (the default) keeps them under ``metadata`` and ``spec``; a Spark role
    (``spec.driver``) has them as fields of its own. ``sized`` False: the per-pod requests are not
    read from containers at these paths (Kueue computes them from other fields), so they are unknown.
    """

    annotations: PathPattern = ("metadata", "annotations")
    labels: PathPattern = ("metadata", "labels")
    priority: PathPattern = ("spec", "priorityClassName")
    pod_priority: PathPattern | None = ("spec", "priority")
    affinity: PathPattern = ("spec", "affinity")
    node_selector: PathPattern = ("spec", "nodeSelector")
    tolerations: PathPattern = ("spec", "tolerations")
    spec: PathPattern | None = ("spec",)
    maps: tuple[PathPattern, ...] = (("spec",), ("metadata",), ("metadata", "annotations"))


TEMPLATE = PodLayout()
SPARK_ROLE = PodLayout(
    annotations=("annotations",),
    labels=("labels",),
    priority=("priorityClassName",),
    pod_priority=None,
    affinity=("affinity",),
    node_selector=("nodeSelector",),
    tolerations=("tolerations",),
    spec=None,
    maps=((), ("annotations",)),
)


@dataclass(frozen=True)
class PodSetRule:
    """Where one family of Kueue podsets lives in an object.

    ``template``: pattern of the podset's base (a ``PodTemplateSpec`` unless ``layout`` says
    otherwise); the empty tuple means the object itself (a bare Pod). ``count``: factors whose
    values (non-negative integers, see :class:`Factor`) multiply to the number of pods; ``count_offset`` is added
    after. ``name``: Kueue's podset name, lower-cased as Kueue's ``NewPodSetReference`` does: a
    fixed name, the wildcard's map key (``name="role"``: ``Worker`` → ``worker``) or a field of
    that name next to the template (``name``, ``groupName``). ``leader``: see :class:`Leader`.
    ``partial_if``: paths of a group's name (the first holding a non-empty string names it): when
    one does, the object is one member of a larger group whose other members are not visible (a
    Pod of a Kueue pod group, named by its ``kueue.x-k8s.io/pod-group-name`` annotation or label),
    so its size and shape are unknown. Such a rule's ``text`` count factors (the group's
    ``pod-group-total-count``) go with the name: Kueue's pod webhook refuses either one without
    the other.
    ``only_if``: the podset exists only when (path, value) holds (a RayJob's submitter).
    ``default_requests``: per-pod requests Kueue assumes when the template is absent.
    ``keyed``: the template's ``"*"`` runs over a map keyed by role names (a Kubeflow job's
    replica specs), not over a list. ``changes``: what Kueue adds to the pod beyond its template
    (containers a controller injects into a Ray head, :mod:`webhook.core.kueue.injected`).
    """

    template: PathPattern
    count: tuple[Factor, ...] = ()
    count_offset: int = 0
    name: str = "main"
    leader: Leader | None = None
    partial_if: tuple[PathPattern, ...] = ()
    only_if: tuple[PathPattern, Any] | None = None
    default_requests: tuple[tuple[str, str], ...] = ()
    layout: PodLayout = TEMPLATE
    keyed: bool = False
    changes: tuple[PodChange, ...] = ()


@dataclass(frozen=True)
class Requirement:
    """A field Kueue's own webhook insists on for a workload it manages.

    ``forbid`` False: ``path`` must equal ``value`` (added when missing, the request denied when
    the user set another value). ``forbid`` True: ``path`` must not equal ``value`` (denied). Not
    applied when the object has ``unless`` = (path, value). ``why`` quotes Kueue's reason.
    """

    path: PathPattern
    value: Any
    forbid: bool = False
    unless: tuple[PathPattern, Any] | None = None
    why: str = ""


@dataclass(frozen=True)
class CoPlacement:
    """A driver podset and its workers, which topology mode ``auto`` places in one domain as a
    Kueue podset group (annotation ``kueue.x-k8s.io/podset-group-name`` on both).

    ``driver``: Kueue's name of the driver podset (a PyTorchJob's ``master``, an MPIJob's
    ``launcher``, a Ray ``head``, an LWS ``leader``); grouped only when it has exactly 1 pod.
    None: the kind's podset names are the user's (a JobSet's replicatedJobs), so the driver is
    found by shape: the workload has exactly two podsets and the driver is the one of exactly
    1 pod, the other the workers (``workers`` and ``besides`` unused); when both have 1 pod, the
    second (the workload's order), which Kueue's TAS takes as the leader of such a pair.
    ``workers``: Kueue's name of the workers podset; None: the workload's one podset that is
    neither the driver nor in ``besides`` (a Ray cluster's single worker group, whatever its
    ``groupName``; with two worker groups nothing is grouped). Kueue v0.19.2 takes a group of
    exactly 2 podsets, at least one of 1 pod, both with the same required or preferred level and
    no slice annotation (``jobframework.ValidatePodSetGroupingTopology``, ``ValidateTASPodSetRequest``),
    and places the smaller as the leader of the larger (``tas_flavor_snapshot.findLeaderAndWorkers``).
    """

    driver: str | None
    workers: str | None = None
    besides: tuple[str, ...] = ()


@dataclass(frozen=True)
class RuntimeSource:
    """Where a kind without pod templates of its own takes its pods from: a runtime object it
    references (a TrainJob's ``(Cluster)TrainingRuntime``, :mod:`webhook.core.kueue.trainer`).

    ``ref``: the reference in the object. ``patches``: the object's list of patches to the
    runtime, one per ``manager``; the governor writes what the rules set into its own entry
    (``manager``). ``resolved``: the key of the object's working copy under which the resolved
    pod templates are planned (the row's podset paths start there). ``writable``: the pod template
    fields (relative to a ``PodTemplateSpec``) such a patch can set; a rule's change anywhere else
    cannot reach the pods, and the response says so.
    """

    ref: PathPattern
    patches: PathPattern
    manager: str
    resolved: str
    writable: tuple[PathPattern, ...]


@dataclass(frozen=True)
class WorkloadKind:
    """One workload kind (at one or more API versions) Kueue manages.

    ``labels_at``: path of the ``metadata`` map that carries the queue-name and priority-class
    labels. ``suspend``: path of the boolean suspend field, None where the kind has none (Kueue
    gates such kinds' pods instead). ``skip_if``: a workload with any of these paths set is left
    alone (a RayJob with ``clusterSelector`` runs on an existing cluster). ``embedded``: pattern of
    whole objects of other kinds inside this one (AppWrapper components), planned by their own
    rows. ``requires``: what Kueue's webhook insists on for a workload it manages (see
    :class:`Requirement`). ``owns_workloads``: objects this kind controls are Kueue children and
    get nothing. ``pod_labels``: Kueue admits this kind's pods as Pods and copies only the queue
    label into them (Kueue's Deployment webhook), so the queue and priority labels also go into
    every pod template's labels.
    ``declared``: the field next to each embedded object that may declare its podsets (AppWrapper
    ``podSets``: ``path`` and ``replicas``), used instead of the embedded row's; embedded podsets
    are then named ``<name>-<index>`` over the whole object (Kueue's AppWrapper adapter).
    ``frozen_unless``: on UPDATE the pod templates may not change while this (path, value) holds
    (a Job's template is immutable unless it is suspended, as the API server enforces).
    ``counts``: the kind's other count fields (``"*"`` over lists), which Kueue does not
    multiply into a podset but which must be non-negative integers for the object to decode
    (``minAvailable``, a Ray worker group's ``minReplicas``/``maxReplicas``…).
    ``elastic_forbids``: the pod-template TAS annotations Kueue's webhook refuses on an elastic
    workload of this kind (annotation ``kueue.x-k8s.io/elastic-job: "true"``): a batch/v1 Job's
    required and preferred topology (Kueue v0.19.2 ``JobWebhook.validateTopologyRequest``: "only
    unconstrained is supported"); Ray's webhooks accept topology on elastic workloads.
    ``priority_classes``: fields outside the pod templates that name a PriorityClass Kueue takes as
    the workload's priority when the ``kueue.x-k8s.io/priority-class`` label is absent (a Kubeflow
    job's ``runPolicy.schedulingPolicy.priorityClass``, Kueue v0.19.2 ``KubeflowJob.PriorityClass``;
    also the gang scheduler's PodGroup priority), checked like a pod's ``priorityClassName``.
    ``unmanaged_versions``: (version, why) of API versions of the same group and kind that Kueue
    does not manage but a controller runs (the training-operator's ``kubeflow.org/v1`` MPIJob, a CRD
    of its own, which cannot serve Kueue's ``v2beta1`` too): such an object would run outside Kueue,
    so the webhook is registered for it and refuses its CREATE in a team namespace.
    ``workloads_below``: Kueue's Workloads of this kind belong to what it creates (a Deployment's
    or a ReplicaSet's pods one by one, a StatefulSet's or a LeaderWorkerSet group's pods as a pod
    group, a CronJob's Jobs), found through ``ownerReferences`` (``kgov why``).
    """

    group: str
    kind: str
    versions: tuple[str, ...]
    resource: str
    podsets: tuple[PodSetRule, ...] = ()
    labels_at: PathPattern = ("metadata",)
    suspend: PathPattern | None = None
    skip_if: tuple[PathPattern, ...] = ()
    embedded: PathPattern | None = None
    requires: tuple[Requirement, ...] = ()
    owns_workloads: bool = True
    pod_labels: bool = False
    frozen_unless: tuple[PathPattern, Any] | None = None
    declared: str = ""
    counts: tuple[Factor, ...] = ()
    elastic_forbids: tuple[str, ...] = ()
    workloads_below: bool = False
    coplace: tuple[CoPlacement, ...] = ()
    priority_classes: tuple[PathPattern, ...] = ()
    unmanaged_versions: tuple[tuple[str, str], ...] = ()
    runtime: RuntimeSource | None = None
    notes: str = field(default="", compare=False)

    @property
    def built_in(self) -> bool:
        """A Kubernetes kind (core, ``batch``, ``apps``): the API server decodes it into its Go type
        before any webhook; the others are custom resources, checked against their CRD's schema
        only after the mutating webhooks."""
        return self.group in ("", "batch", "apps")
