"""Closed metric label sets and the cutting of echoed values (no server needed)."""

from __future__ import annotations

from typing import get_args

from hypothesis import given
from hypothesis import strategies as st

from webhook.core.admission.envelope import clip
from webhook.core.kueue.kinds import KINDS
from webhook.core.plan.draft import Rule
from webhook.serve.metrics import KIND_LABELS, OTHER, RULE_LABELS, kind_label, operation_label, rule_label


def test_rule_labels_cover_every_rule_of_the_planner() -> None:
    # A rule added to the planner without a label would be counted as "other": this fails first.
    assert set(get_args(Rule)) | {"namespace"} == RULE_LABELS


def test_kind_labels_are_the_kinds_table() -> None:
    assert {row.kind for row in KINDS} == KIND_LABELS
    assert kind_label("JobSet") == "JobSet"
    assert kind_label("Kind17") == OTHER
    assert operation_label("CREATE") == "CREATE"
    assert operation_label("PATCH") == OTHER
    assert rule_label("queue") == "queue"
    assert rule_label("made-up") == OTHER


@given(st.text(st.characters(blacklist_characters="…[]"), max_size=5000), st.integers(min_value=40, max_value=3000))
def test_clip_keeps_head_and_tail_and_says_how_much_was_cut(text: str, limit: int) -> None:
    cut = clip(text, limit)
    if len(text) <= limit:
        assert cut == text
        return
    assert len(cut) == limit
    head, rest = cut.split("…[", 1)
    marker, tail = rest.rsplit("]…", 1)
    count = int(marker.removesuffix(" characters cut"))
    assert text.startswith(head)
    assert text.endswith(tail)
    assert len(head) + count + len(tail) == len(text)
