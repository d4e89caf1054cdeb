"""The no-op and canned webhooks of ``benchmarks/bench_apiserver.py`` (``benchmarks/noop_webhook.py``):
what they answer to AdmissionReviews recorded from a real kube-apiserver (``tests/data/admission``).

The canned webhook must answer every review with the very patch ``kgov`` gives the benchmark's
Job: here the patch ``kgov review`` gives one recorded Job create, canned and served back for
another recorded review (another uid).
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from click.testing import CliRunner
from support import PLATFORM

from benchmarks.noop_webhook import answer, application, encoded_patch
from webhook.cli import main

DATA = Path(__file__).resolve().parent / "data" / "admission"
CREATE = (DATA / "v1-job-create.json").read_bytes()
DRY_RUN = (DATA / "v1-job-create-dryrun.json").read_bytes()


def kgov_answer(review: bytes) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["review", "--platform", str(PLATFORM)], input=review, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    response: dict[str, Any] = json.loads(result.stdout)["response"]
    return response


@pytest.fixture
def kgov_patch() -> str:
    """base64 of the JSON Patch kgov gives the recorded Job create."""
    response = kgov_answer(CREATE)
    assert response["patchType"] == "JSONPatch"
    patch = str(response["patch"])
    assert json.loads(base64.b64decode(patch))[2] == {
        "op": "add",
        "path": "/metadata/labels/kueue.x-k8s.io~1priority-class",
        "value": "training-priority",
    }
    return patch


@contextlib.asynccontextmanager
async def served(patch: str | None) -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(application(patch))) as client:
        yield client


async def post(client: TestClient[Any, Any], body: bytes) -> dict[str, Any]:
    response = await client.post("/mutate", data=body, headers={"Content-Type": "application/json"})
    assert response.status == 200
    document: dict[str, Any] = await response.json()
    return document


async def test_canned_answer_is_kgovs_patch_with_the_reviews_uid(kgov_patch: str, tmp_path: Path) -> None:
    patch_file = tmp_path / "patch.json"
    patch_file.write_bytes(base64.b64decode(kgov_patch))
    canned = encoded_patch(patch_file)
    assert canned == kgov_patch
    uid = json.loads(DRY_RUN)["request"]["uid"]
    assert uid != json.loads(CREATE)["request"]["uid"]
    async with served(canned) as client:
        document = await post(client, DRY_RUN)
        assert document == {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": True, "patchType": "JSONPatch", "patch": kgov_patch},
        }
        assert (await (await client.get("/count")).text()) == "1"
        assert (await (await client.get("/last")).read()) == DRY_RUN


async def test_noop_answer_allows_without_a_patch() -> None:
    async with served(None) as client:
        assert (await client.get("/last")).status == 404
        document = await post(client, CREATE)
        assert document["response"] == {"uid": json.loads(CREATE)["request"]["uid"], "allowed": True}
        assert (await (await client.get("/count")).text()) == "1"


def test_answer_echoes_api_version_and_uid() -> None:
    review = {"apiVersion": "admission.k8s.io/v1beta1", "request": {"uid": "u-1"}}
    assert answer(review, "W10=") == {
        "apiVersion": "admission.k8s.io/v1beta1",
        "kind": "AdmissionReview",
        "response": {"uid": "u-1", "allowed": True, "patchType": "JSONPatch", "patch": "W10="},
    }


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"{not json", "not JSON"), (b'{"op": "add"}', "a JSON Patch is a JSON array, not dict")],
)
def test_a_patch_file_that_is_not_a_json_patch_is_refused(tmp_path: Path, content: bytes, message: str) -> None:
    patch_file = tmp_path / "patch.json"
    patch_file.write_bytes(content)
    with pytest.raises(ValueError, match=message) as caught:
        encoded_patch(patch_file)
    assert str(patch_file) in str(caught.value)
