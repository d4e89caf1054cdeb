"""Governed values emptied or of the wrong type (SPEC §3): the queue and priority labels, each
podset's ``priorityClassName`` and a Kubeflow job's ``runPolicy.schedulingPolicy.priorityClass``,
on CREATE and UPDATE, under each enforcement the bundled teams use (research: ``kueuePriority``
and ``podPriority`` enforce; inference: ``kueuePriority`` enforce, ``podPriority`` warn;
data-science: ``kueuePriority`` warn, no ``podPriority`` rule).

Kueue reads an empty label as its absence (``jobframework.QueueNameForObject``,
``WorkloadPriorityClassName``), and Kubernetes an empty ``priorityClassName`` as none (the
Priority admission plugin's ``admitPod``; Kueue's ``extractPriorityFromPodSets`` skips it too).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from support import bundled_teams, review_body

from webhook.core.admission.review import ReviewOutcome, review
from webhook.core.plan.patch import apply_patch

QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"
PCN = "/spec/template/spec/priorityClassName"
PRIORITY_PATH = "/metadata/labels/kueue.x-k8s.io~1priority-class"
#: namespace → (team, LocalQueue, default WorkloadPriorityClass, default PriorityClass or None).
TEAMS = {
    "hyperpod-ns-research": ("research", "hyperpod-ns-research-localqueue", "training-priority", "training-priority"),
    "hyperpod-ns-inference": (
        "inference",
        "hyperpod-ns-inference-localqueue",
        "inference-priority",
        "inference-priority",
    ),
    "hyperpod-ns-data-science": (
        "data-science",
        "hyperpod-ns-data-science-localqueue",
        "experimentation-priority",
        None,
    ),
}
NAMESPACES = list(TEAMS)
TEAM_INDEX = bundled_teams()

#: The manifests that showed the faults (``kgov mutate -f``): an empty and a numeric
#: priorityClassName, an empty priority-class label.
MANIFESTS = """
apiVersion: batch/v1
kind: Job
metadata: {name: e1}
spec:
  template:
    spec:
      priorityClassName: ""
      restartPolicy: Never
      containers: [{name: c, image: x, resources: {requests: {cpu: 1}}}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: e2}
spec:
  template:
    spec:
      priorityClassName: 12
      restartPolicy: Never
      containers: [{name: c, image: x, resources: {requests: {cpu: 1}}}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: e3, labels: {kueue.x-k8s.io/priority-class: ""}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: x, resources: {requests: {cpu: 1}}}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: w7}
spec:
  template:
    metadata: {annotations: null, labels: null}
    spec:
      priorityClassName: 12
      affinity: {nodeAffinity: null}
      restartPolicy: Never
      containers: [{name: c, image: x, resources: {requests: {cpu: 1}}}]
"""


def manifest(name: str) -> dict[str, Any]:
    found = [doc for doc in yaml.safe_load_all(MANIFESTS) if doc["metadata"]["name"] == name]
    assert len(found) == 1
    return copy.deepcopy(found[0])


def run(obj: dict[str, Any], namespace: str, old: dict[str, Any] | None = None) -> ReviewOutcome:
    operation = "CREATE" if old is None else "UPDATE"
    return review(review_body(obj, namespace, operation, old), TEAM_INDEX)


def ops(outcome: ReviewOutcome, *paths: str) -> list[dict[str, Any]]:
    """The patch's operations at ``paths``, in order."""
    return [op for op in outcome.patch if op["path"] in paths]


def created(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """``obj`` as the webhook leaves it on CREATE (the stored object of the UPDATE tests)."""
    outcome = run(obj, namespace)
    assert outcome.plan.allowed, outcome.plan.denials
    return apply_patch(obj, outcome.patch)


def gpu_job() -> dict[str, Any]:
    """The suspended Job of 2 pods of 8 GPUs of the failing UPDATE (upd-prio-emptied-*.json)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}],
                }
            },
        },
    }


# --- 1. the Kueue priority label emptied ---------------------------------------------------------


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_an_update_that_empties_the_priority_label_gets_the_stored_one_back(namespace: str) -> None:
    """Defect: ``kubectl label job j kueue.x-k8s.io/priority-class=`` on a Job the webhook had
    created was denied in research and inference ("WorkloadPriorityClass '' … is not allowed") and
    admitted as it was in data-science, where the Workload then lost its priority. Kueue reads ""
    as no WorkloadPriorityClass (and refuses to remove one itself): the stored value is put back."""
    _, _, priority, _ = TEAMS[namespace]
    stored = created(gpu_job(), namespace)
    assert stored["metadata"]["labels"][PRIORITY] == priority
    emptied = copy.deepcopy(stored)
    emptied["metadata"]["labels"][PRIORITY] = ""
    outcome = run(emptied, namespace, old=stored)
    assert outcome.plan.allowed
    assert outcome.plan.warnings == [
        f"kueuePriority: an empty {PRIORITY} (metadata.labels.{PRIORITY}) means no WorkloadPriorityClass to "
        f"Kueue; kept {priority!r}"
    ]
    assert outcome.patch == [{"op": "replace", "path": PRIORITY_PATH, "value": priority}]
    assert apply_patch(emptied, outcome.patch) == stored


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_an_empty_priority_label_on_create_is_replaced_by_the_team_default(namespace: str) -> None:
    """Defect: on CREATE an empty priority-class label (pcn.yaml document e3) was refused or warned
    as a WorkloadPriorityClass '' not allowed, while an empty queue label was replaced."""
    _, queue, priority, pod_priority = TEAMS[namespace]
    outcome = run(manifest("e3"), namespace)
    assert outcome.plan.allowed
    assert outcome.plan.denials == []
    assert outcome.plan.warnings == [
        f"kueuePriority: an empty {PRIORITY} (metadata.labels) means no WorkloadPriorityClass to Kueue; "
        f"set to {priority!r}"
    ]
    expected = [{"op": "replace", "path": PRIORITY_PATH, "value": priority}]
    if pod_priority is not None:
        expected.append({"op": "add", "path": PCN, "value": pod_priority})
    assert ops(outcome, PRIORITY_PATH, PCN) == expected
    assert apply_patch(manifest("e3"), outcome.patch)["metadata"]["labels"] == {PRIORITY: priority, QUEUE: queue}


def test_an_empty_priority_label_follows_the_pods_priority_class_when_the_team_may_use_it() -> None:
    """ "" is handled as a missing label: the pods' own PriorityClass is followed as for no label."""
    obj = manifest("e3")
    obj["spec"]["template"]["spec"]["priorityClassName"] = "experimentation-priority"
    outcome = run(obj, "hyperpod-ns-research")
    assert outcome.plan.warnings == [
        f"kueuePriority: an empty {PRIORITY} (metadata.labels) means no WorkloadPriorityClass to Kueue; "
        "set to 'experimentation-priority'"
    ]
    assert ops(outcome, PRIORITY_PATH) == [
        {"op": "replace", "path": PRIORITY_PATH, "value": "experimentation-priority"}
    ]
    change = next(c for c in outcome.plan.changes if c.rule == "kueuePriority")
    assert change.reason == "the pod priority class the workload asks for (experimentation-priority)"


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_an_empty_label_where_the_stored_object_had_none_or_an_empty_one_changes_nothing(namespace: str) -> None:
    bare = gpu_job()  # a Job from before the webhook: no governed label
    bare["spec"]["suspend"] = True
    for label in (QUEUE, PRIORITY):
        emptied = copy.deepcopy(bare)
        emptied["metadata"]["labels"] = {label: ""}
        outcome = run(emptied, namespace, old=bare)
        assert outcome.plan.allowed and outcome.patch == [] and outcome.plan.warnings == []
        # ... and dropping a stored "" puts nothing back (it was no label to Kueue)
        dropped = run(copy.deepcopy(bare), namespace, old=emptied)
        assert dropped.plan.allowed and dropped.patch == [] and dropped.plan.warnings == []


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_an_empty_label_of_a_pod_template_kueue_admits_pods_from(kind: str) -> None:
    """A Deployment's or StatefulSet's pod-template labels carry the queue and priority of the pods
    Kueue admits: "" there is replaced on CREATE and the stored value put back on UPDATE."""
    namespace = "hyperpod-ns-research"
    obj = {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "x"}},
            "template": {
                "metadata": {"labels": {"app": "x", PRIORITY: ""}},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]},
            },
        },
    }
    outcome = run(obj, namespace)
    assert outcome.plan.allowed
    assert outcome.plan.warnings == [
        f"kueuePriority: an empty {PRIORITY} (spec.template.metadata.labels) means no WorkloadPriorityClass to "
        "Kueue; set to 'training-priority'"
    ]
    template_labels = "/spec/template/metadata/labels/"
    assert ops(
        outcome, f"{template_labels}kueue.x-k8s.io~1queue-name", f"{template_labels}kueue.x-k8s.io~1priority-class"
    ) == [
        {
            "op": "add",
            "path": f"{template_labels}kueue.x-k8s.io~1queue-name",
            "value": "hyperpod-ns-research-localqueue",
        },
        {"op": "replace", "path": f"{template_labels}kueue.x-k8s.io~1priority-class", "value": "training-priority"},
    ]
    stored = apply_patch(obj, outcome.patch)
    for label, means, value in (
        (QUEUE, "no queue", "hyperpod-ns-research-localqueue"),
        (PRIORITY, "no WorkloadPriorityClass", "training-priority"),
    ):
        emptied = copy.deepcopy(stored)
        emptied["spec"]["template"]["metadata"]["labels"][label] = ""
        update = run(emptied, namespace, old=stored)
        assert update.plan.allowed
        assert update.plan.warnings == [
            f"{'queue' if label == QUEUE else 'kueuePriority'}: an empty {label} (spec.template.metadata.labels."
            f"{label}) means {means} to Kueue; kept {value!r}"
        ]
        assert update.patch == [
            {"op": "replace", "path": f"{template_labels}{label.replace('/', '~1')}", "value": value}
        ]


def test_an_empty_priority_label_through_the_status_subresource_is_put_back() -> None:
    stored = created(gpu_job(), "hyperpod-ns-inference")
    emptied = copy.deepcopy(stored)
    emptied["metadata"]["labels"][PRIORITY] = ""
    body = review_body(emptied, "hyperpod-ns-inference", "UPDATE", stored)
    body["request"]["subResource"] = "status"
    outcome = review(body, TEAM_INDEX)
    assert outcome.plan.warnings == [
        f"kueuePriority: an empty {PRIORITY} (metadata.labels.{PRIORITY}) means no WorkloadPriorityClass to "
        "Kueue; kept 'inference-priority'"
    ]
    assert outcome.patch == [{"op": "replace", "path": PRIORITY_PATH, "value": "inference-priority"}]


# --- 2. an empty priorityClassName ---------------------------------------------------------------


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_an_empty_priority_class_name_is_filled_in_like_a_missing_one(namespace: str) -> None:
    """Defect: ``priorityClassName: ""`` (pcn.yaml document e1) was checked as a class named '':
    research refused it, the other teams warned and the pods got no team default. Kubernetes reads
    "" as none (Priority admission: ``len(pod.Spec.PriorityClassName) == 0``)."""
    team, _, _, pod_priority = TEAMS[namespace]
    outcome = run(manifest("e1"), namespace)
    assert outcome.plan.allowed
    assert outcome.plan.denials == [] and outcome.plan.warnings == []
    if pod_priority is None:  # no podPriority rule: nothing to fill in, and "" is no class to check
        assert ops(outcome, PCN) == []
        return
    assert ops(outcome, PCN) == [{"op": "replace", "path": PCN, "value": pod_priority}]
    change = next(c for c in outcome.plan.changes if c.rule == "podPriority")
    assert change.reason == (
        f"podset 'main': an empty priorityClassName is none to Kubernetes; the default of team {team!r}"
    )


def test_an_empty_priority_class_name_is_no_value_the_other_podsets_agree_on() -> None:
    """A podset with "" neither names the workload's pod priority nor blocks the one the others ask for."""
    obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p"},
        "spec": {
            "pytorchReplicaSpecs": {
                role: {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "priorityClassName": name,
                            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
                        }
                    },
                }
                for role, name in (("Master", ""), ("Worker", "experimentation-priority"))
            }
        },
    }
    outcome = run(obj, "hyperpod-ns-research")
    assert outcome.plan.allowed and outcome.plan.warnings == []
    master = "/spec/pytorchReplicaSpecs/Master/template/spec/priorityClassName"
    assert ops(outcome, PRIORITY_PATH, master) == [
        {"op": "add", "path": PRIORITY_PATH, "value": "experimentation-priority"},
        {"op": "replace", "path": master, "value": "experimentation-priority"},
    ]


@pytest.mark.parametrize("namespace", ["hyperpod-ns-research", "hyperpod-ns-inference"])
def test_an_update_that_empties_the_priority_class_name_gets_the_stored_one_back(namespace: str) -> None:
    _, _, _, pod_priority = TEAMS[namespace]
    stored = created(gpu_job(), namespace)
    assert stored["spec"]["template"]["spec"]["priorityClassName"] == pod_priority
    emptied = copy.deepcopy(stored)
    emptied["spec"]["template"]["spec"]["priorityClassName"] = ""
    outcome = run(emptied, namespace, old=stored)
    assert outcome.plan.allowed
    assert outcome.plan.warnings == [
        "podPriority: an empty priorityClassName (spec.template.spec.priorityClassName) means no PriorityClass "
        f"to Kubernetes; kept {pod_priority!r}"
    ]
    assert outcome.patch == [{"op": "replace", "path": PCN, "value": pod_priority}]


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_an_empty_priority_class_name_where_the_stored_object_had_none_changes_nothing(namespace: str) -> None:
    stored = created(gpu_job(), namespace)
    stored["spec"]["template"]["spec"].pop("priorityClassName", None)  # a podset from before the policy
    emptied = copy.deepcopy(stored)
    emptied["spec"]["template"]["spec"]["priorityClassName"] = ""
    for new, old in ((emptied, stored), (stored, emptied)):
        outcome = run(copy.deepcopy(new), namespace, old=copy.deepcopy(old))
        assert outcome.plan.allowed and outcome.patch == [] and outcome.plan.warnings == []


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_an_empty_scheduling_policy_priority_class_is_none(namespace: str) -> None:
    """Kueue's ``KubeflowJob.PriorityClass`` skips an empty ``schedulingPolicy.priorityClass``."""
    obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p"},
        "spec": {
            "runPolicy": {"schedulingPolicy": {"priorityClass": ""}},
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
                }
            },
        },
    }
    outcome = run(obj, namespace)
    assert outcome.plan.allowed
    assert [w for w in outcome.plan.warnings if "priority" in w.lower()] == []


# --- 3. a priority of the wrong type -------------------------------------------------------------


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("name", ["e2", "w7"])
def test_a_priority_class_name_that_is_no_string_is_a_malformed_object(namespace: str, name: str) -> None:
    """Defect: ``priorityClassName: 12`` (pcn.yaml e2, nulls.yaml w7) was refused or warned as
    "PriorityClass 12 … not allowed", not as the malformed value it is (a Go string field)."""
    outcome = run(manifest(name), namespace)
    assert outcome.plan.invalid
    assert outcome.plan.denials == [
        "malformed object: spec.template.spec.priorityClassName must be a string, got number 12"
    ]
    assert outcome.plan.warnings == [] and outcome.patch == []
    assert outcome.response["response"]["status"]["code"] == 422


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_an_update_that_makes_the_priority_class_name_no_string_is_a_malformed_object(namespace: str) -> None:
    stored = created(gpu_job(), namespace)
    changed = copy.deepcopy(stored)
    changed["spec"]["template"]["spec"]["priorityClassName"] = 12
    outcome = run(changed, namespace, old=stored)
    assert outcome.plan.denials == [
        "malformed object: spec.template.spec.priorityClassName must be a string, got number 12"
    ]
    # a stored malformed value the update leaves as it was is not the update's doing
    kept = copy.deepcopy(changed)
    kept["metadata"]["labels"]["team"] = "x"
    assert run(kept, namespace, old=changed).plan.allowed


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_scheduling_policy_priority_class_that_is_no_string_is_a_malformed_object(operation: str) -> None:
    def pytorchjob(priority_class: Any) -> dict[str, Any]:
        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "p"},
            "spec": {
                "runPolicy": {"schedulingPolicy": {"priorityClass": priority_class}},
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}
                },
            },
        }

    old = pytorchjob("training-priority") if operation == "UPDATE" else None
    outcome = run(pytorchjob(12), "hyperpod-ns-research", old=old)
    assert outcome.plan.denials == [
        "malformed object: spec.runPolicy.schedulingPolicy.priorityClass must be a string, got number 12"
    ]
    shapeless = pytorchjob(None)
    shapeless["spec"]["runPolicy"]["schedulingPolicy"] = "high"
    assert run(shapeless, "hyperpod-ns-research", old=old).plan.denials == [
        'malformed object: spec.runPolicy.schedulingPolicy must be an object, got string "high"'
    ]


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("label", [QUEUE, PRIORITY])
@pytest.mark.parametrize("status", [False, True])
def test_a_governed_label_that_is_no_string_is_a_malformed_object(namespace: str, label: str, status: bool) -> None:
    """On CREATE, UPDATE and an UPDATE of the ``status`` subresource (which refused 5 as a
    LocalQueue or WorkloadPriorityClass not allowed)."""
    stored = created(gpu_job(), namespace)
    message = f"malformed object: metadata.labels.{label} must be a string, got number 5"
    fresh = gpu_job()
    fresh["metadata"]["labels"] = {label: 5}
    if not status:
        assert run(fresh, namespace).plan.denials == [message]
    changed = copy.deepcopy(stored)
    changed["metadata"]["labels"][label] = 5
    body = review_body(changed, namespace, "UPDATE", stored)
    if status:
        body["request"]["subResource"] = "status"
    outcome = review(body, TEAM_INDEX)
    assert outcome.plan.invalid
    assert outcome.plan.denials == [message]
