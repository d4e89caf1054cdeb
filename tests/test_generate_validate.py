"""Generator checks: each rule on a bad platform file, with the exact path and message."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from webhook.core.kueue.inventory import Node
from webhook.core.platform.platform import PlatformError, load_platform, parse_platform
from webhook.generate.manifests import build_manifests
from webhook.generate.recreate import needs_recreate, recreate_warnings
from webhook.generate.validate import validate_platform
from webhook.kube.files import InputError, load_nodes

REFUSED = "Kueue refuses changes to nodeLabels, tolerations and topologyName once it is set"
ROOT = Path(__file__).resolve().parents[1]
NODES = ROOT / "tests" / "data" / "nodes-p5.json"
EXAMPLE = ROOT / "kueue-config" / "platform.yaml"

BASE: dict[str, Any] = {
    "apiVersion": "kueue-governor.io/v1alpha1",
    "kind": "Platform",
    "topologies": [{"name": "net", "levels": ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]}],
    "flavors": [
        {"name": "gpu", "nodeLabels": {"example.com/pool": "gpu"}, "topologyName": "net"},
        {"name": "cpu", "nodeLabels": {"example.com/pool": "cpu"}},
    ],
    "cohorts": [{"name": "all"}],
    "priorities": [{"name": "high", "value": 100}],
    "teams": [
        {
            "name": "alpha",
            "cohort": "all",
            "quotas": [
                {
                    "flavor": "gpu",
                    "resources": {
                        "cpu": {"nominalQuota": 8},
                        "nvidia.com/gpu": {"nominalQuota": 2, "borrowingLimit": 2, "lendingLimit": 1},
                    },
                }
            ],
        }
    ],
}

Finding = tuple[str, str, str]


def findings(doc: dict[str, Any], **kwargs: Any) -> list[Finding]:
    """(severity, path, message) of every problem: schema and reference errors first, else the
    generator's own checks."""
    try:
        platform = parse_platform(doc)
    except PlatformError as exc:
        return [(p.severity, p.path, p.message) for p in exc.problems]
    return [(p.severity, p.path, p.message) for p in validate_platform(platform, **kwargs)]


def patched(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    change(doc)
    return doc


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set ``value`` at ``path`` (keys split on ``|``: resource names contain ``/`` and ``.``); an
    index one past the end of a list appends."""

    def change(doc: dict[str, Any]) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split("|")]
        node: Any = doc
        for part in parents:
            node = node[part]
        if isinstance(last, int) and last == len(node):
            node.append(value)
        else:
            node[last] = value

    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split("|")]
        node: Any = doc
        for part in parents:
            node = node[part]
        del node[last]

    return change


def _all(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        for step in changes:
            step(doc)

    return change


LONG_TEAM = "t" * 45
DNS_REASON = (
    "is not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit, "
    "at most 63 characters)"
)

CASES: list[tuple[str, Callable[[dict[str, Any]], None], list[Finding]]] = [
    (
        "topology-without-levels",
        _set("topologies|0|levels", []),
        [("error", "topologies[0].levels", "a Topology has 1 to 16 levels, got 0")],
    ),
    (
        "topology-with-17-levels",
        _set("topologies|0|levels", [f"example.com/l{i}" for i in range(17)]),
        [("error", "topologies[0].levels", "a Topology has 1 to 16 levels, got 17")],
    ),
    (
        "topology-level-twice",
        _set("topologies|0|levels", ["example.com/block", "example.com/block"]),
        [("error", "topologies[0].levels", "level 'example.com/block' appears twice")],
    ),
    (
        "hostname-not-last",
        _set("topologies|0|levels", ["kubernetes.io/hostname", "example.com/rack"]),
        [("error", "topologies[0].levels", "'kubernetes.io/hostname' may only be the last (narrowest) level")],
    ),
    (
        "tas-flavor-without-node-labels",
        _set("flavors|0|nodeLabels", {}),
        [("error", "flavors[0]", "a flavor with a topologyName needs at least one nodeLabel")],
    ),
    (
        "dangling-topology",
        _set("flavors|0|topologyName", "fabric"),
        [("error", "flavors[0].topologyName", "unknown topology 'fabric' (known: ['net'])")],
    ),
    (
        "dangling-flavor",
        _set("teams|0|quotas|0|flavor", "tpu"),
        [("error", "teams[0].quotas[0].flavor", "unknown flavor 'tpu' (known: ['cpu', 'gpu'])")],
    ),
    (
        "limits-without-cohort",
        _drop("teams|0|cohort"),
        [
            (
                "error",
                "teams[0].quotas[0].resources.nvidia.com/gpu.borrowingLimit",
                "borrowingLimit needs the team to be in a cohort (Kueue ignores it otherwise)",
            ),
            (
                "error",
                "teams[0].quotas[0].resources.nvidia.com/gpu.lendingLimit",
                "lendingLimit needs the team to be in a cohort (Kueue ignores it otherwise)",
            ),
        ],
    ),
    (
        "lending-above-nominal",
        _set("teams|0|quotas|0|resources|nvidia.com/gpu|lendingLimit", 3),
        [
            (
                "error",
                "teams[0].quotas[0].resources.nvidia.com/gpu.lendingLimit",
                "lendingLimit 3 is above nominalQuota 2",
            )
        ],
    ),
    (
        "flavor-in-two-groups",
        _set(
            "teams|0|quotas|1",
            {"flavor": "gpu", "resources": {"example.com/nic": {"nominalQuota": 1}}},
        ),
        [
            (
                "error",
                "teams[0].quotas[1].flavor",
                "flavor 'gpu' already has quotas at teams[0].quotas[0]; Kueue allows a flavor in one resource "
                "group only: merge the two entries",
            )
        ],
    ),
    (
        "resource-in-two-groups",
        _set("teams|0|quotas|1", {"flavor": "cpu", "resources": {"cpu": {"nominalQuota": 4}}}),
        [
            (
                "error",
                "teams[0].quotas[1].resources",
                "flavor 'cpu' quotes ['cpu'] but flavor 'gpu' (quotas[0]) covers ['cpu', 'nvidia.com/gpu']; Kueue "
                "allows a resource in one resource group only, and every flavor of a group must quote the same "
                "resources",
            )
        ],
    ),
    (
        "name-not-dns-1123",
        _set("teams|0|name", "Alpha_Team"),
        [("error", "teams[0].name", f"'Alpha_Team' {DNS_REASON}")],
    ),
    (
        "generated-names-too-long",
        _all(_set("naming", "hyperpod"), _set("teams|0|name", LONG_TEAM)),
        [
            (
                "error",
                "teams[0].name",
                f"ClusterQueue name 'hyperpod-ns-{LONG_TEAM}-clusterqueue' would be 70 characters; a label value "
                "has at most 63",
            ),
            (
                "error",
                "teams[0].name",
                f"LocalQueue name 'hyperpod-ns-{LONG_TEAM}-localqueue' would be 68 characters; a label value has at "
                "most 63",
            ),
        ],
    ),
    (
        "generated-priority-name-too-long",
        _all(_set("naming", "hyperpod"), _set("priorities|0|name", "p" * 60)),
        [
            (
                "error",
                "priorities[0].name",
                f"WorkloadPriorityClass name '{'p' * 60}-priority' would be 69 characters; a label value has at "
                "most 63",
            )
        ],
    ),
    (
        "unknown-field",
        _set("teams|0|quota", []),
        [("error", "teams[0].quota", "Extra inputs are not permitted")],
    ),
    (
        "too-many-node-labels",
        _set("flavors|1|nodeLabels", {f"example.com/l{i}": "x" for i in range(9)}),
        [("error", "flavors[1].nodeLabels", "9 entries; Kueue allows at most 8")],
    ),
    (
        "taint-twice",
        _set(
            "flavors|1|nodeTaints",
            [{"key": "spot", "effect": "NoSchedule"}, {"key": "spot", "value": "yes", "effect": "NoSchedule"}],
        ),
        [
            (
                "error",
                "flavors[1].nodeTaints[1]",
                "taint spot:NoSchedule repeats nodeTaints[0]; taints must be unique by key and effect",
            )
        ],
    ),
    (
        "toleration-rules",
        _set(
            "flavors|1|tolerations",
            [
                {"operator": "Equal", "value": "x"},
                {"key": "spot", "operator": "Exists", "value": "x", "tolerationSeconds": 30, "effect": "NoSchedule"},
            ],
        ),
        [
            (
                "error",
                "flavors[1].tolerations[0]",
                "a toleration without key must have operator Exists (it matches every taint)",
            ),
            ("error", "flavors[1].tolerations[1].tolerationSeconds", "tolerationSeconds needs effect NoExecute"),
            ("error", "flavors[1].tolerations[1].value", "a toleration with operator Exists takes no value"),
        ],
    ),
    (
        "borrow-within-cohort-needs-reclaim",
        _set("teams|0|preemption", {"borrowWithinCohort": {"policy": "LowerPriority"}}),
        [
            (
                "error",
                "teams[0].preemption.borrowWithinCohort.policy",
                "borrowWithinCohort.policy other than Never needs reclaimWithinCohort other than Never",
            )
        ],
    ),
    (
        "fair-sharing-weight-too-small",
        _set("teams|0|fairSharing", {"weight": "0.0000000001"}),
        [("error", "teams[0].fairSharing.weight", "a fair-sharing weight is 0 or at least 10^-9")],
    ),
    (
        "bad-resource-name",
        _set("teams|0|quotas|0|resources", {"GPU cards": {"nominalQuota": 1}}),
        [
            (
                "error",
                "teams[0].quotas[0].resources.GPU cards",
                "'GPU cards' is not a resource name ([prefix/]name, e.g. cpu, nvidia.com/gpu)",
            )
        ],
    ),
    (
        "description-too-long",
        _set("priorities|0|description", "d" * 2049),
        [("error", "priorities[0].description", "2049 characters; Kueue allows at most 2048")],
    ),
    (
        "team-without-quotas",
        _set("teams|0|quotas", []),
        [("warning", "teams[0].quotas", "no quotas: the team's ClusterQueue admits nothing")],
    ),
    (
        "selector-only-team",
        _set("teams|0|namespaceSelector", {"matchLabels": {"team": "alpha"}}),
        [
            (
                "warning",
                "teams[0].namespaceSelector",
                "namespaces chosen by selector only: no LocalQueue is generated; create 'alpha-queue' in each "
                "selected namespace",
            )
        ],
    ),
    (
        "team-in-system-namespace",
        _set("teams|0|namespaces", ["kube-system"]),
        [
            (
                "error",
                "teams[0].namespaces[0]",
                "namespace 'kube-system' is a system namespace, which the webhook never touches",
            )
        ],
    ),
    (
        "team-in-webhook-namespace",
        _set("teams|0|namespaces", ["kueue-governor-system"]),
        [
            (
                "warning",
                "teams[0].namespaces",
                "namespace 'kueue-governor-system' is never mutated by the webhook (its own namespace)",
            )
        ],
    ),
]


@pytest.mark.parametrize(("change", "expected"), [(c, e) for _, c, e in CASES], ids=[name for name, _, _ in CASES])
def test_bad_platform_file(change: Callable[[dict[str, Any]], None], expected: list[Finding]) -> None:
    doc = patched(change)
    assert findings(doc) == expected


def test_the_example_passes() -> None:
    assert findings(copy.deepcopy(BASE)) == []
    assert validate_platform(load_platform(EXAMPLE)) == []


def test_capacity_and_topology_labels_from_a_node_inventory() -> None:
    nodes = load_nodes(NODES).nodes
    assert len(nodes) == 16
    platform = load_platform(EXAMPLE)
    matching = '{"node.kubernetes.io/instance-type": "p5.48xlarge"}'
    expected = [
        (
            "flavors[0]",
            "nominalQuota of cpu summed over teams is 2688 (research 1536, inference 768, data-science 384), "
            f"above the allocatable 2680.3 of the 14 nodes matching {matching}",
        ),
        (
            "flavors[0]",
            "nominalQuota of memory summed over teams is 28Ti (research 16Ti, inference 8Ti, data-science 4Ti), "
            f"above the allocatable 28560Gi of the 14 nodes matching {matching}",
        ),
        (
            "topologies[0].levels[2]",
            "1 of 14 nodes of flavor 'p5-48xlarge' lack label 'topology.k8s.aws/network-node-layer-3' "
            "(p5-node-14); topology-aware scheduling leaves them out",
        ),
    ]
    warnings = validate_platform(platform, nodes)
    assert [(p.severity, p.path, p.message) for p in warnings] == [("warning", *e) for e in expected]
    errors = validate_platform(platform, nodes, strict=True)
    assert [(p.severity, p.path, p.message) for p in errors] == [("error", *e) for e in expected]


def test_capacity_within_bounds_and_missing_nodes() -> None:
    nodes = load_nodes(NODES).nodes
    doc = {
        "flavors": [
            {"name": "p5", "nodeLabels": {"node.kubernetes.io/instance-type": "p5.48xlarge"}},
            {"name": "trn", "nodeLabels": {"node.kubernetes.io/instance-type": "trn1.32xlarge"}},
            {"name": "spare", "nodeLabels": {"node.kubernetes.io/instance-type": "g5.xlarge"}},
        ],
        "teams": [
            {"name": "a", "quotas": [{"flavor": "p5", "resources": {"nvidia.com/gpu": {"nominalQuota": 112}}}]},
            {"name": "b", "quotas": [{"flavor": "trn", "resources": {"aws.amazon.com/neuron": {"nominalQuota": 16}}}]},
        ],
    }
    assert findings(doc, nodes=nodes) == [
        (
            "warning",
            "flavors[1].nodeLabels",
            "no node in the inventory matches {'node.kubernetes.io/instance-type': 'trn1.32xlarge'}, "
            "so the quotas of flavor 'trn' have no capacity",
        )
    ]
    doc["teams"][0]["quotas"][0]["resources"]["nvidia.com/gpu"]["nominalQuota"] = 113
    assert findings(doc, nodes=nodes)[0] == (
        "warning",
        "flavors[0]",
        "nominalQuota of nvidia.com/gpu summed over teams is 113 (a 113), above the allocatable 112 of the 14 "
        'nodes matching {"node.kubernetes.io/instance-type": "p5.48xlarge"}',
    )


NODES_EXPECTED = "expected `kubectl get nodes -o json` output (a NodeList or List) or one Node"
GPU_NODE = {"kind": "Node", "metadata": {"name": "gpu-1"}}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "Pod"}, f"{NODES_EXPECTED}, got kind 'Pod'"),
        ({"kind": "ConfigMap", "items": []}, f"{NODES_EXPECTED}, got kind 'ConfigMap'"),
        ({"kind": "NodeList", "items": None}, f"{NODES_EXPECTED}, got a NodeList without an items array"),
        # Defect: a bare array (even an empty one) or a kind-less object was read as "no nodes".
        ([], f"{NODES_EXPECTED}, got an empty array"),
        ([GPU_NODE], f"{NODES_EXPECTED}, got an array"),
        ({"items": []}, f"{NODES_EXPECTED}, got an object without a kind"),
        ({"kind": "List", "items": [{"kind": "Pod"}]}, "items[0] is not a Node"),
        ({"kind": "List", "items": [{"kind": "Node"}]}, "items[0] has no metadata object"),
        ("just text", f"{NODES_EXPECTED}, got a string"),
        # Defect: an allocatable amount that is no quantity, or negative, was read as 0.
        (
            {"kind": "NodeList", "items": [{**GPU_NODE, "status": {"allocatable": {"nvidia.com/gpu": "abc"}}}]},
            "items[0] (node 'gpu-1'): status.allocatable.nvidia.com/gpu: 'abc' is not a Kubernetes quantity "
            "(e.g. 8, 500m, 64Gi)",
        ),
        (
            {**GPU_NODE, "status": {"allocatable": {"cpu": -3}}},
            "the Node (node 'gpu-1'): status.allocatable.cpu: -3 is negative (allocatable amounts are at least 0)",
        ),
        (
            {"kind": "List", "items": [{**GPU_NODE, "status": {"allocatable": ["cpu"]}}]},
            "items[0] (node 'gpu-1'): status.allocatable must be a map of resource quantities, got list",
        ),
    ],
)
def test_bad_node_inventory(tmp_path: Path, data: Any, message: str) -> None:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as caught:
        load_nodes(path)
    assert str(caught.value) == f"{path}: {message}"


def test_an_empty_node_list_is_an_empty_inventory(tmp_path: Path) -> None:
    path = tmp_path / "nodes.json"
    path.write_text('{"apiVersion": "v1", "kind": "NodeList", "items": []}')
    assert load_nodes(path).nodes == []


def test_the_live_cache_reads_invalid_allocatable_amounts_as_zero() -> None:
    """Nodes from the API server are validated by it; read leniently (never a crash), and a
    negative amount is no capacity rather than a negative one."""
    node = Node.from_object({**GPU_NODE, "status": {"allocatable": {"nvidia.com/gpu": "abc", "cpu": -3, "pods": "4"}}})
    assert dict(node.allocatable) == {"nvidia.com/gpu": 0, "cpu": 0, "pods": 4}
    assert node.pods_fitting({"cpu": Decimal(1)}) == 0


def test_single_node_object_is_an_inventory(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '4'}}\n")
    assert [(n.name, dict(n.allocatable)) for n in load_nodes(path).nodes] == [("n1", {"cpu": 4})]


FLAVOR = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ResourceFlavor",
    "metadata": {"name": "gpu"},
    "spec": {"nodeLabels": {"pool": "gpu"}, "topologyName": "net"},
}


@pytest.mark.parametrize(
    ("desired_spec", "current_spec", "reason"),
    [
        pytest.param(
            {"nodeLabels": {"pool": "gpu2"}, "topologyName": "net"},
            {"nodeLabels": {"pool": "gpu"}, "topologyName": "net"},
            f"changes nodeLabels of a ResourceFlavor with topologyName 'net'; {REFUSED}",
            id="tas-flavor-labels",
        ),
        pytest.param(
            {"nodeLabels": {"pool": "gpu"}},
            {"nodeLabels": {"pool": "gpu"}, "topologyName": "net"},
            f"changes topologyName of a ResourceFlavor with topologyName 'net'; {REFUSED}",
            id="tas-flavor-drops-topology",
        ),
        pytest.param(
            {"nodeLabels": {"pool": "gpu"}, "topologyName": "net", "tolerations": [{"key": "k", "operator": "Exists"}]},
            {"nodeLabels": {"pool": "gpu"}, "topologyName": "net"},
            f"changes tolerations of a ResourceFlavor with topologyName 'net'; {REFUSED}",
            id="tas-flavor-tolerations",
        ),
        pytest.param(
            {
                "nodeLabels": {"pool": "gpu"},
                "topologyName": "net",
                "nodeTaints": [{"key": "k", "effect": "NoSchedule"}],
            },
            {"nodeLabels": {"pool": "gpu"}, "topologyName": "net"},
            "changes nodeTaints of a ResourceFlavor with topologyName 'net'; newer Kueue releases keep the whole spec "
            "immutable once topologyName is set",
            id="tas-flavor-taints",
        ),
        pytest.param(
            {"nodeLabels": {"pool": "gpu2"}, "topologyName": "net"},
            {"nodeLabels": {"pool": "gpu"}},
            None,
            id="adding-topology-is-allowed",
        ),
        pytest.param(
            {"nodeLabels": {"pool": "gpu"}, "topologyName": "net"},
            {"nodeLabels": {"pool": "gpu"}, "topologyName": "net"},
            None,
            id="unchanged",
        ),
    ],
)
def test_resource_flavor_recreate(
    desired_spec: dict[str, Any], current_spec: dict[str, Any], reason: str | None
) -> None:
    assert needs_recreate({**FLAVOR, "spec": desired_spec}, {**FLAVOR, "spec": current_spec}) == reason


def test_local_queue_and_topology_recreate() -> None:
    queue = {"kind": "LocalQueue", "metadata": {"name": "q", "namespace": "ns"}, "spec": {"clusterQueue": "a"}}
    moved = {**queue, "spec": {"clusterQueue": "b"}}
    assert needs_recreate(moved, queue) == (
        "moves the LocalQueue from ClusterQueue 'a' to 'b'; Kueue keeps spec.clusterQueue immutable"
    )
    topology = {"kind": "Topology", "metadata": {"name": "t"}, "spec": {"levels": [{"nodeLabel": "a"}]}}
    grown = {**topology, "spec": {"levels": [{"nodeLabel": "a"}, {"nodeLabel": "b"}]}}
    assert needs_recreate(grown, topology) == "changes spec.levels; Kueue keeps a Topology's levels immutable"
    cluster_queue = {"kind": "ClusterQueue", "metadata": {"name": "c"}, "spec": {"cohortName": "x"}}
    assert needs_recreate({**cluster_queue, "spec": {"cohortName": "y"}}, cluster_queue) is None


def test_recreate_warnings_point_into_the_platform() -> None:
    platform = load_platform(EXAMPLE)
    desired = [obj for objects in build_manifests(platform).values() for obj in objects]
    current = copy.deepcopy(desired)
    for obj in current:
        if obj["kind"] == "ResourceFlavor":
            obj["spec"]["nodeLabels"] = {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
        if obj["kind"] == "Topology":
            obj["spec"]["levels"] = obj["spec"]["levels"][1:]
        if obj["kind"] == "ClusterQueue":
            obj["spec"]["queueingStrategy"] = "StrictFIFO"
    warnings = recreate_warnings(desired, current, platform)
    assert [(w.severity, w.path, w.kind, w.name, w.message) for w in warnings] == [
        (
            "warning",
            "topologies[0].levels",
            "Topology",
            "aws-network",
            "Topology 'aws-network' needs a recreate: this changes spec.levels; Kueue keeps a Topology's levels "
            "immutable; delete and re-create it together with the ResourceFlavors that name it",
        ),
        (
            "warning",
            "flavors[0]",
            "ResourceFlavor",
            "p5-48xlarge",
            "ResourceFlavor 'p5-48xlarge' needs a recreate: this changes nodeLabels of a ResourceFlavor with "
            f"topologyName 'aws-network'; {REFUSED}; delete and "
            "re-create it; workloads admitted on it are evicted and requeued",
        ),
    ]
