"""Integers written as text of any length (annotations, label values, JSON numbers): never a crash.

Python refuses ``int(text)`` of more than 4,300 digits with a ``ValueError``; a slice size of
5,000 digits in a pod template's annotation made the webhook answer 500 on CREATE, and on UPDATE
when only the stored object carried it. Every such text is now read by
:func:`webhook.core.objects.integers.decimal_int`, which never converts beyond int64 (Go's
``strconv.ParseInt`` refuses those as out of range too)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from support import job, platform_with, review_body, teams_from

from webhook.core.admission.review import review
from webhook.core.objects.integers import decimal_int
from webhook.core.platform.platform import PlatformError, parse_platform

HUGE = "1" + "0" * 4999
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
SLICE_LEVEL = "kueue.x-k8s.io/podset-slice-required-topology"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
BLOCK, RACK = "topology.k8s.aws/network-node-layer-2", "topology.k8s.aws/network-node-layer-3"


@pytest.mark.parametrize(
    ("text", "signs", "expected"),
    [
        ("4", "+-", 4),
        ("0004", "+-", 4),
        ("+4", "+-", 4),
        ("-4", "+-", -4),
        ("-4", "+", None),
        ("+4", "", None),
        ("+-4", "+-", None),
        ("", "+-", None),
        ("4 ", "+-", None),
        ("²", "+-", None),
        ("٤", "+-", None),  # an Arabic-Indic four: Go reads ASCII digits only
        ("9223372036854775807", "+-", 2**63 - 1),
        ("00000000000000000000009223372036854775807", "+-", 2**63 - 1),
        ("99999999999999999999", "+-", None),  # 20 digits: beyond int64
        (HUGE, "+-", None),
        ("0" * 5000, "+-", 0),
    ],
)
def test_decimal_text_reads_as_go_reads_it_and_never_past_int64(text: str, signs: str, expected: int | None) -> None:
    assert decimal_int(text, signs) == expected


def _sliced_job(size: str) -> dict[str, Any]:
    obj = job()
    obj["spec"]["parallelism"] = 4
    obj["spec"]["template"]["metadata"] = {"annotations": {REQUIRED: BLOCK, SLICE_LEVEL: RACK, SLICE_SIZE: size}}
    return obj


@pytest.mark.parametrize("size", [HUGE, "+-2", "99999999999999999999"])
def test_a_slice_size_of_any_length_is_answered_with_its_path(size: str) -> None:
    teams = teams_from(platform_with({"topology": {"mode": "auto", "enforcement": "enforce"}}))
    response = review(review_body(_sliced_job(size), "ml"), teams).response["response"]
    assert response["allowed"] is False
    assert "podset-slice-size" in response["status"]["message"]
    assert len(response["status"]["message"]) < 2000  # the value is shown cut, not as 5,000 digits


def test_a_stored_object_with_a_slice_size_of_5000_digits_does_not_break_an_update() -> None:
    """Regression: only the oldObject carried it; the UPDATE that fixes it was answered 500."""
    old, new = _sliced_job(HUGE), _sliced_job("2")
    for obj in (old, new):
        obj["metadata"]["namespace"] = "ml"
        obj["spec"]["suspend"] = True
    teams = teams_from(platform_with({"topology": {"mode": "auto", "enforcement": "enforce"}}))
    body = review_body(copy.deepcopy(new), "ml", operation="UPDATE", old=old)
    response = review(body, teams, governor="system:serviceaccount:kgov:kgov").response["response"]
    assert response["allowed"] is True, response


def test_a_node_affinity_bound_of_5000_digits_is_a_platform_error() -> None:
    platform = platform_with(
        {"nodeAffinity": [{"key": "example.com/gpus", "operator": "Gt", "values": [HUGE]}]},
    )
    with pytest.raises(PlatformError, match=r"teams\[0\]\.policy\.nodeAffinity\[0\]\.values\[0\].*operator Gt"):
        parse_platform(platform)


def test_a_slice_layer_size_of_5000_digits_is_answered() -> None:
    obj = job()
    obj["spec"]["parallelism"] = 4
    layers = f'[{{"topology": "{RACK}", "size": {HUGE}}}]'
    obj["spec"]["template"]["metadata"] = {
        "annotations": {REQUIRED: BLOCK, "kueue.x-k8s.io/podset-slice-required-topology-constraints": layers}
    }
    teams = teams_from(platform_with({"topology": {"mode": "auto", "enforcement": "enforce"}}))
    response = review(review_body(obj, "ml"), teams).response["response"]
    assert response["allowed"] is False
    assert "an int32" in response["status"]["message"]
