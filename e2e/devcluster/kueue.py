"""The Kueue manager out of cluster: its metrics certificate at the fixed path Kueue reads, its
Configuration (the release default with out-of-cluster settings on top), its namespace and CRDs
(with the CRDs of the workload kinds it integrates with), starting it and waiting for ``/readyz``
and its webhook server, and its webhook configurations pointed at 127.0.0.1."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.dynamic import DynamicClient

from e2e.devcluster.client import apply, apply_crds, dynamic_client
from e2e.devcluster.processes import http_ok, start_process, tls_context, tls_handshake, wait_until
from e2e.devcluster.state import DevClusterError, Paths
from e2e.manifests import (
    KUEUE_FRAMEWORKS,
    KUEUE_NAMESPACE,
    SYSTEM_NAMESPACES,
    deep_merge,
    kueue_crds,
    kueue_webhook_configurations,
    workload_crds,
)
from webhook.certs import issue_serving_certificate, write_private

# Kueue (v0.17 to v0.19.2) reads its metrics serving certificate from this fixed path whenever
# its internal certificate management is off (cmd/kueue/main.go); it cannot be configured.
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


def ensure_kueue_metrics_cert(ca_crt: bytes, ca_key: bytes) -> None:
    """Kueue insists on a metrics certificate at a fixed path; provide one if missing."""
    crt_path = KUEUE_METRICS_CERT_DIR / "tls.crt"
    if crt_path.exists() and (KUEUE_METRICS_CERT_DIR / "tls.key").exists():
        return
    try:
        KUEUE_METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
        crt, key = issue_serving_certificate(ca_crt, ca_key, ["localhost"], ["127.0.0.1"], days=3650)
        crt_path.write_bytes(crt)
        write_private(KUEUE_METRICS_CERT_DIR / "tls.key", key)
    except PermissionError as error:
        raise DevClusterError(
            f"Kueue reads its metrics certificate from {KUEUE_METRICS_CERT_DIR} (fixed in Kueue when "
            f"its internal certificate management is off) and that directory is not writable: {error}. "
            f"Create it once as root: sudo mkdir -p {KUEUE_METRICS_CERT_DIR} && "
            f"sudo chown $USER {KUEUE_METRICS_CERT_DIR}"
        ) from error


def kueue_configuration(kueue_dir: Path, paths: Paths, ports: dict[str, int]) -> dict[str, Any]:
    """Kueue's Configuration: the release default with out-of-cluster settings on top."""
    base = yaml.safe_load((kueue_dir / "config/components/manager/controller_manager_config.yaml").read_text())
    overrides = {
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['kueue_health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['kueue_metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["kueue_webhook"], "certDir": str(paths.kueue_certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": SYSTEM_NAMESPACES}
            ]
        },
        # TopologyAwareScheduling is beta (on by default) since v0.14, TASMultiLayerTopology
        # since v0.19 (pkg/features/kube_features.go); stated so a change shows. The other TAS
        # gates keep v0.19.2's defaults (failed-node replacement on; replacing a node that is
        # NotReady for a fixed time is deprecated and off). VisibilityOnDemand would start an
        # aggregated API server that reads its certificate from a fixed path (/visibility) when
        # internal cert management is off.
        "featureGates": {"TopologyAwareScheduling": True, "TASMultiLayerTopology": True, "VisibilityOnDemand": False},
        "integrations": {"frameworks": KUEUE_FRAMEWORKS},
    }
    return deep_merge(base, overrides)


def install_kueue_crds(paths: Paths, kueue_dir: Path, webhook_port: int, ca_pem: bytes) -> None:
    """Apply Kueue's namespace, its CRDs (conversion webhooks on 127.0.0.1:``webhook_port``) and
    the workload CRDs, and wait until every CRD is Established.

    Raises:
        DevClusterError: some CRDs are not Established after 120 s.
    """
    crds = kueue_crds(kueue_dir, webhook_port, ca_pem) + workload_crds()

    async def install_base() -> None:
        async with dynamic_client(paths.kubeconfig, paths.discovery_cache) as dynamic:
            await apply(dynamic, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}})
            await apply_crds(dynamic, crds)

    asyncio.run(install_base())


def start_kueue(
    paths: Paths, binary: Path, kueue_dir: Path, ports: dict[str, int], kubeconfig: Path, timeout: float
) -> None:
    """Write ``kueue-config.yaml`` (:func:`kueue_configuration`), start the Kueue manager with
    ``kubeconfig`` and wait up to ``timeout`` seconds for its ``/readyz``, then for a TLS
    handshake with its webhook server.

    Raises:
        DevClusterError: Kueue exited or did not become ready (its log tail is included).
    """
    paths.kueue_config.write_text(yaml.safe_dump(kueue_configuration(kueue_dir, paths, ports), sort_keys=False))
    start_process(paths, "kueue", [str(binary), f"--config={paths.kueue_config}", f"--kubeconfig={kubeconfig}"])
    wait_until(
        "Kueue /readyz",
        lambda: http_ok(f"http://127.0.0.1:{ports['kueue_health']}/readyz"),
        timeout,
        paths,
        "kueue",
    )
    context = tls_context(paths.ca_crt)
    wait_until(
        "Kueue's webhook server (TLS on 127.0.0.1)",
        lambda: tls_handshake(ports["kueue_webhook"], context),
        timeout,
        paths,
        "kueue",
    )


async def register_kueue_webhooks(dynamic: DynamicClient, kueue_dir: Path, webhook_port: int, ca_pem: bytes) -> None:
    """Apply Kueue's webhook configurations, pointed at 127.0.0.1:``webhook_port`` with ``ca_pem``."""
    for configuration in kueue_webhook_configurations(kueue_dir, webhook_port, ca_pem):
        await apply(dynamic, configuration)
