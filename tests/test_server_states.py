"""The server while something inside it is wrong or not there yet: a fault in the review (HTTP 500,
logged and counted), no policies yet (503), and ``/readyz`` until every input is loaded.

Real aiohttp servers on 127.0.0.1 throughout. The fault is injected by replacing the review
function for one request (nothing else is replaced). ``--watch-cluster`` runs against the replaying
API server of ``test_cache`` (lists recorded from a real API server, the real kubernetes-asyncio
client and kubeconfig loader).
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from conftest import LOOPBACK, ServerFactory, free_port
from test_cache import NAMESPACES, NODES, ReplayServer, listing
from test_server import job, metric_samples, post_review, review_of, sample_value, session_for, wait_until

import webhook.serve.handlers
from webhook.kube.cache import ObjectCache, inventory_of
from webhook.serve.handlers import make_app, make_metrics_app
from webhook.serve.logs import configure_logging
from webhook.serve.metrics import Metrics
from webhook.serve.state import GovernorState, ServerConfig

TIMEOUT = aiohttp.ClientTimeout(total=10)
DURATION = "kgov_admission_duration_seconds"


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The server's log lines, as ``kgov serve`` writes them."""
    buffer = io.StringIO()
    configure_logging("info", stream=buffer)
    yield buffer
    structlog.reset_defaults()
    logging.getLogger().handlers.clear()


def log_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


# -- 500: a fault inside the review ----------------------------------------------------------------
async def test_a_fault_in_the_review_is_a_500_logged_with_its_traceback_and_counted(
    start_server: ServerFactory, json_log: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await start_server()
    real_review = webhook.serve.handlers.review
    faults = []

    def faulty(*args: Any, **kwargs: Any) -> Any:
        if not faults:
            faults.append(1)
            raise RuntimeError("injected fault in the review")
        return real_review(*args, **kwargs)

    monkeypatch.setattr(webhook.serve.handlers, "review", faulty)
    async with session_for(server) as session:
        status, body = await post_review(session, server, review_of(job()))
        assert (status, body) == (500, {"error": "internal error in kueue-governor; see its log"})
        # The server goes on: the next request is reviewed as usual.
        status, body = await post_review(session, server, review_of(job()))
        assert status == 200 and body["response"]["allowed"] is True and body["response"]["patchType"] == "JSONPatch"
        samples = await metric_samples(session, server)
    assert sample_value(samples, "kgov_admission_internal_errors", "kgov_admission_internal_errors_total") == 1.0
    assert sample_value(samples, DURATION, f"{DURATION}_count", outcome="error") == 1.0
    assert sample_value(samples, DURATION, f"{DURATION}_count", outcome="patched") == 1.0
    assert sample_value(samples, "kgov_admission_in_flight_requests", "kgov_admission_in_flight_requests") == 0.0
    errors = [line for line in log_lines(json_log) if line.get("level") == "error"]
    assert [line["event"] for line in errors] == ["internal error while reviewing; answered 500"]
    assert "RuntimeError: injected fault in the review" in errors[0]["exception"]
    assert "Traceback" in errors[0]["exception"]


# -- 503 and /readyz before the inputs are loaded --------------------------------------------------
class Ports:
    """The two applications of a :class:`GovernorState` on loopback ports (plain HTTP)."""

    def __init__(self, state: GovernorState) -> None:
        self.state = state
        self.port, self.metrics_port = free_port(), free_port()
        self.runners = [aiohttp.web.AppRunner(make_app(state)), aiohttp.web.AppRunner(make_metrics_app(state))]

    async def start(self) -> None:
        for runner, port in zip(self.runners, (self.port, self.metrics_port), strict=True):
            await runner.setup()
            await aiohttp.web.TCPSite(runner, LOOPBACK, port).start()

    async def stop(self) -> None:
        for runner in self.runners:
            await runner.cleanup()

    def url(self, path: str, metrics: bool = False) -> str:
        return f"http://{LOOPBACK}:{self.metrics_port if metrics else self.port}{path}"


@pytest.fixture
async def unloaded(platform_file: Path, tmp_path: Path) -> AsyncIterator[Ports]:
    """A server's applications over a state whose policies, certificate and caches are not loaded."""
    config = ServerConfig(
        cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key", platform=platform_file, watch_cluster=True
    )
    ports = Ports(GovernorState(config, Metrics()))
    await ports.start()
    yield ports
    await ports.stop()


async def readyz(session: aiohttp.ClientSession, ports: Ports, metrics: bool = False) -> tuple[int, Any]:
    async with session.get(ports.url("/readyz", metrics)) as resp:
        return resp.status, await resp.json()


async def test_before_policies_load_mutate_is_503_and_readyz_says_what_is_missing(unloaded: Ports) -> None:
    state = unloaded.state

    async def unused(**_: Any) -> Any:
        raise AssertionError("never started")

    nodes = ObjectCache("nodes", None, unused)  # type: ignore[arg-type]
    state.caches = [nodes]
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        expected = ["policies not loaded", "serving certificate not loaded", "nodes cache not synced"]
        expected.append("node inventory not built")
        for metrics in (False, True):
            assert await readyz(session, unloaded, metrics) == (
                503,
                {"ready": False, "reasons": expected, "notices": []},
            )
        async with session.get(unloaded.url("/healthz")) as resp:
            assert (resp.status, await resp.text()) == (200, "ok")  # alive, only not ready
        async with session.post(unloaded.url("/mutate"), json=review_of(job())) as resp:
            assert (resp.status, await resp.json()) == (503, {"error": "policies not loaded yet"})
        async with session.get(unloaded.url("/metrics", metrics=True)) as resp:
            text = await resp.text()
        assert f'{DURATION}_count{{outcome="not_ready"}} 1.0' in text

        # Each input as it arrives takes its reason away; the last one makes the server ready.
        state.load_policies()
        assert (await readyz(session, unloaded))[1]["reasons"] == expected[1:]
        async with session.post(unloaded.url("/mutate"), json=review_of(job())) as resp:
            assert resp.status == 200 and (await resp.json())["response"]["allowed"] is True
        state.certificate_loaded = True
        nodes.replace(NODES["list"])
        nodes.synced.set()
        assert (await readyz(session, unloaded))[1]["reasons"] == ["node inventory not built"]
        state.inventory = inventory_of(nodes)
        assert await readyz(session, unloaded) == (200, {"ready": True, "reasons": [], "notices": []})
        state.shutting_down = True
        assert await readyz(session, unloaded) == (503, {"ready": False, "reasons": ["shutting down"], "notices": []})


# -- --watch-cluster: not ready until the API server's lists arrive --------------------------------
@pytest.fixture
async def api_server() -> AsyncIterator[ReplayServer]:
    replay = ReplayServer()
    await replay.runner.setup()
    await aiohttp.web.TCPSite(replay.runner, LOOPBACK, replay.port).start()
    yield replay
    replay.closing.set()
    await replay.runner.cleanup()


def kubeconfig(path: Path, port: int) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "replay", "cluster": {"server": f"http://{LOOPBACK}:{port}"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "replay", "context": {"cluster": "replay", "user": "u"}}],
                "current-context": "replay",
            }
        )
    )
    return path


async def test_watch_cluster_is_ready_only_once_namespaces_and_nodes_are_listed(
    start_server: ServerFactory, api_server: ReplayServer, tmp_path: Path
) -> None:
    config_file = kubeconfig(tmp_path / "kubeconfig", api_server.port)
    server = await start_server(watch_cluster=True, kubeconfig=str(config_file))
    async with session_for(server) as session:

        async def reasons() -> list[str]:
            async with session.get(server.url("/readyz")) as resp:
                body = await resp.json()
                assert (resp.status == 200) is body["ready"]
                return list(body["reasons"])

        await wait_until(lambda: _true(len(api_server.requests) >= 2))
        assert await reasons() == ["namespaces cache not synced", "nodes cache not synced", "node inventory not built"]
        api_server.queue(listing(NAMESPACES["list"]), resource="namespaces")
        await wait_until(lambda: _reasons_are(reasons, ["nodes cache not synced", "node inventory not built"]))
        api_server.queue(listing(NODES["list"]))
        await wait_until(lambda: _reasons_are(reasons, []))
        # Ready, and reviewing with what the caches hold: the recorded nodes' inventory.
        status, body = await post_review(session, server, review_of(job()))
        assert status == 200 and body["response"]["allowed"] is True
    lists = sorted(r["resource"] for r in api_server.requests if "watch" not in r)
    assert lists == ["namespaces", "nodes"]


async def _true(value: bool) -> bool:
    return value


async def _reasons_are(reasons: Any, expected: list[str]) -> bool:
    return bool(await reasons() == expected)
