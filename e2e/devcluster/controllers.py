"""kube-controller-manager and kube-scheduler: the controllers this cluster runs, the client rate
limits of both, their command lines and the scheduler's configuration, starting them and waiting
for their ``/healthz`` (secure serving on 127.0.0.1 with the API server's certificate)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from e2e.devcluster.apiserver import SERVICE_CLUSTER_IP_RANGE
from e2e.devcluster.processes import http_ok, start_process, tls_context, wait_until
from e2e.devcluster.state import Paths

# The controllers of kube-controller-manager this cluster needs (the rest, volumes, endpoints,
# certificates, quota, would only add load on 2 cores).
CONTROLLERS = [
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    "replicaset-controller",
    "deployment-controller",
    "statefulset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
    "disruption-controller",
    # Services' EndpointSlices: what kube-proxy on the real node routes to (a Service of pods on
    # the real node, the chart's webhook Service).
    "endpointslice-controller",
]
# Client rate limits of the controllers: the Job controller and the scheduler create and bind
# thousands of pods in the benchmarks; the defaults (20 and 50 QPS) would pace them.
CONTROLLER_QPS, CONTROLLER_BURST = 200, 400


def component_serving_flags(paths: Paths, port: int, kubeconfig: Path) -> list[str]:
    """Secure serving and delegated authn/authz of kube-controller-manager and kube-scheduler:
    /healthz on 127.0.0.1 with the API server's certificate (issued by our CA for 127.0.0.1)."""
    return [
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={paths.pki / 'apiserver' / 'tls.crt'}",
        f"--tls-private-key-file={paths.pki / 'apiserver' / 'tls.key'}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--profiling=false",
    ]


def controller_manager_command(binary: Path, paths: Paths, port: int, kubeconfig: Path) -> list[str]:
    """kube-controller-manager's command line: :data:`CONTROLLERS`, no leader election."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        *component_serving_flags(paths, port, kubeconfig),
        "--leader-elect=false",
        f"--controllers={','.join(CONTROLLERS)}",
        # service-account tokens and the kube-root-ca.crt ConfigMap that pods' projected volumes name
        f"--service-account-private-key-file={paths.pki / 'sa.key'}",
        f"--root-ca-file={paths.ca_crt}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--kube-api-qps={CONTROLLER_QPS}",
        f"--kube-api-burst={CONTROLLER_BURST}",
        # the garbage collector and the Job controller work through thousands of objects in the
        # benchmarks; the defaults are 20 and 5 workers
        "--concurrent-gc-syncs=20",
        "--concurrent-job-syncs=10",
        "--v=1",
    ]


def scheduler_configuration(kubeconfig: Path) -> dict[str, Any]:
    """KubeSchedulerConfiguration: the default profile, no leader election, our client limits."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": CONTROLLER_QPS, "burst": CONTROLLER_BURST},
        "leaderElection": {"leaderElect": False},
    }


def scheduler_command(binary: Path, paths: Paths, port: int, kubeconfig: Path, config: Path) -> list[str]:
    """kube-scheduler's command line with the configuration file ``config``."""
    return [str(binary), f"--config={config}", *component_serving_flags(paths, port, kubeconfig), "--v=1"]


def start_controller_manager(paths: Paths, binary: Path, port: int, kubeconfig: Path) -> None:
    """Start kube-controller-manager (not waited for: :func:`wait_controllers_healthy`)."""
    start_process(paths, "kube-controller-manager", controller_manager_command(binary, paths, port, kubeconfig))


def start_scheduler(paths: Paths, binary: Path, port: int, kubeconfig: Path) -> None:
    """Write ``kube-scheduler-config.yaml`` and start kube-scheduler (not waited for)."""
    config = paths.root / "kube-scheduler-config.yaml"
    config.write_text(yaml.safe_dump(scheduler_configuration(kubeconfig)))
    start_process(paths, "kube-scheduler", scheduler_command(binary, paths, port, kubeconfig, config))


def wait_controllers_healthy(paths: Paths, controller_manager_port: int, scheduler_port: int, timeout: float) -> None:
    """Wait for the ``/healthz`` of kube-controller-manager, then of kube-scheduler.

    Raises:
        DevClusterError: one exited or did not become healthy (its log tail is included).
    """
    context = tls_context(paths.ca_crt)
    for component, port in (("kube-controller-manager", controller_manager_port), ("kube-scheduler", scheduler_port)):
        wait_until(
            f"{component} /healthz",
            lambda port=port: http_ok(f"https://127.0.0.1:{port}/healthz", context),
            timeout,
            paths,
            component,
        )
