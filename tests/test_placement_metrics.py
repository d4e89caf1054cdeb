"""The placement benchmark's figures (benchmarks/placement/metrics.py) on snapshots recorded from
real runs (Kueue v0.19.2 on the e2e cluster; 16 nodes: 2 blocks of 2 racks of 4 hosts): of pod
groups, ``python -m benchmarks.placement --shape 1x2x2x4 --horizon 60 --drain 90 --max-runtime 40
--output DIR`` before JobSets were the default (``*-1x2x2x4.json``), and of JobSets,
``python -m benchmarks.placement --shape 1x2x2x4 --horizon 120 --output DIR``
(``implicit-jobset-1x2x2x4.json``).

The expected values were read off the snapshots by hand: each job's hosts (its pods'
``spec.nodeName``, here equal to its Workload's topology assignment), their racks
``nn-rack-1-<block>-<rack>`` and blocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.placement.metrics import job_placements, p95, policy_metrics, smallest_feasible_level
from benchmarks.placement.report import goals, table

DATA = Path(__file__).parent / "data" / "placement"
LEVELS = [
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "kubernetes.io/hostname",
]
# hosts per domain of 4x4x4x4: a spine 64, a block 16, a rack 4, a host 1
HOSTS_4X4X4X4 = dict(zip(LEVELS, [64, 16, 4, 1], strict=True))


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((DATA / name).read_text()))


@pytest.mark.parametrize(
    ("pods", "per_host", "level"),
    [
        (8, 8, "kubernetes.io/hostname"),  # 8 one-GPU pods: one node
        (9, 8, "topology.k8s.aws/network-node-layer-3"),
        (4, 1, "topology.k8s.aws/network-node-layer-3"),  # 4 whole nodes: a rack
        (5, 1, "topology.k8s.aws/network-node-layer-2"),
        (16, 1, "topology.k8s.aws/network-node-layer-2"),
        (17, 1, "topology.k8s.aws/network-node-layer-1"),
        (64, 1, "topology.k8s.aws/network-node-layer-1"),
        (65, 1, None),  # more than a spine: the whole cluster
    ],
)
def test_smallest_feasible_level(pods: int, per_host: int, level: str | None) -> None:
    assert smallest_feasible_level(LEVELS, HOSTS_4X4X4X4, pods, per_host) == level


def test_p95_is_the_nearest_rank() -> None:
    assert p95([]) is None
    assert p95([3.0]) == 3.0
    assert p95([float(x) for x in range(1, 21)]) == 19.0  # ceil(0.95 * 20) = 19th
    assert p95([float(x) for x in range(1, 22)]) == 20.0  # ceil(0.95 * 21) = 20th


def test_jobs_are_joined_with_their_workload_and_pods() -> None:
    by_name = {p.name: p for p in job_placements(load("implicit-1x2x2x4.json"))}
    job = by_name["job-0001"]  # 4 whole-node pods: driver + 3 workers
    assert (job.pods, job.gpus, job.driver_host) == (4, 32, "gpu-1-1-2-1")
    assert sorted(job.worker_hosts) == ["gpu-1-1-1-2", "gpu-1-1-1-3", "gpu-1-1-1-4"]
    assert job.bound == tuple(sorted(job.hosts))  # spec.nodeName = the assignment's hosts
    assert not job.off_assignment
    small = by_name["job-0000"]  # 4 pods of 1 GPU, all on one host
    assert small.hosts == ("gpu-1-1-1-1",) * 4 and small.gpus == 4


def test_implicit_snapshot() -> None:
    metrics = policy_metrics(load("implicit-1x2x2x4.json"))
    assert (metrics.jobs, metrics.admitted, metrics.never_admitted) == (14, 14, ())
    # multi-node (more than 8 GPUs): 0001 0002 0003 0010 (4 nodes), 0004 0007 0009 (2), 0012 0013 (8)
    assert metrics.multi_node == 9
    # in one rack: 0004 (nn-rack-1-2-2) and 0007 (nn-rack-1-1-1); the 8-node jobs span both blocks
    assert metrics.in_smallest_domain == pytest.approx(2 / 9)
    # racks: 2 + 2 + 2 + 2 (4-node jobs) + 1 + 1 + 2 (2-node) + 4 + 4 (8-node)
    assert metrics.layer3_domains == pytest.approx(20 / 9)
    # blocks: 0002, 0010, 0012, 0013 span both blocks
    assert metrics.layer2_domains == pytest.approx(13 / 9)
    # 13 jobs with workers; the driver is away from every worker's rack in 0001 0002 0003 0009
    assert metrics.driver_shares_rack == pytest.approx(9 / 13)
    assert metrics.wait_mean == pytest.approx(126 / 14)  # seconds, Admitted - creationTimestamp
    assert metrics.wait_p95 == 42.0
    assert metrics.utilisation == pytest.approx(0.640, abs=0.001)
    assert metrics.off_assignment == 0


def test_required_rack_snapshot_leaves_the_jobs_larger_than_a_rack() -> None:
    metrics = policy_metrics(load("required-L3-1x2x2x4.json"))
    # the two 8-node jobs never fit in a rack of 4 hosts: Kueue never admits them
    assert metrics.never_admitted == ("job-0012", "job-0013")
    assert metrics.multi_node == 7
    # each podset in one rack, but driver and workers apart in 0001 0002 0003 0007 0009 0010
    assert metrics.in_smallest_domain == pytest.approx(1 / 7)
    assert metrics.driver_shares_rack == pytest.approx(5 / 11)


def test_a_pod_bound_off_its_assignment_counts_where_it_runs() -> None:
    snapshot = load("implicit-1x2x2x4.json")
    # job-0004: driver gpu-1-2-2-3 and worker gpu-1-2-2-2, one rack; move the worker to another rack
    (worker,) = [p for p in snapshot["pods"] if p["job"] == "job-0004" and p["role"] == "worker"]
    worker["nodeName"] = "gpu-1-1-1-1"
    job = {p.name: p for p in job_placements(snapshot)}["job-0004"]
    assert job.off_assignment
    assert (job.driver_host, job.worker_hosts) == ("gpu-1-2-2-3", ("gpu-1-1-1-1",))
    metrics = policy_metrics(snapshot)
    assert metrics.off_assignment == 1
    assert metrics.in_smallest_domain == pytest.approx(1 / 9)  # only job-0007 is left in one rack
    assert metrics.driver_shares_rack == pytest.approx(8 / 13)


def test_an_assignment_not_down_to_hosts_is_refused() -> None:
    snapshot = load("implicit-1x2x2x4.json")
    assignment = snapshot["workloads"][0]["podSetAssignments"][0]["topologyAssignment"]
    assignment["levels"] = [*assignment["levels"][:-1], "topology.k8s.aws/network-node-layer-3"]
    with pytest.raises(ValueError, match="expected hosts"):
        policy_metrics(snapshot)


def test_goals_name_each_verdict_with_its_margin() -> None:
    # the required-L3 snapshot stands in for a candidate policy against the implicit one
    results = {
        "implicit": policy_metrics(load("implicit-1x2x2x4.json")),
        "auto": policy_metrics(load("required-L3-1x2x2x4.json")),
    }
    lines = goals(results).splitlines()
    assert lines[1] == "  MISSED multi-node jobs in their smallest feasible domain >= 95 %: 14.3 %"
    assert lines[2] == "  MISSED no job unadmitted that implicit admits: 2 such jobs (job-0012, job-0013)"
    assert lines[3] == "  met    utilisation at most 3 points below implicit: 65.0 % vs 64.0 % (1.0 points above)"
    assert lines[4] == "  met    mean wait <= 1.1x implicit's: 4.2 s vs 9.0 s (0.46x)"
    assert goals({"implicit": results["implicit"]}) == "goals: need both 'auto' and 'implicit' in one run"
    table_lines = table(results).splitlines()
    assert table_lines[0].split() == ["implicit", "auto"]
    assert table_lines[3].split() == ["never", "admitted", "0", "2"]


def test_goals_judge_auto_and_auto_preferred_each_in_its_own_block() -> None:
    # one run measures autoConstraint required (auto) and preferred (auto-preferred) side by side
    results = {
        "implicit": policy_metrics(load("implicit-1x2x2x4.json")),
        "auto-preferred": policy_metrics(load("implicit-1x2x2x4.json")),
        "auto": policy_metrics(load("required-L3-1x2x2x4.json")),
    }
    lines = goals(results).splitlines()
    assert [line for line in lines if line.startswith("goals")] == [
        "goals for auto (against implicit):",
        "goals for auto-preferred (against implicit):",
    ]
    assert lines[7] == "  met    no job unadmitted that implicit admits: 0 such jobs"
    assert lines[9] == "  met    mean wait <= 1.1x implicit's: 9.0 s vs 9.0 s (1.00x)"
    assert goals({"auto-preferred": results["auto"]}) == "goals: need both 'auto' and 'implicit' in one run"


def test_jobsets_are_joined_with_their_workload_by_owner_and_their_pods_by_label() -> None:
    snapshot = load("implicit-jobset-1x2x2x4.json")
    # Kueue names a JobSet's Workload jobset-<name>-<hash>; the snapshot keeps its owner's name
    workload = next(w for w in snapshot["workloads"] if w["job"] == "job-0001")
    assert workload["name"].startswith("jobset-job-0001-")
    assert [a["name"] for a in workload["podSetAssignments"]] == ["driver", "workers"]
    by_name = {p.name: p for p in job_placements(snapshot)}
    job = by_name["job-0001"]  # 4 whole-node pods: driver (its own replicatedJob) + 3 workers
    assert (job.pods, job.gpus, job.driver_host) == (4, 32, "gpu-1-1-1-2")
    assert sorted(job.worker_hosts) == ["gpu-1-1-1-3", "gpu-1-1-1-4", "gpu-1-1-2-1"]
    assert job.bound == tuple(sorted(job.hosts)) and not job.off_assignment
    single = by_name["job-0005"]  # one pod: the driver replicatedJob alone
    assert (single.pods, single.driver_host, single.worker_hosts) == (1, "gpu-1-2-2-3", ())
    small = by_name["job-0008"]  # 8 pods of 1 GPU on one host
    assert small.hosts == ("gpu-1-1-1-4",) * 8


def test_implicit_jobset_snapshot() -> None:
    metrics = policy_metrics(load("implicit-jobset-1x2x2x4.json"))
    assert (metrics.jobs, metrics.admitted, metrics.never_admitted) == (14, 14, ())
    # multi-node: 0001 0002 0003 0010 (4 nodes), 0004 0007 0009 (2), 0012 0013 (8)
    assert metrics.multi_node == 9
    # in one rack: 0003 (nn-rack-1-2-1), 0004 (1-2-2), 0007 (1-1-1); in one block: 0013 (block 1-1)
    assert metrics.in_smallest_domain == pytest.approx(4 / 9)
    # 13 jobs with workers; the driver is away from every worker's rack in 0002 0009 0012
    assert metrics.driver_shares_rack == pytest.approx(10 / 13)
    assert metrics.off_assignment == 0
