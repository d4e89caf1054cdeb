"""Bad AdmissionReview bodies through :func:`webhook.core.admission.review.review`, from the recorded ones.

Every recorded AdmissionReview (``tests/data/admission``) is cut at every byte, and every path of
it (the review's and the object's) gets every JSON type in turn; then Hypothesis corrupts them
further. Whatever the body, :func:`fuzzing.check_answer` holds: a precise 400 reason, or an answer
with the request's uid whose patch applies. The server's side of the same bodies is
``tests/test_fuzz_server.py``; workload fields one by one are ``tests/test_fuzz.py``.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from fuzzing import RECORDED, check_answer, examples, named_paths, paths_of, present_paths, recorded, replaced, scale
from hypothesis import given
from hypothesis import strategies as st
from support import CASES, REPO, bundled_teams, load_documents, needs_cases, review_body

from webhook.core.admission.envelope import MAX_DEPTH, MalformedReview, decode_body, json_type
from webhook.core.admission.review import ReviewOutcome
from webhook.core.kueue.kinds import find_kind
from webhook.core.objects.paths import dotted
from webhook.kube.files import load_nodes

TEAMS = bundled_teams()
EXAMPLE_NODES = load_nodes(REPO / "examples" / "nodes.json")
#: One value of each JSON type (and the integers Kubernetes refuses), planted at every path.
WRONG: list[Any] = [None, True, 0, -1, 2**31, 1.5, "", "x", [], {}, ["x"], {"x": 1}]
NAMES = [path.name for path in RECORDED]


def _raw(name: str) -> bytes:
    """The recorded review as the API server sends it: compact JSON."""
    return json.dumps(recorded(name), separators=(",", ":")).encode()


@pytest.mark.parametrize("name", NAMES)
def test_every_truncation_of_a_recorded_review_is_a_precise_400(name: str) -> None:
    raw = _raw(name)
    for cut in range(len(raw)):
        with pytest.raises(MalformedReview) as caught:
            decode_body(raw[:cut])
        reason = str(caught.value)
        if cut == 0:
            assert reason == "body is empty"
        else:
            # Where it ends, and that it ends early: a cut body is never a mystery.
            assert reason.startswith(f"body is not valid JSON: it ends early, after {cut} bytes ("), (cut, reason)


@pytest.mark.parametrize("name", NAMES)
def test_every_json_type_at_every_path_of_a_recorded_review_is_answered(name: str) -> None:
    body = recorded(name)
    answered = refused = 0
    per_path = min(len(WRONG), 3 * scale())  # each path 3 types in CI, taking turns; all from KGOV_FUZZ_SCALE=4
    for index, path in enumerate(paths_of(body)[1:]):
        for turn in range(per_path):
            value = WRONG[(index * per_path + turn) % len(WRONG)]
            corrupted = replaced(body, path, value)
            outcome = check_answer(corrupted, TEAMS)
            if isinstance(outcome, str):
                refused += 1
                _check_reason(path, value, outcome)
                continue
            answered += 1
            _check_denial(corrupted, outcome)
    assert answered and refused  # both kinds of outcome are reached from each recording


def _check_reason(path: tuple[Any, ...], value: Any, reason: str) -> None:
    """A 400 names the field it is about: the planted one, an ancestor, or a field of the planted value."""
    field = dotted(path)
    named = reason.split(" ", 1)[0]
    if named in ("body", "kind", "apiVersion"):
        assert field.split(".")[0] in ("apiVersion", "kind"), (path, value, reason)
        return
    named = named.removeprefix("AdmissionReview.")
    related = (field, named) if len(field) >= len(named) else (named, field)
    assert related[0] == related[1] or related[0].startswith((f"{related[1]}.", f"{related[1]}[")), (path, reason)


def _check_denial(body: dict[str, Any], outcome: ReviewOutcome) -> None:
    """A malformed-object denial names paths the object has (or the parent of a field left out);
    a field that ``must be set`` is one left out, below maps that may be left out too."""
    if not outcome.plan.invalid:
        return
    present = present_paths(body["request"]["object"])
    unset = {d.removeprefix("malformed object: ").split(" must be set: ")[0] for d in outcome.plan.denials}
    for named in named_paths(outcome):
        if named in unset:
            while named not in present and "." in named:
                named = named.rsplit(".", 1)[0]
        elif named not in present:
            named = re.sub(r"(\.[^.\[]+|\[\d+\])$", "", named)
        assert named in present, outcome.plan.denials


# -- the envelope: uid, request, object, kinds ------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"uid": None}, "request.uid is missing"),
        ({"uid": 7}, "request.uid must be a string, got number"),
        ({"uid": ["a"]}, "request.uid must be a string, got array"),
        ({"uid": ""}, "request.uid is empty"),
        ({"object": None}, "request.object is missing"),
        ({"object": "x"}, "request.object must be an object, got string"),
        ({"kind": None}, "request.kind is missing"),
        ({"kind": {"group": "batch", "kind": "Job"}}, "request.kind.version is missing"),
        ({"operation": "PATCH"}, "request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, got 'PATCH'"),
    ],
)
def test_a_broken_envelope_is_a_400_naming_the_field(change: dict[str, Any], reason: str) -> None:
    body = recorded("v1-job-create.json")
    body["request"].update(change)
    assert check_answer(body, TEAMS) == reason


def test_a_review_without_request_is_a_400() -> None:
    body = recorded("v1-job-create.json")
    del body["request"]
    assert check_answer(body, TEAMS) == "AdmissionReview.request is missing"


KINDS = st.fixed_dictionaries(
    {
        "group": st.sampled_from(["", "batch", "apps", "jobset.x-k8s.io", "kubeflow.org", "example.com"]),
        "version": st.sampled_from(["v1", "v1beta1", "v1alpha2", "v2", "v9"]),
        "kind": st.sampled_from(["Job", "JobSet", "Pod", "Deployment", "PyTorchJob", "Widget", "job", "JOB"]),
    }
)


@examples(150)
@given(gvk=KINDS)
def test_a_kind_or_version_we_do_not_govern_is_allowed_unchanged(gvk: dict[str, str]) -> None:
    """A made-up kind, or a version of a known kind the kinds table does not list, passes as it came:
    allowed, no patch (a ``kind`` we do govern is checked by the other tests)."""
    body = recorded("v1-job-create.json")
    body["request"]["kind"] = gvk
    body["request"]["object"]["apiVersion"] = f"{gvk['group']}/{gvk['version']}".lstrip("/")
    body["request"]["object"]["kind"] = gvk["kind"]
    outcome = check_answer(body, TEAMS)
    assert not isinstance(outcome, str)
    if find_kind(body["request"]["object"]["apiVersion"], gvk["kind"]) is None:
        assert outcome.response["response"] == {"uid": body["request"]["uid"], "allowed": True}
        assert outcome.plan.skipped.endswith(("is not a workload kind", ")"))


# -- Hypothesis: several corruptions at once --------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=10,
)


@st.composite
def corrupted_reviews(draw: st.DrawFn) -> dict[str, Any]:
    body = recorded(draw(st.sampled_from(NAMES)))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(paths_of(body)[1:]))
        body = replaced(body, path, draw(JSON))
    return body


@examples(150)
@given(body=corrupted_reviews())
def test_any_corruption_of_a_recorded_review_is_answered(body: dict[str, Any]) -> None:
    outcome = check_answer(body, TEAMS, inventory=EXAMPLE_NODES)
    if not isinstance(outcome, str):
        _check_denial(body, outcome)


@examples(300)
@given(data=st.data(), name=st.sampled_from(NAMES))
def test_any_bytes_spliced_into_a_recorded_review_are_answered(data: st.DataObject, name: str) -> None:
    raw = _raw(name)
    start = data.draw(st.integers(0, len(raw)))
    end = data.draw(st.integers(start, min(len(raw), start + 16)))
    spliced = raw[:start] + data.draw(st.binary(max_size=16)) + raw[end:]
    check_answer(spliced, TEAMS, inventory=EXAMPLE_NODES)


# -- size and depth ---------------------------------------------------------------------------------


def _with_object_field(value: Any, name: str = "v1-job-create.json") -> dict[str, Any]:
    body = recorded(name)
    body["request"]["object"]["spec"]["extra"] = value
    return body


def _nested(depth: int, opener: str) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value] if opener == "[" else {"a": value}
    return value


@pytest.mark.parametrize(("opener", "step"), [("[", "[0]"), ("{", ".a")])
def test_nesting_up_to_the_limit_is_answered_and_one_level_more_is_a_precise_400(opener: str, step: str) -> None:
    """The review, request, object and spec are 4 levels; ``spec.extra`` brings the rest."""
    fits = json.dumps(_with_object_field(_nested(MAX_DEPTH - 4, opener))).encode()
    outcome = check_answer(fits, TEAMS)
    assert not isinstance(outcome, str) and outcome.response["response"]["allowed"] is True
    over = json.dumps(_with_object_field(_nested(MAX_DEPTH - 3, opener))).encode()
    token = b"[" if opener == "[" else b'{"a": '
    column = over.index(b'"extra": ') + len(b'"extra": ') + (MAX_DEPTH - 4) * len(token) + 1
    assert check_answer(over, TEAMS) == (
        f"body is nested more than {MAX_DEPTH} levels deep (at line 1 column {column}) "
        f"within request.object.spec.extra{step} (× {MAX_DEPTH - 4})"
    )


@pytest.mark.parametrize(
    ("raw", "column"),
    [
        (b"[" * 50_000, MAX_DEPTH + 1),
        (b'{"a":' * 50_000, 5 * MAX_DEPTH + 1),
        (b"[" * 50_000 + b"]" * 50_000, MAX_DEPTH + 1),
    ],
    ids=["arrays", "objects", "closed"],
)
def test_fifty_thousand_levels_are_refused_at_once(raw: bytes, column: int) -> None:
    started = time.perf_counter()
    reason = check_answer(raw, TEAMS)
    assert time.perf_counter() - started < 0.5
    assert isinstance(reason, str)
    assert reason.startswith(f"body is nested more than {MAX_DEPTH} levels deep (at line 1 column {column}) within ")


def test_a_place_too_deep_far_into_a_big_body_is_named_by_line_and_column() -> None:
    """Past the first 256 KiB the path is left out (walking the tokens to it took 11 s for 8 MiB);
    the line and column are still exact, strings holding brackets and escapes included."""
    head = '{"a":[' + '"[\\"",[],' * 60_000 + '[]],\n"b":'
    raw = (head + "[" * 600 + "]" * 600 + "}").encode()
    reason = check_answer(raw, TEAMS)
    column = len(head.split("\n")[1]) + MAX_DEPTH  # the root is level 1: the 512th [ opens level 513
    assert reason == f"body is nested more than {MAX_DEPTH} levels deep (at line 2 column {column})"


# -- faults the sweeps found, each with its input ----------------------------------------------------

AFFINITY_VALUES = (
    "spec", "template", "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms", 0, "matchExpressions", 0, "values",
)  # fmt: skip


@pytest.mark.parametrize("value", [True, -1, 1.5, "p5.48xlarge"])
def test_an_update_whose_affinity_values_are_not_a_list_is_answered(value: Any) -> None:
    """Regression: on UPDATE, ``values: true`` (any non-list) in a node-affinity expression raised
    TypeError while comparing it with the team's affinity (HTTP 500)."""
    body = recorded("v1-job-update-kueue-start.json")
    body = replaced(body, ("request", "object", *AFFINITY_VALUES), value)
    outcome = check_answer(body, TEAMS)
    assert not isinstance(outcome, str)
    assert outcome.response["response"]["uid"] == body["request"]["uid"]


def test_a_number_out_of_float_range_is_a_400_not_an_infinity_in_a_patch() -> None:
    """Regression: ``1e400`` decoded as infinity; put back on UPDATE (an affinity the update drops),
    it went out in the patch as ``Infinity``, which is not JSON (the API server cannot read it)."""
    body = recorded("v1-job-update-kueue-start.json")
    terms = body["request"]["oldObject"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    terms[0]["matchExpressions"].append({"key": "n", "operator": "Gt", "values": ["1"]})
    del body["request"]["object"]["spec"]["template"]["spec"]["affinity"]
    raw = json.dumps(body).replace('"values": ["1"]', '"values": [1e400]').encode()
    line_column = f"line 1 column {raw.index(b'1e400') + 1}"
    assert check_answer(raw, TEAMS) == (
        f"body is not valid JSON: the number 1e400 is out of range of a 64-bit float (at {line_column})"
    )


@pytest.mark.parametrize(
    ("escape", "where"),
    [('"\\ud800"', "at request.name"), ('"a\\udfffb"', "at request.name")],
)
def test_a_lone_surrogate_is_a_400_naming_its_path(escape: str, where: str) -> None:
    """Regression: ``"\\ud800"`` decoded to a string that cannot be encoded as UTF-8; the first log
    line or answer that carried it raised UnicodeEncodeError (HTTP 500)."""
    raw = json.dumps(recorded("v1-job-create.json")).replace('"resnet-train"', escape, 1).encode()
    reason = check_answer(raw, TEAMS)
    assert reason == (
        f"body holds an unpaired UTF-16 surrogate ({json.loads(escape).encode('utf-8', 'backslashreplace').decode()})"
        f" {where}, which is not Unicode text (the API server sends U+FFFD in its place)"
    )


def test_a_surrogate_pair_is_one_character() -> None:
    raw = json.dumps(recorded("v1-job-create.json")).replace('"resnet-train"', '"\\ud83d\\ude00"', 1).encode()
    outcome = check_answer(raw, TEAMS)
    assert not isinstance(outcome, str) and outcome.request.name == "\U0001f600"


@pytest.mark.parametrize(
    ("prefix", "reason"),
    [
        (b"\xef\xbb\xbf", "body starts with a UTF-8 byte order mark (EF BB BF)"),
        (b"\xff\xfe", "body starts with UTF-16 (byte order mark FF FE)"),
    ],
)
def test_a_byte_order_mark_is_named(prefix: bytes, reason: str) -> None:
    raw = prefix + _raw("v1-job-create.json")
    assert check_answer(raw, TEAMS) == f"{reason}; it must be UTF-8 JSON without a byte order mark"


@pytest.mark.parametrize(("encoding", "byte"), [("utf-16-le", 1), ("utf-16-be", 0), ("utf-32-le", 1)])
def test_utf16_or_utf32_without_a_mark_is_named(encoding: str, byte: int) -> None:
    reason = check_answer(_raw("v1-job-create.json").decode().encode(encoding), TEAMS)
    assert reason == f"body looks like UTF-16 or UTF-32 (a NUL byte at byte {byte}); it must be UTF-8 JSON"


def test_duplicate_keys_keep_the_last_value_as_the_api_server_does() -> None:
    raw = _raw("v1-job-create.json").replace(b'"uid":', b'"uid":7,"uid":', 1)
    outcome = check_answer(raw, TEAMS)
    assert not isinstance(outcome, str)
    assert outcome.response["response"]["uid"] == recorded("v1-job-create.json")["request"]["uid"]


# -- Kueue's own example manifests (../shared/cases), every path ---------------------------------------


def _case_documents() -> list[tuple[str, dict[str, Any]]]:
    if not CASES.is_dir():
        return []
    return [
        (f"{path.relative_to(CASES)}#{index}", document)
        for path in sorted(CASES.rglob("*.yaml"))
        for index, document in enumerate(load_documents(path))
    ]


CASE_DOCUMENTS = _case_documents()


@needs_cases
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_every_json_type_at_every_path_of_each_kueue_example_is_answered(operation: str) -> None:
    """Each example created in a team namespace (the bundled platform, the example nodes) with one
    value planted at each of its paths, taking turns through :data:`WRONG` (all of them for every
    path from KGOV_FUZZ_SCALE=12); as an UPDATE, the example itself is the stored object."""
    per_path = min(len(WRONG), scale())
    turn = 0
    for _, document in CASE_DOCUMENTS:
        for path in paths_of(document)[1:]:
            for _ in range(per_path):
                turn += 1
                value = WRONG[turn % len(WRONG)]
                corrupted = replaced(document, path, value)
                old = document if operation == "UPDATE" else None
                # The envelope as the API server writes it: kind and name from the request, not the body.
                body = review_body(document, "hyperpod-ns-research", operation=operation, old=old)
                body["request"]["object"] = corrupted
                outcome = check_answer(body, TEAMS, inventory=EXAMPLE_NODES)
                if isinstance(outcome, str):  # only metadata, which the API server always sends as a map
                    assert path == ("metadata",), (path, outcome)
                    assert outcome == f"request.object.metadata must be an object, got {json_type(value)}"
                    continue
                _check_denial(body, outcome)
    assert turn > 1000


@pytest.mark.parametrize("value", [1.5, True, "p5.48xlarge", {"a": "b"}])
def test_a_governed_pod_whose_affinity_values_are_not_a_list_is_answered(value: Any) -> None:
    """Regression (found by atheris, ``make fuzz``): a Pod no Job controls, whose node-affinity
    expression has ``values: 1.5``, raised TypeError while topology mode auto counted the nodes it
    fits (HTTP 500). Two changes to the recorded Pod: its owner dropped, the values replaced."""
    body = recorded("v1-pod-of-job-create.json")
    obj = body["request"]["object"]
    del obj["metadata"]["ownerReferences"]
    terms = obj["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = value
    outcome = check_answer(body, TEAMS, inventory=EXAMPLE_NODES)
    assert not isinstance(outcome, str) and outcome.resolution.team is not None
