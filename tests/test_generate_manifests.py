"""Generator output: objects built from the platform file, YAML files, determinism, golden files."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.core.platform.platform import load_platform, parse_platform
from webhook.core.platform.policy import compile_policies
from webhook.generate.manifests import (
    GenerateOptions,
    build_manifests,
    cluster_queues,
    cohorts,
    local_queues,
    namespaces,
    policy_config_map,
    priority_classes,
    resource_flavors,
    topologies,
    workload_priority_classes,
)
from webhook.generate.render import (
    GENERATED_MARKER,
    dump_yaml,
    file_drift,
    load_generated,
    render_files,
    source_reference,
    write_files,
)
from webhook.generate.resource_groups import plan_resource_groups

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "kueue-config" / "platform.yaml"
GENERATED = ROOT / "kueue-config" / "generated"
MANAGED = {"app.kubernetes.io/managed-by": "kueue-governor"}

BASE: dict[str, Any] = {
    "apiVersion": "kueue-governor.io/v1alpha1",
    "kind": "Platform",
    "topologies": [{"name": "net", "levels": ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]}],
    "flavors": [
        {"name": "gpu", "nodeLabels": {"example.com/pool": "gpu"}, "topologyName": "net"},
        {"name": "cpu", "nodeLabels": {"example.com/pool": "cpu"}},
    ],
    "cohorts": [{"name": "all"}, {"name": "research", "parentName": "all", "fairSharing": {"weight": 2}}],
    "priorities": [
        {"name": "high", "value": 1000, "description": "Urgent.", "podPriorityClass": True},
        {"name": "low", "value": 10},
    ],
    "teams": [
        {
            "name": "alpha",
            "cohort": "research",
            "quotas": [
                {
                    "flavor": "gpu",
                    "resources": {
                        "cpu": {"nominalQuota": 64},
                        "nvidia.com/gpu": {"nominalQuota": 8, "borrowingLimit": 4, "lendingLimit": 2},
                    },
                },
                {
                    "flavor": "cpu",
                    "resources": {"nvidia.com/gpu": {"nominalQuota": 0}, "cpu": {"nominalQuota": "500m"}},
                },
            ],
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "fairSharing": {"weight": 3},
            "queueingStrategy": "StrictFIFO",
        },
        {"name": "beta", "namespaces": ["beta-dev", "beta-prod"]},
        {"name": "gamma", "namespaceSelector": {"matchLabels": {"example.com/owner": "gamma"}}},
    ],
}


def platform_of(doc: dict[str, Any] | None = None) -> Any:
    return parse_platform(copy.deepcopy(doc or BASE))


def test_the_bundled_example_generates_every_kind() -> None:
    manifests = build_manifests(load_platform(EXAMPLE), GenerateOptions(namespaces=True))
    counts = {name: [obj["kind"] for obj in objects] for name, objects in manifests.items()}
    assert counts == {
        "namespaces.yaml": ["Namespace"] * 5,  # kueue-governor-system and the 4 team namespaces
        "topologies.yaml": ["Topology"],
        "resourceflavors.yaml": ["ResourceFlavor"],
        "cohorts.yaml": ["Cohort"],
        "clusterqueues.yaml": ["ClusterQueue"] * 3,
        "localqueues.yaml": ["LocalQueue"] * 4,
        "workloadpriorityclasses.yaml": ["WorkloadPriorityClass"] * 4,
        "priorityclasses.yaml": ["PriorityClass"] * 3,
        "policy-configmap.yaml": ["ConfigMap"],
    }
    assert {obj["apiVersion"] for obj in manifests["clusterqueues.yaml"]} == {"kueue.x-k8s.io/v1beta2"}


def test_output_is_byte_identical_across_runs(tmp_path: Path) -> None:
    first = render_files(build_manifests(load_platform(EXAMPLE)), "../platform.yaml")
    second = render_files(build_manifests(load_platform(EXAMPLE)), "../platform.yaml")
    assert first == second
    write_files(first, tmp_path / "a")
    write_files(second, tmp_path / "b")
    for name in first:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_committed_generated_files_match_the_example() -> None:
    platform = load_platform(EXAMPLE)
    options = GenerateOptions(namespaces=True)  # committed so that `kubectl apply -k` works as is
    files = render_files(build_manifests(platform, options), source_reference(EXAMPLE, GENERATED))
    assert file_drift(files, GENERATED) == ""
    assert sorted(p.name for p in GENERATED.iterdir()) == sorted(files)


def test_libyaml_and_pure_python_dumpers_agree() -> None:
    objects = [obj for objs in build_manifests(load_platform(EXAMPLE)).values() for obj in objs]
    pure = yaml.dump_all(objects, Dumper=yaml.SafeDumper, sort_keys=False, width=1 << 16)
    assert [*yaml.safe_load_all(dump_yaml(objects))] == [*yaml.safe_load_all(pure)]


def test_every_file_has_the_header_and_kustomization_lists_the_files() -> None:
    files = render_files(build_manifests(platform_of()), "../platform.yaml")
    for content in files.values():
        assert content.startswith(f"{GENERATED_MARKER} from ../platform.yaml (path relative to this file).\n")
        assert (
            content.splitlines()[1] == "# Do not edit by hand: change the platform file and run `kgov generate` again."
        )
    kustomization = yaml.safe_load(files["kustomization.yaml"])
    assert kustomization == {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [
            "namespaces.yaml",
            "topologies.yaml",
            "resourceflavors.yaml",
            "cohorts.yaml",
            "clusterqueues.yaml",
            "localqueues.yaml",
            "workloadpriorityclasses.yaml",
            "priorityclasses.yaml",
            "policy-configmap.yaml",
        ],
    }


def test_topology_levels_become_node_labels() -> None:
    assert topologies(platform_of()) == [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": "net", "labels": MANAGED},
            "spec": {
                "levels": [
                    {"nodeLabel": "example.com/block"},
                    {"nodeLabel": "example.com/rack"},
                    {"nodeLabel": "kubernetes.io/hostname"},
                ]
            },
        }
    ]


def test_resource_flavors_carry_labels_taints_tolerations_topology() -> None:
    doc = copy.deepcopy(BASE)
    doc["flavors"][1]["nodeTaints"] = [{"key": "spot", "value": "true", "effect": "NoSchedule"}]
    doc["flavors"][1]["tolerations"] = [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    assert [(o["metadata"]["name"], o["spec"]) for o in resource_flavors(platform_of(doc))] == [
        (
            "cpu",
            {
                "nodeLabels": {"example.com/pool": "cpu"},
                "nodeTaints": [{"key": "spot", "value": "true", "effect": "NoSchedule"}],
                "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
            },
        ),
        ("gpu", {"nodeLabels": {"example.com/pool": "gpu"}, "topologyName": "net"}),
    ]


def test_cohorts_with_parent_and_fair_sharing() -> None:
    assert [(o["metadata"]["name"], o["spec"]) for o in cohorts(platform_of())] == [
        ("all", {}),
        ("research", {"parentName": "all", "fairSharing": {"weight": 2}}),
    ]


def test_cluster_queue_spec() -> None:
    queues = {o["metadata"]["name"]: o for o in cluster_queues(platform_of())}
    assert sorted(queues) == ["alpha", "beta", "gamma"]
    alpha = queues["alpha"]
    assert alpha["metadata"]["labels"] == {**MANAGED, "kueue-governor.io/team": "alpha"}
    assert alpha["spec"] == {
        "cohortName": "research",
        "namespaceSelector": {
            "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["alpha"]}]
        },
        "queueingStrategy": "StrictFIFO",
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        "fairSharing": {"weight": 3},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "gpu",
                        "resources": [
                            {"name": "cpu", "nominalQuota": 64},
                            {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 4, "lendingLimit": 2},
                        ],
                    },
                    {
                        "name": "cpu",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "500m"},
                            {"name": "nvidia.com/gpu", "nominalQuota": 0},
                        ],
                    },
                ],
            }
        ],
    }
    assert queues["beta"]["spec"]["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["beta-dev", "beta-prod"]}
        ]
    }
    assert queues["gamma"]["spec"]["namespaceSelector"] == {"matchLabels": {"example.com/owner": "gamma"}}
    assert "cohortName" not in queues["beta"]["spec"]


@pytest.mark.parametrize(
    ("quotas", "groups"),
    [
        pytest.param(
            [
                {"flavor": "a", "resources": {"cpu": 1, "memory": 1}},
                {"flavor": "b", "resources": {"memory": 1, "cpu": 1}},
            ],
            [(["cpu", "memory"], ["a", "b"])],
            id="same-resources-one-group",
        ),
        pytest.param(
            [{"flavor": "a", "resources": {"cpu": 1}}, {"flavor": "b", "resources": {"nvidia.com/gpu": 1}}],
            [(["cpu"], ["a"]), (["nvidia.com/gpu"], ["b"])],
            id="disjoint-resources-two-groups",
        ),
        pytest.param(
            [
                {"flavor": "a", "resources": {"cpu": 1}},
                {"flavor": "b", "resources": {"gpu": 1}},
                {"flavor": "c", "resources": {"cpu": 1}},
            ],
            [(["cpu"], ["a", "c"]), (["gpu"], ["b"])],
            id="flavor-order-kept",
        ),
    ],
)
def test_resource_groups(quotas: list[dict[str, Any]], groups: list[tuple[list[str], list[str]]]) -> None:
    team = {
        "name": "t",
        "quotas": [
            {"flavor": q["flavor"], "resources": {r: {"nominalQuota": v} for r, v in q["resources"].items()}}
            for q in quotas
        ],
    }
    doc = {
        "flavors": [{"name": name} for name in ("a", "b", "c")],
        "teams": [team],
    }
    plan, problems = plan_resource_groups(platform_of(doc).teams[0])
    assert problems == []
    assert [(g.covered_resources, [f.flavor for f in g.flavors]) for g in plan] == groups


def test_local_queues_one_per_team_namespace() -> None:
    queues = [
        (o["metadata"]["namespace"], o["metadata"]["name"], o["spec"]["clusterQueue"])
        for o in local_queues(platform_of())
    ]
    assert queues == [
        ("alpha", "alpha-queue", "alpha"),
        ("beta-dev", "beta-queue", "beta"),
        ("beta-prod", "beta-queue", "beta"),
    ]


def test_hyperpod_naming_preset() -> None:
    doc = {**copy.deepcopy(BASE), "naming": "hyperpod"}
    platform = platform_of(doc)
    assert [o["metadata"]["name"] for o in cluster_queues(platform)] == [
        "hyperpod-ns-alpha-clusterqueue",
        "hyperpod-ns-beta-clusterqueue",
        "hyperpod-ns-gamma-clusterqueue",
    ]
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in local_queues(platform)] == [
        ("beta-dev", "hyperpod-ns-beta-localqueue"),
        ("beta-prod", "hyperpod-ns-beta-localqueue"),
        ("hyperpod-ns-alpha", "hyperpod-ns-alpha-localqueue"),
    ]
    assert [o["metadata"]["name"] for o in workload_priority_classes(platform)] == ["high-priority", "low-priority"]
    assert namespaces(platform)[2]["metadata"] == {
        "name": "hyperpod-ns-alpha",
        "labels": {
            **MANAGED,
            "kueue-governor.io/team": "alpha",
            "sagemaker.amazonaws.com/quota-allocation-id": "alpha",
            "sagemaker.amazonaws.com/sagemaker-managed-queue": "true",
        },
    }


def test_priority_classes() -> None:
    platform = platform_of()
    assert [(o["metadata"]["name"], o["value"], o.get("description")) for o in workload_priority_classes(platform)] == [
        ("high", 1000, "Urgent."),
        ("low", 10, None),
    ]
    assert priority_classes(platform) == [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "high", "labels": MANAGED},
            "value": 1000,
            "description": "Urgent.",
        }
    ]


def test_team_namespaces_only_when_asked_and_only_known_names() -> None:
    platform = platform_of()
    assert [o["metadata"]["name"] for o in build_manifests(platform)["namespaces.yaml"]] == ["kueue-governor-system"]
    assert [
        o["metadata"]["name"] for o in build_manifests(platform, GenerateOptions(namespaces=True))["namespaces.yaml"]
    ] == [
        "alpha",
        "beta-dev",
        "beta-prod",
        "kueue-governor-system",
    ]
    assert namespaces(platform)[0]["metadata"]["labels"] == {**MANAGED, "kueue-governor.io/team": "alpha"}


def test_policy_config_map_holds_the_compiled_policy() -> None:
    platform = platform_of()
    config_map = policy_config_map(platform, "governor")
    assert config_map["metadata"] == {"name": "kgov-policy", "namespace": "governor", "labels": MANAGED}
    document = json.loads(config_map["data"]["policy.json"])
    assert document == json.loads(compile_policies(platform, extra_excluded=["governor"]).model_dump_json())
    assert document["excludedNamespaces"] == ["kube-system", "kube-node-lease", "kube-public", "governor"]
    rendered = dump_yaml([config_map])
    assert "  policy.json: |\n    {\n" in rendered
    assert yaml.safe_load(rendered) == config_map


def test_empty_kinds_leave_no_file() -> None:
    doc = {"teams": [{"name": "solo"}]}
    assert list(build_manifests(platform_of(doc))) == [
        "namespaces.yaml",
        "clusterqueues.yaml",
        "localqueues.yaml",
        "policy-configmap.yaml",
    ]


def test_write_removes_only_generated_files_no_longer_made(tmp_path: Path) -> None:
    write_files(render_files(build_manifests(platform_of()), "x"), tmp_path)
    (tmp_path / "notes.yaml").write_text("mine\n")
    (tmp_path / "cohorts.yaml").write_text((tmp_path / "cohorts.yaml").read_text())
    doc = copy.deepcopy(BASE)
    doc["cohorts"] = []
    for team in doc["teams"]:
        team.pop("cohort", None)
        for quota in team.get("quotas", []):
            for limits in quota["resources"].values():
                limits.pop("borrowingLimit", None)
                limits.pop("lendingLimit", None)
    files = render_files(build_manifests(platform_of(doc)), "x")
    drift = file_drift(files, tmp_path)
    assert f"--- {tmp_path / 'cohorts.yaml'} (on disk)\n+++ /dev/null\n" in drift
    written, removed = write_files(files, tmp_path)
    assert removed == [tmp_path / "cohorts.yaml"]
    assert (tmp_path / "notes.yaml").read_text() == "mine\n"
    assert file_drift(files, tmp_path) == ""
    assert {o["kind"] for o in load_generated(tmp_path)} == {
        "Namespace",
        "Topology",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "WorkloadPriorityClass",
        "PriorityClass",
        "ConfigMap",
    }
    # The policy ConfigMap carries each team's quota ceiling (nominalQuota + borrowingLimit).
    assert sorted(p.name for p in written) == ["clusterqueues.yaml", "kustomization.yaml", "policy-configmap.yaml"]


def test_every_queue_a_team_policy_names_gets_a_local_queue() -> None:
    """Regression: a policy.queue.default of the team's own making was never generated, so every
    workload was defaulted into a LocalQueue that did not exist."""
    doc = copy.deepcopy(BASE)
    doc["teams"][0]["policy"] = {"queue": {"default": "alpha-batch", "allowed": ["alpha-interactive"]}}
    queues = [
        (o["metadata"]["namespace"], o["metadata"]["name"], o["spec"]["clusterQueue"])
        for o in local_queues(platform_of(doc))
        if o["metadata"]["namespace"] == "alpha"
    ]
    assert [(ns, name) for ns, name, _ in queues] == [
        ("alpha", "alpha-batch"),
        ("alpha", "alpha-interactive"),
        ("alpha", "alpha-queue"),
    ]
    assert {cq for _, _, cq in queues} == {"alpha"}


def test_policy_names_the_priority_classes_the_generator_makes() -> None:
    """The webhook's list of PriorityClasses is the generator's: the bundled 'fine-tuning' has a
    WorkloadPriorityClass only."""
    platform = load_platform(EXAMPLE)
    generated = [obj["metadata"]["name"] for obj in priority_classes(platform)]
    assert sorted(generated) == ["experimentation-priority", "inference-priority", "training-priority"]
    for team in compile_policies(platform).teams:
        assert sorted(team.priorityClasses or []) == sorted(generated)
        assert team.workloadPriorityOnly == ["fine-tuning-priority"]


def test_a_pod_priority_rule_without_allowed_allows_only_generated_priority_classes() -> None:
    """Regression: ``podPriority`` without ``allowed`` allowed every platform priority, including
    one with no PriorityClass, which the webhook could then fill in."""
    doc = copy.deepcopy(BASE)
    doc["priorities"] = [
        {"name": "high", "value": 100, "podPriorityClass": True},
        {"name": "batch", "value": 10},
    ]
    doc["teams"][0]["policy"] = {"podPriority": {"default": "high"}}
    team = compile_policies(parse_platform(doc)).teams[0]
    assert team.podPriority is not None
    assert team.podPriority.allowed == ["high"]
    assert team.workloadPriorityOnly == ["batch"]
