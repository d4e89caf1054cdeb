"""The placement benchmark over several seeds and cluster shapes (benchmarks/placement/summary.py,
the policies and the saved runs of jobs.py and run.py), on the figures of snapshots recorded from
real 16-node runs (tests/data/placement, see test_placement_metrics.py) and on figures set by hand
where a margin is the point."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks.placement.jobs import DEFAULT_PATIENCE, WIDENING_OPTIONS, patience_order, platform_file, policies
from benchmarks.placement.metrics import PolicyMetrics, policy_metrics, trim_snapshot
from benchmarks.placement.report import table
from benchmarks.placement.run import load_saved, main
from benchmarks.placement.summary import Target, candidates, ratio, spread, summary, verdict
from e2e.manifests import TopologyShape
from webhook.core.platform import fields
from webhook.core.platform.models import Platform

DATA = Path(__file__).parent / "data" / "placement"


def snapshot(name: str) -> dict[str, Any]:
    return dict(json.loads((DATA / name).read_text()))


# implicit-1x2x2x4: 14 jobs all admitted, 2/9 in their smallest domain, wait mean 9.0 s, p95 42 s,
# utilisation 64.0 %; required-L3: 2 jobs never admitted, 1/7, 4.2 s, 17 s, 65.0 %
IMPLICIT = policy_metrics(snapshot("implicit-1x2x2x4.json"))
RACKED = policy_metrics(snapshot("required-L3-1x2x2x4.json"))


def good(base: PolicyMetrics, **changes: Any) -> PolicyMetrics:
    """``base`` with every multi-node job in its smallest domain and the changes given."""
    return replace(base, in_smallest_domain=1.0, **changes)


@pytest.mark.parametrize(
    ("candidate", "base", "expected"),
    [(6.0, 4.0, 1.5), (0.0, 0.0, 1.0), (1.0, 0.0, math.inf), (None, 4.0, None), (4.0, None, None)],
)
def test_ratio(candidate: float | None, base: float | None, expected: float | None) -> None:
    assert ratio(candidate, base) == expected


def test_spread_skips_missing_values_and_is_none_without_any() -> None:
    s = spread([2.0, None, 4.0, 6.0])
    assert s is not None
    assert (s.values, s.low, s.high, s.mean, s.stdev) == ((2.0, 4.0, 6.0), 2.0, 6.0, 4.0, 2.0)
    one = spread([3.0])
    assert one is not None and one.stdev == 0.0
    assert spread([None, None]) is None


def test_a_target_holds_only_when_every_run_meets_it() -> None:
    runs = {
        ("1x2x2x4", 1): {"implicit": IMPLICIT, "auto-patient-30s": good(IMPLICIT, wait_mean=9.4)},  # 1.04x
        ("1x2x2x4", 2): {"implicit": IMPLICIT, "auto-patient-30s": good(IMPLICIT, wait_mean=9.9)},  # 1.10x
        ("2x2x4x4", 1): {"implicit": IMPLICIT, "auto-patient-30s": good(IMPLICIT, wait_mean=8.1)},  # 0.90x
    }
    lines = verdict(runs, "auto-patient-30s").splitlines()
    assert lines[0] == (
        "target for auto-patient-30s against implicit, over 3 runs (2 shapes x seeds 1, 2): DOES NOT HOLD in every run"
    )
    assert lines[1] == (
        "  met    multi-node jobs in their smallest feasible domain >= 90 %: in 3 of 3 runs; "
        "worst 100.0 % (1x2x2x4 seed 1), mean 100.0 %"
    )
    # one seed's 1.10x misses, whatever the mean of the three (1.01x)
    assert lines[2] == (
        "  MISSED mean wait <= 1.05x implicit's: in 2 of 3 runs; worst 1.10x (1x2x2x4 seed 2), mean 1.01x"
    )
    assert lines[3] == "  met    p95 wait <= 1.5x implicit's: in 3 of 3 runs; worst 1.00x (1x2x2x4 seed 1), mean 1.00x"
    assert lines[4] == (
        "  met    no job unadmitted that implicit admits: in 3 of 3 runs; worst 0 jobs (1x2x2x4 seed 1), mean 0 jobs"
    )
    assert lines[5] == (
        "  met    GPU utilisation at most 2 points below implicit's: in 3 of 3 runs; "
        "worst +0.0 (1x2x2x4 seed 1), mean +0.0"
    )
    runs[("1x2x2x4", 2)]["auto-patient-30s"] = good(IMPLICIT, wait_mean=9.45)
    assert verdict(runs, "auto-patient-30s").splitlines()[0].endswith("HOLDS in every run")


def test_the_verdict_names_the_worst_run_of_each_criterion() -> None:
    runs = {
        ("16", 1): {"implicit": IMPLICIT, "auto": RACKED},  # 2 jobs lost, 1 point above, 14.3 %
        ("16", 2): {
            "implicit": IMPLICIT,
            "auto": good(IMPLICIT, utilisation=IMPLICIT.utilisation - 0.025, wait_p95=70.0),
        },
    }
    lines = verdict(runs, "auto", Target(locality=0.1)).splitlines()
    assert lines[1].startswith("  met    multi-node jobs in their smallest feasible domain >= 10 %: in 2 of 2 runs")
    assert lines[3] == "  MISSED p95 wait <= 1.5x implicit's: in 1 of 2 runs; worst 1.67x (16 seed 2), mean 1.04x"
    assert lines[4] == (
        "  MISSED no job unadmitted that implicit admits: in 1 of 2 runs; worst 2 jobs (16 seed 1), mean 1 jobs"
    )
    assert lines[5] == (
        "  MISSED GPU utilisation at most 2 points below implicit's: in 1 of 2 runs; worst -2.5 (16 seed 2), mean -0.7"
    )
    assert verdict({("16", 1): {"auto": RACKED}}, "auto") == "target for auto: need both 'auto' and 'implicit' in a run"


def test_the_summary_gives_each_seed_its_spread_and_the_ratio_of_the_same_run() -> None:
    runs = {
        ("1x2x2x4", 1): {"implicit": IMPLICIT, "auto-patient-30s": RACKED},
        ("1x2x2x4", 2): {"implicit": replace(IMPLICIT, wait_mean=3.0), "auto-patient-30s": good(IMPLICIT)},
    }
    assert candidates(runs) == ["auto-patient-30s"]
    text = summary(runs)
    rows: dict[tuple[str, str], list[str]] = {}
    section = ""
    for line in text.split("\n\n")[0].splitlines()[2:]:
        if not line.startswith("  "):
            section = line
        else:
            label, *cells = line.strip().split("   ")
            rows[(section, label.strip())] = [c.strip() for c in cells if c.strip()]
    assert text.splitlines()[0] == "shape 1x2x2x4, seeds 1, 2"
    assert text.splitlines()[1].split() == ["seed", "1", "seed", "2", "min", "max", "mean", "stdev"]
    # wait mean: 4.2 against 9.0 in seed 1 (0.46x), 9.0 against 3.0 in seed 2 (3.00x)
    ratios = ["0.46x", "3.00x", "0.46x", "3.00x", "1.73x", "1.79"]
    assert rows[("wait mean (s)", "auto-patient-30s / implicit")] == ratios
    # p95: 17 against 42 (0.40x), 42 against 42 (1.00x)
    assert rows[("wait p95 (s)", "auto-patient-30s / implicit")] == [
        "0.40x",
        "1.00x",
        "0.40x",
        "1.00x",
        "0.70x",
        "0.42",
    ]
    assert rows[("wait mean (s)", "implicit")] == ["9.0", "3.0", "3.0", "9.0", "6.0", "4.2"]
    points = ["+1.0", "+0.0", "+0.0", "+1.0", "+0.5", "0.7"]
    assert rows[("GPU utilisation", "auto-patient-30s - implicit (points)")] == points
    assert rows[("never admitted", "auto-patient-30s, admitted by implicit")] == ["2", "0", "0", "2", "1", "1.4"]
    assert rows[("in smallest feasible domain", "auto-patient-30s")][:2] == ["14.3 %", "100.0 %"]
    assert "target for auto-patient-30s against implicit, over 2 runs" in text


def test_patiences_are_the_platform_files_and_sort_by_their_seconds() -> None:
    assert [patience_order(p) for p in ("45s", "5m", "1h30m", "never")] == [45.0, 300.0, 5400.0, math.inf]
    for bad in ("", "soon", "0s", "45", "1.5m"):
        with pytest.raises(ValueError):
            patience_order(bad)
    # the benchmark's default is the product's, and every governor widens as the chart's does
    assert DEFAULT_PATIENCE == fields.DEFAULT_PATIENCE
    assert WIDENING_OPTIONS[0] == "--topology-widening"


def test_auto_patient_is_one_policy_per_patience() -> None:
    chosen = policies(["auto-patient", "implicit"], ["never", "60s", "15s", "60s"])
    assert chosen == [
        ("implicit", {"mode": "none"}),
        ("auto-patient-15s", {"mode": "auto", "patience": "15s"}),
        ("auto-patient-60s", {"mode": "auto", "patience": "60s"}),
        ("auto-patient-never", {"mode": "auto", "patience": "never"}),
    ]
    with pytest.raises(ValueError, match=r"unknown policies \['autopatient'\]"):
        policies(["autopatient"], ["30s"])
    with pytest.raises(ValueError, match="needs at least one patience"):
        policies(["auto-patient"], [])
    team = platform_file(TopologyShape.parse("1x2x2x4"), chosen[1][1])["teams"][0]
    assert team["policy"]["topology"] == {"mode": "auto", "patience": "15s"}
    # the platform file as the governor reads it: the patience kept
    platform = Platform.model_validate(platform_file(TopologyShape.parse("1x2x2x4"), chosen[1][1]))
    topology = platform.teams[0].policy.topology
    assert topology is not None and topology.patience == "15s"


def write_run(folder: Path, names: dict[str, str], **fields: Any) -> None:
    folder.mkdir(parents=True)
    for policy, source in names.items():
        (folder / f"{policy}.json").write_text(json.dumps({**snapshot(source), **fields}))


def test_saved_runs_are_read_per_directory_in_policy_order(tmp_path: Path) -> None:
    pair = {"auto-patient-5m": "required-L3-1x2x2x4.json", "implicit": "implicit-1x2x2x4.json"}
    write_run(
        tmp_path / "1x2x2x4-seed-1", {**pair, "auto-patient-90s": "implicit-1x2x2x4.json"}, shape="1x2x2x4", seed=1
    )
    write_run(tmp_path / "1x2x2x4-seed-2", pair, shape="1x2x2x4", seed=2)
    runs = load_saved(tmp_path)
    assert list(runs) == [("1x2x2x4", 1), ("1x2x2x4", 2)]
    assert list(runs[("1x2x2x4", 1)]) == ["implicit", "auto-patient-90s", "auto-patient-5m"]
    # an older run: snapshots in the directory itself, without shape and seed
    old = tmp_path / "old"
    write_run(old, {"implicit": "implicit-1x2x2x4.json", "auto": "required-L3-1x2x2x4.json"})
    assert list(load_saved(old)) == [("old", 0)]


def test_saved_runs_of_different_streams_are_refused(tmp_path: Path) -> None:
    write_run(tmp_path / "a", {"implicit": "implicit-1x2x2x4.json", "auto": "implicit-jobset-1x2x2x4.json"})
    different = snapshot("implicit-jobset-1x2x2x4.json")
    different["jobs"] = different["jobs"][:3]
    (tmp_path / "a" / "auto.json").write_text(json.dumps(different))
    with pytest.raises(ValueError, match="not of one stream"):
        load_saved(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no snapshot"):
        load_saved(empty)


def test_the_command_prints_every_run_and_the_summary_from_saved_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pair = {"implicit": "implicit-1x2x2x4.json", "auto-patient-30s": "required-L3-1x2x2x4.json"}
    write_run(tmp_path / "r1", pair, shape="1x2x2x4", seed=1, load=[0.5, 1.5])
    write_run(tmp_path / "r2", pair, shape="2x2x4x4", seed=1)
    assert main(["--from", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (
        "1-minute load average at the start and end of each policy: implicit 0.5-1.5, auto-patient-30s 0.5-1.5" in out
    )
    assert out.count("wait p95 (s)") == 4  # each run's table, each shape's summary
    assert "over 2 runs (2 shapes x seeds 1): DOES NOT HOLD in every run" in out
    assert main(["--from", str(tmp_path / "nothing-here")]) == 2
    assert "error:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["--patience", "soon"])
    assert stopped.value.code == 2
    assert "--patience: 'soon' is no duration" in capsys.readouterr().err


def test_widenings_are_counted_from_each_jobsets_history() -> None:
    base = snapshot("implicit-jobset-1x2x2x4.json")
    keep = {k: base[k] for k in ("levels", "gpus_per_node", "node_count", "t0", "horizon", "end", "jobs")}

    def jobset(name: str, history: str | None) -> dict[str, Any]:
        annotations = {} if history is None else {"kueue-governor.io/widened": history}
        return {"metadata": {"name": name, "annotations": annotations}}

    step = {"podsets": ["workers"], "from": "required:rack", "to": "required:block", "at": "2026-12-05T03:00:00Z"}
    owners = [
        jobset("job-0001", json.dumps([step, {**step, "from": "required:block", "to": "required:spine"}])),
        jobset("job-0002", json.dumps([step])),
        jobset("job-0003", None),  # never widened
        jobset("job-0004", "{not json"),  # unreadable: not counted
    ]
    trimmed = trim_snapshot(keep, [], [], [], owners)
    assert trimmed["widened"] == {"job-0001": 2, "job-0002": 1}
    metrics = policy_metrics({**base, "widened": trimmed["widened"]})
    assert (metrics.widened, metrics.widening_steps) == (2, 3)
    assert table({"auto-patient-20s": metrics}).splitlines()[13].split()[-2:] == ["2", "(3)"]
    assert policy_metrics(base).widened == 0  # an older snapshot: nothing recorded
