"""Malformed counts, quantities and lists on a real API server, with Kueue's webhooks and ours.

Each case is created twice (``dryRun=All``: nothing is stored):

- in a fresh namespace of no team, where the governor is not involved: the answer is the API
  server's (decoding, the CRD's schema, validation) and Kueue's own webhook's, which decodes the
  object into its Go type. This is the oracle: what Kubernetes and Kueue make of the value;
- in research's namespace, where the governor answers: a custom resource reaches it before its
  schema is checked, and it must refuse with ``malformed object: <path> …`` (HTTP 422).

The oracle refuses every wrong JSON type and every string where a number belongs. It takes
negative counts and requests in these CRDs (their schemas set no minimum): we refuse them all the
same, as Kubernetes refuses them in the Jobs and Pods such a workload is made of, and Kueue cannot
give a podset a negative count. It also takes a fractional extended resource
(``nvidia.com/gpu: "500m"``), which the API server refuses in every Pod made from it, and a Job
with it: we refuse it. A fractional JSON number (``cpu: 0.5``) is refused by the CRD's schema unless Kueue's webhook
re-encodes the object first, which it does only when it changes it (a PyTorchJob submitted with a
queue label and not suspended): we refuse it in the other cases, read it in those.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any

import pytest
from kubernetes_asyncio.dynamic import DynamicClient

from e2e.support import Refused, create_with_warnings

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

RESEARCH = "hyperpod-ns-research"
DENIED_PREFIX = 'admission webhook "governor.kueue-governor.io" denied the request: kueue-governor: '
GPU = "nvidia.com/gpu"
COUNT = "must be a non-negative integer"
QUANTITY = "must be a Kubernetes quantity (e.g. 8, 500m, 64Gi)"
NEGATIVE = "must be a non-negative quantity (e.g. 8, 500m, 64Gi)"
FRACTIONAL = (
    'a whole number or a quantity string (e.g. 8, "500m", "64Gi"): the CRD\'s int-or-string schema '
    "refuses a fractional JSON number, which Kueue's webhook re-encodes only in a workload submitted "
    "with a queue label"
)
EXTENDED = f"must be a whole number ({GPU} is an extended resource, which Kubernetes takes in whole units only)"


def _template(restart_policy: str = "Never") -> dict[str, Any]:
    return {
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", GPU: "1"}, "limits": {GPU: "1"}},
                }
            ],
        }
    }


def _bases() -> dict[str, dict[str, Any]]:
    name = f"malformed-{secrets.token_hex(3)}"
    return {
        "Job": {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {"parallelism": 1, "completions": 1, "template": _template()},
        },
        "JobSet": {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "w",
                        "replicas": 1,
                        "template": {"spec": {"parallelism": 1, "completions": 1, "template": _template()}},
                    }
                ]
            },
        },
        "PyTorchJob": {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": _template("OnFailure")}
                }
            },
        },
        "RayCluster": {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": name},
            "spec": {
                "headGroupSpec": {"rayStartParams": {}, "template": _template("Always")},
                "workerGroupSpecs": [
                    {
                        "groupName": "g",
                        "replicas": 1,
                        "minReplicas": 1,
                        "maxReplicas": 1,
                        "numOfHosts": 1,
                        "rayStartParams": {},
                        "template": _template("Always"),
                    }
                ],
            },
        },
        "LeaderWorkerSet": {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": name},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": _template("Always")}},
        },
    }


def _with(obj: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    node: Any = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return obj


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


JOBSET_POD = ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec")
PYTORCH_POD = ("spec", "pytorchReplicaSpecs", "Master", "template", "spec")
#: (kind, path, value, our message's tail, refused where the governor is not involved).
CRD_CASES: list[tuple[str, tuple[str | int, ...], Any, str, bool]] = [
    ("PyTorchJob", ("spec", "pytorchReplicaSpecs", "Master", "replicas"), "abc", f'{COUNT}, got string "abc"', True),
    ("PyTorchJob", ("spec", "pytorchReplicaSpecs", "Master", "replicas"), -7, f"{COUNT}, got number -7", False),
    ("PyTorchJob", ("spec", "pytorchReplicaSpecs", "Master", "replicas"), 1.5, f"{COUNT}, got number 1.5", True),
    ("JobSet", ("spec", "replicatedJobs", 0, "replicas"), "2", f'{COUNT}, got string "2"', True),
    (
        "JobSet",
        ("spec", "replicatedJobs", 0, "template", "spec", "parallelism"),
        True,
        f"{COUNT}, got boolean true",
        True,
    ),
    ("JobSet", ("spec", "replicatedJobs", 0, "template", "spec", "completions"), -3, f"{COUNT}, got number -3", False),
    ("RayCluster", ("spec", "workerGroupSpecs", 0, "numOfHosts"), "1", f'{COUNT}, got string "1"', True),
    ("RayCluster", ("spec", "workerGroupSpecs", 0, "maxReplicas"), 2.5, f"{COUNT}, got number 2.5", True),
    ("LeaderWorkerSet", ("spec", "leaderWorkerTemplate", "size"), "2", f'{COUNT}, got string "2"', True),
    (
        "JobSet",
        (*JOBSET_POD, "containers", 0, "resources", "requests", GPU),
        "8Xi",
        f'{QUANTITY}, got string "8Xi"',
        True,
    ),
    (
        "JobSet",
        (*JOBSET_POD, "containers", 0, "resources", "requests", GPU),
        "-8",
        f'{NEGATIVE}, got string "-8"',
        False,
    ),
    ("JobSet", (*JOBSET_POD, "containers", 0, "resources", "limits"), [1, 2], "must be an object, got array", True),
    ("PyTorchJob", (*PYTORCH_POD, "containers"), "notalist", 'must be an array, got string "notalist"', True),
    # A fractional JSON number with no queue label of the user's: Kueue's webhook does not re-encode
    # it (the governor adds the label, Kueue then changes nothing) and the CRD's schema refuses it.
    (
        "PyTorchJob",
        (*PYTORCH_POD, "containers", 0, "resources", "requests", "cpu"),
        0.5,
        f"must be {FRACTIONAL}, got number 0.5",
        True,
    ),
    # A fractional extended resource: the CRD takes it, but the API server would refuse every pod.
    (
        "PyTorchJob",
        (*PYTORCH_POD, "containers", 0, "resources", "requests", GPU),
        "500m",
        f'{EXTENDED}, got string "500m"',
        False,
    ),
]


@pytest.mark.parametrize(
    ("kind", "path", "value", "message", "refused_outside"),
    CRD_CASES,
    ids=[f"{kind}-{path[-1]}-{value!r}" for kind, path, value, _, _ in CRD_CASES],
)
async def test_a_malformed_custom_resource_is_refused_by_path(
    dynamic: DynamicClient,
    namespace: str,
    kind: str,
    path: tuple[str | int, ...],
    value: Any,
    message: str,
    refused_outside: bool,
) -> None:
    body = _with(_bases()[kind], path, value)
    outside = copy.deepcopy(body)
    outside["metadata"]["namespace"] = namespace
    try:
        await create_with_warnings(dynamic, outside, dry_run=True)
        refused = False
    except Refused as error:
        refused = True
        assert "kueue-governor" not in str(error.status.get("message"))
    assert refused is refused_outside, f"{kind} {_dotted(path)}={value!r} outside the teams: refused {refused}"

    body["metadata"]["namespace"] = RESEARCH
    with pytest.raises(Refused) as denied:
        await create_with_warnings(dynamic, body, dry_run=True)
    status = denied.value.status
    assert status["code"] == 422
    assert status["message"] == f"{DENIED_PREFIX}malformed object: {_dotted(path)} {message}"


BUILT_IN_CASES: list[tuple[tuple[str | int, ...], Any]] = [
    (("spec", "parallelism"), "2"),
    (("spec", "parallelism"), 1.5),
    (("spec", "completions"), True),
    (("spec", "parallelism"), -3),
    (("spec", "template", "spec", "containers", 0, "resources", "requests", GPU), "8Xi"),
    (("spec", "template", "spec", "containers", 0, "resources", "requests", GPU), "-8"),
    (("spec", "template", "spec", "containers", 0, "resources", "requests", GPU), "500m"),
    (("spec", "template", "spec", "containers", 0, "resources", "limits"), [1, 2]),
    (("spec", "template", "spec", "containers"), "notalist"),
]


@pytest.mark.parametrize(("path", "value"), BUILT_IN_CASES, ids=[f"{p[-1]}-{v!r}" for p, v in BUILT_IN_CASES])
async def test_kubernetes_refuses_what_we_refuse_in_a_built_in_kind(
    dynamic: DynamicClient, namespace: str, path: tuple[str | int, ...], value: Any
) -> None:
    """The oracle for our rule: the API server refuses each of these in a Job by itself (decoding or
    validation), in any namespace; in research's it is refused too, by whichever comes first."""
    for where in (namespace, RESEARCH):
        body = _with(_bases()["Job"], path, value)
        body["metadata"]["namespace"] = where
        with pytest.raises(Refused):
            await create_with_warnings(dynamic, body, dry_run=True)


@pytest.mark.parametrize("kind", ["PyTorchJob", "JobSet", "Job"])
async def test_well_formed_edge_values_are_admitted(dynamic: DynamicClient, kind: str) -> None:
    """A whole number written 1.0 or 2.0 (sent as such: the CRD's integer schema takes it), a count
    of 0, and a quantity given as a JSON number: 0.5 in a Job, and in a PyTorchJob submitted with a
    queue label (Kueue's webhook suspends it and so re-encodes 0.5 as "500m"): accepted by the API
    server and by us."""
    body = _bases()[kind]
    body["metadata"]["namespace"] = RESEARCH
    if kind == "PyTorchJob":
        body = _with(body, ("spec", "pytorchReplicaSpecs", "Master", "replicas"), 1.0)
        body = _with(body, (*PYTORCH_POD, "containers", 0, "resources", "requests", "cpu"), 0.5)
        body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "hyperpod-ns-research-localqueue"}
    elif kind == "Job":  # a built-in kind's resource.Quantity takes a fractional JSON number
        body = _with(body, ("spec", "template", "spec", "containers", 0, "resources", "requests", "cpu"), 0.5)
    else:
        body = _with(body, ("spec", "replicatedJobs", 0, "replicas"), 2.0)
        body = _with(body, ("spec", "replicatedJobs", 0, "template", "spec", "parallelism"), 0)
        body = _with(body, (*JOBSET_POD, "containers", 0, "resources", "requests", "cpu"), 2)
    created = await create_with_warnings(dynamic, body, dry_run=True)
    assert created.obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "hyperpod-ns-research-localqueue"


@pytest.mark.parametrize(
    ("queue", "suspend", "taken"), [(None, None, False), ("user-queue", None, True), ("user-queue", True, False)]
)
async def test_kueue_re_encodes_a_fractional_json_quantity_only_when_it_changes_the_object(
    dynamic: DynamicClient, namespace: str, queue: str | None, suspend: bool | None, taken: bool
) -> None:
    """The oracle for reading ``cpu: 0.5`` in a custom resource: outside the teams (the governor not
    involved), Kueue's webhook answers with a patch, re-encoding 0.5 as "500m", only when its
    defaulting changes the PyTorchJob: with a queue label, suspending it. With no label, or already
    suspended, the CRD's int-or-string schema refuses the number."""
    body = _with(_bases()["PyTorchJob"], (*PYTORCH_POD, "containers", 0, "resources", "requests", "cpu"), 0.5)
    body["metadata"]["namespace"] = namespace
    if queue is not None:
        body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    if suspend is not None:
        body["spec"]["runPolicy"] = {"suspend": suspend}
    if not taken:
        with pytest.raises(Refused) as refused:
            await create_with_warnings(dynamic, body, dry_run=True)
        assert "must be of type integer,string" in str(refused.value.status.get("message"))
        return
    created = await create_with_warnings(dynamic, body, dry_run=True)
    requests = created.obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]
    assert requests["requests"]["cpu"] == "500m"
