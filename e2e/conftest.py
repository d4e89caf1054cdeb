"""Fixtures for the e2e suite: one real cluster per session, one namespace per test.

Which cluster:

* ``KGOV_E2E_KUBECONFIG`` (or ``KUBECONFIG_E2E``) set: that cluster (kind, or anything real);
  nothing is started or stopped.
* otherwise the local control plane of :mod:`e2e.devcluster` (etcd, kube-apiserver, Kueue as
  processes), brought up once for the session in a temporary state directory and torn down at the
  end. With ``KGOV_E2E_STATE`` set, that state directory is used instead; a cluster already running
  there (``make e2e-up``) is reused and left running.

``KGOV_E2E_SHAPE`` (e.g. ``1x2x2x2``) sets the fake node tree of a local cluster. When a test
fails, the tail of each control-plane log is added to its report.
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import devcluster, manifests

KUBECONFIG_VARIABLES = ("KGOV_E2E_KUBECONFIG", "KUBECONFIG_E2E")
E2E_NAMESPACE_LABEL = "kueue-governor.io/e2e"
_STATE_KEY = pytest.StashKey[Path]()


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
        devcluster.process_alive(paths, name) for name in ("etcd", "kube-apiserver", "kueue")
    )
    shape = manifests.TopologyShape.parse(os.environ.get("KGOV_E2E_SHAPE", str(manifests.TopologyShape())))
    try:
        info = devcluster.up(root, shape=shape)
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
    async with DynamicClient(api, cache_file=str(cache) if cache else None) as client:
        yield client


def _slug(text: str, limit: int) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")


@pytest.fixture
async def namespace(request: pytest.FixtureRequest, api: k8s.ApiClient) -> AsyncIterator[str]:
    """A fresh namespace for one test, deleted afterwards.

    It gets a ``default`` ServiceAccount (Pods need one, and a local control plane has no
    kube-controller-manager to create it) and the label ``kueue-governor.io/e2e=true``.
    """
    name = f"e2e-{_slug(request.node.name, 40)}-{secrets.token_hex(3)}"
    core = k8s.CoreV1Api(api)
    await core.create_namespace(
        k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name, labels={E2E_NAMESPACE_LABEL: "true"}))
    )
    try:
        await core.create_namespaced_service_account(
            name, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name="default"))
        )
    except k8s.ApiException as error:
        if error.status != 409:  # a real cluster's controller may have been first
            raise
    yield name
    try:
        await core.delete_namespace(name, propagation_policy="Background")
    except k8s.ApiException as error:
        if error.status != 404:
            raise


@pytest.fixture
def governor(e2e_cluster: E2ECluster) -> Iterator[Callable[[Path], str]]:
    """Start ``kgov serve`` with a platform file and register ``kgov-governor``: ``governor(path)``.

    Returns the server URL. At the end of the test the webhook configuration is removed first
    (so admission does not fail closed) and the server stopped. On an external cluster the
    governor is whatever is installed there (e.g. the Helm chart), so tests that call this skip.
    """
    started = False

    def start(platform: Path) -> str:
        nonlocal started
        if e2e_cluster.local is None:
            pytest.skip("starts kgov serve next to the local control plane")
        started = True
        info = devcluster.start_governor(Path(e2e_cluster.local.state_dir), platform)
        assert info.governor_url is not None
        return info.governor_url

    yield start
    if started and e2e_cluster.local is not None:
        devcluster.stop_governor(Path(e2e_cluster.local.state_dir))


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
