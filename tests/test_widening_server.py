"""The server side of topology widening: the CLI's options, the Workload cache's keys and the Event
(webhook.kube.widener; the loop itself runs against the real API server and Kueue in
e2e/test_patience.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support import PLATFORM

from webhook.cli import main
from webhook.core.plan.widen_history import WIDENED
from webhook.kube.cache import namespaced_key
from webhook.kube.policy_watch import NOTE_LIMIT
from webhook.kube.widener import REASON, widening_event


def _serve(tmp_path: Path, *extra: str) -> object:
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).write_text("unused: the check comes first")
    args = ["serve", "--platform", str(PLATFORM), "--tls-cert-file", str(tmp_path / "tls.crt")]
    args += ["--tls-private-key-file", str(tmp_path / "tls.key"), *extra]
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_widening_needs_the_cluster_caches(tmp_path: Path) -> None:
    result = _serve(tmp_path, "--topology-widening", "kgov/lease")
    assert result.exit_code == 2  # type: ignore[attr-defined]
    assert "--topology-widening needs --watch-cluster" in result.stderr  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("value", "message"),
    [("lease", "give NAMESPACE/NAME, or set $POD_NAMESPACE"), ("Bad_NS/lease", "namespace"), ("ns/-x", "name")],
)
def test_a_lease_that_is_no_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    result = _serve(tmp_path, "--watch-cluster", "--topology-widening", value)
    assert result.exit_code == 2  # type: ignore[attr-defined]
    assert f"--topology-widening {value}: {message}" in result.stderr  # type: ignore[attr-defined]


def test_workloads_are_cached_by_namespace_and_name() -> None:
    assert namespaced_key({"metadata": {"namespace": "ml", "name": "job-a"}}) == "ml/job-a"
    assert namespaced_key({"metadata": {"name": "cluster-scoped"}}) is None
    assert namespaced_key({"metadata": {"namespace": "ml"}}) is None


def test_the_event_names_the_object_and_keeps_within_the_note_limit() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"namespace": "ml", "name": "j", "uid": "u"}}
    event = widening_event(job, "é" * 2000, "pod-1", 1_800_000_000.5)
    assert event["regarding"] == {"apiVersion": "batch/v1", "kind": "Job", "namespace": "ml", "name": "j", "uid": "u"}
    assert (event["type"], event["reason"], event["metadata"]["namespace"]) == ("Normal", REASON, "ml")
    assert len(event["note"].encode()) <= NOTE_LIMIT and event["note"].endswith("...")
    assert event["eventTime"] == "2027-01-15T08:00:00.500000Z"


STEP = {
    "podsets": ["main"],
    "from": "required:topology.k8s.aws/network-node-layer-3",
    "to": "required:topology.k8s.aws/network-node-layer-2",
    "at": "2026-12-05T03:01:01Z",
    "reason": 'main: topology "aws" doesn\'t allow to fit any of 2 pod(s)',
}


def test_kgov_why_shows_the_governors_widenings(tmp_path: Path) -> None:
    snapshot = json.loads((Path(__file__).parent / "data" / "why" / "bundled.json").read_text())
    (finetune,) = [job for job in snapshot["jobs"] if job["metadata"]["name"] == "finetune"]
    finetune["metadata"].setdefault("annotations", {})[WIDENED] = json.dumps([STEP])
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot))
    where = ["-n", "hyperpod-ns-research", "--snapshot", str(path)]
    runner = CliRunner()
    answer = runner.invoke(main, ["why", "job/finetune", *where, "-o", "json"], catch_exceptions=False)
    assert json.loads(answer.output)["widened"] == [STEP]
    text = runner.invoke(main, ["why", "workload/job-finetune-872a0", *where], catch_exceptions=False).output
    assert (
        "Widened by the governor (topology patience):\n  2026-12-05T03:01:01Z podset main: "
        "required:topology.k8s.aws/network-node-layer-3 -> required:topology.k8s.aws/network-node-layer-2 "
        '(main: topology "aws" doesn\'t allow to fit any of 2 pod(s))\n'
    ) in text
    plain = runner.invoke(
        main,
        [
            "why",
            "job/finetune",
            "-n",
            "hyperpod-ns-research",
            "--snapshot",
            str(Path(__file__).parent / "data" / "why" / "bundled.json"),
            "-o",
            "json",
        ],
        catch_exceptions=False,
    )
    assert json.loads(plain.output)["widened"] == []


async def test_a_workload_that_breaks_a_rule_does_not_stop_the_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: one Workload whose owner carried a history too deeply nested to parse raised out
    of the round, so no Workload after it in the cache was ever widened. The round now skips it
    (logged, looked at again in 30 s) and goes on."""
    from kubernetes_asyncio import client
    from support import platform_with, teams_from

    from webhook.kube.widener import TopologyWidener

    teams = teams_from(platform_with({"topology": {"mode": "auto"}}))
    async with client.ApiClient(client.Configuration()) as api:
        widener = TopologyWidener(api, lambda: teams, lambda _ns: None, lambda: None, ("kgov", "lease"))
        for name in ("poisoned", "fine"):
            key = f"ml/{name}"
            widener.workloads.objects[key] = {
                "metadata": {"namespace": "ml", "name": name, "uid": name, "resourceVersion": "1"}
            }
        seen: list[str] = []

        async def consider(workload: dict[str, object], _teams: object, now: float) -> float | None:
            name = workload["metadata"]["name"]  # type: ignore[index]
            seen.append(name)
            if name == "poisoned":
                raise RecursionError("maximum recursion depth exceeded")
            return now + 5

        monkeypatch.setattr(widener, "_consider", consider)
        await widener.sweep(1000.0)
    assert seen == ["poisoned", "fine"]
    assert widener.quiet == {"poisoned": ("1", 1030.0), "fine": ("1", 1005.0)}


def _workload(uid: str, generation: int, observed: int, message: str) -> dict[str, object]:
    condition = {"type": "QuotaReserved", "status": "False", "message": message, "observedGeneration": observed}
    return {
        "metadata": {"namespace": "ml", "name": uid, "uid": uid, "generation": generation, "resourceVersion": "1"},
        "status": {"conditions": [condition]},
    }


async def test_each_watched_version_tells_kueues_topology_refusal_of_its_generation() -> None:
    """Kueue's refusal on topology is often overwritten by a quota message within the second: every
    version the watch brings is read, and the refusal is kept for its generation only."""
    from kubernetes_asyncio import client

    from webhook.kube.widener import TopologyWidener

    refusal = "couldn't assign flavors to pod set main: topology \"aws\" doesn't allow to fit any of 2 pod(s)"
    quota = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu"
    async with client.ApiClient(client.Configuration()) as api:
        widener = TopologyWidener(api, lambda: None, lambda _ns: None, lambda: None, ("kgov", "lease"))
        for version in (_workload("a", 1, 1, refusal), _workload("a", 1, 1, quota)):
            assert widener.workloads.apply({"type": "MODIFIED", "object": version})
        assert widener.earlier(widener.workloads.objects["ml/a"]) == refusal
        assert widener.earlier(_workload("a", 2, 1, quota)) is None  # the governor's step: another generation
        widener.observe("MODIFIED", _workload("b", 2, 1, refusal))  # Kueue's word on generation 1, not 2
        widener.observe("MODIFIED", _workload("c", 1, 1, quota))
        assert set(widener.refused) == {"a"}
        assert widener.workloads.apply({"type": "DELETED", "object": _workload("a", 1, 1, quota)})
    assert widener.refused == {}
