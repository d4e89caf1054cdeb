"""The server side of topology widening: the CLI's options, the Workload cache's keys and the Event
(webhook.kube.widener; the loop itself runs against the real API server and Kueue in
e2e/test_patience.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from support import PLATFORM

from webhook.cli import main
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
