"""The optional JobSet controller manager (``jobset.x-k8s.io``, the release Kueue is built
against), out of cluster: its Configuration (no leader election, no internal certificate
management, webhook, metrics and health servers on 127.0.0.1 with a certificate from our CA; its
webhook configurations are not registered) and starting it on a running cluster as its release's
service account."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from e2e import build
from e2e.devcluster.controllers import CONTROLLER_BURST, CONTROLLER_QPS
from e2e.devcluster.pki import JOBSET_USER, token_of, write_kubeconfig
from e2e.devcluster.processes import free_ports, http_ok, process_alive, start_process, wait_until
from e2e.devcluster.state import ClusterInfo, DevClusterError, Paths, load_info, save_info, state_dir


def jobset_configuration(paths: Paths, ports: dict[str, int]) -> dict[str, Any]:
    """The JobSet manager's Configuration (``config.jobset.x-k8s.io/v1alpha1``, its
    ``api/config/v1alpha1``) for running out of cluster: no leader election, internal certificate
    management off (it would otherwise wait for a Secret and inject CA bundles into webhook
    configurations), webhook and metrics servers on 127.0.0.1 serving our certificate, the same
    client limits as the other controllers."""
    certs = str(paths.jobset_certs)
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": ports["webhook"], "certDir": certs},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}", "certDir": certs},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        "clientConnection": {"qps": CONTROLLER_QPS, "burst": CONTROLLER_BURST},
    }


def start_jobset_controller(root: Path | None = None, timeout: float = 120.0) -> ClusterInfo:
    """Start the JobSet controller manager on a running cluster (see the module doc) and wait for
    its ``/readyz``; a JobSet controller already running is left as it is.

    Raises:
        DevClusterError: no running cluster in the state directory, or the manager did not
            become ready (its log tail is included).
    """
    paths = Paths(root or state_dir())
    info = load_info(paths.root)
    if info is None or process_alive(paths, "kube-apiserver") is None:
        raise DevClusterError(f"no running cluster in {paths.root}; run `up` first")
    if process_alive(paths, "jobset") is not None and info.jobset_health_port:
        return info
    binary = build.ensure_binaries()["jobset"]
    webhook, metrics, health = free_ports(3)
    token = token_of(paths, JOBSET_USER)
    kubeconfig = paths.root / "jobset.kubeconfig"
    write_kubeconfig(kubeconfig, info.apiserver_url, paths.ca_crt.read_bytes(), "jobset-controller-manager", token)
    configuration = jobset_configuration(paths, {"webhook": webhook, "metrics": metrics, "health": health})
    paths.jobset_config.write_text(yaml.safe_dump(configuration, sort_keys=False))
    command = [
        str(binary),
        f"--config={paths.jobset_config}",
        f"--kubeconfig={kubeconfig}",
        # its zap logger defaults to development mode (debug level): a line per reconcile
        "--zap-log-level=info",
    ]
    start_process(paths, "jobset", command)
    wait_until(
        "the JobSet controller's /readyz",
        lambda: http_ok(f"http://127.0.0.1:{health}/readyz"),
        timeout,
        paths,
        "jobset",
    )
    info.jobset_health_port = health
    info.versions["jobset"] = build.JOBSET_VERSION
    save_info(paths, info)
    return info
