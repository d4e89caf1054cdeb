"""Nodes down for now are nodes of the cluster: never "can never be admitted" because of them.

Defect: right after a kube-apiserver restart the KWOK nodes could not renew their Leases and were
NotReady for a few seconds; the webhook then refused Jobs of team data-science (topology
``enforce``) with "can never be admitted … the largest holds 0 such pods on an empty cluster".
Kueue v0.19.2's TAS leaves a node out while it is not Ready or is cordoned
(``pkg/cache/scheduler/tas_nodes_cache.go``: ``nodesCache.sync`` deletes it, ``find`` skips it)
and while it carries an untolerated taint (``scheduling_simulator_default.go``:
``FindMatchingUntoleratedTaint``), so such a Job only waits; it is never stranded.

Nodes are the eight recorded from the e2e cluster (``tests/data/why/bundled.json``: KWOK
p5.48xlarge nodes, 2 blocks × 2 racks × 2 hosts × 8 GPUs), changed as Kubernetes changes them:
the node lifecycle controller sets every condition to ``Unknown`` and taints the node
``node.kubernetes.io/unreachable`` when the kubelet stops renewing its Lease; ``kubectl cordon``
sets ``spec.unschedulable`` and the controller taints ``node.kubernetes.io/unschedulable``; the
kubelet's memory pressure brings ``node.kubernetes.io/memory-pressure``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import AWS_LEVELS, bundled_teams, job, platform_with, review_body, teams_from

from webhook.core.admission.review import review
from webhook.core.kueue.inventory import TRANSIENT_TAINTS, NodeInventory
from webhook.core.plan.patch import apply_patch

RECORDED = Path(__file__).resolve().parent / "data" / "why" / "bundled.json"
NAMESPACE = "hyperpod-ns-data-science"  # team data-science: required layer-3 (rack), enforce
RACK, BLOCK = AWS_LEVELS[2], AWS_LEVELS[1]
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
#: One host of each rack.
ONE_PER_RACK = ("gpu-1-1-1-1", "gpu-1-1-2-1", "gpu-1-2-1-1", "gpu-1-2-2-1")
ALL = ("gpu-1-1-1-1", "gpu-1-1-1-2", "gpu-1-1-2-1", "gpu-1-1-2-2", "gpu-1-2-1-1", "gpu-1-2-1-2", "gpu-1-2-2-1")


def unreachable(node: dict[str, Any]) -> None:
    """The node lifecycle controller, once the node's Lease is not renewed (``NodeStatusUnknown``)."""
    for condition in node["status"]["conditions"]:
        condition.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.")
    node["spec"]["taints"] = [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
    ]


def not_ready(node: dict[str, Any]) -> None:
    """The kubelet reports Ready False; the controller taints ``node.kubernetes.io/not-ready``."""
    for condition in node["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(status="False", reason="KubeletNotReady")
    node["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]


def cordoned(node: dict[str, Any]) -> None:
    """``kubectl cordon``, then the controller's taint."""
    node["spec"]["unschedulable"] = True
    node["spec"]["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]


def memory_pressure(node: dict[str, Any]) -> None:
    """Ready, but the kubelet reports MemoryPressure and the controller taints the node."""
    for condition in node["status"]["conditions"]:
        if condition["type"] == "MemoryPressure":
            condition.update(status="True", reason="KubeletHasInsufficientMemory")
    node["spec"]["taints"] = [{"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}]


def maintenance(node: dict[str, Any]) -> None:
    """A user's own taint: not a passing state."""
    node["spec"]["taints"] = [{"key": "example.com/maintenance", "value": "yes", "effect": "NoSchedule"}]


Change = Callable[[dict[str, Any]], None]


def nodes(names: tuple[str, ...] = (), change: Change | None = None, every: bool = False) -> NodeInventory:
    """The recorded nodes, ``change`` applied to those named (all of them with ``every``)."""
    items = copy.deepcopy(json.loads(RECORDED.read_text())["nodes"])
    assert len(items) == 8
    for node in items:
        node.setdefault("spec", {})
        if change is not None and (every or node["metadata"]["name"] in names):
            change(node)
    return NodeInventory.from_objects(items)


def ds_job(pods: int) -> dict[str, Any]:
    """A Job of team data-science: ``pods`` pods of 8 GPUs (a rack holds 2)."""
    obj = job()
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "hyperpod-ns-data-science-localqueue"}
    obj["spec"]["parallelism"] = pods
    obj["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "8", "nvidia.com/gpu": "8"},
        "limits": {"nvidia.com/gpu": "8"},
    }
    return obj


def topology_findings(outcome: Any) -> list[str]:
    return [m for m in [*outcome.plan.denials, *outcome.plan.warnings] if m.startswith("topology")]


@pytest.mark.parametrize("change", [unreachable, not_ready, cordoned, memory_pressure])
def test_a_job_is_not_refused_while_every_node_is_down_for_now(change: Change) -> None:
    """The failing input: every node down, a data-science Job of 2 × 8 GPUs required in one rack."""
    inventory = nodes(change=change, every=True)
    assert [n.schedulable and not n.transient_taints for n in inventory.nodes].count(True) == 0
    outcome = review(review_body(ds_job(2), NAMESPACE), bundled_teams(), inventory=inventory)
    assert outcome.plan.allowed and outcome.plan.denials == []
    state = {
        unreachable: "8 not Ready",
        not_ready: "8 not Ready",
        cordoned: "8 cordoned",
        memory_pressure: "8 tainted node.kubernetes.io/* (pressure, network, not-ready)",
    }[change]
    assert topology_findings(outcome) == [
        "topology: podset 'main' cannot be admitted until nodes come back: all its pods (2 pods of {cpu: 8, "
        f"nvidia.com/gpu: 8}}) must fit in one {RACK} domain, and the largest holds 0 such pods on the nodes "
        f"Ready and schedulable now; 8 of the team's nodes are down now ({state}), and it fits once 2 of them "
        f"are Ready and schedulable (e.g. in {RACK} nn-rack-1-1-1)"
    ]
    assert apply_patch(ds_job(2), outcome.patch)["spec"]["template"]["metadata"]["annotations"][REQUIRED] == RACK


def test_a_job_fitting_only_on_the_nodes_down_now_waits_for_them() -> None:
    """One host of each rack cordoned: no rack holds 2 pods now; once uncordoned each does."""
    outcome = review(review_body(ds_job(2), NAMESPACE), bundled_teams(), inventory=nodes(ONE_PER_RACK, cordoned))
    assert outcome.plan.denials == []
    assert topology_findings(outcome) == [
        "topology: podset 'main' cannot be admitted until nodes come back: all its pods (2 pods of {cpu: 8, "
        f"nvidia.com/gpu: 8}}) must fit in one {RACK} domain, and the largest holds 1 such pods on the nodes "
        "Ready and schedulable now; 4 of the team's nodes are down now (4 cordoned), and it fits once 1 of them "
        f"is Ready and schedulable (e.g. in {RACK} nn-rack-1-1-1)"
    ]


def test_the_same_job_is_silent_with_every_node_up() -> None:
    outcome = review(review_body(ds_job(2), NAMESPACE), bundled_teams(), inventory=nodes())
    assert outcome.plan.allowed and topology_findings(outcome) == []


@pytest.mark.parametrize("change", [None, unreachable, cordoned, memory_pressure])
def test_a_job_too_large_even_counting_every_node_is_still_refused(change: Change | None) -> None:
    """3 × 8 GPUs in one rack of 2 hosts: no node coming back helps; the figure counts them all."""
    inventory = nodes(change=change, every=True)
    outcome = review(review_body(ds_job(3), NAMESPACE), bundled_teams(), inventory=inventory)
    assert not outcome.plan.allowed
    assert topology_findings(outcome) == [
        "topology: podset 'main' can never be admitted: all its pods (3 pods of {cpu: 8, nvidia.com/gpu: 8}) "
        f"must fit in one {RACK} domain, and the largest holds 2 such pods on an empty cluster"
    ]


def test_a_users_own_taint_is_no_passing_state() -> None:
    """Every node tainted ``example.com/maintenance``, which neither pod nor flavor tolerates: refused."""
    outcome = review(
        review_body(ds_job(2), NAMESPACE), bundled_teams(), inventory=nodes(change=maintenance, every=True)
    )
    assert not outcome.plan.allowed
    assert topology_findings(outcome) == [
        "topology: podset 'main' can never be admitted: all its pods (2 pods of {cpu: 8, nvidia.com/gpu: 8}) "
        f"must fit in one {RACK} domain, and the largest holds 0 such pods on an empty cluster"
    ]


def test_settled_passes_only_the_passing_states() -> None:
    inventory = nodes(ALL, maintenance)
    assert inventory.settled() is inventory  # nothing down: no copy
    down = nodes(("gpu-1-1-1-1",), unreachable)
    settled = down.settled()
    assert [n.schedulable for n in down.nodes].count(False) == 1
    assert all(n.schedulable and n.ready and not n.cordoned and not n.taints for n in settled.nodes)
    assert settled.settled() is settled and down.settled() is settled
    assert down.unavailable({"node.kubernetes.io/instance-type": "p5.48xlarge"}, AWS_LEVELS) == {"not Ready": 1}
    assert down.unavailable({"node.kubernetes.io/instance-type": "other"}) == {}
    assert len(TRANSIENT_TAINTS) == 7


AUTO = {"queue": {}, "topology": {"mode": "auto"}}


@pytest.mark.parametrize(
    ("names", "change"),
    [((), None), (ONE_PER_RACK, cordoned), (ONE_PER_RACK, unreachable), (ALL, not_ready), (ALL, memory_pressure)],
    ids=["all-up", "cordoned", "unreachable", "all-but-one-not-ready", "memory-pressure"],
)
def test_auto_chooses_the_same_level_while_nodes_are_down_for_now(names: tuple[str, ...], change: Change) -> None:
    """2 × 8 GPUs: one rack (2 hosts) whatever is down this second, so the choice outlives the blip."""
    obj = job()
    outcome = review(review_body(obj, "ml"), teams_from(platform_with(AUTO)), inventory=nodes(names, change))
    assert apply_patch(obj, outcome.patch)["spec"]["template"]["metadata"]["annotations"][REQUIRED] == RACK
    assert outcome.plan.denials == []
    waits = [w for w in outcome.plan.warnings if "until nodes come back" in w]
    assert len(waits) == (0 if change is None else 1)


def test_auto_still_goes_broader_for_a_users_taint() -> None:
    """One host of each rack tainted by the user: those hosts are out for good, so a block."""
    obj = job()
    outcome = review(
        review_body(obj, "ml"), teams_from(platform_with(AUTO)), inventory=nodes(ONE_PER_RACK, maintenance)
    )
    assert apply_patch(obj, outcome.patch)["spec"]["template"]["metadata"]["annotations"][REQUIRED] == BLOCK


def test_an_update_resizing_while_nodes_are_down_is_told_it_waits_not_to_undo() -> None:
    """The UPDATE recheck (``check_admissible``): 1 → 2 pods while every node is unreachable."""
    created = review(review_body(ds_job(1), NAMESPACE), bundled_teams(), inventory=nodes())
    stored = apply_patch(ds_job(1), created.patch)
    stored["spec"]["suspend"] = True
    grown = copy.deepcopy(stored)
    grown["spec"]["parallelism"] = 2
    body = review_body(grown, NAMESPACE, operation="UPDATE", old=stored)
    outcome = review(body, bundled_teams(), inventory=nodes(change=unreachable, every=True))
    assert outcome.plan.allowed and outcome.patch == []
    assert topology_findings(outcome) == [
        "topology: podset 'main' cannot be admitted until nodes come back: all its pods (2 pods of {cpu: 8, "
        f"nvidia.com/gpu: 8}}) must fit in one {RACK} domain, and the largest holds 0 such pods on the nodes "
        "Ready and schedulable now; 8 of the team's nodes are down now (8 not Ready), and it fits once 2 of them "
        f"are Ready and schedulable (e.g. in {RACK} nn-rack-1-1-1); this update changes podset 'main' from 1 to 2 pods"
    ]
    grown["spec"]["parallelism"] = 3  # too large for a rack even with every node back: the advice stays
    outcome = review(body, bundled_teams(), inventory=nodes(change=unreachable, every=True))
    assert [f.rsplit("; ", 1)[1] for f in topology_findings(outcome)] == [
        "this update changes podset 'main' from 1 to 3 pods: set it back, or make the pods fewer or smaller "
        "so that they fit"
    ]


def pytorch(master: int, worker: int) -> dict[str, Any]:
    def template(gpus: int) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p", "labels": {"kueue.x-k8s.io/queue-name": "ml"}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": master, "template": template(8)},
                "Worker": {"replicas": worker, "template": template(4)},
            }
        },
    }


def test_podsets_fitting_together_only_on_the_nodes_down_now_wait_for_them() -> None:
    """4 × 8 GPUs and 8 × 4 GPUs fill the 8 nodes exactly; with 2 cordoned they wait, not "may never"."""
    teams = teams_from(platform_with(AUTO))
    together = review(review_body(pytorch(4, 8), "ml"), teams, inventory=nodes()).plan.warnings
    assert [w for w in together if w.startswith("topology")] == []
    down = nodes(("gpu-1-1-1-1", "gpu-1-1-2-1"), cordoned)
    warnings = review(review_body(pytorch(4, 8), "ml"), teams, inventory=down).plan.warnings
    assert [w for w in warnings if w.startswith("topology")] == [
        "topology: the workload cannot be admitted until nodes come back: its 12 pods ('master' 4 × "
        "{nvidia.com/gpu: 8}, 'worker' 8 × {nvidia.com/gpu: 4}) do not fit the team's 6 nodes Ready and "
        "schedulable now together (4 left over); 2 of the team's nodes are down now (2 cordoned), and once "
        "they are Ready and schedulable they fit"
    ]
    warnings = review(review_body(pytorch(4, 9), "ml"), teams, inventory=down).plan.warnings
    assert [w for w in warnings if "together" in w] == [
        "topology: the workload may never be admitted: its 13 pods ('master' 4 × {nvidia.com/gpu: 8}, 'worker' "
        "9 × {nvidia.com/gpu: 4}) do not fit the team's 8 nodes together on an empty cluster (1 left over)"
    ]


def test_auto_explains_that_it_counted_the_nodes_down_now() -> None:
    obj = job()
    outcome = review(review_body(obj, "ml"), teams_from(platform_with(AUTO)), inventory=nodes(ONE_PER_RACK, cordoned))
    assert outcome.plan.notes == [
        "topology auto: 'main' (2 pods of {nvidia.com/gpu: 8}): 2 pods; the largest domain holds "
        f"{AWS_LEVELS[0]} 8, {BLOCK} 4, {RACK} 2, {AWS_LEVELS[3]} 1; all eligible nodes 8 (counting the 4 not "
        f"Ready, cordoned or tainted node.kubernetes.io/* now) → required {RACK}, the narrowest level one domain "
        f"of which holds them; no slices (no slice size dividing 2 has all its slices in one {RACK} domain)"
    ]


def test_without_a_required_level_the_nodes_needed_are_counted_on_all_the_teams_nodes() -> None:
    """``preferred`` under ``enforce``: 8 pods of 8 GPUs need all 8 hosts; 6 are NotReady."""
    policy = {"queue": {}, "topology": {"mode": "preferred", "level": RACK, "enforcement": "enforce"}}
    obj = job()
    obj["spec"]["parallelism"] = 8
    down = nodes(ALL[:6], not_ready)
    outcome = review(review_body(obj, "ml"), teams_from(platform_with(policy)), inventory=down)
    assert outcome.plan.denials == []
    assert topology_findings(outcome) == [
        "topology: podset 'main' cannot be admitted until nodes come back: its 8 pods of {nvidia.com/gpu: 8} fit "
        "on no set of the team's nodes (they hold 2 such pods on the nodes Ready and schedulable now); 6 of the "
        "team's nodes are down now (6 not Ready), and it fits once 6 of them are Ready and schedulable"
    ]
    obj["spec"]["parallelism"] = 9  # more than the 8 hosts: refused
    outcome = review(review_body(obj, "ml"), teams_from(platform_with(policy)), inventory=down)
    assert [d for d in outcome.plan.denials if d.startswith("topology")] == [
        "topology: podset 'main' can never be admitted: its 9 pods of {nvidia.com/gpu: 8} fit on no set of the "
        "team's nodes (they hold 8 such pods on an empty cluster)"
    ]
