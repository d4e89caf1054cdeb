"""SageMaker HyperPod compute allocations and cluster policy → platform file."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from webhook.cli.generate import generate_command, import_hyperpod_command
from webhook.core.platform.platform import parse_platform
from webhook.generate.hyperpod import (
    HyperPodError,
    import_hyperpod,
    parse_compute_quotas,
    parse_instance_resources,
    parse_scheduler_config,
)

DATA = Path(__file__).resolve().parent / "data" / "hyperpod"
P5 = "ml.p5.48xlarge=cpu=192,memory=2Ti,nvidia.com/gpu=8,vpc.amazonaws.com/efa=32"
M5 = "m5.2xlarge=cpu=8,memory=32Gi"
INSTANCES = parse_instance_resources([P5, M5])


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def imported(*files: str, scheduler: bool = True, **kwargs: Any) -> dict[str, Any]:
    quotas = [q for name in files for q in parse_compute_quotas(load(name), name)]
    policy = parse_scheduler_config(load("scheduler.json"), "scheduler.json") if scheduler else None
    document, _, _ = import_hyperpod(quotas, policy, INSTANCES, **kwargs)
    return document


def team(document: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in document["teams"] if t["name"] == name)


def test_instance_resources_option() -> None:
    assert parse_instance_resources([P5, M5]) == {
        "p5.48xlarge": {
            "cpu": Decimal(192),
            "memory": Decimal(2 * 2**40),
            "nvidia.com/gpu": Decimal(8),
            "vpc.amazonaws.com/efa": Decimal(32),
        },
        "m5.2xlarge": {"cpu": Decimal(8), "memory": Decimal(32 * 2**30)},
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("p5.48xlarge", "'p5.48xlarge': expected TYPE=RESOURCE=QUANTITY[,RESOURCE=QUANTITY…]"),
        ("p5.48xlarge=cpu", "'p5.48xlarge=cpu': 'cpu' is not RESOURCE=QUANTITY"),
        ("p5.48xlarge=cpu=lots", "'p5.48xlarge=cpu=lots': 'lots' is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)"),
    ],
)
def test_bad_instance_resources(value: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_instance_resources([value])
    assert str(caught.value) == message


def test_lend_and_borrow_with_instance_count() -> None:
    research = team(imported("quota-research.json"), "research")
    assert research == {
        "name": "research",
        "cohort": "shared-pool",
        "quotas": [
            {
                "flavor": "ml-p5-48xlarge",
                "resources": {
                    "cpu": {"nominalQuota": 1536, "borrowingLimit": 768},
                    "memory": {"nominalQuota": "16Ti", "borrowingLimit": "8Ti"},
                    "nvidia.com/gpu": {"nominalQuota": 64, "borrowingLimit": 32},
                    "vpc.amazonaws.com/efa": {"nominalQuota": 256, "borrowingLimit": 128},
                },
            }
        ],
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        "fairSharing": {"weight": 80},
        "policy": {"queue": {"enforcement": "enforce"}, "kueuePriority": {"enforcement": "enforce"}},
    }


def test_lend_only_and_flavors_padded_to_one_resource_group() -> None:
    inference = team(imported("quota-inference.json"), "inference")
    assert inference["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}
    assert [q["flavor"] for q in inference["quotas"]] == ["ml-p5-48xlarge", "ml-m5-2xlarge"]
    assert inference["quotas"][1]["resources"] == {
        "cpu": {"nominalQuota": 16, "borrowingLimit": 0},
        "memory": {"nominalQuota": "64Gi", "borrowingLimit": 0},
        "nvidia.com/gpu": {"nominalQuota": 0, "borrowingLimit": 0},
        "vpc.amazonaws.com/efa": {"nominalQuota": 0, "borrowingLimit": 0},
    }


def test_accelerator_share_and_absolute_borrow_limit() -> None:
    sandbox = team(imported("quota-sandbox.json"), "sandbox")
    assert sandbox["quotas"][0]["resources"] == {
        "cpu": {"nominalQuota": 96, "borrowingLimit": 288},
        "memory": {"nominalQuota": "1Ti", "borrowingLimit": "3Ti"},
        "nvidia.com/gpu": {"nominalQuota": 4, "borrowingLimit": 12},
        "vpc.amazonaws.com/efa": {"nominalQuota": 16, "borrowingLimit": 48},
    }
    assert sandbox["fairSharing"] == {"weight": 0}
    assert sandbox["preemption"]["withinClusterQueue"] == "LowerPriority"


def test_dont_lend_vcpu_share_from_a_list_response() -> None:
    quotas = parse_compute_quotas(load("quota-archive.json"), "quota-archive.json")
    assert [(where, q.ComputeQuotaTarget.TeamName) for where, q in quotas] == [
        ("quota-archive.json.ComputeQuotaSummaries[0]", "archive"),
        ("quota-archive.json.ComputeQuotaSummaries[1]", "retired"),
    ]
    document, _, warnings = import_hyperpod(quotas, None, INSTANCES)
    assert [t["name"] for t in document["teams"]] == ["archive"]
    assert document["teams"][0]["quotas"][0]["resources"] == {
        "cpu": {"nominalQuota": 4, "borrowingLimit": 0, "lendingLimit": 0},
        "memory": {"nominalQuota": "16Gi", "borrowingLimit": 0, "lendingLimit": 0},
    }
    assert document["teams"][0]["preemption"]["reclaimWithinCohort"] == "Never"
    assert [(w.severity, w.path, w.message) for w in warnings] == [
        (
            "warning",
            "quota-archive.json.ComputeQuotaSummaries[1].ActivationState",
            "team 'retired' is Disabled: skipped",
        )
    ]


def test_scheduler_priorities_flavors_and_naming() -> None:
    document = imported("quota-research.json", "quota-inference.json", cohort="gpu-pool", topology=True)
    assert document["naming"] == "hyperpod"
    assert document["priorities"] == [
        {"name": "inference", "value": 100, "description": "HyperPod priority class inference (weight 100)."},
        {"name": "training", "value": 70, "description": "HyperPod priority class training (weight 70)."},
        {"name": "experimentation", "value": 10, "description": "HyperPod priority class experimentation (weight 10)."},
    ]
    assert document["cohorts"] == [{"name": "gpu-pool"}]
    assert document["topologies"] == [
        {
            "name": "aws-network",
            "levels": [
                "topology.k8s.aws/network-node-layer-1",
                "topology.k8s.aws/network-node-layer-2",
                "topology.k8s.aws/network-node-layer-3",
                "kubernetes.io/hostname",
            ],
        }
    ]
    assert document["flavors"] == [
        {
            "name": "ml-m5-2xlarge",
            "nodeLabels": {"node.kubernetes.io/instance-type": "ml.m5.2xlarge"},
            "topologyName": "aws-network",
            "nodeResources": {"cpu": 8, "memory": "32Gi"},
        },
        {
            "name": "ml-p5-48xlarge",
            "nodeLabels": {"node.kubernetes.io/instance-type": "ml.p5.48xlarge"},
            "topologyName": "aws-network",
            "nodeResources": {"cpu": 192, "memory": "2Ti", "nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32},
        },
    ]
    assert parse_platform(document).naming == "hyperpod"


def test_fair_share_disabled_drops_weights() -> None:
    quotas = parse_compute_quotas(load("quota-research.json"), "q")
    policy = parse_scheduler_config({"SchedulerConfig": {"FairShare": "Disabled"}}, "s")
    document, _, _ = import_hyperpod(quotas, policy, INSTANCES)
    assert "fairSharing" not in document["teams"][0]
    assert "priorities" not in document


@pytest.mark.parametrize(
    ("quota", "path", "message"),
    [
        pytest.param(
            {"ComputeQuotaConfig": {"ComputeQuotaResources": [{"InstanceType": "ml.g5.xlarge", "Count": 1}]}},
            "q.ComputeQuotaConfig.ComputeQuotaResources[0].InstanceType",
            "no --instance-resources for ml.g5.xlarge: give --instance-resources "
            "ml.g5.xlarge=cpu=N,memory=QTY[,RESOURCE=N…] with the allocatable resources of one such node "
            "(`kubectl get nodes -l node.kubernetes.io/instance-type=ml.g5.xlarge -o "
            "jsonpath='{.items[0].status.allocatable}'`)",
            id="unknown-instance-type",
        ),
        pytest.param(
            {
                "ComputeQuotaConfig": {
                    "ComputeQuotaResources": [
                        {"InstanceType": "ml.p5.48xlarge", "Count": 1},
                        {"InstanceType": "p5.48xlarge", "Count": 2},
                    ]
                }
            },
            "q.ComputeQuotaConfig.ComputeQuotaResources[1].InstanceType",
            "p5.48xlarge is listed twice",
            id="instance-type-twice",
        ),
        pytest.param(
            {
                "ComputeQuotaConfig": {
                    "ComputeQuotaResources": [
                        {"InstanceType": "ml.p5.48xlarge", "AcceleratorPartition": {"Type": "mig-1g.10gb", "Count": 2}}
                    ]
                }
            },
            "q.ComputeQuotaConfig.ComputeQuotaResources[0].AcceleratorPartition",
            "accelerator partitions (MIG) are not supported",
            id="mig",
        ),
        pytest.param(
            {"ComputeQuotaConfig": {"ComputeQuotaResources": [{"InstanceType": "ml.p5.48xlarge"}]}},
            "q.ComputeQuotaConfig.ComputeQuotaResources[0]",
            "no Count, Accelerators, VCpu or MemoryInGiB",
            id="no-amount",
        ),
        pytest.param(
            {"ComputeQuotaConfig": {"ComputeQuotaResources": [{"InstanceType": "ml.m5.2xlarge", "Accelerators": 1}]}},
            "q.ComputeQuotaConfig.ComputeQuotaResources[0].Accelerators",
            "--instance-resources for ml.m5.2xlarge name no accelerator (nvidia.com/gpu, aws.amazon.com/neuron, "
            "aws.amazon.com/neuroncore, amd.com/gpu)",
            id="accelerators-without-accelerator",
        ),
        pytest.param(
            {"ComputeQuotaConfig": {"ResourceSharingConfig": {"Strategy": "Share"}}},
            "q.ComputeQuotaConfig.ResourceSharingConfig.Strategy",
            "Input should be 'Lend', 'DontLend' or 'LendAndBorrow'",
            id="bad-strategy",
        ),
        pytest.param(
            {"ComputeQuotaConfig": {}, "ComputeQuotaTarget": {"TeamName": "x", "FairShareWeight": 101}},
            "q.ComputeQuotaTarget.FairShareWeight",
            "Input should be less than or equal to 100",
            id="weight-above-100",
        ),
    ],
)
def test_unmappable_allocation(quota: dict[str, Any], path: str, message: str) -> None:
    quota.setdefault("ComputeQuotaTarget", {"TeamName": "team"})
    with pytest.raises(HyperPodError) as caught:
        import_hyperpod(parse_compute_quotas(quota, "q"), None, INSTANCES)
    assert [(p.path, p.message) for p in caught.value.problems] == [(path, message)]


def test_team_in_two_allocations() -> None:
    quotas = [
        *parse_compute_quotas(load("quota-research.json"), "a"),
        *parse_compute_quotas(load("quota-research.json"), "b"),
    ]
    with pytest.raises(HyperPodError) as caught:
        import_hyperpod(quotas, None, INSTANCES)
    assert str(caught.value) == "b.ComputeQuotaTarget.TeamName: team 'research' appears in two allocations"


def test_command_prints_a_platform_that_generates(tmp_path: Path) -> None:
    args = [
        *[
            arg
            for name in ("quota-research.json", "quota-inference.json", "quota-sandbox.json", "quota-archive.json")
            for arg in ("--quota", str(DATA / name))
        ],
        "--scheduler",
        str(DATA / "scheduler.json"),
        "--instance-resources",
        P5,
        "--instance-resources",
        M5,
    ]
    result = CliRunner().invoke(import_hyperpod_command, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("# Imported by `kgov import-hyperpod` from ")
    document = yaml.safe_load(result.stdout)
    assert [t["name"] for t in document["teams"]] == ["archive", "inference", "research", "sandbox"]
    assert "team 'retired' is Disabled: skipped" in result.stderr
    (tmp_path / "platform.yaml").write_text(result.stdout)
    generated = CliRunner().invoke(
        generate_command, [str(tmp_path / "platform.yaml"), "--out", str(tmp_path / "out"), "--namespaces"]
    )
    assert generated.exit_code == 0, generated.output
    queues = list(yaml.safe_load_all((tmp_path / "out" / "localqueues.yaml").read_text()))
    assert [(q["metadata"]["namespace"], q["metadata"]["name"]) for q in queues] == [
        ("hyperpod-ns-archive", "hyperpod-ns-archive-localqueue"),
        ("hyperpod-ns-inference", "hyperpod-ns-inference-localqueue"),
        ("hyperpod-ns-research", "hyperpod-ns-research-localqueue"),
        ("hyperpod-ns-sandbox", "hyperpod-ns-sandbox-localqueue"),
    ]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(["--instance-resources", P5], 2, "Missing option '--quota'", id="no-quota"),
        pytest.param(
            ["--quota", str(DATA / "quota-research.json"), "--instance-resources", "p5"],
            2,
            "Invalid value for '--instance-resources': 'p5': expected TYPE=RESOURCE=QUANTITY",
            id="bad-instance-resources",
        ),
        pytest.param(
            ["--quota", str(DATA / "quota-research.json"), "--instance-resources", M5],
            2,
            "quota-research.json.ComputeQuotaConfig.ComputeQuotaResources[0].InstanceType: no "
            "--instance-resources for ml.p5.48xlarge",
            id="unmapped-instance",
        ),
    ],
)
def test_command_errors(args: list[str], code: int, message: str) -> None:
    result = CliRunner().invoke(import_hyperpod_command, args)
    assert result.exit_code == code
    assert message in result.stderr
