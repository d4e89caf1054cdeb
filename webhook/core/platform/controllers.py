"""The controllers' identities (SPEC §3 "Children are left alone", §12): who may make an object a
child of an owner Kueue manages.

Kueue leaves an object whose controller ``ownerReference`` names a workload it manages (the Jobs of
a JobSet, the Pods of a Job) to that owner's Workload, so such a child runs outside any queue of
its own. Only the controllers that make children may create one; the platform file's
``controllers`` lists them as the API server authenticates them (``request.userInfo.username``).

An entry is a user name (``system:kube-controller-manager``), a service account
(``system:serviceaccount:NAMESPACE:NAME``) or every service account of one namespace
(``system:serviceaccount:NAMESPACE:*``, the only wildcard).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from webhook.core.platform.problems import Problem

__all__ = [
    "DEFAULT_CONTROLLERS",
    "SERVICE_ACCOUNT_PREFIX",
    "controller_name",
    "controller_problems",
    "is_controller",
    "namespace_wildcard",
]

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"

# Kubernetes v1.36: kube-controller-manager authenticates as system:kube-controller-manager, or,
# with --use-service-account-credentials, as one kube-system service account per controller; the
# names are the ClusterRoleBindings of plugin/pkg/auth/authorizer/rbac/bootstrappolicy/
# controller_policy.go ("system:controller:<name>" bound to kube-system/<name>). Listed: the
# controllers that create or update objects owned by the kinds Kueue manages.
_KUBERNETES = (
    "system:kube-controller-manager",
    "system:serviceaccount:kube-system:cronjob-controller",  # Jobs of a CronJob
    "system:serviceaccount:kube-system:daemon-set-controller",  # Pods of a DaemonSet
    "system:serviceaccount:kube-system:deployment-controller",  # ReplicaSets of a Deployment
    "system:serviceaccount:kube-system:generic-garbage-collector",  # ownerReferences of orphans
    "system:serviceaccount:kube-system:job-controller",  # Pods of a Job
    "system:serviceaccount:kube-system:replicaset-controller",  # Pods of a ReplicaSet
    "system:serviceaccount:kube-system:replication-controller",  # Pods of a ReplicationController
    "system:serviceaccount:kube-system:statefulset-controller",  # Pods of a StatefulSet
)

# The operators Kueue v0.19.2 integrates with (the versions its go.mod pins), each as the
# service account its release manifests run it as: namespace and namePrefix of the kustomize
# config/default (or the release manifest) + the ServiceAccount's name.
_OPERATORS = (
    # Kueue v0.19.2 config/default: namespace kueue-system, namePrefix kueue-, ServiceAccount
    # controller-manager (its Helm chart: <fullname>-controller-manager in the release namespace).
    "system:serviceaccount:kueue-system:kueue-controller-manager",
    # JobSet v0.12.0 config/default: jobset-system, jobset- + controller-manager.
    "system:serviceaccount:jobset-system:jobset-controller-manager",
    # LeaderWorkerSet v0.9.0 config/default: lws-system, lws- + controller-manager.
    "system:serviceaccount:lws-system:lws-controller-manager",
    # AppWrapper config/default (v1.2.1 read; v1.2.2 is pinned): appwrapper-system, appwrapper- + controller-manager.
    "system:serviceaccount:appwrapper-system:appwrapper-controller-manager",
    # Kubeflow training-operator v1.9 manifests/overlays/standalone: namespace kubeflow,
    # ServiceAccount training-operator (manifests/base/rbac/service-account.yaml).
    "system:serviceaccount:kubeflow:training-operator",
    # Kubeflow Trainer v2.2.1 manifests/overlays/manager: kubeflow-system,
    # kubeflow-trainer-controller-manager (manifests/base/rbac/service_account.yaml).
    "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",
    # MPI operator v0.8.2 deploy/v2beta1/mpi-operator.yaml: namespace mpi-operator, ServiceAccount mpi-operator.
    "system:serviceaccount:mpi-operator:mpi-operator",
    # KubeRay v1.6.2 ray-operator/config/default: namespace default, ServiceAccount kuberay-operator
    # (its Helm chart: serviceAccount.name kuberay-operator in the release namespace).
    "system:serviceaccount:default:kuberay-operator",
)

#: The ``controllers`` of a platform file that names none.
DEFAULT_CONTROLLERS: tuple[str, ...] = (*_KUBERNETES, *_OPERATORS)

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def controller_name(value: str) -> str:
    """``value`` when it is a controller entry (see the module docstring), else ValueError saying why.

    A service account needs a DNS-1123 label as its namespace and a DNS-1123 subdomain (or ``*``)
    as its name; any other user name is taken as written, but must not be empty, contain a space
    or ``*``, or be ``system:anonymous`` (what the API server calls an unauthenticated request).
    """
    if value.startswith(SERVICE_ACCOUNT_PREFIX):
        namespace, _, name = value.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
        if not (_DNS1123_LABEL.fullmatch(namespace) and len(namespace) <= 63):
            raise ValueError(f"{value!r}: {namespace!r} is not a namespace name (a DNS-1123 label)")
        if name != "*" and not (_DNS1123_SUBDOMAIN.fullmatch(name) and len(name) <= 253):
            raise ValueError(
                f"{value!r}: {name!r} is not a service account name (a DNS-1123 subdomain), nor '*' "
                "(every service account of the namespace)"
            )
        return value
    if not value or value != value.strip() or any(c.isspace() for c in value):
        raise ValueError(f"{value!r} is not a user name (empty or with white space)")
    if "*" in value:
        raise ValueError(
            f"{value!r}: '*' is only allowed as a whole service account name, system:serviceaccount:NAMESPACE:*"
        )
    if value == "system:anonymous":
        raise ValueError("'system:anonymous' is every unauthenticated request, never a controller")
    return value


def namespace_wildcard(entry: str) -> str | None:
    """The prefix ``system:serviceaccount:NAMESPACE:`` an entry ``…:NAMESPACE:*`` stands for, or None."""
    if entry.startswith(SERVICE_ACCOUNT_PREFIX) and entry.endswith(":*"):
        return entry[:-1]
    return None


def is_controller(user: str, controllers: Iterable[str]) -> bool:
    """Whether the authenticated ``user`` is one of ``controllers`` (exactly, or a service account
    of a namespace an entry ``system:serviceaccount:NAMESPACE:*`` names)."""
    for entry in controllers:
        prefix = namespace_wildcard(entry)
        if prefix is None:
            if user == entry:
                return True
        elif user.startswith(prefix) and user[len(prefix) :] and ":" not in user[len(prefix) :]:
            return True
    return False


def controller_problems(controllers: Sequence[str], team_namespaces: Mapping[str, Sequence[str]]) -> list[Problem]:
    """Warnings for ``controllers`` entries that are service accounts of a team's own namespace
    (``team_namespaces``: team → its namespace names): whoever runs as such an account in that
    namespace, the team included, could make Pods that run outside the team's queue."""
    problems: list[Problem] = []
    for index, entry in enumerate(controllers):
        if not entry.startswith(SERVICE_ACCOUNT_PREFIX):
            continue
        namespace = entry.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")[0]
        for team, namespaces in team_namespaces.items():
            if namespace in namespaces:
                problems.append(
                    Problem(
                        path=f"controllers[{index}]",
                        message=f"{entry!r} is a service account of namespace {namespace!r} of team {team!r}: "
                        "what runs as it could make Pods that run outside the team's queue; run controllers in a "
                        "namespace of their own",
                        severity="warning",
                    )
                )
    return problems
