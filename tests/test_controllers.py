"""The platform file's ``controllers`` (SPEC §3 "Children are left alone", §12): only the users it
lists may make an object a child of a workload Kueue manages; the compiled policy, the webhook's
reviews, the chart's CEL and the admission policies all read the same list."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from support import platform_with, review_body, teams_from

from webhook.core.admission.review import review
from webhook.core.platform.controllers import DEFAULT_CONTROLLERS, is_controller
from webhook.core.platform.platform import PlatformError, check_platform, parse_platform
from webhook.core.platform.policy import PolicySet, compile_policies
from webhook.core.platform.resolve import TeamIndex
from webhook.generate.admission_policies import admission_policy_manifests
from webhook.generate.cel import controller_expression
from webhook.generate.chart import platform_values

ARGO = "system:serviceaccount:argo:argo-workflow"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


def test_the_default_controllers_are_the_confirmed_identities() -> None:
    """Kubernetes v1.36's controllers (bootstrap policy: kube-system/<name>) and the operators Kueue
    v0.19.2 pins, as their release manifests name their service accounts."""
    assert list(DEFAULT_CONTROLLERS) == [
        "system:kube-controller-manager",
        "system:serviceaccount:kube-system:cronjob-controller",
        "system:serviceaccount:kube-system:daemon-set-controller",
        "system:serviceaccount:kube-system:deployment-controller",
        "system:serviceaccount:kube-system:generic-garbage-collector",
        "system:serviceaccount:kube-system:job-controller",
        "system:serviceaccount:kube-system:replicaset-controller",
        "system:serviceaccount:kube-system:replication-controller",
        "system:serviceaccount:kube-system:statefulset-controller",
        "system:serviceaccount:kueue-system:kueue-controller-manager",
        "system:serviceaccount:jobset-system:jobset-controller-manager",
        "system:serviceaccount:lws-system:lws-controller-manager",
        "system:serviceaccount:appwrapper-system:appwrapper-controller-manager",
        "system:serviceaccount:kubeflow:training-operator",
        "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",
        "system:serviceaccount:mpi-operator:mpi-operator",
        "system:serviceaccount:default:kuberay-operator",
    ]
    assert parse_platform(platform_with({})).controllers == list(DEFAULT_CONTROLLERS)


def _pod_of(owner_kind: str = "Job") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "step-1",
            "namespace": "ml",
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": owner_kind,
                    "name": "train",
                    "uid": "00000000-0000-4000-8000-000000000042",
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def _review_as(teams: TeamIndex, user: str) -> dict[str, Any]:
    body = review_body(_pod_of(), "ml")
    body["request"]["userInfo"] = {"username": user, "groups": ["system:serviceaccounts", "system:authenticated"]}
    response: dict[str, Any] = review(body, teams).response["response"]
    return response


def test_a_listed_account_makes_children_and_others_are_refused_by_name() -> None:
    """A workflow engine's account listed in ``controllers`` may create the Pods of a Job; a service
    account of another namespace that is not listed is refused, the denial naming it and how to allow it."""
    teams = teams_from({**platform_with({}), "controllers": [ARGO, "system:kube-controller-manager"]})
    assert _review_as(teams, ARGO)["allowed"] is True
    refused = _review_as(teams, "system:serviceaccount:argo-events:sensor")
    assert refused["allowed"] is False and refused["status"]["code"] == 403
    assert refused["status"]["message"] == (
        "kueue-governor: queue: Pod 'step-1' names Job 'train' as its controller owner, and Kueue leaves such an "
        "object to its owner's Workload: it would run outside the queue of team 'ml'. Only a controller makes such "
        "objects, not 'system:serviceaccount:argo-events:sensor': create the Job itself, or leave out the "
        "ownerReference (the team's policy then applies). If 'system:serviceaccount:argo-events:sensor' is a "
        "controller that makes such objects, a platform admin lists it in the platform file's controllers"
    )
    # The list replaces the default: the job controller's own account is no longer trusted here.
    assert _review_as(teams, JOB_CONTROLLER)["allowed"] is False
    assert _review_as(teams_from(platform_with({})), JOB_CONTROLLER)["allowed"] is True
    assert _review_as(teams_from(platform_with({})), ARGO)["allowed"] is False


def test_a_namespace_wildcard() -> None:
    teams = teams_from({**platform_with({}), "controllers": ["system:serviceaccount:argo:*"]})
    assert _review_as(teams, ARGO)["allowed"] is True
    assert _review_as(teams, "system:serviceaccount:argo-events:sensor")["allowed"] is False
    assert not is_controller("system:serviceaccount:argo", ["system:serviceaccount:argo:*"])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("*", "'*': '*' is only allowed as a whole service account name, system:serviceaccount:NAMESPACE:*"),
        ("system:*", "'system:*': '*' is only allowed as a whole service account name"),
        (
            "system:serviceaccount:argo:wf-*",
            "'system:serviceaccount:argo:wf-*': 'wf-*' is not a service account name (a DNS-1123 subdomain), "
            "nor '*' (every service account of the namespace)",
        ),
        ("system:serviceaccount:*:x", "'system:serviceaccount:*:x': '*' is not a namespace name (a DNS-1123 label)"),
        ("system:serviceaccount:Argo:wf", "'Argo' is not a namespace name"),
        ("system:anonymous", "'system:anonymous' is every unauthenticated request, never a controller"),
        ("", "'' is not a user name (empty or with white space)"),
        ("job controller", "'job controller' is not a user name (empty or with white space)"),
    ],
)
def test_entries_that_are_no_controller_are_refused_with_their_path(entry: str, message: str) -> None:
    with pytest.raises(PlatformError) as error:
        parse_platform({**platform_with({}), "controllers": ["system:kube-controller-manager", entry]})
    [problem] = error.value.problems
    assert problem.path == "controllers[1]"
    assert message in problem.message


def test_the_policy_carries_the_list_and_an_older_policy_gets_the_default() -> None:
    platform = parse_platform({**platform_with({}), "controllers": [ARGO]})
    policy = compile_policies(platform)
    assert policy.controllers == [ARGO]
    assert json.loads(policy.model_dump_json())["controllers"] == [ARGO]
    older = json.loads(policy.model_dump_json())
    del older["controllers"]
    assert PolicySet.model_validate(older).controllers == list(DEFAULT_CONTROLLERS)
    # A policy.json edited by hand is validated as the platform file is.
    with pytest.raises(ValueError, match="only allowed as a whole service account name"):
        PolicySet.model_validate({**older, "controllers": ["system:*"]})


def test_the_cel_of_the_chart_and_the_admission_policies_use_the_list() -> None:
    platform = parse_platform({**platform_with({"queue": {}}), "controllers": [ARGO, "system:serviceaccount:ci:*"]})
    expression = controller_expression([ARGO, "system:serviceaccount:ci:*"])
    assert expression == (
        "has(request.userInfo.username) && (request.userInfo.username in ['system:serviceaccount:argo:argo-workflow'] "
        "|| request.userInfo.username.matches('^system:serviceaccount:ci:[^:]+$'))"
    )
    assert controller_expression([]) == "false"
    assert platform_values(platform)["platform"]["controllerExpression"] == expression
    manifests = admission_policy_manifests(compile_policies(platform))
    conditions = [
        c["expression"]
        for m in manifests
        if m["kind"] == "MutatingAdmissionPolicy"
        for c in m["spec"]["matchConditions"]
    ]
    assert conditions, "the one-team platform fills its queue: it has a MutatingAdmissionPolicy"
    assert f": ({expression})))" in conditions[0]


def test_kgov_mutate_without_user_info_stays_trusted() -> None:
    body = review_body(copy.deepcopy(_pod_of()), "ml")
    body["request"].pop("userInfo", None)
    teams = teams_from({**platform_with({}), "controllers": []})
    outcome = review(body, teams)
    assert outcome.response["response"]["allowed"] is True
    assert outcome.plan.skipped == "controlled by Job 'train': Kueue manages the owner"


def test_a_teams_own_service_account_as_a_controller_is_warned() -> None:
    """Listing an account of a team namespace lets whatever runs as it there, the team's own
    notebooks included, make Pods outside the team's queue: warned, with its path."""
    platform = parse_platform({**platform_with({}), "controllers": [ARGO, "system:serviceaccount:ml:*"]})
    warnings = [p for p in check_platform(platform) if p.severity == "warning"]
    assert [(p.path, p.message) for p in warnings] == [
        (
            "controllers[1]",
            "'system:serviceaccount:ml:*' is a service account of namespace 'ml' of team 'ml': what runs as it "
            "could make Pods that run outside the team's queue; run controllers in a namespace of their own",
        )
    ]
    assert [p for p in check_platform(parse_platform(platform_with({}))) if p.path.startswith("controllers")] == []
