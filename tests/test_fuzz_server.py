"""Bad bodies through the real aiohttp application (``webhook.serve.handlers.make_app``) and ``kgov
review``, and the size limit through the real TLS server.

Whatever the body, the answer is HTTP 200 with an AdmissionReview carrying the request's uid and a
patch that applies, or HTTP 400 ``{"error": "malformed AdmissionReview: <reason>"}`` with the same
reason :func:`webhook.core.admission.envelope.decode_body` and :func:`webhook.core.admission.review.review` give in
process; never a 500 (``kgov_internal_errors_total`` stays 0), and the server answers the next
request. The application runs on aiohttp's test server (plain HTTP on loopback: the handler and its
middleware, without TLS); the size limit is checked over TLS as the API server sends it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from click.testing import CliRunner
from conftest import BUNDLED_PLATFORM, RunningServer, ServerFactory
from fuzzing import RECORDED, check_answer, examples, paths_of, recorded, replaced
from hypothesis import given
from hypothesis import strategies as st
from support import REPO, bundled_teams
from test_server import post_review, session_for

from webhook.cli import main
from webhook.core.admission.review import ReviewOutcome
from webhook.kube.files import load_nodes
from webhook.serve.handlers import MAX_BODY_BYTES, make_app
from webhook.serve.metrics import Metrics
from webhook.serve.state import GovernorState, ServerConfig

TEAMS = bundled_teams()
NODES_FILE = REPO / "examples" / "nodes.json"
EXAMPLE_NODES = load_nodes(NODES_FILE)
NAMES = [path.name for path in RECORDED]
RAW = {name: json.dumps(recorded(name), separators=(",", ":")).encode() for name in NAMES}


def _state() -> GovernorState:
    config = ServerConfig(cert_file=Path("unused"), key_file=Path("unused"), platform=BUNDLED_PLATFORM)
    state = GovernorState(config, Metrics())
    state.load_policies()
    state.inventory = EXAMPLE_NODES  # topology mode auto counts nodes, as with --nodes or --watch-cluster
    return state


async def _post(client: TestClient[Any, Any], raw: bytes) -> tuple[int, Any]:
    async with client.post("/mutate", data=raw, headers={"Content-Type": "application/json"}) as resp:
        return resp.status, json.loads(await resp.read())


async def _check(client: TestClient[Any, Any], raw: bytes) -> None:
    """The server's answer to ``raw`` is the in-process one, as HTTP 200 or 400."""
    status, answer = await _post(client, raw)
    expected = check_answer(raw, TEAMS, inventory=EXAMPLE_NODES)
    if isinstance(expected, str):
        assert (status, answer) == (400, {"error": f"malformed AdmissionReview: {expected}"})
        return
    assert status == 200, answer
    assert isinstance(expected, ReviewOutcome)
    response, wanted = answer["response"], expected.response["response"]
    assert response["uid"] == wanted["uid"] and response["allowed"] == wanted["allowed"]
    assert response.get("patch") == wanted.get("patch")
    assert response.get("status") == wanted.get("status") and response.get("warnings") == wanted.get("warnings")


@pytest.fixture
async def app_client() -> AsyncIterator[tuple[TestClient[Any, Any], GovernorState]]:
    state = _state()
    async with TestClient(TestServer(make_app(state))) as client:
        yield client, state
    assert _internal_errors(state) == 0


def _internal_errors(state: GovernorState) -> float:
    return float(state.metrics.internal_errors._value.get())


@st.composite
def bad_bodies(draw: st.DrawFn) -> bytes:
    """A recorded review cut, spliced with bytes, or with a JSON value planted at one of its paths."""
    name = draw(st.sampled_from(NAMES))
    raw = RAW[name]
    how = draw(st.sampled_from(["cut", "splice", "plant"]))
    if how == "cut":
        return raw[: draw(st.integers(0, len(raw)))]
    if how == "splice":
        start = draw(st.integers(0, len(raw)))
        return raw[:start] + draw(st.binary(min_size=1, max_size=8)) + raw[start + draw(st.integers(0, 8)) :]
    body = recorded(name)
    path = draw(st.sampled_from(paths_of(body)[1:]))
    value = draw(
        st.one_of(
            st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
            st.text(max_size=6),
            st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        )
    )  # fmt: skip
    return json.dumps(replaced(body, path, value), allow_nan=False).encode()


@examples(60)
@given(raw=bad_bodies())
async def test_any_bad_body_gets_the_in_process_answer_over_http(raw: bytes) -> None:
    state = _state()
    async with TestClient(TestServer(make_app(state))) as client:
        await _check(client, raw)
        await _check(client, RAW["v1-job-create.json"])  # and it still answers
    assert _internal_errors(state) == 0


def _swap(old: bytes, new: bytes) -> bytes:
    """The recorded Job review with its first ``old`` replaced by ``new``."""
    assert old in RAW["v1-job-create.json"]
    return RAW["v1-job-create.json"].replace(old, new, 1)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"[" * 50_000, id="50k-arrays"),
        pytest.param(b'{"a":' * 50_000, id="50k-objects"),
        pytest.param(b"\xef\xbb\xbf" + RAW["v1-job-create.json"], id="utf8-bom"),
        pytest.param(RAW["v1-job-create.json"].decode().encode("utf-16"), id="utf16"),
        pytest.param(_swap(b'"resnet-train"', b'"\\ud800"'), id="lone-surrogate"),
        pytest.param(_swap(b'"uid":', b'"uid":7,"uid":'), id="duplicate-uid"),
        pytest.param(_swap(b'"parallelism":2', b'"parallelism":NaN'), id="nan"),
        pytest.param(_swap(b'"parallelism":2', b'"parallelism":1e999'), id="1e999"),
        pytest.param(_swap(b'"parallelism":2', b'"parallelism":' + b"9" * 5000), id="digits"),
        pytest.param(b"\xff" * 64, id="not-utf8"),
        pytest.param(b"null", id="null"),
        pytest.param(_swap(b'"object":{', b'"object":null,"x":{'), id="object-null"),
    ],
)
async def test_each_named_bad_body_gets_the_in_process_answer(
    app_client: tuple[TestClient[Any, Any], GovernorState], raw: bytes
) -> None:
    await _check(app_client[0], raw)


async def test_an_object_of_many_keys_and_long_strings_is_answered(
    app_client: tuple[TestClient[Any, Any], GovernorState],
) -> None:
    body = recorded("v1-job-create.json")
    obj = body["request"]["object"]
    obj["metadata"]["labels"] = {f"example.com/k{i}": "v" * 40 for i in range(50_000)}
    obj["metadata"]["annotations"] = {"example.com/long": "x" * (4 * 2**20)}
    raw = json.dumps(body).encode()
    assert 6 * 2**20 < len(raw) < MAX_BODY_BYTES
    await _check(app_client[0], raw)


# -- the size limit, over TLS -----------------------------------------------------------------------


def _padded(size: int) -> bytes:
    """The recorded Job review padded (in an annotation) to exactly ``size`` bytes."""
    body = recorded("v1-job-create.json")
    body["request"]["object"]["metadata"]["annotations"]["example.com/pad"] = ""
    raw = json.dumps(body, separators=(",", ":")).encode()
    marker = b'"example.com/pad":""'
    padded = raw.replace(marker, marker[:-1] + b"x" * (size - len(raw)) + b'"')
    assert len(padded) == size
    return padded


@pytest.fixture
async def tls_server(start_server: ServerFactory) -> RunningServer:
    return await start_server()


async def test_a_body_at_the_limit_is_answered_and_one_byte_more_is_a_precise_413(tls_server: RunningServer) -> None:
    async with session_for(tls_server) as session:
        status, answer = await post_review(session, tls_server, _padded(MAX_BODY_BYTES))
        assert status == 200 and answer["response"]["uid"] == recorded("v1-job-create.json")["request"]["uid"]
        assert answer["response"]["allowed"] is True and answer["response"]["patchType"] == "JSONPatch"
        status, answer = await post_review(session, tls_server, _padded(MAX_BODY_BYTES + 1))
        assert (status, answer) == (413, {"error": f"request body is over {MAX_BODY_BYTES} bytes"})
        status, answer = await post_review(session, tls_server, _padded(10 * 2**20))
        assert (status, answer) == (413, {"error": f"request body is over {MAX_BODY_BYTES} bytes"})


async def test_a_ten_mib_body_without_a_length_is_a_precise_413(tls_server: RunningServer) -> None:
    """Chunked (no Content-Length): refused when the 8 MiB are passed, not after reading 10."""
    raw = _padded(10 * 2**20)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(raw), 2**20):
            yield raw[start : start + 2**20]

    async with session_for(tls_server) as session:
        async with session.post(tls_server.url("/mutate"), data=chunks()) as resp:
            assert resp.status == 413
            assert await resp.json() == {"error": f"request body is over {MAX_BODY_BYTES} bytes"}
        status, answer = await post_review(session, tls_server, RAW["v1-job-create.json"])
    assert status == 200 and answer["response"]["allowed"] is True


# -- kgov review: the same bodies on stdin ------------------------------------------------------------


@examples(20)
@given(raw=bad_bodies())
def test_kgov_review_answers_any_bad_body_as_the_server_does(raw: bytes) -> None:
    """``kgov review`` prints the server's 400 reason and exits 1, or the answer and exits 0."""
    result = CliRunner().invoke(
        main, ["review", "--platform", str(BUNDLED_PLATFORM), "--nodes", str(NODES_FILE)], input=raw
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    expected = check_answer(raw, TEAMS, inventory=EXAMPLE_NODES)
    if isinstance(expected, str):
        hint = "" if b'"AdmissionReview"' in raw else "  for a manifest, use kgov mutate -n NAMESPACE -f FILE\n"
        assert (result.exit_code, result.stderr) == (1, f"kgov review: malformed AdmissionReview: {expected}\n{hint}")
    else:
        assert result.exit_code == 0 and json.loads(result.stdout) == expected.response
