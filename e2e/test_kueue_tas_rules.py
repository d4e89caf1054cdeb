"""The TAS annotation findings of ``webhook.core.plan.rules.kueue_tas`` against the real Kueue v0.19.2.

For each broken set of TAS annotations on a JobSet, LeaderWorkerSet, PyTorchJob or Pod (all created
with ``dryRun=All``: nothing is stored):

* in a namespace of no team (the governor leaves it alone) the real Kueue webhook decides: it
  refuses the object with its own message, or (a rule its webhook does not check for the kind: a
  PyTorchJob's group, a Pod's slice size above its pods; a slice size that does not divide the
  pods) admits it;
* in team research's namespace (topology under ``default``) the governor warns with Kueue's words
  and lets the object through to Kueue, which then refuses it or not as above (the warning arrives
  with the refusal);
* in team data-science's namespace (topology under ``enforce``) the governor refuses, with its
  own message, what Kueue's webhook refuses, and only warns of what Kueue admits.

An UPDATE that breaks a stored JobSet's group is warned by the governor with the same finding as
CREATE, naming the change, and refused by Kueue with its own words.

The bundled platform's governor (``bundled_governor``) runs throughout.
"""

from __future__ import annotations

import copy
import secrets
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import ConflictError

from e2e.support import (
    Cleanup,
    Created,
    Refused,
    create_with_warnings,
    dry_run_attempt,
    get,
    pause_pod_spec,
    replace_with_warnings,
    tas_findings,
)

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

RESEARCH = "hyperpod-ns-research"
DATA_SCIENCE = "hyperpod-ns-data-science"
K = "kueue.x-k8s.io/"
QUEUE = f"{K}queue-name"
GROUP, REQUIRED, PREFERRED = f"{K}podset-group-name", f"{K}podset-required-topology", f"{K}podset-preferred-topology"
UNCONSTRAINED = f"{K}podset-unconstrained-topology"
SLICE_LEVEL, SLICE_SIZE = f"{K}podset-slice-required-topology", f"{K}podset-slice-size"
RACK, HOST = "topology.k8s.aws/network-node-layer-3", "kubernetes.io/hostname"
GOVERNOR = 'admission webhook "governor.kueue-governor.io" denied the request'
GROUPING = "(Kueue v0.19.2 ValidatePodSetGroupingTopology)"
REQUEST = "(Kueue v0.19.2 ValidateTASPodSetRequest)"
REFUSES = "; Kueue refuses the workload"


def template(annotations: dict[str, str], restart_policy: str = "Never") -> dict[str, Any]:
    return {"metadata": {"annotations": annotations}, "spec": pause_pod_spec(0, "100m", "64Mi", restart_policy)}


def jobset(podsets: dict[str, tuple[int, dict[str, str]]]) -> dict[str, Any]:
    """A JobSet of one replicated Job per podset name → (pods, pod template annotations)."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": f"js-{secrets.token_hex(3)}"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": name,
                    "replicas": 1,
                    "template": {"spec": {"parallelism": pods, "completions": pods, "template": template(annotations)}},
                }
                for name, (pods, annotations) in podsets.items()
            ]
        },
    }


def pytorchjob(master: dict[str, str], worker: dict[str, str], workers: int = 3) -> dict[str, Any]:
    def spec(replicas: int, annotations: dict[str, str]) -> dict[str, Any]:
        return {"replicas": replicas, "restartPolicy": "OnFailure", "template": template(annotations, "OnFailure")}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": f"pt-{secrets.token_hex(3)}"},
        "spec": {"pytorchReplicaSpecs": {"Master": spec(1, master), "Worker": spec(workers, worker)}},
    }


def leaderworkerset(leader: dict[str, str], worker: dict[str, str]) -> dict[str, Any]:
    """One group of a leader and 2 workers (Kueue's podsets 'leader' of 1 pod and 'worker' of 2);
    ``rolloutStrategy`` as the LWS controller's defaulting webhook (not installed here) sets it."""
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": f"lws-{secrets.token_hex(3)}"},
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "leaderWorkerTemplate": {
                "size": 3,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": template(leader, "Always"),
                "workerTemplate": template(worker, "Always"),
            },
        },
    }


def pod(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{secrets.token_hex(3)}", "annotations": annotations},
        "spec": pause_pod_spec(0, "100m", "64Mi"),
    }


@dataclass(frozen=True)
class Case:
    """A broken annotation set; ``kueue``: the words of Kueue's refusal (None: Kueue admits it);
    ``finding``: the governor's finding as docs/rules.md promises it (None: none)."""

    body: dict[str, Any]
    kueue: str | None
    finding: str | None


def _cases() -> dict[str, Case]:
    three = "can only define groups of exactly 2 pod sets, got: 3 pod set(s)"
    multi = "can only define groups where at least one pod set has only 1 replica, got: 2 replica(s) and 2 replica(s)"
    consistent = f"must specify '{REQUIRED}' or '{PREFERRED}' topology consistent with"
    alone = f"may not be set when '{SLICE_LEVEL}' is not specified"
    many = f'must not contain more than one topology annotation: ["{REQUIRED}", "{PREFERRED}", "{UNCONSTRAINED}"]'
    grouped = {GROUP: "g", REQUIRED: RACK}
    return {
        "jobset-group-of-3": Case(
            jobset({name: (1, grouped) for name in ("a", "b", "c")}),
            three,
            f"podset 'a' + 'b' + 'c': {GROUP} 'g': {three} {GROUPING}{REFUSES}",
        ),
        "jobset-group-of-two-multi-pod-podsets": Case(
            jobset({"a": (2, grouped), "b": (2, grouped)}),
            multi,
            f"podset 'a' + 'b': {GROUP} 'g': {multi} in the group {GROUPING}{REFUSES}",
        ),
        "lws-group-levels-differ": Case(
            leaderworkerset(grouped, {GROUP: "g", REQUIRED: HOST}),
            consistent,
            f"podset 'leader' + 'worker': {consistent} each other in group 'g' {GROUPING}{REFUSES}",
        ),
        "pytorchjob-slice-size-without-slice-level": Case(
            pytorchjob({REQUIRED: RACK}, {REQUIRED: RACK, SLICE_SIZE: "1"}),
            alone,
            f"podset 'worker': {SLICE_SIZE}: {alone} {REQUEST}{REFUSES}",
        ),
        # No Kueue webhook checks that a slice size divides the pods: it admits this, and its TAS
        # places whole slices only (the governor warns, whatever the enforcement).
        "pytorchjob-slice-size-not-dividing-the-pods": Case(
            pytorchjob({REQUIRED: RACK}, {REQUIRED: RACK, SLICE_LEVEL: HOST, SLICE_SIZE: "2"}),
            None,
            f"podset 'worker': {SLICE_SIZE} '2': must divide pod set count 3: Kueue's TAS places 1 whole slice "
            "(2 pods) and leaves the other 1 pod gated until pods of this podset end (Kueue v0.19.2 "
            "TASFlavorSnapshot.findTopologyAssignment); Kueue's TAS assumes this rule (KEP-2724: the slice size "
            '"has to evenly divide the size of a PodSet"), which no Kueue webhook checks: the workload is admitted '
            "but not placed as asked",
        ),
        "pytorchjob-required-and-preferred": Case(
            pytorchjob({REQUIRED: RACK}, {REQUIRED: RACK, PREFERRED: RACK}),
            many,
            f"podset 'worker': annotations: {many} {REQUEST}{REFUSES}",
        ),
        "pytorchjob-unconstrained-and-required": Case(
            pytorchjob({REQUIRED: RACK}, {REQUIRED: RACK, UNCONSTRAINED: "true"}),
            many,
            f"podset 'worker': annotations: {many} {REQUEST}{REFUSES}",
        ),
        # Kueue's PyTorchJob webhook does not run ValidatePodSetGroupingTopology: it admits this.
        "pytorchjob-group-levels-differ": Case(
            pytorchjob(grouped, {GROUP: "g", REQUIRED: HOST}),
            None,
            f"podset 'master' + 'worker': {consistent} each other in group 'g' {GROUPING}; Kueue's TAS assumes "
            "this rule, which it does not check for a PyTorchJob: the workload may not be placed as asked",
        ),
        # Kueue's Pod webhook does not run ValidateSliceSizeAnnotationUpperBound: it admits this.
        "pod-slice-size-above-its-pods": Case(
            pod({REQUIRED: RACK, SLICE_LEVEL: HOST, SLICE_SIZE: "2"}),
            None,
            f"podset 'main': {SLICE_SIZE} '2': must not be greater than pod set count 1 (Kueue v0.19.2 "
            "ValidateSliceSizeAnnotationUpperBound); Kueue's TAS assumes this rule, which it does not check for a "
            "Pod: the workload may not be placed as asked",
        ),
    }


CASES = _cases()


def placed(case: Case, namespace: str) -> dict[str, Any]:
    body = copy.deepcopy(case.body)
    body["metadata"].update(namespace=namespace, labels={QUEUE: f"{namespace}-localqueue"})
    return body


@pytest.mark.parametrize("name", sorted(CASES))
async def test_kueue_alone(dynamic: DynamicClient, namespace: str, name: str) -> None:
    """A namespace of no team: Kueue's webhook alone refuses (or admits) the annotations."""
    case = CASES[name]
    outcome = await dry_run_attempt(dynamic, placed(case, namespace))
    if case.kueue is None:
        assert isinstance(outcome, Created), outcome
        return
    assert isinstance(outcome, Refused), f"Kueue admitted {name}"
    message = str(outcome.status.get("message"))
    assert case.kueue in message and "kueue-governor" not in message, message


@pytest.mark.parametrize("name", sorted(CASES))
async def test_the_governor_warns_under_default_and_kueue_decides(dynamic: DynamicClient, name: str) -> None:
    case = CASES[name]
    outcome = await dry_run_attempt(dynamic, placed(case, RESEARCH))
    if case.kueue is None:
        assert isinstance(outcome, Created), outcome
    else:
        assert isinstance(outcome, Refused), f"Kueue admitted {name}"
        message = str(outcome.status.get("message"))
        assert case.kueue in message and "kueue-governor" not in message, message
    assert tas_findings(outcome.warnings) == ([case.finding] if case.finding else [])


@pytest.mark.parametrize("name", sorted(CASES))
async def test_the_governor_refuses_under_enforce_only_what_kueue_refuses(dynamic: DynamicClient, name: str) -> None:
    case = CASES[name]
    outcome = await dry_run_attempt(dynamic, placed(case, DATA_SCIENCE))
    if case.kueue is None:
        assert isinstance(outcome, Created), outcome
        assert tas_findings(outcome.warnings) == ([case.finding] if case.finding else [])
        return
    assert isinstance(outcome, Refused), f"{name} was admitted"
    message = str(outcome.status.get("message"))
    assert message.startswith(GOVERNOR) and f"topology: {case.finding}" in message, message


async def refused_update(dynamic: DynamicClient, api_version: str, name: str) -> Refused:
    """The refusal of a dry-run UPDATE that grows the stored JobSet's podset 'driver' to 2 pods
    (read again on a conflict: Kueue may update the JobSet meanwhile, admitting it)."""
    for _ in range(3):
        stored = await get(dynamic, api_version, "JobSet", name, RESEARCH)
        assert stored is not None
        stored["spec"]["replicatedJobs"][0]["template"]["spec"].update(parallelism=2, completions=2)
        try:
            await replace_with_warnings(dynamic, stored, dry_run=True)
        except ConflictError:
            continue
        except Refused as refused:
            return refused
        pytest.fail("the update was admitted")
    pytest.fail("the JobSet kept changing")


async def test_an_update_that_breaks_a_group_is_warned_as_on_create_and_refused_by_kueue(
    dynamic: DynamicClient, cleanup: Cleanup
) -> None:
    grouped = {GROUP: "g", REQUIRED: RACK}
    body = cleanup.add(placed(Case(jobset({"driver": (1, grouped), "workers": (2, grouped)}), None, None), RESEARCH))
    created = await create_with_warnings(dynamic, body)
    assert tas_findings(created.warnings) == []
    name = created.obj["metadata"]["name"]
    multi = "can only define groups where at least one pod set has only 1 replica, got: 2 replica(s) and 2 replica(s)"
    refused = await refused_update(dynamic, body["apiVersion"], name)
    message = str(refused.status.get("message"))
    assert multi in message and "kueue-governor" not in message, message
    assert tas_findings(refused.warnings) == [
        f"podset 'driver' + 'workers': {GROUP} 'g': {multi} in the group {GROUPING}{REFUSES}; "
        "this update changes podset 'driver' from 1 to 2 pods: set it back"
    ]
