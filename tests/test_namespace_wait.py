"""A request in a namespace the namespace cache has not seen yet (webhook.serve.handlers): the server
waits for the cache, then reviews again or refuses with 503 to be retried; never a silent pass.

The real race (a namespace created together with its first Job, the watch event behind the
webhook call) is in ``e2e/test_watches.py``; here the wait itself: the cache's
:meth:`~webhook.kube.cache.ObjectCache.wait_for_object` and the handler's two endings, with the
recorded AdmissionReview of a Job create moved into a namespace of a label-selected team.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from kubernetes_asyncio import client

from webhook.kube.cache import ObjectCache
from webhook.serve import handlers
from webhook.serve.handlers import NAMESPACE_WAIT_SECONDS, make_app
from webhook.serve.metrics import Metrics
from webhook.serve.state import GovernorState, ServerConfig

DATA = Path(__file__).resolve().parent / "data" / "admission"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

PLATFORM = {
    "apiVersion": "kueue-governor.io/v1alpha1",
    "kind": "Platform",
    "naming": "default",
    "flavors": [{"name": "cpu", "nodeLabels": {"node.kubernetes.io/instance-type": "m5.large"}}],
    "teams": [
        {
            "name": "alpha",
            "namespaceSelector": {"matchLabels": {"team": "alpha"}},
            "quotas": [
                {
                    "flavor": "cpu",
                    "resources": {
                        "cpu": {"nominalQuota": 1000},
                        "memory": {"nominalQuota": "10Ti"},
                        "nvidia.com/gpu": {"nominalQuota": 100},
                    },
                }
            ],
            "policy": {"queue": {"enforcement": "enforce"}},
        }
    ],
}


async def _no_list(**_: Any) -> Any:
    raise AssertionError("not listed in these tests")


async def test_wait_for_object_returns_when_a_change_brings_it() -> None:
    cache = ObjectCache("namespaces", client.ApiClient(), _no_list)

    async def arrive() -> None:
        await asyncio.sleep(0.05)
        cache.objects["late"] = {"metadata": {"name": "late"}}
        cache._changed()

    started = time.monotonic()
    arriving = asyncio.create_task(arrive())
    assert await cache.wait_for_object("late", timeout=5.0) is True
    assert time.monotonic() - started < 2.0
    await arriving
    # A change that does not bring it does not end the wait early.
    cache._changed()
    started = time.monotonic()
    assert await cache.wait_for_object("never", timeout=0.2) is False
    assert time.monotonic() - started >= 0.2


def _review(namespace: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((DATA / "v1-job-create.json").read_text())
    body["request"]["namespace"] = namespace
    body["request"]["object"]["metadata"]["namespace"] = namespace
    return body


@pytest.fixture
async def governed(
    tmp_path: Path,
) -> AsyncIterator[tuple[GovernorState, TestClient[Any, Any], dict[str, dict[str, str]]]]:
    """A server of the platform above with a namespace lookup over a dict the test fills."""
    platform = tmp_path / "platform.yaml"
    platform.write_text(yaml.safe_dump(PLATFORM))
    # A server that knows namespace labels (a team selects by labels: the policy needs them); the
    # lookup and the wait are set by hand below, as the namespace cache would set them.
    config = ServerConfig(cert_file=tmp_path / "c", key_file=tmp_path / "k", platform=platform, watch_cluster=True)
    state = GovernorState(config, Metrics())
    state.load_policies()
    labels: dict[str, dict[str, str]] = {}
    state.namespace_lookup = labels.get
    async with TestClient(TestServer(make_app(state))) as test_client:
        yield state, test_client, labels


Governed = tuple[GovernorState, "TestClient[Any, Any]", dict[str, dict[str, str]]]


def _waiter(
    labels: dict[str, dict[str, str]], arrives: dict[str, str] | None
) -> Callable[[str, float], Awaitable[bool]]:
    async def wait(namespace: str, timeout: float) -> bool:
        assert timeout == NAMESPACE_WAIT_SECONDS
        if arrives is None:
            return False
        labels[namespace] = arrives
        return True

    return wait


async def test_unknown_namespace_is_reviewed_again_once_the_cache_has_it(governed: Governed) -> None:
    state, test_client, labels = governed
    state.namespace_wait = _waiter(labels, {"team": "alpha"})
    answer = await (await test_client.post("/mutate", json=_review("brand-new"))).json()
    response = answer["response"]
    assert response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "add", "path": "/metadata/labels", "value": {QUEUE_LABEL: "alpha-queue"}} in patch
    assert state.metrics.namespace_waits.labels("seen")._value.get() == 1


async def test_unknown_namespace_still_unseen_is_refused_with_503(
    governed: Governed, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, test_client, labels = governed
    state.namespace_wait = _waiter(labels, None)
    answer = await (await test_client.post("/mutate", json=_review("brand-new"))).json()
    response = answer["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 503
    assert response["status"]["reason"] == "ServiceUnavailable"
    assert response["status"]["message"] == (
        "kueue-governor: namespace 'brand-new' is not in the governor's namespace cache yet (waited 2 s), so the "
        "team whose namespaceSelector selects it cannot be told; retry in a few seconds"
    )
    assert "patch" not in response
    assert state.metrics.namespace_waits.labels("unseen")._value.get() == 1
    assert state.metrics.denials.labels("namespace")._value.get() == 1


async def test_known_namespace_never_waits(governed: Governed) -> None:
    state, test_client, labels = governed
    labels["known"] = {}

    async def never(namespace: str, timeout: float) -> bool:
        raise AssertionError(f"waited for {namespace}")

    state.namespace_wait = never
    response = (await (await test_client.post("/mutate", json=_review("known"))).json())["response"]
    assert response["allowed"] is True and "patch" not in response  # a namespace of no team


async def test_without_a_namespace_watch_unknown_labels_stay_untouched(governed: Governed) -> None:
    """--namespaces FILE (no watch): a namespace not in the file is of no team, as before."""
    _, test_client, _ = governed
    response = (await (await test_client.post("/mutate", json=_review("not-in-file"))).json())["response"]
    assert response["allowed"] is True and "patch" not in response


assert handlers.NAMESPACE_WAIT_SECONDS < 5  # inside the webhook's timeoutSeconds (5 in the chart)
