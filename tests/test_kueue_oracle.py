"""Kueue's own test tables as the oracle of its TAS rules (SPEC §13).

Every row of ``tests/data/kueue/v0.19.2/*.yaml`` (transcribed from Kueue v0.19.2's Go tests, each
naming its test function and case) is checked against the governor: the podset findings of the
Kueue function the row tests (same count, same field paths), and the verdict of a review in a
team namespace without a topology rule, where Kueue's refusals are denied under the queue rule's
``enforce``. A row the governor does not model carries a ``skip`` reason.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import REPO, platform_with, review_body, teams_from

from webhook.core.admission.review import ReviewOutcome, review
from webhook.core.kueue.kinds import find_kind
from webhook.core.kueue.view import kueue_view
from webhook.core.plan.rules.kueue_tas import podset_problems

DATA = REPO / "tests" / "data" / "kueue" / "v0.19.2"
TAS_VALIDATION = DATA / "tas_validation_test.yaml"
JOB_WEBHOOK = DATA / "job_webhook_test.yaml"
JOBSET_WEBHOOK = DATA / "jobset_webhook_test.yaml"
LWS_WEBHOOK = DATA / "leaderworkerset_webhook_test.yaml"
MPIJOB_WEBHOOK = DATA / "mpijob_webhook_test.yaml"
RAYCLUSTER_WEBHOOK = DATA / "raycluster_webhook_test.yaml"
RAYJOB_WEBHOOK = DATA / "rayjob_webhook_test.yaml"
POD_WEBHOOK = DATA / "pod_webhook_test.yaml"
#: ``spec.headGroupSpec.template.metadata.annotations…``, ``spec.workerGroupSpecs[i].template.metadata.annotations…``
RAY_TEMPLATE = re.compile(
    r"spec\.(?:rayClusterSpec\.)?(?:headGroupSpec|workerGroupSpecs\[(\d+)\])\.template\.metadata\.(.*)"
)
#: ``spec.mpiReplicaSpecs[Launcher].template.metadata.annotations[key]``
MPI_TEMPLATE = re.compile(r"spec\.mpiReplicaSpecs\[(\w+)\]\.template\.metadata\.(.*)")
#: A row's field path → (its podset's name, the finding's subject).
Where = Callable[[str], tuple[str, str]]
#: ``spec.leaderWorkerTemplate.{leader,worker}Template.metadata.annotations[key]``
LWS_TEMPLATE = re.compile(r"spec\.leaderWorkerTemplate\.(leader|worker)Template\.metadata\.(.*)")
#: ``spec.replicatedJobs[i].template.spec.template.metadata.annotations[key]…``
REPLICATED = re.compile(r"spec\.replicatedJobs\[(\d+)\]\.template\.spec\.template\.metadata\.(.*)")
#: The replicaPath of Kueue's tables: a Job's pod template metadata.
PREFIX = "spec.template.metadata."
NO_TOPOLOGY_RULE = teams_from(platform_with({"queue": {"enforcement": "enforce"}}))
#: ``podset 'main': <subject>[ value]: <message> (Kueue v0.19.2 <source>)…``
FINDING = re.compile(r"podset '[^']*': ([^\s:]+)")
REFUSES = "; Kueue refuses the workload"
SOURCE = re.compile(r"\(Kueue v0\.19\.2 ([^)]+)\)")


def rows(path: Path) -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load(path.read_text())["rows"]
    return loaded


def row_id(row: dict[str, Any]) -> str:
    return f"{row['test']}/{row['case']}"


def subject(field: str) -> str:
    """Kueue's field path (``spec.template.metadata.annotations[key][1].size``, or
    ``…annotations.key`` as ``field.Path.Child`` prints it) → our finding's subject (``key[1].size``)."""
    assert field.startswith(PREFIX), field
    rest = field.removeprefix(PREFIX)
    if rest == "annotations":
        return rest
    if rest.startswith("annotations["):
        key, _, tail = rest.removeprefix("annotations[").partition("]")
        return key + tail
    assert rest.startswith("annotations."), field
    return rest.removeprefix("annotations.")


def make_job(
    pod_annotations: dict[str, str], annotations: dict[str, str] | None = None, parallelism: int = 1
) -> dict[str, Any]:
    """The Job of Kueue's ``testingjobs.MakeJob("job", ...)`` with the row's annotations."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "job", "annotations": dict(annotations or {})},
        "spec": {
            "parallelism": parallelism,
            "suspend": True,
            "template": {
                "metadata": {"annotations": dict(pod_annotations)},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "pause"}]},
            },
        },
    }


def run(obj: dict[str, Any], old: dict[str, Any] | None = None) -> ReviewOutcome:
    operation = "CREATE" if old is None else "UPDATE"
    return review(review_body(obj, "ml", operation=operation, old=old), NO_TOPOLOGY_RULE)


def skip_unmodelled(row: dict[str, Any]) -> None:
    if "skip" in row:
        pytest.skip(f"not modelled: {row['skip']}")


@pytest.mark.parametrize("row", rows(TAS_VALIDATION), ids=row_id)
def test_tas_validation_rows_give_kueues_errors(row: dict[str, Any]) -> None:
    skip_unmodelled(row)
    job = make_job(row["annotations"], parallelism=row.get("count", 64))
    kind = find_kind("batch/v1", "Job")
    assert kind is not None
    (podset,) = kueue_view(job, kind).podsets
    found = [p for p in podset_problems(podset) if (m := SOURCE.search(p)) and m.group(1) == row["function"]]
    subjects = [m.group(1) for p in found if (m := FINDING.match(p))]
    assert len(subjects) == len(found)
    if row["verdict"] == "accepted":
        assert found == []
        return
    assert len(found) == row["errors"], found
    assert sorted(subjects) == sorted(subject(f) for f in row["fields"]), found


@pytest.mark.parametrize("row", rows(TAS_VALIDATION), ids=row_id)
def test_tas_validation_rows_get_kueues_verdict_in_a_team_without_a_topology_rule(row: dict[str, Any]) -> None:
    skip_unmodelled(row)
    outcome = run(make_job(row["annotations"], parallelism=row.get("count", 64)))
    refused = [f for f in outcome.plan.denials + outcome.plan.warnings if f.endswith(REFUSES)]
    if row["verdict"] == "accepted":
        # (a rule Kueue's TAS assumes but no webhook checks may still be warned: Kueue admits it)
        assert outcome.plan.allowed and refused == [], refused
    else:
        assert not outcome.plan.allowed
        assert refused and refused == outcome.plan.denials, outcome.plan.denials


@pytest.mark.parametrize("row", rows(JOB_WEBHOOK), ids=row_id)
def test_job_webhook_rows_get_kueues_verdict(row: dict[str, Any]) -> None:
    skip_unmodelled(row)
    job = make_job(row["podAnnotations"], row.get("annotations"), row.get("parallelism", 1))
    old = None
    if row["operation"] == "UPDATE":
        old = copy.deepcopy(job)
        old["spec"]["template"]["metadata"] = {}
    outcome = run(job, old)
    findings = outcome.plan.denials + outcome.plan.warnings
    if row["verdict"] == "accepted":
        assert outcome.plan.allowed, outcome.plan.denials
        assert [f for f in findings if REFUSES in f or "malformed" in f] == []
        return
    # CREATE: denied; UPDATE: warned (the governor never blocks an UPDATE for its TAS annotations)
    said = outcome.plan.denials if old is None else outcome.plan.warnings
    assert outcome.plan.allowed is (old is not None)
    for field in row["fields"]:
        key = subject(field)
        named = [f for f in said if f"': {key}" in f or f".{key} must" in f]
        assert named, (key, findings)


def jobset(replicated: list[dict[str, Any]], annotated: bool = True) -> dict[str, Any]:
    """The JobSet of Kueue's ``testingjobs.MakeJobSet(...).ReplicatedJobs(...)`` (suspended; each
    count the row leaves out 0); ``annotated`` False: without the pod annotations (an UPDATE's old)."""

    def replicated_job(job: dict[str, Any]) -> dict[str, Any]:
        template = {
            "metadata": {"annotations": dict(job.get("podAnnotations", {}) if annotated else {})},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "pause"}]},
        }
        spec = {
            "parallelism": job.get("parallelism", 0),
            "completions": job.get("completions", 0),
            "template": template,
        }
        return {"name": job["name"], "replicas": job.get("replicas", 0), "template": {"spec": spec}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "jobset"},
        "spec": {"suspend": True, "replicatedJobs": [replicated_job(job) for job in replicated]},
    }


def check_review(row: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None, where: Where) -> None:
    """Kueue's verdict on ``obj`` (an UPDATE from ``old``) in a team without a topology rule: a
    CREATE Kueue refuses is denied, an UPDATE warned, by findings that all say Kueue refuses the
    workload and name, for each of Kueue's fields, its podset and annotation (``where(field)``);
    one Kueue accepts gets no such finding."""
    outcome = run(obj, old)
    findings = outcome.plan.denials + outcome.plan.warnings
    if row["verdict"] == "accepted":
        assert outcome.plan.allowed, outcome.plan.denials
        assert [f for f in findings if REFUSES in f or "malformed" in f] == []
        return
    said = outcome.plan.denials if old is None else outcome.plan.warnings
    assert outcome.plan.allowed is (old is not None)
    assert said and all(REFUSES in f for f in said), said
    for field in row["fields"]:
        podset, key = where(field)
        named = [f for f in said if f"'{podset}'" in f and (key == "annotations" or f"': {key}" in f)]
        assert named, (field, said)


@pytest.mark.parametrize("row", rows(JOBSET_WEBHOOK), ids=row_id)
def test_jobset_webhook_rows_get_kueues_verdict(row: dict[str, Any]) -> None:
    skip_unmodelled(row)

    def where(field: str) -> tuple[str, str]:
        match = REPLICATED.fullmatch(field)
        assert match is not None, field
        return row["replicatedJobs"][int(match.group(1))]["name"], subject(PREFIX + match.group(2))

    old = jobset(row["replicatedJobs"], annotated=False) if row["operation"] == "UPDATE" else None
    check_review(row, jobset(row["replicatedJobs"]), old, where)


def leaderworkerset(row: dict[str, Any], annotated: bool = True) -> dict[str, Any]:
    """The LeaderWorkerSet of Kueue's ``testingjobs.MakeLeaderWorkerSet`` (replicas 1, size 1 or
    the row's) with the row's templates; ``annotated`` False: without their annotations."""

    def template(which: str) -> dict[str, Any]:
        annotations = row[which]["annotations"] if annotated else {}
        return {"metadata": {"annotations": dict(annotations)}, "spec": {"containers": [{"name": "c", "image": "x"}]}}

    spec: dict[str, Any] = {"size": row.get("size", 1), "workerTemplate": template("workerTemplate")}
    if "leaderTemplate" in row:
        spec["leaderTemplate"] = template("leaderTemplate")
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "test-lws"},
        "spec": {"replicas": 1, "startupPolicy": "LeaderCreated", "leaderWorkerTemplate": spec},
    }


@pytest.mark.parametrize("row", rows(LWS_WEBHOOK), ids=row_id)
def test_leaderworkerset_webhook_rows_get_kueues_verdict(row: dict[str, Any]) -> None:
    skip_unmodelled(row)

    def where(field: str) -> tuple[str, str]:
        match = LWS_TEMPLATE.fullmatch(field)
        assert match is not None, field
        return match.group(1) if "leaderTemplate" in row else "main", subject(PREFIX + match.group(2))

    old = leaderworkerset(row, annotated=False) if row["operation"] == "UPDATE" else None
    check_review(row, leaderworkerset(row), old, where)


def mpijob(row: dict[str, Any]) -> dict[str, Any]:
    """The kubeflow.org/v2beta1 MPIJob of Kueue's ``testingjobs.MakeMPIJob`` with the row's replica specs."""
    specs = {
        role: {
            "replicas": spec["replicas"],
            "template": {
                "metadata": {"annotations": dict(spec["annotations"])},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        }
        for role, spec in row["mpiReplicaSpecs"].items()
    }
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "job"},
        "spec": {"runPolicy": {"suspend": True}, "mpiReplicaSpecs": specs},
    }


@pytest.mark.parametrize("row", rows(MPIJOB_WEBHOOK), ids=row_id)
def test_mpijob_webhook_rows_get_kueues_verdict(row: dict[str, Any]) -> None:
    skip_unmodelled(row)

    def where(field: str) -> tuple[str, str]:
        match = MPI_TEMPLATE.fullmatch(field)
        assert match is not None, field
        return match.group(1).lower(), subject(PREFIX + match.group(2))

    check_review(row, mpijob(row), None, where)


def raycluster(row: dict[str, Any]) -> dict[str, Any]:
    """The ray.io/v1 RayCluster of Kueue's ``testingjobs.MakeCluster`` with the row's head and worker groups."""

    def template(annotations: dict[str, str]) -> dict[str, Any]:
        return {"metadata": {"annotations": dict(annotations)}, "spec": {"containers": [{"name": "c", "image": "x"}]}}

    def group(spec: dict[str, Any]) -> dict[str, Any]:
        found = {"groupName": spec["groupName"], "rayStartParams": {}, "template": template(spec["annotations"])}
        return found | ({"replicas": spec["replicas"]} if "replicas" in spec else {})

    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "raycluster"},
        "spec": {
            "suspend": True,
            "headGroupSpec": {"rayStartParams": {}, "template": template(row["headAnnotations"])},
            "workerGroupSpecs": [group(spec) for spec in row["workerGroupSpecs"]],
        },
    }


@pytest.mark.parametrize(
    ("kind", "row"),
    [("RayCluster", row) for row in rows(RAYCLUSTER_WEBHOOK)] + [("RayJob", row) for row in rows(RAYJOB_WEBHOOK)],
    ids=[f"RayCluster/{row_id(r)}" for r in rows(RAYCLUSTER_WEBHOOK)]
    + [f"RayJob/{row_id(r)}" for r in rows(RAYJOB_WEBHOOK)],
)
def test_ray_webhook_rows_get_kueues_verdict(kind: str, row: dict[str, Any]) -> None:
    skip_unmodelled(row)

    def where(field: str) -> tuple[str, str]:
        match = RAY_TEMPLATE.fullmatch(field)
        assert match is not None, field
        index = match.group(1)
        podset = "head" if index is None else row["workerGroupSpecs"][int(index)]["groupName"]
        return podset, subject(PREFIX + match.group(2))

    cluster = raycluster(row)
    if kind == "RayJob":  # Kueue's testingjobs.MakeJob: the cluster's spec as spec.rayClusterSpec
        del cluster["spec"]["suspend"]
        spec = {"suspend": True, "shutdownAfterJobFinishes": True, "rayClusterSpec": cluster["spec"]}
        cluster = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rayjob"}, "spec": spec}
    check_review(row, cluster, None, where)


@pytest.mark.parametrize("row", rows(POD_WEBHOOK), ids=row_id)
def test_pod_webhook_rows_get_kueues_verdict(row: dict[str, Any]) -> None:
    skip_unmodelled(row)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "test-pod", "annotations": dict(row["annotations"])},
        "spec": {"containers": [{"name": "c", "image": "pause"}]},
    }
    check_review(row, pod, None, lambda field: ("main", subject(PREFIX + field.removeprefix("metadata."))))


#: Each data file → its Go tests' TAS rows, counted in Kueue v0.19.2's source.
TRANSCRIBED = {
    TAS_VALIDATION: {
        "TestValidateSliceRequiredTopologyConstraintsAnnotation": 13,
        "TestValidateSliceSizeAnnotationUpperBound": 4,
    },
    JOB_WEBHOOK: {"TestValidateCreate": 16, "TestValidateUpdate": 4},
    JOBSET_WEBHOOK: {"TestValidateCreate": 9, "TestValidateUpdate": 2},
    LWS_WEBHOOK: {"TestValidateCreate": 16, "TestValidateUpdate": 2},
    MPIJOB_WEBHOOK: {"TestValidateCreate": 9},
    RAYCLUSTER_WEBHOOK: {"TestValidateCreate": 9},
    RAYJOB_WEBHOOK: {"TestValidateCreate": 9},
    POD_WEBHOOK: {"TestValidateCreate": 2},
}


def test_the_tables_are_transcribed_whole() -> None:
    """Every TAS row of each Go test is in its data file, once; one row (a feature gate turned
    off) is not modelled."""
    every: list[dict[str, Any]] = []
    for path, counts in TRANSCRIBED.items():
        found = rows(path)
        assert {test: len([r for r in found if r["test"] == test]) for test in counts} == counts, path.name
        assert len({row_id(r) for r in found}) == len(found) == sum(counts.values()), path.name
        every.extend(found)
    assert [row_id(r) for r in every if "skip" in r] == [
        "TestValidateSliceRequiredTopologyConstraintsAnnotation/invalid: feature gate disabled"
    ]
