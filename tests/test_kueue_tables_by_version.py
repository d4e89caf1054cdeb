"""Kueue v0.19.2's transcribed TAS tables (``tests/data/kueue/v0.19.2/``, :mod:`test_kueue_oracle`)
judged under each supported release's rules (:data:`webhook.core.kueue.versions.VERSIONS`).

Under v0.19.2 every row gets Kueue's verdict (that module's tests). Under v0.20.7 every row keeps
its verdict but those listed in :data:`CHANGED_IN`, each with the v0.20 change that flips it; the
v0.20.7 tags' own tables are not transcribed (see the README's "Supported Kueue versions").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import test_kueue_oracle as oracle
from support import platform_with, teams_from

from webhook.core.kueue.versions import VERSIONS

#: The verdict tests of :mod:`test_kueue_oracle`, each with its rows' parameters.
VERDICT_TESTS: dict[str, Callable[..., None]] = {
    "job": oracle.test_job_webhook_rows_get_kueues_verdict,
    "jobset": oracle.test_jobset_webhook_rows_get_kueues_verdict,
    "leaderworkerset": oracle.test_leaderworkerset_webhook_rows_get_kueues_verdict,
    "mpijob": oracle.test_mpijob_webhook_rows_get_kueues_verdict,
    "ray": oracle.test_ray_webhook_rows_get_kueues_verdict,
    "pod": oracle.test_pod_webhook_rows_get_kueues_verdict,
    "tas_validation": oracle.test_tas_validation_rows_get_kueues_verdict_in_a_team_without_a_topology_rule,
}

#: Release → (table, Go test/case) → why that release's verdict differs from v0.19.2's.
CHANGED_IN: dict[str, dict[tuple[str, str], str]] = {
    "v0.19.2": {},
    "v0.20.7": {
        (
            "leaderworkerset",
            "TestValidateCreate/invalid slice topology request - grouping requested together with slicing",
        ): "TASGroupedPodSetSlicing (Beta, on by default in v0.20, Kueue #15111) lets a podset group carry slices",
        ("tas_validation", "TestValidateSliceRequiredTopologyConstraintsAnnotation/invalid: with podset-group-name"): (
            "TASGroupedPodSetSlicing: Kueue's later table has the case twice, refused with the gate off and "
            "accepted with it on"
        ),
        (
            "tas_validation",
            "TestValidateSliceSizeAnnotationUpperBound/valid: multi-layer outermost size within bound",
        ): (
            "TASPartialSlices (Beta, on by default in v0.20, Kueue #15640): with more than one layer the outermost "
            "size (16) must divide the pods (20); Kueue's later table moves this case to 32 pods and adds the "
            "20-pod one as refused"
        ),
    },
}


def _cases() -> list[Any]:
    out = []
    for table, test in VERDICT_TESTS.items():
        marks = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
        (mark,) = marks
        for values in mark.args[1]:
            params = values if isinstance(values, tuple) else (values,)
            row = params[-1]
            key = (table, oracle.row_id(row))
            prefix = f"{params[0]}/" if len(params) > 1 else ""
            out.extend(
                pytest.param(version, table, params, key, id=f"{version}/{table}/{prefix}{key[1]}")
                for version in VERSIONS
            )
    return out


@pytest.mark.parametrize(("version", "table", "params", "key"), _cases())
def test_each_row_keeps_kueue_v0_19_2s_verdict_unless_the_release_changed_it(
    version: str, table: str, params: tuple[Any, ...], key: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = platform_with({"queue": {"enforcement": "enforce"}})
    data["kueue"] = {"version": version}
    monkeypatch.setattr(oracle, "NO_TOPOLOGY_RULE", teams_from(data))
    oracle.skip_unmodelled(params[-1])
    if key in CHANGED_IN[version]:
        with pytest.raises(AssertionError):
            VERDICT_TESTS[table](*params)
    else:
        VERDICT_TESTS[table](*params)


def test_every_changed_row_is_a_row() -> None:
    known = {(table, oracle.row_id(p.values[2][-1])) for p in _cases() for table in [p.values[1]]}
    for changed in CHANGED_IN.values():
        assert set(changed) <= known
