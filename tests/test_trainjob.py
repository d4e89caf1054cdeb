"""TrainJob: its podsets from the (Cluster)TrainingRuntime it references, as Kueue v0.19.2 builds
them with Trainer v2.2.1 (``pkg/controller/jobs/trainjob`` ``getChildJobSet``), and the rules'
values written back as the governor's ``spec.runtimePatches`` entry.

The runtimes are Trainer v2.2.1's own (``manifests/base/runtimes``: ``torch-distributed``,
``deepspeed-distributed`` with MPI's ``runLauncherAsNode``, ``torchtune-llama3.2-1b`` with the
dataset and model initializers), in ``tests/data/trainer/``. The e2e suite checks the same
podsets against the real Kueue and Trainer (``e2e/test_trainjob.py``).
"""

from __future__ import annotations

import copy
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from fuzzing import check_answer, examples, paths_of, replaced
from hypothesis import given
from hypothesis import strategies as st
from support import aws_nodes, platform_with, review_body, teams_from

from webhook.cli import main
from webhook.core.admission.review import ReviewOutcome, review
from webhook.core.kueue.crd_defaults import with_crd_defaults
from webhook.core.kueue.kinds import find_kind
from webhook.core.kueue.trainer import child_jobs, expanded, runtime_key, strategic_merge
from webhook.core.kueue.view import kueue_view
from webhook.core.plan.patch import apply_patch

DATA = Path(__file__).parent / "data" / "trainer"
RACK = "topology.k8s.aws/network-node-layer-3"
BLOCK = "topology.k8s.aws/network-node-layer-2"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
GOVERNOR = "kueue-governor.io/governor"
AFFINITY = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}]
POLICY = {
    "queue": {},
    "topology": {"mode": "required", "level": RACK, "enforcement": "enforce"},
    "nodeAffinity": AFFINITY,
}
ROW = find_kind("trainer.kubeflow.org/v1alpha1", "TrainJob")


def load(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((DATA / f"runtime-{name}.yaml").read_text())
    return document


TORCH, DEEPSPEED, TORCHTUNE = load("torch_distributed"), load("deepspeed_distributed"), load("llama3_2_1B")
RUNTIMES = {("ClusterTrainingRuntime", "", r["metadata"]["name"]): r for r in (TORCH, DEEPSPEED, TORCHTUNE)}


def lookup(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    return RUNTIMES.get((kind, namespace, name))


def trainjob(runtime: str = "torch-distributed", **spec: Any) -> dict[str, Any]:
    """A TrainJob as the API server hands it to the webhook (its CRD's defaults applied)."""
    obj = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t"},
        "spec": {"runtimeRef": {"name": runtime}, **spec},
    }
    defaulted: dict[str, Any] = with_crd_defaults(obj)
    return defaulted


GPUS = {"resourcesPerNode": {"requests": {"nvidia.com/gpu": "8"}}}


def run(obj: dict[str, Any], policy: dict[str, Any] = POLICY, **kw: Any) -> ReviewOutcome:
    return review(review_body(obj, "ml", **kw), teams_from(platform_with(policy)), runtimes=lookup)


def podsets(obj: dict[str, Any], runtime: dict[str, Any]) -> list[tuple[str, int, Any]]:
    assert ROW is not None
    view = kueue_view(expanded(obj, runtime), ROW)
    assert not view.problems
    return [(p.name, p.count, p.requests) for p in view.podsets]


def governor_jobs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    (entry,) = [p for p in obj["spec"]["runtimePatches"] if p["manager"] == GOVERNOR]
    jobs: list[dict[str, Any]] = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return jobs


# --- Kueue's podsets: Trainer's runtime code ------------------------------------------------------


def test_torch_runtime_the_trainjob_numnodes_and_resources_per_node() -> None:
    """The trainer job's count is spec.trainer.numNodes (else the runtime's mlPolicy.numNodes);
    resourcesPerNode replaces container node's resources (Trainer's builder)."""
    assert podsets(trainjob(), TORCH) == [("node", 1, {})]
    assert podsets(trainjob(trainer={"numNodes": 4, **GPUS}), TORCH) == [("node", 4, {"nvidia.com/gpu": Decimal(8)})]


def test_deepspeed_mpi_runtime_launcher_runs_as_a_node() -> None:
    """MPI: numNodes sets the job named node (one less with runLauncherAsNode); the launcher is the
    trainer step (mlPolicy.numNodes: 1); resourcesPerNode goes to both node containers."""
    gpu = {"nvidia.com/gpu": Decimal(8)}
    assert podsets(trainjob("deepspeed-distributed", trainer={"numNodes": 4, **GPUS}), DEEPSPEED) == [
        ("launcher", 1, gpu),
        ("node", 3, gpu),
    ]
    assert podsets(trainjob("deepspeed-distributed", trainer={"numNodes": 1}), DEEPSPEED) == [
        ("launcher", 1, {}),
        ("node", 1, {}),
    ]


def test_initializers_are_podsets_of_one_pod() -> None:
    """Each replicated job is a Kueue podset (the initializers too), 1 replica each."""
    names = [(name, count) for name, count, _ in podsets(trainjob("torchtune-llama3.2-1b"), TORCHTUNE)]
    assert names == [("dataset-initializer", 1), ("model-initializer", 1), ("node", 1)]


def test_runtime_patches_merge_in_order_as_a_strategic_merge_patch() -> None:
    """Trainer merges each patch into the replicated job of the same name: maps by key, null
    removes a key, containers by name, tolerations replaced whole."""
    job = {
        "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "a"}], "tolerations": [{"key": "x"}]}}}
    }
    patch = {
        "spec": {
            "template": {
                "metadata": {"annotations": {"a": "1"}},
                "spec": {"containers": [{"name": "node", "env": [{"name": "E", "value": "v"}]}], "tolerations": []},
            }
        }
    }
    merged = strategic_merge(job, patch)
    spec = merged["spec"]["template"]["spec"]
    assert spec["containers"] == [{"name": "node", "image": "a", "env": [{"name": "E", "value": "v"}]}]
    assert spec["tolerations"] == []
    assert strategic_merge(merged, {"spec": {"template": {"metadata": {"annotations": {"a": None}}}}})["spec"][
        "template"
    ]["metadata"] == {"annotations": {}}
    user = trainjob(runtimePatches=[_patch("me.example.com/user", {PREFERRED: BLOCK})])
    (job_view,) = child_jobs(user, TORCH)
    assert job_view["template"]["spec"]["template"]["metadata"]["annotations"] == {PREFERRED: BLOCK}


def _patch(manager: str, annotations: dict[str, str], job: str = "node") -> dict[str, Any]:
    template = {"spec": {"template": {"metadata": {"annotations": annotations}}}}
    return {
        "manager": manager,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": job, "template": template}]}}},
    }


def test_runtime_reference() -> None:
    assert runtime_key(trainjob(), "ml") == ("ClusterTrainingRuntime", "", "torch-distributed")
    namespaced = trainjob(runtimeRef={"name": "r", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"})
    assert runtime_key(namespaced, "ml") == ("TrainingRuntime", "ml", "r")
    other = trainjob(runtimeRef={"name": "r", "kind": "Runtime", "apiGroup": "example.com"})
    assert "is no runtime Trainer knows" in str(runtime_key(other, "ml"))


# --- the rules through runtimePatches -------------------------------------------------------------


def test_topology_and_affinity_are_written_as_the_governors_runtime_patch() -> None:
    obj = trainjob(trainer={"numNodes": 2, **GPUS})
    outcome = run(obj)
    assert outcome.plan.allowed, outcome.plan.denials
    patched = apply_patch(obj, outcome.patch)
    assert patched["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "ml-queue"}
    assert patched["spec"]["suspend"] is True
    (job,) = governor_jobs(patched)
    pod = job["template"]["spec"]["template"]
    assert job["name"] == "node"
    assert pod["metadata"] == {"annotations": {REQUIRED: RACK}}
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {"nodeSelectorTerms": [{"matchExpressions": AFFINITY}]}
    again = run(patched)  # idempotent: planned on its own output, nothing more
    assert (again.patch, again.plan.warnings, again.plan.denials) == ([], [], [])


def test_the_governors_entry_comes_after_the_users_and_keeps_their_terms() -> None:
    """A user's patch with its own node affinity: the governor's entry (later, so it wins the
    atomic nodeSelectorTerms list) holds the user's terms with the team's expressions ANDed in."""
    user_term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    user = {
        "manager": "me.example.com/user",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "affinity": {
                                                "nodeAffinity": {
                                                    "requiredDuringSchedulingIgnoredDuringExecution": {
                                                        "nodeSelectorTerms": [user_term]
                                                    }
                                                }
                                            }
                                        }
                                    }
                                }
                            },
                        }
                    ]
                }
            }
        },
    }
    obj = trainjob(runtimePatches=[user])
    patched = apply_patch(obj, run(obj).patch)
    assert [p["manager"] for p in patched["spec"]["runtimePatches"]] == ["me.example.com/user", GOVERNOR]
    (job,) = governor_jobs(patched)
    terms = job["template"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    expressions = terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
    assert expressions == [*user_term["matchExpressions"], *AFFINITY]


def test_a_tas_annotation_in_runtime_patches_is_the_users_and_checked_as_kueue_does() -> None:
    """Kueue's trainjob webhook checks the TAS annotations of the podsets it builds (the runtime's
    template with every runtimePatches entry merged): a user's preferred level is kept (no second
    one added), and two annotations on one podset are refused, naming the runtime's job."""
    preferred = trainjob(runtimePatches=[_patch("me.example.com/user", {PREFERRED: RACK})])
    outcome = run(preferred, {**POLICY, "topology": {"mode": "required", "level": RACK}})
    assert outcome.plan.allowed, outcome.plan.denials
    patched = apply_patch(preferred, outcome.patch)
    assert REQUIRED not in governor_jobs(patched)[0]["template"]["spec"]["template"].get("metadata", {}).get(
        "annotations", {}
    )
    both = trainjob(runtimePatches=[_patch("me.example.com/user", {PREFERRED: RACK, REQUIRED: RACK})])
    refused = run(both)
    assert not refused.plan.allowed
    (denial,) = refused.plan.denials
    assert "must not contain more than one topology annotation" in denial
    assert denial.endswith("in spec.runtimePatches or in the template of ClusterTrainingRuntime 'torch-distributed'")


def test_pod_priority_is_the_runtimes_a_patch_cannot_set_it() -> None:
    """Trainer v2.2.1's PodSpecPatch has no priorityClassName: a default is reported (denied under
    enforce) with where to set it; a runtime's class outside the allowed set is refused."""
    enforce = {"queue": {}, "podPriority": {"default": "low", "allowed": ["low"], "enforcement": "enforce"}}
    denied = run(trainjob(), enforce)
    assert denied.plan.denied_rules == ["podPriority"]
    assert "spec.priorityClassName of replicatedJob 'node' is set by the runtime only" in denied.plan.denials[0]
    assert "set 'low' there" in denied.plan.denials[0]
    warned = run(trainjob(), {**enforce, "podPriority": {"default": "low", "enforcement": "default"}})
    assert warned.plan.allowed and warned.plan.warned_rules == ["podPriority"]
    with_class = copy.deepcopy(TORCH)
    pod = with_class["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["priorityClassName"] = "low"
    RUNTIMES[("ClusterTrainingRuntime", "", "with-class")] = {**with_class, "metadata": {"name": "with-class"}}
    try:
        assert run(trainjob("with-class"), enforce).plan.denials == []
        pod["spec"]["priorityClassName"] = "high"
        high = run(trainjob("with-class"), enforce)
        assert "PriorityClass 'high'" in high.plan.denials[0]
    finally:
        del RUNTIMES[("ClusterTrainingRuntime", "", "with-class")]


def test_an_unknown_runtime_is_said_and_never_blocks_an_update() -> None:
    missing = trainjob("nowhere")
    created = run(missing)
    assert created.plan.denied_rules == ["topology"]
    assert "ClusterTrainingRuntime 'nowhere' is not known to the governor" in created.plan.denials[0]
    labelled = {**missing, "metadata": {"name": "t", "labels": {"team": "x"}}}
    updated = run(labelled, operation="UPDATE", old=missing)
    assert updated.plan.allowed


def test_topology_auto_picks_the_level_from_the_runtimes_pods() -> None:
    """Mode auto sizes the podsets Kueue builds: 2 pods of 8 GPUs fit one rack (2 hosts)."""
    obj = trainjob(trainer={"numNodes": 2, **GPUS})
    outcome = review(
        review_body(obj, "ml"),
        teams_from(platform_with({"queue": {}, "topology": {"mode": "auto"}})),
        inventory=aws_nodes(),
        runtimes=lookup,
    )
    patched = apply_patch(obj, outcome.patch)
    assert governor_jobs(patched)[0]["template"]["spec"]["template"]["metadata"]["annotations"] == {REQUIRED: RACK}


# --- UPDATE: Kueue's admission, a re-apply ----------------------------------------------------------


def test_kueue_admitting_it_is_never_refused_and_gets_no_patch() -> None:
    """Kueue starts it with one UPDATE: its own entry's node selector and suspend false."""
    created = trainjob(trainer={"numNodes": 2, **GPUS})
    stored = apply_patch(created, run(created).patch)
    kueue_entry = {
        "manager": "kueue.x-k8s.io/manager",
        "trainingRuntimeSpec": {"template": {"spec": {}}},
    }
    stored["spec"]["runtimePatches"].append(kueue_entry)
    admitted = copy.deepcopy(stored)
    admitted["spec"]["suspend"] = False
    admitted["spec"]["runtimePatches"][-1]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] = [
        {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {RACK: "rack-1"}}}}}}
    ]
    outcome = run(admitted, operation="UPDATE", old=stored)
    assert outcome.plan.allowed and outcome.patch == [], (outcome.plan.denials, outcome.patch)


def test_a_reapply_dropping_the_governors_entry_gets_it_back_while_suspended() -> None:
    created = trainjob(trainer={"numNodes": 2, **GPUS})
    stored = apply_patch(created, run(created).patch)
    reapplied = copy.deepcopy(stored)
    del reapplied["spec"]["runtimePatches"]
    outcome = run(reapplied, operation="UPDATE", old=stored)
    assert outcome.plan.allowed
    restored = apply_patch(reapplied, outcome.patch)
    assert governor_jobs(restored) == governor_jobs(stored)
    # Running (suspended neither before nor after: Trainer lets no one change runtimePatches): the
    # dropped entry is put back as it was, at its place, so the list is the stored one again.
    kueue_entry = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {}}}}
    running_old = copy.deepcopy(stored)
    running_old["spec"]["suspend"] = False
    running_old["spec"]["runtimePatches"].append(kueue_entry)
    running_new = copy.deepcopy(running_old)
    del running_new["spec"]["runtimePatches"][0]
    frozen = run(running_new, operation="UPDATE", old=running_old)
    assert frozen.plan.allowed
    assert apply_patch(running_new, frozen.patch)["spec"]["runtimePatches"] == running_old["spec"]["runtimePatches"]
    assert any("is put back as it was" in w for w in frozen.plan.warnings)
    # A value of the entry the update drops while running cannot be written back: said, not made
    # (Trainer refuses the update itself: its patch list changed while running).
    edited = copy.deepcopy(running_old)
    del edited["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"][
        "spec"
    ]["template"]["metadata"]
    said = run(edited, operation="UPDATE", old=running_old)
    assert said.plan.allowed and said.patch == []
    assert any("can change only while the TrainJob is suspended" in w for w in said.plan.warnings)


@pytest.mark.parametrize("runtime", ["deepspeed-distributed", "torchtune-llama3.2-1b"])
def test_each_replicated_job_gets_its_own_item_in_one_entry(runtime: str) -> None:
    obj = trainjob(runtime)
    patched = apply_patch(obj, run(obj).patch)
    names = [job["name"] for job in governor_jobs(patched)]
    expected = [
        j["name"]
        for j in RUNTIMES[("ClusterTrainingRuntime", "", runtime)]["spec"]["template"]["spec"]["replicatedJobs"]
    ]
    assert names == expected
    assert run(patched).patch == []


# --- kgov mutate --runtime ------------------------------------------------------------------------


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PLATFORM = Path(__file__).resolve().parent.parent / "kueue-config" / "platform.yaml"


def test_kgov_mutate_plans_a_trainjob_on_its_runtime_file(tmp_path: Path) -> None:
    """The example TrainJob in research's namespace, its runtime from --runtime (a second file of
    other runtimes too: repeatable, multi-document), as the server would plan it."""
    others = tmp_path / "others.yaml"
    others.write_text(yaml.safe_dump_all([DEEPSPEED, TORCHTUNE]))
    args = ["mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-research", "-f", str(EXAMPLES / "trainjob.yaml")]
    args += ["--runtime", str(others), "--runtime", str(EXAMPLES / "training-runtime.yaml")]
    args += ["--nodes", str(EXAMPLES / "nodes.json")]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    mutated = yaml.safe_load(result.stdout)
    assert mutated["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "training-priority"
    (job,) = governor_jobs(mutated)
    assert job["template"]["spec"]["template"]["metadata"]["annotations"] == {REQUIRED: RACK}
    without = CliRunner().invoke(main, args[:7], catch_exceptions=False)  # no runtime: its pods are unknown
    assert without.exit_code == 1
    assert "ClusterTrainingRuntime 'torch-distributed' is not known to the governor" in without.stderr


def test_kgov_mutate_refuses_a_runtime_file_of_another_kind(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n")
    args = [
        "mutate",
        "--platform",
        str(PLATFORM),
        "-n",
        "ml",
        "-f",
        str(EXAMPLES / "trainjob.yaml"),
        "--runtime",
        str(job),
    ]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"kgov mutate: {job}: document 1: batch/v1 Job is no training runtime")


def test_admission_policies_read_no_pod_template_of_a_trainjob(tmp_path: Path) -> None:
    """Defect: the generated admission policies' CEL looked for a TrainJob's priorityClassName under
    the planner's working key (resolvedRuntime), which no stored TrainJob has."""
    out = tmp_path / "values.yaml"
    result = CliRunner().invoke(main, ["chart", "values", str(PLATFORM), "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    text = out.read_text()
    assert "trainer.kubeflow.org/v1alpha1/TrainJob" in text
    assert "resolvedRuntime" not in text


def _contains(whole: Any, part: Any) -> bool:
    """Every value of ``part`` is in ``whole`` at the same place (lists item by item)."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and _contains(whole[k], v) for k, v in part.items())
    if isinstance(part, list):
        return isinstance(whole, list) and len(whole) >= len(part) and all(map(_contains, whole, part))
    return bool(whole == part)


POLICIES = [
    {**POLICY, "topology": {"mode": "required", "level": RACK, "enforcement": "warn"}},  # 3 × 8 GPUs: warned
    {"queue": {}, "topology": {"mode": "auto"}, "nodeAffinity": AFFINITY},
    {"queue": {}, "topology": {"mode": "preferred", "level": BLOCK}},
    {"queue": {}, "podPriority": {"default": "low", "enforcement": "warn"}, "topology": {"mode": "unconstrained"}},
]


@pytest.mark.parametrize("policy", POLICIES, ids=["required", "auto", "preferred", "unconstrained"])
@pytest.mark.parametrize("runtime", ["torch-distributed", "deepspeed-distributed", "torchtune-llama3.2-1b"])
@pytest.mark.parametrize("nodes", [1, 2, 3])
def test_invariants_on_trainers_runtimes(policy: dict[str, Any], runtime: str, nodes: int) -> None:
    """Idempotent (planned on its own output: no patch), additive (every value the user set is
    still there), and the governor's entry holds only fields a runtime patch may carry."""
    obj = trainjob(runtime, trainer={"numNodes": nodes, **GPUS})
    outcome = review(review_body(obj, "ml"), teams_from(platform_with(policy)), inventory=aws_nodes(), runtimes=lookup)
    assert outcome.plan.allowed, outcome.plan.denials
    patched = apply_patch(obj, outcome.patch)
    user = copy.deepcopy(obj)
    del user["spec"]["suspend"]  # the CRD's default false, set true with the queue label (SPEC §3)
    assert _contains(patched, user)
    again = review(
        review_body(patched, "ml"), teams_from(platform_with(policy)), inventory=aws_nodes(), runtimes=lookup
    )
    assert again.patch == [], again.patch
    for job in (
        governor_jobs(patched)
        if any(p["manager"] == GOVERNOR for p in patched["spec"].get("runtimePatches", []))
        else []
    ):
        pod = job["template"]["spec"]["template"]
        assert set(pod) <= {"metadata", "spec"} and set(pod.get("metadata", {})) <= {"labels", "annotations"}
        assert set(pod.get("spec", {})) <= {"nodeSelector", "affinity", "tolerations", "schedulingGates"}


def test_a_runtime_file_with_a_step_label_that_is_no_string_is_no_crash() -> None:
    """Defect: a --runtime file whose trainjob-ancestor-step label was a map crashed the review
    (the API server would have refused such a runtime; a file has no API server)."""
    odd = copy.deepcopy(TORCHTUNE)
    odd["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["metadata"]["labels"] = {
        "trainer.kubeflow.org/trainjob-ancestor-step": {}
    }
    names = [(name, count) for name, count, _ in podsets(trainjob("torchtune-llama3.2-1b"), odd)]
    assert names == [("dataset-initializer", 1), ("model-initializer", 1), ("node", 1)]


# --- fuzz: any value anywhere in the TrainJob or its runtime ---------------------------------------

JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 9),
    st.text(max_size=4),
    st.lists(st.integers(0, 2), max_size=2),
    st.dictionaries(st.sampled_from(["a", "name", "spec", "template"]), st.integers(0, 2), max_size=2),
)
FUZZ_POLICY = {
    "queue": {},
    "podPriority": {"default": "low", "enforcement": "warn"},
    "topology": {"mode": "auto"},
    "nodeAffinity": AFFINITY,
}
FUZZ_TRAINJOB = trainjob(
    trainer={"numNodes": 2, **GPUS},
    runtimePatches=[_patch("me.example.com/user", {"a": "b"})],
)


@examples(60)
@given(data=st.data(), runtime=st.sampled_from([TORCH, DEEPSPEED, TORCHTUNE]), mutate_runtime=st.booleans())
def test_fuzz_any_value_of_the_trainjob_or_its_runtime(
    data: st.DataObject, runtime: dict[str, Any], mutate_runtime: bool
) -> None:
    """Never a crash nor an input changed (:func:`fuzzing.check_answer`), and an admitted TrainJob
    planned again on its own output gets no patch."""
    target = runtime if mutate_runtime else FUZZ_TRAINJOB
    path = data.draw(st.sampled_from(paths_of(target)[1:]))
    changed = replaced(target, path, data.draw(JSON_VALUES))
    obj, used = (FUZZ_TRAINJOB, changed) if mutate_runtime else (changed, runtime)
    snapshot = copy.deepcopy(used)
    teams = teams_from(platform_with(FUZZ_POLICY))
    outcome = check_answer(review_body(obj, "ml"), teams, inventory=aws_nodes(), runtimes=lambda *_: used)
    assert used == snapshot, "the review must not modify the runtime"
    if isinstance(outcome, str) or not outcome.plan.allowed or not outcome.patch:
        return
    patched = apply_patch(obj, outcome.patch)
    again = review(review_body(patched, "ml"), teams, inventory=aws_nodes(), runtimes=lambda *_: used)
    assert again.patch == [] or not again.plan.allowed, again.patch
