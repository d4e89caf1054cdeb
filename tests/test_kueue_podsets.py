"""Kueue's own ``PodSets()`` test tables as the oracle of our view (SPEC §4, §13).

Every data file under ``tests/data/kueue/<version>/`` marked ``checks: podsets`` holds the rows
of one Kueue test file's ``PodSets()`` tables, transcribed from Kueue's source at that version,
each naming its Go test function and case: the object as the test builds it and the podsets
Kueue returns. Our view (:func:`webhook.core.kueue.view.kueue_view`) of the object must give the
same podset names and counts in the same order, and, where a row states a podset's per-pod
``requests``, the same requests; where Kueue fails to build the podsets (``kueueError``), our
view must name the podset it cannot build. A row we do not model carries a ``skip`` reason.
"""

from __future__ import annotations

import copy
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import REPO, platform_with, review_body, teams_from

from webhook.core.admission.review import review
from webhook.core.kueue.kinds import find_kind
from webhook.core.kueue.view import kueue_view
from webhook.core.objects.quantity import parse_quantity

DATA = REPO / "tests" / "data" / "kueue"
NO_TOPOLOGY_RULE = teams_from(platform_with({"queue": {"enforcement": "enforce"}}))
#: What the governor says of each podset limit a Kueue webhook row checks (its field's last part).
SAYS = {"workerGroupSpecs": "a Workload holds at most 18 podsets", "groupName": "of its podsets are named 'head'"}


def tables(checks: str = "podsets") -> list[Path]:
    """The data files of every Kueue version marked ``checks: <checks>``, by version then name."""
    return [
        path
        for path in sorted(DATA.glob("*/*.yaml"))
        if (yaml.safe_load(path.read_text()) or {}).get("checks") == checks
    ]


def rows(checks: str = "podsets") -> list[Any]:
    params = []
    for path in tables(checks):
        for row in yaml.safe_load(path.read_text())["rows"]:
            name = f"{path.parent.name}/{path.stem}/{row['test']}/{row['case']}"
            params.append(pytest.param(row, id=name))
    return params


def requests(amounts: dict[str, Any]) -> dict[str, Decimal]:
    """A row's per-pod requests (resource → quantity) in base units, zero amounts left out."""
    out = {name: parse_quantity(str(value)) for name, value in amounts.items()}
    return {name: amount for name, amount in out.items() if amount}


@pytest.mark.parametrize("row", rows())
def test_our_view_gives_the_podsets_of_kueues_podsets_tests(row: dict[str, Any]) -> None:
    if "skip" in row:
        pytest.skip(f"not modelled: {row['skip']}")
    obj = row["object"]
    kind = find_kind(obj["apiVersion"], obj["kind"])
    assert kind is not None, (obj["apiVersion"], obj["kind"])
    view = kueue_view(obj, kind)
    assert view.problems == ()
    if "kueueError" in row:  # Kueue builds no podsets: ours says which one it cannot build
        assert [p.name for p in view.podsets if p.unbuilt and row["kueueError"] in p.unbuilt], row["kueueError"]
        return
    assert [(p.name, p.count) for p in view.podsets] == [(p["name"], p["count"]) for p in row["podsets"]]
    for ours, theirs in zip(view.podsets, row["podsets"], strict=True):
        if "requests" in theirs:
            mine = {name: amount for name, amount in (ours.requests or {}).items() if amount}
            assert mine == requests(theirs["requests"]), ours.name
        if "kueueRequests" in theirs:  # requests our view does not model (the row's `unmodelled`)
            assert "unmodelled" in row, row["case"]
            if ours.requests is not None:  # a view that learns them must learn Kueue's
                mine = {name: amount for name, amount in ours.requests.items() if amount}
                assert mine == requests(theirs["kueueRequests"]), ours.name


def test_the_tables_name_their_source_and_count_their_rows() -> None:
    """Each file names the Kueue source it transcribes, at its version, and how many cases each of
    its Go tests has there (``cases``); each case is there once. A table of rows not modelled yet
    (``checks: not-modelled``) gives each its reason."""
    assert tables(), "no PodSets() tables"
    for path in tables("not-modelled"):
        listed = yaml.safe_load(path.read_text())
        assert all(r.get("skip") for r in listed["rows"]), path
        assert {t: sum(r["test"] == t for r in listed["rows"]) for t in listed["cases"]} == listed["cases"], path
    for path in tables():
        table = yaml.safe_load(path.read_text())
        assert table["source"].startswith(f"kubernetes-sigs/kueue {path.parent.name} pkg/"), path
        ids = [(r["test"], r["case"]) for r in table["rows"]]
        assert len(set(ids)) == len(ids), path
        # each Go test's cases, counted in Kueue's source: all are here
        assert {test: sum(t == test for t, _ in ids) for test in table["cases"]} == table["cases"], path
        assert all(r["podsets"] or "skip" in r or "kueueError" in r for r in table["rows"]), path


@pytest.mark.parametrize("row", rows("podset-limits"))
def test_kueues_podset_limits_get_kueues_verdict(row: dict[str, Any]) -> None:
    """A CREATE Kueue's webhook refuses for its podsets is denied in a team without a topology
    rule (queue rule ``enforce``), saying why for each of Kueue's fields; one it accepts is not."""
    obj = row["object"]
    kind = find_kind(obj["apiVersion"], obj["kind"])
    assert kind is not None
    assert len(kueue_view(obj, kind).podsets) == row["podsets"]
    managed = copy.deepcopy(obj)  # Kueue's "queue" is any LocalQueue: here the team's
    managed["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "ml-queue"
    outcome = review(review_body(managed, "ml"), NO_TOPOLOGY_RULE)
    limits = [d for d in outcome.plan.denials if any(said in d for said in SAYS.values())]
    if row["verdict"] == "accepted":
        assert outcome.plan.allowed, outcome.plan.denials
        return
    assert not outcome.plan.allowed
    for field in row["fields"]:
        said = SAYS[field.rsplit(".", 1)[-1]]
        assert [d for d in limits if said in d], (field, outcome.plan.denials)
