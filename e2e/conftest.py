"""Fixtures for the e2e suite: one real cluster per session, one namespace per test.

Which cluster:

* ``KGOV_E2E_KUBECONFIG`` (or ``KUBECONFIG_E2E``) set: that cluster (kind, or anything real);
  nothing is started or stopped.
* otherwise the local cluster of :mod:`e2e.devcluster` (etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler, Kueue and KWOK as processes), brought up once for the
  session in a temporary state directory and torn down at the end. With ``KGOV_E2E_STATE`` set,
  that state directory is used instead; a cluster already running there (``make e2e-up``) is
  reused and left running.

``KGOV_E2E_SHAPE`` (e.g. ``1x2x2x2``) sets the fake node tree of a local cluster;
``KGOV_E2E_REAL_NODE=1`` runs the real node (:mod:`e2e.devcluster.node`) beside it for the whole
session (otherwise only ``test_chart_real_node.py`` starts it, for its own tests; ``=0`` skips
those). When a test fails, the tail of each control-plane log is added to its report.

The governor tests share, per session, the bundled platform's generated objects
(``bundled_config``) and a governor enforcing that platform (``bundled_governor``): ``kgov serve``
next to a local control plane, or whatever is installed as ``kgov-governor`` on an external
cluster (the tests skip, saying why, when there is none).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import tempfile
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import devcluster, manifests, support

KUBECONFIG_VARIABLES = ("KGOV_E2E_KUBECONFIG", "KUBECONFIG_E2E")
E2E_NAMESPACE_LABEL = "kueue-governor.io/e2e"
_STATE_KEY = pytest.StashKey[Path]()
# Set while the session's bundled governor runs, so that the per-test `governor` fixture puts it back.
_BUNDLED_GOVERNOR_KEY = pytest.StashKey[bool]()


@dataclass(frozen=True)
class E2ECluster:
    """The cluster under test."""

    kubeconfig: Path
    # The local control plane's info; None for an external cluster (e.g. kind).
    local: devcluster.ClusterInfo | None

    @property
    def node_names(self) -> list[str]:
        return list(self.local.node_names) if self.local else []


def _external_kubeconfig() -> Path | None:
    for variable in KUBECONFIG_VARIABLES:
        value = os.environ.get(variable)
        if value:
            return Path(value).expanduser()
    return None


@pytest.fixture(scope="session")
def e2e_cluster(request: pytest.FixtureRequest) -> Iterator[E2ECluster]:
    """The session's cluster (see the module docstring for which one)."""
    external = _external_kubeconfig()
    if external is not None:
        yield E2ECluster(kubeconfig=external, local=None)
        return
    configured = os.environ.get("KGOV_E2E_STATE")
    # Not pytest's tmp_path_factory: a concurrent pytest session may prune its numbered
    # directories while this cluster still runs out of one.
    root = Path(configured).resolve() if configured else Path(tempfile.mkdtemp(prefix="kgov-e2e-"))
    request.config.stash[_STATE_KEY] = root
    paths = devcluster.Paths(root)
    already_running = devcluster.load_info(root) is not None and all(
        devcluster.process_alive(paths, name) for name in devcluster.CONTROL_PLANE
    )
    shape = manifests.TopologyShape.parse(os.environ.get("KGOV_E2E_SHAPE", str(manifests.TopologyShape())))
    try:
        # KGOV_E2E_REAL_NODE=1: the real node runs for the whole session (every module beside it).
        info = devcluster.up(root, shape=shape, real_node=os.environ.get("KGOV_E2E_REAL_NODE") == "1")
    except BaseException:
        devcluster.down(root)
        raise
    try:
        yield E2ECluster(kubeconfig=Path(info.kubeconfig), local=info)
    finally:
        if not already_running:
            # Logs stay for a failed session (their path is in each failure report).
            failed = request.session.testsfailed > 0
            devcluster.down(root, purge=not configured and not failed)


@pytest.fixture
async def api(e2e_cluster: E2ECluster) -> AsyncIterator[k8s.ApiClient]:
    """An async API client with the cluster's admin credentials (typed APIs: ``k8s.CoreV1Api(api)``)."""
    async with devcluster.api_client(e2e_cluster.kubeconfig) as client:
        yield client


@pytest.fixture
async def dynamic(api: k8s.ApiClient, e2e_cluster: E2ECluster) -> AsyncIterator[DynamicClient]:
    """A dynamic client on the same connection: any kind, CRDs included (see e2e.support)."""
    cache = Path(e2e_cluster.local.state_dir) / "discovery" if e2e_cluster.local else None
    async with devcluster.CheckedDynamicClient(api, cache_file=str(cache) if cache else None) as client:
        yield client


def _slug(text: str, limit: int) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")


@pytest.fixture
async def namespace(request: pytest.FixtureRequest, api: k8s.ApiClient, dynamic: DynamicClient) -> AsyncIterator[str]:
    """A fresh namespace for one test, deleted afterwards (the namespace controller removes what
    is in it).

    It has the label ``kueue-governor.io/e2e=true`` and, before the test starts, the ``default``
    ServiceAccount the service-account controller makes (Pods need it).
    """
    name = f"e2e-{_slug(request.node.name, 40)}-{secrets.token_hex(3)}"
    core = k8s.CoreV1Api(api)
    await core.create_namespace(
        k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name, labels={E2E_NAMESPACE_LABEL: "true"}))
    )
    await support.wait_default_service_account(dynamic, name)
    yield name
    try:
        await core.delete_namespace(name, propagation_policy="Background")
    except k8s.ApiException as error:
        if error.status != 404:
            raise


@pytest.fixture
def governor(request: pytest.FixtureRequest, e2e_cluster: E2ECluster) -> Iterator[Callable[..., str]]:
    """Start ``kgov serve`` with a platform file and register ``kgov-governor``: ``governor(path)``
    (``governor(None, policy=[...], kubeconfig=...)``: options of :func:`devcluster.start_governor`).

    Returns the server URL. At the end of the test the webhook configuration is removed first
    (so admission does not fail closed) and the server stopped; if the session's
    ``bundled_governor`` was running, it is started again. On an external cluster the governor
    is whatever is installed there (e.g. the Helm chart), so tests that call this skip.
    """
    started = False

    def start(platform: Path | None, **options: Any) -> str:
        nonlocal started
        if e2e_cluster.local is None:
            pytest.skip("starts kgov serve next to the local control plane")
        started = True
        info = devcluster.start_governor(Path(e2e_cluster.local.state_dir), platform, **options)
        assert info.governor_url is not None
        return info.governor_url

    yield start
    if started and e2e_cluster.local is not None:
        devcluster.stop_governor(Path(e2e_cluster.local.state_dir))
        if request.config.stash.get(_BUNDLED_GOVERNOR_KEY, False):
            devcluster.start_governor(Path(e2e_cluster.local.state_dir), support.BUNDLED_PLATFORM)


@pytest.fixture
async def cleanup(dynamic: DynamicClient) -> AsyncIterator[support.Cleanup]:
    """Workload objects registered with ``cleanup.add(body)`` are deleted after the test, with
    their Kueue Workloads (waited for, so their quota and topology capacity are free again)."""
    tracker = support.Cleanup(dynamic)
    yield tracker
    await tracker.run()


def _session_dynamic(e2e_cluster: E2ECluster) -> contextlib.AbstractAsyncContextManager[DynamicClient]:
    cache = Path(e2e_cluster.local.state_dir) / "discovery" if e2e_cluster.local else None
    return devcluster.dynamic_client(e2e_cluster.kubeconfig, cache)


@pytest.fixture(scope="session")
def bundled_config(e2e_cluster: E2ECluster, tmp_path_factory: pytest.TempPathFactory) -> support.Generated:
    """``kgov generate kueue-config/platform.yaml --namespaces``, applied once for the session.

    Topology, ResourceFlavor, Cohort, ClusterQueues (waited for until Active), LocalQueues,
    priority classes, the team namespaces (each with a ``default`` ServiceAccount) and the policy
    ConfigMap. Team namespaces are shared by the session's tests, so tests name their objects
    uniquely and delete them.
    """
    generated = support.generate(support.BUNDLED_PLATFORM, tmp_path_factory.mktemp("bundled-generated"))

    async def apply() -> None:
        async with _session_dynamic(e2e_cluster) as dynamic:
            await support.apply_generated(dynamic, generated)
            queues = [queue["metadata"]["name"] for queue in generated.of_kind("ClusterQueue")]
            await support.wait_cluster_queues_active(dynamic, queues)

    asyncio.run(apply())
    return generated


@dataclass(frozen=True)
class GovernorInfo:
    """The governor the session's tests run against.

    ``state_dir`` is set for a ``kgov serve`` started next to the local control plane (its
    ``/metrics`` can be read); None for a governor installed in an external cluster.
    """

    platform: Path
    state_dir: Path | None = None

    @property
    def local(self) -> bool:
        return self.state_dir is not None

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
        """The governor's Prometheus samples, or None when it cannot be reached from here."""
        info = devcluster.load_info(self.state_dir) if self.state_dir is not None else None
        if info is None or info.governor_metrics_url is None:
            return None
        return support.read_metrics(info.governor_metrics_url)


async def _installed_governor(e2e_cluster: E2ECluster) -> bool:
    async with devcluster.api_client(e2e_cluster.kubeconfig) as api:
        try:
            await k8s.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(
                manifests.GOVERNOR_WEBHOOK_CONFIGURATION
            )
        except k8s.ApiException as error:
            if error.status == 404:
                return False
            raise
    return True


@pytest.fixture(scope="session")
def bundled_governor(request: pytest.FixtureRequest, e2e_cluster: E2ECluster) -> Iterator[GovernorInfo]:
    """The governor enforcing ``kueue-config/platform.yaml``, once per session, after
    ``bundled_config`` is applied.

    Local control plane: ``kgov serve --watch-cluster`` started next to it and registered as the
    ``kgov-governor`` MutatingWebhookConfiguration (stopped at the end). External cluster: the
    governor installed there (``e2e/kind/install.sh`` installs one with this platform); when
    there is no ``kgov-governor`` configuration, every test that needs it is skipped.
    """
    if e2e_cluster.local is None:
        if not asyncio.run(_installed_governor(e2e_cluster)):
            pytest.skip(
                f"no governor: {e2e_cluster.kubeconfig} is an external cluster (so no local kgov serve can "
                f"be registered for it) and it has no {manifests.GOVERNOR_WEBHOOK_CONFIGURATION!r} "
                "MutatingWebhookConfiguration; install one (e2e/kind/install.sh) or run without "
                "KGOV_E2E_KUBECONFIG"
            )
        request.getfixturevalue("bundled_config")
        yield GovernorInfo(platform=support.BUNDLED_PLATFORM)
        return
    request.getfixturevalue("bundled_config")
    state = Path(e2e_cluster.local.state_dir)
    info = devcluster.start_governor(state, support.BUNDLED_PLATFORM)
    assert info.governor_url is not None
    # kgov serve answers /readyz only once its node inventory is built, so `topology: auto` placement
    # is right from the first request (start_governor waits for /readyz).
    request.config.stash[_BUNDLED_GOVERNOR_KEY] = True
    try:
        yield GovernorInfo(platform=support.BUNDLED_PLATFORM, state_dir=state)
    finally:
        request.config.stash[_BUNDLED_GOVERNOR_KEY] = False
        devcluster.stop_governor(state)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On a failed test, attach the tail of each control-plane log to its report."""
    report = yield
    root = item.config.stash.get(_STATE_KEY, None)
    if root is not None and report.failed:
        paths = devcluster.Paths(root)
        for name in devcluster.PROCESS_ORDER:
            tail = devcluster.log_tail(paths, name, lines=80)
            if tail:
                report.sections.append((f"{name} log (last 80 lines, {paths.log(name)})", tail))
    return report
