"""The policy ConfigMap, watched (``kgov serve --policy-configmap``: :mod:`webhook.kube.policy_watch`).

The server runs its real kubernetes-asyncio list, watch and Event calls against an HTTP server on
127.0.0.1 that replays what a real kube-apiserver v1.36.1 answered (``tests/data/watch/configmap.json``,
recorded by ``tests/data/watch/record.py``): the list of ConfigMap ``kueue-governor-system/kgov-policy``
by ``fieldSelector=metadata.name=kgov-policy`` (the generated ``policy-configmap.yaml``), then a watch
from its version in which ``policy.json`` gets a new default priority, then JSON cut short, then a
PolicySet with an unknown field, then loses the key, then the ConfigMap is deleted and created again
(another ConfigMap changed meanwhile: the selector kept it out); the ``410 Expired`` answer to a watch
from a compacted version; and the API server's answer to the Event :func:`policy_event` builds.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import hashlib
import io
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from aiohttp import web
from click.testing import CliRunner
from conftest import LOOPBACK, ServerFactory, free_port
from test_cache import Answer, ReplayServer, events, listing, until
from test_server import (
    decode_patch,
    job,
    metric_samples,
    op_at,
    post_review,
    review_of,
    sample_value,
    session_for,
    wait_until,
)
from test_server_states import kubeconfig

from webhook.cli import main
from webhook.kube.files import parse_policies
from webhook.kube.policy_watch import NOTE_LIMIT, PolicyConfigMapWatch, policy_event
from webhook.serve.logs import configure_logging
from webhook.serve.metrics import Metrics
from webhook.serve.state import GovernorState, ServerConfig

RECORDED: dict[str, Any] = json.loads((Path(__file__).parent / "data" / "watch" / "configmap.json").read_text())
NAMESPACE, NAME = "kueue-governor-system", "kgov-policy"
PRIORITY_LABEL = "/metadata/labels/kueue.x-k8s.io~1priority-class"
CHANGES = [e for e in RECORDED["events"] if e["type"] != "BOOKMARK"]
EVENT_CREATED = RECORDED["created"]


def version(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


def default_priority(configmap: dict[str, Any]) -> str:
    policy = json.loads(configmap["data"]["policy.json"])
    return str(next(t for t in policy["teams"] if t["team"] == "research")["kueuePriority"]["default"])


def test_the_recording_is_what_the_tests_expect() -> None:
    [item] = RECORDED["list"]["items"]
    assert item["metadata"]["name"] == NAME and default_priority(item) == "training-priority"
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in CHANGES] == [
        *[("MODIFIED", NAME)] * 4,
        ("DELETED", NAME),
        ("ADDED", NAME),
    ]
    assert default_priority(CHANGES[0]["object"]) == "experimentation-priority"
    assert CHANGES[1]["object"]["data"]["policy.json"] == CHANGES[0]["object"]["data"]["policy.json"][:200]
    assert '"unknownField": 1' in CHANGES[2]["object"]["data"]["policy.json"]
    assert "policy.json" not in CHANGES[3]["object"]["data"]
    assert default_priority(CHANGES[5]["object"]) == "training-priority"
    # Only the selected ConfigMap: "other" changed between each of the first three events.
    versions = [int(version(e["object"])) for e in CHANGES]
    assert versions[1] - versions[0] == 2
    assert RECORDED["expired"][0]["object"]["code"] == 410
    assert EVENT_CREATED["metadata"]["uid"] and EVENT_CREATED["type"] == "Warning"


# -- the replaying API server, with the namespaced list and the Event POST -------------------------
class PolicyApiServer(ReplayServer):
    """:class:`test_cache.ReplayServer` with ConfigMaps (``resource="configmaps"``) and Events
    (``resource="events"``, each POSTed body kept in :attr:`posted`)."""

    def __init__(self) -> None:
        super().__init__()
        self.posted: list[dict[str, Any]] = []
        app = self.runner.app
        app.router.add_get("/api/v1/namespaces/{namespace}/{resource}", self._handle)
        app.router.add_post("/apis/events.k8s.io/v1/namespaces/{namespace}/{resource}", self._post)

    async def _post(self, request: web.Request) -> web.StreamResponse:
        self.posted.append(await request.json())
        return await self._handle(request)


def stepped(lines: list[dict[str, Any]], steps: asyncio.Queue[None], closing: asyncio.Event) -> Answer:
    """A watch answer that sends its next line each time the test puts a step, then stays open."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        for line in lines:
            await steps.get()
            await response.write(json.dumps(line).encode() + b"\n")
        await closing.wait()
        return response

    return answer


@pytest.fixture
async def api_server() -> AsyncIterator[PolicyApiServer]:
    replay = PolicyApiServer()
    await replay.runner.setup()
    await web.TCPSite(replay.runner, LOOPBACK, replay.port).start()
    yield replay
    replay.closing.set()
    await replay.runner.cleanup()


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    configure_logging("info", stream=buffer)
    yield buffer
    logging.getLogger().handlers.clear()
    structlog.reset_defaults()


def log_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.startswith("{")]


def sha256_of(configmap: dict[str, Any]) -> str:
    policies = parse_policies({**configmap, "kind": "ConfigMap"}, "recorded")
    return hashlib.sha256(policies.model_dump_json().encode()).hexdigest()


# -- the whole server: every recorded version, taken or rejected ------------------------------------
async def test_each_version_is_taken_or_rejected_and_the_last_good_one_stays(
    start_server: ServerFactory, api_server: PolicyApiServer, tmp_path: Path
) -> None:
    steps: asyncio.Queue[None] = asyncio.Queue()
    config_file = kubeconfig(tmp_path / "kubeconfig", api_server.port)
    server = await start_server(platform=None, policy_configmap=(NAMESPACE, NAME), kubeconfig=str(config_file))
    async with session_for(server) as session:

        async def readyz() -> dict[str, Any]:
            async with session.get(server.url("/readyz")) as resp:
                body: dict[str, Any] = await resp.json()
                assert (resp.status == 200) is body["ready"]
                return body

        async def priority() -> str:
            status, answer = await post_review(session, server, review_of(job()))
            assert status == 200, answer
            return str(op_at(decode_patch(answer["response"]), PRIORITY_LABEL)["value"])

        async def metric(name: str, **labels: str) -> float:
            samples = await metric_samples(session, server)
            family = name.removesuffix("_total")
            return sample_value(samples, family, name, **labels)

        async def reloads(result: str) -> float:
            return await metric("kgov_policy_reloads_total", source="configmap", result=result)

        # Before the first list: not ready, and /mutate refuses with 503.
        await wait_until(lambda: _true(len(api_server.requests) >= 1))
        assert (await readyz())["reasons"] == ["policies not loaded", "policy-configmap cache not synced"]
        status, _ = await post_review(session, server, review_of(job()))
        assert status == 503

        api_server.queue(
            listing(RECORDED["list"]), stepped(RECORDED["events"], steps, api_server.closing), resource="configmaps"
        )
        for _ in range(4):
            api_server.queue(listing(EVENT_CREATED, 201), resource="events")

        async def ready() -> bool:
            return bool((await readyz())["ready"])

        await wait_until(ready)
        assert await priority() == "training-priority"
        assert await reloads("ok") == 1.0
        assert await metric("kgov_policy_hash") == int(sha256_of(RECORDED["list"]["items"][0])[:12], 16)
        loaded_at = await metric("kgov_policy_last_success_timestamp_seconds")
        assert loaded_at > 1.7e9

        # A valid change is served at once.
        steps.put_nowait(None)
        await wait_until(lambda: _equal(priority(), "experimentation-priority"))
        assert await reloads("ok") == 2.0

        # Three invalid versions and the deletion: each rejected, the last good policy served.
        rejected = [
            f"ConfigMap {NAMESPACE}/{NAME}: data['policy.json'] is not JSON: ",
            f"ConfigMap {NAMESPACE}/{NAME}: invalid policy file\n  unknownField: Extra inputs are not permitted",
            f"ConfigMap {NAMESPACE}/{NAME}: the ConfigMap has no data['policy.json']",
            f"ConfigMap {NAMESPACE}/{NAME} was deleted",
        ]
        for count, message in enumerate(rejected, start=1):
            steps.put_nowait(None)
            await wait_until(lambda count=count: _equal(reloads("error"), float(count)))
            body = await readyz()
            assert body["ready"] is True and body["reasons"] == []
            [notice] = body["notices"]
            assert notice.startswith(f"policy of ConfigMap {NAMESPACE}/{NAME} rejected, serving the last good one")
            assert message in notice, notice
            assert await metric("kgov_policy_rejected") == 1.0
            assert await priority() == "experimentation-priority"

        # Created again, valid: taken.
        steps.put_nowait(None)
        await wait_until(lambda: _equal(priority(), "training-priority"))
        assert await reloads("ok") == 3.0 and await reloads("error") == 4.0
        assert await metric("kgov_policy_rejected") == 0.0
        assert (await readyz())["notices"] == []
        assert await metric("kgov_policy_last_success_timestamp_seconds") >= loaded_at
        assert await metric("kgov_cache_lists_total", cache="policy-configmap", reason="initial") == 1.0
        await wait_until(lambda: _true(len(api_server.posted) == 4))

    # One Warning Event per rejected version, on that version of the ConfigMap.
    assert [e["reason"] for e in api_server.posted] == [*["PolicyRejected"] * 3, "PolicyConfigMapDeleted"]
    for event, change, message in zip(api_server.posted, CHANGES[1:5], rejected, strict=True):
        listed = RECORDED["list"]["items"][0]
        regarding = change["object"] if change["type"] != "DELETED" else CHANGES[3]["object"]
        assert event["regarding"] == {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "namespace": NAMESPACE,
            "name": NAME,
            "uid": listed["metadata"]["uid"],
            "resourceVersion": version(regarding),
        }
        assert event["type"] == "Warning" and event["action"] == "LoadPolicy"
        assert event["reportingController"] == "kueue-governor.io/governor"
        assert message in event["note"] and event["note"].endswith("; the last good policy stays in force")
        assert event["metadata"]["namespace"] == NAMESPACE and event["metadata"]["name"].startswith(f"{NAME}.")
    # The list and every watch asked for the one ConfigMap only.
    asked = [r for r in api_server.requests if r["resource"] == "configmaps"]
    assert asked and all(r["fieldSelector"] == f"metadata.name={NAME}" for r in asked)
    assert [str(r.get("watch")).lower() for r in asked[:2]] == ["none", "true"]
    assert asked[1]["resourceVersion"] == version(RECORDED["list"])


async def _true(value: bool) -> bool:
    return value


async def _equal(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


# -- the watch alone: 410, a ConfigMap missing at first, an Event refused ----------------------------
def governor_state(tmp_path: Path) -> GovernorState:
    config = ServerConfig(
        cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key", policy_configmap=(NAMESPACE, NAME)
    )
    return GovernorState(config, Metrics())


def watch_of(api_server: PolicyApiServer, state: GovernorState) -> PolicyConfigMapWatch:
    watch = PolicyConfigMapWatch(
        api_server.api(),
        NAMESPACE,
        NAME,
        functools.partial(state.take_policies, "configmap"),
        lambda: bool(state.teams),
    )
    watch.cache.retry_delay = 0.05
    watch.cache.on_list = lambda reason: state.metrics.cache_lists.labels("policy-configmap", reason).inc()
    return watch


def sample(state: GovernorState, name: str, **labels: str) -> float:
    value = state.metrics.registry.get_sample_value(name, labels)
    return float(value) if value is not None else 0.0


async def test_a_relist_after_410_offers_only_a_new_version(api_server: PolicyApiServer, tmp_path: Path) -> None:
    state = governor_state(tmp_path)
    watch = watch_of(api_server, state)
    steps: asyncio.Queue[None] = asyncio.Queue()
    changed = CHANGES[0]["object"]
    # What a list made after the first change answers: that version, nothing newer.
    relisted = copy.deepcopy(RECORDED["list"])
    relisted["items"] = [{k: v for k, v in changed.items() if k not in ("kind", "apiVersion")}]
    relisted["metadata"]["resourceVersion"] = version(changed)
    api_server.queue(
        listing(RECORDED["list"]),
        events([CHANGES[0]]),  # ends, as at the watch's timeout
        events(RECORDED["expired"]),  # its version was compacted meanwhile
        listing(relisted),
        stepped([CHANGES[5]], steps, api_server.closing),
        resource="configmaps",
    )

    def reloads() -> float:
        return sample(state, "kgov_policy_reloads_total", source="configmap", result="ok")

    watch.start()
    try:
        await until(lambda: len(api_server.requests) == 5)
        assert sample(state, "kgov_cache_lists_total", cache="policy-configmap", reason="expired") == 1.0
        # The re-list found the version already taken: no second load, no Event.
        assert reloads() == 2.0
        assert api_server.posted == []
        assert state.teams is not None and default_of(state) == "experimentation-priority"
        steps.put_nowait(None)
        await until(lambda: reloads() == 3.0)
        assert default_of(state) == "training-priority"
    finally:
        await watch.stop()
        await watch.cache._api.close()
    assert api_server.watches() == ["list", version(RECORDED["list"]), version(changed), "list", version(changed)]


def default_of(state: GovernorState) -> str | None:
    assert state.teams is not None
    research = next(t for t in state.teams.policies.teams if t.team == "research")
    return research.kueuePriority.default if research.kueuePriority else None


async def test_a_configmap_missing_at_first_is_not_ready_then_taken_when_created(
    api_server: PolicyApiServer, tmp_path: Path, json_log: io.StringIO
) -> None:
    state = governor_state(tmp_path)
    watch = watch_of(api_server, state)
    steps: asyncio.Queue[None] = asyncio.Queue()
    empty = copy.deepcopy(RECORDED["list"])
    empty["items"] = []
    api_server.queue(listing(empty), stepped([CHANGES[5]], steps, api_server.closing), resource="configmaps")
    forbidden = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "Forbidden",
        "code": 403,
        "message": 'events.events.k8s.io is forbidden: User "system:serviceaccount:x:y" cannot create resource',
    }
    api_server.queue(listing(forbidden, 403), resource="events")
    watch.start()
    try:
        await until(lambda: len(api_server.posted) == 1)
        assert state.teams is None
        assert state.ready() == [
            f"policies not loaded: ConfigMap {NAMESPACE}/{NAME} does not exist",
            "serving certificate not loaded",
        ]
        [event] = api_server.posted
        assert event["reason"] == "PolicyConfigMapNotFound"
        assert event["regarding"] == {"apiVersion": "v1", "kind": "ConfigMap", "namespace": NAMESPACE, "name": NAME}
        assert event["note"] == f"ConfigMap {NAMESPACE}/{NAME} does not exist; no policy is served yet"

        def refused() -> list[dict[str, Any]]:
            return [line for line in log_lines(json_log) if line["event"].startswith("cannot create the Event")]

        await until(lambda: bool(refused()))
        assert "403" in refused()[0]["error"] and refused()[0]["reason"] == "PolicyConfigMapNotFound"
        steps.put_nowait(None)
        await until(lambda: state.teams is not None)
        assert state.ready() == ["serving certificate not loaded"]
        assert state.policy_hash == sha256_of(CHANGES[5]["object"])
    finally:
        await watch.stop()
        await watch.cache._api.close()


# -- the Event's shape ---------------------------------------------------------------------------
def test_the_event_is_what_the_api_server_accepted() -> None:
    sent = RECORDED["event"]
    built = policy_event(
        NAMESPACE,
        NAME,
        RECORDED["list"]["items"][0],
        sent["reason"],
        sent["note"],
        sent["reportingInstance"],
        now=1767225600.123456,
    )
    assert built == sent
    # The API server kept every field as sent (events.k8s.io/v1, core/v1's deprecated ones unset).
    for key in ("eventTime", "type", "reason", "action", "note", "regarding", "reportingController"):
        assert EVENT_CREATED[key] == sent[key]
    assert EVENT_CREATED["metadata"]["name"] == sent["metadata"]["name"]


def test_a_long_note_is_cut_to_the_apis_limit() -> None:
    note = "é" * 2000
    event = policy_event(NAMESPACE, NAME, None, "PolicyRejected", note, "pod")
    assert len(event["note"].encode()) <= NOTE_LIMIT and event["note"].endswith("...")


# -- the command line ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--policy-configmap", "kgov-policy"], {}, "--policy-configmap kgov-policy: give NAMESPACE/NAME, or set"),
        (["--policy-configmap", "a/../b"], {}, "--policy-configmap a/../b: namespace "),
        (["--policy-configmap", "ns/Bad_Name"], {}, "--policy-configmap ns/Bad_Name: name "),
        (["--policy-configmap", "ns/x", "--policy", "p.json"], {}, "give exactly one of --platform, --policy or"),
        (
            ["--kubeconfig", "kc"],
            {},
            "--kubeconfig is used by --watch-cluster, --policy-configmap and --certs-secret only",
        ),
    ],
)
def test_serve_refuses_a_bad_policy_configmap_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], message: str
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.chdir(tmp_path)
    for name in ("tls.crt", "tls.key", "kc", "p.json"):
        (tmp_path / name).write_text("unused: the options are checked first")
    if "--kubeconfig" in args:
        args = [*args, "--platform", "p.json"]
    result = CliRunner().invoke(
        main, ["serve", *args, "--tls-cert-file", "tls.crt", "--tls-private-key-file", "tls.key"], env=env
    )
    assert result.exit_code == 2, result.output
    assert message in result.stderr, result.stderr


async def test_an_unreachable_api_server_for_the_configmap_is_a_configuration_error(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    (tmp_path / "kubeconfig").write_text("{}")
    with pytest.raises(Exception, match="cannot reach the API server for --policy-configmap"):
        await start_server(platform=None, policy_configmap=(NAMESPACE, NAME), kubeconfig=str(tmp_path / "kubeconfig"))


_ = aiohttp  # the client sessions come from test_server's helpers


def test_a_policy_selecting_namespaces_by_labels_is_rejected_without_a_label_source(tmp_path: Path) -> None:
    """Checked for every new version, not only at start-up: such a policy would let the namespaces
    it selects through unmutated on a server that knows no namespace labels."""
    state = governor_state(tmp_path)
    listed = RECORDED["list"]["items"][0]
    policy = json.loads(listed["data"]["policy.json"])
    policy["teams"][0]["namespaceSelector"] = {"matchLabels": {"org/team": "research"}}
    selecting = {**listed, "kind": "ConfigMap", "data": {"policy.json": json.dumps(policy)}}
    error = state.take_policies("configmap", lambda: parse_policies(selecting, f"ConfigMap {NAMESPACE}/{NAME}"))
    assert str(error) == (
        f"ConfigMap {NAMESPACE}/{NAME}: some teams select namespaces by labels: give --watch-cluster (or "
        "--namespaces FILE) so the server knows namespace labels; without them those namespaces would pass unmutated"
    )
    assert state.teams is None and sample(state, "kgov_policy_rejected") == 1.0
    # The same policy is taken by a server that watches namespaces.
    watching = GovernorState(ServerConfig(**{**vars(state.config), "watch_cluster": True}), Metrics())
    assert watching.take_policies("configmap", lambda: parse_policies(selecting, "x")) is None
    assert watching.teams is not None and watching.teams.needs_namespace_labels


# -- --reuse-port: a process opens the shared webhook port only once it is ready --------------------
async def test_with_reuse_port_the_webhook_port_opens_only_once_the_policy_is_loaded(
    start_server: ServerFactory, api_server: PolicyApiServer, tmp_path: Path
) -> None:
    """Regression: a second ``kgov serve --reuse-port`` (the chart's second container, restarted
    after a kill) listened as soon as its ConfigMap watch started, so the kernel gave it some of
    the shared port's new connections and it answered them "policies not loaded yet" (503) while
    its pod still counted as ready. Now it opens the port once ready; until then the first answers
    every connection."""
    first = await start_server(reuse_port=True)
    metrics_port = free_port()
    config_file = kubeconfig(tmp_path / "kubeconfig", api_server.port)
    second = asyncio.create_task(
        start_server(
            platform=None,
            policy_configmap=(NAMESPACE, NAME),
            kubeconfig=str(config_file),
            reuse_port=True,
            port=first.port,
            metrics_port=metrics_port,
        )
    )
    connector = aiohttp.TCPConnector(ssl=first.ssl_context, force_close=True)  # a new connection each time
    async with aiohttp.ClientSession(connector=connector) as session:

        async def readyz(url: str) -> int:
            async with session.get(url) as resp:
                return resp.status

        second_readyz = f"http://{LOOPBACK}:{metrics_port}/readyz"
        await until(lambda: api_server.requests != [])  # the second is up, waiting for its ConfigMap
        await until_answers(readyz, second_readyz)
        assert await readyz(second_readyz) == 503
        assert [await readyz(first.url("/readyz")) for _ in range(30)] == [200] * 30
        api_server.queue(listing(RECORDED["list"]), resource="configmaps")
        server = await second
        assert server.port == first.port
        assert await readyz(second_readyz) == 200
        await first.shutdown()
        assert await readyz(first.url("/readyz")) == 200  # the second holds the port now


async def until_answers(readyz: Callable[[str], Awaitable[int]], url: str, timeout: float = 10) -> None:
    """Wait until ``url`` answers at all (the metrics port is listening)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            await readyz(url)
            return
        except aiohttp.ClientConnectionError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)
