"""Exact values of webhook/core's small decisions: quantities, team resolution, pointers, pod requests,
node admission and sizing, the queue and node-affinity rules.

Each test pins a value that a one-token change of the code would alter (a comparison bound, an
operator, a message, a default); they were written against the survivors of ``make mutate``
(docs/testing.md, "Mutation testing").
"""

from __future__ import annotations

import copy
from decimal import Decimal
from types import MappingProxyType
from typing import Any

import pytest
from support import AWS_LEVELS, aws_nodes, job, platform_with, review_body, teams_from

from webhook.core.admission.review import ReviewOutcome, review
from webhook.core.kueue.inventory import Node, NodeInventory, PodConstraints, first_fit
from webhook.core.kueue.kinds import find_kind
from webhook.core.kueue.resources import pod_requests
from webhook.core.kueue.scheduling import term_matches, tolerates
from webhook.core.kueue.view import kueue_view
from webhook.core.objects.paths import child, dotted
from webhook.core.objects.quantity import QuantityError, format_quantity, parse_quantity
from webhook.core.plan.draft import Change, Draft, Shape
from webhook.core.plan.patch import apply_patch, pointer, to_json_patch
from webhook.core.plan.planner import managed_child, plan_object
from webhook.core.plan.rules.node_affinity import normalize
from webhook.core.platform.platform import LabelSelector
from webhook.core.platform.prepared import prepared
from webhook.core.platform.resolve import TeamIndex, selector_matches

# -- quantities ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("16", "16"),
        ("0.500", "0.5"),
        ("-2.50", "-2.5"),
        # 24 characters is the longest plain rendering; the 25-character one switches to exponent form.
        ("1E+23", "100000000000000000000000"),
        ("123456789012345678901234", "123456789012345678901234"),
        ("1E+24", "1E+24"),
        ("1234567890123456789012345", "1.234567890123456789012345E+24"),
        ("-2.50E+40", "-2.5E+40"),
        ("1E-24", "1E-24"),
        ("1E+9999", "1E+9999"),
    ],
)
def test_format_quantity_is_plain_up_to_24_characters_then_exponent(value: str, text: str) -> None:
    assert format_quantity(Decimal(value)) == text


@pytest.mark.parametrize(
    ("value", "base_units"),
    [
        ("8", Decimal(8)),
        ("500m", Decimal("0.5")),
        ("2Ti", Decimal(2 * 2**40)),
        ("1Ki", Decimal(1024)),
        ("3n", Decimal("3e-9")),
        ("1.5k", Decimal(1500)),
        ("2e3", Decimal(2000)),
        ("2E-3", Decimal("0.002")),
        (".5", Decimal("0.5")),
        ("+7", Decimal(7)),
        (4, Decimal(4)),
        (0.25, Decimal("0.25")),
    ],
)
def test_parse_quantity_values_in_base_units(value: str | int | float, base_units: Decimal) -> None:
    assert parse_quantity(value) == base_units


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "true (a boolean) is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)"),
        (False, "false (a boolean) is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)"),
        (float("nan"), "nan is not a Kubernetes quantity (a finite number, e.g. 8, 500m, 64Gi)"),
        (float("inf"), "inf is not a Kubernetes quantity (a finite number, e.g. 8, 500m, 64Gi)"),
        (None, "None is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)"),
        ("8 GPUs", "'8 GPUs' is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)"),
        (
            "1e9999999999",
            "'1e9999999999' is out of the range of a Kubernetes quantity "
            "(at most 2^63-1 = 9223372036854775807 in magnitude, in base units)",
        ),
    ],
)
def test_parse_quantity_refusals_name_the_value(value: Any, message: str) -> None:
    with pytest.raises(QuantityError) as refused:
        parse_quantity(value)
    assert str(refused.value) == message


# -- which team owns a namespace -------------------------------------------------------------------------


def _selector(**fields: Any) -> LabelSelector:
    return LabelSelector.model_validate(fields)


@pytest.mark.parametrize(
    ("expression", "labels", "matches"),
    [
        ({"key": "tier", "operator": "In", "values": ["gpu"]}, {"tier": "gpu"}, True),
        ({"key": "tier", "operator": "In", "values": ["gpu"]}, {"tier": "cpu"}, False),
        ({"key": "tier", "operator": "In", "values": ["gpu"]}, {}, False),
        ({"key": "tier", "operator": "NotIn", "values": ["cpu"]}, {"tier": "gpu"}, True),
        ({"key": "tier", "operator": "NotIn", "values": ["cpu"]}, {"tier": "cpu"}, False),
        ({"key": "tier", "operator": "NotIn", "values": ["cpu"]}, {}, True),
        ({"key": "tier", "operator": "Exists"}, {"tier": ""}, True),
        ({"key": "tier", "operator": "Exists"}, {"other": "x"}, False),
        ({"key": "tier", "operator": "DoesNotExist"}, {"other": "x"}, True),
        ({"key": "tier", "operator": "DoesNotExist"}, {"tier": "gpu"}, False),
    ],
)
def test_selector_match_expressions(expression: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    assert selector_matches(_selector(matchExpressions=[expression]), labels) is matches


def test_selector_needs_every_match_label_and_every_expression() -> None:
    selector = _selector(
        matchLabels={"org": "ml", "env": "prod"},
        matchExpressions=[{"key": "tier", "operator": "Exists"}, {"key": "frozen", "operator": "DoesNotExist"}],
    )
    assert selector_matches(selector, {"org": "ml", "env": "prod", "tier": "a"}) is True
    assert selector_matches(selector, {"org": "ml", "env": "dev", "tier": "a"}) is False
    assert selector_matches(selector, {"org": "ml", "tier": "a"}) is False
    assert selector_matches(selector, {"org": "ml", "env": "prod"}) is False
    assert selector_matches(selector, {"org": "ml", "env": "prod", "tier": "a", "frozen": "1"}) is False
    assert selector_matches(_selector(), {}) is True


def _three_teams() -> TeamIndex:
    platform = platform_with({})
    ml = platform["teams"][0]
    by_label = copy.deepcopy(ml) | {
        "name": "vision",
        "namespaces": [],
        "namespaceSelector": {"matchLabels": {"org": "vision"}},
    }
    also = copy.deepcopy(ml) | {
        "name": "audio",
        "namespaces": ["audio"],
        "namespaceSelector": {"matchExpressions": [{"key": "shared", "operator": "Exists"}]},
    }
    platform["teams"] = [ml, by_label, also]
    return teams_from(platform)


def test_resolution_reasons_and_teams() -> None:
    index = _three_teams()
    assert index.needs_namespace_labels is True

    cases = [
        ("", None, None, "cluster-scoped object", False),
        ("kube-system", {"org": "vision"}, None, "namespace 'kube-system' is excluded", False),
        ("ml", None, "ml", "namespace 'ml' is listed by team 'ml'", False),
        ("ml", {"org": "vision"}, "ml", "namespace 'ml' is listed by team 'ml'", False),
        ("cv", None, None, "labels of namespace 'cv' are unknown", False),
        ("cv", {"org": "vision"}, "vision", "namespace 'cv' matches team 'vision''s selector", False),
        ("cv", {"org": "other"}, None, "namespace 'cv' belongs to no team", False),
        ("cv", {"org": "vision", "shared": ""}, None, "namespace 'cv' is selected by teams 'vision', 'audio'", True),
    ]
    for namespace, labels, team, reason, conflict in cases:
        found = index.resolve(namespace, labels)
        assert (found.team.team if found.team else None, found.reason, found.conflict) == (team, reason, conflict)


def test_without_label_selected_teams_unknown_labels_mean_no_team() -> None:
    index = teams_from(platform_with({}))
    assert index.needs_namespace_labels is False
    found = index.resolve("cv", None)
    assert (found.team, found.reason, found.conflict) == (None, "namespace 'cv' belongs to no team", False)


# -- JSON Patch ------------------------------------------------------------------------------------------


def test_pointer_escapes_tilde_then_slash_and_numbers_indexes() -> None:
    assert pointer(("metadata", "labels", "kueue.x-k8s.io/queue-name")) == "/metadata/labels/kueue.x-k8s.io~1queue-name"
    assert pointer(("spec", "replicaSpecs", "W~1", "template", 0)) == "/spec/replicaSpecs/W~01/template/0"
    assert pointer(()) == ""


def test_json_patch_keeps_plan_order_op_and_value() -> None:
    changes = [
        Change("add", ("metadata", "labels"), {}, "queue", "labels map"),
        Change("add", ("metadata", "labels", "a/b"), "q", "queue", "queue label"),
        Change("replace", ("spec", "suspend"), True, "suspend", "queue label added"),
    ]
    assert to_json_patch(changes) == [
        {"op": "add", "path": "/metadata/labels", "value": {}},
        {"op": "add", "path": "/metadata/labels/a~1b", "value": "q"},
        {"op": "replace", "path": "/spec/suspend", "value": True},
    ]


def test_apply_patch_returns_a_patched_copy() -> None:
    original = {"metadata": {"name": "x"}, "spec": {"suspend": False}}
    patched = apply_patch(original, [{"op": "add", "path": "/metadata/labels", "value": {"a/b": "q"}}])
    assert patched == {"metadata": {"name": "x", "labels": {"a/b": "q"}}, "spec": {"suspend": False}}
    assert original == {"metadata": {"name": "x"}, "spec": {"suspend": False}}


# -- one pod's requests as Kueue counts them -------------------------------------------------------------


def _container(
    requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "resources": resources, **extra}


def test_limits_stand_in_for_missing_requests_per_resource() -> None:
    spec = {"containers": [_container({"cpu": "1"}, {"cpu": "4", "nvidia.com/gpu": "2", "memory": "bad"})]}
    assert pod_requests(spec) == {"cpu": Decimal(1), "nvidia.com/gpu": Decimal(2)}


def test_app_containers_add_up() -> None:
    spec = {"containers": [_container({"cpu": "1", "memory": "1Ki"}), _container({"cpu": "500m"}), "junk"]}
    assert pod_requests(spec) == {"cpu": Decimal("1.5"), "memory": Decimal(1024)}


def test_init_containers_sidecars_and_the_pod_peak() -> None:
    spec = {
        "containers": [_container({"cpu": "2", "memory": "100"})],
        "initContainers": [
            _container({"cpu": "1"}, restartPolicy="Always"),  # sidecar: runs beside the app
            _container({"cpu": "5", "memory": "50"}),  # needs 5 + the 1 of the sidecar started before it
            _container({"memory": "300"}),
            _container({"cpu": "1", "memory": "10"}, restartPolicy="Always"),
        ],
    }
    # app + sidecars: cpu 2+1+1 = 4, memory 100+10 = 110; init peak: cpu 6, memory 300+0.
    assert pod_requests(spec) == {"cpu": Decimal(6), "memory": Decimal(300)}


def test_a_sidecar_after_a_large_init_container_does_not_raise_its_peak() -> None:
    spec = {
        "containers": [_container({"cpu": "1"})],
        "initContainers": [_container({"cpu": "3"}), _container({"cpu": "1"}, restartPolicy="Always")],
    }
    assert pod_requests(spec) == {"cpu": Decimal(3)}
    spec["initContainers"] = [_container({"cpu": "1"}, restartPolicy="Always"), _container({"cpu": "3"})]
    assert pod_requests(spec) == {"cpu": Decimal(4)}


def test_init_containers_at_or_below_the_app_sum_change_nothing() -> None:
    spec = {"containers": [_container({"cpu": "4"})], "initContainers": [_container({"cpu": "4", "memory": "0"})]}
    assert pod_requests(spec) == {"cpu": Decimal(4)}


def test_pod_level_requests_replace_cpu_memory_hugepages_only_then_overhead_adds() -> None:
    spec = {
        "containers": [_container({"cpu": "1", "memory": "1", "nvidia.com/gpu": "1", "hugepages-2Mi": "2"})],
        "resources": {
            "requests": {"cpu": "8", "hugepages-2Mi": "4", "nvidia.com/gpu": "3"},
            "limits": {"memory": "64"},
        },
        "overhead": {"cpu": "250m", "pods": "1", "memory": "x"},
    }
    assert pod_requests(spec) == {
        "cpu": Decimal("8.25"),
        "memory": Decimal(64),
        "nvidia.com/gpu": Decimal(1),
        "hugepages-2Mi": Decimal(4),
        "pods": Decimal(1),
    }


def test_fields_of_the_wrong_type_count_as_absent() -> None:
    spec = {"containers": {"c": 1}, "initContainers": [_container({"cpu": "1"}), 7], "resources": [], "overhead": "x"}
    assert pod_requests(spec) == {"cpu": Decimal(1)}
    assert pod_requests({"containers": [{"resources": {"requests": ["cpu"], "limits": {"cpu": "2"}}}]}) == {
        "cpu": Decimal(2)
    }


# -- nodes: taints, selectors, affinity, readiness, sizing -----------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        ({"key": "gpu", "operator": "Exists"}, {"key": "gpu", "value": "x", "effect": "NoSchedule"}, True),
        ({"key": "gpu", "value": "x"}, {"key": "gpu", "value": "x", "effect": "NoSchedule"}, True),
        ({"key": "gpu", "value": "y"}, {"key": "gpu", "value": "x", "effect": "NoSchedule"}, False),
        ({"key": "gpu", "operator": "Equal"}, {"key": "gpu", "effect": "NoExecute"}, True),
        ({"key": "gpu", "operator": "Exists"}, {"key": "other", "effect": "NoSchedule"}, False),
        ({"operator": "Exists"}, {"key": "anything", "value": "v", "effect": "NoExecute"}, True),
        ({"value": "v"}, {"key": "anything", "value": "v", "effect": "NoExecute"}, False),
        ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}, {"key": "gpu", "effect": "NoSchedule"}, True),
        ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}, {"key": "gpu", "effect": "NoExecute"}, False),
        ({"key": "gpu", "operator": "Exists", "effect": ""}, {"key": "gpu", "effect": "NoExecute"}, True),
    ],
)
def test_tolerates(toleration: dict[str, Any], taint: dict[str, Any], tolerated: bool) -> None:
    assert tolerates([toleration], taint) is tolerated
    assert tolerates([{"key": "unrelated", "operator": "Exists"}, toleration], taint) is tolerated


def test_no_toleration_tolerates_nothing() -> None:
    assert tolerates([], {"key": "gpu", "effect": "NoSchedule"}) is False


@pytest.mark.parametrize(
    "miss",
    [
        {"key": "gpu", "operator": "Exists", "effect": "NoExecute"},  # another effect
        {"key": "other", "operator": "Exists"},  # another key
        {"value": "v"},  # no key: only Exists tolerates every key
        {"key": "gpu", "value": "other"},  # another value
    ],
)
def test_a_toleration_that_misses_does_not_hide_a_later_one_that_tolerates(miss: dict[str, Any]) -> None:
    taint = {"key": "gpu", "value": "v", "effect": "NoSchedule"}
    assert tolerates([miss], taint) is False
    assert tolerates([miss, {"key": "gpu", "operator": "Equal", "value": "v"}], taint) is True


@pytest.mark.parametrize(
    ("requirement", "value", "matches"),
    [
        ({"operator": "In", "values": ["a", "b"]}, "b", True),
        ({"operator": "In", "values": ["a", "b"]}, "c", False),
        ({"operator": "In", "values": ["a"]}, None, False),
        ({"operator": "NotIn", "values": ["a"]}, "b", True),
        ({"operator": "NotIn", "values": ["a"]}, "a", False),
        ({"operator": "NotIn", "values": ["a"]}, None, True),
        ({"operator": "Exists"}, "", True),
        ({"operator": "Exists"}, None, False),
        ({"operator": "DoesNotExist"}, None, True),
        ({"operator": "DoesNotExist"}, "a", False),
        ({"operator": "Gt", "values": ["4"]}, "5", True),
        ({"operator": "Gt", "values": ["4"]}, "4", False),
        ({"operator": "Lt", "values": ["4"]}, "3", True),
        ({"operator": "Lt", "values": ["4"]}, "4", False),
        ({"operator": "Gt", "values": ["4"]}, None, False),
        ({"operator": "Gt", "values": ["4", "5"]}, "9", False),
        ({"operator": "Gt", "values": ["x"]}, "9", False),
        ({"operator": "Lt", "values": ["4"]}, "three", False),
        ({"operator": "Between", "values": ["4"]}, "3", False),
        ({"operator": "In", "values": [4, "a"]}, "4", False),
    ],
)
def test_node_selector_requirement(requirement: dict[str, Any], value: str | None, matches: bool) -> None:
    term = {"matchExpressions": [{"key": "k", **requirement}]}
    labels = {} if value is None else {"k": value}
    assert term_matches(term, "node-a", labels) is matches


def test_node_selector_terms_need_every_expression_and_field() -> None:
    labels = {"zone": "a", "gpu": "h100"}
    both = {"key": "zone", "operator": "In", "values": ["a"]}
    assert term_matches({"matchExpressions": [both, {"key": "gpu", "operator": "Exists"}]}, "n1", labels) is True
    assert term_matches({"matchExpressions": [both, {"key": "gpu", "operator": "DoesNotExist"}]}, "n1", labels) is False
    by_name = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    assert term_matches({"matchFields": [by_name]}, "n1", labels) is True
    assert term_matches({"matchFields": [by_name]}, "n2", labels) is False
    assert term_matches({"matchFields": [by_name | {"key": "metadata.uid"}]}, "n1", labels) is False
    assert term_matches({"matchExpressions": [both], "matchFields": [by_name]}, "n2", labels) is False
    assert term_matches({}, "n1", labels) is False
    assert term_matches({"matchExpressions": []}, "n1", labels) is False


def _node(name: str = "n1", ready: str = "True", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"zone": "a", "rack": name}},
        "spec": spec,
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "pods": "4", "memory": "lots"},
            "conditions": [{"type": "MemoryPressure", "status": "True"}, {"type": "Ready", "status": ready}],
        },
    }


def test_node_from_object() -> None:
    taints = [
        {"key": "a", "effect": "NoSchedule"},
        {"key": "b", "effect": "PreferNoSchedule"},
        {"key": "c", "effect": "NoExecute"},
    ]
    node = Node.from_object(_node(taints=taints))
    assert node.name == "n1"
    assert node.labels == {"zone": "a", "rack": "n1"}
    assert node.allocatable == {
        "nvidia.com/gpu": Decimal(8),
        "cpu": Decimal(96),
        "pods": Decimal(4),
        "memory": Decimal(0),
    }
    assert node.schedulable is True
    assert node.taints == ({"key": "a", "effect": "NoSchedule"}, {"key": "c", "effect": "NoExecute"})
    assert Node.from_object(_node(ready="False")).schedulable is False
    assert Node.from_object(_node(ready="Unknown")).schedulable is False
    assert Node.from_object(_node(unschedulable=True)).schedulable is False
    assert Node.from_object(_node(unschedulable=False)).schedulable is True
    no_conditions = _node()
    del no_conditions["status"]["conditions"]
    assert Node.from_object(no_conditions).schedulable is False
    assert Node.from_object({}).name == ""


def test_node_admits_by_taints_selector_and_affinity() -> None:
    node = Node.from_object(_node(taints=[{"key": "gpu", "effect": "NoExecute"}]))
    gpu = {"key": "gpu", "operator": "Exists"}
    assert node.admits(PodConstraints(requests={})) is False
    assert node.admits(PodConstraints(requests={}, tolerations=[gpu])) is True
    assert node.admits(PodConstraints(requests={}), flavor_tolerations=[gpu]) is True
    assert node.admits(PodConstraints(requests={}, tolerations=[gpu], node_selector={"zone": "a"})) is True
    assert node.admits(PodConstraints(requests={}, tolerations=[gpu], node_selector={"zone": "b"})) is False
    in_zone = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    elsewhere = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
    assert node.admits(PodConstraints(requests={}, tolerations=[gpu], affinity_terms=[elsewhere, in_zone])) is True
    assert node.admits(PodConstraints(requests={}, tolerations=[gpu], affinity_terms=[elsewhere])) is False
    assert node.admits(PodConstraints(requests={}, tolerations=[gpu], affinity_terms=[])) is False
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    assert node.admits(PodConstraints(requests={}, tolerations=[gpu], affinity_terms=[by_name])) is True


@pytest.mark.parametrize(
    ("allocatable", "requests", "pods"),
    [
        ({"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "2"}, 4),
        ({"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "3"}, 2),
        ({"nvidia.com/gpu": "8", "pods": "3"}, {"nvidia.com/gpu": "1"}, 3),
        ({"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "1e-30"}, 110),
        ({"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "0", "cpu": "0"}, 110),
        ({"nvidia.com/gpu": "8", "pods": "4"}, {"nvidia.com/gpu": "2"}, 4),
        ({"nvidia.com/gpu": "8"}, {"cpu": "1"}, 0),
        ({"cpu": "1", "pods": "-3"}, {}, 0),
        ({"nvidia.com/gpu": "16", "cpu": "10"}, {"nvidia.com/gpu": "2", "cpu": "4"}, 2),
        ({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1"}, 2),
        ({"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "0", "cpu": "1"}, 0),  # a zero request skips only itself
        ({"cpu": "-1"}, {"cpu": "0"}, 110),
        (
            {"cpu": "1000", "nvidia.com/gpu": "8"},
            {"cpu": "1", "nvidia.com/gpu": "2"},
            4,
        ),  # plenty of one, not the other
    ],
)
def test_pods_fitting_on_an_empty_node(allocatable: dict[str, str], requests: dict[str, str], pods: int) -> None:
    node = Node.from_object({"status": {"allocatable": allocatable}})
    assert node.pods_fitting({k: Decimal(v) for k, v in requests.items()}) == pods


def _rack_nodes() -> NodeInventory:
    """Two racks in one block: rack r1 has 3 nodes of 8 GPUs, rack r2 2 nodes; a third rack's node is cordoned."""
    items = []
    for rack, count in (("r1", 3), ("r2", 2), ("r3", 1)):
        for i in range(count):
            items.append(
                {
                    "metadata": {
                        "name": f"{rack}-{i}",
                        "labels": {"pool": "gpu", "block": "b1", "rack": rack, "host": f"{rack}-{i}"},
                    },
                    "spec": {"unschedulable": rack == "r3"},
                    "status": {
                        "allocatable": {"nvidia.com/gpu": "8", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            )
    items.append({"metadata": {"name": "cpu-0", "labels": {"pool": "cpu", "block": "b1", "rack": "r1", "host": "c"}}})
    items.append(
        {
            "metadata": {"name": "nolevel", "labels": {"pool": "gpu", "block": "b1", "host": "nolevel"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    return NodeInventory.from_objects(items)


LEVELS = ["block", "rack", "host"]


def test_select_takes_ready_schedulable_nodes_with_the_flavor_labels_and_every_level() -> None:
    inventory = _rack_nodes()
    assert len(inventory) == 8
    assert [n.name for n in inventory.select({"pool": "gpu"}, LEVELS)] == ["r1-0", "r1-1", "r1-2", "r2-0", "r2-1"]
    assert [n.name for n in inventory.select({"pool": "gpu"}, ["block"])] == [
        "r1-0",
        "r1-1",
        "r1-2",
        "r2-0",
        "r2-1",
        "nolevel",
    ]
    assert inventory.select({"pool": "tpu"}) == []


def test_domains_group_by_the_levels_down_to_depth() -> None:
    inventory = _rack_nodes()
    nodes = inventory.select({"pool": "gpu"}, ["block"])
    by_rack = inventory.domains(LEVELS, 1, nodes)
    assert {key: [n.name for n in members] for key, members in by_rack.items()} == {
        ("b1", "r1"): ["r1-0", "r1-1", "r1-2"],
        ("b1", "r2"): ["r2-0", "r2-1"],
    }
    assert list(inventory.domains(LEVELS, 0, nodes)) == [("b1",)]
    assert len(inventory.domains(LEVELS, 2, nodes)) == 5


def test_largest_domain_per_level_then_the_whole_flavor() -> None:
    inventory = _rack_nodes()
    two_gpus = {"nvidia.com/gpu": Decimal(2)}
    assert inventory.largest_domain(LEVELS, {"pool": "gpu"}, two_gpus) == [20, 12, 4, 20]
    shape = PodConstraints(requests=two_gpus, node_selector={"rack": "r2"})
    assert inventory.largest_domain(LEVELS, {"pool": "gpu"}, shape) == [8, 8, 4, 8]
    other = PodConstraints(requests={"nvidia.com/gpu": Decimal(8)}, node_selector={"host": "r2-1"})
    # Only r2-1 admits both shapes; the first shape's requests size it unless others are given.
    assert inventory.largest_domain(LEVELS, {"pool": "gpu"}, [shape, other]) == [4, 4, 4, 4]
    eight = {"nvidia.com/gpu": Decimal(8)}
    assert inventory.largest_domain(LEVELS, {"pool": "gpu"}, [shape, other], requests=eight) == [1, 1, 1, 1]
    assert inventory.largest_domain(LEVELS, {"pool": "none"}, two_gpus) == [0, 0, 0, 0]
    assert inventory.largest_domain(LEVELS, {"pool": "gpu"}, []) == [110 * 5, 110 * 3, 110, 110 * 5]


def test_largest_domain_counts_tainted_nodes_only_where_tolerated() -> None:
    items = [
        {
            "metadata": {"name": f"h{i}", "labels": {"pool": "gpu", "block": "b1", "rack": "r1", "host": f"h{i}"}},
            "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}] if i else []},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }
        for i in range(3)
    ]
    inventory = NodeInventory.from_objects(items)
    eight = {"nvidia.com/gpu": Decimal(8)}
    assert inventory.largest_domain(LEVELS, {"pool": "gpu"}, eight) == [1, 1, 1, 1]
    tolerated = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert inventory.largest_domain(LEVELS, {"pool": "gpu"}, eight, flavor_tolerations=tolerated) == [3, 3, 1, 3]


def test_first_fit_places_largest_shapes_first_and_counts_the_rest() -> None:
    nodes = [
        Node("a", {}, {"nvidia.com/gpu": Decimal(8), "pods": Decimal(110)}),
        Node("b", {}, {"nvidia.com/gpu": Decimal(8), "pods": Decimal(2)}),
    ]
    big = PodConstraints(requests={"nvidia.com/gpu": Decimal(6)})
    small = PodConstraints(requests={"nvidia.com/gpu": Decimal(2)})
    assert first_fit(nodes, [(small, 2), (big, 2)]) == 0
    assert first_fit(nodes, [(small, 3), (big, 2)]) == 1
    assert first_fit(nodes, [(PodConstraints(requests={"nvidia.com/gpu": Decimal(0)}), 113)]) == 1
    assert first_fit(nodes, [(PodConstraints(requests={"nvidia.com/gpu": Decimal(9)}), 2)]) == 2
    tainted = [Node("t", {}, {"nvidia.com/gpu": Decimal(8)}, taints=({"key": "x", "effect": "NoSchedule"},))]
    assert first_fit(tainted, [(small, 1)]) == 1
    assert first_fit(tainted, [(small, 1)], flavor_tolerations=[{"key": "x", "operator": "Exists"}]) == 0
    assert first_fit([], [(small, 0)]) == 0


def test_first_fit_needs_every_requested_resource_and_counts_default_pod_slots() -> None:
    no_gpu = [Node("cpu-only", {}, {"cpu": Decimal(64)})]
    assert first_fit(no_gpu, [(PodConstraints(requests={"nvidia.com/gpu": Decimal(1)}), 1)]) == 1
    assert first_fit(no_gpu, [(PodConstraints(requests={"nvidia.com/gpu": Decimal("0.5")}), 1)]) == 1
    assert first_fit(no_gpu, [(PodConstraints(requests={"cpu": Decimal(0)}), 111)]) == 1  # 110 pods by default


def test_first_fit_orders_shapes_by_their_largest_request() -> None:
    """Shape (6 GPUs, 1 CPU) goes before (2 GPUs, 4 CPUs) whatever the order given: its largest request is larger."""
    nodes = [
        Node("x", {}, {"nvidia.com/gpu": Decimal(6), "cpu": Decimal(4)}),
        Node("y", {}, {"nvidia.com/gpu": Decimal(2), "cpu": Decimal(4)}),
    ]
    wide = PodConstraints(requests={"nvidia.com/gpu": Decimal(6), "cpu": Decimal(1)})
    tall = PodConstraints(requests={"nvidia.com/gpu": Decimal(2), "cpu": Decimal(4)})
    assert first_fit(nodes, [(tall, 1), (wide, 1)]) == 0
    assert first_fit(nodes, [(wide, 1), (tall, 1)]) == 0


# -- the node affinity rule ------------------------------------------------------------------------------

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
TEAM_EXPRESSION = {"key": INSTANCE_TYPE, "operator": "In", "values": ["p5.48xlarge"]}
TERMS = ("spec", "template", "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
TERMS_PATH = (*TERMS, "nodeSelectorTerms")


def _review(obj: dict[str, Any], policy: dict[str, Any], namespace: str = "ml", **kw: Any) -> ReviewOutcome:
    inventory = kw.pop("inventory", None)
    return review(review_body(obj, namespace, **kw), teams_from(platform_with(policy)), inventory=inventory)


def _job_with_affinity(affinity: Any) -> dict[str, Any]:
    obj = job()
    obj["spec"]["template"]["spec"]["affinity"] = affinity
    return obj


def _affinity_changes(terms: Any) -> tuple[list[tuple[Any, ...]], list[str], list[str]]:
    """The node affinity rule's changes (op, path, value, rule, reason), warnings and denials for these terms."""
    obj = _job_with_affinity({"nodeAffinity": {TERMS[-1]: {"nodeSelectorTerms": terms}}})
    plan = _review(obj, {"queue": {}, "nodeAffinity": [TEAM_EXPRESSION]}).plan
    changes = [(c.op, c.path, c.value, c.rule, c.reason) for c in plan.changes if c.rule == "nodeAffinity"]
    return changes, plan.warnings, plan.denials


REASON = "podset 'main': team node affinity"


def test_node_affinity_changes_carry_their_rule_and_reason() -> None:
    plan = _review(job(), {"queue": {}, "nodeAffinity": [TEAM_EXPRESSION]}).plan
    assert [(c.op, c.path, c.rule, c.reason) for c in plan.changes] == [
        ("add", ("metadata", "labels"), "queue", "the LocalQueue of team 'ml'"),
        ("add", ("spec", "suspend"), "suspend", "queue label added: Kueue starts the workload once admitted"),
        ("add", ("spec", "template", "spec", "affinity"), "nodeAffinity", REASON),
    ]
    assert _affinity_changes([]) == (
        [("add", (*TERMS_PATH, 0), {"matchExpressions": [TEAM_EXPRESSION]}, "nodeAffinity", REASON)],
        [],
        [],
    )


def test_each_podsets_new_term_is_its_own_copy_of_the_team_expressions() -> None:
    teams = teams_from(
        platform_with({"queue": {}, "nodeAffinity": [TEAM_EXPRESSION, {"key": "a", "operator": "Exists"}]})
    )
    team = teams.resolve("ml", None).team
    assert team is not None
    obj = job()
    obj["spec"]["template"]["spec"]["affinity"] = {}
    twins = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "j"}}
    twins["spec"] = {
        "replicatedJobs": [{"name": n, "template": {"spec": {"template": obj["spec"]["template"]}}} for n in "ab"]
    }
    changes = [c for c in review(review_body(twins, "ml"), teams).plan.changes if c.rule == "nodeAffinity"]
    team_expressions = prepared(team).affinity
    expected = [{"matchExpressions": [TEAM_EXPRESSION, {"key": "a", "operator": "Exists"}]}]
    assert [c.path[-1] for c in changes] == ["nodeAffinity", "nodeAffinity"]  # a whole map added
    terms = [c.value[TERMS[-1]]["nodeSelectorTerms"] for c in changes]
    assert terms == [expected, expected]
    first, second = (t[0]["matchExpressions"] for t in terms)
    objects = [id(x) for x in (*first, *second, first[0]["values"], second[0]["values"], *team_expressions)]
    assert len(set(objects)) == len(objects), "a new term shares a map or list with another or with the team's"
    assert team_expressions[0]["values"] is not first[0]["values"]


def test_a_term_of_fields_only_gets_the_team_expressions() -> None:
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    assert _affinity_changes([by_name]) == (
        [("add", (*TERMS_PATH, 0, "matchExpressions"), [TEAM_EXPRESSION], "nodeAffinity", REASON)],
        [],
        [],
    )


def test_team_expressions_are_anded_into_each_term_unless_present() -> None:
    changes, warnings, denials = _affinity_changes(
        [
            {"matchExpressions": [{"key": INSTANCE_TYPE, "operator": "In", "values": ["p4d", "p5.48xlarge"]}]},
            {"matchExpressions": [{"key": INSTANCE_TYPE, "operator": "In", "values": ["p5.48xlarge"]}]},
            {"matchExpressions": [], "matchFields": []},  # matches no node: left so
        ]
    )
    assert changes == [("add", (*TERMS_PATH, 0, "matchExpressions", 1), TEAM_EXPRESSION, "nodeAffinity", REASON)]
    assert (warnings, denials) == ([], [])


def test_a_term_whose_own_in_shares_no_value_with_the_team_is_warned_once() -> None:
    # (an item that is no object, or a value that is no string, is a malformed object:
    # tests/test_malformed_affinity.py)
    own = [
        {"key": "zone", "operator": "In", "values": ["a"]},
        {"key": INSTANCE_TYPE, "operator": "NotIn", "values": ["z"]},
        {"key": INSTANCE_TYPE, "operator": "In"},
        {"key": INSTANCE_TYPE, "operator": "In", "values": ["p4d", "p4de"]},
    ]
    changes, warnings, denials = _affinity_changes([{"matchExpressions": own}])
    assert changes == [("add", (*TERMS_PATH, 0, "matchExpressions", 4), TEAM_EXPRESSION, "nodeAffinity", REASON)]
    assert warnings == [
        "nodeAffinity: podset 'main': nodeSelectorTerms[0] asks for node.kubernetes.io/instance-type in "
        '["p4d", "p4de"], but team nodes have ["p5.48xlarge"]: pods of this term can match no node'
    ]
    assert denials == []


def test_a_team_expression_that_is_not_in_is_never_warned() -> None:
    obj = _job_with_affinity(
        {
            "nodeAffinity": {
                TERMS[-1]: {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "z", "operator": "In", "values": ["a"]}]}]
                }
            }
        }
    )
    team = {"key": "z", "operator": "NotIn", "values": ["a"]}
    plan = _review(obj, {"queue": {}, "nodeAffinity": [team]}).plan
    assert plan.warnings == []
    assert [c.path for c in plan.changes if c.rule == "nodeAffinity"] == [(*TERMS_PATH, 0, "matchExpressions", 1)]


@pytest.mark.parametrize(
    ("affinity", "denial"),
    [
        ({"nodeAffinity": "oops"}, 'spec.template.spec.affinity.nodeAffinity must be an object, got string "oops"'),
        (
            {"nodeAffinity": {TERMS[-1]: {"nodeSelectorTerms": ["x"]}}},
            "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            '.nodeSelectorTerms[0] must be an object, got string "x"',
        ),
        (
            {"nodeAffinity": {TERMS[-1]: {"nodeSelectorTerms": [{"matchExpressions": {"a": 1}}]}}},
            "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions must be an array, got object",
        ),
    ],
)
def test_wrongly_typed_affinity_fields_are_refused_with_their_path(affinity: Any, denial: str) -> None:
    plan = _review(_job_with_affinity(affinity), {"queue": {}, "nodeAffinity": [TEAM_EXPRESSION]}).plan
    assert plan.denials == [f"malformed object: {denial}"]
    assert plan.changes == []


def test_normalize_keeps_key_operator_and_values_and_a_wrong_type_as_is() -> None:
    assert normalize({"key": "k", "operator": "In", "values": ["a"], "extra": 1}) == {
        "key": "k",
        "operator": "In",
        "values": ["a"],
    }
    assert normalize({"key": "k", "operator": "Exists", "values": []}) == {"key": "k", "operator": "Exists"}
    assert normalize({"key": "k", "operator": "In", "values": "a"}) == {"key": "k", "operator": "In", "values": "a"}
    assert normalize({"key": "k", "operator": "In", "values": {"a": 1}}) == {
        "key": "k",
        "operator": "In",
        "values": {"a": 1},
    }


# -- the queue rule and the planner's reports ------------------------------------------------------------

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def _rayjob(labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "r"}
    if labels is not None:
        metadata["labels"] = labels
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": metadata,
        "spec": {"entrypoint": "python x.py", "rayClusterSpec": {"headGroupSpec": {"template": {"spec": {}}}}},
    }


def test_an_empty_queue_label_is_warned_and_filled_in() -> None:
    plan = _review(job(metadata={"name": "t", "labels": {QUEUE_LABEL: ""}}), {"queue": {}}).plan
    assert plan.warnings == [
        "queue: an empty kueue.x-k8s.io/queue-name (metadata.labels) means no queue to Kueue; set to 'ml-queue'"
    ]
    assert plan.warned_rules == ["queue"]
    assert [(c.op, c.path, c.value, c.rule) for c in plan.changes] == [
        ("replace", ("metadata", "labels", QUEUE_LABEL), "ml-queue", "queue"),
        ("add", ("spec", "suspend"), True, "suspend"),
    ]


def test_what_kueue_requires_is_added_when_the_user_named_the_queue_too() -> None:
    plan = _review(_rayjob({QUEUE_LABEL: "ml-queue"}), {"queue": {}}).plan
    assert plan.denials == plan.warnings == []
    assert [(c.op, c.path, c.value, c.rule, c.reason) for c in plan.changes] == [
        (
            "add",
            ("spec", "shutdownAfterJobFinishes"),
            True,
            "queue",
            "Kueue requires it of a RayJob: a kueue managed job should delete the cluster after finishing",
        )
    ]


def test_a_queue_of_another_team_is_named_in_the_denial() -> None:
    plan = _review(job(metadata={"name": "t", "labels": {QUEUE_LABEL: "theirs"}}), {"queue": {}}).plan
    assert plan.changes == []
    assert plan.denied_rules == ["queue"]
    assert plan.denials == [
        "queue: LocalQueue 'theirs' (metadata.labels.kueue.x-k8s.io/queue-name) is not allowed for team 'ml'; "
        "allowed: ml-queue"
        "; unless a LocalQueue of that name exists in this namespace, Kueue never admits the workload "
        "(it stays suspended); use the team's LocalQueue 'ml-queue'"
    ]


TRAINJOB = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "t"},
    "spec": {"runtimeRef": {"name": "torch"}},
}
OPAQUE = (
    "not applied: TrainJob's pods come from its runtime: ClusterTrainingRuntime 'torch' is not known to the "
    "governor (Kueue and Trainer refuse a TrainJob whose runtime is missing)"
)


def test_a_trainjob_without_its_runtime_says_which_rules_it_cannot_apply() -> None:
    plain = _review(copy.deepcopy(TRAINJOB), {"queue": {}}).plan
    assert (plain.warnings, plain.denials) == ([], [])
    assert [c.path for c in plain.changes] == [("metadata", "labels"), ("spec", "suspend")]
    policy = {
        "queue": {},
        "podPriority": {"default": "low", "allowed": ["low"], "enforcement": "enforce"},
        "topology": {"mode": "required", "level": "topology.k8s.aws/network-node-layer-3", "enforcement": "default"},
        "nodeAffinity": [{"key": "a", "operator": "Exists"}],
    }
    full = _review(copy.deepcopy(TRAINJOB), policy).plan
    assert full.denials == [f"podPriority: {OPAQUE}"]
    assert full.warnings == [f"topology: {OPAQUE}", f"nodeAffinity: {OPAQUE}"]


def test_a_second_podset_gets_the_team_labels_with_their_rule_and_reason() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": []}}},
    }
    plan = _review(deployment, {"queue": {}, "kueuePriority": {"default": "low", "allowed": ["low"]}}).plan
    one_by_one = "podset 'main': Kueue admits these pods one by one"
    template_labels = ("spec", "template", "metadata", "labels")
    assert [(c.path, c.value, c.rule, c.reason) for c in plan.changes] == [
        (("metadata", "labels"), {QUEUE_LABEL: "ml-queue"}, "queue", "the LocalQueue of team 'ml'"),
        (("metadata", "labels", PRIORITY_LABEL), "low", "kueuePriority", "the default of team 'ml'"),
        ((*template_labels, QUEUE_LABEL), "ml-queue", "queue", one_by_one),
        ((*template_labels, PRIORITY_LABEL), "low", "kueuePriority", one_by_one),
    ]
    theirs = copy.deepcopy(deployment)
    theirs["spec"]["template"]["metadata"]["labels"][QUEUE_LABEL] = "theirs"
    refused = _review(theirs, {"queue": {}}).plan
    assert refused.denials == [
        "queue: LocalQueue 'theirs' (spec.template.metadata.labels.kueue.x-k8s.io/queue-name) is not allowed for "
        "team 'ml'; allowed: ml-queue"
        "; unless a LocalQueue of that name exists in this namespace, Kueue never admits the workload "
        "(it stays suspended); use the team's LocalQueue 'ml-queue'"
    ]
    assert refused.denied_rules == ["queue"]
    # No priority anywhere and no default to give: nothing to copy and nothing to check.
    bare = _review(copy.deepcopy(deployment), {"queue": {}, "kueuePriority": {"allowed": ["low"]}}).plan
    assert (bare.denials, bare.warnings) == ([], [])
    assert [c.path for c in bare.changes] == [("metadata", "labels"), (*template_labels, QUEUE_LABEL)]


# -- what the planner skips, and why ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "operation", "extra", "skipped"),
    [
        (job(), "CREATE", {"subResource": "status"}, "subresource 'status'"),
        (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
            "CREATE",
            {},
            "kind v1 ConfigMap is not a workload kind",
        ),
        (  # its CREATE is refused (tests/test_isolation.py); an UPDATE of one made before passes
            {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "m"}},
            "UPDATE",
            {"oldObject": {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "m"}}},
            "kubeflow.org/v1 MPIJob is not a version Kueue manages (kubeflow.org/v2beta1)",
        ),
        (job(), "DELETE", {"oldObject": job()}, "operation DELETE is not mutated"),
        (job(), "CONNECT", {}, "operation CONNECT is not mutated"),
    ],
)
def test_requests_left_alone_say_why(obj: dict[str, Any], operation: str, extra: dict[str, Any], skipped: str) -> None:
    body = review_body(obj, "ml", operation=operation)
    body["request"].update(extra)
    outcome = review(body, teams_from(platform_with({"queue": {}})))
    assert outcome.plan.skipped == skipped
    assert outcome.patch == []


def test_metadata_that_is_not_a_map_is_refused_and_null_metadata_is_filled_in() -> None:
    row = find_kind("batch/v1", "Job")
    assert row is not None
    team = teams_from(platform_with({"queue": {}})).policies.teams[0]
    refused = plan_object({"apiVersion": "batch/v1", "kind": "Job", "metadata": "m", "spec": {}}, row, team)
    assert refused.denials == ['malformed object: metadata must be an object, got string "m"']
    assert refused.invalid is True
    filled = plan_object({"apiVersion": "batch/v1", "kind": "Job", "metadata": None, "spec": {}}, row, team)
    assert filled.denials == []
    assert [(c.path, c.value) for c in filled.changes] == [
        (("metadata",), {"labels": {QUEUE_LABEL: "ml-queue"}}),
        (("spec", "suspend"), True),
    ]
    assert managed_child({"metadata": None}) == ""


def test_an_update_adding_a_podset_is_sized_with_the_node_inventory() -> None:
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "r", "labels": {QUEUE_LABEL: "ml-queue"}},
        "spec": {"headGroupSpec": {"template": {"spec": {}}}, "workerGroupSpecs": []},
    }
    grown = copy.deepcopy(cluster)
    workers = {"containers": [{"name": "w", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}
    grown["spec"]["workerGroupSpecs"] = [{"groupName": "b", "replicas": 4, "template": {"spec": workers}}]
    policy = {"queue": {}, "topology": {"mode": "auto"}}
    plan = _review(grown, policy, operation="UPDATE", old=cluster, inventory=aws_nodes()).plan
    # Only the added podset changes: its head is never grouped with it on UPDATE (half a group).
    sliced = (
        "podset 'b' added by this update: podset 'b': auto: 4 pods in 2 slices of 2, each in one "
        "topology.k8s.aws/network-node-layer-3 domain (the largest topology.k8s.aws/network-node-layer-2 "
        "domain holds 2 such slices)"
    )
    annotations = ("spec", "workerGroupSpecs", 0, "template", "metadata", "annotations")
    assert [(c.path, c.value, c.reason) for c in plan.changes] == [
        (
            ("spec", "workerGroupSpecs", 0, "template", "metadata"),
            {"annotations": {"kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-2"}},
            "podset 'b' added by this update: podset 'b': auto: 4 pods fit in one "
            "topology.k8s.aws/network-node-layer-2 domain (the largest holds 4)",
        ),
        (
            (*annotations, "kueue.x-k8s.io/podset-slice-required-topology"),
            "topology.k8s.aws/network-node-layer-3",
            sliced,
        ),
        ((*annotations, "kueue.x-k8s.io/podset-slice-size"), "2", sliced),
    ]


def test_podsets_that_do_not_fit_together_are_warned_after_an_earlier_warning_too() -> None:
    def template(gpus: int) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}

    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p", "labels": {QUEUE_LABEL: ""}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 4, "template": template(8)},
                "Worker": {"replicas": 10, "template": template(3)},
            }
        },
    }
    plan = _review(pytorch, {"queue": {}, "topology": {"mode": "auto"}}, inventory=aws_nodes()).plan
    assert plan.warned_rules == ["queue", "topology"]
    assert plan.warnings[1] == (
        "topology: the workload may never be admitted: its 14 pods ('master' 4 × {nvidia.com/gpu: 8}, "
        "'worker' 10 × {nvidia.com/gpu: 3}) do not fit the team's 8 nodes together on an empty cluster (2 left over)"
    )


# -- more of the node affinity rule, the quantities and first-fit ----------------------------------------


def test_an_empty_term_is_skipped_and_the_next_term_still_gets_the_team_expressions() -> None:
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    changes, warnings, denials = _affinity_changes([{}, {"matchExpressions": [zone]}])
    assert changes == [("add", (*TERMS_PATH, 1, "matchExpressions", 1), TEAM_EXPRESSION, "nodeAffinity", REASON)]
    assert (warnings, denials) == ([], [])


def test_several_team_expressions_are_appended_one_after_the_other() -> None:
    second = {"key": "gpu", "operator": "Exists"}
    third = {"key": "zone", "operator": "In", "values": ["a"]}
    obj = _job_with_affinity(
        {
            "nodeAffinity": {
                TERMS[-1]: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "x", "operator": "Exists"}]}]}
            }
        }
    )
    plan = _review(obj, {"queue": {}, "nodeAffinity": [TEAM_EXPRESSION, second, third]}).plan
    expressions = (*TERMS_PATH, 0, "matchExpressions")
    assert [(c.path, c.value) for c in plan.changes if c.rule == "nodeAffinity"] == [
        ((*expressions, 1), TEAM_EXPRESSION),
        ((*expressions, 2), second),
        ((*expressions, 3), third),
    ]
    assert plan.warnings == []


def test_an_unparsable_quantity_leaves_out_only_itself() -> None:
    spec = {"containers": [_container(limits={"memory": "lots", "cpu": "4", "nvidia.com/gpu": "2"})]}
    assert pod_requests(spec) == {"cpu": Decimal(4), "nvidia.com/gpu": Decimal(2)}


def test_first_fit_ignores_zero_requests_even_on_a_node_short_of_that_resource() -> None:
    node = Node.from_object({"status": {"allocatable": {"cpu": "-1", "nvidia.com/gpu": "8"}}})
    shape = PodConstraints(requests={"cpu": Decimal(0), "nvidia.com/gpu": Decimal(8)})
    assert first_fit([node], [(shape, 1)]) == 0


def test_a_term_of_fields_only_does_not_end_the_walk_over_the_terms() -> None:
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    changes, _, _ = _affinity_changes([by_name, {"matchExpressions": [zone]}])
    assert [(path, value) for _, path, value, _, _ in changes] == [
        ((*TERMS_PATH, 0, "matchExpressions"), [TEAM_EXPRESSION]),
        ((*TERMS_PATH, 1, "matchExpressions", 1), TEAM_EXPRESSION),
    ]


# -- the topology rule -----------------------------------------------------------------------------------

SPINE, BLOCK, RACK, HOST = AWS_LEVELS
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
TWO_HOSTS_APART = {"key": HOST, "operator": "In", "values": ["node-1-1-1", "node-2-1-1"]}  # other blocks


def _gpu_job(pods: int, gpus: int = 8, **pod_spec: Any) -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}
    return job(spec={"parallelism": pods, "template": {"spec": {"containers": [container], **pod_spec}}})


def _required_affinity(*terms: Any) -> dict[str, Any]:
    return {"nodeAffinity": {TERMS[-1]: {"nodeSelectorTerms": list(terms)}}}


def _topology(
    obj: dict[str, Any], topology: dict[str, Any], inventory: NodeInventory | None = None
) -> list[tuple[dict[str, str], str]]:
    """The annotations the topology rule adds to the first podset, each with its reason."""
    plan = _review(obj, {"queue": {}, "topology": topology}, inventory=inventory).plan
    out = []
    for change in plan.changes:
        if change.rule == "topology":
            value = change.value["annotations"] if change.path[-1] == "metadata" else {change.path[-1]: change.value}
            out.append((value, change.reason))
    return out


def _auto(
    obj: dict[str, Any], inventory: NodeInventory | None = None, **policy: Any
) -> list[tuple[dict[str, str], str]]:
    plan = _review(obj, {"queue": {}, "topology": {"mode": "auto"}, **policy}, inventory=inventory).plan
    return [(c.value["annotations"], c.reason) for c in plan.changes if c.rule == "topology"]


def test_auto_sizes_with_the_pods_own_node_affinity_and_the_teams() -> None:
    nodes = aws_nodes()
    assert _auto(_gpu_job(2), nodes) == [
        ({REQUIRED: RACK}, f"podset 'main': auto: 2 pods fit in one {RACK} domain (the largest holds 2)")
    ]
    # Only two hosts, in different blocks, can take the pods: the spine is the narrowest level that holds both.
    apart = f"podset 'main': auto: 2 pods fit in one {SPINE} domain (the largest holds 2)"
    assert _auto(_gpu_job(2), nodes, nodeAffinity=[TWO_HOSTS_APART]) == [({REQUIRED: SPINE}, apart)]
    assert _auto(_gpu_job(2, affinity=_required_affinity({"matchExpressions": [TWO_HOSTS_APART]})), nodes) == [
        ({REQUIRED: SPINE}, apart)
    ]
    # The pods' own term (block 1) ANDed with the team's hosts leaves one host.
    block_1 = {"matchExpressions": [{"key": BLOCK, "operator": "In", "values": ["nn-block-1"]}]}
    assert _auto(_gpu_job(1, affinity=_required_affinity(block_1)), nodes, nodeAffinity=[TWO_HOSTS_APART]) == [
        ({REQUIRED: HOST}, f"podset 'main': auto: 1 pod fits in one {HOST} domain (the largest holds 1)")
    ]
    one_left = f"podset 'main': auto: 2 pods exceed the largest {SPINE} domain (1), so preferred"
    assert _auto(_gpu_job(2, affinity=_required_affinity(block_1)), nodes, nodeAffinity=[TWO_HOSTS_APART]) == [
        ({PREFERRED: SPINE}, one_left)
    ]
    # An empty term matches no node and stays so; the other term gets the team's hosts.
    assert _auto(_gpu_job(2, affinity=_required_affinity({}, block_1)), nodes, nodeAffinity=[TWO_HOSTS_APART]) == [
        ({PREFERRED: SPINE}, one_left)
    ]
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1-1-1", "node-1-1-2"]}]}
    assert _auto(_gpu_job(2, affinity=_required_affinity(by_name)), nodes, nodeAffinity=[TWO_HOSTS_APART]) == [
        ({PREFERRED: SPINE}, one_left)
    ]


def test_auto_without_an_inventory_or_a_known_size_prefers_at_the_level_or_the_narrowest() -> None:
    no_inventory = "podset 'main': auto: no node inventory, so preferred (never blocks admission)"
    assert _auto(_gpu_job(2)) == [({PREFERRED: HOST}, no_inventory)]
    assert _auto(_gpu_job(2), NodeInventory()) == [({PREFERRED: HOST}, no_inventory)]
    assert _topology(_gpu_job(2), {"mode": "auto", "level": BLOCK}) == [({PREFERRED: BLOCK}, no_inventory)]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p0",
            "labels": {"kueue.x-k8s.io/pod-group-name": "grp"},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"},
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
    }
    # One pod of a group of 2: sized by the total count, an upper bound on its role.
    bound = "podset 'main': auto: a pod group of 2 pods (pod-group-total-count, an upper bound on this pod's role)"
    plan = _review(pod, {"queue": {}, "topology": {"mode": "auto"}}, inventory=aws_nodes()).plan
    assert [(c.path[-1], c.value, c.reason) for c in plan.changes if c.rule == "topology"] == [
        (REQUIRED, RACK, f"{bound} fits in one {RACK} domain (the largest holds 2), whatever its other roles take")
    ]
    plan = _review(pod, {"queue": {}, "topology": {"mode": "auto", "level": HOST}}, inventory=aws_nodes()).plan
    assert [(c.path[-1], c.value, c.reason) for c in plan.changes if c.rule == "topology"] == [
        (PREFERRED, HOST, f"{bound} exceeds the largest {HOST} domain (1), so preferred")
    ]


def test_auto_too_large_for_every_domain_prefers_the_broadest_level() -> None:
    assert _auto(_gpu_job(1, gpus=16), aws_nodes()) == [
        ({PREFERRED: SPINE}, f"podset 'main': auto: 1 pod exceeds the largest {SPINE} domain (0), so preferred")
    ]
    policy = {"mode": "auto", "level": BLOCK}
    assert _topology(_gpu_job(5), policy, inventory=aws_nodes()) == [
        ({PREFERRED: BLOCK}, f"podset 'main': auto: 5 pods exceed the largest {BLOCK} domain (4), so preferred")
    ]


def test_fixed_modes_write_their_annotation_and_slices_only_of_whole_slices() -> None:
    assert _topology(_gpu_job(2), {"mode": "preferred", "level": BLOCK}) == [
        ({PREFERRED: BLOCK}, f"podset 'main': team policy: preferred at {BLOCK}")
    ]
    assert _topology(_gpu_job(2), {"mode": "unconstrained"}) == [
        ({UNCONSTRAINED: "true"}, "podset 'main': team policy: unconstrained")
    ]
    sliced = {"mode": "required", "level": BLOCK, "sliceLevel": RACK, "sliceSize": 4}
    required = ({REQUIRED: BLOCK}, f"podset 'main': team policy: required at {BLOCK}")
    slices = f"podset 'main': 4 pods in slices of 4 at {RACK}"
    assert _topology(_gpu_job(4), sliced) == [
        required,
        ({"kueue.x-k8s.io/podset-slice-required-topology": RACK}, slices),
        ({"kueue.x-k8s.io/podset-slice-size": "4"}, slices),
    ]
    assert _topology(_gpu_job(0), sliced) == [required]
    assert _topology(_gpu_job(6), sliced) == [required]


def _user_placed(annotations: dict[str, str], topology: dict[str, Any]) -> tuple[list[str], list[str], int]:
    obj = job()
    obj["spec"]["template"]["metadata"] = {"annotations": annotations}
    plan = _review(obj, {"queue": {}, "topology": topology}).plan
    return plan.denials, plan.warnings, len([c for c in plan.changes if c.rule == "topology"])


NOT_A_LEVEL = (
    "topology: kueue.x-k8s.io/podset-required-topology 'rack' (podset 'main') is not a level of Topology 'aws' "
    f"for team 'ml'; allowed: {SPINE}, {BLOCK}, {RACK}, {HOST}"
)


def test_a_users_level_outside_the_topology_is_refused_or_warned_that_kueue_never_admits_it() -> None:
    required = {"mode": "required", "level": RACK}
    assert _user_placed({REQUIRED: "rack"}, {**required, "enforcement": "enforce"}) == ([NOT_A_LEVEL], [], 0)
    never = f"{NOT_A_LEVEL}; Kueue can never admit the workload"
    assert _user_placed({REQUIRED: "rack"}, {**required, "enforcement": "warn"}) == ([], [never], 0)
    assert _user_placed({REQUIRED: "rack"}, required) == ([], [never], 0)


def test_the_unconstrained_annotation_must_be_a_boolean_as_kueue_reads_it_whatever_the_policy() -> None:
    """Kueue v0.19.2 refuses a value Go's ``strconv.ParseBool`` does not read, in every namespace:
    denied under ``enforce``, warned under ``default`` too (once passed in silence there); "True"
    and "1" are booleans to Kueue (once denied under ``enforce``)."""
    required = {"mode": "required", "level": RACK}
    bad = (
        "topology: podset 'main': kueue.x-k8s.io/podset-unconstrained-topology 'yes': must be a boolean value "
        "(Kueue v0.19.2 ValidateTASPodSetRequest); Kueue refuses the workload"
    )
    assert _user_placed({UNCONSTRAINED: "yes"}, {**required, "enforcement": "enforce"}) == ([bad], [], 0)
    assert _user_placed({UNCONSTRAINED: "yes"}, required) == ([], [bad], 0)
    for value in ("True", "1", "F"):
        assert _user_placed({UNCONSTRAINED: value}, {**required, "enforcement": "enforce"})[0] == [
            _less("required", RACK)
        ]
    # unconstrained next to required: Kueue refuses the pair whatever the value (ValidateTASPodSetRequest)
    listed = ", ".join(
        f'"kueue.x-k8s.io/podset-{mode}-topology"' for mode in ("required", "preferred", "unconstrained")
    )
    both = (
        f"topology: podset 'main': annotations: must not contain more than one topology annotation: [{listed}] "
        "(Kueue v0.19.2 ValidateTASPodSetRequest); Kueue refuses the workload"
    )
    for value in ("true", "false"):
        assert _user_placed({UNCONSTRAINED: value, REQUIRED: RACK}, {**required, "enforcement": "enforce"}) == (
            [both],
            [],
            0,
        )
        assert _user_placed({UNCONSTRAINED: value}, {**required, "enforcement": "enforce"})[0] == [
            _less("required", RACK)
        ]


def _less(mode: str, level: str) -> str:
    return f"topology: podset 'main' asks for less locality than team 'ml' allows: the policy is {mode} at {level}"


@pytest.mark.parametrize(
    ("annotations", "policy", "report"),
    [
        ({UNCONSTRAINED: "true"}, {"mode": "preferred", "level": RACK}, _less("preferred", RACK)),
        ({PREFERRED: BLOCK}, {"mode": "preferred", "level": BLOCK}, None),
        ({PREFERRED: SPINE}, {"mode": "preferred", "level": BLOCK}, _less("preferred", BLOCK)),
        ({PREFERRED: HOST}, {"mode": "preferred", "level": BLOCK}, None),
        ({REQUIRED: SPINE}, {"mode": "preferred", "level": BLOCK}, None),
        ({PREFERRED: SPINE}, {"mode": "required", "level": SPINE}, _less("required", SPINE)),
        ({REQUIRED: SPINE}, {"mode": "required", "level": HOST}, _less("required", HOST)),
        ({REQUIRED: HOST}, {"mode": "required", "level": RACK}, None),
        ({PREFERRED: SPINE}, {"mode": "auto", "level": RACK}, None),  # auto judges nothing of the user's
    ],
)
def test_less_locality_than_the_policy_is_reported(
    annotations: dict[str, str], policy: dict[str, Any], report: str | None
) -> None:
    expected = [report] if report else []
    assert _user_placed(annotations, {**policy, "enforcement": "enforce"}) == (expected, [], 0)
    assert _user_placed(annotations, {**policy, "enforcement": "warn"}) == ([], expected, 0)


def test_podsets_the_user_placed_are_skipped_and_the_others_still_planned() -> None:
    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"metadata": {"annotations": {REQUIRED: HOST}}, "spec": {}}},
                "Worker": {"replicas": 2, "template": {"spec": {}}},
            }
        },
    }
    plan = _review(pytorch, {"queue": {}, "topology": {"mode": "preferred", "level": RACK}}).plan
    assert [(c.path, c.value) for c in plan.changes if c.rule == "topology"] == [
        (("spec", "pytorchReplicaSpecs", "Worker", "template", "metadata"), {"annotations": {PREFERRED: RACK}})
    ]


def _lws(leader_gpus: str, worker_gpus: str, size: int = 4) -> dict[str, Any]:
    def template(gpus: str) -> dict[str, Any]:
        return {
            "metadata": {"annotations": {"kueue.x-k8s.io/podset-group-name": "g"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]},
        }

    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "lws"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": template(leader_gpus),
                "workerTemplate": template(worker_gpus),
            },
        },
    }


@pytest.mark.parametrize(
    ("leader", "worker", "size", "level"),
    [
        ("8", "2", 4, RACK),  # sized by the larger pod, whichever member has it
        ("2", "8", 4, RACK),
        ("2", "2", 4, HOST),
        ("1", "1", 8, HOST),  # 8 such pods fit a host (GPUs are whole: 500m is malformed)
    ],
)
def test_a_podset_group_is_sized_by_its_largest_pod(leader: str, worker: str, size: int, level: str) -> None:
    plan = _review(
        _lws(leader, worker, size), {"queue": {}, "topology": {"mode": "auto"}}, inventory=aws_nodes(hosts=4)
    ).plan
    added = [(c.path[-2:], c.value) for c in plan.changes if c.rule == "topology"]
    assert added == [(("annotations", REQUIRED), level), (("annotations", REQUIRED), level)]  # leader and workers


def test_unconstrained_skips_grouped_podsets_only() -> None:
    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "template": {"metadata": {"annotations": {"kueue.x-k8s.io/podset-group-name": "g"}}, "spec": {}},
                },
                "Worker": {"replicas": 2, "template": {"spec": {}}},
            }
        },
    }
    plan = _review(pytorch, {"queue": {}, "topology": {"mode": "unconstrained"}}).plan
    assert [(c.path, c.value) for c in plan.changes if c.rule == "topology"] == [
        (("spec", "pytorchReplicaSpecs", "Worker", "template", "metadata"), {"annotations": {UNCONSTRAINED: "true"}})
    ]


# -- never silently stranded: coverage, quota, topology fits ---------------------------------------------


def _gpu_pods(pods: int, requests: dict[str, str], **template_extra: Any) -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": requests}}
    return job(spec={"parallelism": pods, "template": {"spec": {"containers": [container]}, **template_extra}})


def _platform(policy: dict[str, Any], **resources: int) -> dict[str, Any]:
    platform = platform_with(policy)
    for name, quota in resources.items():
        platform["teams"][0]["quotas"][0]["resources"][name.replace("_", ".")] = {"nominalQuota": quota}
    return platform


def _plan_on(obj: dict[str, Any], platform: dict[str, Any], inventory: NodeInventory | None = None) -> Any:
    return review(review_body(obj, "ml"), teams_from(platform), inventory=inventory).plan


def _uncovered(podset: str, requested: str, covered: str) -> str:
    return (
        f"queue: podset '{podset}' may never be admitted: it requests {requested}, which team 'ml''s ClusterQueue "
        f"does not cover (it covers {covered}); Kueue admits it only if its Configuration excludes that resource "
        "(resources.excludeResourcePrefixes)"
    )


def test_uncovered_resources_are_named_with_what_the_team_covers() -> None:
    fpga = _gpu_pods(1, {"example.com/fpga": "1", "vendor.io/x": "2"})
    both = _plan_on(fpga, _platform({"queue": {}}, cpu=1000))
    assert both.warnings == [_uncovered("main", "example.com/fpga, vendor.io/x", "cpu, nvidia.com/gpu")]
    none = platform_with({"queue": {}})
    none["teams"][0]["quotas"] = []
    assert _plan_on(copy.deepcopy(fpga), none).warnings == [
        _uncovered("main", "example.com/fpga, vendor.io/x", "nothing")
    ]


def test_a_skipped_podset_does_not_end_the_coverage_check() -> None:
    def replica(replicas: int, requests: dict[str, str]) -> dict[str, Any]:
        container = {"name": "c", "resources": {"requests": requests}}
        return {"replicas": replicas, "template": {"spec": {"containers": [container]}}}

    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": replica(0, {"example.com/fpga": "1"}),
                "Worker": replica(2, {"example.com/fpga": "1"}),
            }
        },
    }
    plan = _plan_on(pytorch, platform_with({"queue": {}}))
    assert plan.warnings == [_uncovered("worker", "example.com/fpga", "nvidia.com/gpu")]


def test_a_rayjob_without_a_submitter_pod_is_not_warned_about_it() -> None:
    head = {"spec": {"containers": [{"name": "h", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}
    rayjob = _rayjob()
    rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"] = head
    plan = _plan_on(rayjob, platform_with({"queue": {}, "topology": {"mode": "auto"}}), aws_nodes())
    assert (plan.warnings, plan.denials) == ([], [])


def test_quota_ceilings_per_resource() -> None:
    # A resource the workload does not request is never over its quota, even a quota of 0.
    assert _plan_on(_gpu_pods(1, {"nvidia.com/gpu": "8"}), _platform({"queue": {}}, cpu=0)).denials == []
    over = _plan_on(_gpu_pods(9, {"nvidia.com/gpu": "8", "cpu": "1"}), _platform({"queue": {}}, cpu=1000))
    assert over.denials == [
        "queue: the workload can never be admitted: it needs 72 nvidia.com/gpu ('main' 9 × 8), more than team "
        "'ml''s nominalQuota + borrowingLimit of 64"
    ]
    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p"},
        "spec": {
            "pytorchReplicaSpecs": {
                role: {
                    "replicas": replicas,
                    "template": {
                        "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}
                    },
                }
                for role, replicas in (("Master", 4), ("Worker", 10))
            }
        },
    }
    assert _plan_on(pytorch, platform_with({"queue": {}})).denials == [
        "queue: the workload can never be admitted: it needs 112 nvidia.com/gpu ('master' 4 × 8, 'worker' 10 × 8), "
        "more than team 'ml''s nominalQuota + borrowingLimit of 64"
    ]


def _fits(obj: dict[str, Any], topology: dict[str, Any], inventory: NodeInventory | None = None) -> Any:
    return _review(obj, {"queue": {}, "topology": topology}, inventory=inventory or aws_nodes()).plan


def _no_set(count: int, shape: str, held: int) -> str:
    pods, fit = ("1 pod", "fits") if count == 1 else (f"{count} pods", "fit")
    return (
        f"topology: podset 'main' can never be admitted: its {pods} of {shape} {fit} on no set of the team's "
        f"nodes (they hold {held} such pods on an empty cluster)"
    )


def test_a_podset_is_stranded_only_beyond_all_the_teams_nodes() -> None:
    preferred = {"mode": "preferred", "level": BLOCK}
    for pods in (5, 8):  # more than a block or a host holds, not more than all 8 nodes
        assert _fits(_gpu_pods(pods, {"nvidia.com/gpu": "8"}), preferred).warnings == []
    nine = _fits(_gpu_pods(9, {"nvidia.com/gpu": "8", "cpu": "2"}), preferred)
    assert [w for w in nine.warnings if w.startswith("topology:")] == [_no_set(9, "{cpu: 2, nvidia.com/gpu: 8}", 8)]
    refused = _fits(_gpu_pods(9, {"nvidia.com/gpu": "8"}), {**preferred, "enforcement": "enforce"})
    assert refused.denials[0] == _no_set(9, "{nvidia.com/gpu: 8}", 8)


def test_a_required_level_too_small_is_reported_once() -> None:
    plan = _fits(_gpu_pods(9, {"nvidia.com/gpu": "8"}), {"mode": "required", "level": RACK})
    assert plan.warnings == [
        f"topology: podset 'main' can never be admitted: all its pods (9 pods of {{nvidia.com/gpu: 8}}) must fit "
        f"in one {RACK} domain, and the largest holds 2 such pods on an empty cluster"
    ]


def test_the_users_slice_annotations_are_judged_too() -> None:
    def sliced(annotations: dict[str, str]) -> Any:
        return _fits(_gpu_pods(4, {"nvidia.com/gpu": "8"}, metadata={"annotations": annotations}), {"mode": "auto"})

    slice_level = "kueue.x-k8s.io/podset-slice-required-topology"
    slice_size = "kueue.x-k8s.io/podset-slice-size"
    assert sliced({slice_level: RACK, slice_size: "4"}).warnings == [
        f"topology: podset 'main' can never be admitted: one slice (4 pods of {{nvidia.com/gpu: 8}}) must fit in "
        f"one {RACK} domain, and the largest holds 2 such pods on an empty cluster"
    ]
    assert sliced({slice_level: RACK, slice_size: "2"}).warnings == []
    assert sliced({slice_size: "2"}).warnings == [  # not judged as slices: Kueue refuses it
        "topology: podset 'main': kueue.x-k8s.io/podset-slice-size: may not be set when "
        "'kueue.x-k8s.io/podset-slice-required-topology' is not specified (Kueue v0.19.2 ValidateTASPodSetRequest); "
        "Kueue refuses the workload"
    ]
    assert sliced({slice_level: RACK, slice_size: "two"}).warnings == []
    not_a_level = sliced({slice_level: "rack", slice_size: "2"}).warnings
    assert not_a_level == [
        "topology: kueue.x-k8s.io/podset-slice-required-topology 'rack' (podset 'main') is not a level of Topology "
        f"'aws' for team 'ml'; allowed: {SPINE}, {BLOCK}, {RACK}, {HOST}; Kueue can never admit the workload"
    ]
    required_elsewhere = _fits(
        _gpu_pods(1, {"nvidia.com/gpu": "8"}, metadata={"annotations": {REQUIRED: "rack"}}), {"mode": "auto"}
    )
    assert len(required_elsewhere.warnings) == 1  # the level is unknown: judged once, as not a level


def test_a_group_too_large_for_its_level_names_every_member() -> None:
    lws = _lws("8", "8", size=4)
    for template in lws["spec"]["leaderWorkerTemplate"].values():
        if isinstance(template, dict):
            template["metadata"]["annotations"][REQUIRED] = RACK
    plan = _fits(lws, {"mode": "auto"})
    assert plan.warnings == [
        f"topology: podset 'leader' + 'worker' can never be admitted: all its pods ('leader' 1 pod of "
        f"{{nvidia.com/gpu: 8}} + 'worker' 3 pods of {{nvidia.com/gpu: 8}}) must fit in one {RACK} domain, and the "
        "largest holds 2 of them on an empty cluster"
    ]


def test_a_group_too_large_for_its_level_describes_each_members_pods() -> None:
    """A driver and workers of different sizes: once described as 4 pods of the workers' size."""
    lws = _lws("1", "8", size=4)
    for template in lws["spec"]["leaderWorkerTemplate"].values():
        if isinstance(template, dict):
            template["metadata"]["annotations"][REQUIRED] = RACK
    assert _fits(lws, {"mode": "auto"}).warnings == [
        f"topology: podset 'leader' + 'worker' can never be admitted: all its pods ('leader' 1 pod of "
        f"{{nvidia.com/gpu: 1}} + 'worker' 3 pods of {{nvidia.com/gpu: 8}}) must fit in one {RACK} domain, and the "
        "largest holds 2 of them on an empty cluster"
    ]
    for template in lws["spec"]["leaderWorkerTemplate"].values():
        if isinstance(template, dict):
            template["metadata"]["annotations"] = {PREFERRED: RACK, "kueue.x-k8s.io/podset-group-name": "g"}
    lws["spec"]["leaderWorkerTemplate"]["size"] = 40
    assert _fits(lws, {"mode": "auto"}).warnings == [
        "topology: podset 'leader' + 'worker' can never be admitted: its 'leader' 1 pod of {nvidia.com/gpu: 1} + "
        "'worker' 39 pods of {nvidia.com/gpu: 8} fit on no set of the team's nodes (they hold 8 of them on an "
        "empty cluster)"
    ]


def test_a_pod_group_member_is_not_judged_by_its_groups_size() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p0",
            "labels": {"kueue.x-k8s.io/pod-group-name": "grp"},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": "100"},
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
    }
    plan = _fits(pod, {"mode": "auto"})
    # 100 pods of 8 GPUs would exceed the quota, but the group's other pods may request no GPU:
    # a warning, not a denial; the topology is not judged (a level only preferred).
    assert plan.denials == []
    assert plan.warnings == [
        "queue: the workload may never be admitted: were all 100 pods of its pod group (pod-group-total-count) "
        "like this one, they would need 800 nvidia.com/gpu, more than team 'ml''s nominalQuota + "
        "borrowingLimit of 64"
    ]
    # This pod alone exceeding the quota: never admitted, whatever the others are.
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "65"
    assert _fits(pod, {"mode": "auto"}).denials == [
        "queue: the workload can never be admitted: it needs 65 nvidia.com/gpu ('main' 1 × 65), more than team "
        "'ml''s nominalQuota + borrowingLimit of 64"
    ]


def test_fits_together_counts_only_nodes_with_every_level_and_the_flavors_tolerations() -> None:
    def template(gpus: int) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}

    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 4, "template": template(8)},
                "Worker": {"replicas": 10, "template": template(3)},
            }
        },
    }
    unlabelled = [
        {
            "metadata": {"name": f"bare-{i}", "labels": {INSTANCE_TYPE: "p5.48xlarge"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }
        for i in range(4)
    ]
    nodes = NodeInventory(aws_nodes().nodes + NodeInventory.from_objects(unlabelled).nodes)
    together = (
        "topology: the workload may never be admitted: its 14 pods ('master' 4 × {nvidia.com/gpu: 8}, "
        "'worker' 10 × {nvidia.com/gpu: 3}) do not fit the team's 8 nodes together on an empty cluster (2 left over)"
    )
    assert _fits(copy.deepcopy(pytorch), {"mode": "auto"}, nodes).warnings == [together]
    # Tainted nodes count when the flavor tolerates the taint.
    tainted = NodeInventory(
        [
            Node(n.name, n.labels, n.allocatable, taints=({"key": "gpu", "effect": "NoSchedule"},))
            for n in aws_nodes().nodes
        ]
    )
    platform = platform_with({"queue": {}, "topology": {"mode": "auto"}})
    platform["flavors"][0]["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert _plan_on(copy.deepcopy(pytorch), platform, tainted).warnings == [together]


# -- small helpers with exact outputs --------------------------------------------------------------------


def test_dotted_paths() -> None:
    assert dotted(()) == "<object>"
    assert dotted(("spec", "containers", 0, "name")) == "spec.containers[0].name"
    assert dotted(("spec", "template")) == "spec.template"


def test_a_value_outside_the_allowed_set_lists_the_allowed_ones_or_none() -> None:
    labelled = job(metadata={"name": "t", "labels": {PRIORITY_LABEL: "mid"}})
    where = "(metadata.labels.kueue.x-k8s.io/priority-class) is not allowed for team 'ml'"
    two = _review(
        copy.deepcopy(labelled), {"queue": {}, "kueuePriority": {"allowed": ["high", "low"], "enforcement": "enforce"}}
    )
    assert two.plan.denials == [f"kueuePriority: WorkloadPriorityClass 'mid' {where}; allowed: high, low"]
    none = _review(copy.deepcopy(labelled), {"queue": {}, "kueuePriority": {"allowed": []}})
    assert none.plan.denials == [f"kueuePriority: WorkloadPriorityClass 'mid' {where}; allowed: none"]


# -- priorities ------------------------------------------------------------------------------------------

BOTH = {"default": "low", "allowed": ["high", "low"]}


def _pod_priority_job(name: str) -> dict[str, Any]:
    return job(spec={"parallelism": 1, "template": {"spec": {"priorityClassName": name, "containers": []}}})


def _kueue_priority(pod_priority: str, policy: dict[str, Any]) -> tuple[list[tuple[str, str]], list[str]]:
    plan = _review(_pod_priority_job(pod_priority), {"queue": {}, **policy}).plan
    return [(c.value, c.reason) for c in plan.changes if c.rule == "kueuePriority"], plan.warnings


DEFAULT = ("low", "the default of team 'ml'")
NOT_FOLLOWED = (
    "kueuePriority: the pods' priorityClassName 'high' is not a PriorityClass team 'ml''s policy lets its pods "
    "use, so the Kueue priority does not follow it (the API server refuses pods whose PriorityClass does not "
    "exist); set kueue.x-k8s.io/priority-class to choose one"
)


@pytest.mark.parametrize(
    ("pod_priority", "policy", "label", "warnings"),
    [
        # A PriorityClass the team's pods may use, allowed as a Kueue priority: followed.
        (
            "high",
            {"kueuePriority": BOTH, "podPriority": BOTH},
            ("high", "the pod priority class the workload asks for (high)"),
            [],
        ),
        # Known as a PriorityClass but not allowed as a Kueue priority: the default, silently.
        ("high", {"kueuePriority": {"default": "low", "allowed": ["low"]}, "podPriority": BOTH}, DEFAULT, []),
        # Not a PriorityClass the policy knows (no podPriority rule, or not among its values): not followed.
        ("high", {"kueuePriority": BOTH}, DEFAULT, [NOT_FOLLOWED]),
        (
            "high",
            {"kueuePriority": BOTH, "podPriority": {"default": "low", "allowed": ["low"]}},
            DEFAULT,
            [NOT_FOLLOWED],
        ),
        # Not followed, but nothing to say: it is the default anyway, or not allowed anyway.
        ("low", {"kueuePriority": BOTH}, DEFAULT, []),
        ("high", {"kueuePriority": {"default": "low", "allowed": ["low"]}}, DEFAULT, []),
    ],
)
def test_the_kueue_priority_follows_a_known_allowed_pod_priority(
    pod_priority: str, policy: dict[str, Any], label: tuple[str, str], warnings: list[str]
) -> None:
    assert _kueue_priority(pod_priority, policy) == ([label], warnings)


def test_a_missing_pod_priority_comes_from_the_other_podsets_the_kueue_priority_or_the_default() -> None:
    labelled = job(metadata={"name": "t", "labels": {PRIORITY_LABEL: "high"}})
    plan = _review(labelled, {"queue": {}, "podPriority": BOTH}).plan
    assert [(c.value, c.reason) for c in plan.changes if c.rule == "podPriority"] == [
        ("high", "podset 'main': the Kueue priority the workload asks for")
    ]
    # A Kueue priority the pods may not use is not copied to them.
    labelled = job(metadata={"name": "t", "labels": {PRIORITY_LABEL: "high"}})
    plan = _review(labelled, {"queue": {}, "podPriority": {"default": "low", "allowed": ["low"]}}).plan
    assert [(c.value, c.reason) for c in plan.changes if c.rule == "podPriority"] == [
        ("low", "podset 'main': the default of team 'ml'")
    ]
    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"priorityClassName": "high"}}},
                "Worker": {"replicas": 2, "template": {"spec": {}}},
            }
        },
    }
    plan = _review(pytorch, {"queue": {}, "podPriority": BOTH}).plan
    assert [(c.path, c.value, c.reason) for c in plan.changes if c.rule == "podPriority"] == [
        (
            ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "priorityClassName"),
            "high",
            "podset 'worker': the pod priority the workload's other podsets ask for",
        )
    ]


# -- the draft, paths, the review answer -----------------------------------------------------------------


def test_draft_set_refuses_a_path_through_a_value_of_the_wrong_type() -> None:
    with pytest.raises(Shape) as through_string:
        Draft({"spec": {"template": "x"}}).set(("spec", "template", "spec", "x"), 1, "queue", "r")
    assert (through_string.value.path, through_string.value.found, through_string.value.expected) == (
        ("spec", "template"),
        "x",
        "object",
    )
    with pytest.raises(Shape) as through_map:
        Draft({"spec": {"items": {"a": 1}}}).set(("spec", "items", 0, "name"), 1, "queue", "r")
    assert (through_map.value.path, through_map.value.found, through_map.value.expected) == (
        ("spec", "items"),
        {"a": 1},
        "array",
    )


def test_draft_set_below_a_base_edits_as_set_does_and_follows_a_replaced_or_moved_base() -> None:
    original = {"spec": {"jobs": [{"t": {"x": 1}}, {"t": {}}]}}
    draft = Draft(original)
    draft.set_below(("spec", "jobs", 0, "t"), ("a", "b"), "1", "queue", "first")
    draft.set_below(("spec", "jobs", 0, "t"), ("x",), 2, "queue", "second")
    draft.set_below(("spec", "jobs", 1, "t"), ("c",), "3", "queue", "third")
    assert draft.doc == {"spec": {"jobs": [{"t": {"x": 2, "a": {"b": "1"}}}, {"t": {"c": "3"}}]}}
    assert original == {"spec": {"jobs": [{"t": {"x": 1}}, {"t": {}}]}}
    assert draft.changes == [
        Change("add", ("spec", "jobs", 0, "t", "a"), {"b": "1"}, "queue", "first"),
        Change("replace", ("spec", "jobs", 0, "t", "x"), 2, "queue", "second"),
        Change("add", ("spec", "jobs", 1, "t", "c"), "3", "queue", "third"),
    ]
    # a base replaced whole, a job appended to the list: later edits land in what is there now
    draft.set(("spec", "jobs", 0, "t"), {"new": True}, "queue", "whole")
    draft.set_below(("spec", "jobs", 0, "t"), ("y",), "4", "queue", "after")
    draft.append(("spec", "jobs"), {"t": {}}, "queue", "more")
    draft.set_below(("spec", "jobs", 2, "t"), ("z",), "5", "queue", "appended")
    assert draft.doc == {"spec": {"jobs": [{"t": {"new": True, "y": "4"}}, {"t": {"c": "3"}}, {"t": {"z": "5"}}]}}
    assert [c.path for c in draft.changes[-2:]] == [("spec", "jobs", 2), ("spec", "jobs", 2, "t", "z")]
    # a base that is missing or of another type: the walk from the root adds the maps or says which
    assert Draft({"spec": {}}).set_below(("spec", "t"), ("a",), "1", "queue", "r") is None
    with pytest.raises(Shape) as through_string:
        Draft({"spec": {"t": "x"}}).set_below(("spec", "t"), ("a",), "1", "queue", "r")
    assert (through_string.value.path, through_string.value.found) == (("spec", "t"), "x")


def test_draft_edits_a_copy_and_records_each_change() -> None:
    original = {"spec": {"items": [{"a": 1}]}, "metadata": {"labels": {"x": "1"}}}
    draft = Draft(original)
    draft.append(("spec", "items"), {"b": 2}, "nodeAffinity", "more")
    draft.set(("metadata", "labels", "x"), "2", "queue", "changed")
    draft.set(("metadata", "labels", "y"), "3", "queue", "added")
    assert draft.doc == {"spec": {"items": [{"a": 1}, {"b": 2}]}, "metadata": {"labels": {"x": "2", "y": "3"}}}
    assert original == {"spec": {"items": [{"a": 1}]}, "metadata": {"labels": {"x": "1"}}}
    assert draft.changes == [
        Change("add", ("spec", "items", 1), {"b": 2}, "nodeAffinity", "more"),
        Change("replace", ("metadata", "labels", "x"), "2", "queue", "changed"),
        Change("add", ("metadata", "labels", "y"), "3", "queue", "added"),
    ]


def test_a_term_added_to_empty_terms_is_what_the_stranded_check_sees() -> None:
    obj = _gpu_job(2, affinity=_required_affinity())
    plan = _review(
        obj, {"queue": {}, "topology": {"mode": "auto"}, "nodeAffinity": [TEAM_EXPRESSION]}, inventory=aws_nodes()
    ).plan
    assert (plan.warnings, plan.denials) == ([], [])


def test_child_reads_maps_and_in_range_list_indexes_only() -> None:
    assert child(MappingProxyType({"a": 1}), "a") == 1
    assert child({"a": 1}, "b") is None
    assert child(["x", "y"], 1) == "y"
    assert child(["x"], 1) is None
    assert child(["x"], -1) is None
    assert child(["x"], "0") is None
    assert child("abc", 0) is None


def test_the_review_answer() -> None:
    teams = teams_from(platform_with({"queue": {}, "kueuePriority": {"default": "low", "allowed": ["low"]}}))
    asked: list[str] = []

    def labels(namespace: str) -> dict[str, str]:
        asked.append(namespace)
        return {}

    untouched = review(review_body(job(), "elsewhere"), teams, labels)
    assert untouched.plan.skipped == "namespace 'elsewhere' belongs to no team"
    assert asked == []  # no team selects namespaces by labels: the cache is never read
    body = review_body(job(metadata={"name": "t", "labels": {QUEUE_LABEL: "theirs"}}), "ml")
    body["request"]["object"]["spec"]["template"]["spec"]["priorityClassName"] = "x"
    denied = review(body, teams)
    assert denied.request.uid == body["request"]["uid"]
    assert [c.rule for c in denied.plan.changes] == ["kueuePriority"]  # planned, but a refused request is not patched
    assert denied.patch == []
    response = denied.response["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"] == (
        "kueue-governor: queue: LocalQueue 'theirs' (metadata.labels.kueue.x-k8s.io/queue-name) is not allowed for "
        "team 'ml'; allowed: ml-queue; unless a LocalQueue of that name exists in this namespace, "
        "Kueue never admits the workload (it stays suspended); use the team's LocalQueue 'ml-queue'; "
        "kueue-governor: podPriority: PriorityClass 'x' "
        "(spec.template.spec.priorityClassName) is not allowed for team 'ml'; allowed: low"
    )
    warned = copy.deepcopy(body)
    warned["request"]["object"]["metadata"]["labels"] = {QUEUE_LABEL: "theirs", PRIORITY_LABEL: ""}
    teams = teams_from(
        platform_with({"queue": {}, "kueuePriority": {"default": "low", "allowed": ["low"], "enforcement": "warn"}})
    )
    answer = review(warned, teams).response["response"]
    assert answer["allowed"] is False
    assert answer["warnings"] == [
        "kueue-governor: kueuePriority: an empty kueue.x-k8s.io/priority-class (metadata.labels) means no "
        "WorkloadPriorityClass to Kueue; set to 'low'",
        "kueue-governor: podPriority: PriorityClass 'x' (spec.template.spec.priorityClassName) is not allowed for "
        "team 'ml'; allowed: low",
    ]


def test_spark_roles_are_preferred_without_judging_their_size() -> None:
    spark = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "s"},
        "spec": {"driver": {"cores": 1}, "executor": {"cores": 1, "instances": 2}},
    }
    reason = (
        "auto: the operator builds these pods from the object's own fields (such as Spark's cores and instances), "
        "so their size is not judged; preferred"
    )
    for topology, level in (({"mode": "auto"}, HOST), ({"mode": "auto", "level": RACK}, RACK)):
        plan = _review(copy.deepcopy(spark), {"queue": {}, "topology": topology}, inventory=aws_nodes()).plan
        assert [(c.path, c.value, c.reason) for c in plan.changes if c.rule == "topology"] == [
            (("spec", role, "annotations"), {PREFERRED: level}, f"podset '{role}': {reason}")
            for role in ("driver", "executor")
        ]


def test_no_fits_together_warning_without_nodes() -> None:
    def replica(replicas: int) -> dict[str, Any]:
        container = {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}
        return {"replicas": replicas, "template": {"spec": {"containers": [container]}}}

    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(2)}},
    }
    plan = _review(pytorch, {"queue": {}, "topology": {"mode": "auto"}}, inventory=NodeInventory()).plan
    assert (plan.warnings, plan.denials) == ([], [])


# -- UPDATE ----------------------------------------------------------------------------------------------

FULL_POLICY = {
    "queue": {},
    "kueuePriority": {"default": "low", "allowed": ["low"]},
    "podPriority": {"default": "low", "allowed": ["low"]},
    "topology": {"mode": "required", "level": RACK},
    "nodeAffinity": [TEAM_EXPRESSION],
}
NOTHING = "UPDATE: no governed value introduced, changed or dropped"


def _stored(obj: dict[str, Any], policy: dict[str, Any] = FULL_POLICY) -> dict[str, Any]:
    """The object as the API server stores it after admission."""
    return apply_patch(obj, _review(copy.deepcopy(obj), policy).patch)


def _update(
    new: dict[str, Any], old: dict[str, Any], policy: dict[str, Any] = FULL_POLICY
) -> tuple[list[tuple[Any, ...]], list[str], list[str], str]:
    plan = _review(new, policy, operation="UPDATE", old=old).plan
    return [(c.op, c.path, c.value, c.rule, c.reason) for c in plan.changes], plan.warnings, plan.denials, plan.skipped


def test_a_reapplied_manifest_gets_every_governed_value_back() -> None:
    stored = _stored(job())
    changes, warnings, denials, skipped = _update(job(), stored)
    assert (denials, skipped) == ([], "")
    # Each value put back is told to the user (kubectl prints it as a Warning).
    assert [w.split(": this update removes ")[0] for w in warnings] == [
        "queue",
        "kueuePriority",
        "suspend",
        "podPriority",
        "topology",
        "nodeAffinity",
    ]
    assert warnings[0] == (
        "queue: this update removes metadata.labels.kueue.x-k8s.io/queue-name; kept 'ml-queue' "
        "(an update that leaves out a governed value keeps the stored one)"
    )
    assert changes == [
        (
            "add",
            ("metadata", "labels"),
            {QUEUE_LABEL: "ml-queue"},
            "queue",
            "put back: the update drops metadata.labels.kueue.x-k8s.io/queue-name",
        ),
        (
            "add",
            ("metadata", "labels", PRIORITY_LABEL),
            "low",
            "kueuePriority",
            "put back: the update drops metadata.labels.kueue.x-k8s.io/priority-class",
        ),
        ("add", ("spec", "suspend"), True, "suspend", "put back: the update drops spec.suspend"),
        (
            "add",
            ("spec", "template", "spec", "priorityClassName"),
            "low",
            "podPriority",
            "put back: the update drops spec.template.spec.priorityClassName",
        ),
        (
            "add",
            ("spec", "template", "metadata"),
            {"annotations": {REQUIRED: RACK}},
            "topology",
            "put back: the update drops kueue.x-k8s.io/podset-required-topology of podset 'main'",
        ),
        (
            "add",
            ("spec", "template", "spec", "affinity"),
            {"nodeAffinity": {TERMS[-1]: {"nodeSelectorTerms": [{"matchExpressions": [TEAM_EXPRESSION]}]}}},
            "nodeAffinity",
            "put back: the update drops the affinity of podset 'main'",
        ),
    ]
    assert _update(copy.deepcopy(stored), stored) == ([], [], [], NOTHING)


def test_an_emptied_queue_label_is_put_back_with_a_warning() -> None:
    stored = _stored(job())
    emptied = copy.deepcopy(stored)
    emptied["metadata"]["labels"][QUEUE_LABEL] = ""
    assert _update(emptied, stored) == (
        [
            (
                "replace",
                ("metadata", "labels", QUEUE_LABEL),
                "ml-queue",
                "queue",
                "put back: the update empties metadata.labels.kueue.x-k8s.io/queue-name, which Kueue reads as no queue",
            )
        ],
        [
            "queue: an empty kueue.x-k8s.io/queue-name (metadata.labels.kueue.x-k8s.io/queue-name) means no queue to "
            "Kueue; kept 'ml-queue'"
        ],
        [],
        "",
    )
    # "" where there was no queue label: still no queue to Kueue, as before the update.
    unqueued = copy.deepcopy(stored)
    del unqueued["metadata"]["labels"][QUEUE_LABEL]
    still = copy.deepcopy(unqueued)
    still["metadata"]["labels"][QUEUE_LABEL] = ""
    assert _update(still, unqueued) == ([], [], [], NOTHING)


def test_changed_values_are_checked_as_on_create() -> None:
    stored = _stored(job())
    theirs = copy.deepcopy(stored)
    theirs["metadata"]["labels"][QUEUE_LABEL] = "theirs"
    assert _update(theirs, stored)[2] == [
        "queue: LocalQueue 'theirs' (metadata.labels.kueue.x-k8s.io/queue-name) is not allowed for team 'ml'; "
        "allowed: ml-queue"
        "; unless a LocalQueue of that name exists in this namespace, Kueue never admits the workload "
        "(it stays suspended); use the team's LocalQueue 'ml-queue'"
    ]
    placed = copy.deepcopy(stored)
    placed["spec"]["template"]["metadata"]["annotations"] = {REQUIRED: "rack"}
    assert _update(placed, stored)[1] == [f"{NOT_A_LEVEL}; Kueue can never admit the workload"]
    assert _update(copy.deepcopy(placed), stored, {"queue": {}}) == ([], [], [], NOTHING)
    moved = copy.deepcopy(stored)
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    moved["spec"]["template"]["spec"]["affinity"] = _required_affinity({"matchExpressions": [zone]})
    assert _update(moved, stored) == (
        [],
        [
            "nodeAffinity: podset 'main': this update drops team 'ml''s node affinity from an affinity it changes; "
            "Kueue may place its pods outside the team's nodes"
        ],
        [],
        "",
    )
    kept = copy.deepcopy(stored)
    kept["spec"]["template"]["spec"]["affinity"] = _required_affinity(
        {"matchExpressions": [zone, TEAM_EXPRESSION]}, {"matchExpressions": [TEAM_EXPRESSION]}
    )
    assert _update(kept, stored) == ([], [], [], NOTHING)


def test_an_update_of_a_deployment_puts_back_its_pod_template_labels() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": []}}},
    }
    policy = {"queue": {}, "kueuePriority": {"default": "low", "allowed": ["low"]}}
    stored = _stored(deployment, policy)
    reapplied = copy.deepcopy(stored)
    reapplied["spec"]["template"]["metadata"]["labels"] = {"app": "d"}
    labels = ("spec", "template", "metadata", "labels")
    assert _update(reapplied, stored, policy)[0] == [
        (
            "add",
            (*labels, QUEUE_LABEL),
            "ml-queue",
            "queue",
            "put back: the update drops spec.template.metadata.labels.kueue.x-k8s.io/queue-name",
        ),
        (
            "add",
            (*labels, PRIORITY_LABEL),
            "low",
            "kueuePriority",
            "put back: the update drops spec.template.metadata.labels.kueue.x-k8s.io/priority-class",
        ),
    ]
    emptied = copy.deepcopy(stored)
    emptied["spec"]["template"]["metadata"]["labels"][QUEUE_LABEL] = ""
    changes, warnings, _, _ = _update(emptied, stored, policy)
    assert [(path, value, rule) for _, path, value, rule, _ in changes] == [
        ((*labels, QUEUE_LABEL), "ml-queue", "queue")
    ]
    assert warnings == [
        "queue: an empty kueue.x-k8s.io/queue-name (spec.template.metadata.labels.kueue.x-k8s.io/queue-name) means "
        "no queue to Kueue; kept 'ml-queue'"
    ]


def test_updates_of_objects_left_alone_stay_left_alone() -> None:
    owned = job(
        metadata={
            "name": "t",
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "top", "uid": "u", "controller": True}
            ],
        }
    )
    plan = _review(owned, FULL_POLICY, operation="UPDATE", old=copy.deepcopy(owned)).plan
    assert (plan.skipped, plan.changes) == ("controlled by Job 'top': Kueue manages the owner", [])
    rayjob = _rayjob()
    rayjob["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    plan = _review(rayjob, {"queue": {}}, operation="UPDATE", old=copy.deepcopy(rayjob)).plan
    assert (plan.skipped, plan.changes) == ("spec.clusterSelector is set: RayJob is left alone", [])


def test_an_update_adding_a_podset_to_an_immutable_template_reports_what_it_lacks() -> None:
    stored = job()
    del stored["spec"]["template"]
    policy = {
        "queue": {},
        "podPriority": {"default": "low", "allowed": ["low"], "enforcement": "enforce"},
        "nodeAffinity": [TEAM_EXPRESSION],
    }
    plan = _review(job(), policy, operation="UPDATE", old=stored).plan
    lacks = "this update adds podset 'main' without what team 'ml' requires there"
    later = "and its pod template cannot change later: set it in the object"
    assert plan.denials == [f"podPriority: {lacks} (spec.template.spec.priorityClassName), {later}"]
    assert plan.warnings == [f"nodeAffinity: {lacks} (spec.template.spec.affinity), {later}"]
    assert plan.changes == []


def test_a_malformed_update_is_refused_with_its_path() -> None:
    stored = _stored(job())
    broken = copy.deepcopy(stored)
    broken["metadata"]["labels"] = ["not", "a", "map"]
    assert _update(broken, stored)[2] == ["malformed object: metadata.labels must be an object, got array"]


def _grown_raycluster(worker_spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "r", "labels": {QUEUE_LABEL: "ml-queue"}},
        "spec": {"headGroupSpec": {"template": {"spec": {}}}, "workerGroupSpecs": []},
    }
    grown = copy.deepcopy(cluster)
    grown["spec"]["workerGroupSpecs"] = [{"groupName": "b", "replicas": 1, "template": {"spec": worker_spec}}]
    return grown, cluster


def test_a_podset_added_by_an_update_gets_the_podset_rules_only() -> None:
    grown, cluster = _grown_raycluster({})
    policy = {
        "queue": {},
        "kueuePriority": {"default": "low", "allowed": ["low"]},
        "topology": {"mode": "preferred", "level": RACK},
    }
    changes = _update(grown, cluster, policy)[0]
    assert changes == [
        (
            "add",
            ("spec", "workerGroupSpecs", 0, "template", "metadata"),
            {"annotations": {PREFERRED: RACK}},
            "topology",
            f"podset 'b' added by this update: podset 'b': team policy: preferred at {RACK}",
        )
    ]
    grown, cluster = _grown_raycluster({"priorityClassName": "high"})
    refused = _update(grown, cluster, {"queue": {}, "podPriority": {"allowed": ["low"], "enforcement": "enforce"}})
    assert refused[2] == [
        "podPriority: PriorityClass 'high' (spec.workerGroupSpecs[0].template.spec.priorityClassName) is not allowed "
        "for team 'ml'; allowed: low"
    ]


def test_update_queue_labels_empty_before_and_after_or_newly_introduced() -> None:
    stored = _stored(job())
    stored["metadata"]["labels"][QUEUE_LABEL] = ""
    assert _update(copy.deepcopy(stored), stored) == ([], [], [], NOTHING)
    del stored["metadata"]["labels"][QUEUE_LABEL]
    introduced = copy.deepcopy(stored)
    introduced["metadata"]["labels"][QUEUE_LABEL] = "theirs"
    assert _update(introduced, stored)[2] == [
        "queue: LocalQueue 'theirs' (metadata.labels.kueue.x-k8s.io/queue-name) is not allowed for team 'ml'; "
        "allowed: ml-queue"
        "; unless a LocalQueue of that name exists in this namespace, Kueue never admits the workload "
        "(it stays suspended); use the team's LocalQueue 'ml-queue'"
    ]


@pytest.mark.parametrize(
    "terms",
    [
        [],  # no term left: no team affinity
        [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}],  # a term without it
        [{"matchExpressions": [TEAM_EXPRESSION]}, {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}],
    ],
)
def test_an_update_that_leaves_a_term_without_the_team_affinity_is_warned(terms: list[Any]) -> None:
    stored = _stored(job())
    changed = copy.deepcopy(stored)
    changed["spec"]["template"]["spec"]["affinity"] = _required_affinity(*terms)
    assert _update(changed, stored)[1] == [
        "nodeAffinity: podset 'main': this update drops team 'ml''s node affinity from an affinity it changes; "
        "Kueue may place its pods outside the team's nodes"
    ]


def test_an_update_of_an_object_whose_stored_affinity_is_not_the_teams_is_left_alone() -> None:
    stored = _stored(job())
    stored["spec"]["template"]["spec"]["affinity"] = _required_affinity("junk")
    changed = copy.deepcopy(stored)
    changed["spec"]["template"]["spec"]["affinity"] = _required_affinity({"matchExpressions": []})
    assert _update(changed, stored) == ([], [], [], NOTHING)


def test_an_update_emptying_the_template_queue_label_and_dropping_the_priority_fixes_both() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": []}}},
    }
    policy = {"queue": {}, "kueuePriority": {"default": "low", "allowed": ["low"]}}
    stored = _stored(deployment, policy)
    changed = copy.deepcopy(stored)
    changed["spec"]["template"]["metadata"]["labels"] = {"app": "d", QUEUE_LABEL: ""}
    labels = ("spec", "template", "metadata", "labels")
    assert [(path, value) for _, path, value, _, _ in _update(changed, stored, policy)[0]] == [
        ((*labels, QUEUE_LABEL), "ml-queue"),
        ((*labels, PRIORITY_LABEL), "low"),
    ]


# -- compiled policies -----------------------------------------------------------------------------------


def test_quota_limits_add_up_over_the_teams_flavors() -> None:
    platform = platform_with({"queue": {}})
    second = copy.deepcopy(platform["flavors"][0]) | {"name": "gpu2", "nodeLabels": {INSTANCE_TYPE: "p4d.24xlarge"}}
    platform["flavors"].append(second)
    platform["teams"][0]["quotas"].append({"flavor": "gpu2", "resources": {"nvidia.com/gpu": {"nominalQuota": 16}}})
    assert teams_from(platform).policies.teams[0].quotaLimits == {"nvidia.com/gpu": "80"}


def test_a_topology_no_team_flavor_uses_has_no_node_labels_or_tolerations() -> None:
    platform = platform_with({"queue": {}, "topology": {"mode": "required", "level": "rack", "topologyName": "other"}})
    platform["topologies"].append({"name": "other", "levels": ["rack", HOST]})
    placement = teams_from(platform).policies.teams[0].topology
    assert placement is not None
    assert (placement.topologyName, placement.levels, placement.nodeLabels, placement.tolerations) == (
        "other",
        ["rack", HOST],
        {},
        [],
    )


def test_topology_mode_none_means_no_topology_rule() -> None:
    assert teams_from(platform_with({"queue": {}, "topology": {"mode": "none"}})).policies.teams[0].topology is None


def test_a_priority_rule_without_default_has_none_under_hyperpod_naming() -> None:
    platform = platform_with({"queue": {}, "kueuePriority": {"allowed": ["low"]}})
    platform["naming"] = "hyperpod"
    rule = teams_from(platform).policies.teams[0].kueuePriority
    assert rule is not None
    assert (rule.default, rule.allowed) == (None, ["low-priority"])


# -- Kueue's view of an AppWrapper -----------------------------------------------------------------------


def _template(gpus: int) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}


def test_appwrapper_podsets_are_the_declared_ones_else_the_inner_kinds() -> None:
    row = find_kind("workload.codeflare.dev/v1beta2", "AppWrapper")
    assert row is not None
    declared = [
        {"path": "template.spec.template", "replicas": 3},
        {"path": "template.spec.other"},  # no replicas: one pod
        {"replicas": 1},  # no path: not a podset
        "junk",
        {"path": "template.spec.missing"},  # nothing there
    ]
    wrapper = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "AW"},
        "spec": {
            "components": [
                {
                    "podSets": declared,
                    "template": {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "spec": {"template": _template(2), "other": _template(1)},
                    },
                },
                {
                    "template": {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "spec": {"parallelism": 2, "template": _template(8)},
                    }
                },
                {"template": {"apiVersion": "v1", "kind": "ConfigMap"}},
                {
                    "podSets": [{"path": "template.spec.pods[1].t", "replicas": 4}],
                    "template": {"apiVersion": "x/v1", "kind": "Thing", "spec": {"pods": [{}, {"t": _template(4)}]}},
                },
                "junk",
                {"template": "junk"},
            ]
        },
    }
    component = ("spec", "components")
    assert [(p.name, p.path, p.count, p.requests) for p in kueue_view(wrapper, row).podsets] == [
        ("aw-0", (*component, 0, "template", "spec", "template"), 3, {"nvidia.com/gpu": Decimal(2)}),
        ("aw-1", (*component, 0, "template", "spec", "other"), 1, {"nvidia.com/gpu": Decimal(1)}),
        ("aw-2", (*component, 1, "template", "spec", "template"), 2, {"nvidia.com/gpu": Decimal(8)}),
        ("aw-3", (*component, 3, "template", "spec", "pods", 1, "t"), 4, {"nvidia.com/gpu": Decimal(4)}),
    ]


def test_appwrapper_declared_paths_index_lists_and_maps() -> None:
    row = find_kind("workload.codeflare.dev/v1beta2", "AppWrapper")
    assert row is not None
    template = {
        "apiVersion": "x/v1",
        "kind": "Thing",
        "spec": {"grid": [[{}, {}], [{}, _template(1)]], "byName": {"w": _template(2)}},
    }
    declared = [{"path": "template.spec.grid[1][1]"}, {"path": "template.spec.byName[w]"}]
    wrapper = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "aw"},
        "spec": {"components": [{"podSets": declared, "template": template}]},
    }
    base = ("spec", "components", 0, "template", "spec")
    assert [(p.path, p.requests) for p in kueue_view(wrapper, row).podsets] == [
        ((*base, "grid", 1, 1), {"nvidia.com/gpu": Decimal(1)}),
        ((*base, "byName", "w"), {"nvidia.com/gpu": Decimal(2)}),
    ]


def test_a_rayjobs_default_submitter_is_counted_but_not_present() -> None:
    row = find_kind("ray.io/v1", "RayJob")
    assert row is not None
    rayjob = _rayjob()
    rayjob["spec"]["submissionMode"] = "K8sJobMode"
    podsets = kueue_view(rayjob, row).podsets
    assert [(p.name, p.path, p.count, p.present) for p in podsets] == [
        ("head", ("spec", "rayClusterSpec", "headGroupSpec", "template"), 1, True),
        ("submitter", ("spec", "submitterPodTemplate"), 1, False),
    ]
    submitter = podsets[1]
    assert (submitter.base, submitter.requests, submitter.rule.name) == (
        {},
        {"cpu": Decimal("0.5"), "memory": Decimal(200 * 2**20)},
        "submitter",
    )
    rayjob["spec"]["submitterPodTemplate"] = _template(1)
    assert [(p.name, p.present) for p in kueue_view(rayjob, row).podsets] == [("head", True), ("submitter", True)]


def test_a_jobs_podset_runs_min_of_parallelism_and_completions() -> None:
    row = find_kind("batch/v1", "Job")
    assert row is not None
    for parallelism, completions, count in ((1, 3, 1), (8, 2, 2), (4, None, 4)):
        spec: dict[str, Any] = {"parallelism": parallelism, "template": _template(1)}
        if completions is not None:
            spec["completions"] = completions
        obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": spec}
        assert [p.count for p in kueue_view(obj, row).podsets] == [count]


def test_appwrapper_components_of_the_wrong_shape_are_skipped_not_the_rest() -> None:
    row = find_kind("workload.codeflare.dev/v1beta2", "AppWrapper")
    assert row is not None
    job_template = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"parallelism": 2, "template": _template(8)}}
    wrapper = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {},  # no name yet (generateName): podsets are named by kind
        "spec": {
            "components": [
                {"template": "junk"},
                {"podSets": ["junk", {"path": "template.spec.template", "replicas": 5}], "template": job_template},
                {"podSets": {"not": "a list"}, "template": job_template},  # malformed: named, not sized
            ]
        },
    }
    component = ("spec", "components")
    view = kueue_view(wrapper, row)
    assert [(p.name, p.path, p.count) for p in view.podsets] == [
        ("Job/main", (*component, 1, "template", "spec", "template"), 5),
    ]
    assert (*component, 2, "podSets") in [problem.path for problem in view.problems]


def test_podset_fields_of_the_wrong_type_count_as_absent() -> None:
    row = find_kind("batch/v1", "Job")
    assert row is not None
    obj = _gpu_job(2, affinity={"nodeAffinity": {TERMS[-1]: {"nodeSelectorTerms": {"a": 1}}}})
    obj["spec"]["template"]["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-group-name": 5}}
    [podset] = kueue_view(obj, row).podsets
    assert (podset.affinity_terms, podset.group) == (None, None)


def test_bound_paths_are_remembered_per_pattern_and_bindings_and_forgotten_when_full() -> None:
    from webhook.core.objects import paths

    pattern = ("spec", "replicatedJobs", "*", "template", "*")
    assert paths.bound(pattern, (1, "a")) == ("spec", "replicatedJobs", 1, "template", "a")
    assert paths.bound(pattern, (2, "a")) == ("spec", "replicatedJobs", 2, "template", "a")
    assert paths.bound(("x", "*"), (1,)) == ("x", 1)
    assert paths.bound(pattern, (1, "a")) == ("spec", "replicatedJobs", 1, "template", "a")
    assert paths.bound(pattern, ()) is pattern
    for index in range(paths._BOUND_MAX + 10):
        assert paths.bound(("n", "*"), (index,)) == ("n", index)
    assert len(paths._BOUND) <= paths._BOUND_MAX


def test_made_builds_a_frozen_dataclass_as_its_init_would_and_names_a_missing_field() -> None:
    from webhook.core.objects.frozen import made

    built = made(Change, op="add", path=("a",), value=1, rule="queue", reason="r")
    assert built == Change("add", ("a",), 1, "queue", "r")
    assert hash(built) == hash(Change("add", ("a",), 1, "queue", "r"))
    with pytest.raises(TypeError, match=r"Change fields \['reason'\] missing or unknown"):
        made(Change, op="add", path=("a",), value=1, rule="queue")
    with pytest.raises(TypeError, match=r"Change fields \['extra'\] missing or unknown"):
        made(Change, op="add", path=("a",), value=1, rule="queue", reason="r", extra=2)
