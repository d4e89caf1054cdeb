"""Team isolation: the ways a team could escape its queue or priority, each a regression test.

The reviews are the ones kube-apiserver v1.36 sent (``tests/data/admission``, recorded by ``make
record-reviews``), with the sender or the object changed as a user would change them; e2e/test_isolation.py
checks the same on the real cluster with Kueue.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from support import bundled_teams, review_body

from webhook.core.admission.review import review
from webhook.core.kueue.registration import webhook_rules
from webhook.core.plan.planner import made_by_a_controller
from webhook.core.platform.controllers import DEFAULT_CONTROLLERS
from webhook.generate.chart import CONTROLLER_PLACEHOLDER, kinds_cel, kinds_document

DATA = Path(__file__).resolve().parent / "data" / "admission"
RESEARCH = "hyperpod-ns-research"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
ADMIN = "kgov-admin"  # the user of the recorded kubectl requests (v1-job-create.json)


def recorded(name: str) -> dict[str, Any]:
    body = json.loads((DATA / name).read_text())
    assert isinstance(body, dict)
    return body


def pod_of_job(user: str | None) -> dict[str, Any]:
    """The recorded CREATE of a Pod the Job controller made, sent by ``user`` (None: no userInfo)."""
    body = recorded("v1-pod-of-job-create.json")
    assert body["request"]["userInfo"]["username"] == "system:kube-controller-manager"
    if user is None:
        del body["request"]["userInfo"]
    else:
        body["request"]["userInfo"]["username"] = user
    return body


def test_the_recorded_users() -> None:
    assert recorded("v1-job-create.json")["request"]["userInfo"]["username"] == ADMIN
    assert recorded("v1-job-update-kueue-start.json")["request"]["userInfo"]["username"] == "kueue-manager"


@pytest.mark.parametrize(
    "user",
    [
        "system:kube-controller-manager",
        "system:serviceaccount:kube-system:job-controller",
        "system:serviceaccount:jobset-system:jobset-controller-manager",
        None,
    ],
)
def test_a_child_made_by_a_controller_is_left_to_its_owner(user: str | None) -> None:
    outcome = review(pod_of_job(user), bundled_teams())
    assert outcome.response["response"]["allowed"] is True
    assert outcome.patch == []
    assert outcome.plan.skipped == "controlled by Job 'resnet-train': Kueue manages the owner"


@pytest.mark.parametrize(
    "user",
    [
        ADMIN,
        "alice@example.com",
        "system:anonymous",
        f"system:serviceaccount:{RESEARCH}:default",
        # Regression: any service account of another namespace counted as a controller, so a workflow
        # engine's account that RBAC lets create Pods in team namespaces ran Pods outside Kueue.
        "system:serviceaccount:argo:argo-workflow",
        "system:serviceaccount:kube-system:default",  # kube-system, but not one of the listed controllers
        "system:kube-scheduler",  # a system: user, but not a controller that makes children
    ],
)
def test_a_child_made_by_a_user_is_refused(user: str) -> None:
    """Regression: a Pod a user created with a controller ownerReference to the team's own Job was
    skipped by the governor and by Kueue (which leaves it to the Job's Workload), so it ran at once,
    8 GPUs outside the team's quota (e2e/test_isolation.py shows it on the real cluster). The
    denial names the account and how a platform admin makes it a controller."""
    outcome = review(pod_of_job(user), bundled_teams())
    response = outcome.response["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"] == (
        "kueue-governor: queue: this Pod names Job 'resnet-train' as its controller owner, and Kueue leaves "
        "such an object to its owner's Workload: it would run outside the queue of team 'research'. Only a "
        f"controller makes such objects, not {user!r}: create the Job itself, or leave out the ownerReference "
        f"(the team's policy then applies). If {user!r} is a controller that makes such objects, a platform "
        "admin lists it in the platform file's controllers"
    )


def test_made_by_a_controller() -> None:
    assert made_by_a_controller("system:serviceaccount:kubeflow:training-operator", DEFAULT_CONTROLLERS)
    assert made_by_a_controller("system:kube-controller-manager", DEFAULT_CONTROLLERS)
    assert not made_by_a_controller(f"system:serviceaccount:{RESEARCH}:notebook", DEFAULT_CONTROLLERS)
    assert not made_by_a_controller("system:serviceaccount:argo:argo-workflow", DEFAULT_CONTROLLERS)
    assert not made_by_a_controller("system:anonymous", DEFAULT_CONTROLLERS)
    assert not made_by_a_controller("kueue-manager", DEFAULT_CONTROLLERS)  # a person's name as far as anyone can tell
    assert made_by_a_controller(None, DEFAULT_CONTROLLERS)
    assert made_by_a_controller(None, [])  # kgov mutate: no userInfo, trusted whatever the list
    argo = ["system:serviceaccount:argo:*"]
    assert made_by_a_controller("system:serviceaccount:argo:argo-workflow", argo)
    assert not made_by_a_controller("system:serviceaccount:argo:", argo)
    assert not made_by_a_controller("system:serviceaccount:argo-events:sensor", argo)
    assert not made_by_a_controller("system:serviceaccount:argo:a:b", argo)
    assert not made_by_a_controller("system:kube-controller-manager", argo)  # the list replaces the default


def _jobset_child(name: str, owner_kind: str = "JobSet") -> dict[str, Any]:
    job = copy.deepcopy(recorded("v1-job-create.json")["request"]["object"])
    job["metadata"]["name"] = name
    job["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2" if owner_kind == "JobSet" else "batch/v1",
            "kind": owner_kind,
            "name": "js",
            "uid": "00000000-0000-4000-8000-000000000099",
            "controller": True,
        }
    ]
    return job


def _as(body: dict[str, Any], user: str) -> dict[str, Any]:
    body["request"]["userInfo"] = {"username": user, "groups": ["system:authenticated"]}
    return body


def test_a_job_a_user_makes_a_child_of_a_jobset_is_refused_by_name() -> None:
    body = _as(review_body(_jobset_child("escape"), RESEARCH), ADMIN)
    response = review(body, bundled_teams()).response["response"]
    assert response["allowed"] is False
    assert "Job 'escape' names JobSet 'js' as its controller owner" in response["status"]["message"]
    # The JobSet controller as its v0.12.0 release runs it (a listed controller; any other account of
    # jobset-system is not one).
    jobset = "system:serviceaccount:jobset-system:jobset-controller-manager"
    controller = _as(review_body(_jobset_child("escape"), RESEARCH), jobset)
    assert review(controller, bundled_teams()).response["response"] == {
        "uid": controller["request"]["uid"],
        "allowed": True,
    }


def test_an_update_that_adds_a_managed_owner_is_refused_for_a_user() -> None:
    child = _jobset_child("adopted")
    old = copy.deepcopy(child)
    del old["metadata"]["ownerReferences"]
    old["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "hyperpod-ns-research-localqueue"}
    child["metadata"]["labels"] = dict(old["metadata"]["labels"])
    response = review(_as(review_body(child, RESEARCH, "UPDATE", old), ADMIN), bundled_teams()).response["response"]
    assert response["allowed"] is False
    assert "Job 'adopted' is given JobSet 'js' as its controller owner" in response["status"]["message"]
    # Already a child before the update (a controller made it): the user's update is not refused.
    kept = review(_as(review_body(child, RESEARCH, "UPDATE", copy.deepcopy(child)), ADMIN), bundled_teams())
    assert kept.response["response"]["allowed"] is True and kept.patch == []
    # A controller adopting an orphan (the Job controller adopts Pods that match its selector).
    adopting = review_body(child, RESEARCH, "UPDATE", old)
    adopted = review(_as(adopting, "system:kube-controller-manager"), bundled_teams())
    assert adopted.response["response"]["allowed"] is True


def test_an_owner_kueue_does_not_manage_is_no_child() -> None:
    """A CronJob's Job is Kueue's workload itself: a user naming a CronJob as owner gets the policy."""
    body = _as(review_body(_jobset_child("nightly-1", owner_kind="CronJob"), RESEARCH), ADMIN)
    outcome = review(body, bundled_teams())
    assert outcome.response["response"]["allowed"] is True
    assert outcome.patch[0] == {
        "op": "add",
        "path": "/metadata/labels",
        "value": {"kueue.x-k8s.io/queue-name": "hyperpod-ns-research-localqueue"},
    }


def test_user_info_of_the_wrong_type_is_a_malformed_review() -> None:
    body = pod_of_job(ADMIN)
    body["request"]["userInfo"]["username"] = 7
    with pytest.raises(ValueError, match=r"request.userInfo.username must be a string, got number"):
        review(body, bundled_teams())


def _pytorchjob(scheduling: dict[str, Any]) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "main", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt"},
        "spec": {
            "runPolicy": {"schedulingPolicy": scheduling},
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}},
        },
    }


@pytest.mark.parametrize("priority_class", ["system-cluster-critical", "inference-priority"])
def test_a_kubeflow_scheduling_policy_priority_class_is_checked(priority_class: str) -> None:
    """Regression: Kueue takes runPolicy.schedulingPolicy.priorityClass as a Kubeflow job's priority
    when the priority-class label is absent (KubeflowJob.PriorityClass, before the pods'
    priorityClassName); the governor did not check it."""
    body = _as(review_body(_pytorchjob({"priorityClass": priority_class}), RESEARCH), ADMIN)
    response = review(body, bundled_teams()).response["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        f"kueue-governor: podPriority: PriorityClass {priority_class!r} "
        "(spec.runPolicy.schedulingPolicy.priorityClass) is not allowed for team 'research'; allowed: "
        "training-priority, experimentation-priority"
    )


def test_a_scheduling_policy_priority_class_the_team_may_use_or_kept_on_update_passes() -> None:
    allowed = _pytorchjob({"priorityClass": "experimentation-priority", "queue": "hyperpod-ns-inference-localqueue"})
    outcome = review(_as(review_body(allowed, RESEARCH), ADMIN), bundled_teams())
    assert outcome.response["response"]["allowed"] is True
    # schedulingPolicy.queue is the gang scheduler's queue (Volcano): Kueue never reads it.
    assert outcome.patch[0]["value"]["kueue.x-k8s.io/queue-name"] == "hyperpod-ns-research-localqueue"
    stored = _pytorchjob({"priorityClass": "system-cluster-critical"})
    stored["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "hyperpod-ns-research-localqueue"}
    touched = copy.deepcopy(stored)
    touched["metadata"]["labels"]["team"] = "x"
    kept = review(_as(review_body(touched, RESEARCH, "UPDATE", stored), ADMIN), bundled_teams())
    assert kept.response["response"]["allowed"] is True  # from before the policy: an UPDATE keeps it
    raised = copy.deepcopy(stored)
    raised["spec"]["runPolicy"]["schedulingPolicy"]["priorityClass"] = "inference-priority"
    refused = review(_as(review_body(raised, RESEARCH, "UPDATE", stored), ADMIN), bundled_teams())
    assert (
        "PriorityClass 'inference-priority' (spec.runPolicy.schedulingPolicy.priorityClass)"
        in (refused.response["response"]["status"]["message"])
    )


def _mpijob(version: str) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "main", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}
    return {
        "apiVersion": f"kubeflow.org/{version}",
        "kind": "MPIJob",
        "metadata": {"name": "mpi"},
        "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": template}}},
    }


def test_the_training_operators_mpijob_is_refused_in_a_team_namespace() -> None:
    """Regression: a kubeflow.org/v1 MPIJob (the training-operator's; Kueue manages mpi-operator's
    v2beta1 only) was passed untouched, and the training-operator runs it outside Kueue."""
    response = review(_as(review_body(_mpijob("v1"), RESEARCH), ADMIN), bundled_teams()).response["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        "kueue-governor: queue: kubeflow.org/v1 MPIJob is not a version Kueue manages (kubeflow.org/v2beta1): the "
        "Kubeflow training-operator runs a kubeflow.org/v1 MPIJob by itself, so it would run at once, outside the "
        "team's queue and quota; create it as kubeflow.org/v2beta1"
    )
    # Kueue's version is governed; an UPDATE of a v1 MPIJob made before (its operator's finalizers) passes;
    # outside the teams' namespaces nothing is refused.
    governed = review(_as(review_body(_mpijob("v2beta1"), RESEARCH), ADMIN), bundled_teams())
    assert governed.response["response"]["allowed"] is True and governed.patch
    update = review(_as(review_body(_mpijob("v1"), RESEARCH, "UPDATE", _mpijob("v1")), ADMIN), bundled_teams())
    assert update.response["response"]["allowed"] is True
    elsewhere = review(_as(review_body(_mpijob("v1"), "default"), ADMIN), bundled_teams())
    assert elsewhere.response["response"]["allowed"] is True


def test_the_webhook_and_the_chart_are_registered_for_the_refused_version() -> None:
    rules = [(rule["apiGroups"], rule["apiVersions"], rule["resources"]) for rule in webhook_rules()]
    assert (["kubeflow.org"], ["v1"], ["jaxjobs", "mpijobs", "paddlejobs", "pytorchjobs", "tfjobs", "xgboostjobs"]) in (
        rules
    )
    cel = kinds_document()["cel"]
    assert cel["managedVersion"] == (
        "!(request.operation == 'CREATE' && (((request.kind.group == 'kubeflow.org' && request.kind.kind == "
        "'MPIJob') && request.kind.version == 'v1')))"
    )
    assert cel["notAManagedChild"].endswith(f": ({CONTROLLER_PLACEHOLDER})))")
    assert cel["childOfAController"].endswith(f" || ({CONTROLLER_PLACEHOLDER})")
    rendered = kinds_cel(["system:kube-controller-manager", "system:serviceaccount:argo:*"])
    controller = (
        "(has(request.userInfo.username) && (request.userInfo.username in ['system:kube-controller-manager'] || "
        "request.userInfo.username.matches('^system:serviceaccount:argo:[^:]+$')))"
    )
    assert rendered["childOfAController"].endswith(f" || ({controller})")
    assert CONTROLLER_PLACEHOLDER not in rendered["notAManagedChild"]
    assert rendered["notAManagedChild"].endswith(f": ({controller})))")


def _status_update(labels: dict[str, str] | None, user: str = ADMIN) -> dict[str, Any]:
    """The recorded UPDATE of a Job of research, sent to its ``status`` subresource by ``user`` with
    the Job's labels replaced by ``labels`` (None: removed)."""
    body = recorded("v1-job-update-kueue-start.json")
    request = body["request"]
    request["subResource"] = "status"
    request["userInfo"]["username"] = user
    request["object"] = copy.deepcopy(request["oldObject"])
    if labels is None:
        del request["object"]["metadata"]["labels"]
    else:
        request["object"]["metadata"]["labels"] = labels
    return body


def test_labels_changed_through_the_status_subresource_are_checked() -> None:
    """Regression: the API server keeps metadata changes made through a Job's or a Pod's ``status``
    subresource (``kubectl patch --subresource=status``), and the governor skipped subresources: a
    priority-class label raised there was taken by Kueue (the Workload's priority went to 1000)."""
    stored = recorded("v1-job-update-kueue-start.json")["request"]["oldObject"]["metadata"]["labels"]
    raised = review(_status_update({**stored, PRIORITY_LABEL: "inference-priority"}), bundled_teams())
    assert raised.response["response"]["status"]["message"] == (
        "kueue-governor: kueuePriority: WorkloadPriorityClass 'inference-priority' (metadata.labels."
        "kueue.x-k8s.io/priority-class) is not allowed for team 'research'; allowed: training-priority, "
        "experimentation-priority"
    )
    moved = review(_status_update({**stored, QUEUE_LABEL: "hyperpod-ns-inference-localqueue"}), bundled_teams())
    assert "LocalQueue 'hyperpod-ns-inference-localqueue'" in moved.response["response"]["status"]["message"]
    dropped = review(_status_update(None), bundled_teams())
    assert dropped.response["response"]["allowed"] is True
    assert dropped.patch == [
        {"op": "add", "path": "/metadata/labels", "value": {QUEUE_LABEL: stored[QUEUE_LABEL]}},
        {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1priority-class", "value": stored[PRIORITY_LABEL]},
    ]
    assert len(dropped.response["response"]["warnings"]) == 2
    same = review(_status_update(dict(stored), user="system:kube-controller-manager"), bundled_teams())
    assert same.plan.skipped == "status UPDATE: no governed label introduced, changed or dropped"


def test_the_status_of_a_custom_resource_is_not_reviewed() -> None:
    """A CRD's status subresource drops metadata changes (the API server's custom resource status
    strategy), so only built-in kinds are registered and reviewed there."""
    body = review_body(_pytorchjob({}), RESEARCH, "UPDATE", _pytorchjob({}))
    body["request"]["subResource"] = "status"
    assert review(_as(body, ADMIN), bundled_teams()).plan.skipped == "subresource 'status'"
    rules = {resource for rule in webhook_rules() for resource in rule["resources"]}
    assert {"jobs/status", "pods/status", "statefulsets/status", "cronjobs/status"} <= rules
    assert not [resource for resource in rules if resource.endswith("/status") and "pytorch" in resource]
    status = kinds_document()["cel"]["statusChangesMetadata"]
    assert status.startswith("!has(request.subResource) || request.subResource != 'status' || ")


def _pods_of(kind: str, labels: dict[str, str]) -> dict[str, Any]:
    governed = {QUEUE_LABEL: "hyperpod-ns-research-localqueue", PRIORITY_LABEL: "training-priority"}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "web", "labels": dict(governed)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", **governed, **labels}},
                "spec": {"priorityClassName": "training-priority", "containers": [{"name": "c", "image": "i"}]},
            },
        },
    }


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_a_pod_template_label_changed_on_update_is_checked(kind: str) -> None:
    """Regression: an UPDATE that changed the queue or priority label of a Deployment's or
    StatefulSet's pod template was not checked as CREATE checks it (only a dropped one was put
    back); a Deployment's new pods were then refused one by one, seen only in its events."""
    stored = _pods_of(kind, {})
    raised = _pods_of(kind, {PRIORITY_LABEL: "inference-priority"})
    response = review(_as(review_body(raised, RESEARCH, "UPDATE", stored), ADMIN), bundled_teams()).response
    assert response["response"]["status"]["message"] == (
        "kueue-governor: kueuePriority: WorkloadPriorityClass 'inference-priority' (spec.template.metadata.labels."
        "kueue.x-k8s.io/priority-class) is not allowed for team 'research'; allowed: training-priority, "
        "experimentation-priority"
    )
    moved = _pods_of(kind, {QUEUE_LABEL: "hyperpod-ns-inference-localqueue"})
    response = review(_as(review_body(moved, RESEARCH, "UPDATE", stored), ADMIN), bundled_teams()).response
    assert (
        "LocalQueue 'hyperpod-ns-inference-localqueue' (spec.template.metadata.labels."
        in (response["response"]["status"]["message"])
    )
    allowed = _pods_of(kind, {PRIORITY_LABEL: "experimentation-priority"})
    outcome = review(_as(review_body(allowed, RESEARCH, "UPDATE", stored), ADMIN), bundled_teams())
    assert outcome.response["response"]["allowed"] is True
    assert outcome.plan.denials == [] and outcome.patch == []
