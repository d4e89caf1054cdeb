"""AdmissionReviews recorded from a real kube-apiserver, replayed against the real server.

``tests/data/admission/*.json`` are the bodies kube-apiserver v1.36 sent to a webhook registered
before ``kgov-governor`` in the e2e cluster (``make record-reviews``, e2e/record.py): kubectl
applying a Job in ``hyperpod-ns-research`` (dry-run, then for real), Kueue's UPDATE that starts
it, a Pod the Job controller made for it, a kubectl label change to another team's queue, and a
JobSet through a webhook that takes AdmissionReview v1beta1 only. They are replayed here over TLS
to :func:`webhook.serve.server.run_server` with the bundled platform. The scrubbing of volatile values
(:func:`e2e.record.scrub`) is tested too.
"""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import RunningServer, ServerFactory

from e2e.record import REVIEWS, SCRUBBED_TIME, ReviewRecorder, scrub

DATA = Path(__file__).resolve().parent / "data" / "admission"
TIMEOUT = aiohttp.ClientTimeout(total=10)


def fixture(name: str) -> dict[str, Any]:
    review = json.loads((DATA / name).read_text())
    assert isinstance(review, dict)
    return review


# -- scrubbing --------------------------------------------------------------------------------------
JOB_UID = "9b2d4c6e-1a3f-4e5b-8c7d-0f1e2d3c4b5a"
REQUEST_UID = "3c0f5e2a-8d0b-4b8e-9a53-6f1d2c7e4a10"


def recorded_pair() -> dict[str, Any]:
    pod = {
        "request": {
            "uid": REQUEST_UID,
            "name": "train-k8gcr",
            "object": {
                "spec": {"volumes": [{"name": "kube-api-access-j7pxq"}]},
                "metadata": {
                    "generateName": "train-",
                    "name": "train-k8gcr",
                    "resourceVersion": "900",
                    "ownerReferences": [{"kind": "Job", "name": "train", "uid": JOB_UID}],
                    "labels": {"controller-uid": JOB_UID},
                    "annotations": {"kueue.x-k8s.io/workload": "job-train-3b813"},
                    "managedFields": [
                        {"time": "2025-03-14T09:26:53.123456Z", "fieldsV1": {f'k:{{"uid":"{JOB_UID}"}}': {}}}
                    ],
                },
            },
        }
    }
    job = {"metadata": {"uid": JOB_UID, "resourceVersion": "48213", "creationTimestamp": "2025-03-14T09:26:53Z"}}
    return {"b-pod.json": pod, "a-job.json": job}


def test_scrub_numbers_uids_in_order_and_keeps_them_consistent() -> None:
    scrubbed = scrub(recorded_pair())
    job_uid, request_uid = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
    assert scrubbed["a-job.json"]["metadata"]["uid"] == job_uid  # a-job.json is taken first
    pod = scrubbed["b-pod.json"]["request"]
    assert pod["uid"] == request_uid
    metadata = pod["object"]["metadata"]
    assert metadata["ownerReferences"][0]["uid"] == job_uid
    assert metadata["labels"]["controller-uid"] == job_uid
    assert list(metadata["managedFields"][0]["fieldsV1"]) == [f'k:{{"uid":"{job_uid}"}}']


def test_scrub_times_versions_and_generated_names() -> None:
    scrubbed = scrub(recorded_pair())
    job = scrubbed["a-job.json"]["metadata"]
    pod = scrubbed["b-pod.json"]["request"]
    assert job["creationTimestamp"] == SCRUBBED_TIME
    assert pod["object"]["metadata"]["managedFields"][0]["time"] == SCRUBBED_TIME
    # Numbered in order of appearance: a-job.json is taken first.
    assert (job["resourceVersion"], pod["object"]["metadata"]["resourceVersion"]) == ("1000", "1001")
    assert pod["name"] == pod["object"]["metadata"]["name"] == "train-xxxxx"
    assert pod["object"]["metadata"]["annotations"] == {"kueue.x-k8s.io/workload": "job-train-xxxxx"}
    assert pod["object"]["spec"]["volumes"][0]["name"] == "kube-api-access-xxxxx"


def test_scrub_is_deterministic_and_idempotent() -> None:
    once = scrub(recorded_pair())
    assert scrub(recorded_pair()) == once
    assert scrub(once) == once


def test_committed_fixtures_are_scrubbed_and_complete() -> None:
    assert sorted(path.name for path in DATA.glob("*.json")) == sorted(REVIEWS)
    reviews = {name: fixture(name) for name in REVIEWS}
    assert scrub(reviews) == reviews
    for name, review in reviews.items():
        assert REVIEWS[name](review), name


# -- the recording webhook ------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["v1", "v1beta1"])
async def test_recorder_allows_patches_nothing_and_keeps_the_body(version: str) -> None:
    body = {
        "apiVersion": f"admission.k8s.io/{version}",
        "kind": "AdmissionReview",
        "request": {"uid": REQUEST_UID, "operation": "CREATE", "object": {"kind": "Job"}},
    }
    async with ReviewRecorder() as recorder:
        configuration = recorder.configuration("team-ns")
        bundle = base64.b64decode(configuration["webhooks"][0]["clientConfig"]["caBundle"])
        context = ssl.create_default_context(cadata=bundle.decode())
        url = f"https://127.0.0.1:{recorder.port}/{version}"
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as session,
            session.post(url, json=body, ssl=context) as response,
        ):
            assert response.status == 200
            answer = await response.json()
        assert recorder.received == [body]
    assert answer == {
        "apiVersion": f"admission.k8s.io/{version}",
        "kind": "AdmissionReview",
        "response": {"uid": REQUEST_UID, "allowed": True},
    }
    webhooks = {hook["name"]: hook for hook in configuration["webhooks"]}
    assert sorted(webhooks) == ["v1.review-recorder.kueue-governor.io", "v1beta1.review-recorder.kueue-governor.io"]
    assert webhooks["v1beta1.review-recorder.kueue-governor.io"]["admissionReviewVersions"] == ["v1beta1"]
    assert all(
        hook["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-ns"}}
        and hook["failurePolicy"] == "Fail"
        for hook in webhooks.values()
    )
    # Called first: webhook configurations are called in name order.
    assert configuration["metadata"]["name"] < "kgov-governor" < "kueue-mutating-webhook-configuration"


# -- replay ----------------------------------------------------------------------------------------
RESEARCH_QUEUE = "hyperpod-ns-research-localqueue"
P5 = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
INSTANCE_TYPE = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [P5]}]}}}
LAYER_3 = "topology.k8s.aws/network-node-layer-3"
# What the governor makes of the recorded Job (no Kueue labels; the API server has defaulted
# spec.suspend to false, so it is replaced; the pod template already has KWOK's annotations, so
# the topology annotation is added into that map). Without a node inventory (the server here does
# not watch a cluster), `topology: auto` falls back to preferring one layer-3 domain.
JOB_PATCH = [
    {"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": RESEARCH_QUEUE}},
    {"op": "replace", "path": "/spec/suspend", "value": True},
    {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1priority-class", "value": "training-priority"},
    {"op": "add", "path": "/spec/template/spec/priorityClassName", "value": "training-priority"},
    {"op": "add", "path": "/spec/template/spec/affinity", "value": INSTANCE_TYPE},
    {
        "op": "add",
        "path": "/spec/template/metadata/annotations/kueue.x-k8s.io~1podset-preferred-topology",
        "value": LAYER_3,
    },
]


def jobset_patch() -> list[dict[str, Any]]:
    """The JobSet's: labels, suspend (the JobSet CRD does not default it: added), then per
    replicatedJob priority class and node affinity, then the topology annotations."""
    template = "/spec/replicatedJobs/{}/template/spec/template"
    return [
        {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": RESEARCH_QUEUE},
        {"op": "add", "path": "/spec/suspend", "value": True},
        {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1priority-class", "value": "training-priority"},
        *[
            op
            for index in range(4)
            for op in (
                {"op": "add", "path": template.format(index) + "/spec/priorityClassName", "value": "training-priority"},
                {"op": "add", "path": template.format(index) + "/spec/affinity", "value": INSTANCE_TYPE},
            )
        ],
        *[
            {
                "op": "add",
                "path": template.format(index) + "/metadata/annotations",
                "value": {"kueue.x-k8s.io/podset-preferred-topology": LAYER_3},
            }
            for index in range(4)
        ],
    ]


def no_flavor_warning(podset: str) -> str:
    return (
        f"kueue-governor: topology: podset '{podset}' may never be admitted: its pods request none of the resources "
        "team 'research''s topology-aware ClusterQueue covers (cpu, memory, nvidia.com/gpu, vpc.amazonaws.com/efa), "
        'so Kueue assigns it no flavor and cannot place it by topology ("no TAS flavor assigned") unless a '
        "LimitRange of the namespace gives them default requests; request at least one of them"
    )


@pytest.fixture
async def server(start_server: ServerFactory) -> RunningServer:
    return await start_server()


async def replay(server: RunningServer, name: str) -> dict[str, Any]:
    """POST the recorded bytes to /mutate as the API server did; the answer (status 200 checked)."""
    return await post_review(server, (DATA / name).read_bytes())


async def post_review(server: RunningServer, body: bytes) -> dict[str, Any]:
    """POST ``body`` (an AdmissionReview) to /mutate; the answer (status 200 checked)."""
    connector = aiohttp.TCPConnector(ssl=server.ssl_context)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=TIMEOUT) as session,
        session.post(server.url("/mutate"), data=body, headers={"Content-Type": "application/json"}) as response,
    ):
        assert response.status == 200
        answer = await response.json()
    assert isinstance(answer, dict)
    return answer


def decoded(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert isinstance(ops, list)
    return ops


@pytest.mark.parametrize("name", ["v1-job-create.json", "v1-job-create-dryrun.json"])
async def test_replay_job_create(server: RunningServer, name: str) -> None:
    review = fixture(name)
    answer = await replay(server, name)
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    response = answer["response"]
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is True
    assert decoded(response) == JOB_PATCH
    # kubectl apply's last-applied-configuration annotation is kept (the map is never replaced).
    assert list(review["request"]["object"]["metadata"]["annotations"]) == [
        "kubectl.kubernetes.io/last-applied-configuration"
    ]
    assert review["request"]["dryRun"] is (name == "v1-job-create-dryrun.json")


async def test_replay_jobset_create_through_v1beta1(server: RunningServer) -> None:
    answer = await replay(server, "v1beta1-jobset-create.json")
    assert answer["apiVersion"] == "admission.k8s.io/v1beta1"
    response = answer["response"]
    assert response["uid"] == fixture("v1beta1-jobset-create.json")["request"]["uid"]
    assert decoded(response) == jobset_patch()
    # Its driver and checkpointer request no resource at all: Kueue can give them no flavor.
    assert response["warnings"] == [no_flavor_warning("driver"), no_flavor_warning("checkpointer")]


@pytest.mark.parametrize("name", ["v1-job-update-kueue-start.json", "v1-pod-of-job-create.json"])
async def test_replay_kueue_start_and_a_jobs_pod_pass_unchanged(server: RunningServer, name: str) -> None:
    review = fixture(name)
    answer = await replay(server, name)
    assert answer == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": True},
    }


async def test_replay_queue_label_change_is_refused(server: RunningServer) -> None:
    review = fixture("v1-job-update-queue-label.json")
    answer = await replay(server, "v1-job-update-queue-label.json")
    assert answer["response"] == {
        "uid": review["request"]["uid"],
        "allowed": False,
        "status": {
            "message": "kueue-governor: queue: LocalQueue 'hyperpod-ns-inference-localqueue' "
            "(metadata.labels.kueue.x-k8s.io/queue-name) is not allowed for team 'research'; "
            f"allowed: {RESEARCH_QUEUE}; unless a LocalQueue of that name exists in this namespace, Kueue "
            f"never admits the workload (it stays suspended); use the team's LocalQueue {RESEARCH_QUEUE!r}",
            "code": 403,
            "reason": "Forbidden",
        },
    }


# What an UPDATE removes from the stored Job of the recorded label change (its oldObject): the
# path in the object, the JSON Patch that puts it back and the warning naming it.
TEMPLATE = ("spec", "template")
TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
KEPT = "an update that leaves out a governed value keeps the stored one"
REMOVED: dict[str, tuple[tuple[str, ...], dict[str, Any], str]] = {
    "queue label (kubectl label job … kueue.x-k8s.io/queue-name-)": (
        ("metadata", "labels", "kueue.x-k8s.io/queue-name"),
        {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": RESEARCH_QUEUE},
        f"queue: this update removes metadata.labels.kueue.x-k8s.io/queue-name; kept {RESEARCH_QUEUE!r} ({KEPT})",
    ),
    "priority-class label": (
        ("metadata", "labels", "kueue.x-k8s.io/priority-class"),
        {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1priority-class", "value": "training-priority"},
        "kueuePriority: this update removes metadata.labels.kueue.x-k8s.io/priority-class; "
        f"kept 'training-priority' ({KEPT})",
    ),
    "priorityClassName": (
        (*TEMPLATE, "spec", "priorityClassName"),
        {"op": "add", "path": "/spec/template/spec/priorityClassName", "value": "training-priority"},
        f"podPriority: this update removes spec.template.spec.priorityClassName; kept 'training-priority' ({KEPT})",
    ),
    "TAS annotation": (
        (*TEMPLATE, "metadata", "annotations", TOPOLOGY),
        {
            "op": "add",
            "path": "/spec/template/metadata/annotations/kueue.x-k8s.io~1podset-required-topology",
            "value": LAYER_3,
        },
        f"topology: this update removes {TOPOLOGY} of podset 'main'; kept {LAYER_3!r} ({KEPT})",
    ),
    "node affinity": (
        (*TEMPLATE, "spec", "affinity"),
        {"op": "add", "path": "/spec/template/spec/affinity", "value": INSTANCE_TYPE},
        "nodeAffinity: this update removes the affinity of podset 'main'; kept the stored value "
        "(it holds team 'research''s node affinity)",
    ),
}


@pytest.mark.parametrize("removed", list(REMOVED))
async def test_an_update_removing_a_governed_value_is_told_it_was_put_back(server: RunningServer, removed: str) -> None:
    """Defect: ``kubectl label job … kueue.x-k8s.io/queue-name-`` printed "unlabeled" with no
    warning while the webhook put the label back. Every governed value an UPDATE removes and the
    webhook puts back is now named in a warning. The envelope is the recorded label change, its
    object the stored Job (oldObject) without the one value."""
    path, patch, warning = REMOVED[removed]
    review = fixture("v1-job-update-queue-label.json")
    request = review["request"]
    stored = request["oldObject"]
    target = stored
    for key in path[:-1]:
        target = target[key]
    assert path[-1] in target, "the recorded stored Job has the value"
    updated = json.loads(json.dumps(stored))
    parent = updated
    for key in path[:-1]:
        parent = parent[key]
    if path[-1] == "affinity":
        assert target[path[-1]] == INSTANCE_TYPE
    del parent[path[-1]]
    request["object"] = updated
    answer = await post_review(server, json.dumps(review).encode())
    response = answer["response"]
    assert response["allowed"] is True
    assert decoded(response) == [patch]
    assert response["warnings"] == [f"kueue-governor: {warning}"]


async def test_an_update_leaving_every_governed_value_has_no_warning(server: RunningServer) -> None:
    """The stored Job sent back unchanged (a relabel of something else): no patch, no warning."""
    review = fixture("v1-job-update-queue-label.json")
    review["request"]["object"] = review["request"]["oldObject"]
    response = (await post_review(server, json.dumps(review).encode()))["response"]
    assert response == {"uid": review["request"]["uid"], "allowed": True}


# -- the recorded Job CREATE, sent into data-science (warn-only policy, no podPriority rule) -----------
DATA_SCIENCE = "hyperpod-ns-data-science"
DATA_SCIENCE_QUEUE = "hyperpod-ns-data-science-localqueue"


def data_science_job(labels: dict[str, str] | None = None, priority_class: str | None = None) -> bytes:
    """The recorded ``v1-job-create.json`` moved to data-science's namespace, with ``labels`` on
    the Job and ``priority_class`` as its pods' ``priorityClassName``."""
    review = fixture("v1-job-create.json")
    request = review["request"]
    request["namespace"] = DATA_SCIENCE
    job = request["object"]
    job["metadata"]["namespace"] = DATA_SCIENCE
    if labels:
        job["metadata"]["labels"] = labels
    if priority_class is not None:
        job["spec"]["template"]["spec"]["priorityClassName"] = priority_class
    return json.dumps(review).encode()


def rule_warnings(response: dict[str, Any], rule: str) -> list[str]:
    prefix = f"kueue-governor: {rule}: "
    return [w.removeprefix("kueue-governor: ") for w in response.get("warnings", []) if w.startswith(prefix)]


POD_PRIORITY = "spec.template.spec.priorityClassName"


async def test_a_pod_priority_the_platform_creates_no_priority_class_for_is_warned(server: RunningServer) -> None:
    """Regression: 'fine-tuning-priority' was listed as allowed, and taken silently, though the
    platform's 'fine-tuning' has no podPriorityClass: every pod then failed FailedCreate."""
    answer = await post_review(server, data_science_job(priority_class="fine-tuning-priority"))
    response = answer["response"]
    assert response["allowed"] is True
    assert rule_warnings(response, "podPriority") == [
        f"podPriority: PriorityClass 'fine-tuning-priority' ({POD_PRIORITY}) is not created by the platform: "
        "'fine-tuning-priority' is a WorkloadPriorityClass only; unless a PriorityClass of that name exists in "
        "the cluster, the pods will not be created (PriorityClasses team 'data-science' may use: "
        "experimentation-priority)"
    ]


async def test_allowed_pod_priorities_named_are_only_generated_priority_classes(server: RunningServer) -> None:
    """Regression: the list read 'experimentation-priority, fine-tuning-priority'."""
    answer = await post_review(server, data_science_job(priority_class="fine-tuning"))
    response = answer["response"]
    assert response["allowed"] is True
    assert rule_warnings(response, "podPriority") == [
        f"podPriority: PriorityClass 'fine-tuning' ({POD_PRIORITY}) is not allowed for team 'data-science'; "
        "allowed: experimentation-priority"
    ]


async def test_a_priority_class_the_platform_does_not_know_is_only_checked_against_allowed(
    server: RunningServer,
) -> None:
    answer = await post_review(server, data_science_job(priority_class="experimentation-priority"))
    assert rule_warnings(answer["response"], "podPriority") == []


@pytest.mark.parametrize("queue", ["typo-queue", RESEARCH_QUEUE])
async def test_a_queue_name_outside_the_team_says_kueue_never_admits_it(server: RunningServer, queue: str) -> None:
    """Regression: only "not allowed" was said; Kueue leaves such a Job suspended forever."""
    answer = await post_review(server, data_science_job(labels={"kueue.x-k8s.io/queue-name": queue}))
    response = answer["response"]
    assert response["allowed"] is True
    assert rule_warnings(response, "queue") == [
        f"queue: LocalQueue {queue!r} (metadata.labels.kueue.x-k8s.io/queue-name) is not allowed for team "
        f"'data-science'; allowed: {DATA_SCIENCE_QUEUE}; unless a LocalQueue of that name exists in this namespace, "
        f"Kueue never admits the workload (it stays suspended); use the team's LocalQueue {DATA_SCIENCE_QUEUE!r}"
    ]
