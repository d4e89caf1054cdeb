"""What Kueue v0.19.2 refuses of TAS annotation values, whatever the team's topology rule
(:mod:`webhook.core.plan.rules.kueue_slices`), against the real Kueue.

For each Job (created with ``dryRun=All``: nothing is stored) with a broken multi-layer slice
annotation (``podset-slice-required-topology-constraints``), a level that is no label key, an
unconstrained flag that is no boolean, or required topology on an elastic Job:

* in a namespace of no team (the governor leaves it alone) the real Kueue webhook refuses it,
  with the words the governor quotes;
* in team inference's namespace (topology ``preferred`` under ``default``) the governor warns with
  its finding and lets the Job through to Kueue, which refuses it (the warning arrives with the
  refusal);
* in team research's namespace, with a platform where research has no topology rule (queue rule
  ``enforce``), the governor refuses it with the same finding. These once passed in silence.

A level that is a label key longer than 63 characters passes Kueue's webhook, but Kueue never
creates the Workload (whose CRD holds at most 63), as the governor's finding says. Slice levels
out of order (the first above the podset's level, an inner layer not below its parent) or a layer
level the Topology lacks pass Kueue's webhook, and its scheduler leaves the Workload pending with
its reason; the governor (research: topology under ``default``) warns that Kueue can never admit it.
"""

from __future__ import annotations

import asyncio
import copy
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.dynamic import DynamicClient

from e2e.support import (
    BUNDLED_PLATFORM,
    Cleanup,
    Created,
    Generated,
    Refused,
    create_with_warnings,
    dry_run_attempt,
    pause_pod_spec,
    tas_findings,
    wait_for,
    workload_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

RESEARCH = "hyperpod-ns-research"
INFERENCE = "hyperpod-ns-inference"
K = "kueue.x-k8s.io/"
REQUIRED, UNCONSTRAINED = f"{K}podset-required-topology", f"{K}podset-unconstrained-topology"
LAYERS = f"{K}podset-slice-required-topology-constraints"
BLOCK, RACK, HOST = (
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "kubernetes.io/hostname",
)
GOVERNOR = 'admission webhook "governor.kueue-governor.io" denied the request'
REQUEST = "(Kueue v0.19.2 ValidateTASPodSetRequest); Kueue refuses the workload"


def layers(*pairs: tuple[str, int]) -> str:
    return json.dumps([{"topology": level, "size": size} for level, size in pairs])


def job(annotations: dict[str, str], elastic: bool = False, pods: int = 2) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": f"tasv-{secrets.token_hex(3)}"}
    if elastic:
        metadata["annotations"] = {f"{K}elastic-job": "true"}
    template = {"metadata": {"annotations": annotations}, "spec": pause_pod_spec(0, "100m", "64Mi")}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"parallelism": pods, "completions": pods, "suspend": True, "template": template},
    }


@dataclass(frozen=True)
class Case:
    """``kueue``: words of Kueue's refusal; ``finding``: the governor's finding, whatever the rule."""

    body: dict[str, Any]
    kueue: str
    finding: str


def _cases() -> dict[str, Case]:
    bad_json = '[{"topology": "kubernetes.io/hostname", size: 1}]'
    four = layers((BLOCK, 8), (RACK, 4), (HOST, 2), ("gpu", 1))
    count = "topology constraints must contain between 1 and 3 entries"
    label = (
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
        "alphanumeric character"
    )
    return {
        "layers-not-json": Case(
            job({REQUIRED: BLOCK, LAYERS: bad_json}),
            "must be a valid JSON array",
            f"podset 'main': {LAYERS} {bad_json!r}: must be a valid JSON array: ",
        ),
        "four-layers": Case(
            job({REQUIRED: BLOCK, LAYERS: four}, pods=8),
            count,
            f"podset 'main': {LAYERS} {four!r}: {count}, got 4 {REQUEST}",
        ),
        "layer-size-not-dividing-its-parent": Case(
            job({REQUIRED: BLOCK, LAYERS: layers((RACK, 2), (HOST, 3))}),
            "must evenly divide the parent layer size 2",
            f"podset 'main': {LAYERS}[1].size 3: must evenly divide the parent layer size 2 {REQUEST}",
        ),
        "layer-level-twice": Case(
            job({REQUIRED: BLOCK, LAYERS: layers((HOST, 2), (HOST, 1))}),
            "Duplicate value",
            f"podset 'main': {LAYERS}[1].topology: Duplicate value: {HOST} (also at index 0) {REQUEST}",
        ),
        "first-layer-above-the-pods": Case(
            job({REQUIRED: BLOCK, LAYERS: layers((RACK, 4))}),
            "must not be greater than pod set count 2",
            f"podset 'main': {LAYERS} 4: must not be greater than pod set count 2 "
            "(Kueue v0.19.2 ValidateSliceSizeAnnotationUpperBound); Kueue refuses the workload",
        ),
        "level-no-label-key": Case(
            job({REQUIRED: "rack level"}), label, f"podset 'main': {REQUIRED} 'rack level': {label} {REQUEST}"
        ),
        "unconstrained-not-a-boolean": Case(
            job({UNCONSTRAINED: "yes"}),
            "must be a boolean value",
            f"podset 'main': {UNCONSTRAINED} 'yes': must be a boolean value {REQUEST}",
        ),
        "elastic-job-with-required-topology": Case(
            job({REQUIRED: RACK}, elastic=True),
            "required topology is not supported with elastic jobs",
            f"podset 'main': {REQUIRED} {RACK!r}: required topology is not supported with elastic jobs "
            "(Kueue v0.19.2 JobWebhook.validateTopologyRequest); Kueue refuses the workload",
        ),
    }


CASES = _cases()


def placed(case: Case, namespace: str) -> dict[str, Any]:
    body = copy.deepcopy(case.body)
    body["metadata"].update(namespace=namespace, labels={f"{K}queue-name": f"{namespace}-localqueue"})
    return body


def kueue_refused(outcome: Created | Refused, case: Case) -> None:
    assert isinstance(outcome, Refused), "Kueue admitted it"
    message = str(outcome.status.get("message"))
    assert case.kueue in message and "kueue-governor" not in message, message


def said(found: list[str], case: Case) -> None:
    assert len(found) == 1, found
    assert found[0].startswith(case.finding) if case.finding.endswith(": ") else found[0] == case.finding, found


@pytest.mark.parametrize("name", sorted(CASES))
async def test_kueue_alone_refuses_it(dynamic: DynamicClient, namespace: str, name: str) -> None:
    kueue_refused(await dry_run_attempt(dynamic, placed(CASES[name], namespace)), CASES[name])


@pytest.mark.parametrize("name", sorted(CASES))
async def test_the_governor_warns_under_default_and_kueue_refuses(dynamic: DynamicClient, name: str) -> None:
    case = CASES[name]
    outcome = await dry_run_attempt(dynamic, placed(case, INFERENCE))
    kueue_refused(outcome, case)
    said(tas_findings(outcome.warnings), case)


@pytest.fixture
def no_topology_rule(bundled_config: Generated, governor: Callable[[Path], str], tmp_path: Path) -> str:
    """The bundled platform without research's topology rule: the governor's URL."""
    platform = yaml.safe_load(BUNDLED_PLATFORM.read_text())
    (research,) = [team for team in platform["teams"] if team["name"] == "research"]
    del research["policy"]["topology"]
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(platform))
    return governor(path)


async def test_the_governor_refuses_it_for_a_team_without_a_topology_rule(
    dynamic: DynamicClient, no_topology_rule: str
) -> None:
    """One governor for every case (starting one takes seconds)."""
    for name, case in sorted(CASES.items()):
        outcome = await dry_run_attempt(dynamic, placed(case, RESEARCH))
        assert isinstance(outcome, Refused), f"{name} was admitted"
        message = str(outcome.status.get("message"))
        assert message.startswith(GOVERNOR) and f"topology: {case.finding}" in message, (name, message)


async def test_kueue_never_creates_the_workload_of_a_level_longer_than_63_characters(
    dynamic: DynamicClient, namespace: str
) -> None:
    long = "a-very-long-prefix-for-a-topology-label.example.com/rack-of-the-cluster"
    bodies = [job({REQUIRED: level}) for level in (long[-63:], long)]
    for body in bodies:
        body["metadata"].update(namespace=namespace, labels={f"{K}queue-name": "q"})
    fits, over = [(await create_with_warnings(dynamic, body)).obj for body in bodies]  # Kueue's webhook accepts both
    workload = await wait_for(
        lambda: workload_for(dynamic, namespace, fits["metadata"]["uid"]), "the Workload of 63", timeout=60
    )
    assert workload["spec"]["podSets"][0]["topologyRequest"]["required"] == long[-63:]
    await asyncio.sleep(10)  # well past Kueue's first reconcile of the Job
    assert await workload_for(dynamic, namespace, over["metadata"]["uid"]) is None


async def pending_reason(dynamic: DynamicClient, created: dict[str, Any]) -> str:
    """The message of the Workload's ``QuotaReserved=False`` once Kueue's scheduler has tried it."""

    async def probe() -> str | None:
        workload = await workload_for(dynamic, RESEARCH, created["metadata"]["uid"])
        for item in (workload or {}).get("status", {}).get("conditions") or []:
            if item.get("type") == "QuotaReserved" and item.get("status") == "False" and item.get("message"):
                return str(item["message"])
        return None

    return await wait_for(probe, "Kueue to leave the Workload pending", timeout=90)


ORDER = {
    "slice-level-above-the-required-level": (
        {REQUIRED: RACK, LAYERS: layers((BLOCK, 1))},
        f"podset slice topology {BLOCK} is above the podset topology {RACK}",
        f"podset 'main': {LAYERS}[0].topology {BLOCK!r} is above {REQUIRED} {RACK!r}",
    ),
    "inner-layer-not-below-its-parent": (
        {REQUIRED: BLOCK, LAYERS: layers((HOST, 2), (RACK, 1))},
        f"additional slice layer topology {RACK} must be at a lower level than {HOST}",
        f"podset 'main': {LAYERS}[1].topology {RACK!r} must be a level below {HOST!r}",
    ),
    "layer-level-not-in-the-topology": (
        {REQUIRED: BLOCK, LAYERS: layers((RACK, 2), ("example.com/gpu", 1))},
        "does not contain the requested level",
        f"{LAYERS}[1].topology 'example.com/gpu' (podset 'main') is not a level of Topology",
    ),
}


@pytest.mark.parametrize("name", sorted(ORDER))
async def test_slice_levels_out_of_order_are_warned_and_never_admitted(
    dynamic: DynamicClient, cleanup: Cleanup, name: str
) -> None:
    """Kueue's webhook accepts these (it cannot see the Topology), its scheduler never places them;
    the governor (research: topology under ``default``) warns that Kueue can never admit them."""
    annotations, kueue, finding = ORDER[name]
    body = cleanup.add(placed(Case(job(annotations), "", ""), RESEARCH))
    created = await create_with_warnings(dynamic, body)
    warned = [w.removeprefix("kueue-governor: topology: ") for w in created.warnings if "Kueue can never admit" in w]
    assert len(warned) == 1 and warned[0].startswith(finding), created.warnings
    reason = await pending_reason(dynamic, created.obj)
    assert kueue in reason, reason
