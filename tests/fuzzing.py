"""What every fuzz test checks, and how long it runs.

:func:`check_answer` holds the contract for any body sent to the webhook: a :class:`MalformedReview`
(the server's precise 400) whose reason names what is wrong and where, or an AdmissionReview answer
with the request's uid, whose patch (if any) applies with the ``jsonpatch`` library to the object.

Budget: the Hypothesis tests take their example counts from :func:`examples`, which multiplies them
by ``KGOV_FUZZ_SCALE`` (default 1: the bounded CI budget, a few seconds per test on 2 CPUs).
``KGOV_FUZZ_SCALE=50 make test-unit`` (or ``make fuzz``) runs 50 times as many.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, settings

from webhook.core.admission.envelope import MalformedReview, decode_body
from webhook.core.admission.review import ReviewOutcome, review
from webhook.core.objects.paths import Key, dotted
from webhook.core.platform.resolve import TeamIndex

DATA = Path(__file__).parent / "data" / "admission"
RECORDED = sorted(DATA.glob("*.json"))
#: Where a 400's reason may point: the body, or a field of the AdmissionReview.
REASON_STARTS = ("body ", "apiVersion ", "kind ", "AdmissionReview.", "request.")


def scale() -> int:
    """``KGOV_FUZZ_SCALE`` (a positive integer; 1 when unset)."""
    value = os.environ.get("KGOV_FUZZ_SCALE", "1")
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"KGOV_FUZZ_SCALE must be a positive integer, got {value!r}")
    return int(value)


def examples(count: int) -> settings:
    """Hypothesis settings of ``count`` × :func:`scale` examples, no per-example deadline (a 2-CPU
    machine shared with other jobs has pauses of seconds), and no health check that a slow
    strategy would fail."""
    return settings(
        max_examples=count * scale(),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


def recorded(name: str) -> dict[str, Any]:
    """A recorded AdmissionReview of ``tests/data/admission`` (decoded)."""
    value = json.loads((DATA / name).read_text())
    assert isinstance(value, dict)
    return value


def paths_of(node: Any, prefix: tuple[Key, ...] = ()) -> list[tuple[Key, ...]]:
    """Every path in a JSON value, the root first, in document order."""
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(paths_of(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out.extend(paths_of(value, (*prefix, index)))
    return out


def replaced(node: Any, path: tuple[Key, ...], value: Any) -> Any:
    """A deep copy of ``node`` with ``value`` at ``path`` (which exists)."""
    copied = _copy(node)
    if not path:
        return value
    parent = copied
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return copied


def _copy(value: Any) -> Any:
    """A deep copy of a JSON value (``copy.deepcopy`` takes two stack frames a level)."""
    return json.loads(json.dumps(value))


def check_answer(body: Any, teams: TeamIndex, **review_args: Any) -> ReviewOutcome | str:
    """Review ``body`` (bytes: decoded first, as the server does) and check the contract.

    Returns the outcome, or the 400 reason. Fails the test on any other exception, on an answer
    without the request's uid, and on a patch that does not apply to the object.
    """
    try:
        decoded = decode_body(body) if isinstance(body, bytes | str) else body
        snapshot = _copy(decoded)
        outcome = review(decoded, teams, **review_args)
    except MalformedReview as exc:
        reason = str(exc)
        assert reason.startswith(REASON_STARTS), reason
        assert len(reason) <= 2048
        return reason
    assert decoded == snapshot, "the review must not modify its input"
    request = decoded["request"]
    response = outcome.response["response"]
    assert outcome.response["apiVersion"] == decoded["apiVersion"]
    assert response["uid"] == request["uid"]
    assert isinstance(response["allowed"], bool)
    json.dumps(outcome.response, allow_nan=False).encode()  # the answer is JSON, and UTF-8 encodable
    if not response["allowed"]:
        assert "patch" not in response and outcome.patch == []
        assert response["status"]["code"] in (403, 422, 503)
        assert response["status"]["message"].startswith("kueue-governor: ")
        return outcome
    if "patch" in response:
        operations = json.loads(base64.b64decode(response["patch"]))
        assert operations == outcome.patch and operations
        assert response["patchType"] == "JSONPatch"
        # Applied by the jsonpatch library, as the API server applies it: every operation must apply.
        jsonpatch.JsonPatch(operations).apply(_copy(request["object"]), in_place=True)
    else:
        assert outcome.patch == []
    return outcome


def named_paths(outcome: ReviewOutcome) -> list[str]:
    """The paths a malformed-object denial names (``spec.parallelism`` of ``… must be …``)."""
    return [d.removeprefix("malformed object: ").split(" must be ")[0] for d in outcome.plan.denials]


def present_paths(obj: Any) -> set[str]:
    """Every path of ``obj`` as :func:`webhook.core.objects.paths.dotted` writes it."""
    return {dotted(path) for path in paths_of(obj)}
