"""The governor, ``kgov serve``, on a running cluster: starting it on a free loopback port (its
own static token, or a given kubeconfig), registering it as the ``kgov-governor``
MutatingWebhookConfiguration, waiting until the API server routes reviews to it, and
unregistering and stopping it."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from e2e.devcluster.client import api_client, apply, dynamic_client
from e2e.devcluster.pki import token_of, write_kubeconfig
from e2e.devcluster.processes import (
    child_env,
    free_ports,
    http_ok,
    process_alive,
    start_process,
    stop_process,
    tls_context,
    wait_until,
)
from e2e.devcluster.state import ClusterInfo, DevClusterError, Paths, load_info, save_info, state_dir
from e2e.manifests import GOVERNOR_WEBHOOK_CONFIGURATION, governor_webhook_configuration


def governor_command() -> list[str]:
    """``kgov`` of this interpreter's environment first (a ``kgov`` on PATH may be another install)."""
    for candidate in (Path(sys.executable).parent / "kgov", shutil.which("kgov")):
        if candidate and Path(candidate).is_file():
            return [str(candidate)]
    return [sys.executable, "-c", "import sys; from webhook.cli import main; sys.exit(main())"]


def _serve(
    paths: Paths,
    info: ClusterInfo,
    platform: Path | None,
    policy: Sequence[str],
    kubeconfig: Path | None,
    port: int,
    metrics_port: int,
    extra: Sequence[str],
) -> tuple[list[str], dict[str, str]]:
    """The ``kgov serve`` command line and environment of a governor (see :func:`start_governor`)."""
    token = token_of(paths, "kgov-governor")
    governor_kubeconfig = kubeconfig or paths.root / "governor.kubeconfig"
    if kubeconfig is None:
        write_kubeconfig(governor_kubeconfig, info.apiserver_url, paths.ca_crt.read_bytes(), "kgov-governor", token)
    env = child_env()
    env["KUBECONFIG"] = str(governor_kubeconfig)
    command = [
        *governor_command(),
        "serve",
        *(["--platform", str(Path(platform).resolve())] if platform is not None else policy),
        "--tls-cert-file",
        str(paths.governor_certs / "tls.crt"),
        "--tls-private-key-file",
        str(paths.governor_certs / "tls.key"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--metrics-port",
        str(metrics_port),
        "--watch-cluster",
        "--kubeconfig",
        str(governor_kubeconfig),
        *extra,
    ]
    return command, env


def start_replica(root: Path | None, platform: Path, extra: Sequence[str] = (), timeout: float = 60.0) -> None:
    """Start a second ``kgov serve`` (process ``governor-replica``) as the governor's user, ready but
    not registered: a replica beside the one the API server calls, as the chart runs them (e.g.
    both contending for the Lease of ``--topology-widening``). :func:`stop_replica` stops it."""
    paths = Paths(root or state_dir())
    info = load_info(paths.root)
    if info is None:
        raise DevClusterError(f"no running cluster in {paths.root}; run `up` first")
    stop_process(paths, "governor-replica")
    port, metrics_port = free_ports(2)
    command, env = _serve(paths, info, platform, (), None, port, metrics_port, extra)
    start_process(paths, "governor-replica", command, env=env)
    context = tls_context(paths.ca_crt)
    ready = f"https://127.0.0.1:{port}/readyz"
    wait_until("replica /readyz", lambda: http_ok(ready, context), timeout, paths, "governor-replica")


def stop_replica(root: Path | None = None) -> None:
    stop_process(Paths(root or state_dir()), "governor-replica")


def start_governor(
    root: Path | None,
    platform: Path | None,
    timeout: float = 60.0,
    *,
    policy: Sequence[str] = (),
    kubeconfig: Path | None = None,
    extra: Sequence[str] = (),
) -> ClusterInfo:
    """Start ``kgov serve`` on a free loopback port and register ``kgov-governor`` for it.

    The server gets ``KUBECONFIG`` (its own static token, or ``kubeconfig``) in its environment; it
    must answer ``GET /readyz`` with 200 once ready, and ``POST /mutate`` with AdmissionReview v1.
    Its policy is ``--platform platform``, or the options ``policy`` when ``platform`` is None (e.g.
    ``["--policy-configmap", "ns/name"]``); ``extra``: further options of ``kgov serve`` (e.g.
    ``["--topology-widening", "default/kgov-topology-widening"]``).

    Raises:
        DevClusterError: no running cluster in the state directory, or the server did not
            become ready (its log tail is included).
    """
    paths = Paths(root or state_dir())
    info = load_info(paths.root)
    if info is None or process_alive(paths, "kube-apiserver") is None:
        raise DevClusterError(f"no running cluster in {paths.root}; run `up` first")
    stop_process(paths, "governor")
    port, metrics_port = free_ports(2)
    command, env = _serve(paths, info, platform, policy, kubeconfig, port, metrics_port, extra)
    start_process(paths, "governor", command, env=env)
    context = tls_context(paths.ca_crt)
    wait_until(
        "kgov serve /readyz",
        lambda: http_ok(f"https://127.0.0.1:{port}/readyz", context),
        timeout,
        paths,
        "governor",
    )

    async def register() -> None:
        async with dynamic_client(paths.kubeconfig, paths.discovery_cache) as dynamic:
            await apply(dynamic, governor_webhook_configuration(port, paths.ca_crt.read_bytes()))

    asyncio.run(register())
    asyncio.run(_wait_routed(paths, metrics_port, timeout))
    info.governor_url = f"https://127.0.0.1:{port}"
    info.governor_metrics_url = f"http://127.0.0.1:{metrics_port}"
    save_info(paths, info)
    return info


def _reviews_answered(metrics_port: int) -> float:
    """``kgov_admission_requests_total`` of the governor on ``metrics_port``, summed (0 unreachable)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return 0.0
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("kgov_admission_requests_total{")
    )


async def _wait_routed(paths: Paths, metrics_port: int, timeout: float) -> None:
    """Wait until the API server sends reviews to the governor just registered: its webhook
    configuration reaches the API server's admission chain through a watch, a moment after the
    write, and until then a create goes to the URL before (a governor stopped: "connection
    refused"). Dry-run Job creates in ``default`` (matched, no team) until the new server counts one.

    Raises:
        DevClusterError: no review reached it within ``timeout`` seconds.
    """
    job: Any = {  # the client serializes a dict as it is
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": "governor-routed-"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "pause"}]}}},
    }
    deadline = time.monotonic() + timeout
    async with api_client(paths.kubeconfig) as api:
        batch = k8s.BatchV1Api(api)
        while True:
            with contextlib.suppress(ApiException):  # the previous URL's refusal, or any answer
                await batch.create_namespaced_job("default", job, dry_run="All")
            if await asyncio.to_thread(_reviews_answered, metrics_port) > 0:
                return
            if time.monotonic() > deadline:
                raise DevClusterError(f"the API server sent no review to the governor within {timeout:g} s")
            await asyncio.sleep(0.2)


def stop_governor(root: Path | None = None) -> None:
    """Unregister ``kgov-governor`` (so admission does not fail closed) and stop the server."""
    paths = Paths(root or state_dir())
    info = load_info(paths.root)
    if info is not None and process_alive(paths, "kube-apiserver") is not None:

        async def unregister() -> None:
            async with api_client(paths.kubeconfig) as api:
                with contextlib.suppress(ApiException):
                    await k8s.AdmissionregistrationV1Api(api).delete_mutating_webhook_configuration(
                        name=GOVERNOR_WEBHOOK_CONFIGURATION
                    )

        asyncio.run(unregister())
        info.governor_url = None
        info.governor_metrics_url = None
        save_info(paths, info)
    stop_process(paths, "governor")
