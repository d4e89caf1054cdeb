"""``kgov why`` / ``kgov status`` on snapshots recorded from the e2e cluster (tests/data/why/).

Each snapshot is every object the commands read, as ``kubectl get -o json`` gave it
(``tests/data/why/record.sh``), at a moment when Kueue v0.19.2 held Jobs pending for each cause:

- ``pending-causes.json`` (namespace ``why-rec``, queues made for the purpose): ``a1`` over
  quota (its queue uses its 2 CPUs, its cohort lends nothing), ``t2`` no rack free (a 1-GPU pod on
  one host of every rack), ``l1`` behind ``h1`` (StrictFIFO, priority 100 behind 500), ``n1``
  never fits (3 pods, racks of 2 hosts); ``a0``, ``b1`` and ``p0`` running;
- ``taint.json``: ``x1`` with 7 of 8 nodes tainted ``why-test=rec:NoSchedule``;
- ``bundled.json``: the bundled platform with the governor: research's ``pretrain`` (5 x 8 GPUs)
  and ``eval`` running, ``finetune`` (2 x 8 GPUs, rack required by ``topology: auto``) waiting;
- ``owners.json`` (``scenarios.sh owners``, ``policy``, ``message``; workload objects with their
  ``managedFields``): in ``why-own``, ClusterQueue ``why-tas`` (TAS flavor only, 100 CPUs):
  ``pod1`` requesting nothing (Kueue: no TAS flavor assigned), ``foo`` requesting
  ``example.com/foo``, Deployment ``web`` (3 x 40 CPUs, one pod pending), StatefulSet ``db``,
  CronJob ``nightly``; ``more`` pending in ``why-borrow`` (nominal 2, borrowingLimit 1, using 3)
  while its cohort has 3 CPUs unused; ``sel`` in a ClusterQueue whose namespaceSelector matches
  nothing. In research's namespace, through the governor: ``plain`` (no labels) and ``labelled``
  (the user set ``kueue.x-k8s.io/priority-class: experimentation-priority``);
- ``taint-one.json`` (``scenarios.sh taint1``): ``one`` (1 pod of 8 GPUs, rack required) with 7
  of 8 nodes tainted and a GPU of the eighth taken.

Kueue's own message in each recorded Workload is the reference for the numbers.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from webhook.cli import main
from webhook.core.platform.policy import PolicySet
from webhook.core.platform.resolve import TeamIndex
from webhook.why.decision import decide
from webhook.why.explain import WhyReport, explain
from webhook.why.owners import explain_object
from webhook.why.placement import taint_string
from webhook.why.report import to_json, to_text
from webhook.why.snapshot import Snapshot, find_workload_kind
from webhook.why.state import parse_tas_message, workload_state
from webhook.why.status import status_json, team_statuses

DATA = Path(__file__).parent / "data" / "why"
RACK = "topology.k8s.aws/network-node-layer-3"


@pytest.fixture(scope="module")
def causes() -> Snapshot:
    return Snapshot.from_file(DATA / "pending-causes.json")


@pytest.fixture(scope="module")
def owners() -> Snapshot:
    return Snapshot.from_file(DATA / "owners.json")


def workload_of_job(snapshot: Snapshot, namespace: str, job: str, kind: str = "Job") -> dict[str, Any]:
    owner = snapshot.find_object(kind, namespace, job)
    assert owner is not None
    (workload,) = snapshot.workloads_of(owner)
    return workload


def why(snapshot: Snapshot, job: str, namespace: str = "why-rec", kind: str = "Job") -> WhyReport:
    return explain(snapshot, workload_of_job(snapshot, namespace, job, kind), kind, namespace, job)


def kueue_message(snapshot: Snapshot, job: str, namespace: str = "why-rec", kind: str = "Job") -> str:
    conditions = workload_of_job(snapshot, namespace, job, kind)["status"]["conditions"]
    return str(next(c for c in conditions if c["type"] == "QuotaReserved")["message"])


def test_over_quota_gives_queue_and_cohort_numbers_kueue_agrees_with(causes: Snapshot) -> None:
    report = why(causes, "a1")
    assert report.state is not None and report.state.state == "waiting for quota"
    assert report.cause == "over quota"
    (need,) = report.quota
    q = need.quota
    assert (need.needed, q.reserved, q.nominal, q.borrowing_limit) == (2, 2, 2, 2)
    assert (q.cohort_available, q.available) == (0, 0)
    more = re.search(r"(\d+) more needed", kueue_message(causes, "a1"))
    assert more is not None and need.short == int(more.group(1)) == 2
    assert "needs 2 cpu of borrowing the cohort does not have (0 available to this queue)" in report.helps
    # The cohort has nothing left: it binds, not the queue's borrowing limit (2, none used).
    assert q.binding == "cohort" and "the cohort binds: cohort why-c has 0 unused: 2 short" in report.summary


def test_over_quota_names_the_borrowing_limit_when_it_binds(owners: Snapshot) -> None:
    report = why(owners, "more", "why-own")
    assert report.cause == "over quota"
    (need,) = report.quota
    q = need.quota
    assert (need.needed, q.reserved, q.nominal, q.borrowing_limit) == (1, 3, 2, 1)
    # The cohort (4 + 2 CPUs) has 3 unused, but the queue already borrows its limit of 1.
    assert (q.cohort_available, q.available, q.binding) == (3, 0, "borrowingLimit")
    more = re.search(r"(\d+) more needed", kueue_message(owners, "more", "why-own"))
    assert more is not None and need.short == int(more.group(1)) == 1
    assert (
        "its borrowingLimit binds, not the cohort: it may hold at most 3 (nominal 2 + borrowingLimit 1), "
        "which leaves 0, while cohort why-c2 has 3 unused: 1 short"
    ) in report.summary
    assert "raise ClusterQueue why-borrow's borrowingLimit for cpu from 1 to 2" in report.helps
    assert not any("the cohort does not have" in h for h in report.helps)


def test_a_podset_kueue_gives_no_flavor_never_fits(owners: Snapshot) -> None:
    # A Pod requesting nothing in a topology-aware ClusterQueue: Kueue's onlyTASFlavor finds none.
    report = why(owners, "pod1", "why-own", kind="Pod")
    assert "no TAS flavor assigned" in kueue_message(owners, "pod1", "why-own", kind="Pod")
    assert report.cause == "never fits"
    assert report.summary.startswith(
        "no flavor: podset main requests none of the resources ClusterQueue why-tas covers "
        "(cpu, memory, nvidia.com/gpu)"
    )
    assert report.helps == [
        "podset main: request one of them for its pods, e.g. cpu (or give the namespace a LimitRange with "
        "default requests)"
    ]
    # A resource the ClusterQueue does not cover: Kueue's "unavailable in ClusterQueue".
    foo = why(owners, "foo", "why-own")
    assert "resource example.com/foo unavailable in ClusterQueue" in kueue_message(owners, "foo", "why-own")
    assert foo.cause == "never fits"
    assert foo.summary == (
        "no flavor: podset main requests example.com/foo, which ClusterQueue why-tas does not cover "
        "(it covers cpu, memory, nvidia.com/gpu)"
    )


def test_a_reason_kueue_names_and_kgov_does_not_model_is_shown_as_kueue_says(owners: Snapshot) -> None:
    report = why(owners, "sel", "why-own")
    message = kueue_message(owners, "sel", "why-own")
    assert message == "workload namespace doesn't match ClusterQueue selector"
    assert report.state is not None and report.state.state == "pending"
    assert (report.cause, report.summary) == ("Kueue's message", message)


def test_every_cause_is_documented_in_the_troubleshooting_page() -> None:
    page = (Path(__file__).parents[1] / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    section = page[page.index("- **the cause**, first that holds:") :]
    table = page[page.index("### My job was created but never starts") :]
    source = (Path(__file__).parents[1] / "webhook" / "why" / "causes.py").read_text(encoding="utf-8")
    causes = set(re.findall(r'report\.cause = "([^"]+)"', source))
    causes |= set(re.findall(r'"(behind [a-z ]+)"', source))
    assert causes == {
        "never fits",
        "nodes down",
        "Kueue's message",
        "taint",
        "no domain free",
        "over quota",
        "behind higher priority",
        "behind earlier workloads",
        "not evaluated yet",
    }
    for cause in causes:
        assert f"`{cause}`" in section, cause
        assert f"| `{cause}`" in table or f"/ `{cause}`" in table, cause


def test_no_domain_free_counts_excluded_nodes_as_kueue_does(causes: Snapshot) -> None:
    report = why(causes, "t2")
    assert report.cause == "no domain free"
    ((podset, placement),) = report.placements
    kueue = parse_tas_message(kueue_message(causes, "t2"))
    assert kueue is not None and (kueue.fit, kueue.total, kueue.total_nodes) == (1, 2, 8)
    assert podset == "main" and (placement.mode, placement.level, placement.count) == ("required", RACK, 2)
    assert placement.excluded == kueue.excluded == {'resource "nvidia.com/gpu"': 4}
    assert placement.kueue_nodes == 8
    rack_now = placement.at_level(placement.fit_now)
    rack_empty = placement.at_level(placement.fit_empty)
    assert rack_now is not None and rack_empty is not None
    assert (rack_now.pods, rack_empty.pods) == (kueue.fit, 2)
    # A block holds the 2 free hosts of its 2 racks: the podset would fit one level up.
    assert "would fit now at layer-2 (layer-2 nn-block-1-1 holds 2 pods)" in report.helps


def test_taint_is_named_with_the_nodes_it_excludes() -> None:
    snapshot = Snapshot.from_file(DATA / "taint.json")
    report = why(snapshot, "x1")
    kueue = parse_tas_message(kueue_message(snapshot, "x1"))
    assert kueue is not None
    assert report.cause == "taint"
    ((_, placement),) = report.placements
    assert placement.excluded == kueue.excluded == {'taint "why-test=rec:NoSchedule"': 7}
    assert 'untolerated taint "why-test=rec:NoSchedule" on 7 nodes' in report.summary
    assert report.helps[0].startswith('tolerate taint "why-test=rec:NoSchedule"')
    assert placement.fit_untainted_empty is not None and placement.fit_untainted_empty.pods == 2


def test_one_pod_advice_counts_the_nodes_a_taint_excludes() -> None:
    snapshot = Snapshot.from_file(DATA / "taint-one.json")
    report = why(snapshot, "one", "why-taint")
    kueue = parse_tas_message(kueue_message(snapshot, "one", "why-taint"))
    assert kueue is not None and (kueue.fit, kueue.total) == (0, 1)
    taint = 'taint "why-test=rec:NoSchedule"'
    ((_, placement),) = report.placements
    assert placement.excluded == kueue.excluded == {'resource "nvidia.com/gpu"': 1, taint: 7}
    assert report.cause == "no domain free"
    # The one eligible node is busy; the 7 the taint excludes are free: tolerating it would fit now.
    assert report.helps == [
        f"tolerate {taint} (or remove it): layer-3 nn-rack-1-1-2 would hold 2 pods now",
        f"wait for running workloads on the 1 eligible node (7 excluded: {taint}: 7) to finish",
    ]


def test_workloads_of_what_an_object_owns_are_found(owners: Snapshot) -> None:
    def workloads_owned_by(kind: str, uids: set[str]) -> set[str]:
        return {
            w["metadata"]["name"]
            for w in owners.workloads
            if w["metadata"]["namespace"] == "why-own"
            and any(r.get("kind") == kind and r["uid"] in uids for r in w["metadata"].get("ownerReferences") or [])
        }

    def owned(kind: str, uids: set[str]) -> set[str]:
        return {
            o["metadata"]["uid"]
            for o in owners.descendants
            if o.get("kind") == kind and any(r["uid"] in uids for r in o["metadata"].get("ownerReferences") or [])
        }

    def report(kind: str, name: str) -> WhyReport:
        obj = owners.find_object(kind, "why-own", name)
        assert obj is not None
        return explain_object(owners, obj, kind, "why-own", name)

    # Deployment → ReplicaSet → Pod ← Workload (Kueue's pod integration: one per pod).
    web = owners.find_object("Deployment", "why-own", "web")
    assert web is not None
    pods = owned("Pod", owned("ReplicaSet", {web["metadata"]["uid"]}))
    kueue = workloads_owned_by("Pod", pods)
    assert len(kueue) == 3
    deployment = report("Deployment", "web")
    assert {line.name for line in deployment.owned} == kueue
    pending = [line for line in deployment.owned if line.state == "waiting for quota"]
    assert [line.name for line in pending] == [deployment.workload]
    assert deployment.cause == pending[0].cause == "over quota" and pending[0].owner.startswith("Pod/web-")
    assert sorted(line.state for line in deployment.owned) == ["running", "running", "waiting for quota"]
    # CronJob → Job ← Workload.
    nightly = owners.find_object("CronJob", "why-own", "nightly")
    assert nightly is not None
    (job_workload,) = workloads_owned_by("Job", owned("Job", {nightly["metadata"]["uid"]}))
    cron = report("CronJob", "nightly")
    assert cron.workload == job_workload and cron.cause == "running"
    assert [(line.name, line.owner.split("/")[0]) for line in cron.owned] == [(job_workload, "Job")]
    # StatefulSet: its pod group's Workload, owned by the pods and (Kueue v0.19.2) the StatefulSet.
    db = owners.find_object("StatefulSet", "why-own", "db")
    assert db is not None
    (group,) = workloads_owned_by("StatefulSet", {db["metadata"]["uid"]})
    assert report("StatefulSet", "db").workload == group
    text = to_text(deployment)
    assert "Workloads: 3 (Kueue makes them for what it owns" in text and "kgov why workload/NAME -n why-own" in text
    assert to_json(deployment)["owned"][0].keys() == {"name", "owner", "state", "cause", "summary"}


def test_policy_tells_values_the_user_set_from_those_it_set(owners: Snapshot) -> None:
    assert owners.policy is not None
    teams = TeamIndex(PolicySet.model_validate(json.loads(owners.policy["data"]["policy.json"])))

    def rules(name: str) -> dict[str, Any]:
        job = owners.find_object("Job", "hyperpod-ns-research", name)
        assert job is not None
        decision = decide(job, teams, owners.namespace_labels("hyperpod-ns-research"), owners.nodes)
        assert decision.team == "research"
        return {rule.rule: rule for rule in decision.rules}

    # Submitted with no labels: the API server recorded no field manager for what the webhook set.
    plain = rules("plain")
    assert list(plain) == ["queue", "kueuePriority", "podPriority", "nodeAffinity", "topology"]
    assert all(rule.by == "policy" for rule in plain.values())
    assert plain["podPriority"].policy == "training-priority"
    assert plain["nodeAffinity"].reason == "podset 'main': team node affinity"
    # The user set the Kueue priority (kubectl-create owns the label): allowed, not the policy's doing.
    labelled = rules("labelled")
    priority = labelled["kueuePriority"]
    assert (priority.by, priority.stored, priority.set_by) == ("user", "experimentation-priority", ["kubectl-create"])
    assert priority.reason == "allowed by the policy"
    assert labelled["podPriority"].by == "policy"
    assert labelled["podPriority"].reason == "podset 'main': the Kueue priority the workload asks for"
    report = WhyReport("Job", "hyperpod-ns-research", "labelled", None, None)
    report.decision = decide(
        owners.find_object("Job", "hyperpod-ns-research", "labelled") or {},
        teams,
        owners.namespace_labels("hyperpod-ns-research"),
        owners.nodes,
    )
    text = to_text(report)
    assert (
        "kueuePriority: metadata/labels/kueue.x-k8s.io/priority-class = experimentation-priority set by the user "
        "(kubectl-create), allowed by the policy"
    ) in text
    assert "podPriority: spec/template/spec/priorityClassName set by the policy" in text


def test_behind_higher_priority_names_the_head(causes: Snapshot) -> None:
    report = why(causes, "l1")
    assert report.state is not None and report.state.state == "queued"  # Kueue wrote no QuotaReserved
    assert report.cause == "behind higher priority"
    assert report.position is not None and report.position.source == "estimated"
    assert report.position.in_cluster_queue == 1
    (head,) = report.position.ahead
    assert head["workload"] == "why-rec/job-h1-9927a" and head["priority"] == 500 > report.priority == 100
    assert report.quota[0].quota.available == 2 == report.quota[0].needed
    assert why(causes, "h1").cause == "over quota"


def test_never_fits_names_the_largest_rack(causes: Snapshot) -> None:
    report = why(causes, "n1")
    assert report.cause == "never fits"
    ((_, placement),) = report.placements
    rack = placement.at_level(placement.fit_empty)
    assert rack is not None and (rack.pods, rack.nodes) == (2, 2)
    assert "has 2 eligible nodes and holds 2 such pods with nothing running" in report.summary
    assert report.helps == ["ask for layer-2 (its largest domain holds 4 pods)"]


def test_running_workload_states_its_times(causes: Snapshot) -> None:
    report = why(causes, "a0")
    assert report.cause == "running" and report.state is not None
    recorded = {
        c["type"]: c["lastTransitionTime"] for c in workload_of_job(causes, "why-rec", "a0")["status"]["conditions"]
    }
    assert report.state.times == {k: recorded[k] for k in ("Admitted", "QuotaReserved", "PodsReady")}
    assert report.state.since == recorded["PodsReady"]
    assert report.state.times["PodsReady"] >= report.state.times["Admitted"]
    assert report.position is None


def test_status_rows_are_the_cluster_queues_status(causes: Snapshot) -> None:
    rows = status_json(team_statuses(causes))
    assert len(rows) == len(causes.clusterqueues)
    for queue in causes.clusterqueues:
        row = next(r for r in rows if r["clusterQueue"] == queue["metadata"]["name"])
        status = queue["status"]
        assert row["admittedWorkloads"] == status["admittedWorkloads"]
        assert row["pendingWorkloads"] == status["pendingWorkloads"]
        assert row["reservingWorkloads"] == status["reservingWorkloads"]
        reserved = {(f["name"], r["name"]): r for f in status["flavorsReservation"] for r in f["resources"]}
        used = {(f["name"], r["name"]): r for f in status["flavorsUsage"] for r in f["resources"]}
        for resource in row["resources"]:
            key = (resource["flavor"], resource["resource"])
            assert resource["reserved"] == int(reserved[key]["total"].removesuffix("Ti")) * (
                2**40 if reserved[key]["total"].endswith("Ti") else 1
            )
            assert resource["borrowed"] == int(reserved[key]["borrowed"])
            assert resource["used"] == int(used[key]["total"].removesuffix("Ti")) * (
                2**40 if used[key]["total"].endswith("Ti") else 1
            )
    prio = next(r for r in rows if r["clusterQueue"] == "why-prio")
    assert prio["oldestPending"]["name"] == "job-h1-9927a" and prio["oldestPending"]["cause"] == "over quota"


def test_lendable_respects_the_lending_limit() -> None:
    rows = status_json(team_statuses(Snapshot.from_file(DATA / "bundled.json")))
    inference = next(r for r in rows if r["team"] == "inference")
    gpu = next(r for r in inference["resources"] if r["resource"] == "nvidia.com/gpu")
    assert (gpu["nominal"], gpu["lendingLimit"], gpu["lendable"]) == (32, 16, 16)
    research = next(r for r in rows if r["team"] == "research")
    assert next(r for r in research["resources"] if r["resource"] == "nvidia.com/gpu")["reserved"] == 56


def test_governed_job_shows_which_rule_decided_what() -> None:
    snapshot = Snapshot.from_file(DATA / "bundled.json")
    assert snapshot.policy is not None
    teams = TeamIndex(PolicySet.model_validate(json.loads(snapshot.policy["data"]["policy.json"])))
    job = snapshot.find_object("Job", "hyperpod-ns-research", "finetune")
    assert job is not None
    decision = decide(job, teams, None, snapshot.nodes)
    assert decision.team == "research"
    rules = {rule.rule: rule for rule in decision.rules}
    # Recorded without managedFields: who set the values is not known.
    assert rules["queue"].by == "unrecorded" and rules["queue"].reason == "the LocalQueue of team 'research'"
    assert rules["kueuePriority"].by == "unrecorded"
    assert rules["topology"].by == "unrecorded"
    assert (
        rules["topology"].policy == {"kueue.x-k8s.io/podset-required-topology": RACK}
        or rules["topology"].policy == RACK
    )
    assert "auto: 2 pods fit in one topology.k8s.aws/network-node-layer-3 domain" in rules["topology"].reason
    # Kept, not reviewed again (who set them is not recorded), but shown with the policy's word.
    assert (rules["podPriority"].by, rules["podPriority"].stored) == ("unrecorded", "training-priority")
    assert rules["podPriority"].policy is None and rules["podPriority"].reason == "allowed by the policy"
    assert rules["nodeAffinity"].by == "unrecorded"
    assert rules["nodeAffinity"].stored["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}
    ]


def test_a_stored_value_the_policy_would_not_give_is_told_apart() -> None:
    snapshot = Snapshot.from_file(DATA / "bundled.json")
    assert snapshot.policy is not None
    teams = TeamIndex(PolicySet.model_validate(json.loads(snapshot.policy["data"]["policy.json"])))
    job = json.loads(json.dumps(snapshot.find_object("Job", "hyperpod-ns-research", "finetune")))
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    annotations.pop("kueue.x-k8s.io/podset-required-topology")
    annotations["kueue.x-k8s.io/podset-preferred-topology"] = "topology.k8s.aws/network-node-layer-2"
    decision = decide(job, teams, None, snapshot.nodes)
    topology = next(rule for rule in decision.rules if rule.rule == "topology")
    assert topology.by == "other"


def test_text_and_json_carry_the_same_facts(causes: Snapshot) -> None:
    report = why(causes, "t2")
    data = to_json(report)
    text = to_text(report)
    assert data["cause"] == "no domain free" and "Cause: no domain free:" in text
    assert data["topology"][0]["excluded"] == {'resource "nvidia.com/gpu"': 4}
    assert 'excluded: resource "nvidia.com/gpu": 4' in text
    assert data["quota"][1] == {
        "flavor": "p5-48xlarge", "resource": "nvidia.com/gpu", "needed": 16, "reserved": 0, "admitted": 0,
        "nominal": 64, "borrowingLimit": None, "lendingLimit": None, "borrowed": 0, "available": 64,
        "potential": 64, "cohortAvailable": None,
    }  # fmt: skip
    json.dumps(data)  # plain JSON


def test_kueue_tas_message_forms() -> None:
    # Both forms of tas_flavor_snapshot.go notFitMessage; the second as recorded above.
    none = parse_tas_message(
        "couldn't assign flavors to pod set main: topology \"t\" doesn't allow to fit any of 3 pod(s)"
    )
    assert none is not None and (none.fit, none.total, none.total_nodes, none.excluded) == (0, 3, None, {})
    assert parse_tas_message("insufficient unused quota for cpu in flavor f, 2 more needed") is None
    assert taint_string({"key": "k", "effect": "NoSchedule"}) == "k:NoSchedule"
    assert taint_string({"key": "k", "value": "v", "effect": "NoExecute"}) == "k=v:NoExecute"


def test_malformed_workload_fields_count_as_absent() -> None:
    assert workload_state({"status": {"conditions": "nope"}, "metadata": []}).state == "queued"
    assert workload_state({"spec": {"active": False}}).state == "inactive"


def test_kind_names() -> None:
    job = find_workload_kind("job")
    assert job is not None and (job.group, job.kind) == ("batch", "Job")
    for name in ("jobs", "Job", "job.batch"):
        assert find_workload_kind(name) == job
    pytorch = find_workload_kind("pytorchjob.kubeflow.org")
    assert pytorch is not None and pytorch.kind == "PyTorchJob"
    assert find_workload_kind("job.kubeflow.org") is None and find_workload_kind("nosuch") is None


def test_cli_on_a_snapshot(tmp_path: Path) -> None:
    runner = CliRunner()
    snapshot = str(DATA / "bundled.json")
    done = runner.invoke(
        main, ["why", "job/finetune", "-n", "hyperpod-ns-research", "--snapshot", snapshot, "-o", "json"]
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["decision"]["team"] == "research"
    done = runner.invoke(
        main, ["why", "workload/job-finetune-872a0", "-n", "hyperpod-ns-research", "--snapshot", snapshot]
    )
    assert done.exit_code == 0 and "Cause: no domain free" in done.output
    for args, message in (
        (["why", "nosuch/x"], "'nosuch' is not a kind Kueue manages"),
        (["why", "job"], "give KIND/NAME"),
        (
            ["why", "job/absent", "-n", "hyperpod-ns-research", "--snapshot", snapshot],
            "Job hyperpod-ns-research/absent not found",
        ),
        (["status", "--team", "nobody", "--snapshot", snapshot], "no ClusterQueue of team 'nobody'"),
    ):
        done = runner.invoke(main, args)
        assert done.exit_code == 2 and message in done.output, (args, done.output)
    picture = tmp_path / "status.png"
    done = runner.invoke(main, ["status", "--snapshot", snapshot, "-o", "png", "--out", str(picture)])
    assert done.exit_code == 0 and picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    done = runner.invoke(main, ["status", "--snapshot", snapshot, "--team", "research"])
    assert done.exit_code == 0 and "job-finetune-872a0" in done.output and "waiting for topology" in done.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["job/x/../finetune"], "'job/x/../finetune': one KIND/NAME, and NAME has no '/' ('x/../finetune')"),
        (["job/finetune/extra"], "'job/finetune/extra': one KIND/NAME, and NAME has no '/' ('finetune/extra')"),
        (["job/finetune?x=1"], "NAME 'finetune?x=1' is not a valid object name: a DNS-1123 subdomain"),
        (["job/finetune#frag"], "NAME 'finetune#frag' is not a valid object name"),
        (["job/fine%2Ftune"], "NAME 'fine%2Ftune' is not a valid object name"),
        (["job/Finetune"], "NAME 'Finetune' is not a valid object name"),
        (["job/" + "a" * 254], "is not a valid object name"),
        (
            ["job/finetune", "-n", "x/../ns"],
            "Invalid value for '-n' / '--namespace': 'x/../ns' is not a DNS-1123 label",
        ),
        (["job/finetune", "-n", "hyperpod-ns-research?x"], "is not a DNS-1123 label"),
        (["jobs.batch.evil/finetune"], "'jobs.batch.evil' is not a kind Kueue manages (appwrapper, cronjob,"),
        (["workload/a/b"], "NAME has no '/' ('a/b')"),
    ],
)
def test_why_refuses_what_is_not_an_object_name_before_reading(args: list[str], message: str) -> None:
    # Each of these once went into an API path and answered for another object: refused as a
    # usage error before the cluster (here, a kubeconfig that does not exist) is read.
    done = CliRunner().invoke(main, ["why", *args, "--kubeconfig", "/nonexistent/kubeconfig"])
    assert done.exit_code == 2, done.output
    assert message in done.output
    assert "Invalid value for" in done.output and "kubeconfig" not in done.output


def test_why_accepts_every_name_form_a_kind_has() -> None:
    snapshot = str(DATA / "bundled.json")
    for kind in ("job", "jobs", "Job", "job.batch", "jobs.batch"):
        done = CliRunner().invoke(
            main, ["why", f"{kind}/finetune", "-n", "hyperpod-ns-research", "--snapshot", snapshot]
        )
        assert done.exit_code == 0 and "Job hyperpod-ns-research/finetune" in done.output, (kind, done.output)


def _workload_path(tmp_path: Path, change: Any = None) -> Any:
    data = json.loads((DATA / "bundled.json").read_text())
    if change is not None:
        change(data)
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(data))
    return CliRunner().invoke(
        main,
        ["why", "workload/job-finetune-872a0", "-n", "hyperpod-ns-research", "--snapshot", str(path), "-o", "json"],
    )


def test_why_workload_shows_the_policy_decision_of_its_owner(tmp_path: Path) -> None:
    done = _workload_path(tmp_path)
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    # The same decision as asked about the Job itself.
    by_job = CliRunner().invoke(
        main,
        ["why", "job/finetune", "-n", "hyperpod-ns-research", "--snapshot", str(DATA / "bundled.json"), "-o", "json"],
    )
    job_decision = json.loads(by_job.output)["decision"]
    assert report["decision"]["owner"] == "Job hyperpod-ns-research/finetune" and job_decision["owner"] is None
    assert report["decision"]["team"] == job_decision["team"] == "research"
    assert report["decision"]["rules"] == job_decision["rules"]
    assert [r["rule"] for r in report["decision"]["rules"]] == [
        "queue",
        "kueuePriority",
        "podPriority",
        "nodeAffinity",
        "topology",
    ]
    assert report["policyNote"] is None
    text = CliRunner().invoke(
        main,
        ["why", "workload/job-finetune-872a0", "-n", "hyperpod-ns-research", "--snapshot", str(DATA / "bundled.json")],
    )
    assert text.output.startswith("Workload hyperpod-ns-research/job-finetune-872a0\n")
    assert "Policy (for its owner Job hyperpod-ns-research/finetune): team research" in text.output
    assert "Policy: not known" not in text.output


def _workload(data: dict[str, Any]) -> dict[str, Any]:
    return next(w for w in data["workloads"] if w["metadata"]["name"] == "job-finetune-872a0")


@pytest.mark.parametrize(
    ("change", "note"),
    [
        (
            lambda data: _workload(data)["metadata"].pop("ownerReferences"),
            "not reviewed: the Workload has no owner (made directly, not by Kueue for an object)",
        ),
        (
            lambda data: data.__setitem__("jobs", [j for j in data["jobs"] if j["metadata"]["name"] != "finetune"]),
            "not reviewed: its owner Job hyperpod-ns-research/finetune could not be read (deleted, or not in the "
            "snapshot)",
        ),
        (
            lambda data: _workload(data)["metadata"]["ownerReferences"][0].update(
                apiVersion="example.com/v1", kind="Thing"
            ),
            "not reviewed: its owner Thing hyperpod-ns-research/finetune (example.com/v1) is not a kind the webhook "
            "reviews",
        ),
    ],
)
def test_why_workload_says_precisely_why_no_policy_decision(tmp_path: Path, change: Any, note: str) -> None:
    done = _workload_path(tmp_path, change)
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["decision"] is None and report["policyNote"] == note


def test_status_refuses_a_team_that_is_no_name_and_unwritable_files(tmp_path: Path) -> None:
    snapshot = str(DATA / "bundled.json")
    done = CliRunner().invoke(main, ["status", "--team", "a/../b", "--snapshot", snapshot])
    assert done.exit_code == 2 and "Invalid value for '--team': 'a/../b' is neither a ClusterQueue name" in done.output
    for args, message in (
        (
            ["-o", "png", "--out", "/nonexistent/dir/x.png"],
            "--out /nonexistent/dir/x.png: directory /nonexistent/dir does not exist",
        ),
        (
            ["--out", "/nonexistent/dir/x.txt"],
            "--out /nonexistent/dir/x.txt: directory /nonexistent/dir does not exist",
        ),
        (["-o", "json", "--out", str(tmp_path)], f"File '{tmp_path}' is a directory"),
        (["--out", "/proc/nope"], "--out /proc/nope: cannot write: No such file or directory"),
        (["-f", "/proc/nope"], "--out /proc/nope: cannot write: No such file or directory"),  # the old flag
    ):
        done = CliRunner().invoke(main, ["status", "--snapshot", snapshot, *args])
        assert done.exit_code == 2, (args, done.output)
        assert message in done.output and "Traceback" not in done.output, (args, done.output)
        assert done.exception is None or isinstance(done.exception, SystemExit)


def test_unreadable_snapshot_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    for args in (["status"], ["why", "job/x"]):
        done = CliRunner().invoke(main, [*args, "--snapshot", str(bad)])
        assert done.exit_code == 2 and f"--snapshot {bad}: not a snapshot" in done.output, done.output
        done = CliRunner().invoke(main, [*args, "--snapshot", str(tmp_path / "absent.json")])
        assert done.exit_code == 2 and "cannot read: No such file or directory" in done.output, done.output


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        # Once a traceback (a document that is no object) or, worse, an empty cluster: "not found".
        ("[1, 2]", "the document must be an object of lists, got array"),
        ('"x"', 'the document must be an object of lists, got string "x"'),
        ('{"nodes": "x"}', 'nodes must be a list of objects, got string "x"'),
        ('{"workloads": {}}', "workloads must be a list of objects, got object"),
        ('{"jobs": [{"kind": "Job"}, 5]}', "jobs[1] must be an object, got number 5"),
        ('{"policy": [null]}', "policy[0] must be an object, got null"),
    ],
)
def test_a_snapshot_that_is_not_lists_of_objects_is_named(tmp_path: Path, content: str, reason: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    for args in (["status"], ["why", "job/x"]):
        done = CliRunner().invoke(main, [*args, "--snapshot", str(bad)])
        assert done.exit_code == 2, done.output
        expected = f"kgov {args[0]}: --snapshot {bad}: not a snapshot (JSON with lists of objects): {reason}\n"
        assert done.output == expected


def test_a_snapshot_keeps_keys_it_does_not_read_and_null_lists() -> None:
    snapshot = Snapshot.from_dump({"recorded": "2026-12-01", "nodes": None, "pods": [], "jobs": [{"kind": "Job"}]})
    assert (snapshot.nodes, snapshot.objects) == ([], [{"kind": "Job"}])


def _unconstrained(count: int, now: int, empty: int, nodes: int) -> WhyReport:
    """A pending podset without a required level: Kueue places it on the flavor's nodes as a whole."""
    from webhook.why.causes import classify
    from webhook.why.placement import ALL_NODES, DomainFit, PodsetPlacement
    from webhook.why.state import WorkloadState

    placement = PodsetPlacement(
        flavor="f", topology="t", levels=[RACK], mode="unconstrained", level="", count=count, per_pod={},
        fit_now=[DomainFit(RACK, ["r1"], now, 1), DomainFit(ALL_NODES, [], now, nodes)],
        fit_empty=[DomainFit(RACK, ["r1"], empty, 1), DomainFit(ALL_NODES, [], empty, nodes)],
    )  # fmt: skip
    report = WhyReport("Job", "ns", "j", "w", WorkloadState("waiting for topology"), placements=[("main", placement)])
    classify(report)
    return report


def test_whole_flavor_placement_is_worded_without_a_domain_name() -> None:
    # Was "the largest (all nodes) (-) has 1 eligible nodes and holds 1 such pods".
    never = _unconstrained(count=2, now=1, empty=1, nodes=1)
    assert never.cause == "never fits"
    assert never.summary == (
        "podset main: 2 pods at unconstrained: never fits: its one eligible node holds 1 such pod with nothing running"
    )
    busy = _unconstrained(count=1, now=0, empty=3, nodes=3)
    assert busy.cause == "no domain free"
    assert busy.summary == (
        "podset main: 1 pod at unconstrained: the eligible nodes have room now for 0 of 1 pod; "
        "with nothing running they would hold 3"
    )
    for report in (never, busy):
        assert "(all nodes)" not in report.summary and "(-)" not in report.summary
        assert not re.search(r"\b1 (pods|nodes)\b", report.summary + " ".join(report.helps))


def _two_podsets(now: int, tolerated_now: int, empty: int = 8) -> WhyReport:
    """A PyTorchJob's Master (1 pod) and Worker (2 pods) of one shape on one flavor, unconstrained:
    ``now`` pods fit on the eligible nodes, ``tolerated_now`` with the taint tolerated."""
    from webhook.why.causes import classify
    from webhook.why.placement import ALL_NODES, DomainFit, PodsetPlacement
    from webhook.why.state import WorkloadState

    def placement(count: int) -> PodsetPlacement:
        return PodsetPlacement(
            flavor="f", topology="t", levels=[RACK], mode="unconstrained", level="", count=count,
            per_pod={"nvidia.com/gpu": Decimal(8)}, excluded={'taint "maint=yes:NoSchedule"': 3},
            fit_now=[DomainFit(RACK, ["r1"], now, 1), DomainFit(ALL_NODES, [], now, 5)],
            fit_empty=[DomainFit(RACK, ["r1"], 2, 2), DomainFit(ALL_NODES, [], empty, 5)],
            fit_untainted_now=DomainFit(ALL_NODES, [], tolerated_now, 8),
            fit_untainted_empty=DomainFit(ALL_NODES, [], 8, 8),
        )  # fmt: skip

    report = WhyReport(
        "PyTorchJob", "ns", "pt", "w", WorkloadState("waiting for topology"),
        placements=[("master", placement(1)), ("worker", placement(2))],
    )  # fmt: skip
    classify(report)
    return report


def test_advice_on_a_multi_podset_workload_counts_all_its_pods() -> None:
    # 3 nodes tainted, 2 of them taken: tolerating frees room for 1 pod, the workload needs 3.
    # Was: 'tolerate taint "maint=yes:NoSchedule" (or remove it): all eligible nodes together would hold 1 pods now'.
    short = _two_podsets(now=0, tolerated_now=1)
    assert short.cause == "no domain free"
    assert "(the workload: 3 pods (podsets master 1, worker 2), admitted all or none)" in short.summary
    assert not [h for h in short.helps if h.startswith("tolerate")], short.helps
    enough = _two_podsets(now=0, tolerated_now=3)
    assert (
        'tolerate taint "maint=yes:NoSchedule" (or remove it): all eligible nodes together would hold 3 pods now'
        in enough.helps
    )
    # Each podset fits on its own (2 pods free), not both together (3): Kueue admits all or none.
    together = _two_podsets(now=2, tolerated_now=2)
    assert together.cause == "no domain free"
    assert together.summary == (
        "the workload needs 3 pods in all (podsets master 1, worker 2) and Kueue admits all or none: the eligible "
        "nodes have room now for 2 of them; with nothing running they would hold 8"
    )
    never = _two_podsets(now=2, tolerated_now=2, empty=2)
    assert never.cause == "never fits" and "hold 2 such pods with nothing running" in never.summary
    # Never fitting in all comes before any podset's lack of room now.
    busy_never = _two_podsets(now=0, tolerated_now=0, empty=2)
    assert (busy_never.cause, busy_never.summary) == ("never fits", never.summary)
    for report in (short, enough, together, never, busy_never):
        assert not re.search(r"\b1 (pods|nodes)\b", report.summary + " ".join(report.helps)), report


def test_a_running_workload_shows_where_kueue_placed_it_not_free_room() -> None:
    # eval runs on both hosts of rack nn-rack-1-2-2; kgov said that rack had room for 2 pods now
    # (its own nodes counted as free) and excluded 5 nodes for GPUs, Kueue's view of others' pods.
    snapshot = Snapshot.from_file(DATA / "bundled.json")
    report = why(snapshot, "eval", "hyperpod-ns-research")
    assert report.cause == "running"
    ((podset, placement),) = report.placements
    assert podset == "main"
    assert placement.assigned == [("gpu-1-2-2-1", 1), ("gpu-1-2-2-2", 1)]
    assert placement.assigned_domains == ["nn-rack-1-2-2"]
    assert (placement.fit_now, placement.excluded, placement.fit_untainted_now) == ([], {}, None)
    text = to_text(report)
    assert (
        "  placed by Kueue (topologyAssignment): layer-3 nn-rack-1-2-2: gpu-1-2-2-1 (1 pod), gpu-1-2-2-2 (1 pod)\n"
        in text
    )
    assert "FREEST DOMAIN NOW" not in text and "excluded" not in text
    (topology,) = to_json(report)["topology"]
    assert topology["assigned"] == [{"node": "gpu-1-2-2-1", "pods": 1}, {"node": "gpu-1-2-2-2", "pods": 1}]
    assert topology["largestNow"] == [] and topology["excluded"] == {}
    pending = why(snapshot, "finetune", "hyperpod-ns-research")
    assert pending.placements[0][1].assigned is None and to_json(pending)["topology"][0]["assigned"] is None


_PREEMPTED = "Preempted to accommodate a workload (UID: 5f1c, JobUID: 9a2e) due to prioritization in the ClusterQueue"


def _preempted_and_requeued(quota_message: str) -> Snapshot:
    """pending-causes.json with a1's Workload given the conditions Kueue v0.19.2 leaves on a
    preempted, requeued workload (``jobframework/reconciler.go`` "handle eviction"): Evicted and
    Preempted stay True, Requeued True, QuotaReserved False with ``quota_message``."""
    snapshot = Snapshot.from_file(DATA / "pending-causes.json")
    workload = workload_of_job(snapshot, "why-rec", "a1")
    at = "2026-12-01T08:10:00Z"
    workload["status"]["conditions"] = [
        c for c in workload["status"]["conditions"] if c["type"] != "QuotaReserved"
    ] + [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": _PREEMPTED, "lastTransitionTime": at},
        {"type": "Preempted", "status": "True", "reason": "InClusterQueue", "message": _PREEMPTED,
         "lastTransitionTime": at},
        {"type": "Requeued", "status": "True", "reason": "Preempted", "message": _PREEMPTED, "lastTransitionTime": at},
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": quota_message,
         "lastTransitionTime": "2026-12-01T08:11:52Z"},
    ]  # fmt: skip
    snapshot.memo.clear()
    return snapshot


def test_a_preempted_workload_pending_again_gets_its_current_cause() -> None:
    # Was: cause "preempted" with nothing that would help, and "-" in kgov status --team.
    quota = kueue_message(Snapshot.from_file(DATA / "pending-causes.json"), "a1")
    assert "insufficient unused quota for cpu" in quota
    for message, state in ((quota, "waiting for quota"), (_PREEMPTED, "queued")):
        snapshot = _preempted_and_requeued(message)
        report = why(snapshot, "a1")
        assert report.state is not None and report.state.state == state
        assert report.state.earlier == f"preempted at 2026-12-01T08:10:00Z: {_PREEMPTED}"
        assert report.cause == "over quota", report.summary
        assert report.summary.endswith(" (preempted at 2026-12-01T08:10:00Z, then requeued)")
        assert "wait for admitted workloads of the queue (or the cohort) to finish" in report.helps
        assert f"  earlier: preempted at 2026-12-01T08:10:00Z: {_PREEMPTED}\n" in to_text(report)
        (row,) = team_statuses(snapshot, report.cluster_queue)
        (line,) = [w for w in row.workloads if w.name == report.workload]
        assert (line.state, line.cause) == (state, "over quota")
    # Still being stopped (quota reserved) or not requeued: preempted, as Kueue says.
    snapshot = _preempted_and_requeued(quota)
    workload = workload_of_job(snapshot, "why-rec", "a1")
    requeued = next(c for c in workload["status"]["conditions"] if c["type"] == "Requeued")
    requeued["status"] = "False"
    assert workload_state(workload).state == "preempted"


def test_status_png_without_a_file_says_where_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Was: kgov-status.png written in the current directory without a word of where.
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(main, ["status", "--snapshot", str(DATA / "bundled.json"), "-o", "png"])
    assert done.exit_code == 0, done.output
    written = tmp_path / "kgov-status.png"
    assert written.read_bytes().startswith(b"\x89PNG")
    assert done.stderr == f"wrote kgov-status.png ({written.resolve()})\n"
    assert done.stdout == ""
    commands = (Path(__file__).parent.parent / "docs" / "commands.md").read_text(encoding="utf-8")
    assert "by default `kgov-status.png` in the current directory" in commands


def _all_unreachable(snapshot: Snapshot) -> None:
    """Every node as the node lifecycle controller leaves it once its Lease is not renewed."""
    for node in snapshot.nodes:
        for condition in node["status"]["conditions"]:
            condition.update(status="Unknown", reason="NodeStatusUnknown")
        node.setdefault("spec", {})["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]


def test_a_podset_fitting_once_the_nodes_are_back_waits_for_them_it_does_not_never_fit() -> None:
    """The webhook's fault, in ``kgov why``: every node NotReady for a moment (a kube-apiserver
    restart), the rack Job of 2 hosts was told it never fits; it waits for the nodes."""
    snapshot = Snapshot.from_file(DATA / "pending-causes.json")
    _all_unreachable(snapshot)
    report = why(snapshot, "t2")
    ((_, placement),) = report.placements
    assert placement.excluded == {"not ready": 8} and placement.down == 8  # now: Kueue's TAS counts none
    assert report.cause == "nodes down"
    assert report.summary == (
        "podset main: 2 pods at required layer-3: 8 eligible nodes are not Ready, cordoned or tainted "
        "node.kubernetes.io/* now, and the largest layer-3 (-) holds 0 such pods with nothing running; with "
        "them back layer-3 nn-rack-1-1-1 would hold 2 pods"
    )
    assert report.helps == ["wait for the nodes to be Ready and schedulable again (or uncordon them)"]
    # Too large for a rack even with every node back: still never fits.
    assert why(snapshot, "n1").cause == "never fits"


def test_a_governed_value_that_is_not_set_reads_not_set(tmp_path: Path) -> None:
    """Regression: with no node inventory the policy's topology annotation differed from the stored one,
    and the report printed the stored (absent) value as Python's ``None``."""
    snapshot = json.loads((DATA / "bundled.json").read_text())
    snapshot["nodes"] = None
    path = tmp_path / "no-nodes.json"
    path.write_text(json.dumps(snapshot))
    done = CliRunner().invoke(main, ["why", "job/finetune", "-n", "hyperpod-ns-research", "--snapshot", str(path)])
    assert done.exit_code == 0, done.output
    assert " is None" not in done.output
    assert "podset-preferred-topology is not set, not the policy's" in done.output
