"""Kueue's podset group rules give the same finding on CREATE and on an UPDATE's recheck.

Both paths report :func:`webhook.core.plan.rules.kueue_tas.kueue_tas_findings`; the UPDATE adds what the
update changed. A JobSet (whose Kueue v0.19.2 webhook runs ``ValidatePodSetGroupingTopology``) of a
driver of 1 pod and workers of 3 pods of 8 GPUs grouped as 'g' at network-node-layer-3, in team
'research' of the bundled platform (topology under ``default``: warnings) on ``examples/nodes.json``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from support import REPO, bundled_teams, review_body

from webhook.core.admission.review import ReviewOutcome, review
from webhook.core.kueue.inventory import NodeInventory
from webhook.core.plan.patch import apply_patch

NS = "hyperpod-ns-research"
K = "kueue.x-k8s.io/"
GROUP, REQUIRED, PREFERRED = f"{K}podset-group-name", f"{K}podset-required-topology", f"{K}podset-preferred-topology"
SLICE_LEVEL, SLICE_SIZE = f"{K}podset-slice-required-topology", f"{K}podset-slice-size"
L3, HOST = "topology.k8s.aws/network-node-layer-3", "kubernetes.io/hostname"
INVENTORY = NodeInventory.from_objects(json.loads((REPO / "examples" / "nodes.json").read_text())["items"])
GROUPING = "(Kueue v0.19.2 ValidatePodSetGroupingTopology); Kueue refuses the workload"
REQUEST = "(Kueue v0.19.2 ValidateTASPodSetRequest); Kueue refuses the workload"


def replicated_job(name: str, pods: int, annotations: dict[str, str]) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    return {
        "name": name,
        "replicas": 1,
        "template": {
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "template": {
                    "metadata": {"annotations": annotations},
                    "spec": {"restartPolicy": "Never", "containers": [container]},
                },
            }
        },
    }


def stored_jobset() -> dict[str, Any]:
    """The JobSet as CREATE leaves it: a valid group 'g' (driver 1 pod + workers 3 pods, both
    required at the rack) and a lone 'extra' podset of 1 pod required on one host."""
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "labels": {f"{K}queue-name": f"{NS}-localqueue"}},
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                replicated_job("driver", 1, {GROUP: "g", REQUIRED: L3}),
                replicated_job("workers", 3, {GROUP: "g", REQUIRED: L3}),
                replicated_job("extra", 1, {REQUIRED: HOST}),
            ],
        },
    }
    created = create(jobset)
    assert created.plan.allowed and created.plan.warnings == []
    return apply_patch(jobset, created.patch)


def create(obj: dict[str, Any]) -> ReviewOutcome:
    return review(review_body(obj, NS), bundled_teams(), inventory=INVENTORY)


def update(stored: dict[str, Any], updated: dict[str, Any]) -> ReviewOutcome:
    body = review_body(updated, NS, operation="UPDATE", old=stored)
    return review(body, bundled_teams(), inventory=INVENTORY)


def annotations(obj: dict[str, Any], index: int) -> dict[str, str]:
    metadata: dict[str, Any] = obj["spec"]["replicatedJobs"][index]["template"]["spec"]["template"]["metadata"]
    return metadata["annotations"]  # type: ignore[no-any-return]


def three_in_the_group(obj: dict[str, Any]) -> str:
    annotations(obj, 2).update({GROUP: "g", REQUIRED: L3})
    return f"changes podset 'extra''s {REQUIRED} from '{HOST}' to '{L3}'; sets podset 'extra''s {GROUP} to 'g'"


def two_pods_each(obj: dict[str, Any]) -> str:
    obj["spec"]["replicatedJobs"][0]["template"]["spec"].update(parallelism=2, completions=2)
    return "changes podset 'driver' from 1 to 2 pods"


def levels_differ(obj: dict[str, Any]) -> str:
    annotations(obj, 1)[REQUIRED] = HOST
    return f"changes podset 'workers''s {REQUIRED} from '{L3}' to '{HOST}'"


def slices_in_the_group(obj: dict[str, Any]) -> str:
    annotations(obj, 1).update({SLICE_LEVEL: HOST, SLICE_SIZE: "1"})
    return f"sets podset 'workers''s {SLICE_LEVEL} to '{HOST}'; sets podset 'workers''s {SLICE_SIZE} to '1'"


def numeric_name(obj: dict[str, Any]) -> str:
    annotations(obj, 0)[GROUP] = annotations(obj, 1)[GROUP] = "123"
    return f"changes podset 'driver''s {GROUP} from 'g' to '123'; changes podset 'workers''s {GROUP} from 'g' to '123'"


CASES: list[tuple[str, Callable[[dict[str, Any]], str], list[str]]] = [
    (
        "three-podsets-in-a-group",
        three_in_the_group,
        [
            f"podset 'driver' + 'workers' + 'extra': {GROUP} 'g': can only define groups of exactly 2 pod sets, "
            f"got: 3 pod set(s) {GROUPING}"
        ],
    ),
    (
        "two-podsets-of-2-pods",
        two_pods_each,
        [
            f"podset 'driver' + 'workers': {GROUP} 'g': can only define groups where at least one pod set has only "
            f"1 replica, got: 2 replica(s) and 3 replica(s) in the group {GROUPING}"
        ],
    ),
    (
        "levels-differ",
        levels_differ,
        [
            f"podset 'driver' + 'workers': must specify '{REQUIRED}' or '{PREFERRED}' topology consistent with "
            f"each other in group 'g' {GROUPING}"
        ],
    ),
    (
        "slice-annotations-in-a-group",
        slices_in_the_group,
        [
            f"podset 'workers': {GROUP} 'g': may not be set when '{SLICE_SIZE}' is specified {REQUEST}",
            f"podset 'workers': {GROUP} 'g': may not be set when '{SLICE_LEVEL}' is specified {REQUEST}",
        ],
    ),
    (
        "numeric-group-name",
        numeric_name,
        [
            f"podset 'driver': {GROUP} '123': must not be a number {REQUEST}",
            f"podset 'workers': {GROUP} '123': must not be a number {REQUEST}",
        ],
    ),
]


def kueue_findings(messages: list[str]) -> list[str]:
    return [m.removeprefix("topology: ") for m in messages if "(Kueue v0.19.2 " in m]


@pytest.mark.parametrize(("breaks", "findings"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_create_and_update_give_the_same_group_finding(
    breaks: Callable[[dict[str, Any]], str], findings: list[str]
) -> None:
    stored = stored_jobset()
    broken = copy.deepcopy(stored)
    changed = breaks(broken)
    created = create(copy.deepcopy(broken))
    assert created.plan.allowed  # topology under `default`: warned
    assert kueue_findings(created.plan.warnings) == findings
    updated = update(stored, broken)
    assert updated.plan.allowed and updated.patch == []
    assert kueue_findings(updated.plan.warnings) == [f"{f}; this update {changed}: set it back" for f in findings]


def test_an_update_that_breaks_no_group_rule_gets_no_kueue_finding() -> None:
    """The control: the workers grown from 3 to 4 pods still make a group Kueue takes (one podset of 1 pod)."""
    stored = stored_jobset()
    grown = copy.deepcopy(stored)
    grown["spec"]["replicatedJobs"][1]["template"]["spec"].update(parallelism=4, completions=4)
    updated = update(stored, grown)
    assert updated.plan.allowed and kueue_findings(updated.plan.warnings) == []
