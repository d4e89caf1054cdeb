"""Kueue's own example manifests through ``kgov mutate``, as given and with their Kueue labels stripped.

The cases live in ``../shared/cases/kueue-examples`` (Kueue's ``site/static/examples``). Each
workload's expected pod-template paths, labels path and suspend path are written out by hand below
from reading the files, so the kinds table is checked against real manifests, not against itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from support import CASES, PLATFORM, load_documents, needs_cases, strip_kueue

from webhook.cli import main
from webhook.core.objects.paths import lookup

NAMESPACE = "hyperpod-ns-research"
QUEUE = "hyperpod-ns-research-localqueue"
PRIORITY = "training-priority"
LEVEL = "topology.k8s.aws/network-node-layer-3"

M = ("metadata",)
S = ("spec", "suspend")
KF = ("spec", "runPolicy", "suspend")
# file → {document index: (labels_at, suspend path or None, [pod template paths])}
EXPECTED: dict[str, dict[int, tuple[tuple[Any, ...], tuple[Any, ...] | None, list[tuple[Any, ...]]]]] = {
    "admin/shared-quota-sample-job.yaml": {0: (M, S, [("spec", "template")])},
    "appwrapper/deployment-sample.yaml": {0: (M, S, [("spec", "components", 0, "template", "spec", "template")])},
    "appwrapper/leaderworkerset-sample.yaml": {
        0: (
            M,
            S,
            [
                ("spec", "components", 0, "template", "spec", "leaderWorkerTemplate", "leaderTemplate"),
                ("spec", "components", 0, "template", "spec", "leaderWorkerTemplate", "workerTemplate"),
            ],
        )
    },
    "appwrapper/pytorch-sample.yaml": {
        0: (
            M,
            S,
            [
                ("spec", "components", 0, "template", "spec", "pytorchReplicaSpecs", "Master", "template"),
                ("spec", "components", 0, "template", "spec", "pytorchReplicaSpecs", "Worker", "template"),
            ],
        )
    },
    "getting-started/quick-start-job.yaml": {0: (M, S, [("spec", "template")])},
    "jobs/ray-cluster-sample.yaml": {
        0: (M, S, [("spec", "headGroupSpec", "template"), ("spec", "workerGroupSpecs", 0, "template")])
    },
    "jobs/ray-job-autoscaling-sample.yaml": {
        0: (
            M,
            S,
            [
                ("spec", "rayClusterSpec", "headGroupSpec", "template"),
                ("spec", "rayClusterSpec", "workerGroupSpecs", 0, "template"),
            ],
        )
    },
    "jobs/ray-job-sample.yaml": {
        0: (
            M,
            S,
            [
                ("spec", "rayClusterSpec", "headGroupSpec", "template"),
                ("spec", "rayClusterSpec", "workerGroupSpecs", 0, "template"),
            ],
        )
    },
    "jobs/ray-service-sample.yaml": {
        0: (
            M,
            None,
            [
                ("spec", "rayClusterConfig", "headGroupSpec", "template"),
                ("spec", "rayClusterConfig", "workerGroupSpecs", 0, "template"),
            ],
        )
    },
    "jobs/sample-cronjob.yaml": {
        0: (
            ("spec", "jobTemplate", "metadata"),
            ("spec", "jobTemplate", "spec", "suspend"),
            [("spec", "jobTemplate", "spec", "template")],
        )
    },
    "jobs/sample-jaxjob.yaml": {0: (M, KF, [("spec", "jaxReplicaSpecs", "Worker", "template")])},
    "jobs/sample-job-partial-admission.yaml": {0: (M, S, [("spec", "template")])},
    "jobs/sample-job.yaml": {0: (M, S, [("spec", "template")])},
    "jobs/sample-jobset-tas-combined.yaml": {
        0: (M, S, [("spec", "replicatedJobs", 0, "template", "spec", "template")])
    },
    "jobs/sample-jobset-tas-required.yaml": {
        0: (M, S, [("spec", "replicatedJobs", 0, "template", "spec", "template")])
    },
    "jobs/sample-jobset-tas-sliced.yaml": {0: (M, S, [("spec", "replicatedJobs", 0, "template", "spec", "template")])},
    "jobs/sample-jobset.yaml": {
        0: (
            M,
            S,
            [
                ("spec", "replicatedJobs", 0, "template", "spec", "template"),
                ("spec", "replicatedJobs", 1, "template", "spec", "template"),
            ],
        )
    },
    "jobs/sample-mpijob.yaml": {
        0: (
            M,
            KF,
            [("spec", "mpiReplicaSpecs", "Launcher", "template"), ("spec", "mpiReplicaSpecs", "Worker", "template")],
        )
    },
    "jobs/sample-paddlejob.yaml": {0: (M, KF, [("spec", "paddleReplicaSpecs", "Worker", "template")])},
    "jobs/sample-pytorchjob.yaml": {
        0: (
            M,
            KF,
            [
                ("spec", "pytorchReplicaSpecs", "Master", "template"),
                ("spec", "pytorchReplicaSpecs", "Worker", "template"),
            ],
        )
    },
    "jobs/sample-scalable-job.yaml": {0: (M, S, [("spec", "template")])},
    "jobs/sample-sparkapplication.yaml": {0: (M, S, [])},
    "jobs/sample-tfjob.yaml": {
        0: (M, KF, [("spec", "tfReplicaSpecs", "PS", "template"), ("spec", "tfReplicaSpecs", "Worker", "template")])
    },
    "jobs/sample-xgboostjob.yaml": {
        0: (
            M,
            KF,
            [("spec", "xgbReplicaSpecs", "Master", "template"), ("spec", "xgbReplicaSpecs", "Worker", "template")],
        )
    },
    "pods-kueue/kueue-pod-group.yaml": {0: (M, None, [()]), 1: (M, None, [()])},
    "pods-kueue/kueue-pod.yaml": {0: (M, None, [()])},
    "serving-workloads/sample-deployment.yaml": {0: (M, None, [("spec", "template")])},
    "serving-workloads/sample-hami.yaml": {4: (M, None, [("spec", "template")])},
    "serving-workloads/sample-leaderworkerset-tas.yaml": {
        0: (
            M,
            None,
            [("spec", "leaderWorkerTemplate", "leaderTemplate"), ("spec", "leaderWorkerTemplate", "workerTemplate")],
        )
    },
    "serving-workloads/sample-leaderworkerset.yaml": {
        0: (
            M,
            None,
            [("spec", "leaderWorkerTemplate", "leaderTemplate"), ("spec", "leaderWorkerTemplate", "workerTemplate")],
        )
    },
    "serving-workloads/sample-statefulset.yaml": {0: (M, None, [("spec", "template")])},
    "tas/sample-job-preferred.yaml": {0: (M, S, [("spec", "template")])},
    "tas/sample-job-required.yaml": {0: (M, S, [("spec", "template")])},
    "tas/sample-job-unconstrained.yaml": {0: (M, S, [("spec", "template")])},
}

# Stripped cases Kueue itself would refuse once they carry a queue label: denied with our message
# instead of being turned into an object Kueue's webhook refuses.
DENIED_WHEN_MANAGED = {
    "jobs/ray-job-autoscaling-sample.yaml": (
        "queue: Kueue refuses a RayJob with spec.rayClusterSpec.enableInTreeAutoscaling: true "
        "(a kueue managed job should only use autoscaling when workload slicing is enabled"
    ),
}

# Kueue's XGBoostJob sample asks for `cpu: 0.5`, a JSON number. As given (with its own queue label)
# it is read as a quantity: Kueue's webhook suspends it and so re-encodes 0.5 as "500m" before the
# CRD's int-or-string schema is checked. Stripped of its label, the governor adds one, Kueue's
# webhook then changes nothing and the schema would refuse the number (e2e/test_malformed.py):
# refused by us, naming each path.
FRACTIONAL = (
    'must be a whole number or a quantity string (e.g. 8, "500m", "64Gi"): the CRD\'s int-or-string '
    "schema refuses a fractional JSON number, which Kueue's webhook re-encodes only in a workload "
    "submitted with a queue label, got number 0.5"
)
MALFORMED_STRIPPED = {
    "jobs/sample-xgboostjob.yaml": (
        f"malformed object: spec.xgbReplicaSpecs.Master.template.spec.containers[0].resources.requests.cpu {FRACTIONAL}"
    ),
}
REFUSED = {**DENIED_WHEN_MANAGED, **MALFORMED_STRIPPED}

pytestmark = needs_cases
ALL_FILES = sorted(str(p.relative_to(CASES)) for p in CASES.glob("**/*.yaml")) if CASES.is_dir() else []


def mutate(path: Path, *extra: str) -> Any:
    return CliRunner().invoke(
        main, ["mutate", "--platform", str(PLATFORM), "-n", NAMESPACE, "-f", str(path), *extra], catch_exceptions=False
    )


def test_every_workload_case_has_an_expectation() -> None:
    """A new workload file in the cases folder must get its expectations written here."""
    from webhook.core.kueue.kinds import find_kind

    found = {
        name
        for name in ALL_FILES
        for doc in load_documents(CASES / name)
        if find_kind(str(doc.get("apiVersion", "")), str(doc.get("kind", "")))
    }
    assert found == set(EXPECTED)


@pytest.mark.parametrize("name", ALL_FILES)
def test_case_as_given(name: str) -> None:
    """Their own queue labels (user-queue, …) belong to no team here: denied, naming the rule."""
    result = mutate(CASES / name)
    labelled = {
        index
        for index, doc in enumerate(load_documents(CASES / name))
        if index in EXPECTED.get(name, {})
        and "kueue.x-k8s.io/queue-name" in (lookup(doc, (*EXPECTED[name][index][0], "labels")) or {})
    }
    if labelled:
        assert result.exit_code == 1, result.output
        for index in labelled:
            assert f"document {index + 1} denied: queue: LocalQueue" in result.stderr
            assert f"allowed: {QUEUE}" in result.stderr
    else:
        assert result.exit_code == 0, result.stderr
        given = load_documents(CASES / name)
        out = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
        assert len(out) == len(given)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_case_stripped_gets_the_team_policy(name: str, tmp_path: Path) -> None:
    given = load_documents(CASES / name)
    stripped = [strip_kueue(doc) for doc in given]
    source = tmp_path / "stripped.yaml"
    source.write_text(yaml.safe_dump_all(stripped, sort_keys=False))
    result = mutate(source)
    if name in REFUSED:
        assert result.exit_code == 1
        # one reason on the document's line, several indented below it
        assert f"document 1 denied: {REFUSED[name]}" in result.stderr or f"\n  {REFUSED[name]}\n" in result.stderr
        return
    assert result.exit_code == 0, result.stderr
    out = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
    assert len(out) == len(given)
    for index, (labels_at, suspend, templates) in EXPECTED[name].items():
        doc = out[index]
        labels = lookup(doc, (*labels_at, "labels"))
        assert labels["kueue.x-k8s.io/queue-name"] == QUEUE
        assert labels["kueue.x-k8s.io/priority-class"] == PRIORITY
        if suspend is not None:
            assert lookup(doc, suspend) is True
        for path in templates:
            template = lookup(doc, path) if path else doc
            annotations = template["metadata"]["annotations"]
            assert annotations["kueue.x-k8s.io/podset-preferred-topology"] == LEVEL  # auto, no inventory
            assert template["spec"]["priorityClassName"] == PRIORITY
            terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"
            ]
            assert all(
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}
                in term["matchExpressions"]
                for term in terms
            )
        # The document carries the namespace it was judged for (-n), whatever it said.
        assert doc["metadata"]["namespace"] == NAMESPACE
        # Nothing else of the user's is lost: every original leaf is still there, same value.
        missing = _leaves(stripped[index]) - _leaves(doc)
        replaced = {(("metadata", "namespace"), stripped[index].get("metadata", {}).get("namespace"))}
        assert missing <= ({(suspend, False)} if suspend else set()) | replaced, missing
    # Documents that are not workloads come back exactly as given.
    for index, doc in enumerate(out):
        if index not in EXPECTED[name]:
            assert doc == stripped[index]


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> set[tuple[tuple[Any, ...], Any]]:
    if isinstance(node, dict):
        return {leaf for key, value in node.items() for leaf in _leaves(value, (*path, key))}
    if isinstance(node, list):
        return {leaf for index, value in enumerate(node) for leaf in _leaves(value, (*path, index))}
    return {(path, node)}


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - set(REFUSED)))
def test_case_mutation_is_idempotent(name: str, tmp_path: Path) -> None:
    stripped = [strip_kueue(doc) for doc in load_documents(CASES / name)]
    first = tmp_path / "first.yaml"
    first.write_text(yaml.safe_dump_all(stripped, sort_keys=False))
    once = mutate(first)
    second = tmp_path / "second.yaml"
    second.write_text(once.stdout)
    again = mutate(second, "--patch")
    assert again.exit_code == 0, again.stderr
    patches = yaml.safe_load(again.stdout)
    assert patches == [[] for _ in stripped], patches
