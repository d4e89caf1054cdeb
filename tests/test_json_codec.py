"""Request bodies decoded and answers encoded by orjson give what the strict decoder gives.

orjson reads an integer beyond 64 bits as a float and takes nesting up to 1024 levels, and cannot
encode a string holding a lone surrogate: each body must still be decoded exactly or refused with
the precise reason of :func:`webhook.core.objects.jsonbody.decode_json`, and each answer encoded.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from support import platform_with, review_body, teams_from

from webhook.core.admission.envelope import MalformedReview, decode_body, json_bytes
from webhook.core.admission.review import review

QUEUE = "kueue.x-k8s.io/queue-name"

BODIES = [
    b'{"a": 123456789012345678901234567890}',  # beyond 64 bits: orjson would give 1.2345678901234568e+29
    b'{"a": -12345678901234567890}',
    b'{"a": 18446744073709551615, "b": 9223372036854775807}',
    b'{"a": 0.1, "b": -0, "d": 1.5e-400}',
    b"[" + b",".join([b"[]"] * 600) + b"]",  # more brackets than MAX_DEPTH, nested 2 deep: decoded
    b'{"a": 1, "b": 2, "a": 3}',
    b' {"a": "\\u00e9\xc3\xa9"} ',
]


@pytest.mark.parametrize("raw", BODIES, ids=range(len(BODIES)))
def test_decoded_as_the_standard_library_decodes(raw: bytes) -> None:
    expected = json.loads(raw.decode("utf-8"))
    decoded = decode_body(raw)
    assert repr(decoded) == repr(expected)  # repr: an int stays an int, key order is kept


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"a": NaN}', "body is not valid JSON: NaN is not a JSON value (at line 1 column 7)"),
        (b'{"a": 1,}', "body is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 9"),
        (b'\xef\xbb\xbf{"a": 1}', "body starts with a UTF-8 byte order mark (EF BB BF)"),
        (b'{"a": "\xff"}', "body is not valid JSON: not UTF-8 (invalid start byte at byte 7)"),
        (b'{"a": ' + b"9" * 5000 + b"}", "a number of 5000 digits is no Kubernetes value (at line 1 column 7)"),
        (b'{"a": 1e400}', "the number 1e400 is out of range of a 64-bit float (at line 1 column 7)"),
        (b'{"a": "\\ud800"}', "body holds an unpaired UTF-16 surrogate (\\ud800) at a"),
    ],
)
def test_refused_with_the_strict_decoders_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(MalformedReview) as caught:
        decode_body(raw)
    assert reason in str(caught.value)


@pytest.mark.parametrize("depth", [513, 600, 1500])
def test_nesting_deeper_than_the_limit_is_refused_though_orjson_takes_some(depth: int) -> None:
    with pytest.raises(MalformedReview, match=r"^body is nested more than 512 levels deep \(at line 1 column 513\)"):
        decode_body(b"[" * depth + b"]" * depth)


def test_nesting_at_the_limit_is_decoded() -> None:
    value = decode_body(b"[" * 512 + b"]" * 512)
    for _ in range(511):
        (value,) = value
    assert value == []


@pytest.mark.parametrize(
    "value",
    [{"a": "é", "b": [1, 2.5, None, True]}, {"a": "\ud800"}, {"a": 2**70}, [{"op": "add", "path": "/a~1b"}]],
    ids=["unicode", "surrogate", "big-int", "patch"],
)
def test_encoded_to_the_same_json(value: Any) -> None:
    assert json.loads(json_bytes(value)) == value


def test_a_lone_surrogate_in_a_copied_label_is_answered() -> None:
    """A Deployment's queue label is copied into its pod template: a value holding a lone surrogate
    (a JSON escape the API server passes on) reaches the patch, and the answer is still encoded."""
    teams = teams_from(platform_with({"queue": {"enforcement": "warn"}}))
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "labels": {"kueue.x-k8s.io/queue-name": "q\ud800"}},
        "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}},
    }
    outcome = review(review_body(deployment, "ml"), teams)  # a body the API server sent would hold U+FFFD
    response = json.loads(json_bytes(outcome.response))["response"]
    assert response["allowed"] and response["warnings"]
    patch = json.loads(base64.b64decode(response["patch"]))
    copied = [op for op in patch if op["path"] == "/spec/template/metadata"]
    assert copied == [{"op": "add", "path": "/spec/template/metadata", "value": {"labels": {QUEUE: "q\ud800"}}}]
