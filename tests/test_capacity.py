"""What counts as capacity and what one pod needs: node eligibility, team selection by namespace
labels, and per-pod requests with init containers.

Nodes are the eight recorded from the e2e cluster (``tests/data/why/bundled.json``: kube-apiserver
with KWOK p5.48xlarge nodes, 1 spine × 2 blocks × 2 racks × 2 hosts × 8 GPUs), changed the way
``kubectl cordon`` and ``kubectl taint`` change them. The rules are Kueue v0.19.2's TAS
(``pkg/cache/scheduler/tas_nodes_cache.go``: a node counts only when Ready and not
``spec.unschedulable``, whatever the pod tolerates; untolerated ``NoSchedule``/``NoExecute`` taints
exclude it) and ``k8s.io/component-helpers/resource`` v0.36.2 ``PodRequests`` (Kueue's go.mod):
app containers summed, sidecar init containers (``restartPolicy: Always``) added, the pod needing at
least the largest plain init container plus the sidecars started before it, then the overhead.
"""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from support import AWS_LEVELS, job, platform_with, review_body, teams_from

from webhook.core.admission.review import review
from webhook.core.kueue.inventory import NodeInventory, PodConstraints
from webhook.core.kueue.resources import pod_requests
from webhook.core.plan.patch import apply_patch
from webhook.core.platform.platform import LabelSelector
from webhook.core.platform.resolve import selector_matches

RECORDED = Path(__file__).resolve().parent / "data" / "why" / "bundled.json"
GPU = "nvidia.com/gpu"
EIGHT_GPUS = {GPU: Decimal(8)}
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
HOST, RACK, BLOCK = AWS_LEVELS[3], AWS_LEVELS[2], AWS_LEVELS[1]
AUTO = {"queue": {}, "topology": {"mode": "auto"}}
#: One host of each rack (four nodes, one per rack).
ONE_PER_RACK = ("gpu-1-1-1-1", "gpu-1-1-2-1", "gpu-1-2-1-1", "gpu-1-2-2-1")
#: largest_domain of 8-GPU pods (spine, block, rack, host, all nodes) for all eight nodes ...
ALL_EIGHT = [8, 4, 2, 1, 8]
#: ... and with one host of each rack out.
HALF = [4, 2, 1, 1, 4]
#: What the node lifecycle controller adds to a cordoned node (kubectl cordon sets spec.unschedulable).
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def recorded_nodes() -> list[dict[str, Any]]:
    nodes = json.loads(RECORDED.read_text())["nodes"]
    assert [n["metadata"]["name"] for n in nodes][:1] == ["gpu-1-1-1-1"] and len(nodes) == 8
    return copy.deepcopy(nodes)


def changed(names: tuple[str, ...], **spec: Any) -> NodeInventory:
    """The recorded nodes, with ``spec`` set on those named."""
    nodes = recorded_nodes()
    for node in nodes:
        if node["metadata"]["name"] in names:
            node["spec"] = copy.deepcopy(spec)
    return NodeInventory.from_objects(nodes)


def largest(inventory: NodeInventory, tolerations: list[dict[str, Any]] | None = None, **kw: Any) -> list[int]:
    pod = PodConstraints(requests=EIGHT_GPUS, tolerations=tolerations or [])
    return inventory.largest_domain(AWS_LEVELS, {"node.kubernetes.io/instance-type": "p5.48xlarge"}, pod, **kw)


def auto_level(obj: dict[str, Any], inventory: NodeInventory) -> dict[str, str]:
    outcome = review(review_body(obj, "ml"), teams_from(platform_with(AUTO)), inventory=inventory)
    patched = apply_patch(obj, outcome.patch)
    annotations: dict[str, str] = patched["spec"]["template"]["metadata"]["annotations"]
    return annotations


# -- cordoned nodes ------------------------------------------------------------------------------
def test_recorded_nodes_all_count() -> None:
    assert largest(changed(())) == ALL_EIGHT


@pytest.mark.parametrize(
    "spec",
    [
        {"unschedulable": True},  # as the API shows it right after `kubectl cordon`
        {"unschedulable": True, "taints": [UNSCHEDULABLE_TAINT]},  # once the controller has tainted it
    ],
    ids=["cordoned", "cordoned-and-tainted"],
)
def test_cordoned_nodes_are_no_capacity_even_to_a_pod_tolerating_every_taint(spec: dict[str, Any]) -> None:
    inventory = changed(ONE_PER_RACK, **spec)
    assert largest(inventory) == HALF
    # Kueue's TAS drops unschedulable nodes before looking at taints: tolerating them gives nothing back.
    assert largest(inventory, tolerations=[{"operator": "Exists"}]) == HALF
    assert [n.schedulable for n in inventory.nodes].count(False) == 4


def test_cordoned_nodes_leave_the_auto_level_as_it_is() -> None:
    """A cordon passes (:mod:`webhook.core.plan.rules.auto`): 2 pods of 8 GPUs still get a rack of two
    hosts when every rack lost a host to a cordon (the Job waits for it; test_transient_nodes.py)."""
    two = job()
    assert auto_level(copy.deepcopy(two), changed(())) == {REQUIRED: RACK}
    assert auto_level(copy.deepcopy(two), changed(ONE_PER_RACK, unschedulable=True)) == {REQUIRED: RACK}


# -- tainted nodes -------------------------------------------------------------------------------
TAINT_KEY = "example.com/maintenance"


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
@pytest.mark.parametrize(
    ("tolerations", "flavor_tolerations", "expected"),
    [
        ([], [], HALF),
        ([{"key": TAINT_KEY, "operator": "Exists"}], [], ALL_EIGHT),
        ([{"key": TAINT_KEY, "operator": "Equal", "value": "yes"}], [], ALL_EIGHT),
        ([{"key": TAINT_KEY, "operator": "Equal", "value": "no"}], [], HALF),
        ([{"key": "example.com/other", "operator": "Exists"}], [], HALF),
        ([], [{"key": TAINT_KEY, "operator": "Exists"}], ALL_EIGHT),
        ([{"operator": "Exists"}], [], ALL_EIGHT),
    ],
    ids=["untolerated", "pod-exists", "pod-equal", "pod-other-value", "pod-other-key", "flavor", "pod-everything"],
)
def test_untolerated_blocking_taints_are_no_capacity(
    effect: str, tolerations: list[dict[str, Any]], flavor_tolerations: list[dict[str, Any]], expected: list[int]
) -> None:
    inventory = changed(ONE_PER_RACK, taints=[{"key": TAINT_KEY, "value": "yes", "effect": effect}])
    assert largest(inventory, tolerations, flavor_tolerations=flavor_tolerations) == expected


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_a_toleration_of_the_other_effect_does_not_tolerate(effect: str) -> None:
    other = "NoExecute" if effect == "NoSchedule" else "NoSchedule"
    inventory = changed(ONE_PER_RACK, taints=[{"key": TAINT_KEY, "value": "yes", "effect": effect}])
    assert largest(inventory, [{"key": TAINT_KEY, "operator": "Exists", "effect": other}]) == HALF
    assert largest(inventory, [{"key": TAINT_KEY, "operator": "Exists", "effect": effect}]) == ALL_EIGHT


def test_prefer_no_schedule_taints_still_count() -> None:
    inventory = changed(ONE_PER_RACK, taints=[{"key": TAINT_KEY, "value": "yes", "effect": "PreferNoSchedule"}])
    assert largest(inventory) == ALL_EIGHT


def test_no_execute_taints_move_auto_to_a_broader_level() -> None:
    taint = {"key": "example.com/maintenance", "effect": "NoExecute"}
    assert auto_level(job(), changed(ONE_PER_RACK, taints=[taint])) == {REQUIRED: BLOCK}
    # Kubernetes' own node.kubernetes.io/unreachable passes with the outage: the level stays.
    transient = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
    assert auto_level(job(), changed(ONE_PER_RACK, taints=[transient])) == {REQUIRED: RACK}


def test_not_ready_nodes_are_no_capacity() -> None:
    nodes = recorded_nodes()
    for node in nodes:
        if node["metadata"]["name"] in ONE_PER_RACK:
            for condition in node["status"]["conditions"]:
                if condition["type"] == "Ready":
                    condition["status"] = "Unknown"  # what the node controller sets when the kubelet stops posting
    assert largest(NodeInventory.from_objects(nodes)) == HALF


# -- teams selected by namespace labels ----------------------------------------------------------
NOT_PROD = {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod", "staging"]}]}


@pytest.mark.parametrize(
    ("labels", "matches"),
    [
        ({"env": "dev"}, True),
        ({}, True),  # NotIn matches a namespace without the label (Kubernetes' rule)
        ({"env": "prod"}, False),
        ({"env": "staging"}, False),
    ],
)
def test_not_in_selector(labels: dict[str, str], matches: bool) -> None:
    assert selector_matches(LabelSelector.model_validate(NOT_PROD), labels) is matches


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]}, {"env": "dev"}, True),
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]}, {}, False),
        ({"matchExpressions": [{"key": "env", "operator": "Exists"}]}, {"env": ""}, True),
        ({"matchExpressions": [{"key": "env", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}, {"env": "x"}, False),
        ({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}, {}, True),
        ({"matchLabels": {"team": "ml"}, **NOT_PROD}, {"team": "ml", "env": "prod"}, False),
        ({"matchLabels": {"team": "ml"}, **NOT_PROD}, {"team": "ml"}, True),
        ({}, {"anything": "x"}, True),
    ],
)
def test_selector_operators(selector: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    assert selector_matches(LabelSelector.model_validate(selector), labels) is matches


def test_team_selecting_by_not_in_leaves_the_excluded_namespaces_alone() -> None:
    selector = {"matchLabels": {"team": "ml"}, **NOT_PROD}
    teams = teams_from(platform_with({"queue": {}}, namespaces=[], namespaceSelector=selector))
    labels = {"ml-dev": {"team": "ml", "env": "dev"}, "ml-prod": {"team": "ml", "env": "prod"}, "ml-x": {"team": "ml"}}
    for namespace, team in [("ml-dev", "ml"), ("ml-x", "ml"), ("ml-prod", None)]:
        outcome = review(review_body(job(), namespace), teams, labels.get)
        assert (outcome.resolution.team.team if outcome.resolution.team else None) == team, namespace
        queued = any(op["path"] == "/metadata/labels" for op in outcome.patch)
        assert queued is (team is not None), namespace


# -- init containers -----------------------------------------------------------------------------
def c(name: str, restart: str | None = None, limits: dict[str, str] | None = None, **requests: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "x", "resources": {"requests": dict(requests)}}
    if limits:
        container["resources"]["limits"] = limits
    if restart:
        container["restartPolicy"] = restart
    return container


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # A plain init container larger than the app containers sets the pod's request, per resource.
        (
            {"containers": [c("a", cpu="1", memory="1Gi")], "initContainers": [c("i", cpu="4")]},
            {"cpu": Decimal(4), "memory": Decimal(2**30)},
        ),
        # Plain init containers run one after the other: the largest counts, not their sum.
        (
            {"containers": [c("a", cpu="1")], "initContainers": [c("i", cpu="3"), c("j", cpu="4")]},
            {"cpu": Decimal(4)},
        ),
        # An init container's limits stand in for its missing requests.
        (
            {"containers": [c("a", **{GPU: "1"})], "initContainers": [c("i", limits={GPU: "8"})]},
            {GPU: Decimal(8)},
        ),
        # A sidecar started after a plain init container does not run beside it.
        (
            {"containers": [c("a", cpu="1")], "initContainers": [c("i", cpu="4"), c("s", "Always", cpu="1")]},
            {"cpu": Decimal(4)},
        ),
        # A sidecar started before it does: 4 + 1.
        (
            {"containers": [c("a", cpu="1")], "initContainers": [c("s", "Always", cpu="1"), c("i", cpu="4")]},
            {"cpu": Decimal(5)},
        ),
        # Sidecars add to the app containers for the pod's whole life.
        (
            {"containers": [c("a", cpu="1")], "initContainers": [c("s", "Always", cpu="2"), c("t", "Always", cpu="3")]},
            {"cpu": Decimal(6)},
        ),
        # The overhead is added after the maximum.
        (
            {"containers": [c("a", cpu="1")], "initContainers": [c("i", cpu="4")], "overhead": {"cpu": "500m"}},
            {"cpu": Decimal("4.5")},
        ),
        # A restartPolicy other than Always is a plain init container.
        (
            {"containers": [c("a", cpu="1")], "initContainers": [c("i", "OnFailure", cpu="2")]},
            {"cpu": Decimal(2)},
        ),
    ],
    ids=[
        "init-wins",
        "max-not-sum",
        "init-limits",
        "sidecar-after",
        "sidecar-before",
        "sidecars",
        "overhead",
        "onfailure",
    ],
)
def test_pod_requests_with_init_containers(spec: dict[str, Any], expected: dict[str, Decimal]) -> None:
    assert pod_requests(spec) == expected


def test_an_init_container_of_a_whole_node_makes_each_pod_take_a_host() -> None:
    """1 GPU per app container, but the init container holds 8: two pods need two hosts (a rack)."""
    two = job()
    pod_spec = two["spec"]["template"]["spec"]
    pod_spec["containers"][0]["resources"]["requests"] = {GPU: "1"}
    assert auto_level(copy.deepcopy(two), changed(())) == {REQUIRED: HOST}
    pod_spec["initContainers"] = [c("warm-up", **{GPU: "8"})]
    assert auto_level(copy.deepcopy(two), changed(())) == {REQUIRED: RACK}
