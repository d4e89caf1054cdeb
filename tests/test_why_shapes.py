"""``kgov why --snapshot``: an object of a snapshot with a value of the wrong type is named, never a traceback.

Each input is ``tests/data/why/bundled.json`` with one field damaged, as recorded by hand; the
checks are :mod:`webhook.why.shapes`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from webhook.cli import main
from webhook.why.kueue_shapes import Workload as WorkloadShape
from webhook.why.shapes import ShapeError, check_objects, check_snapshot
from webhook.why.snapshot import ClusterError, Snapshot, _check_read

DATA = Path(__file__).parent / "data" / "why"
BUNDLED: dict[str, Any] = json.loads((DATA / "bundled.json").read_text())
WORKLOAD = "Workload hyperpod-ns-research/job-finetune-872a0"
Change = Callable[[dict[str, Any]], object]


def _workload(data: dict[str, Any]) -> dict[str, Any]:
    return next(w for w in data["workloads"] if w["metadata"]["name"] == "job-finetune-872a0")


def _index(key: str, name: str) -> int:
    return next(i for i, o in enumerate(BUNDLED[key]) if o["metadata"]["name"] == name)


def _why(tmp_path: Path, data: dict[str, Any]) -> tuple[Path, Result]:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(data))
    args = ["why", "job/finetune", "-n", "hyperpod-ns-research", "--snapshot", str(path)]
    return path, CliRunner().invoke(main, args)


def _damaged(change: Change) -> dict[str, Any]:
    data = copy.deepcopy(BUNDLED)
    change(data)
    return data


W = _index("workloads", "job-finetune-872a0")
CQ = BUNDLED["clusterqueues"][0]["metadata"]["name"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        # Each was an AttributeError traceback (exit 1).
        (
            lambda d: _workload(d).update(status="x"),
            f'workloads[{W}] ({WORKLOAD}): status must be an object, got string "x"',
        ),
        (
            lambda d: _workload(d)["spec"].update(podSets="x"),
            f'workloads[{W}] ({WORKLOAD}): spec.podSets must be an array, got string "x"',
        ),
        (
            lambda d: d["clusterqueues"][0].update(spec="x"),
            f'clusterqueues[0] (ClusterQueue {CQ}): spec must be an object, got string "x"',
        ),
        (
            lambda d: d["topologies"][0]["spec"].update(levels="x"),
            'topologies[0] (Topology aws-network): spec.levels must be an array, got string "x"',
        ),
        (
            lambda d: _workload(d).setdefault("status", {}).update(admission={"podSetAssignments": "x"}),
            f'workloads[{W}] ({WORKLOAD}): status.admission.podSetAssignments must be an array, got string "x"',
        ),
        # Each was read as something else without a word (a count of 2, no policy, zero quota).
        (
            lambda d: _workload(d)["spec"]["podSets"][0].update(count="2"),
            f'workloads[{W}] ({WORKLOAD}): spec.podSets[0].count must be an integer, got string "2"',
        ),
        (
            lambda d: d.update(policy=[{"x": 1}]),
            "policy[0]: metadata must be set: every Kubernetes object has one",
        ),
        (
            lambda d: d["clusterqueues"][0]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(
                nominalQuota="lots"
            ),
            f"clusterqueues[0] (ClusterQueue {CQ}): spec.resourceGroups[0].flavors[0].resources[0].nominalQuota "
            'must be a Kubernetes quantity (e.g. 8, 500m, 64Gi), got string "lots"',
        ),
        (
            lambda d: d.update(pods=[{"metadata": {"name": "p", "namespace": "n"}, "spec": {"nodeName": 5}}]),
            "pods[0] (Pod n/p): spec.nodeName must be a string, got number 5",
        ),
        (
            lambda d: _workload(d)["spec"]["podSets"][0].update(count=-2),
            f"workloads[{W}] ({WORKLOAD}): spec.podSets[0].count must be an integer from 0 to 2147483647, "
            "got number -2",
        ),
        (
            lambda d: _workload(d)["status"].update(conditions=[1]),
            f"workloads[{W}] ({WORKLOAD}): status.conditions[0] must be an object, got number 1",
        ),
    ],
)
def test_a_snapshot_value_of_the_wrong_type_is_named(tmp_path: Path, change: Change, reason: str) -> None:
    path, done = _why(tmp_path, _damaged(change))
    assert (done.exit_code, done.output) == (2, f"kgov why: --snapshot {path}: {reason}\n")


def test_a_snapshot_without_a_policy_says_the_policy_is_not_known(tmp_path: Path) -> None:
    # Kubernetes allows it (no kgov-policy ConfigMap, or one that could not be read).
    _, done = _why(tmp_path, _damaged(lambda d: d.pop("policy")))
    assert done.exit_code == 0, done.output
    assert "Policy: not known (no kgov-policy ConfigMap readable; give --platform or --policy)" in done.output


def test_a_policy_configmap_without_the_policy_key_is_noted(tmp_path: Path) -> None:
    _, done = _why(tmp_path, _damaged(lambda d: d["policy"][0].update(data={})))
    assert done.exit_code == 0, done.output
    assert "the kgov-policy ConfigMap has no data key policy.json: the policy is not known" in done.output


def test_the_charts_configmap_with_the_platform_file_itself_is_compiled(tmp_path: Path) -> None:
    platform = (Path(__file__).resolve().parents[1] / "kueue-config" / "platform.yaml").read_text(encoding="utf-8")
    _, compiled = _why(tmp_path, _damaged(lambda d: None))
    _, done = _why(tmp_path, _damaged(lambda d: d["policy"][0].update(data={"platform.yaml": platform})))
    assert done.exit_code == 0, done.output
    assert "Policy: not known" not in done.output
    assert done.output == compiled.output


def test_a_platform_file_in_the_configmap_that_does_not_compile_is_noted(tmp_path: Path) -> None:
    _, done = _why(tmp_path, _damaged(lambda d: d["policy"][0].update(data={"platform.yaml": "teams: 3\n"})))
    assert done.exit_code == 0, done.output
    assert "the kgov-policy ConfigMap: data['platform.yaml']: invalid platform file" in done.output
    assert ": the policy is not known" in done.output


def test_null_counts_as_absent_as_for_kubernetes() -> None:
    check_objects("workloads", [{"metadata": {"name": "w"}, "spec": None, "status": {"admission": None}}],
                  WorkloadShape, "Workload")  # fmt: skip
    snapshot = Snapshot.from_dump({"jobs": [{"kind": "Job"}], "workloads": [{"metadata": {"name": "w"}}]})
    assert [w["metadata"]["name"] for w in snapshot.workloads] == ["w"]


def test_the_object_is_named_by_its_index_when_it_has_no_name() -> None:
    with pytest.raises(ShapeError, match=r"^workloads\[0\]: metadata.name must be a string, got number 5$"):
        check_snapshot({"workloads": [{"metadata": {"name": 5}}]})
    with pytest.raises(ShapeError, match=r"^nodes\[1\]: metadata must be set: every Kubernetes object has one$"):
        check_snapshot({"nodes": [{"metadata": {"name": "a"}}, {}]})


def test_a_cluster_read_is_checked_as_a_snapshot_is() -> None:
    snapshot = Snapshot(workloads=[{"metadata": {"name": "w", "namespace": "n"}, "spec": {"priority": "high"}}])
    with pytest.raises(ClusterError) as raised:
        _check_read(snapshot, ("workloads", "target"))
    assert str(raised.value) == (
        "the API server returned an object kgov cannot read: workloads[0] (Workload n/w): "
        'spec.priority must be an integer, got string "high"'
    )


def _paths(value: Any, at: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    if at:
        yield at
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from _paths(child, (*at, key))


def _shape(path: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """A path with list indexes as ``#``, but a Workload's index kept (the three differ in state)."""
    return tuple(
        "#" if isinstance(key, int) and not (depth == 1 and path[0] == "workloads") else key
        for depth, key in enumerate(path)
    )


def _order(path: tuple[str | int, ...]) -> bool:
    """False for a path in the Job asked about: of the paths of one shape, its is taken."""
    return not (len(path) > 1 and path[0] == "jobs" and BUNDLED["jobs"][path[1]]["metadata"]["name"] == "finetune")


#: One path of each shape of the bundled snapshot, every field in turn (in the Job asked about
#: rather than another's).
PATHS: dict[tuple[str | int, ...], tuple[str | int, ...]] = {}
for _path in sorted(_paths(BUNDLED), key=_order):
    PATHS.setdefault(_shape(_path), _path)


@pytest.mark.parametrize("damage", ["x", ["x"], 5, None], ids=["string", "list", "number", "null"])
def test_no_damaged_field_gives_a_traceback(tmp_path: Path, damage: Any) -> None:
    data = copy.deepcopy(BUNDLED)
    failures = []
    for path in PATHS.values():
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        kept, parent[path[-1]] = parent[path[-1]], copy.deepcopy(damage)
        _, done = _why(tmp_path, data)
        parent[path[-1]] = kept
        crashed = done.exception is not None and not isinstance(done.exception, SystemExit)
        if crashed or done.exit_code not in (0, 1, 2) or "Traceback" in done.output:
            failures.append((path, done.exit_code, repr(done.exception)))
    assert not failures, failures[:5]
    assert data == BUNDLED


class _Api:
    """The API server's answers for :func:`webhook.why.snapshot.read_snapshot`: the lists and
    objects of a snapshot document, by path."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    async def __aenter__(self) -> _Api:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    async def get(self, _: Any, path: str, query: Any = None) -> dict[str, Any] | None:
        resource = path.rsplit("/", 1)[-1]
        if resource in self.data:
            return {"items": self.data[resource]}
        if path.endswith("/jobs/finetune"):
            return next(j for j in self.data["jobs"] if j["metadata"]["name"] == "finetune")
        if path.endswith("/configmaps/kgov-policy"):
            return dict(self.data["policy"][0])
        return {"metadata": {"name": resource}} if "/namespaces/" in path else None


def test_a_cluster_object_of_the_wrong_type_is_named_too(monkeypatch: pytest.MonkeyPatch) -> None:
    for data, reason in (
        (BUNDLED, None),
        (
            _damaged(lambda d: _workload(d).update(status="x")),
            f'workloads[{W}] ({WORKLOAD}): status must be an object, got string "x"',
        ),
        (
            _damaged(lambda d: d["policy"][0].update(data={"policy.json": 5})),
            "policy[0] (ConfigMap kueue-governor-system/kgov-policy): data.policy.json must be a string, got number 5",
        ),
    ):
        api = _Api(data)
        monkeypatch.setattr("webhook.why.snapshot.open_client", lambda *_, api=api: _opened(api))
        monkeypatch.setattr("webhook.why.snapshot.get_json", api.get)
        done = CliRunner().invoke(main, ["why", "job/finetune", "-n", "hyperpod-ns-research", "--kubeconfig", "k"])
        if reason is None:
            assert done.exit_code == 0 and done.output.startswith("Job hyperpod-ns-research/finetune"), done.output
        else:
            assert (done.exit_code, done.output) == (
                2,
                f"kgov why: the API server returned an object kgov cannot read: {reason}\n",
            )


async def _opened(api: _Api) -> _Api:
    return api


async def test_a_visibility_position_of_another_type_is_estimated(monkeypatch: pytest.MonkeyPatch) -> None:
    from webhook.why.snapshot import _visibility

    async def answer(*_: Any) -> dict[str, Any]:
        return {
            "items": [
                {"metadata": {"name": "a"}, "positionInLocalQueue": 0, "positionInClusterQueue": 3},
                {"metadata": {"name": "b"}, "positionInLocalQueue": "x", "positionInClusterQueue": 1},
            ]
        }

    monkeypatch.setattr("webhook.why.snapshot.get_json", answer)
    assert await _visibility(None, "ns", "lq") == {"a": {"positionInLocalQueue": 0, "positionInClusterQueue": 3}}


def test_a_snapshot_key_defined_twice_is_refused_with_its_line_and_path(tmp_path: Path) -> None:
    """Defect: a snapshot object with one key twice was read last-wins, in silence."""
    text = json.dumps(BUNDLED, indent=1).replace('"kind": "Workload"', '"kind": "Workload", "kind": "Workload"', 1)
    path = tmp_path / "snapshot.json"
    path.write_text(text)
    result = CliRunner().invoke(main, ["why", "job/finetune", "-n", "hyperpod-ns-research", "--snapshot", str(path)])
    assert result.exit_code == 2, result.output
    line = next(n for n, row in enumerate(text.splitlines(), 1) if '"kind": "Workload", "kind"' in row)
    assert result.output.strip() == (
        f'kgov why: --snapshot {path}: duplicate mapping key "kind" at line {line} column 24 '
        f"(first at line {line} column 4) within workloads[0]"
    )
    assert "Traceback" not in result.output


def test_a_policy_json_key_defined_twice_is_a_note_not_a_crash(tmp_path: Path) -> None:
    """Defect: a kgov-policy ConfigMap's policy.json with one key twice was read last-wins."""
    data = copy.deepcopy(BUNDLED)
    policy = data["policy"][0]["data"]
    assert policy["policy.json"].lstrip().startswith("{")
    policy["policy.json"] = policy["policy.json"].replace("{", '{"teams": [], ', 1)
    _, result = _why(tmp_path, data)
    assert result.exit_code == 0, result.output
    note = 'Note: the kgov-policy ConfigMap\'s policy.json is not a valid policy: duplicate key "teams"'
    assert note in result.output
    assert "Policy: not known" in result.output


def test_why_reads_the_policy_configmap_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chart's policy ConfigMap is RELEASE-kueue-governor-policy, not the generator's kgov-policy:
    `kgov why --policy-configmap NS/NAME` reads that one (before, the policy was "not known")."""
    requested: list[str] = []

    class _ChartApi(_Api):
        async def get(self, client: Any, path: str, query: Any = None) -> dict[str, Any] | None:
            requested.append(path)
            if path.endswith("/configmaps/kgov-kueue-governor-policy"):
                return dict(self.data["policy"][0])
            if path.endswith("/configmaps/kgov-policy"):
                return None
            return await super().get(client, path, query)

    api = _ChartApi(copy.deepcopy(BUNDLED))
    monkeypatch.setattr("webhook.why.snapshot.open_client", lambda *_: _opened(api))
    monkeypatch.setattr("webhook.why.snapshot.get_json", api.get)
    args = ["why", "job/finetune", "-n", "hyperpod-ns-research", "--kubeconfig", "k"]
    chart = CliRunner().invoke(main, [*args, "--policy-configmap", "kueue-governor-system/kgov-kueue-governor-policy"])
    assert chart.exit_code == 0, chart.output
    assert "/api/v1/namespaces/kueue-governor-system/configmaps/kgov-kueue-governor-policy" in requested
    assert "Policy: team research" in chart.output
    generator = CliRunner().invoke(main, args)
    assert "Policy: not known" in generator.output
    bad = CliRunner().invoke(main, [*args, "--policy-configmap", "a/../b"])
    assert bad.exit_code == 2 and bad.stderr.startswith("kgov why: --policy-configmap a/../b: namespace")
