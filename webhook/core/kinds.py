"""Workload kinds as data: where each kind keeps its labels, pod templates and suspend field.

One :class:`WorkloadKind` row per kind Kueue can manage (SPEC §4; Kueue's job framework adapters in
``pkg/controller/jobs/*``). The planner reads only these rows: adding a kind is adding a row.

Paths are tuples of keys. ``"*"`` stands for every item of a list or every value of a map (in
document order); the n-th ``"*"`` of a count path is bound to the same item as the n-th ``"*"`` of
its template path, so ``("spec", "replicatedJobs", "*", "replicas")`` reads the replicas of the
very replicated job whose template is being planned.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "KINDS",
    "Capped",
    "Key",
    "PodSetRule",
    "PodTemplateRef",
    "Requirement",
    "WorkloadKind",
    "child",
    "find_kind",
    "is_managed_owner",
    "iter_pod_templates",
    "lookup",
    "webhook_rules",
]

Key = str | int
PathPattern = tuple[str, ...]


@dataclass(frozen=True)
class Capped:
    """A pod-count factor read at ``path`` and capped by the value at ``cap`` when that is set."""

    path: PathPattern
    cap: PathPattern


#: A Job runs min(parallelism, completions) pods at once; Kueue sizes its podset so (KEP-2724, Job).
def _job_pods(spec: PathPattern) -> Capped:
    return Capped((*spec, "parallelism"), (*spec, "completions"))


@dataclass(frozen=True)
class PodSetRule:
    """Where one family of pod templates (Kueue podsets) lives in an object.

    ``template``: pattern of a ``PodTemplateSpec`` (a map with ``metadata`` and ``spec``); the empty
    tuple means the object itself (a bare Pod). ``count``: factors whose values (integers or
    integer strings) multiply to the number of pods of one podset (a missing value counts as 1); a
    :class:`Capped` factor is at most its cap (a Job runs min(parallelism, completions) pods at
    once); ``count_offset`` is added after (an LWS group has ``size - 1`` workers). ``name``: podset name,
    from the wildcard key (map roles like ``Worker``) or a ``name`` field next to it.
    ``partial_if``: when this path is set the object is one member of a larger group whose other
    members are not visible (a Pod of a Kueue pod group), so its size and shape are unknown.
    """

    template: PathPattern
    count: tuple[PathPattern | Capped, ...] = ()
    count_offset: int = 0
    name: str = ""
    partial_if: PathPattern | None = None


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
class WorkloadKind:
    """One workload kind Kueue manages.

    ``labels_at``: path of the ``metadata`` map that carries the queue-name and priority-class
    labels. ``suspend``: path of the boolean suspend field, None where the kind has none (Kueue
    gates such kinds' pods instead). ``skip_if``: a workload with any of these paths set is left
    alone (a RayJob with ``clusterSelector`` runs on an existing cluster). ``embedded``: pattern of
    whole objects of other kinds inside this one (AppWrapper components), planned by their own
    rows. ``requires``: what Kueue's webhook insists on for a workload it manages (see
    :class:`Requirement`). ``owns_workloads``: objects this kind controls are Kueue children and
    get nothing. ``pod_labels``: Kueue admits this kind's pods one by one as Pods and copies only
    the queue label into them (Kueue's Deployment webhook), so the queue and priority labels also
    go into every pod template's labels.
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
    notes: str = field(default="", compare=False)


def _kubeflow(kind: str, group: str, version: str, replica_specs: str) -> WorkloadKind:
    base = ("spec", replica_specs, "*")
    return WorkloadKind(
        group=group,
        kind=kind,
        resource=kind.lower() + "s",
        versions=(version,),
        podsets=(PodSetRule(template=(*base, "template"), count=((*base, "replicas"),), name="role"),),
        suspend=("spec", "runPolicy", "suspend"),
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


def _ray(
    kind: str,
    cluster: PathPattern,
    suspend: PathPattern | None,
    skip_if: tuple[PathPattern, ...] = (),
    requires: tuple[Requirement, ...] = (),
) -> WorkloadKind:
    return WorkloadKind(
        group="ray.io",
        kind=kind,
        resource=kind.lower() + "s",
        versions=("v1",),
        podsets=(
            PodSetRule(template=(*cluster, "headGroupSpec", "template"), name="head"),
            PodSetRule(
                template=(*cluster, "workerGroupSpecs", "*", "template"),
                # KubeRay: each replica of a multi-host group is numOfHosts pods.
                count=(
                    (*cluster, "workerGroupSpecs", "*", "replicas"),
                    (*cluster, "workerGroupSpecs", "*", "numOfHosts"),
                ),
                name="groupName",
            ),
        ),
        suspend=suspend,
        skip_if=skip_if,
        requires=requires,
    )


KINDS: tuple[WorkloadKind, ...] = (
    WorkloadKind(
        group="batch",
        kind="Job",
        resource="jobs",
        versions=("v1",),
        podsets=(
            PodSetRule(
                template=("spec", "template"),
                count=(_job_pods(("spec",)),),
                name="main",
            ),
        ),
        suspend=("spec", "suspend"),
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
                name="main",
            ),
        ),
        labels_at=("spec", "jobTemplate", "metadata"),
        suspend=("spec", "jobTemplate", "spec", "suspend"),
        owns_workloads=False,
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
                    ("spec", "replicatedJobs", "*", "replicas"),
                    _job_pods(("spec", "replicatedJobs", "*", "template", "spec")),
                ),
                name="name",
            ),
        ),
        suspend=("spec", "suspend"),
    ),
    _kubeflow("PyTorchJob", "kubeflow.org", "v1", "pytorchReplicaSpecs"),
    _kubeflow("TFJob", "kubeflow.org", "v1", "tfReplicaSpecs"),
    _kubeflow("XGBoostJob", "kubeflow.org", "v1", "xgbReplicaSpecs"),
    _kubeflow("PaddleJob", "kubeflow.org", "v1", "paddleReplicaSpecs"),
    _kubeflow("JAXJob", "kubeflow.org", "v1", "jaxReplicaSpecs"),
    _kubeflow("MPIJob", "kubeflow.org", "v2beta1", "mpiReplicaSpecs"),
    WorkloadKind(
        group="trainer.kubeflow.org",
        kind="TrainJob",
        resource="trainjobs",
        versions=("v1alpha1",),
        suspend=("spec", "suspend"),
        notes="No pod template of its own: pods come from its training runtime (runtimePatches).",
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
    ),
    _ray("RayCluster", ("spec",), ("spec", "suspend"), requires=(_no_autoscaling(("spec",)),)),
    _ray("RayService", ("spec", "rayClusterConfig"), None),
    WorkloadKind(
        group="leaderworkerset.x-k8s.io",
        kind="LeaderWorkerSet",
        resource="leaderworkersets",
        versions=("v1",),
        podsets=(
            # Kueue admits each LWS group (1 leader + size-1 workers) as one workload.
            PodSetRule(template=("spec", "leaderWorkerTemplate", "leaderTemplate"), name="leader"),
            PodSetRule(
                template=("spec", "leaderWorkerTemplate", "workerTemplate"),
                count=(("spec", "leaderWorkerTemplate", "size"),),
                count_offset=-1,
                name="worker",
            ),
        ),
        notes="Without a leaderTemplate the workerTemplate also serves the leader (count is then size - 1).",
    ),
    WorkloadKind(
        group="",
        kind="Pod",
        resource="pods",
        versions=("v1",),
        podsets=(
            PodSetRule(
                template=(),
                count=(("metadata", "annotations", "kueue.x-k8s.io/pod-group-total-count"),),
                name="main",
                partial_if=("metadata", "labels", "kueue.x-k8s.io/pod-group-name"),
            ),
        ),
    ),
    WorkloadKind(
        group="apps",
        kind="Deployment",
        resource="deployments",
        versions=("v1",),
        podsets=(PodSetRule(template=("spec", "template"), count=(("spec", "replicas"),), name="main"),),
        pod_labels=True,
    ),
    WorkloadKind(
        group="apps",
        kind="ReplicaSet",
        resource="replicasets",
        versions=("v1",),
        podsets=(PodSetRule(template=("spec", "template"), count=(("spec", "replicas"),), name="main"),),
        pod_labels=True,
        # Its pods are Kueue workloads themselves (Kueue's pod integration), not children: they are
        # planned like any Pod, so a Pod naming a ReplicaSet as owner cannot skip the policy.
        owns_workloads=False,
        notes="A ReplicaSet of a Deployment is a child (the Deployment carries the policy).",
    ),
    WorkloadKind(
        group="apps",
        kind="StatefulSet",
        resource="statefulsets",
        versions=("v1",),
        podsets=(PodSetRule(template=("spec", "template"), count=(("spec", "replicas"),), name="main"),),
        pod_labels=True,
    ),
    WorkloadKind(
        group="workload.codeflare.dev",
        kind="AppWrapper",
        resource="appwrappers",
        versions=("v1beta2",),
        suspend=("spec", "suspend"),
        embedded=("spec", "components", "*", "template"),
    ),
    WorkloadKind(
        group="sparkoperator.k8s.io",
        kind="SparkApplication",
        resource="sparkapplications",
        versions=("v1beta2",),
        podsets=(
            PodSetRule(template=("spec", "driver", "template"), name="driver"),
            PodSetRule(
                template=("spec", "executor", "template"), count=(("spec", "executor", "instances"),), name="executor"
            ),
        ),
        suspend=("spec", "suspend"),
        notes="Pod templates only where the user gave spec.driver.template / spec.executor.template.",
    ),
    WorkloadKind(
        group="sagemaker.amazonaws.com",
        kind="HyperPodPyTorchJob",
        resource="hyperpodpytorchjobs",
        versions=("v1",),
        podsets=(
            PodSetRule(
                template=("spec", "replicaSpecs", "*", "template"),
                count=(("spec", "replicaSpecs", "*", "replicas"),),
                name="name",
            ),
        ),
    ),
)

_BY_GROUP_KIND: dict[tuple[str, str], WorkloadKind] = {(k.group, k.kind): k for k in KINDS}


def _group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def webhook_rules(operations: tuple[str, ...] = ("CREATE", "UPDATE")) -> list[dict[str, Any]]:
    """MutatingWebhookConfiguration ``rules`` covering exactly the kinds of :data:`KINDS`.

    One rule per API group, its resources sorted; ``apiVersions: ["*"]``, namespaced scope.
    """
    by_group: dict[str, set[str]] = {}
    for row in KINDS:
        by_group.setdefault(row.group, set()).add(row.resource)
    return [
        {
            "apiGroups": [group],
            "apiVersions": ["*"],
            "operations": list(operations),
            "resources": sorted(resources),
            "scope": "Namespaced",
        }
        for group, resources in sorted(by_group.items())
    ]


def find_kind(api_version: str, kind: str) -> WorkloadKind | None:
    """The row for an object's ``apiVersion``/``kind`` (any version of the group), or None."""
    return _BY_GROUP_KIND.get((_group_of(api_version), kind))


def is_managed_owner(owner_reference: Mapping[str, Any]) -> bool:
    """True when an ownerReference points to an owner Kueue manages as the workload."""
    key = (_group_of(str(owner_reference.get("apiVersion", ""))), str(owner_reference.get("kind", "")))
    row = _BY_GROUP_KIND.get(key)
    return row is not None and row.owns_workloads


@dataclass(frozen=True)
class PodTemplateRef:
    """One concrete pod template found in an object.

    ``path``: keys from the object root to the PodTemplateSpec (``()`` for a bare Pod);
    ``podset``: a readable podset name; ``count``: pods in this podset (≥ 0);
    ``template``: the PodTemplateSpec map itself (not a copy).
    """

    path: tuple[Key, ...]
    podset: str
    count: int
    template: Mapping[str, Any]
    partial: bool = False


def _expand(
    node: Any, pattern: PathPattern, prefix: tuple[Key, ...] = ()
) -> Iterator[tuple[tuple[Key, ...], tuple[Key, ...], Any]]:
    """Yield (concrete path, wildcard bindings, value) for each match of ``pattern`` in ``node``."""
    if not pattern:
        yield prefix, (), node
        return
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        items: list[tuple[Key, Any]]
        if isinstance(node, list):
            items = list(enumerate(node))
        elif isinstance(node, Mapping):
            items = list(node.items())
        else:
            return
        for key, child in items:
            for path, bindings, value in _expand(child, rest, (*prefix, key)):
                yield path, (key, *bindings), value
    elif isinstance(node, Mapping) and head in node:
        yield from _expand(node[head], rest, (*prefix, head))


def child(node: Any, key: Key) -> Any:
    """``node[key]`` for a map key or an in-range list index; None when absent."""
    if type(node) is dict or isinstance(node, Mapping):  # exact dict first: the abc check is slow
        return node.get(key)
    if isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
        return node[key]
    return None


def lookup(node: Any, path: tuple[Key, ...]) -> Any:
    """The value at ``path`` (no wildcards), or None when any step is absent."""
    for key in path:
        node = child(node, key)
        if node is None:
            return None
    return node


def _bind(node: Any, pattern: PathPattern, bindings: tuple[Key, ...]) -> Any:
    """Read ``pattern`` with its wildcards replaced, in order, by ``bindings``; None if absent."""
    keys = iter(bindings)
    return lookup(node, tuple(next(keys) if head == "*" else head for head in pattern))


def _number(value: Any) -> int | None:
    """A non-negative integer from an int or an ASCII-digit string (``"2"``), else None."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _count(obj: Mapping[str, Any], rule: PodSetRule, bindings: tuple[Key, ...]) -> int:
    total = 1
    for factor in rule.count:
        path = factor.path if isinstance(factor, Capped) else factor
        value = _number(_bind(obj, path, bindings))
        if isinstance(factor, Capped):
            cap = _number(_bind(obj, factor.cap, bindings))
            if cap is not None:
                value = cap if value is None else min(value, cap)
        if value is not None:
            total *= value
    return max(total + rule.count_offset, 0)


def _podset_name(obj: Mapping[str, Any], rule: PodSetRule, bindings: tuple[Key, ...]) -> str:
    """Map roles use their key (``Worker``); list items their ``name``-like field, else the index."""
    if not bindings:
        return rule.name
    last = bindings[-1]
    if isinstance(last, str):
        return last
    upto_last_wildcard = rule.template[: len(rule.template) - rule.template[::-1].index("*")]
    holder = _bind(obj, upto_last_wildcard, bindings)
    if isinstance(holder, Mapping) and isinstance(holder.get(rule.name), str):
        return str(holder[rule.name])
    return f"{rule.name}-{last}"


def iter_pod_templates(obj: Mapping[str, Any], row: WorkloadKind) -> Iterator[PodTemplateRef]:
    """Every pod template of ``obj`` per ``row``, embedded objects (AppWrapper) included.

    Only map-shaped templates are yielded. A template of another JSON type gets no policy: the
    API server refuses such an object anyway (typed decoding for built-in kinds, the CRD's schema
    for the others).
    """
    for rule in row.podsets:
        for path, bindings, template in _expand(obj, rule.template):
            if isinstance(template, Mapping):
                yield PodTemplateRef(
                    path=path,
                    podset=_podset_name(obj, rule, bindings),
                    count=_count(obj, rule, bindings),
                    template=template,
                    partial=rule.partial_if is not None and _bind(obj, rule.partial_if, bindings) is not None,
                )
    if row.embedded is not None:
        for path, _, inner in _expand(obj, row.embedded):
            if not isinstance(inner, Mapping):
                continue
            inner_row = find_kind(str(inner.get("apiVersion", "")), str(inner.get("kind", "")))
            if inner_row is None:
                continue
            for ref in iter_pod_templates(inner, inner_row):
                yield PodTemplateRef(
                    path=(*path, *ref.path),
                    podset=f"{inner.get('kind')}/{ref.podset}",
                    count=ref.count,
                    template=ref.template,
                    partial=ref.partial,
                )
