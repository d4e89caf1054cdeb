"""The optional Kubeflow Trainer controller manager (``trainer.kubeflow.org``, the release Kueue
v0.19.2 is built against), out of cluster: its Configuration (no leader election, no certificate
management, webhook, metrics and health servers on 127.0.0.1), its webhook configurations
registered by URL with our CA (so a TrainJob the governor patched passes Trainer's own checks of
``runtimePatches``), and starting it on a running cluster as its release's service account. It
makes the JobSet of each TrainJob Kueue admits; the JobSet controller
(:mod:`e2e.devcluster.jobset`) must run too for that JobSet's Jobs.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
from pathlib import Path
from typing import Any

import yaml

from e2e import build
from e2e.devcluster.client import apply, dynamic_client
from e2e.devcluster.controllers import CONTROLLER_BURST, CONTROLLER_QPS
from e2e.devcluster.pki import TRAINER_USER, token_of, write_kubeconfig
from e2e.devcluster.processes import (
    child_env,
    free_ports,
    http_ok,
    process_alive,
    start_process,
    stop_process,
    wait_until,
)
from e2e.devcluster.state import ClusterInfo, DevClusterError, Paths, load_info, state_dir

__all__ = ["start_trainer_controller", "stop_trainer_controller", "trainer_configuration", "trainer_webhooks"]

TRAINER_MODULE = "github.com/kubeflow/trainer/v2"
#: The release's names of its webhook configurations (kustomize namePrefix kubeflow-trainer-).
_PREFIX = "kubeflow-trainer-"


def trainer_configuration(ports: dict[str, int]) -> dict[str, Any]:
    """The Trainer manager's Configuration (``config.trainer.kubeflow.org/v1alpha1``,
    ``pkg/apis/config/v1alpha1``) for running out of cluster: no leader election, certificate
    management off (it would wait for a Secret and patch webhook configurations), servers on
    127.0.0.1, the same client limits as the other controllers."""
    return {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "certManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": ports["webhook"]},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        "clientConnection": {"qps": CONTROLLER_QPS, "burst": CONTROLLER_BURST},
    }


def trainer_webhooks(module_dir: Path, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """Trainer's Mutating/ValidatingWebhookConfigurations (``manifests/base/webhook/manifests.yaml``),
    each ``service`` turned into ``url: https://127.0.0.1:<port><path>`` with our ``caBundle``."""
    documents = [d for d in yaml.safe_load_all((module_dir / "manifests/base/webhook/manifests.yaml").read_text()) if d]
    ca_bundle = base64.b64encode(ca_pem).decode()
    for document in documents:
        document["metadata"] = {"name": _PREFIX + document["metadata"]["name"]}
        for hook in document["webhooks"]:
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{service['path']}", "caBundle": ca_bundle}
    return documents


def start_trainer_controller(root: Path | None = None, timeout: float = 120.0) -> ClusterInfo:
    """Start the Trainer controller manager on a running cluster (see the module doc), register
    its webhooks and wait for its ``/readyz``; one already running is left as it is.

    Raises:
        DevClusterError: no running cluster in the state directory, or the manager did not
            become ready (its log tail is included).
    """
    paths = Paths(root or state_dir())
    info = load_info(paths.root)
    if info is None or process_alive(paths, "kube-apiserver") is None:
        raise DevClusterError(f"no running cluster in {paths.root}; run `up` first")
    if process_alive(paths, "trainer") is not None:
        return info
    binary = build.ensure_binaries()["trainer"]
    webhook, metrics, health = free_ports(3)
    token = token_of(paths, TRAINER_USER)
    kubeconfig = paths.root / "trainer.kubeconfig"
    write_kubeconfig(kubeconfig, info.apiserver_url, paths.ca_crt.read_bytes(), "kubeflow-trainer", token)
    config = paths.root / "trainer-config.yaml"
    ports = {"webhook": webhook, "metrics": metrics, "health": health}
    config.write_text(yaml.safe_dump(trainer_configuration(ports), sort_keys=False))
    # Without certificate management, controller-runtime serves $TMPDIR/k8s-webhook-server/serving-certs.
    tmp = paths.root / "trainer-tmp"
    certs = tmp / "k8s-webhook-server" / "serving-certs"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(paths.jobset_certs, certs)  # a serving certificate for 127.0.0.1 from our CA
    command = [str(binary), f"--config={config}", f"--kubeconfig={kubeconfig}", "--zap-log-level=info"]
    start_process(paths, "trainer", command, env={**child_env(), "TMPDIR": str(tmp)})
    wait_until(
        "the Trainer controller's /readyz",
        lambda: http_ok(f"http://127.0.0.1:{health}/readyz"),
        timeout,
        paths,
        "trainer",
    )
    module = build.dependency_dir("trainer", TRAINER_MODULE)

    async def register() -> None:
        async with dynamic_client(paths.kubeconfig, paths.discovery_cache) as dynamic:
            for configuration in trainer_webhooks(module, webhook, paths.ca_crt.read_bytes()):
                await apply(dynamic, configuration)

    asyncio.run(register())
    return info


def stop_trainer_controller(root: Path | None = None) -> None:
    """Remove Trainer's webhook configurations, then stop its manager."""
    paths = Paths(root or state_dir())

    async def unregister() -> None:
        async with dynamic_client(paths.kubeconfig, paths.discovery_cache) as dynamic:
            for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                api = await dynamic.resources.get(api_version="admissionregistration.k8s.io/v1", kind=kind)
                listed = await api.get()
                for item in listed.to_dict()["items"]:
                    if item["metadata"]["name"].startswith(_PREFIX):
                        await api.delete(name=item["metadata"]["name"])

    asyncio.run(unregister())
    stop_process(paths, "trainer")
