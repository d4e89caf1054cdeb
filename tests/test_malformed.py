"""Malformed counts, quantities and structure in a workload: refused, naming the path, under any
enforcement, through the AdmissionReview path and through ``kgov mutate``.

A custom resource (PyTorchJob, JobSet, RayJob…) reaches the webhook before its schema is checked,
and ``kgov mutate`` has no API server: a ``replicas: "abc"`` or ``nvidia.com/gpu: "8Xi"`` used to
be counted as absent and the object patched and admitted silently. Each case here was such an
input. The AdmissionReview cases are wrapped in the recorded API-server envelopes of
``tests/data/admission``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from click.testing import CliRunner
from support import PLATFORM, platform_with, review_body, teams_from

from webhook.cli import main
from webhook.core.admission.envelope import decode_body
from webhook.core.admission.review import ReviewOutcome, review
from webhook.core.kueue.kinds import WorkloadKind, find_kind
from webhook.core.kueue.view import kueue_view
from webhook.core.kueue.wellformed import FRACTIONAL_NUMBER, Problems, describe, is_extended_resource, quantity
from webhook.core.objects.paths import Key, dotted
from webhook.core.platform.resolve import TeamIndex

DATA = Path(__file__).parent / "data" / "admission"
NAMESPACE = "hyperpod-ns-research"  # a team namespace of the bundled platform


def _teams(policy: dict[str, Any]) -> TeamIndex:
    """A one-team platform (tests/support.py) whose team owns NAMESPACE, with ``policy``."""
    base = platform_with(policy)
    return teams_from({**base, "teams": [{**base["teams"][0], "namespaces": [NAMESPACE]}]})


TEAMS = _teams({"queue": {}})


def _template(gpus: Any = "8") -> dict[str, Any]:
    """A pod template with every field the requests are read from."""
    return {
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": gpus}}}],
            "initContainers": [
                {"name": "s", "image": "x", "restartPolicy": "Always", "resources": {"limits": {"cpu": "1"}}}
            ],
            "overhead": {"cpu": "100m"},
        },
    }


def _ray_cluster() -> dict[str, Any]:
    return {
        "headGroupSpec": {"template": _template("0")},
        "workerGroupSpecs": [
            {
                "groupName": "g",
                "replicas": 2,
                "minReplicas": 1,
                "maxReplicas": 4,
                "numOfHosts": 1,
                "template": _template(),
            }
        ],
    }


def _obj(api_version: str, kind: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", **metadata}, "spec": spec}


#: kind → (a valid object, the paths of its pod templates, its count fields).
Base = tuple[Callable[[], dict[str, Any]], tuple[tuple[Key, ...], ...], tuple[tuple[Key, ...], ...]]
KINDS: dict[str, Base] = {
    "Job": (
        lambda: _obj("batch/v1", "Job", {"parallelism": 2, "completions": 4, "template": _template()}),
        (("spec", "template"),),
        (("spec", "parallelism"), ("spec", "completions")),
    ),
    "CronJob": (
        lambda: _obj(
            "batch/v1",
            "CronJob",
            {"schedule": "* * * * *", "jobTemplate": {"spec": {"parallelism": 2, "template": _template()}}},
        ),
        (("spec", "jobTemplate", "spec", "template"),),
        (("spec", "jobTemplate", "spec", "parallelism"), ("spec", "jobTemplate", "spec", "completions")),
    ),
    "JobSet": (
        lambda: _obj(
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            {
                "replicatedJobs": [
                    {
                        "name": "w",
                        "replicas": 2,
                        "template": {"spec": {"parallelism": 2, "completions": 2, "template": _template()}},
                    }
                ]
            },
        ),
        (("spec", "replicatedJobs", 0, "template", "spec", "template"),),
        (
            ("spec", "replicatedJobs", 0, "replicas"),
            ("spec", "replicatedJobs", 0, "template", "spec", "parallelism"),
            ("spec", "replicatedJobs", 0, "template", "spec", "completions"),
        ),
    ),
    "PyTorchJob": (
        lambda: _obj(
            "kubeflow.org/v1",
            "PyTorchJob",
            {
                "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": _template()}},
                "runPolicy": {"schedulingPolicy": {"minAvailable": 2}},
            },
        ),
        (("spec", "pytorchReplicaSpecs", "Worker", "template"),),
        (
            ("spec", "pytorchReplicaSpecs", "Worker", "replicas"),
            ("spec", "runPolicy", "schedulingPolicy", "minAvailable"),
        ),
    ),
    "MPIJob": (
        lambda: _obj(
            "kubeflow.org/v2beta1",
            "MPIJob",
            {"slotsPerWorker": 8, "mpiReplicaSpecs": {"Worker": {"replicas": 2, "template": _template()}}},
        ),
        (("spec", "mpiReplicaSpecs", "Worker", "template"),),
        (("spec", "mpiReplicaSpecs", "Worker", "replicas"), ("spec", "slotsPerWorker")),
    ),
    "RayCluster": (
        lambda: _obj("ray.io/v1", "RayCluster", _ray_cluster()),
        (("spec", "workerGroupSpecs", 0, "template"), ("spec", "headGroupSpec", "template")),
        tuple(("spec", "workerGroupSpecs", 0, f) for f in ("replicas", "numOfHosts", "minReplicas", "maxReplicas")),
    ),
    "RayJob": (
        lambda: _obj("ray.io/v1", "RayJob", {"shutdownAfterJobFinishes": True, "rayClusterSpec": _ray_cluster()}),
        (("spec", "rayClusterSpec", "workerGroupSpecs", 0, "template"),),
        (("spec", "rayClusterSpec", "workerGroupSpecs", 0, "replicas"),),
    ),
    "LeaderWorkerSet": (
        lambda: _obj(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": _template()}},
        ),
        (("spec", "leaderWorkerTemplate", "workerTemplate"),),
        (("spec", "leaderWorkerTemplate", "size"), ("spec", "replicas")),
    ),
    "Deployment": (
        lambda: _obj("apps/v1", "Deployment", {"replicas": 2, "template": _template()}),
        (("spec", "template"),),
        (("spec", "replicas"),),
    ),
    "StatefulSet": (
        lambda: _obj("apps/v1", "StatefulSet", {"replicas": 2, "template": _template()}),
        (("spec", "template"),),
        (("spec", "replicas"),),
    ),
    "AppWrapper": (
        lambda: _obj(
            "workload.codeflare.dev/v1beta2",
            "AppWrapper",
            {
                "components": [
                    {
                        "podSets": [{"path": "template.spec.template", "replicas": 2}],
                        "template": _obj("batch/v1", "Job", {"parallelism": 2, "template": _template()}),
                    }
                ]
            },
        ),
        (("spec", "components", 0, "template", "spec", "template"),),
        (("spec", "components", 0, "podSets", 0, "replicas"),),
    ),
    "SparkApplication": (
        lambda: _obj(
            "sparkoperator.k8s.io/v1beta2",
            "SparkApplication",
            {"driver": {"cores": 1}, "executor": {"instances": 2}, "dynamicAllocation": {"maxExecutors": 4}},
        ),
        (),
        (("spec", "executor", "instances"), ("spec", "dynamicAllocation", "maxExecutors")),
    ),
    "HyperPodPyTorchJob": (
        lambda: _obj(
            "sagemaker.amazonaws.com/v1",
            "HyperPodPyTorchJob",
            {"replicaSpecs": [{"name": "w", "replicas": 2, "template": _template()}]},
        ),
        (("spec", "replicaSpecs", 0, "template"),),
        (("spec", "replicaSpecs", 0, "replicas"),),
    ),
    "TrainJob": (
        lambda: _obj("trainer.kubeflow.org/v1alpha1", "TrainJob", {"trainer": {"numNodes": 2}}),
        (),
        (("spec", "trainer", "numNodes"),),
    ),
    "Pod": (
        lambda: {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "labels": {"kueue.x-k8s.io/pod-group-name": "g"},
                "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"},
            },
            "spec": _template()["spec"],
        },
        ((),),
        (),
    ),
}

COUNT = "must be a non-negative integer"
#: (a malformed count, the end of the message naming it).
BAD_COUNTS: list[tuple[Any, str]] = [
    ("abc", f'{COUNT}, got string "abc"'),
    (-7, f"{COUNT}, got number -7"),
    (-3, f"{COUNT}, got number -3"),
    (True, f"{COUNT}, got boolean true"),
    (1.5, f"{COUNT}, got number 1.5"),
    ("2", f'{COUNT}, got string "2"'),
    ({"n": 2}, f"{COUNT}, got object"),
    (2**31, "must be at most 2147483647 (an int32), got number 2147483648"),
]
QUANTITY = "must be a Kubernetes quantity (e.g. 8, 500m, 64Gi)"
NEGATIVE = "must be a non-negative quantity (e.g. 8, 500m, 64Gi)"
BAD_QUANTITIES: list[tuple[Any, str]] = [
    ("-8", f'{NEGATIVE}, got string "-8"'),
    (-1, f"{NEGATIVE}, got number -1"),
    ("8Xi", f'{QUANTITY}, got string "8Xi"'),
    ("8 GPUs", f'{QUANTITY}, got string "8 GPUs"'),
    (True, f"{QUANTITY}, got boolean true"),
    ([8], f"{QUANTITY}, got array"),
]
#: Where a pod template keeps quantities, relative to the template.
QUANTITY_FIELDS: list[tuple[Key, ...]] = [
    ("spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"),
    ("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"),
    ("spec", "initContainers", 0, "resources", "limits", "cpu"),
    ("spec", "initContainers", 0, "resources", "requests", "memory"),
    ("spec", "overhead", "cpu"),
    ("spec", "resources", "requests", "cpu"),
]
#: (where, relative to a template, a malformed value, the end of the message).
BAD_SHAPES: list[tuple[tuple[Key, ...], Any, str]] = [
    (("spec", "containers"), "notalist", 'must be an array, got string "notalist"'),
    (("spec", "containers", 0), "x", 'must be an object, got string "x"'),
    (("spec", "containers", 0, "resources"), 5, "must be an object, got number 5"),
    (("spec", "containers", 0, "resources", "limits"), [1, 2], "must be an object, got array"),
    (("spec", "containers", 0, "resources", "requests"), "8", 'must be an object, got string "8"'),
    (("spec", "initContainers"), {"s": {}}, "must be an array, got object"),
    (("spec", "initContainers", 0), None, "must be an object, got null"),
    (("spec", "overhead"), ["cpu"], "must be an object, got array"),
    (("spec", "tolerations"), "all", 'must be an array, got string "all"'),
    (("spec", "tolerations", 0), "x", 'must be an object, got string "x"'),
    (("spec", "nodeSelector"), ["a"], "must be an object, got array"),
    (("spec", "nodeSelector", "zone"), 1, "must be a string, got number 1"),
    (("spec",), "x", 'must be an object, got string "x"'),
    (("metadata", "annotations"), ["a=b"], "must be an object, got array"),
    (("metadata", "labels"), "app=x", 'must be an object, got string "app=x"'),
]
#: Kinds with pod templates of their own.
TEMPLATED = [kind for kind, (_, templates, _) in KINDS.items() if templates]


def with_value(obj: dict[str, Any], path: tuple[Key, ...], value: Any) -> dict[str, Any]:
    """A copy of ``obj`` with ``value`` at ``path`` (missing maps added, a list index appended)."""
    obj = copy.deepcopy(obj)
    node: Any = obj
    for index, key in enumerate(path[:-1]):
        nxt = path[index + 1]
        if isinstance(node, list):
            node = node[int(key)]
            continue
        if node.get(key) is None:
            node[key] = [{}] if isinstance(nxt, int) else {}
        node = node[key]
    if isinstance(node, list):
        node[int(path[-1])] = value
    else:
        node[path[-1]] = value
    return obj


def envelope(obj: dict[str, Any], recorded: str = "v1-job-create.json", **request: Any) -> bytes:
    """The recorded API-server AdmissionReview ``recorded`` carrying ``obj`` instead (as bytes on the wire)."""
    body = json.loads((DATA / recorded).read_text())
    group, _, version = obj["apiVersion"].rpartition("/")
    kind = {"group": group, "version": version, "kind": obj["kind"]}
    resource = {"group": group, "version": version, "resource": obj["kind"].lower() + "s"}
    body["request"].update(
        kind=kind, requestKind=kind, resource=resource, requestResource=resource, name=obj["metadata"].get("name", "")
    )
    body["request"]["object"] = obj
    body["request"].update(request)
    return json.dumps(body).encode()


def answer(obj: dict[str, Any], teams: TeamIndex | None = None, **request: Any) -> ReviewOutcome:
    """What the webhook answers to ``obj`` created in the research team's namespace."""
    return review(decode_body(envelope(obj, **request)), teams or TEAMS)


def assert_refused(outcome: ReviewOutcome, path: tuple[Key, ...], message: str) -> None:
    response = outcome.response["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert "patch" not in response and outcome.patch == []
    assert outcome.plan.denials == [f"malformed object: {dotted(path)} {message}"]
    assert outcome.plan.denied_rules == ["malformed object"]


def assert_admitted(outcome: ReviewOutcome) -> None:
    assert not outcome.plan.invalid, outcome.plan.denials
    assert "malformed object" not in json.dumps(outcome.response)


# -- the AdmissionReview path ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_base_is_admitted(kind: str) -> None:
    """The bases are well formed: what the tests below refuse is the one value they change."""
    assert_admitted(answer(KINDS[kind][0]()))


COUNT_CASES = [
    pytest.param(kind, path, value, message, id=f"{kind}-{path[-1]}-{value!r}")
    for kind, (_, _, counts) in KINDS.items()
    for path in counts
    for value, message in BAD_COUNTS
]


@pytest.mark.parametrize(("kind", "path", "value", "message"), COUNT_CASES)
def test_a_malformed_count_is_refused_naming_its_path(
    kind: str, path: tuple[Key, ...], value: Any, message: str
) -> None:
    assert_refused(answer(with_value(KINDS[kind][0](), path, value)), path, message)


@pytest.mark.parametrize("kind", [k for k, (_, _, counts) in KINDS.items() if counts])
@pytest.mark.parametrize("value", [0, 3, 2**31 - 1, None, 2.0])
def test_a_well_formed_count_is_read(kind: str, value: Any) -> None:
    for path in KINDS[kind][2]:
        assert_admitted(answer(with_value(KINDS[kind][0](), path, value)))


POD_GROUP = ("metadata", "annotations", "kueue.x-k8s.io/pod-group-total-count")
JOB_MIN = ("metadata", "annotations", "kueue.x-k8s.io/job-min-parallelism")


SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("Pod", POD_GROUP),
        ("Job", JOB_MIN),
        ("Job", ("spec", "template", "metadata", "annotations", SLICE_SIZE)),
        ("JobSet", (*KINDS["JobSet"][1][0], "metadata", "annotations", SLICE_SIZE)),
        ("Pod", ("metadata", "annotations", SLICE_SIZE)),
    ],
)
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (2, "number 2"),
        ("-1", 'string "-1"'),
        ("1.5", 'string "1.5"'),
        ("two", 'string "two"'),
        ("\u0662", 'string "٢"'),
        ("0", 'string "0"'),
    ],
)
def test_a_count_kept_in_an_annotation_must_be_an_integer_string(
    kind: str, path: tuple[Key, ...], value: Any, shown: str
) -> None:
    """Kueue reads these annotations with strconv.Atoi / ParseInt and refuses a value below 1."""
    message = f'must be a string holding a positive integer (e.g. "4"), got {shown}'
    assert_refused(answer(with_value(KINDS[kind][0](), path, value)), path, message)
    assert_admitted(answer(with_value(KINDS[kind][0](), path, "3")))


GROUP_LABEL = ("metadata", "labels", "kueue.x-k8s.io/pod-group-name")
GROUP_ANNOTATION = ("metadata", "annotations", "kueue.x-k8s.io/pod-group-name")
#: Kueue v0.19.2's pod webhook (validatePodGroupMetadata) on a group name without a total or the reverse.
BOTH = (
    "Kueue v0.19.2's pod webhook refuses a Pod with one and not the other (both the "
    "'kueue.x-k8s.io/pod-group-total-count' annotation and the 'kueue.x-k8s.io/pod-group-name' label should be set)"
)


def _group_pod(labels: dict[str, Any], annotations: dict[str, Any]) -> dict[str, Any]:
    pod = KINDS["Pod"][0]()
    pod["metadata"].update(labels=labels, annotations=annotations)
    return pod


@pytest.mark.parametrize(
    ("labels", "annotations", "path", "message"),
    [
        # A group name (label, or annotation: Kueue's WorkloadIdentifierAnnotations) without a total:
        # once read as a group of 1 pod.
        ({"kueue.x-k8s.io/pod-group-name": "g"}, {}, POD_GROUP, f"must be set: {BOTH}"),
        ({}, {"kueue.x-k8s.io/pod-group-name": "g"}, POD_GROUP, f"must be set: {BOTH}"),
        # A total without a group name: once read as one podset of that many pods.
        ({}, {"kueue.x-k8s.io/pod-group-total-count": "4"}, GROUP_LABEL, f"must be set: {BOTH}"),
        (
            {"kueue.x-k8s.io/pod-group-name": ""},
            {"kueue.x-k8s.io/pod-group-total-count": "4"},
            GROUP_LABEL,
            f'must be a pod group\'s name, not empty: {BOTH}, got string ""',
        ),
        (
            {},
            {"kueue.x-k8s.io/pod-group-name": "", "kueue.x-k8s.io/pod-group-total-count": "4"},
            GROUP_LABEL,
            f"must be set: {BOTH}",
        ),
    ],
)
def test_a_pod_group_name_and_total_count_go_together(
    labels: dict[str, Any], annotations: dict[str, Any], path: tuple[Key, ...], message: str
) -> None:
    assert_refused(answer(_group_pod(labels, annotations)), path, message)


@pytest.mark.parametrize(
    ("labels", "annotations"),
    [
        ({"kueue.x-k8s.io/pod-group-name": "g"}, {}),
        ({}, {"kueue.x-k8s.io/pod-group-name": "g"}),
        # An empty annotation: Kueue's GetPodGroupName falls back to the label.
        ({"kueue.x-k8s.io/pod-group-name": "g"}, {"kueue.x-k8s.io/pod-group-name": ""}),
    ],
)
def test_a_pod_group_named_by_label_or_annotation_is_one_member_sized_by_its_total(
    labels: dict[str, Any], annotations: dict[str, Any]
) -> None:
    """Kueue v0.19.2 names a pod group by annotation too (WorkloadIdentifierAnnotations, on by
    default): such a Pod of 8 GPUs in a group of 9 was read as one podset of 9 pods and denied
    as needing 72 GPUs, more than the team's 64, though the group's other pods may need none."""
    pod = _group_pod(labels, {**annotations, "kueue.x-k8s.io/pod-group-total-count": "9"})
    [podset] = kueue_view(pod, _row("Pod")).podsets
    assert (podset.count, podset.partial) == (9, True)
    outcome = answer(pod)
    assert outcome.plan.denials == []
    assert outcome.plan.warnings == [
        "queue: the workload may never be admitted: were all 9 pods of its pod group (pod-group-total-count) "
        "like this one, they would need 72 nvidia.com/gpu, more than team 'ml''s nominalQuota + "
        "borrowingLimit of 64"
    ]


QUANTITY_CASES = [
    pytest.param(kind, field, value, message, id=f"{kind}-{'.'.join(map(str, field[1:]))}-{value!r}")
    for kind in TEMPLATED
    for field in QUANTITY_FIELDS
    for value, message in BAD_QUANTITIES
]


@pytest.mark.parametrize(("kind", "field", "value", "message"), QUANTITY_CASES)
def test_a_malformed_quantity_is_refused_naming_its_path(
    kind: str, field: tuple[Key, ...], value: Any, message: str
) -> None:
    build, templates, _ = KINDS[kind]
    path = (*templates[0], *field)
    assert_refused(answer(with_value(build(), path, value)), path, message)


#: Well-formed quantities of any resource, and those only a resource measured in fractions takes.
WHOLE_QUANTITIES: list[Any] = ["64Gi", 2, 2.0, "0", "1e3", "+4", "2000m", None]
FRACTIONAL_QUANTITIES: list[Any] = ["500m", "0.5", 0.5, 1.25, "1e-3"]


@pytest.mark.parametrize("kind", TEMPLATED)
@pytest.mark.parametrize("value", WHOLE_QUANTITIES)
def test_a_well_formed_quantity_is_read(kind: str, value: Any) -> None:
    build, templates, _ = KINDS[kind]
    for field in QUANTITY_FIELDS:
        assert_admitted(answer(with_value(build(), (*templates[0], *field), value)))


def _row(kind: str) -> WorkloadKind:
    obj = KINDS[kind][0]()
    row = find_kind(str(obj["apiVersion"]), kind)
    assert row is not None
    return row


def _queued(obj: dict[str, Any], kind: str, suspend: bool | None = None) -> dict[str, Any]:
    """``obj`` submitted with a queue label of the user's (and ``suspend`` set when not None)."""
    row = _row(kind)
    obj = with_value(obj, (*row.labels_at, "labels", "kueue.x-k8s.io/queue-name"), "user-queue")
    if suspend is not None and row.suspend is not None:
        obj = with_value(obj, row.suspend, suspend)
    return obj


def _schema_typed(kind: str) -> bool:
    """A custom resource whose pod templates its CRD types (an AppWrapper keeps its components
    unchecked by its schema; they become Jobs, whose ``resource.Quantity`` takes 0.5)."""
    return not _row(kind).built_in and kind != "AppWrapper"


#: Where a fractional quantity may go: every field of QUANTITY_FIELDS but the extended resources'.
FRACTIONAL_FIELDS = [field for field in QUANTITY_FIELDS if not is_extended_resource(str(field[-1]))]


@pytest.mark.parametrize("kind", TEMPLATED)
@pytest.mark.parametrize("value", FRACTIONAL_QUANTITIES)
def test_a_fractional_quantity_is_read_in_a_kind_kueue_re_encodes(kind: str, value: Any) -> None:
    """``cpu: 0.5`` in a custom resource submitted with a queue label (Kueue's XGBoostJob sample):
    Kueue's webhook suspends it and so re-encodes it (0.5 → "500m") before the CRD's int-or-string
    schema is checked, and the API server takes it (e2e/test_malformed.py). It used to be refused as
    malformed. A built-in kind's ``resource.Quantity`` takes it with or without a label; a quantity
    string anywhere."""
    build, templates, _ = KINDS[kind]
    for field in FRACTIONAL_FIELDS:
        obj = with_value(build(), (*templates[0], *field), value)
        if type(value) is float and _schema_typed(kind):
            obj = _queued(obj, kind)
        assert_admitted(answer(obj))


@pytest.mark.parametrize("kind", [kind for kind in TEMPLATED if _schema_typed(kind)])
@pytest.mark.parametrize("suspend", [None, True])
def test_a_fractional_json_number_kueue_leaves_alone_is_refused_in_a_custom_resource(
    kind: str, suspend: bool | None
) -> None:
    """With no queue label of the user's (the governor adds one, and Kueue's webhook then changes
    nothing), or already suspended, Kueue does not re-encode the object and the CRD's schema refuses
    ``cpu: 0.5`` after the webhooks (e2e): refused here, naming the path and the remedy."""
    build, templates, _ = KINDS[kind]
    path = (*templates[0], "spec", "containers", 0, "resources", "requests", "cpu")
    obj = with_value(build(), path, 0.5)
    if suspend is not None:
        if _row(kind).suspend is None:
            pytest.skip(f"{kind} has no suspend field: Kueue gates its pods")
        obj = _queued(obj, kind, suspend)
    assert_refused(answer(obj), path, f"must be {FRACTIONAL_NUMBER}, got number 0.5")


def test_a_negative_json_number_is_refused() -> None:
    build, templates, _ = KINDS["PyTorchJob"]
    path = (*templates[0], "spec", "containers", 0, "resources", "requests", "cpu")
    assert_refused(answer(with_value(build(), path, -0.5)), path, f"{NEGATIVE}, got number -0.5")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_number_that_is_not_finite_is_no_quantity(value: float) -> None:
    """Strict JSON carries no NaN or infinity (``decode_body`` refuses them); a YAML ``.nan`` or
    ``.inf`` in ``kgov mutate`` reaches the quantity reader and is refused there."""
    problems: Problems = []
    assert quantity(value, ("cpu",), problems) is None
    assert [p.expected for p in problems] == ["a Kubernetes quantity (e.g. 8, 500m, 64Gi)"]


TOO_LARGE = "must be a Kubernetes quantity of at most 2^63-1 = 9223372036854775807 (the largest Kubernetes represents)"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("1e400", 'string "1e400"'),
        ("1E+9999", 'string "1E+9999"'),
        ("99999999999999999999Ei", 'string "99999999999999999999Ei"'),
        ("9223372036854775808", 'string "9223372036854775808"'),
        (10**30, "number 1000000000000000000000000000000"),
    ],
)
def test_a_quantity_beyond_2_63_is_malformed(value: Any, shown: str) -> None:
    """Regression: ``"1E+9999"`` GPUs passed as a real request (denied only as too large for the
    quota). Kubernetes' resource.Quantity holds at most 2^63-1 in base units."""
    build, templates, _ = KINDS["PyTorchJob"]
    path = (*templates[0], "spec", "containers", 0, "resources", "requests", "cpu")
    assert_refused(answer(with_value(build(), path, value)), path, f"{TOO_LARGE}, got {shown}")


EXTENDED = "must be a whole number (nvidia.com/gpu is an extended resource, which Kubernetes takes in whole units only)"


@pytest.mark.parametrize("kind", TEMPLATED)
@pytest.mark.parametrize("value", FRACTIONAL_QUANTITIES)
def test_a_fractional_extended_resource_is_refused_naming_its_path(kind: str, value: Any) -> None:
    """``nvidia.com/gpu: "500m"`` used to pass silently: the API server refuses such a Pod
    (``ValidateResourceQuantityValue``: an extended resource is an integer quantity), so a Job is
    refused after the webhooks and a custom resource's pods are never created (stranded)."""
    build, templates, _ = KINDS[kind]
    for field in QUANTITY_FIELDS[:2]:
        path = (*templates[0], *field)
        assert_refused(answer(with_value(build(), path, value)), path, f"{EXTENDED}, got {describe(value)}")


@pytest.mark.parametrize(
    ("name", "extended"),
    [
        ("nvidia.com/gpu", True),
        ("vendor.example/my_res.v2", True),
        ("cpu", False),
        ("memory", False),
        ("hugepages-2Mi", False),  # native (no domain): fractions are Kubernetes' business, not ours
        ("requests.nvidia.com/gpu", False),  # the quota form, not an extended resource name
        ("kubernetes.io/batteries", False),
        ("example.kubernetes.io/foo", False),  # kubernetes.io/ anywhere in the name
        ("a/b/c", False),
        ("Example.com/gpu", False),  # the prefix must be a lower-case DNS subdomain
        ("example.com/", False),
        ("example.com/-gpu", False),
        ("example.com/" + "g" * 63, True),
        ("example.com/" + "g" * 64, False),
        ("e" * 240 + ".com/gpu", True),  # "requests." + 244 = 253 characters
        ("e" * 241 + ".com/gpu", False),
    ],
)
def test_extended_resource_names_are_kubernetes(name: str, extended: bool) -> None:
    """Kubernetes' ``IsExtendedResourceName`` (pkg/apis/core/helper), which with
    ``IsIntegerResourceName`` decides which quantities must be whole."""
    assert is_extended_resource(name) is extended


@pytest.mark.parametrize("value", ["500m", 0.5])
def test_pod_level_and_overhead_extended_resources_must_be_whole_too(value: Any) -> None:
    build, templates, _ = KINDS["Job"]
    for field in (
        ("spec", "overhead", "example.com/foo"),
        ("spec", "initContainers", 0, "resources", "limits", "example.com/foo"),
    ):
        path = (*templates[0], *field)
        message = EXTENDED.replace("nvidia.com/gpu", "example.com/foo")
        assert_refused(answer(with_value(build(), path, value)), path, f"{message}, got {describe(value)}")


SHAPE_CASES = [
    pytest.param(kind, field, value, message, id=f"{kind}-{'.'.join(map(str, field))}")
    for kind in TEMPLATED
    for field, value, message in BAD_SHAPES
]


@pytest.mark.parametrize(("kind", "field", "value", "message"), SHAPE_CASES)
def test_a_malformed_list_or_map_of_a_pod_is_refused_naming_its_path(
    kind: str, field: tuple[Key, ...], value: Any, message: str
) -> None:
    build, templates, _ = KINDS[kind]
    path = (*templates[0], *field)
    assert_refused(answer(with_value(build(), path, value)), path, message)


@pytest.mark.parametrize(
    ("kind", "path", "value", "message"),
    [
        ("PyTorchJob", ("spec", "pytorchReplicaSpecs"), [{"replicas": 1}], "must be an object, got array"),
        ("PyTorchJob", ("spec", "pytorchReplicaSpecs", "Worker", "template"), "t", 'must be an object, got string "t"'),
        ("JobSet", ("spec", "replicatedJobs"), {"w": {}}, "must be an array, got object"),
        ("JobSet", ("spec", "replicatedJobs", 0), "w", 'must be an object, got string "w"'),
        ("RayCluster", ("spec", "workerGroupSpecs"), "g", 'must be an array, got string "g"'),
        ("HyperPodPyTorchJob", ("spec", "replicaSpecs"), 3, "must be an array, got number 3"),
        ("Job", ("spec",), [], "must be an object, got array"),
        ("PyTorchJob", ("spec", "runPolicy"), "strict", 'must be an object, got string "strict"'),
        ("SparkApplication", ("spec", "dynamicAllocation"), True, "must be an object, got boolean true"),
        ("Job", ("spec", "suspend"), "yes", 'must be a boolean, got string "yes"'),
        ("PyTorchJob", ("spec", "runPolicy", "suspend"), 0, "must be a boolean, got number 0"),
        ("AppWrapper", ("spec", "components"), {"c": 1}, "must be an array, got object"),
        ("AppWrapper", ("spec", "components", 0, "podSets"), "all", 'must be an array, got string "all"'),
        (
            "AppWrapper",
            ("spec", "components", 0, "podSets", 0, "path"),
            7,
            "must be a string (the path of a pod template), got number 7",
        ),
        (
            "AppWrapper",
            ("spec", "components", 0, "podSets", 0, "path"),
            "template.spec.nothing",
            'must be the path of a pod template in the component, got string "template.spec.nothing"',
        ),
        ("SparkApplication", ("spec", "executor"), "big", 'must be an object, got string "big"'),
        ("SparkApplication", ("spec", "executor", "tolerations"), {}, "must be an array, got object"),
    ],
)
def test_a_malformed_list_or_map_of_a_workload_is_refused_naming_its_path(
    kind: str, path: tuple[Key, ...], value: Any, message: str
) -> None:
    assert_refused(answer(with_value(KINDS[kind][0](), path, value)), path, message)


def test_every_malformed_value_is_named_at_once() -> None:
    """The user's PyTorchJob: all four faults in one answer, not one per attempt."""
    obj = KINDS["PyTorchJob"][0]()
    worker = obj["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["replicas"] = "abc"
    worker["template"]["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "-8"}, "limits": [1]}
    obj["spec"]["pytorchReplicaSpecs"]["Master"] = {"replicas": -7, "template": {"spec": {"containers": "notalist"}}}
    at = "spec.pytorchReplicaSpecs"
    resources = f"{at}.Worker.template.spec.containers[0].resources"
    assert sorted(answer(obj).plan.denials) == sorted(
        f"malformed object: {m}"
        for m in [
            f'{at}.Worker.replicas {COUNT}, got string "abc"',
            f"{resources}.limits must be an object, got array",
            f'{resources}.requests.nvidia.com/gpu {NEGATIVE}, got string "-8"',
            f"{at}.Master.replicas {COUNT}, got number -7",
            f'{at}.Master.template.spec.containers must be an array, got string "notalist"',
        ]
    )


@pytest.mark.parametrize("enforcement", ["default", "warn", "enforce"])
def test_a_malformed_object_is_refused_under_every_enforcement(enforcement: str) -> None:
    """docs/rules.md: any malformed object is answered with a denial naming the path; the team's
    enforcement governs policy values, not whether an object can be read at all."""
    policy = {
        "queue": {"enforcement": enforcement},
        "podPriority": {"default": "low", "allowed": ["low"], "enforcement": enforcement},
        "topology": {"mode": "auto", "enforcement": enforcement},
    }
    path = ("spec", "replicatedJobs", 0, "replicas")
    outcome = answer(with_value(KINDS["JobSet"][0](), path, "abc"), _teams(policy))
    assert_refused(outcome, path, f'{COUNT}, got string "abc"')


def test_the_v1beta1_envelope_gets_the_same_refusal() -> None:
    path = ("spec", "replicatedJobs", 0, "template", "spec", "parallelism")
    obj = with_value(KINDS["JobSet"][0](), path, -3)
    outcome = review(decode_body(envelope(obj, "v1beta1-jobset-create.json")), TEAMS)
    assert outcome.response["apiVersion"] == "admission.k8s.io/v1beta1"
    assert_refused(outcome, path, f"{COUNT}, got number -3")


def test_an_update_is_refused_for_a_malformed_value_it_brings_not_for_one_stored() -> None:
    """UPDATE never blocks a value left as it was (SPEC §3); a malformed one it introduces is refused."""
    path = ("spec", "replicatedJobs", 0, "replicas")
    good = KINDS["JobSet"][0]()
    bad = with_value(good, path, "abc")
    introduced = review(review_body(bad, NAMESPACE, operation="UPDATE", old=good), TEAMS)
    assert_refused(introduced, path, f'{COUNT}, got string "abc"')
    stored = with_value(bad, ("metadata", "labels"), {"app": "y"})
    assert_admitted(review(review_body(stored, NAMESPACE, operation="UPDATE", old=bad), TEAMS))
    # A pod template's annotations turned into a list by an update (read by the UPDATE rules too).
    annotations = ("spec", "replicatedJobs", 0, "template", "spec", "template", "metadata", "annotations")
    listed = with_value(good, annotations, ["a"])
    outcome = review(review_body(listed, NAMESPACE, operation="UPDATE", old=good), TEAMS)
    assert_refused(outcome, annotations, "must be an object, got array")


def test_a_podset_added_next_to_a_stored_malformed_value_is_warned_not_silently_bare() -> None:
    """An object stored before the webhook with replicas -7 (its CRD schema takes it): an update
    adding a podset is not refused for the old value, and says the new podset got no policy."""
    stored = with_value(KINDS["JobSet"][0](), ("spec", "replicatedJobs", 0, "replicas"), -7)
    grown = copy.deepcopy(stored)
    grown["spec"]["replicatedJobs"].append({**copy.deepcopy(grown["spec"]["replicatedJobs"][0]), "name": "x"})
    grown["spec"]["replicatedJobs"][1]["replicas"] = 1
    teams = _teams({"queue": {}, "podPriority": {"default": "low", "allowed": ["low"]}})
    outcome = review(review_body(grown, NAMESPACE, operation="UPDATE", old=stored), teams)
    assert outcome.plan.allowed and not outcome.plan.invalid
    assert outcome.plan.warnings == [
        "malformed object: podset 'x' added by this update gets no policy: "
        f"spec.replicatedJobs[0].replicas {COUNT}, got number -7"
    ]


async def test_the_server_answers_a_malformed_count_with_a_denial(start_server: Any) -> None:
    """Over TLS, as the API server calls it: HTTP 200 with a 422 denial, never a 500."""
    server = await start_server()  # the bundled platform: NAMESPACE is the research team's
    path = ("spec", "pytorchReplicaSpecs", "Worker", "replicas")
    body = envelope(with_value(KINDS["PyTorchJob"][0](), path, "abc"))
    connector = aiohttp.TCPConnector(ssl=server.ssl_context)
    headers = {"Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(server.url("/mutate"), data=body, headers=headers) as resp,
    ):
        assert resp.status == 200
        reply = await resp.json()
    response = reply["response"]
    assert response["allowed"] is False and response["status"]["code"] == 422
    assert response["status"]["message"] == (
        f'kueue-governor: malformed object: spec.pytorchReplicaSpecs.Worker.replicas {COUNT}, got string "abc"'
    )


# -- kgov mutate ----------------------------------------------------------------------------------


def _mutate(tmp_path: Path, documents: list[Any], *flags: str) -> Any:
    manifest = tmp_path / "x.yaml"
    manifest.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    args = ["mutate", "--platform", str(PLATFORM), "-n", NAMESPACE, "-f", str(manifest), *flags]
    return CliRunner().invoke(main, args, catch_exceptions=False)


CLI_CASES = (
    [
        pytest.param(kind, KINDS[kind][2][0], "abc", f'{COUNT}, got string "abc"', id=f"{kind}-count")
        for kind in KINDS
        if KINDS[kind][2]
    ]
    + [
        pytest.param(
            kind,
            (*KINDS[kind][1][0], *QUANTITY_FIELDS[0]),
            "8Xi",
            f'{QUANTITY}, got string "8Xi"',
            id=f"{kind}-quantity",
        )
        for kind in TEMPLATED
    ]
    + [
        pytest.param(
            kind,
            (*KINDS[kind][1][0], "spec", "containers"),
            "notalist",
            'must be an array, got string "notalist"',
            id=f"{kind}-containers",
        )
        for kind in TEMPLATED
    ]
)


@pytest.mark.parametrize(("kind", "path", "value", "message"), CLI_CASES)
def test_kgov_mutate_refuses_a_malformed_document_naming_the_path(
    tmp_path: Path, kind: str, path: tuple[Key, ...], value: Any, message: str
) -> None:
    """`kgov mutate` (no API server in front): exit 1, the path on stderr, nothing printed for it."""
    good = KINDS["Job"][0]()
    result = _mutate(tmp_path, [with_value(KINDS[kind][0](), path, value), good])
    assert result.exit_code == 1, result.stderr
    assert f"kgov mutate: document 1 denied: malformed object: {dotted(path)} {message}\n" in result.stderr
    assert "document 2" not in result.stderr
    printed = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in printed] == ["Job"]  # only the well-formed document
    patches = json.loads(_mutate(tmp_path, [with_value(KINDS[kind][0](), path, value)], "--patch").stdout)
    assert patches == [None]


def test_kgov_mutate_refuses_the_users_manifest(tmp_path: Path) -> None:
    """The reported run: every fault named, exit 1, the List's string item named by its path (exit 2:
    the file holds something that is no Kubernetes object, as kubectl refuses it)."""
    pytorch = KINDS["PyTorchJob"][0]()
    pytorch["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "abc"
    job = with_value(KINDS["Job"][0](), ("spec", "parallelism"), -3)
    job["spec"]["completions"] = True
    result = _mutate(tmp_path, [pytorch, {"apiVersion": "v1", "kind": "List", "items": [job]}])
    assert result.exit_code == 1
    assert (
        "document 1 denied: malformed object: spec.pytorchReplicaSpecs.Worker.replicas must be a non-negative "
        'integer, got string "abc"'
    ) in result.stderr
    assert "kgov mutate: document 2 item 1 denied, 2 reasons:\n" in result.stderr
    assert f"\n  malformed object: spec.parallelism {COUNT}, got number -3\n" in result.stderr
    assert f"\n  malformed object: spec.completions {COUNT}, got boolean true\n" in result.stderr
    listed = _mutate(tmp_path, [{"apiVersion": "v1", "kind": "List", "items": [KINDS["Job"][0](), "x"]}])
    assert listed.exit_code == 2
    assert (
        'kgov mutate: document 1 item 2 is not a Kubernetes object (needs apiVersion and kind): items[1] is string "x"'
    ) in listed.stderr


# -- labels and annotations: string maps ----------------------------------------------------------


def _metadata_paths(kind: str) -> list[tuple[Key, ...]]:
    """Where ``kind`` keeps labels and annotations: its own metadata and its first pod template's."""
    row = _row(kind)
    template = KINDS[kind][1][0] if KINDS[kind][1] else None
    paths: list[tuple[Key, ...]] = [(*row.labels_at, "labels"), ("metadata", "annotations")]
    if template is not None and row.podsets:
        layout = row.podsets[0].layout
        paths += [(*template, *layout.labels), (*template, *layout.annotations)]
    return paths


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize(("value", "shown"), [(5, "number 5"), (True, "boolean true"), ({"a": "b"}, "object")])
@pytest.mark.parametrize("enforcement", ["enforce", "warn"])
def test_a_label_or_annotation_that_is_not_a_string_is_refused_naming_its_path(
    kind: str, value: Any, shown: str, enforcement: str
) -> None:
    """``metadata.labels["kueue.x-k8s.io/queue-name"]: 5`` used to be read as "LocalQueue 5 is not
    allowed" (and passed under ``warn``): labels and annotations are ``map[string]string`` in
    Kubernetes, so the object is malformed, whatever the enforcement."""
    teams = _teams({"queue": {"enforcement": enforcement}})
    for at in _metadata_paths(kind):
        key = "kueue.x-k8s.io/queue-name" if at[-1] == "labels" else "team/owner"
        path = (*at, key)
        outcome = answer(with_value(KINDS[kind][0](), path, value), teams=teams)
        assert_refused(outcome, path, f"must be a string, got {shown}")
