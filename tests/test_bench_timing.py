"""The arithmetic the benchmarks through kube-apiserver report with (``benchmarks/timing.py``): a
process's CPU time from its ``/proc/<pid>/stat`` line, CPU per create, percentiles and ratios; and
the table of what each option of ``bench_fail_safe.py`` does (``benchmarks/fail_safe_options.py``)."""

from __future__ import annotations

import math
import os
import time

import pytest

from benchmarks.fail_safe_options import FEATURES, OPTIONS, feature_table
from benchmarks.timing import cpu_ms_per_create, median_ratio, percentile, process_cpu_seconds, ratio, stat_cpu_seconds

#: A kube-apiserver's /proc/<pid>/stat line (proc(5)): utime 4321 and stime 1234 ticks (fields 14, 15).
APISERVER_STAT = (
    "4242 (kube-apiserver) S 4200 4242 4200 0 -1 4194560 98765 0 12 0 4321 1234 0 0 20 0 23 0 "
    "5150 2147483648 70000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
)


def test_cpu_seconds_are_utime_plus_stime_in_ticks() -> None:
    assert stat_cpu_seconds(APISERVER_STAT, 100) == pytest.approx(55.55)
    assert stat_cpu_seconds(APISERVER_STAT, 1000) == pytest.approx(5.555)


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() -> None:
    stat = APISERVER_STAT.replace("(kube-apiserver)", "(kube apiserver) (x))")
    assert stat_cpu_seconds(stat, 100) == pytest.approx(55.55)


@pytest.mark.parametrize("text", ["", "4242 kube-apiserver S 1 2 3", "4242 (kube-apiserver) S 4200 4242"])
def test_a_line_that_is_not_a_stat_line_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="not a /proc/<pid>/stat line"):
        stat_cpu_seconds(text, 100)


def test_this_process_cpu_time_grows_with_work() -> None:
    before = process_cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    assert process_cpu_seconds(os.getpid()) >= before + 0.03


def test_cpu_per_create_is_the_difference_over_the_creates_in_ms() -> None:
    assert cpu_ms_per_create(55.55, 56.05, 100) == pytest.approx(5.0)
    assert cpu_ms_per_create(10.0, 10.0, 40) == 0.0
    assert math.isnan(cpu_ms_per_create(10.0, 11.0, 0))
    with pytest.raises(ValueError, match="not the same process"):
        cpu_ms_per_create(56.0, 1.0, 10)


def test_percentile_by_nearest_rank_on_unsorted_values() -> None:
    values = [9.0, 1.0, 5.0, 3.0, 7.0]
    assert percentile(values, 0.5) == 5.0
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 0.99) == 9.0
    assert percentile(list(range(1, 101)), 0.99) == 99  # round(0.99 * 99) = 98: the 99th value
    assert math.isnan(percentile([], 0.5))


def test_ratio_to_the_baseline() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert math.isnan(ratio(3.0, 0.0))


def test_feature_table_has_a_cell_per_option_and_only_kgov_does_everything() -> None:
    assert all(len(cells) == len(OPTIONS) for cells in FEATURES.values())
    kgov = OPTIONS.index("kgov")
    none = OPTIONS.index("none")
    features = [name for name in FEATURES if name != "while the webhook is down"]
    assert all(FEATURES[name][kgov] == "yes" for name in features)
    assert all(FEATURES[name][none] == "no" for name in features)
    lines = feature_table().splitlines()
    assert lines[0].split() == ["feature", *OPTIONS]
    assert lines[1].split()[:3] == ["queue", "label", "no"]


def test_median_ratio_pairs_each_round_with_the_baseline_of_the_same_round() -> None:
    # A noisy second round doubles both figures: the paired ratios stay 1.5.
    assert median_ratio([3.0, 6.0, 4.5], [2.0, 4.0, 3.0]) == pytest.approx(1.5)
    assert median_ratio([1.0, 10.0, 3.0], [1.0, 1.0, 1.0]) == 3.0
    assert math.isnan(median_ratio([], []))
    with pytest.raises(ValueError, match="2 values for 1 baselines"):
        median_ratio([1.0, 2.0], [1.0])
