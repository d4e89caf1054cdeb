"""The training-runtime caches (:func:`webhook.kube.cache.runtime_caches`): Kubeflow Trainer's
``ClusterTrainingRuntime`` and ``TrainingRuntime`` objects, listed and watched with the real
kubernetes-asyncio ``CustomObjectsApi.list_cluster_custom_object`` against an HTTP server on
127.0.0.1; a cluster without Trainer's CRDs answers 404 (an empty, synced cache).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from conftest import LOOPBACK, free_port
from kubernetes_asyncio import client

from webhook.kube.cache import ObjectCache, runtime_caches, runtime_lookup
from webhook.kube.files import InputError
from webhook.kube.runtimes import load_runtimes
from webhook.serve.handlers import RUNTIME_WAIT_SECONDS, make_app
from webhook.serve.metrics import Metrics
from webhook.serve.state import GovernorState, ServerConfig

DATA = Path(__file__).parent / "data" / "trainer"
TORCH: dict[str, Any] = yaml.safe_load((DATA / "runtime-torch_distributed.yaml").read_text())


def namespaced(name: str, namespace: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": version},
        "spec": TORCH["spec"],
    }


class Server:
    """Lists (and one watch) of Trainer's runtimes; the cluster-scoped kind is not served (404)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.watched = asyncio.Event()
        app = web.Application()
        app.router.add_get("/apis/trainer.kubeflow.org/v1alpha1/{plural}", self.handle)
        self.runner = web.AppRunner(app, shutdown_timeout=0.5)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        plural = request.match_info["plural"]
        if plural == "clustertrainingruntimes":
            return web.json_response({"kind": "Status", "code": 404, "message": "not found"}, status=404)
        if request.query.get("watch", "").lower() != "true":
            items = [namespaced("torch", "ml", "10"), namespaced("torch", "other", "11")]
            return web.json_response(
                {"kind": "TrainingRuntimeList", "metadata": {"resourceVersion": "11"}, "items": items}
            )
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        added = {"type": "ADDED", "object": namespaced("jax", "ml", "12")}
        deleted = {"type": "DELETED", "object": namespaced("torch", "other", "13")}
        for event in (added, deleted):
            await response.write(json.dumps(event).encode() + b"\n")
        self.watched.set()
        await asyncio.sleep(30)
        return response

    def api(self) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = f"http://{LOOPBACK}:{self.port}"
        return client.ApiClient(configuration)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    served = Server()
    await served.runner.setup()
    await web.TCPSite(served.runner, LOOPBACK, served.port).start()
    yield served
    await served.runner.cleanup()


async def test_runtimes_are_listed_watched_and_looked_up_by_namespace(server: Server) -> None:
    async with server.api() as api:
        caches = runtime_caches(api, retry_max=30.0)
        for cache in caches.values():
            cache.start()
        try:
            await asyncio.wait_for(server.watched.wait(), 10)
            for _ in range(50):  # the watch's events are applied right after they are read
                if "ml/jax" in caches["TrainingRuntime"].objects:
                    break
                await asyncio.sleep(0.05)
            assert all(cache.synced.is_set() for cache in caches.values())
            lookup = runtime_lookup(caches)
            assert sorted(caches["TrainingRuntime"].objects) == ["ml/jax", "ml/torch"]
            found = lookup("TrainingRuntime", "ml", "torch")
            assert found is not None and found["metadata"]["namespace"] == "ml"
            assert lookup("TrainingRuntime", "other", "torch") is None  # deleted by the watch
            assert lookup("ClusterTrainingRuntime", "", "torch-distributed") is None  # not served: empty
            assert caches["ClusterTrainingRuntime"].objects == {}
        finally:
            for cache in caches.values():
                await cache.stop()


async def test_a_namespaced_cache_keys_objects_by_namespace_and_name() -> None:
    async with client.ApiClient() as api:
        cache = ObjectCache("trainingruntimes", api, lambda **_: None, namespaced=True)
    cache.replace(
        {"metadata": {"resourceVersion": "1"}, "items": [namespaced("a", "x", "1"), {"metadata": {"name": "b"}}]}
    )
    assert list(cache.objects) == ["x/a"]  # one without a namespace cannot be looked up: left out
    assert cache.apply({"type": "ADDED", "object": namespaced("a", "y", "2")})
    assert sorted(cache.objects) == ["x/a", "y/a"]


def test_runtime_files(tmp_path: Path) -> None:
    """``--runtime``: repeatable, multi-document; a TrainingRuntime without namespace is found in
    any namespace; a document of another kind is refused with its place."""
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump_all([TORCH, {**namespaced("mine", "ml", "1"), "metadata": {"name": "mine"}}]))
    runtimes = load_runtimes([both])
    assert runtimes("ClusterTrainingRuntime", "", "torch-distributed") is not None
    assert runtimes("TrainingRuntime", "anywhere", "mine") is not None
    assert runtimes("TrainingRuntime", "ml", "other") is None
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n")
    with pytest.raises(InputError, match=r"job.yaml: document 1: batch/v1 Job is no training runtime"):
        load_runtimes([both, job])


# -- the server: a TrainJob created a moment after its runtime ---------------------------------------


PLATFORM = {
    "apiVersion": "kueue-governor.io/v1alpha1",
    "kind": "Platform",
    "naming": "default",
    "flavors": [{"name": "gpu", "nodeLabels": {"node.kubernetes.io/instance-type": "p5.48xlarge"}}],
    "teams": [
        {
            "name": "alpha",
            "namespaces": ["alpha"],
            "quotas": [{"flavor": "gpu", "resources": {"nvidia.com/gpu": {"nominalQuota": 64}}}],
            "policy": {
                "queue": {"enforcement": "enforce"},
                "nodeAffinity": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}
                ],
            },
        }
    ],
}


def _trainjob_review() -> dict[str, Any]:
    obj = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "alpha"},
        "spec": {"runtimeRef": {"name": "torch-distributed", "kind": "ClusterTrainingRuntime"}},
    }
    request = {
        "uid": "u",
        "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
        "operation": "CREATE",
        "namespace": "alpha",
        "name": "t",
        "object": obj,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@pytest.mark.parametrize("arrives", [True, False])
async def test_a_trainjob_waits_for_its_runtime_to_reach_the_cache(tmp_path: Path, arrives: bool) -> None:
    platform = tmp_path / "platform.yaml"
    platform.write_text(yaml.safe_dump(PLATFORM))
    config = ServerConfig(cert_file=tmp_path / "c", key_file=tmp_path / "k", platform=platform, watch_cluster=True)
    state = GovernorState(config, Metrics())
    state.load_policies()
    known: dict[tuple[str, str, str], dict[str, Any]] = {}
    waited: list[tuple[str, str, str, float]] = []
    state.runtimes = lambda kind, namespace, name: known.get((kind, namespace, name))

    async def wait(kind: str, namespace: str, name: str, timeout: float) -> bool:
        waited.append((kind, namespace, name, timeout))
        if arrives:
            known[(kind, namespace, name)] = TORCH
        return arrives

    state.runtime_wait = wait
    async with TestClient(TestServer(make_app(state))) as test_client:
        response = (await (await test_client.post("/mutate", json=_trainjob_review())).json())["response"]
    assert waited == [("ClusterTrainingRuntime", "", "torch-distributed", RUNTIME_WAIT_SECONDS)]
    patch = json.loads(base64.b64decode(response["patch"]))
    entry = [op for op in patch if op["path"] == "/spec/runtimePatches"]
    assert bool(entry) is arrives  # the team's node affinity reaches the pods once the runtime is known
    warnings = response.get("warnings", [])
    assert any("'torch-distributed' is not known" in w for w in warnings) is not arrives
