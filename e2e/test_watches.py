"""``kgov serve --watch-cluster`` against the real kube-apiserver: its namespace and node caches
(list + watch, :mod:`webhook.kube.cache`) as the admission path sees them.

Each test starts its own governor (``governor`` fixture) for a platform written here, registered
as the ``kgov-governor`` webhook, and looks at what the API server stores for the Jobs it creates
(the queue label, the TAS annotation ``topology: auto`` chose, the warnings). Whatever the
governor learns through its watches is awaited by polling with a deadline (server-side dry-run
creates, which go through the webhook and store nothing); a wait that runs out fails the test.

* teams selected by namespace labels (``matchLabels``; ``matchExpressions`` with ``In`` and
  ``NotIn``), for namespaces that existed when the governor listed them;
* a namespace relabelled in and out while Jobs are created one after the other: every Job has the
  queue of the labels before or after each change, never an older one again;
* a namespace created together with its first Job;
* tainted nodes (Node objects made for the test, kept Ready by KWOK, with an instance type no
  other flavor selects; a taint of the platform's own, not one of Kubernetes' transient
  ``node.kubernetes.io/*`` ones, which ``auto`` counts as nodes down for now): the level
  ``topology: auto`` picks, and the never-fits warning, follow the node inventory;
* the API server restarted (SIGTERM, and SIGKILL) with etcd compacted while it was down: both
  caches get ``410 Gone``, list again, and a namespace label change made afterwards is seen.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import devcluster
from e2e.conftest import E2E_NAMESPACE_LABEL, E2ECluster
from e2e.manifests import FAKE_NODE_LABEL, INSTANCE_TYPE_LABEL, TOPOLOGY_LEVELS, TopologyShape, fake_nodes
from e2e.support import Created, Refused, create_with_warnings, read_metrics, wait_default_service_account, wait_for

pytestmark = pytest.mark.e2e

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
TEAM_LABEL = "kueue-governor.io/e2e-watch-team"
TIER_LABEL = "kueue-governor.io/e2e-watch-tier"
GPU = "nvidia.com/gpu"
#: How long a change may take to reach the governor's cache before the test fails. A watch event
#: arrives in milliseconds; the bound is for a loaded machine.
CATCH_UP = 30.0

ALPHA, BETA, GAMMA = "alpha-queue", "beta-queue", "gamma-queue"


def platform(instance_type: str, gamma_namespace: str = "e2e-watch-unused") -> dict[str, Any]:
    """Teams ``alpha`` (namespaces labelled team=alpha), ``beta`` (tier=gpu and not team=alpha: the
    two selectors would otherwise both select a namespace labelled with both, a conflict the
    governor refuses) and ``gamma`` (one namespace by name, ``topology: auto`` over nodes of
    ``instance_type``). ``naming: default``: LocalQueue ``<team>-queue``."""
    quotas = [{"flavor": "watch-gpu", "resources": {"cpu": {"nominalQuota": 64}, GPU: {"nominalQuota": 32}}}]
    return {
        "apiVersion": "kueue-governor.io/v1alpha1",
        "kind": "Platform",
        "naming": "default",
        "topologies": [{"name": "watch-net", "levels": list(TOPOLOGY_LEVELS)}],
        "flavors": [
            {"name": "watch-gpu", "nodeLabels": {INSTANCE_TYPE_LABEL: instance_type}, "topologyName": "watch-net"}
        ],
        "teams": [
            {
                "name": "alpha",
                "namespaceSelector": {"matchLabels": {TEAM_LABEL: "alpha"}},
                "quotas": quotas,
                "policy": {"queue": {"enforcement": "enforce"}},
            },
            {
                "name": "beta",
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": TIER_LABEL, "operator": "In", "values": ["gpu"]},
                        {"key": TEAM_LABEL, "operator": "NotIn", "values": ["alpha"]},
                    ]
                },
                "quotas": quotas,
                "policy": {"queue": {"enforcement": "enforce"}},
            },
            {
                "name": "gamma",
                "namespaces": [gamma_namespace],
                "quotas": quotas,
                "policy": {"queue": {"enforcement": "enforce"}, "topology": {"mode": "auto"}},
            },
        ],
    }


def write_platform(directory: Path, document: dict[str, Any]) -> Path:
    path = directory / "platform.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def job(namespace: str, pods: int = 1, gpus: int = 0) -> dict[str, Any]:
    """A suspended Job (no pod ever starts; the queue label and annotations are what is read)."""
    requests = {GPU: str(gpus)} if gpus else {"cpu": "100m"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"watch-{secrets.token_hex(4)}", "namespace": namespace},
        "spec": {
            "suspend": True,
            "parallelism": pods,
            "completions": pods,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": requests, "limits": requests},
                        }
                    ],
                }
            },
        },
    }


def queue_of(obj: dict[str, Any]) -> str | None:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    value = labels.get(QUEUE_LABEL)
    return str(value) if value is not None else None


def placement_of(obj: dict[str, Any]) -> tuple[str, str] | None:
    """(``required``/``preferred``, level) of the Job's pod template, None without either."""
    annotations = obj["spec"]["template"].get("metadata", {}).get("annotations") or {}
    for mode, key in (("required", REQUIRED), ("preferred", PREFERRED)):
        if key in annotations:
            return mode, str(annotations[key])
    return None


async def dry_run(dynamic: DynamicClient, body: dict[str, Any]) -> Created:
    """The Job as the API server would store it, through every admission webhook, stored nowhere."""
    return await create_with_warnings(dynamic, body, dry_run=True)


async def until_queue(dynamic: DynamicClient, namespace: str, wanted: str | None, what: str) -> None:
    """Poll (dry-run) until a new Job in ``namespace`` gets queue ``wanted`` (None: no queue label)."""
    seen: list[str | None] = []

    async def probe() -> bool:
        got = queue_of((await dry_run(dynamic, job(namespace))).obj)
        seen.append(got)
        return got == wanted

    try:
        await wait_for(probe, what, timeout=CATCH_UP, interval=0.2)
    except AssertionError as error:
        raise AssertionError(f"{error}; queues seen, newest last: {seen[-5:]}") from None


def governor_metrics(e2e_cluster: E2ECluster) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    assert e2e_cluster.local is not None
    info = devcluster.load_info(Path(e2e_cluster.local.state_dir))
    assert info is not None and info.governor_metrics_url is not None
    return read_metrics(info.governor_metrics_url)


def sample(metrics: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return metrics.get((name, frozenset(labels.items())), 0.0)


NamespaceFactory = Callable[..., Awaitable[str]]


@pytest.fixture
async def make_namespace(dynamic: DynamicClient, api: k8s.ApiClient) -> AsyncIterator[NamespaceFactory]:
    """``await make_namespace(labels)``: a fresh namespace with these labels (and the suite's e2e
    label), deleted after the test with what is in it."""
    core = k8s.CoreV1Api(api)
    made: list[str] = []

    async def make(labels: dict[str, str] | None = None, name: str | None = None) -> str:
        name = name or f"e2e-watch-{secrets.token_hex(4)}"
        made.append(name)
        body = k8s.V1Namespace(
            metadata=k8s.V1ObjectMeta(name=name, labels={E2E_NAMESPACE_LABEL: "true", **(labels or {})})
        )
        await core.create_namespace(body)
        return name

    yield make
    for name in made:
        try:
            await core.delete_namespace(name, propagation_policy="Background")
        except k8s.ApiException as error:
            if error.status != 404:
                raise


async def relabel(dynamic: DynamicClient, namespace: str, labels: dict[str, str | None]) -> None:
    """Merge-patch a namespace's labels (None removes one)."""
    resource = await dynamic.resources.get(api_version="v1", kind="Namespace")
    await dynamic.patch(
        resource, body={"metadata": {"labels": labels}}, name=namespace, content_type="application/merge-patch+json"
    )


# --------------------------------------------------------------------------- label-selected teams


async def test_teams_selected_by_namespace_labels(
    dynamic: DynamicClient,
    make_namespace: NamespaceFactory,
    governor: Callable[[Path], str],
    tmp_path: Path,
) -> None:
    # Created before the governor starts: its first list must carry their labels.
    cases = {
        await make_namespace({TEAM_LABEL: "alpha"}): ALPHA,
        await make_namespace({TIER_LABEL: "gpu"}): BETA,
        # both labels: beta's NotIn excludes it, so alpha alone selects it (ignoring NotIn would
        # make it a conflict, and the Job would be refused)
        await make_namespace({TIER_LABEL: "gpu", TEAM_LABEL: "alpha"}): ALPHA,
        await make_namespace({TIER_LABEL: "cpu"}): None,
        await make_namespace({TEAM_LABEL: "beta"}): None,
        await make_namespace(): None,
    }
    await asyncio.to_thread(governor, write_platform(tmp_path, platform("e2e-watch-none")))
    for namespace, wanted in cases.items():
        stored = (await create_with_warnings(dynamic, job(namespace))).obj
        assert queue_of(stored) == wanted, (namespace, stored["metadata"].get("labels"))
        assert stored["spec"]["suspend"] is True

    # A namespace created after the governor started is learnt from the watch.
    later = await make_namespace({TIER_LABEL: "gpu"})
    await until_queue(dynamic, later, BETA, f"namespace {later} to be beta's")


async def test_label_changes_move_new_jobs(
    dynamic: DynamicClient,
    make_namespace: NamespaceFactory,
    governor: Callable[[Path], str],
    tmp_path: Path,
) -> None:
    """Jobs are created one after the other while the namespace's labels change four times. Each
    change must show in new Jobs within :data:`CATCH_UP`, and the queues of the Jobs, in the
    order they were created, must go through exactly the sequence of the label changes: a cache
    that went back to an older state would show as a queue seen again out of turn."""
    await asyncio.to_thread(governor, write_platform(tmp_path, platform("e2e-watch-none")))
    namespace = await make_namespace()
    queues: list[str | None] = []
    stop = asyncio.Event()

    async def create_jobs() -> None:
        while not stop.is_set():
            stored = (await create_with_warnings(dynamic, job(namespace))).obj
            queues.append(queue_of(stored))

    creator = asyncio.create_task(create_jobs())
    steps: list[tuple[dict[str, str | None], str | None]] = [
        ({TEAM_LABEL: "alpha"}, ALPHA),
        ({TEAM_LABEL: None, TIER_LABEL: "gpu"}, BETA),
        ({TEAM_LABEL: "alpha"}, ALPHA),  # tier=gpu and team=alpha: NotIn leaves it to alpha
        ({TEAM_LABEL: None, TIER_LABEL: None}, None),
    ]

    async def at_least(count: int) -> bool:
        return len(queues) >= count

    try:
        await wait_for(lambda: at_least(3), "the first Jobs", timeout=CATCH_UP)
        for labels, wanted in steps:
            await relabel(dynamic, namespace, labels)
            mark = len(queues)

            async def followed(mark: int = mark, wanted: str | None = wanted) -> bool:
                return wanted in queues[mark:] and queues[-1] == wanted

            await wait_for(followed, f"new Jobs to get {wanted!r} after labels {labels}", timeout=CATCH_UP)
            # A few more Jobs under the new labels before the next change.
            await wait_for(functools.partial(at_least, len(queues) + 3), "more Jobs", timeout=CATCH_UP)
    finally:
        stop.set()
        await creator
    runs = [queue for index, queue in enumerate(queues) if index == 0 or queues[index - 1] != queue]
    assert runs == [None, ALPHA, BETA, ALPHA, None], f"{len(queues)} Jobs, queues in order of creation: {queues}"


async def first_job_in_new_namespace(
    dynamic: DynamicClient, make_namespace: NamespaceFactory, labels: dict[str, str]
) -> tuple[str, Created | Refused]:
    """Create a namespace and, concurrently, its first Job, sent the moment the API server knows
    the namespace (retried while it answers 404): (namespace, what the create returned)."""
    name = f"e2e-watch-new-{secrets.token_hex(4)}"
    body = job(name)

    async def first_job() -> Created | Refused:
        while True:
            try:
                return await create_with_warnings(dynamic, body)
            except Refused as refused:
                if refused.status.get("code") == 404 and refused.status.get("details", {}).get("kind") == "namespaces":
                    await asyncio.sleep(0.002)
                    continue
                return refused

    pending = asyncio.create_task(first_job())
    await make_namespace(labels, name=name)
    return name, await pending


async def assert_governed_or_retry(
    dynamic: DynamicClient, outcomes: list[tuple[str, Created | Refused]], wanted: str
) -> int:
    """Each first Job got queue ``wanted``, or was refused with 503 and the message to retry, and
    a retry (polled) gets ``wanted``. Returns how many were refused."""
    refused = []
    for namespace, outcome in outcomes:
        if isinstance(outcome, Refused):
            assert outcome.status.get("code") == 503, outcome.status
            message = str(outcome.status.get("message"))
            assert f"namespace {namespace!r} is not in the governor's namespace cache yet" in message, message
            assert "retry in a few seconds" in message, message
            refused.append(namespace)
        else:
            assert queue_of(outcome.obj) == wanted, outcome.obj["metadata"]
    for namespace in refused:
        await until_queue(dynamic, namespace, wanted, "a retried first Job to be governed")
    return len(refused)


def namespace_waits(
    before: dict[tuple[str, frozenset[tuple[str, str]]], float],
    after: dict[tuple[str, frozenset[tuple[str, str]]], float],
) -> dict[str, float]:
    return {
        result: sample(after, "kgov_namespace_cache_waits_total", result=result)
        - sample(before, "kgov_namespace_cache_waits_total", result=result)
        for result in ("seen", "unseen")
    }


async def test_namespace_created_together_with_its_first_job(
    dynamic: DynamicClient,
    make_namespace: NamespaceFactory,
    governor: Callable[[Path], str],
    tmp_path: Path,
    e2e_cluster: E2ECluster,
) -> None:
    """30 namespaces, each created together with its first Job (10 in turn, 20 at once), racing the namespace's watch
    event to the governor. The governor waits for its cache to see the namespace
    (``kgov_namespace_cache_waits_total{result="seen"}``); a namespace still unseen after that is
    refused with 503 and a message to retry (``unseen``). Never is the Job let through without
    the team's queue."""
    await asyncio.to_thread(governor, write_platform(tmp_path, platform("e2e-watch-none")))
    before = governor_metrics(e2e_cluster)
    # One after the other, then 20 at once (the governor's loop busy with many requests and
    # watch events together).
    outcomes = [await first_job_in_new_namespace(dynamic, make_namespace, {TEAM_LABEL: "alpha"}) for _ in range(10)]
    outcomes += await asyncio.gather(
        *(first_job_in_new_namespace(dynamic, make_namespace, {TEAM_LABEL: "alpha"}) for _ in range(20))
    )
    waits = namespace_waits(before, governor_metrics(e2e_cluster))
    print(f"first Jobs in 30 new namespaces: the governor waited for its cache {waits}")
    refused = await assert_governed_or_retry(dynamic, outcomes, ALPHA)
    assert waits["unseen"] == refused


# --------------------------------------------------------------------------- nodes


def watch_nodes(instance_type: str, prefix: str) -> list[dict[str, Any]]:
    """4 Nodes in one spine and block, 2 racks of 2 hosts, 8 GPUs each, labelled for KWOK (which
    makes them Ready) and with ``instance_type`` (only this test's flavor selects them)."""
    template = fake_nodes(TopologyShape(spines=1, blocks=1, racks=2, hosts=2))
    nodes = []
    for index, node in enumerate(template):
        rack, host = divmod(index, 2)
        name = f"{prefix}-r{rack + 1}-h{host + 1}"
        labels = {
            TOPOLOGY_LEVELS[0]: f"{prefix}-spine",
            TOPOLOGY_LEVELS[1]: f"{prefix}-block",
            TOPOLOGY_LEVELS[2]: f"{prefix}-rack-{rack + 1}",
            TOPOLOGY_LEVELS[3]: name,
            INSTANCE_TYPE_LABEL: instance_type,
            FAKE_NODE_LABEL: "true",
        }
        nodes.append({**node, "metadata": {"name": name, "labels": labels}})
    return nodes


@pytest.fixture
async def own_nodes(dynamic: DynamicClient, api: k8s.ApiClient) -> AsyncIterator[tuple[str, list[str]]]:
    """(instance type, node names) of 4 Ready nodes made for one test; deleted afterwards."""
    suffix = secrets.token_hex(3)
    instance_type = f"e2e-watch-{suffix}"
    nodes = watch_nodes(instance_type, f"watch-{suffix}")
    names = [node["metadata"]["name"] for node in nodes]
    await devcluster.apply_nodes(dynamic, nodes)
    try:
        await devcluster.wait_nodes_ready(dynamic, names)
        yield instance_type, names
    finally:
        core = k8s.CoreV1Api(api)
        for name in names:
            try:
                await core.delete_node(name)
            except k8s.ApiException as error:
                if error.status != 404:
                    raise


async def test_topology_auto_follows_taints(
    dynamic: DynamicClient,
    make_namespace: NamespaceFactory,
    governor: Callable[[Path], str],
    own_nodes: tuple[str, list[str]],
    tmp_path: Path,
) -> None:
    instance_type, (r1h1, r1h2, r2h1, r2h2) = own_nodes
    namespace = await make_namespace()
    await asyncio.to_thread(governor, write_platform(tmp_path, platform(instance_type, gamma_namespace=namespace)))
    resource = await dynamic.resources.get(api_version="v1", kind="Node")
    layer1, layer2, layer3, _ = TOPOLOGY_LEVELS

    async def patch_node(name: str, spec: dict[str, Any]) -> None:
        await dynamic.patch(resource, body={"spec": spec}, name=name, content_type="application/merge-patch+json")

    async def until_placed(wanted: tuple[str, str], never_fits: bool, what: str) -> Created:
        seen: list[Any] = []

        async def probe() -> Created | None:
            created = await dry_run(dynamic, job(namespace, pods=2, gpus=8))
            got = placement_of(created.obj)
            warned = any("can never be admitted" in warning for warning in created.warnings)
            seen.append((got, warned))
            return created if got == wanted and warned == never_fits else None

        try:
            return await wait_for(probe, what, timeout=CATCH_UP, interval=0.2)
        except AssertionError as error:
            raise AssertionError(f"{error}; (placement, warned) seen, newest last: {seen[-3:]}") from None

    # 2 pods x 8 GPUs: each rack's 2 hosts hold them.
    created = await until_placed(("required", layer3), False, "a rack-level placement on 4 free nodes")
    assert queue_of(created.obj) == GAMMA
    taint = {"key": "e2e-watch/maintenance", "value": "true", "effect": "NoSchedule"}
    try:
        # One host of each rack tainted: no rack holds both pods, the block does.
        await patch_node(r1h1, {"taints": [taint]})
        await patch_node(r2h1, {"taints": [taint]})
        await until_placed(("required", layer2), False, "block level once a host of each rack is tainted")
        # The other host of rack 2 tainted too: one host left, no domain holds 2 pods.
        await patch_node(r2h2, {"taints": [taint]})
        created = await until_placed(("preferred", layer1), True, "preferred and a warning once 1 host is left")
        warning = next(w for w in created.warnings if "can never be admitted" in w)
        assert f"2 pods of {{{GPU}: 8}} fit on no set of the team's nodes (they hold 1 such pods" in warning
        assert r1h2  # the one host left
    finally:
        for name in (r1h1, r2h1, r2h2):
            await patch_node(name, {"taints": None})
    await until_placed(("required", layer3), False, "rack level again once the nodes are back")


# --------------------------------------------------------------------------- API server restart


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "sigkill"])
async def test_watches_recover_after_api_server_restart_and_compaction(
    crash: bool,
    api: k8s.ApiClient,
    dynamic: DynamicClient,
    make_namespace: NamespaceFactory,
    governor: Callable[[Path], str],
    tmp_path: Path,
    e2e_cluster: E2ECluster,
) -> None:
    """kube-apiserver is stopped (SIGTERM: it closes the watches; SIGKILL: connections cut
    mid-stream), etcd compacted up to its current revision, and the API server started again.
    The governor's watches break and are opened again from the last versions they saw; killed,
    those versions are compacted away, so each cache gets ``410 Gone`` and lists again
    (``kgov_cache_lists_total{reason="expired"}``, once per cache); stopped gracefully, the API
    server's last bookmark may let a cache resume without a list (never more than one). A namespace created with its
    first Job right after the restart is governed (or refused, to be retried); a label change
    made afterwards reaches new Jobs."""
    if e2e_cluster.local is None:
        pytest.skip("restarts the local control plane's API server")
    state = Path(e2e_cluster.local.state_dir)
    await asyncio.to_thread(governor, write_platform(tmp_path, platform("e2e-watch-none")))
    namespace = await make_namespace({TEAM_LABEL: "alpha"})
    await until_queue(dynamic, namespace, ALPHA, "the new namespace to be alpha's")
    # A write of another kind after the namespace's: etcd's revision is now past every version the
    # governor's caches hold, so the compaction below removes them.
    core = k8s.CoreV1Api(api)
    await core.create_namespaced_config_map(
        namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="bump"), data={"at": str(time.time())})
    )
    before = governor_metrics(e2e_cluster)
    compacted: list[int] = []
    down_for = await asyncio.to_thread(
        devcluster.restart_apiserver, state, lambda: compacted.append(devcluster.compact_etcd(state)), crash
    )
    print(f"API server restarted: unreachable for {down_for:.1f}s, etcd compacted at revision {compacted}")

    async def reachable() -> bool:
        # This test's own client may hold connections the restart cut.
        try:
            await core.read_namespace(namespace)
        except (aiohttp.ClientError, OSError):
            return False
        return True

    try:
        await wait_for(reachable, "the API server to answer this test's client again", timeout=CATCH_UP)
        # At once, while the governor's watches may still be backing off: a namespace created
        # together with its first Job is governed, or refused to be retried; never passed.
        waits_before = governor_metrics(e2e_cluster)
        outcome = await first_job_in_new_namespace(dynamic, make_namespace, {TEAM_LABEL: "alpha"})
        waits = namespace_waits(waits_before, governor_metrics(e2e_cluster))
        print(f"first Job in a namespace made right after the restart: the governor waited {waits}")
        assert waits["unseen"] == await assert_governed_or_retry(dynamic, [outcome], ALPHA)
        await relabel(dynamic, namespace, {TEAM_LABEL: None, TIER_LABEL: "gpu"})
        await until_queue(dynamic, namespace, BETA, "a label change after the restart to reach new Jobs")

        def expired_lists() -> dict[str, float]:
            after = governor_metrics(e2e_cluster)
            return {
                cache: sample(after, "kgov_cache_lists_total", cache=cache, reason="expired")
                - sample(before, "kgov_cache_lists_total", cache=cache, reason="expired")
                for cache in ("namespaces", "nodes")
            }

        if crash:
            # Killed, the API server sent nothing more: the versions the caches resume from are
            # compacted away, so each gets 410 Gone and lists again, once.
            async def relisted() -> dict[str, float] | None:
                counts = expired_lists()
                return counts if all(count >= 1 for count in counts.values()) else None

            counts = await wait_for(relisted, "both caches to list again after 410 Gone", timeout=CATCH_UP)
            assert counts == {"namespaces": 1.0, "nodes": 1.0}
        else:
            # Stopped gracefully, the API server ends each watch with a bookmark of its newest
            # version (the caches ask for bookmarks), which the compaction keeps: a cache may resume
            # without a list. Never more than one list each; the label change above proved the
            # namespaces fresh.
            counts = expired_lists()
            assert set(counts.values()) <= {0.0, 1.0}, counts
    finally:
        # The nodes' leases could not be renewed while the API server was down.
        await devcluster.wait_nodes_ready(dynamic, e2e_cluster.node_names, timeout=180)
        await controllers_back(core, dynamic)


async def controllers_back(core: k8s.CoreV1Api, dynamic: DynamicClient) -> None:
    """Wait until kube-controller-manager serves again after the API server's restart (its
    informers back off while the server is away): a new namespace gets its ``default``
    ServiceAccount, which later tests' namespaces need within their own 60 s."""
    name = f"e2e-controllers-back-{secrets.token_hex(3)}"
    await core.create_namespace(
        k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name, labels={E2E_NAMESPACE_LABEL: "true"}))
    )
    try:
        await wait_default_service_account(dynamic, name, timeout=180)
    finally:
        await core.delete_namespace(name, propagation_policy="Background")
