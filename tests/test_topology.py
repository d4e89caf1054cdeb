"""``kgov topology`` and ``kgov topology label``: the tree, its renderings, EC2 labels, bad input."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from webhook.cli import main
from webhook.core.kueue.inventory import Node
from webhook.topology.ec2 import TopologyDocumentError, instance_id_of, parse_instance_topology, plan_labels
from webhook.topology.tree import TopologyTree, assignment_domains, default_levels, node_state, pick_resource

REPO = Path(__file__).resolve().parents[1]
NODES = REPO / "examples" / "nodes.json"
PODS = REPO / "examples" / "pods.json"
EC2 = Path(__file__).parent / "data" / "ec2"
P5_DOCUMENT = EC2 / "describe-instance-topology-p5.json"
P6_DOCUMENT = EC2 / "describe-instance-topology-p6.json"
LAYER = "topology.k8s.aws/network-node-layer-{}"


def kgov(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def bundled_nodes() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(NODES.read_text())["items"]
    return items


def node(
    name: str, provider_id: str | None = None, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": dict(spec),
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    if provider_id is not None:
        body["spec"]["providerID"] = provider_id
    return body


def write_list(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


# --------------------------------------------------------------------------- the tree


def test_bundled_inventory_tree_with_bound_pods() -> None:
    nodes = bundled_nodes()
    pods = json.loads(PODS.read_text())["items"]
    tree = TopologyTree(nodes, default_levels(nodes), pick_resource(nodes))
    assert tree.resource == "nvidia.com/gpu"
    assert tree.levels == [LAYER.format(1), LAYER.format(2), LAYER.format(3)]
    # 9 bound, running pods; the Succeeded one and the unbound one are not counted.
    assert tree.add_pods(pods) == 8
    rack = tree.root.children["nn-0aa1"].children["nn-0bb1"].children["nn-0cc11"]
    assert (rack.nodes, rack.allocatable, rack.free) == (4, 32, 0)
    block = tree.root.children["nn-0aa1"].children["nn-0bb2"]
    assert (block.nodes, block.allocatable, block.free) == (8, 64, 64 - 4 - 4 - 1)
    assert (tree.root.nodes, tree.root.allocatable, tree.root.free) == (16, 128, 128 - 5 * 8 - 4 - 4 - 1)


def test_not_ready_cordoned_and_tainted_nodes_are_marked_and_offer_nothing() -> None:
    nodes = copy.deepcopy(bundled_nodes())
    nodes[0]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    nodes[1]["spec"] = {"unschedulable": True}
    nodes[2]["spec"] = {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}
    nodes[3]["spec"] = {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}  # tolerated by flavors
    tree = TopologyTree(nodes, default_levels(nodes), "nvidia.com/gpu", FLAVOR_TOLERATIONS)
    marks = {name: tree.hosts[name].marks for name in (n["metadata"]["name"] for n in nodes[:4])}
    assert list(marks.values()) == [["NotReady"], ["cordoned"], ["tainted"], []]
    rack = tree.root.children["nn-0aa1"].children["nn-0bb1"].children["nn-0cc11"]
    assert (rack.nodes, rack.unavailable, rack.allocatable, rack.free) == (4, 3, 32, 8)
    table = kgov_table(nodes, "--platform", str(PLATFORM))
    assert "ip-10-1-1-1.ec2.internal      1            1            8     0  NotReady" in table
    assert "ip-10-1-1-2.ec2.internal      1            1            8     0  cordoned" in table


FLAVOR_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
PLATFORM = REPO / "kueue-config" / "platform.yaml"  # its flavor tolerates nvidia.com/gpu:NoSchedule
MAINTENANCE = {"key": "maint", "value": "yes", "effect": "NoSchedule"}


def test_nodes_with_a_taint_no_flavor_tolerates_are_marked_and_offer_nothing_free() -> None:
    """Defect: a node tainted ``maint=yes:NoSchedule`` was shown free, though Kueue's TAS leaves
    it out for every pod that does not tolerate the taint (``kgov why``: ``taint "maint=yes:NoSchedule"``).
    A taint the flavors tolerate (``nvidia.com/gpu``) still counts as free."""
    nodes = copy.deepcopy(bundled_nodes())
    nodes[0]["spec"] = {"taints": [MAINTENANCE, {"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}
    nodes[1]["spec"] = {"taints": [{"key": "drain", "effect": "NoExecute"}]}
    nodes[2]["spec"] = {"taints": [{"key": "soft", "effect": "PreferNoSchedule"}]}  # never excludes
    tree = TopologyTree(nodes, default_levels(nodes), "nvidia.com/gpu", FLAVOR_TOLERATIONS)
    marks = [tree.hosts[n["metadata"]["name"]].marks for n in nodes[:3]]
    assert marks == [["tainted maint=yes:NoSchedule"], ["tainted drain:NoExecute"], []]
    rack = tree.root.children["nn-0aa1"].children["nn-0bb1"].children["nn-0cc11"]
    assert (rack.nodes, rack.unavailable, rack.allocatable, rack.free) == (4, 2, 32, 16)
    assert (tree.root.unavailable, tree.root.free) == (2, 128 - 16)
    table = kgov_table(nodes, "--platform", str(PLATFORM))
    assert "ip-10-1-1-1.ec2.internal      1            1            8     0  tainted maint=yes:NoSchedule" in table
    assert "# 16 nodes, 2 taking no new pods; nvidia.com/gpu: 128 allocatable, 112 free" in table
    document = json.loads(kgov_table(nodes, "--platform", str(PLATFORM), "-o", "json"))
    host = document["domains"][0]["domains"][0]["domains"][0]["hosts"][0]
    assert (host["name"], host["free"], host["taints"]) == ("ip-10-1-1-1.ec2.internal", 0, ["maint=yes:NoSchedule"])
    # Without the platform (its flavor's toleration unknown) the nvidia.com/gpu taint counts too.
    bare = kgov_table(nodes)
    assert "0  tainted maint=yes:NoSchedule,tainted nvidia.com/gpu:NoSchedule" in bare


def test_a_live_node_with_an_unreadable_or_negative_allocatable_counts_nothing() -> None:
    """Nodes read live are not checked again (the API server validates them): an unreadable or
    negative amount counts as 0, never as a negative capacity or a crash."""
    nodes = [node("a"), node("b")]
    nodes[0]["status"]["allocatable"] = {"nvidia.com/gpu": "abc"}
    nodes[1]["status"]["allocatable"] = {"nvidia.com/gpu": -3}
    tree = TopologyTree(nodes, default_levels(nodes), "nvidia.com/gpu")
    assert [(h.allocatable, h.free) for h in tree.hosts.values()] == [(0, 0), (0, 0)]
    assert (tree.root.allocatable, tree.root.free) == (0, 0)


def kgov_table(nodes: list[dict[str, Any]], *options: str) -> str:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        result = kgov("topology", "--nodes", str(write_list(Path(directory) / "n.json", nodes)), *options)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(
    "spec, conditions",
    [
        ({}, [{"type": "Ready", "status": "True"}]),
        ({}, [{"type": "Ready", "status": "Unknown"}]),
        ({}, []),
        ({"unschedulable": True}, [{"type": "Ready", "status": "True"}]),
        ({"unschedulable": "true"}, [{"type": "Ready", "status": "True"}]),
        (
            {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
            [{"type": "Ready", "status": "True"}],
        ),
        (
            {"taints": [{"key": "node.kubernetes.io/x", "effect": "PreferNoSchedule"}]},
            [{"type": "Ready", "status": "True"}],
        ),
        ({"taints": [{"key": "team", "effect": "NoSchedule"}]}, [{"type": "Ready", "status": "True"}]),
        ({"taints": "bad"}, [{"type": "Ready", "status": "True"}]),
    ],
)
def test_schedulable_is_the_inventory_rule(spec: dict[str, Any], conditions: list[Any]) -> None:
    # The tree's "takes new pods": the inventory's readiness and cordon rule, and none of the
    # inventory's blocking taints (NoSchedule/NoExecute) set by Kubernetes itself (node.kubernetes.io/*).
    body = {"metadata": {"name": "n"}, "spec": spec, "status": {"conditions": conditions}}
    inventory_node = Node.from_object(body)
    system_taint = any(str(t.get("key", "")).startswith("node.kubernetes.io/") for t in inventory_node.taints)
    assert node_state(body)[2] == (inventory_node.schedulable and not system_taint)


def test_default_levels_follow_the_deepest_aws_layer() -> None:
    three = [node("a", labels={LAYER.format(1): "x", LAYER.format(3): "z"})]
    four = [*three, node("b", labels={LAYER.format(4): "w"})]
    assert default_levels(three) == [LAYER.format(i) for i in (1, 2, 3)] + ["kubernetes.io/hostname"]
    assert default_levels(four) == [LAYER.format(i) for i in (1, 2, 3, 4)] + ["kubernetes.io/hostname"]
    assert default_levels([node("c")]) == [LAYER.format(i) for i in (1, 2, 3)] + ["kubernetes.io/hostname"]


def test_nodes_missing_a_level_sit_in_an_unlabelled_domain() -> None:
    nodes = [*bundled_nodes(), node("bare-node")]
    tree = TopologyTree(nodes, default_levels(nodes), "nvidia.com/gpu")
    assert tree.root.children[""].children[""].children[""].hosts[0].name == "bare-node"
    assert "(no topology.k8s.aws/network-node-layer-1)" in kgov_table(nodes)


# --------------------------------------------------------------------------- workloads


SLICED_ASSIGNMENT = {
    "levels": [LAYER.format(3), "kubernetes.io/hostname"],
    "slices": [
        {
            "domainCount": 3,
            "valuesPerLevel": [
                {"universal": "nn-0cc12"},
                {"individual": {"prefix": "ip-10-1-2-", "roots": ["1", "2", "3"], "suffix": ".ec2.internal"}},
            ],
            "podCounts": {"individual": [1, 2, 1]},
        }
    ],
}


def test_assignment_domains_decodes_v1beta2_slices_and_v1beta1_domains() -> None:
    assert assignment_domains(SLICED_ASSIGNMENT) == [
        ([LAYER.format(3), "kubernetes.io/hostname"], ["nn-0cc12", "ip-10-1-2-1.ec2.internal"], 1),
        ([LAYER.format(3), "kubernetes.io/hostname"], ["nn-0cc12", "ip-10-1-2-2.ec2.internal"], 2),
        ([LAYER.format(3), "kubernetes.io/hostname"], ["nn-0cc12", "ip-10-1-2-3.ec2.internal"], 1),
    ]
    v1beta1 = {"levels": [LAYER.format(3)], "domains": [{"values": ["nn-0cc21"], "count": 2}]}
    assert assignment_domains(v1beta1) == [([LAYER.format(3)], ["nn-0cc21"], 2)]
    with pytest.raises(ValueError):
        assignment_domains({**SLICED_ASSIGNMENT, "slices": [{**SLICED_ASSIGNMENT["slices"][0], "domainCount": 2}]})


def workload(assignment: dict[str, Any], gpus: str, count: int, *conditions: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "w", "namespace": "ns"},
        "status": {
            "conditions": [{"type": c, "status": "True"} for c in conditions],
            "admission": {
                "podSetAssignments": [
                    {
                        "name": "main",
                        "count": count,
                        "resourceUsage": {"nvidia.com/gpu": gpus},
                        "topologyAssignment": assignment,
                    }
                ]
            },
        },
    }


def test_workloads_holding_quota_count_where_their_assignment_puts_them() -> None:
    nodes = bundled_nodes()
    tree = TopologyTree(nodes, default_levels(nodes), "nvidia.com/gpu")
    rack_level = {"levels": [LAYER.format(3)], "domains": [{"values": ["nn-0cc21"], "count": 2}]}
    counted = tree.add_workloads(
        [
            workload(SLICED_ASSIGNMENT, "16", 4, "QuotaReserved", "Admitted"),  # 4 GPUs a pod
            workload(rack_level, "16", 2, "QuotaReserved"),  # 8 GPUs a pod, rack-wide
            workload(rack_level, "16", 2, "QuotaReserved", "Finished"),  # done: not counted
            workload(rack_level, "16", 2),  # pending: not counted
        ]
    )
    assert counted == 2
    assert [tree.hosts[f"ip-10-1-2-{i}.ec2.internal"].free for i in (1, 2, 3, 4)] == [4, 0, 4, 8]
    rack = tree.root.children["nn-0aa1"].children["nn-0bb2"].children["nn-0cc21"]
    assert (rack.free, rack.used_here) == (16, 16)
    assert tree.root.free == 128 - 16 - 16
    assert not tree.unmatched_assignments


def test_tas_pods_are_left_to_their_workloads() -> None:
    nodes = bundled_nodes()
    tas_pod = {
        "metadata": {"name": "p", "namespace": "ns", "annotations": {"kueue.x-k8s.io/podset-required-topology": "x"}},
        "spec": {
            "nodeName": "ip-10-1-1-1.ec2.internal",
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": "8"}}}],
        },
    }
    tree = TopologyTree(nodes, default_levels(nodes), "nvidia.com/gpu")
    assert tree.add_pods([tas_pod], skip_tas_pods=True) == 0
    assert tree.add_pods([tas_pod]) == 1
    assert tree.hosts["ip-10-1-1-1.ec2.internal"].free == 0


# --------------------------------------------------------------------------- the command


def test_table_of_the_bundled_inventory() -> None:
    result = kgov("topology", "--nodes", str(NODES), "--pods", str(PODS))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "# 16 nodes; nvidia.com/gpu: 128 allocatable, 79 free"
    assert lines[1] == "# levels: " + " > ".join(LAYER.format(i) for i in (1, 2, 3)) + " > host"
    lines = lines[1:]
    assert lines[1].split() == ["LEVEL", "DOMAIN", "NODES", "UNAVAILABLE", "ALLOCATABLE", "FREE", "STATUS"]
    assert lines[2].split() == ["layer-1", "nn-0aa1", "16", "0", "128", "79"]
    assert lines[4].split() == ["layer-3", "nn-0cc11", "4", "0", "32", "0"]
    assert len(lines) == 2 + 1 + 2 + 4 + 16


def test_tree_and_json_formats() -> None:
    tree = kgov("topology", "--nodes", str(NODES), "--pods", str(PODS), "-o", "tree").output
    assert "│   ├── nn-0cc11 (layer-3)  4 nodes  0/32 free" in tree
    assert "        │   ├── ip-10-2-1-1.ec2.internal  4/8 free" in tree
    document = json.loads(kgov("topology", "--nodes", str(NODES), "-o", "json").output)
    assert (document["nodes"], document["allocatable"], document["free"]) == (16, 128, 128)
    rack = document["domains"][0]["domains"][1]["domains"][0]
    assert (rack["name"], rack["nodes"], [h["name"] for h in rack["hosts"]][:1]) == (
        "nn-0cc21",
        4,
        ["ip-10-2-1-1.ec2.internal"],
    )


@pytest.mark.parametrize("fmt, magic", [("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<?xml")])
def test_pictures(tmp_path: Path, fmt: str, magic: bytes) -> None:
    output = tmp_path / f"topology.{fmt}"
    result = kgov("topology", "--nodes", str(NODES), "--pods", str(PODS), "--out", str(output))
    assert result.exit_code == 0, result.output
    assert output.read_bytes().startswith(magic)
    if fmt == "svg":
        text = output.read_text()
        assert "<svg" in text and "79 free of 128" in text  # text kept as text (searchable)


def test_topology_levels_from_the_platform_file() -> None:
    result = kgov(
        "topology",
        "--nodes",
        str(NODES),
        "--topology",
        "aws-network",
        "--platform",
        str(REPO / "kueue-config/platform.yaml"),
    )
    assert result.exit_code == 0, result.output
    assert "layer-3      nn-0cc22" in result.output
    missing = kgov(
        "topology", "--nodes", str(NODES), "--topology", "nope", "--platform", str(REPO / "kueue-config/platform.yaml")
    )
    assert missing.exit_code == 2
    assert "no topology 'nope' (known: aws-network)" in missing.output


@pytest.mark.parametrize(
    "args, message",
    [
        (("--kubeconfig", str(NODES), "--nodes", str(NODES)), "give one of --kubeconfig K (or $KUBECONFIG) or --nodes"),
        (("--nodes", str(NODES), "--topology", "aws-network"), "--topology NAME with --nodes needs --platform F"),
        (("--nodes", str(NODES), "--platform", "p.yaml"), "p.yaml: invalid platform file"),
        (("--nodes", "/nonexistent/nodes.json"), "/nonexistent/nodes.json: cannot read"),
        (("--nodes", str(PODS)), "items[0] is not a Node"),
        (("--nodes", str(NODES), "--pods", str(NODES)), "items[0] is not a Pod"),
    ],
)
def test_topology_usage_errors(args: tuple[str, ...], message: str) -> None:
    result = kgov("topology", *args)
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        # Once counted as 0 used: the node showed all its GPUs free.
        (
            {
                "metadata": {"name": "p", "namespace": "a"},
                "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "abc"}}}]},
            },
            "items[0] (pod 'a/p'): spec.containers[0].resources.requests.nvidia.com/gpu must be a Kubernetes quantity "
            '(e.g. 8, 500m, 64Gi), got string "abc"',
        ),
        (
            {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]}},
            "items[0] (pod 'p'): spec.containers[0].resources.limits.nvidia.com/gpu must be a whole number",
        ),
        ({"metadata": {"name": "p"}, "spec": "x"}, "items[0] (pod 'p'): spec must be an object, got string \"x\""),
        (
            {"metadata": {"name": "p"}, "spec": {"containers": "notalist"}},
            "items[0] (pod 'p'): spec.containers must be an array, got string \"notalist\"",
        ),
    ],
)
def test_a_pod_dump_with_an_unreadable_request_is_refused(tmp_path: Path, pod: dict[str, Any], message: str) -> None:
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"apiVersion": "v1", "kind": "PodList", "items": [{"kind": "Pod", **pod}]}))
    result = kgov("topology", "--nodes", str(NODES), "--pods", str(pods))
    assert result.exit_code == 2
    assert f"{pods}: {message}" in result.output


def test_non_json_node_dump_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "nodes.json"
    bad.write_text('{"items": [{"kind": "Node", "metadata": {}')
    result = kgov("topology", "--nodes", str(bad))
    assert result.exit_code == 2
    assert f"{bad}: not valid JSON: Expecting ',' delimiter at line 1 column 43" in result.output


# --------------------------------------------------------------------------- EC2 labels


def provider(instance: str, zone: str = "us-east-1a") -> str:
    return f"aws:///{zone}/{instance}"


def test_instance_id_from_provider_id() -> None:
    assert instance_id_of("aws:///us-east-1a/i-0a1b2c3d4e5f60001") == "i-0a1b2c3d4e5f60001"
    assert instance_id_of("aws://us-east-1a/i-0a1b2c3d4e5f60001") is None
    assert instance_id_of("gce://project/zone/vm") is None
    assert instance_id_of(None) is None


def test_label_commands_from_a_three_layer_document(tmp_path: Path) -> None:
    nodes = write_list(
        tmp_path / "nodes.json",
        [
            node("ip-10-1-1-1.ec2.internal", provider("i-0a1b2c3d4e5f60001")),
            # already right: no command
            node(
                "ip-10-1-2-1.ec2.internal",
                provider("i-0a1b2c3d4e5f60002"),
                {LAYER.format(1): "nn-0aa1", LAYER.format(2): "nn-0bb1", LAYER.format(3): "nn-0cc12"},
            ),
            # a stale fourth layer is removed
            node("ip-10-2-1-1.ec2.internal", provider("i-0a1b2c3d4e5f60003"), {LAYER.format(4): "old"}),
            node("cpu-node", provider("i-0ffffffffffffffff")),
            node("kind-node"),
            node("ip-10-9-9-9.ec2.internal", provider("i-0a1b2c3d4e5f6000a")),
        ],
    )
    result = CliRunner().invoke(main, ["topology", "label", "--from", str(P5_DOCUMENT), "--nodes", str(nodes)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "kubectl label node ip-10-1-1-1.ec2.internal topology.k8s.aws/network-node-layer-1=nn-0aa1 "
        "topology.k8s.aws/network-node-layer-2=nn-0bb1 topology.k8s.aws/network-node-layer-3=nn-0cc11 --overwrite",
        "kubectl label node ip-10-2-1-1.ec2.internal topology.k8s.aws/network-node-layer-1=nn-0aa1 "
        "topology.k8s.aws/network-node-layer-2=nn-0bb2 topology.k8s.aws/network-node-layer-3=nn-0cc21 "
        "topology.k8s.aws/network-node-layer-4- --overwrite",
    ]
    assert "1 instances with no node: i-0a1b2c3d4e5f60009" in result.stderr
    assert "2 nodes with no instance in the document: cpu-node, kind-node" in result.stderr
    assert "1 instances EC2 gave no network nodes for" in result.stderr
    assert "5 instances, 6 nodes: 2 to label, 1 already labelled" in result.stderr


def test_label_plan_from_a_four_layer_document() -> None:
    instances = parse_instance_topology(json.loads(P6_DOCUMENT.read_text()))
    plan = plan_labels(
        instances,
        [
            node("b200-1", provider("i-0f6e5d4c3b2a10001", "us-west-2a")),
            node("b200-2", provider("i-0f6e5d4c3b2a10002", "us-west-2a")),
            node("p5-1", provider("i-0f6e5d4c3b2a10003", "us-west-2a")),
        ],
    )
    assert [(c.node, c.labels) for c in plan.changes] == [
        (
            "b200-1",
            {
                LAYER.format(1): "nn-1aa1",
                LAYER.format(2): "nn-1bb1",
                LAYER.format(3): "nn-1cc11",
                LAYER.format(4): "nn-1dd111",
            },
        ),
        (
            "b200-2",
            {
                LAYER.format(1): "nn-1aa1",
                LAYER.format(2): "nn-1bb1",
                LAYER.format(3): "nn-1cc11",
                LAYER.format(4): "nn-1dd112",
            },
        ),
        ("p5-1", {LAYER.format(1): "nn-1aa1", LAYER.format(2): "nn-1bb2", LAYER.format(3): "nn-1cc21"}),
    ]
    assert plan.instances_without_node == [] and plan.nodes_without_instance == []


def test_pages_as_an_array_are_merged() -> None:
    pages = [json.loads(P5_DOCUMENT.read_text()), json.loads(P6_DOCUMENT.read_text())]
    assert len(parse_instance_topology(pages)) == 8
    # Every page but the last carries the NextToken of the next one: that is a complete result.
    pages[0]["NextToken"] = "eyJuZXh0IjogMn0="
    pages[1]["NextToken"] = ""
    assert len(parse_instance_topology(pages)) == 8


@pytest.mark.parametrize(
    "content, message",
    [
        ("Instances: []", "not JSON (Expecting value at line 1 column 1)"),
        ("", "not JSON"),
        ("[1, 2]", "[0]: expected `aws ec2 describe-instance-topology` output"),
        (
            '{"Reservations": []}',
            "expected `aws ec2 describe-instance-topology` output, an object with an Instances list",
        ),
        ('{"Instances": {"InstanceId": "i-0a1b2c3d4e5f60001"}}', "an object with an Instances list"),
        ('{"Instances": ["i-0a1b2c3d4e5f60001"]}', "Instances[0]: not an object"),
        ('{"Instances": [{"NetworkNodes": ["a", "b", "c"]}]}', "Instances[0]: no InstanceId"),
        ('{"Instances": [{"InstanceId": "web-1", "NetworkNodes": ["a", "b", "c"]}]}', "'web-1' is not an instance id"),
        ('{"Instances": [{"InstanceId": "i-0a1b2c3d4e5f60001", "NetworkNodes": "nn-1"}]}', "is not a list of strings"),
        ('{"Instances": [{"InstanceId": "i-0a1b2c3d4e5f60001", "NetworkNodes": ["a", "b"]}]}', "has 2 NetworkNodes"),
        (
            '{"Instances": [{"InstanceId": "i-0a1b2c3d4e5f60001", "NetworkNodes": ["a", "b", "c d"]}]}',
            "network node 'c d' of i-0a1b2c3d4e5f60001 cannot be a label value",
        ),
        (
            '{"Instances": [{"InstanceId": "i-0a1b2c3d4e5f60001", "NetworkNodes": ["a", "b", "c"]},'
            ' {"InstanceId": "i-0a1b2c3d4e5f60001", "NetworkNodes": ["a", "b", "d"]}]}',
            "Instances[1]: i-0a1b2c3d4e5f60001 is listed twice with different NetworkNodes",
        ),
        ("[]", "an empty array; expected `aws ec2 describe-instance-topology` output"),
        (
            '{"Instances": [{"InstanceId": "i-0a1b2c3d4e5f60001", "NetworkNodes": ["a", "b", "c"]}],'
            ' "NextToken": "eyJuZXh0IjogMn0="}',
            "NextToken is set, so this is one page of an incomplete result",
        ),
        (
            '[{"Instances": [], "NextToken": "t1"}, {"Instances": [], "NextToken": "t2"}]',
            "[1]: NextToken is set",
        ),
    ],
)
def test_label_refuses_bad_documents(tmp_path: Path, content: str, message: str) -> None:
    document = tmp_path / "topology.json"
    document.write_text(content)
    result = kgov("topology", "label", "--from", str(document), "--nodes", str(NODES))
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_label_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # With neither --nodes nor --kubeconfig the cluster is read as kubectl would: $KUBECONFIG here.
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    done = kgov("topology", "label", "--from", str(P5_DOCUMENT))
    assert done.exit_code == 2
    assert f"$KUBECONFIG={tmp_path / 'absent'}: no such file (or read a dump: --nodes NODES.json)" in done.output
    both = kgov("topology", "label", "--from", str(P5_DOCUMENT), "--nodes", str(NODES), "--kubeconfig", str(NODES))
    assert both.exit_code == 2 and "give one of --kubeconfig K (or $KUBECONFIG) or --nodes" in both.output
    applied = kgov("topology", "label", "--from", str(P5_DOCUMENT), "--nodes", str(NODES), "--apply")
    assert applied.exit_code == 2 and "--apply labels a live cluster: give --kubeconfig K" in applied.output
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\xff\xfe{")
    result = kgov("topology", "label", "--from", str(binary), "--nodes", str(NODES))
    assert result.exit_code == 2 and "not UTF-8 text" in result.output
    with pytest.raises(TopologyDocumentError):
        parse_instance_topology(None)


def test_topology_reads_the_kubeconfig_of_kubeconfig_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As kubectl: without --nodes or --kubeconfig the cluster of $KUBECONFIG is read (here a file
    # that is not a kubeconfig, so the error shows which file was read).
    config = tmp_path / "config"
    config.write_text("- not\n- a kubeconfig\n")
    monkeypatch.setenv("KUBECONFIG", str(config))
    result = kgov("topology")
    assert result.exit_code == 2
    assert f"cannot load kubeconfig {config}: a YAML list, not a kubeconfig" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-o", "png", "--out", "/nonexistent/dir/t.png"), "--out /nonexistent/dir/t.png: directory /nonexistent/dir"),
        (("--out", "/nonexistent/dir/t.json"), "--out /nonexistent/dir/t.json: directory /nonexistent/dir does not"),
        (("-o", "/nonexistent/dir/t.png"), "--out /nonexistent/dir/t.png: directory /nonexistent/dir does not exist"),
        (("--resource", "nvidia.com/gpus"), "--resource nvidia.com/gpus: no node has it allocatable (the nodes have: "),
        (("--topology", "a/../b", "--platform", "p.yaml"), "Invalid value for '--topology': 'a/../b' is not a valid"),
    ],
)
def test_topology_refuses_outputs_and_names_it_cannot_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = kgov("topology", "--nodes", str(NODES), *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "png").exists() and not (tmp_path / "json").exists()


def test_topology_names_nodes_and_pods_in_the_singular_when_one(tmp_path: Path) -> None:
    nodes = json.loads(NODES.read_text())
    nodes["items"] = nodes["items"][:1]
    one = tmp_path / "one.json"
    one.write_text(json.dumps(nodes))
    result = kgov("topology", "--nodes", str(one), "--pods", str(PODS))
    assert result.exit_code == 0
    assert "# 1 node;" in result.output or "# 1 node " in result.output
    assert re.search(r"kgov topology: \d+ pods are bound|kgov topology: 1 pod is bound", result.output)
