"""Bounded patience, then widening (webhook.core.plan.widen): the ladder, Kueue's topology-pending
message (v0.19.2 ``flavorassigner.Assignment.Message`` + ``TASFlavorSnapshot.notFitMessage``), the
patience clock, what is never touched, and the UPDATE rule that accepts the governor's own step."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from support import AWS_LEVELS, aws_nodes, job, platform_with, review_body, teams_from

from webhook.cli import main
from webhook.core.admission.review import review
from webhook.core.kueue.kinds import WorkloadKind, find_kind
from webhook.core.plan.create import plan_object
from webhook.core.plan.patch import apply_patch, to_json_patch
from webhook.core.plan.widen import admitted, decide, topology_pending
from webhook.core.plan.widen_history import (
    WIDENED,
    Placement,
    governor_step,
    next_placement,
    placement_of,
    read_history,
    seconds_of,
)
from webhook.core.platform.platform import PlatformError, parse_platform

SPINE, BLOCK, RACK, HOST = AWS_LEVELS
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
SLICE_LEVEL = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
SLICE_LAYERS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
_JOB, _T0 = find_kind("batch/v1", "Job"), seconds_of("2026-12-05T03:00:00Z")
assert _JOB is not None and _T0 is not None
JOB: WorkloadKind = _JOB
T0: float = _T0
NOT_FIT = "couldn't assign flavors to pod set main: topology \"aws\" doesn't allow to fit any of 2 pod(s)"


AUTO = {"mode": "auto"}


def team(topology: dict[str, Any]) -> Any:
    index = teams_from(platform_with({"topology": topology}))
    resolved = index.resolve("ml", None)
    return resolved.team


def created(policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Job as the webhook admits it (auto: required at a rack for 2 pods of 8 GPUs), suspended."""
    obj = job()
    plan = plan_object(obj, JOB, team(policy or AUTO), aws_nodes())
    out = apply_patch(obj, to_json_patch(plan.changes))
    assert out["spec"]["template"]["metadata"]["annotations"][REQUIRED] == RACK
    out["metadata"].update({"namespace": "ml", "resourceVersion": "7", "uid": "u1"})
    out["spec"]["suspend"] = True
    return out


def workload(message: str | None = NOT_FIT, created_at: str = "2026-12-05T03:00:00Z", **status: Any) -> dict[str, Any]:
    """A pending Workload as Kueue v0.19.2 writes it: its condition's ``observedGeneration`` is the
    generation Kueue tried (``workload.UnsetQuotaReservationWithCondition``)."""
    conditions = []
    if message is not None:
        conditions.append(
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Pending",
                "message": message,
                "observedGeneration": 1,
            }
        )
    return {
        "metadata": {
            "name": "job-train-1",
            "namespace": "ml",
            "creationTimestamp": created_at,
            "resourceVersion": "9",
            "generation": 1,
        },
        "spec": {"podSets": [{"name": "main", "count": 2, "topologyRequest": {"required": RACK}}]},
        "status": {"conditions": conditions, **status},
    }


def test_the_ladder_goes_one_level_broader_then_preferred_at_the_start() -> None:
    start = Placement("required", RACK)
    assert next_placement(start, start, AWS_LEVELS) == Placement("required", BLOCK)
    assert next_placement(Placement("required", BLOCK), start, AWS_LEVELS) == Placement("required", SPINE)
    assert next_placement(Placement("required", SPINE), start, AWS_LEVELS) == Placement("preferred", RACK)
    assert next_placement(Placement("preferred", RACK), start, AWS_LEVELS) is None
    assert next_placement(Placement("required", "other"), start, AWS_LEVELS) is None


def test_a_sliced_podset_first_drops_its_slices_then_climbs() -> None:
    start = Placement("required", BLOCK, (2, RACK))
    assert next_placement(start, start, AWS_LEVELS) == Placement("required", BLOCK)
    assert next_placement(Placement("required", BLOCK), start, AWS_LEVELS) == Placement("required", SPINE)
    assert next_placement(Placement("required", SPINE), start, AWS_LEVELS) == Placement("preferred", BLOCK)
    top = Placement("required", SPINE, (4, BLOCK))
    assert next_placement(top, top, AWS_LEVELS) == Placement("required", SPINE)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"required:{BLOCK};slices:2@{RACK}", Placement("required", BLOCK, (2, RACK))),
        (f"required:{BLOCK}", Placement("required", BLOCK)),
        (f"preferred:{BLOCK};slices:2@{RACK}", None),
        (f"required:{BLOCK};slices:0@{RACK}", None),
        (f"required:{BLOCK};slices:2@", None),
        (f"required:{BLOCK};slices:two@{RACK}", None),
        (f"required:{BLOCK};layers:2@{RACK}", None),
        (f"required:{BLOCK};", None),  # one spelling only
        (f"required:{BLOCK};slices:04@{RACK}", None),
        (f"required:{BLOCK};slices:2147483648@{RACK}", None),  # beyond int32
    ],
)
def test_a_recorded_placement_reads_back_as_written(text: str, expected: Placement | None) -> None:
    assert Placement.parse(text) == expected
    if expected is not None and expected.text() == text:
        assert Placement.parse(expected.text()) == expected


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({REQUIRED: RACK}, Placement("required", RACK)),
        ({PREFERRED: HOST, "other": "x"}, Placement("preferred", HOST)),
        ({REQUIRED: RACK, SLICE_SIZE: "2"}, None),  # a slice annotation alone
        ({REQUIRED: BLOCK, SLICE_SIZE: "2", SLICE_LEVEL: RACK}, Placement("required", BLOCK, (2, RACK))),
        ({PREFERRED: BLOCK, SLICE_SIZE: "2", SLICE_LEVEL: RACK}, None),
        ({REQUIRED: BLOCK, SLICE_SIZE: "0", SLICE_LEVEL: RACK}, None),
        ({REQUIRED: BLOCK, SLICE_SIZE: "²", SLICE_LEVEL: RACK}, None),
        ({REQUIRED: BLOCK, SLICE_SIZE: 2, SLICE_LEVEL: RACK}, None),
        ({REQUIRED: BLOCK, SLICE_SIZE: "2", SLICE_LEVEL: RACK, SLICE_LAYERS: "[]"}, None),
        ({REQUIRED: RACK, PREFERRED: BLOCK}, None),
        ({"kueue.x-k8s.io/podset-unconstrained-topology": "true"}, None),
        ({}, None),
    ],
)
def test_only_one_required_or_preferred_level_with_or_without_slices_is_on_the_ladder(
    annotations: dict[str, Any], expected: Placement | None
) -> None:
    assert placement_of(annotations) == expected


def test_kueues_exclusion_counts_stay_with_their_podset() -> None:
    # notFitMessage appends ". Total nodes: N; excluded: <reasons>" (tas_flavor_snapshot.go)
    stats = f"{NOT_FIT}. Total nodes: 8; excluded: taint: 2, resources: 4"
    assert topology_pending(workload(stats), "aws") == {"main": stats.split("main: ", 1)[1]}


def test_kueues_tas_message_names_the_podsets_topology_cannot_place() -> None:
    two = f'{NOT_FIT}; couldn\'t assign flavors to pod set w: topology "aws" allows to fit only 1 out of 4 pod(s)'
    assert topology_pending(workload(two), "aws") == {
        "main": 'topology "aws" doesn\'t allow to fit any of 2 pod(s)',
        "w": 'topology "aws" allows to fit only 1 out of 4 pod(s)',
    }


@pytest.mark.parametrize(
    "message",
    [
        # quota: Kueue asks TAS only once the quota fits (flavorassigner.go)
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, "
        "8 more needed",
        f"{NOT_FIT}. Pending the preemption of 1 workload(s)",  # room is being made
        "couldn't assign flavors to pod set main: topology \"other\" doesn't allow to fit any of 2 pod(s)",
        None,
    ],
)
def test_anything_but_a_tas_no_fit_of_the_teams_topology_is_not_topology_pending(message: str | None) -> None:
    assert topology_pending(workload(message), "aws") == {}


def test_an_admitted_workload_is_never_pending() -> None:
    wl = workload(status_admission=None)
    wl["status"]["admission"] = {"clusterQueue": "cq"}
    assert admitted(wl) and topology_pending(wl, "aws") == {}
    assert decide(wl, created(), JOB, team(AUTO), aws_nodes(), T0 + 3600).action == "leave"


def test_a_workload_waits_its_patience_then_is_widened_one_level() -> None:
    obj, wl = created(), workload()
    waiting = decide(wl, obj, JOB, team(AUTO), aws_nodes(), T0 + 59)
    assert (waiting.action, waiting.at) == ("wait", T0 + 60)
    widened = decide(wl, obj, JOB, team(AUTO), aws_nodes(), T0 + 61)
    assert widened.action == "widen", widened.why
    after = apply_patch(obj, widened.object_patch)
    annotations = after["spec"]["template"]["metadata"]["annotations"]
    assert annotations[REQUIRED] == BLOCK and PREFERRED not in annotations
    history = json.loads(after["metadata"]["annotations"][WIDENED])
    assert history == [
        {
            "podsets": ["main"],
            "from": f"required:{RACK}",
            "to": f"required:{BLOCK}",
            "at": "2026-12-05T03:01:01Z",
            "reason": 'main: topology "aws" doesn\'t allow to fit any of 2 pod(s)',
        }
    ]
    rebuilt = apply_patch(wl, widened.workload_patch)
    assert rebuilt["spec"]["podSets"][0]["topologyRequest"] == {"required": BLOCK}


def patched(wl: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """``wl`` after a spec patch, as the API server stores it: ``metadata.generation`` + 1."""
    out = apply_patch(wl, patch)
    out["metadata"]["generation"] += 1
    return out


def kueue_refuses(wl: dict[str, Any], message: str = NOT_FIT) -> dict[str, Any]:
    """``wl`` once Kueue tried its current generation and refused it with ``message``."""
    out = copy.deepcopy(wl)
    condition = out["status"]["conditions"][0]
    condition.update({"message": message, "observedGeneration": out["metadata"]["generation"]})
    return out


def test_the_ladder_runs_to_preferred_at_the_first_level_and_stops() -> None:
    obj, wl, now = created(), workload(), T0 + 61
    seen = []
    for _ in range(4):
        decision = decide(wl, obj, JOB, team(AUTO), aws_nodes(), now)
        if decision.action != "widen":
            break
        obj = apply_patch(obj, decision.object_patch)
        wl = patched(wl, decision.workload_patch)
        seen.append(wl["spec"]["podSets"][0]["topologyRequest"])
        # no next step on Kueue's refusal of the previous one (its observedGeneration is behind)...
        waiting = decide(wl, obj, JOB, team(AUTO), aws_nodes(), now + 30)
        assert (waiting.action, waiting.why) == ("leave", "Kueue has not tried the Workload as it is now")
        # ...and, once Kueue refused this one, the next at once: the patience was the workload's
        wl = kueue_refuses(wl)
        now += 2
    assert seen == [{"required": BLOCK}, {"required": SPINE}, {"preferred": RACK}]
    assert decide(wl, obj, JOB, team(AUTO), aws_nodes(), now).why.endswith("is the end of the ladder")
    history = json.loads(obj["metadata"]["annotations"][WIDENED])
    assert [seconds_of(step["at"]) for step in history] == [T0 + 61, T0 + 63, T0 + 65]


QUOTA = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, 8 more needed"
)


def test_a_quota_wait_after_kueues_topology_refusal_of_the_same_generation_is_widened() -> None:
    """Kueue asks TAS only while the quota fits; the jobs behind take the quota that frees, and the
    message turns back to quota. A refusal on topology remembered for this generation still counts."""
    obj, wl = created(), workload(QUOTA)
    assert decide(wl, obj, JOB, team(AUTO), aws_nodes(), T0 + 61).why == "not pending because of topology"
    assert decide(wl, obj, JOB, team(AUTO), aws_nodes(), T0 + 59, earlier=NOT_FIT).action == "wait"
    widened = decide(wl, obj, JOB, team(AUTO), aws_nodes(), T0 + 61, earlier=NOT_FIT)
    assert widened.action == "widen" and widened.step is not None
    assert widened.step.reason == 'main: topology "aws" doesn\'t allow to fit any of 2 pod(s)'
    assert widened.why.startswith("waiting for 61s, on topology (now for quota) (patience 60s): required at ")
    # never while preemptions Kueue started are under way, now or then
    preempting = workload(f"{NOT_FIT}. Pending the preemption of 1 workload(s)")
    assert decide(preempting, obj, JOB, team(AUTO), aws_nodes(), T0 + 61, earlier=NOT_FIT).action == "leave"
    assert topology_pending(wl, "aws", f"{NOT_FIT}. Pending the preemption of 1 workload(s)") == {}
    # an earlier refusal on another Topology is not the team's
    other = NOT_FIT.replace('"aws"', '"other"')
    assert decide(wl, obj, JOB, team(AUTO), aws_nodes(), T0 + 61, earlier=other).action == "leave"


def test_a_message_kueue_wrote_for_an_earlier_generation_is_not_its_word_on_this_one() -> None:
    wl = workload()
    wl["metadata"]["generation"] = 2
    assert topology_pending(wl, "aws") == {}
    decision = decide(wl, created(), JOB, team(AUTO), aws_nodes(), T0 + 3600)
    assert (decision.action, decision.why) == ("leave", "Kueue has not tried the Workload as it is now")
    wl["status"]["conditions"][0]["observedGeneration"] = 2
    assert topology_pending(wl, "aws") == {"main": 'topology "aws" doesn\'t allow to fit any of 2 pod(s)'}


def test_an_evicted_workload_waits_its_patience_again_from_its_requeue() -> None:
    wl = workload()
    # evicted, queued again: Kueue's Requeued condition (workload.SetRequeuedCondition)
    requeued = {
        "type": "Requeued",
        "status": "True",
        "reason": "Preempted",
        "lastTransitionTime": "2026-12-05T04:00:00Z",
    }
    wl["status"]["conditions"].append(requeued)
    assert decide(wl, created(), JOB, team(AUTO), aws_nodes(), T0 + 3630).action == "wait"
    assert decide(wl, created(), JOB, team(AUTO), aws_nodes(), T0 + 3660).action == "widen"


def test_the_patience_counts_from_creation_not_from_kueues_first_try() -> None:
    """Regression: the patience counted from the ``QuotaReserved=False`` condition's transition. Kueue
    sets aside the Workloads of one shape while an equivalent one is refused (SchedulingEquivalenceHashing),
    untried and with no condition, and tries them one at a time; each then waited a whole patience
    after its first try, so a class of them was widened one patience after another."""
    wl = workload()
    wl["status"]["conditions"][0]["lastTransitionTime"] = "2026-12-05T03:05:00Z"  # first tried 5 minutes in
    widened = decide(wl, created(), JOB, team(AUTO), aws_nodes(), T0 + 301)
    assert widened.action == "widen" and widened.why.startswith("waiting for 301s, on topology")


def test_a_team_may_turn_patience_off_and_set_its_own() -> None:
    obj, wl = created(), workload()
    assert decide(wl, obj, JOB, team({"mode": "auto", "patience": "never"}), aws_nodes(), T0 + 10**6).action == "leave"
    assert decide(wl, obj, JOB, team({"mode": "auto", "patience": "5m"}), aws_nodes(), T0 + 299).action == "wait"
    assert decide(wl, obj, JOB, team({"mode": "auto", "patience": "5m"}), aws_nodes(), T0 + 300).action == "widen"


@pytest.mark.parametrize("bad", ["0s", "60", "1m30", "5 m", "169h", "off", ""])
def test_a_patience_that_is_no_duration_is_refused_with_its_path(bad: str) -> None:
    with pytest.raises(PlatformError, match="patience"):
        parse_platform(platform_with({"topology": {"mode": "auto", "patience": bad}}))


def test_a_users_own_level_is_never_touched() -> None:
    obj = created()
    obj["spec"]["template"]["metadata"]["annotations"][REQUIRED] = HOST  # not what auto chooses for 2 pods
    decision = decide(workload(), obj, JOB, team(AUTO), aws_nodes(), T0 + 3600)
    assert decision.action == "leave" and "not the policy's choice" in decision.why


def test_a_level_changed_after_a_widening_is_left_alone() -> None:
    obj, wl = created(), workload()
    decision = decide(wl, obj, JOB, team(AUTO), aws_nodes(), T0 + 61)
    obj = apply_patch(obj, decision.object_patch)
    obj["spec"]["template"]["metadata"]["annotations"][REQUIRED] = HOST
    assert "changed since" in decide(wl, obj, JOB, team(AUTO), aws_nodes(), T0 + 999).why


def test_a_started_job_is_left_alone() -> None:
    obj = created()
    obj["spec"]["suspend"] = False
    assert decide(workload(), obj, JOB, team(AUTO), aws_nodes(), T0 + 3600).action == "leave"


def test_a_workload_behind_the_recorded_step_is_synced_without_a_new_step() -> None:
    obj, wl = created(), workload()
    decision = decide(wl, obj, JOB, team(AUTO), aws_nodes(), T0 + 61)
    obj = apply_patch(obj, decision.object_patch)  # the Workload patch was lost
    sync = decide(wl, obj, JOB, team(AUTO), aws_nodes(), T0 + 62)
    assert sync.action == "sync"
    assert apply_patch(wl, sync.workload_patch)["spec"]["podSets"][0]["topologyRequest"] == {"required": BLOCK}
    assert sync.workload_patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "9"}


def test_a_history_the_governor_did_not_write_stops_it() -> None:
    obj = created()
    obj["metadata"].setdefault("annotations", {})[WIDENED] = "not json"
    assert read_history(obj, JOB) is None
    assert decide(workload(), obj, JOB, team(AUTO), aws_nodes(), T0 + 3600).action == "leave"


def test_the_update_rule_knows_exactly_one_governor_step() -> None:
    obj = created()
    step = decide(workload(), obj, JOB, team(AUTO), aws_nodes(), T0 + 61)
    new = apply_patch(obj, step.object_patch)
    assert governor_step(new, obj, JOB, AWS_LEVELS) == ("main",)
    skipping = copy.deepcopy(new)
    skipping["spec"]["template"]["metadata"]["annotations"][REQUIRED] = SPINE  # two levels at once
    assert governor_step(skipping, obj, JOB, AWS_LEVELS) == ()
    unrecorded = copy.deepcopy(new)
    del unrecorded["metadata"]["annotations"][WIDENED]
    assert governor_step(unrecorded, obj, JOB, AWS_LEVELS) == ()
    assert governor_step(obj, obj, JOB, AWS_LEVELS) == ()


GOVERNOR = "system:serviceaccount:kueue-governor:kueue-governor"
STRICT = {"mode": "required", "level": RACK, "enforcement": "enforce"}


def _update(new: dict[str, Any], old: dict[str, Any], user: str) -> Any:
    body = review_body(new, "ml", operation="UPDATE", old=old)
    body["request"]["userInfo"] = {"username": user}
    return review(body, teams_from(platform_with({"topology": STRICT})), governor=GOVERNOR)


def test_the_webhook_accepts_the_governors_own_step_and_nothing_else_of_the_kind() -> None:
    obj = created(STRICT)
    step = decide(workload(), obj, JOB, team(STRICT), aws_nodes(), T0 + 61)
    assert step.action == "widen", step.why
    new = apply_patch(obj, step.object_patch)
    assert _update(new, obj, GOVERNOR).response["response"]["allowed"] is True
    refused = _update(new, obj, "alice").response["response"]  # the same change from a user: less locality, enforced
    assert refused["allowed"] is False and "asks for less locality" in refused["status"]["message"]
    jump = copy.deepcopy(new)
    jump["spec"]["template"]["metadata"]["annotations"][REQUIRED] = SPINE  # not the recorded step
    assert _update(jump, obj, GOVERNOR).response["response"]["allowed"] is False


def test_every_step_of_the_ladder_passes_the_webhook_unchanged() -> None:
    obj, wl, now = created(STRICT), workload(), T0 + 61
    for expected in ({REQUIRED: BLOCK}, {REQUIRED: SPINE}, {PREFERRED: RACK}):
        step = decide(wl, obj, JOB, team(STRICT), aws_nodes(), now)
        new = apply_patch(obj, step.object_patch)
        answer = _update(new, obj, GOVERNOR).response["response"]
        assert answer["allowed"] is True and "patch" not in answer  # nothing put back
        tas = {
            k: v
            for k, v in new["spec"]["template"]["metadata"]["annotations"].items()
            if k.startswith("kueue.x-k8s.io/")
        }
        assert tas == expected
        obj, wl, now = new, apply_patch(wl, step.workload_patch), now + 61


# -- a podset auto slices: 4 pods of 8 GPUs need a block, in racks of 2 ------------------------------


def sliced(policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Job of 4 pods as the webhook admits it (auto: required at a block in slices of 2 at a rack)."""
    obj = job()
    obj["spec"]["parallelism"] = 4
    plan = plan_object(obj, JOB, team(policy or AUTO), aws_nodes())
    out = apply_patch(obj, to_json_patch(plan.changes))
    annotations = out["spec"]["template"]["metadata"]["annotations"]
    assert (annotations[REQUIRED], annotations[SLICE_LEVEL], annotations[SLICE_SIZE]) == (BLOCK, RACK, "2")
    out["metadata"].update({"namespace": "ml", "resourceVersion": "7", "uid": "u1"})
    out["spec"]["suspend"] = True
    return out


def sliced_workload() -> dict[str, Any]:
    wl = workload("couldn't assign flavors to pod set main: topology \"aws\" doesn't allow to fit any of 2 slice(s)")
    wl["spec"]["podSets"][0].update(
        count=4,
        topologyRequest={
            "required": BLOCK,
            "podSetSliceRequiredTopology": RACK,
            "podSetSliceSize": 2,
            "podIndexLabel": "batch.kubernetes.io/job-completion-index",
        },
    )
    return wl


def _tas(obj: dict[str, Any]) -> dict[str, str]:
    annotations = obj["spec"]["template"]["metadata"]["annotations"]
    return {k: v for k, v in annotations.items() if k.startswith("kueue.x-k8s.io/podset-")}


def test_a_sliced_job_waiting_on_topology_loses_its_slices_then_climbs_to_preferred() -> None:
    obj, wl, now = sliced(), sliced_workload(), T0 + 61
    assert decide(wl, obj, JOB, team(AUTO), aws_nodes(), T0 + 59).action == "wait"
    seen, requests = [], []
    for _ in range(4):
        decision = decide(wl, obj, JOB, team(AUTO), aws_nodes(), now)
        if decision.action != "widen":
            break
        obj, wl = apply_patch(obj, decision.object_patch), apply_patch(wl, decision.workload_patch)
        seen.append(_tas(obj))
        requests.append(wl["spec"]["podSets"][0]["topologyRequest"])
        now += 61
    assert seen == [{REQUIRED: BLOCK}, {REQUIRED: SPINE}, {PREFERRED: BLOCK}]
    index = {"podIndexLabel": "batch.kubernetes.io/job-completion-index"}  # Kueue's own field is kept
    assert requests == [{"required": BLOCK, **index}, {"required": SPINE, **index}, {"preferred": BLOCK, **index}]
    history = json.loads(obj["metadata"]["annotations"][WIDENED])
    assert [(h["from"], h["to"]) for h in history] == [
        (f"required:{BLOCK};slices:2@{RACK}", f"required:{BLOCK}"),
        (f"required:{BLOCK}", f"required:{SPINE}"),
        (f"required:{SPINE}", f"preferred:{BLOCK}"),
    ]
    assert history[0]["reason"] == 'main: topology "aws" doesn\'t allow to fit any of 2 slice(s)'
    first = decide(sliced_workload(), sliced(), JOB, team(AUTO), aws_nodes(), T0 + 61)
    assert first.why.endswith(f"required at {BLOCK} in slices of 2 pods at {RACK} → required at {BLOCK}")
    assert decide(wl, obj, JOB, team(AUTO), aws_nodes(), now).why.endswith("is the end of the ladder")


def test_the_webhook_takes_the_governors_dropping_of_slices_as_one_step() -> None:
    strict = {"mode": "auto", "enforcement": "enforce"}
    obj = sliced(strict)
    step = decide(sliced_workload(), obj, JOB, team(strict), aws_nodes(), T0 + 61)
    assert step.action == "widen", step.why
    new = apply_patch(obj, step.object_patch)
    assert _tas(new) == {REQUIRED: BLOCK}
    assert governor_step(new, obj, JOB, AWS_LEVELS) == ("main",)

    body = review_body(new, "ml", operation="UPDATE", old=obj)
    body["request"]["userInfo"] = {"username": GOVERNOR}
    teams = teams_from(platform_with({"topology": strict}))
    answer = review(body, teams, inventory=aws_nodes(), governor=GOVERNOR).response["response"]
    assert answer["allowed"] is True and "patch" not in answer  # nothing put back
    half = copy.deepcopy(new)
    half["spec"]["template"]["metadata"]["annotations"][SLICE_SIZE] = "2"  # one slice annotation left: no step
    assert governor_step(half, obj, JOB, AWS_LEVELS) == ()


# -- a JobSet's driver placed with its workers: one podset group, widened as one -------------------


def test_a_driver_grouped_with_its_workers_is_widened_with_them_and_keeps_its_group() -> None:
    jobset_row = find_kind("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert jobset_row is not None
    nodes = aws_nodes(blocks=2, racks=2, hosts=4)

    def replicated(name: str, pods: int) -> dict[str, Any]:
        pod = {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}
        return {"name": name, "replicas": 1, "template": {"spec": {"parallelism": pods, "template": {"spec": pod}}}}

    obj: dict[str, Any] = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "ml-queue"}},
        "spec": {"replicatedJobs": [replicated("driver", 1), replicated("workers", 3)]},
    }
    plan = plan_object(obj, jobset_row, team(AUTO), nodes)
    assert not plan.denials, plan.denials
    obj = apply_patch(obj, to_json_patch(plan.changes))
    obj["metadata"].update(resourceVersion="7", uid="u1")
    obj["spec"]["suspend"] = True
    group = "kueue.x-k8s.io/podset-group-name"

    def placed(o: dict[str, Any]) -> list[dict[str, str]]:
        return [
            {k: v for k, v in r["template"]["spec"]["template"]["metadata"]["annotations"].items() if "podset-" in k}
            for r in o["spec"]["replicatedJobs"]
        ]

    assert placed(obj) == [{REQUIRED: RACK, group: "driver-workers"}] * 2  # 4 pods: one rack of 4 hosts
    message = "couldn't assign flavors to pod set workers: topology \"aws\" doesn't allow to fit any of 3 pod(s)"
    wl = workload(message)
    wl["spec"]["podSets"] = [
        {"name": "driver", "count": 1, "topologyRequest": {"required": RACK, "podSetGroupName": "driver-workers"}},
        {"name": "workers", "count": 3, "topologyRequest": {"required": RACK, "podSetGroupName": "driver-workers"}},
    ]
    decision = decide(wl, obj, jobset_row, team(AUTO), nodes, T0 + 61)
    assert decision.action == "widen", decision.why
    assert decision.step is not None and decision.step.podsets == ("driver", "workers")
    assert placed(apply_patch(obj, decision.object_patch)) == [{REQUIRED: BLOCK, group: "driver-workers"}] * 2
    requests = [p["topologyRequest"] for p in apply_patch(wl, decision.workload_patch)["spec"]["podSets"]]
    assert requests == [{"required": BLOCK, "podSetGroupName": "driver-workers"}] * 2
    widened = apply_patch(obj, decision.object_patch)
    assert governor_step(widened, obj, jobset_row, AWS_LEVELS) == ("driver", "workers")
    split = copy.deepcopy(widened)  # a step of the workers alone: Kueue places the group as one
    split["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"][REQUIRED] = RACK
    (entry,) = json.loads(split["metadata"]["annotations"][WIDENED])
    split["metadata"]["annotations"][WIDENED] = json.dumps([{**entry, "podsets": ["workers"]}])
    assert governor_step(split, obj, jobset_row, AWS_LEVELS) == ()


# -- the UPDATE rule against forged, malformed and hostile histories (a new user's trial) ------------


def _stepped() -> tuple[dict[str, Any], dict[str, Any]]:
    """(stored, updated): the governor's first legitimate step on the Job of ``created()``."""
    obj = created()
    step = decide(workload(), obj, JOB, team(AUTO), aws_nodes(), T0 + 61)
    return obj, apply_patch(obj, step.object_patch)


def _with_history(obj: dict[str, Any], entries: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].setdefault("annotations", {})[WIDENED] = (
        entries if isinstance(entries, str) else json.dumps(entries)
    )
    return out


@pytest.mark.parametrize(
    "history",
    [
        "[" * 100_000 + "]" * 100_000,  # nested past the JSON parser's recursion limit: was a 500
        json.dumps([{"podsets": ["main"], "from": f"required:{RACK};", "to": f"required:{BLOCK}", "at": "x"}]),
    ],
)
def test_a_history_no_governor_writes_is_no_history_and_never_a_crash(history: str) -> None:
    obj = _with_history(created(), history)
    assert read_history(obj, JOB) is None
    assert decide(workload(), obj, JOB, team(AUTO), aws_nodes(), T0 + 3600).action == "leave"


@pytest.mark.parametrize(
    "at",
    [
        "20261205T030101Z",  # ISO 8601 basic format
        "2026-W49-6T03:01:01Z",  # a week date
        "2026-12-05 03:01:01Z",  # a space for T
        "2026-12-05T03Z",  # hours only
        "2026-12-05T03:01:01+0000",  # no colon in the offset
        "2026-12-05T03:01:01",  # no offset
        "2026-13-05T03:01:01Z",  # month 13
    ],
)
def test_a_step_time_must_be_rfc3339(at: str) -> None:
    assert seconds_of(at) is None
    stored, updated = _stepped()
    (entry,) = json.loads(updated["metadata"]["annotations"][WIDENED])
    assert governor_step(_with_history(updated, [{**entry, "at": at}]), stored, JOB, AWS_LEVELS) == ()


def test_rfc3339_allows_its_lower_case_letters_and_kubernetes_microtime() -> None:
    assert seconds_of("2026-12-05t03:00:00z") == T0
    assert seconds_of("2026-12-05T03:00:00.000000Z") == T0
    assert seconds_of("2026-12-05T04:00:00+01:00") == T0


def test_an_earlier_entry_must_stay_exactly_as_written() -> None:
    stored, updated = _stepped()
    (first,) = json.loads(updated["metadata"]["annotations"][WIDENED])
    wl = apply_patch(workload(), decide(workload(), stored, JOB, team(AUTO), aws_nodes(), T0 + 61).workload_patch)
    second = decide(wl, updated, JOB, team(AUTO), aws_nodes(), T0 + 200)
    assert second.action == "widen"
    climbed = apply_patch(updated, second.object_patch)
    assert governor_step(climbed, updated, JOB, AWS_LEVELS) == ("main",)
    entries = json.loads(climbed["metadata"]["annotations"][WIDENED])
    for rewritten in ({**first, "reason": "edited"}, {**first, "extra": 1}, {**first, "reason": None}):
        forged = _with_history(climbed, [rewritten, entries[1]])
        stored_too = _with_history(updated, [first])
        assert governor_step(forged, stored_too, JOB, AWS_LEVELS) == ()


def test_a_step_on_a_started_job_is_not_the_governors() -> None:
    stored, updated = _stepped()
    for obj in (stored, updated):
        obj["spec"]["suspend"] = False
    assert governor_step(updated, stored, JOB, AWS_LEVELS) == ()
    stored["spec"]["suspend"] = True  # the step unsuspends it in the same update
    assert governor_step(updated, stored, JOB, AWS_LEVELS) == ()


def test_dropping_slices_whose_level_is_not_the_topologys_is_no_step() -> None:
    start = Placement("required", BLOCK, (2, "example.com/zone"))
    assert next_placement(start, start, AWS_LEVELS) is None
    broader = Placement("required", BLOCK, (2, SPINE))  # slices broader than the level: Kueue refuses it
    assert next_placement(broader, broader, AWS_LEVELS) is None


def test_a_governors_update_that_is_not_one_step_says_why() -> None:
    stored, updated = _stepped()
    (entry,) = json.loads(updated["metadata"]["annotations"][WIDENED])
    forged = _with_history(updated, [{**entry, "at": "yesterday"}])
    body = review_body(forged, "ml", operation="UPDATE", old=stored)
    body["request"]["userInfo"] = {"username": GOVERNOR}
    answer = review(body, teams_from(platform_with({"topology": STRICT})), governor=GOVERNOR).response["response"]
    assert answer["allowed"] is False
    assert any(
        "not taken as the governor's widening: its kueue-governor.io/widened annotation is not a history" in w
        for w in answer["warnings"]
    ), answer["warnings"]


def test_kgov_review_answers_the_governors_step_as_the_server_does(tmp_path: Path) -> None:
    """Regression: ``kgov review`` had no way to name the governor's user, so the step the server
    accepts was refused there ("asks for less locality")."""
    stored = created(STRICT)
    step = decide(workload(), stored, JOB, team(STRICT), aws_nodes(), T0 + 61)
    updated = apply_patch(stored, step.object_patch)
    body = review_body(updated, "ml", operation="UPDATE", old=stored)
    body["request"]["userInfo"] = {"username": GOVERNOR}
    (tmp_path / "review.json").write_text(json.dumps(body))
    (tmp_path / "platform.yaml").write_text(yaml.safe_dump(platform_with({"topology": STRICT})))
    base = ["review", "--platform", str(tmp_path / "platform.yaml"), "-f", str(tmp_path / "review.json")]
    for extra, allowed in (([], False), (["--governor", GOVERNOR], True), (["--governor", "alice"], False)):
        result = CliRunner().invoke(main, [*base, *extra], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["response"]["allowed"] is allowed, extra


def test_a_trainjob_is_left_at_its_level() -> None:
    """Its podsets come from its runtime and its TAS annotations sit in runtimePatches, which a
    step does not edit (docs/rules.md, Patience): the governor leaves it, never half-widens it."""
    obj = yaml.safe_load((Path(__file__).parents[1] / "examples" / "trainjob.yaml").read_text())
    row = find_kind(obj["apiVersion"], obj["kind"])
    assert row is not None
    obj["metadata"].update(namespace="ml", resourceVersion="1", uid="u1")
    obj["spec"]["suspend"] = True
    wl = workload("couldn't assign flavors to pod set node: topology \"aws\" doesn't allow to fit any of 2 pod(s)")
    decision = decide(wl, obj, row, team(AUTO), aws_nodes(), T0 + 3600)
    assert (decision.action, decision.object_patch, decision.workload_patch) == ("leave", [], [])
