"""A TrainJob's pods as Kueue builds them: from the (Cluster)TrainingRuntime it references.

A Kubeflow Trainer ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``) has no pod template: its pods
are those of the JobSet Trainer makes from the runtime's ``spec.template``, with the TrainJob's
``spec.runtimePatches`` merged in and its ``spec.trainer`` applied. Kueue v0.19.2 builds that very
JobSet to know the TrainJob's podsets (``pkg/controller/jobs/trainjob``: ``getChildJobSet`` with
Trainer v2.2.1's runtime code, its go.mod pin), then reads it as any JobSet (one podset per
replicated job, ``replicas`` × ``min(parallelism, completions)`` pods).

:func:`child_jobs` computes those replicated jobs (pure, no I/O). The rules plan on them through
the TrainJob row's :class:`~webhook.core.kueue.kind_model.RuntimeSource`: the row's podsets live
under :data:`RESOLVED` of a working copy of the TrainJob (:func:`expanded`), and what the rules
write there is written back into the TrainJob as one ``runtimePatches`` entry of the governor's
(:mod:`webhook.core.plan.runtime`).

Trainer v2.2.1 rules transcribed here (``pkg/runtime/core/trainingruntime.go`` ``newRuntimeInfo``,
``mergeRuntimePatches``; ``pkg/runtime/framework/plugins/{torch,mpi,jax,xgboost,plainml}``
``EnforceMLPolicy``; ``plugins/jobset/builder.go`` ``Initializer``, ``Trainer``):

- each ``runtimePatches`` entry, in order, is a strategic merge patch of the replicated job of the
  same name (maps merge, ``null`` removes a key, lists of containers, volumes, env… merge by their
  key, every other list is replaced: ``tolerations``, ``nodeSelectorTerms``);
- a replicated job's pods per replica: its ``parallelism`` (1 when unset); the trainer's (label
  ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``) the runtime's ``mlPolicy.numNodes``
  (1 when unset) when the runtime has an ``mlPolicy``; at least 1; then ``spec.trainer.numNodes``
  replaces the trainer's count, except with an MPI policy, where it sets the count of the job
  named ``node`` (one less, at least 1, with ``runLauncherAsNode``); ``parallelism`` and
  ``completions`` are both set to it;
- the trainer's and the initializers' jobs have 1 replica, the others their ``replicas`` (the
  CRD's default: 1);
- ``spec.trainer.resourcesPerNode`` (when it has limits or requests) replaces the resources of
  the container ``node`` of the trainer's job (and of the job ``node`` with ``runLauncherAsNode``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from webhook.core.kueue.kind_model import RuntimeSource
from webhook.core.kueue.wellformed import describe

__all__ = [
    "ANCESTOR_LABEL",
    "CLUSTER_RUNTIME",
    "RESOLVED",
    "RUNTIME",
    "TRAINER",
    "RuntimeLookup",
    "child_jobs",
    "expanded",
    "find_runtime",
    "runtime_key",
    "strategic_merge",
]

#: The key of a TrainJob's working copy under which its resolved replicated jobs are planned.
RESOLVED = "resolvedRuntime"
#: Trainer's label on a runtime's replicated job naming its step (``trainer``, ``dataset-initializer``…).
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
GROUP = "trainer.kubeflow.org"
CLUSTER_RUNTIME = "ClusterTrainingRuntime"
RUNTIME = "TrainingRuntime"
_ONE_REPLICA = frozenset({"trainer", "dataset-initializer", "model-initializer"})

#: (kind, namespace — "" for a ClusterTrainingRuntime —, name) → the runtime object, or None.
RuntimeLookup = Callable[[str, str, str], Mapping[str, Any] | None]

#: The pod template fields a ``runtimePatches`` entry may set (Trainer v2.2.1 ``PodTemplatePatch``:
#: metadata labels and annotations; ``PodSpecPatch`` nodeSelector, affinity, tolerations,
#: schedulingGates among others; no ``priorityClassName``).
TRAINER = RuntimeSource(
    ref=("spec", "runtimeRef"),
    patches=("spec", "runtimePatches"),
    manager="kueue-governor.io/governor",
    resolved=RESOLVED,
    writable=(
        ("metadata", "labels"),
        ("metadata", "annotations"),
        ("spec", "nodeSelector"),
        ("spec", "affinity"),
        ("spec", "tolerations"),
        ("spec", "schedulingGates"),
    ),
)

# Lists a strategic merge patch merges by a key (k8s.io/api patchMergeKey tags of the fields a
# runtime patch can carry); every other list is replaced whole.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def strategic_merge(original: Any, patch: Any) -> Any:
    """``patch`` merged into ``original`` as Kubernetes' strategic merge patch does for the fields
    of a ``JobTemplateSpec`` a runtime patch can carry: maps merge key by key, ``null`` removes a
    key, lists of :data:`_MERGE_KEYS` merge item by item on their key, other values (and lists)
    are replaced. A new value; neither argument is changed."""
    if not isinstance(patch, Mapping) or not isinstance(original, Mapping):
        return copy.deepcopy(patch)
    out = dict(original)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = strategic_merge(out[key], value)
        elif key in _MERGE_KEYS and isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _merge_list(out[key], value, _MERGE_KEYS[key])
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_list(original: list[Any], patch: list[Any], key: str) -> list[Any]:
    merged = list(original)
    for item in patch:
        name = item.get(key) if isinstance(item, Mapping) else None
        same = [
            i for i, old in enumerate(merged) if name is not None and isinstance(old, Mapping) and old.get(key) == name
        ]
        index = same[0] if same else None
        if index is None:
            merged.append(copy.deepcopy(item))
        else:
            merged[index] = strategic_merge(merged[index], item)
    return merged


def runtime_key(trainjob: Mapping[str, Any], namespace: str) -> tuple[str, str, str] | str:
    """The (kind, namespace, name) of the runtime ``trainjob`` references (``spec.runtimeRef``;
    kind ``ClusterTrainingRuntime`` and group ``trainer.kubeflow.org`` when unset, the CRD's
    defaults), or why there is none Kueue could resolve (a message)."""
    given = _map(trainjob.get("spec")).get("runtimeRef")
    if given is not None and not isinstance(given, Mapping):
        return f"spec.runtimeRef must be an object, got {describe(given)}"
    ref = _map(given)
    name, group, kind = ref.get("name"), ref.get("apiGroup", GROUP), ref.get("kind", CLUSTER_RUNTIME)
    if name is not None and not isinstance(name, str):
        return f"spec.runtimeRef.name must be a string, got {describe(name)}"
    if not name:
        return "spec.runtimeRef.name is not set"
    if group != GROUP or kind not in (CLUSTER_RUNTIME, RUNTIME):
        # Kueue's getChildJobSet: "unsupported runtime" (Trainer's runtime registry has these two).
        return f"spec.runtimeRef {group}/{kind} is no runtime Trainer knows ({GROUP} {CLUSTER_RUNTIME} or {RUNTIME})"
    return (kind, "" if kind == CLUSTER_RUNTIME else namespace, name)


def find_runtime(
    trainjob: Mapping[str, Any], namespace: str, runtimes: RuntimeLookup | None
) -> tuple[Mapping[str, Any] | None, str]:
    """The runtime ``trainjob`` references and its description (``ClusterTrainingRuntime
    'torch-distributed'``), or None and why it is not known."""
    key = runtime_key(trainjob, namespace)
    if isinstance(key, str):
        return None, key
    kind, ns, name = key
    described = f"{kind} {name!r}" + (f" in namespace {ns!r}" if ns else "")
    found = runtimes(kind, ns, name) if runtimes is not None else None
    if found is None:
        missing = "Kueue and Trainer refuse a TrainJob whose runtime is missing"
        return None, f"{described} is not known to the governor ({missing})"
    return found, described


def _count(job: Mapping[str, Any], ancestor: str | None, ml_policy: Mapping[str, Any] | None) -> int:
    template = _map(job.get("template"))
    parallelism = _map(template.get("spec")).get("parallelism")
    count = parallelism if isinstance(parallelism, int) and not isinstance(parallelism, bool) else 1
    if ancestor == "trainer" and ml_policy is not None:
        nodes = ml_policy.get("numNodes")
        count = nodes if isinstance(nodes, int) and not isinstance(nodes, bool) else 1
    return max(count, 1)


def _ancestor(job: Mapping[str, Any]) -> str | None:
    """The job's step label (a runtime read from a file may hold anything there: no step then)."""
    value = _map(_map(_map(job.get("template")).get("metadata")).get("labels")).get(ANCESTOR_LABEL)
    return value if isinstance(value, str) else None


def child_jobs(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The replicated jobs of the JobSet Kueue builds for ``trainjob`` from ``runtime`` (see the
    module docstring): each ``{"name", "replicas", "template": {"metadata", "spec":
    {"parallelism", "completions", "template": <pod template>}}}``, in the runtime's order.

    Values of the wrong type are passed on as they are (the view reports them, with their path).
    """
    spec = _map(runtime.get("spec"))
    jobs = [copy.deepcopy(job) for job in _list(_map(_map(spec.get("template")).get("spec")).get("replicatedJobs"))]
    train = _map(trainjob.get("spec"))
    for patch in _list(train.get("runtimePatches")):
        template_patch = _map(_map(_map(_map(patch).get("trainingRuntimeSpec")).get("template")).get("spec"))
        for job_patch in _list(template_patch.get("replicatedJobs")):
            job_patch = _map(job_patch)
            if job_patch.get("template") is None:
                continue
            for job in jobs:
                if isinstance(job, dict) and job.get("name") == job_patch.get("name"):
                    job["template"] = strategic_merge(job.get("template"), job_patch["template"])
    ml_policy = spec.get("mlPolicy") if isinstance(spec.get("mlPolicy"), Mapping) else None
    mpi = _map(ml_policy).get("mpi")
    launcher_as_node = isinstance(mpi, Mapping) and mpi.get("runLauncherAsNode") is True
    trainer = _map(train.get("trainer"))
    nodes = trainer.get("numNodes")
    counts = [_count(_map(job), _ancestor(_map(job)), ml_policy) for job in jobs]
    ancestors = [_ancestor(_map(job)) for job in jobs]
    if isinstance(nodes, int) and not isinstance(nodes, bool):
        if isinstance(mpi, Mapping):  # the MPI plugin: the job named "node"
            named = [i for i, job in enumerate(jobs) if _map(job).get("name") == "node"]
            if named:
                counts[named[0]] = max(nodes - 1, 1) if launcher_as_node else nodes
        elif "trainer" in ancestors:  # torch, jax, xgboost, plainml: the (first) trainer job
            counts[ancestors.index("trainer")] = nodes
    resources = trainer.get("resourcesPerNode")
    out: list[dict[str, Any]] = []
    for job, ancestor, count in zip(jobs, ancestors, counts, strict=True):
        if not isinstance(job, dict):
            out.append(job)
            continue
        template = dict(_map(job.get("template")))
        job_spec = dict(_map(template.get("spec")))
        job_spec["parallelism"] = job_spec["completions"] = count
        sized = isinstance(resources, Mapping) and bool(resources.get("limits") or resources.get("requests"))
        if sized and (ancestor == "trainer" or (launcher_as_node and job.get("name") == "node")):
            assert isinstance(resources, Mapping)
            job_spec["template"] = _with_node_resources(job_spec.get("template"), resources)
        template["spec"] = job_spec
        replicas = 1 if ancestor in _ONE_REPLICA else job.get("replicas", 1)
        out.append({**job, "replicas": replicas, "template": template})
    return out


def _with_node_resources(pod_template: Any, resources: Mapping[str, Any]) -> Any:
    """The pod template with container ``node``'s resources replaced by ``resourcesPerNode``'s
    limits and requests (Trainer's builder: ``WithResources``)."""
    if not isinstance(pod_template, Mapping) or not isinstance(pod_template.get("spec"), Mapping):
        return pod_template
    pod_spec = dict(pod_template["spec"])
    containers = pod_spec.get("containers")
    if not isinstance(containers, list):
        return pod_template
    replaced = {k: copy.deepcopy(resources[k]) for k in ("limits", "requests") if resources.get(k)}
    pod_spec["containers"] = [
        {**c, "resources": replaced} if isinstance(c, Mapping) and c.get("name") == "node" else c for c in containers
    ]
    return {**pod_template, "spec": pod_spec}


def expanded(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
    """``trainjob`` with its resolved replicated jobs under :data:`RESOLVED` (what the TrainJob
    row's podsets read)."""
    return {**trainjob, RESOLVED: {"replicatedJobs": child_jobs(trainjob, runtime)}}
