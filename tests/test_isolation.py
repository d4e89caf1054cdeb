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

from webhook.core.planner import made_by_a_controller
from webhook.core.review import review

DATA = Path(__file__).resolve().parent / "data" / "admission"
RESEARCH = "hyperpod-ns-research"
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
    "user", [ADMIN, "alice@example.com", "system:anonymous", f"system:serviceaccount:{RESEARCH}:default"]
)
def test_a_child_made_by_a_user_is_refused(user: str) -> None:
    """Regression: a Pod a user created with a controller ownerReference to the team's own Job was
    skipped by the governor and by Kueue (which leaves it to the Job's Workload), so it ran at once,
    8 GPUs outside the team's quota (e2e/test_isolation.py shows it on the real cluster)."""
    outcome = review(pod_of_job(user), bundled_teams())
    response = outcome.response["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"] == (
        "kueue-governor: queue: this Pod names Job 'resnet-train' as its controller owner, and Kueue leaves "
        "such an object to its owner's Workload: it would run outside team 'research''s queue. Only a "
        f"controller makes such objects, not {user!r}: create the Job itself, or leave out the ownerReference "
        "(the team's policy then applies)"
    )


def test_made_by_a_controller() -> None:
    assert made_by_a_controller("system:serviceaccount:kubeflow:training-operator", RESEARCH)
    assert made_by_a_controller("system:kube-controller-manager", RESEARCH)
    assert not made_by_a_controller(f"system:serviceaccount:{RESEARCH}:notebook", RESEARCH)
    assert not made_by_a_controller("system:anonymous", RESEARCH)
    assert not made_by_a_controller("kueue-manager", RESEARCH)  # a person's name as far as anyone can tell
    assert made_by_a_controller(None, RESEARCH)


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
    controller = _as(review_body(_jobset_child("escape"), RESEARCH), "system:serviceaccount:jobset-system:jobset")
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
