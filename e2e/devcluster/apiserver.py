"""kube-apiserver: its command line (serving certificate from our CA, RBAC + Node authorization,
static tokens, service-account keys, the default admission plugins with webhooks on), starting it
and waiting for ``/readyz``, and restarting it on the same port (:func:`restart_apiserver`)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from e2e.devcluster.pki import token_of
from e2e.devcluster.processes import (
    http_ok,
    log_tail,
    process_alive,
    start_process,
    stop_process,
    tls_context,
    wait_port_free,
    wait_until,
)
from e2e.devcluster.state import DevClusterError, Paths, load_info, state_dir

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


def apiserver_command(binary: Path, paths: Paths, etcd_url: str, port: int) -> list[str]:
    """kube-apiserver's command line: etcd at ``etcd_url``, secure port ``port`` on 127.0.0.1."""
    return [
        str(binary),
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={paths.pki / 'apiserver'}",
        f"--tls-cert-file={paths.pki / 'apiserver' / 'tls.crt'}",
        f"--tls-private-key-file={paths.pki / 'apiserver' / 'tls.key'}",
        f"--client-ca-file={paths.ca_crt}",
        f"--token-auth-file={paths.tokens}",
        "--authorization-mode=Node,RBAC",
        # The default admission plugins stay on, MutatingAdmissionWebhook and
        # ValidatingAdmissionWebhook included; NodeRestriction goes with Node authorization.
        "--enable-admission-plugins=NodeRestriction",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={paths.pki / 'sa.pub'}",
        f"--service-account-signing-key-file={paths.pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--allow-privileged=true",
        # 127.0.0.1 may not be an endpoint of the `kubernetes` Service: its EndpointSlice is made
        # by the real node (a relay on the node's address), when one runs.
        "--endpoint-reconciler-type=none",
        # The real node's kubelet is reached by its address (its name resolves nowhere): logs, exec.
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--profiling=false",
    ]


def start_apiserver(paths: Paths, binary: Path, etcd_url: str, port: int, admin_token: str, timeout: float) -> None:
    """Start kube-apiserver and wait up to ``timeout`` seconds for its ``/readyz`` (as the admin).

    Raises:
        DevClusterError: it exited or did not become ready (its log tail is included).
    """
    start_process(paths, "kube-apiserver", apiserver_command(binary, paths, etcd_url, port))
    context = tls_context(paths.ca_crt)
    wait_until(
        "kube-apiserver /readyz",
        lambda: http_ok(f"https://127.0.0.1:{port}/readyz", context, admin_token),
        timeout,
        paths,
        "kube-apiserver",
    )


def restart_apiserver(
    root: Path | None = None, while_down: Callable[[], None] | None = None, crash: bool = False
) -> float:
    """Stop kube-apiserver (SIGTERM, as a rolling restart does; SIGKILL with ``crash``: every
    connection cut mid-stream), run ``while_down()``, start it again with the same command line on
    the same port, and wait for its ``/readyz``.

    Every client (the controllers, Kueue, KWOK, ``kgov serve``) sees its connections close and
    must reconnect on its own. Returns the seconds the API server was unreachable.

    Raises:
        DevClusterError: no running cluster, or the API server did not come back.
    """
    paths = Paths(root or state_dir())
    info = load_info(paths.root)
    pid = process_alive(paths, "kube-apiserver")
    if info is None or pid is None:
        raise DevClusterError(f"no running cluster in {paths.root}; run `up` first")
    command = [part.decode() for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if part]
    admin = token_of(paths, "kgov-admin")
    started = time.monotonic()
    # On SIGTERM the API server drains its connections (watches included) for up to 60 s itself.
    stop_process(paths, "kube-apiserver", timeout=90.0, signum=signal.SIGKILL if crash else signal.SIGTERM)
    if while_down is not None:
        while_down()
    port = int(info.apiserver_url.rsplit(":", 1)[1])
    for _ in range(10):
        wait_port_free(port, 30.0)
        start_process(paths, "kube-apiserver", command)
        # A client reconnecting in a tight loop can be handed the freed port as its own source
        # port (a loopback self-connect) between our check and the server's bind: start again.
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and process_alive(paths, "kube-apiserver") is not None:
            time.sleep(0.1)
        if process_alive(paths, "kube-apiserver") is not None or "address already in use" not in log_tail(
            paths, "kube-apiserver", 3
        ):
            break
    wait_until(
        "kube-apiserver /readyz after a restart",
        lambda: http_ok(f"{info.apiserver_url}/readyz", tls_context(paths.ca_crt), admin),
        180.0,
        paths,
        "kube-apiserver",
    )
    return time.monotonic() - started
