"""The state directory of one simulated cluster: where it is, its file layout (:class:`Paths`),
what ``up`` saved about the running cluster (:class:`ClusterInfo`, ``cluster.json``), and the
error every part of the cluster raises (:class:`DevClusterError`)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_STATE_DIR = Path(__file__).resolve().parents[1] / ".state"


class DevClusterError(RuntimeError):
    """The local control plane could not be brought up (the message says which part and why)."""


@dataclass
class ClusterInfo:
    """What ``up`` started; saved as ``cluster.json`` in the state directory."""

    state_dir: str
    kubeconfig: str
    ca_file: str
    apiserver_url: str
    etcd_url: str
    kueue_webhook_port: int
    kueue_health_port: int
    kueue_metrics_port: int
    shape: str
    controller_manager_port: int = 0
    scheduler_port: int = 0
    kwok_port: int = 0
    node_names: list[str] = field(default_factory=list)
    governor_url: str | None = None
    #: The governor's plain-HTTP metrics port (``/metrics``), None when it runs elsewhere.
    governor_metrics_url: str | None = None
    #: The JobSet controller's health port (``/readyz``), 0 when it does not run.
    jobset_health_port: int = 0
    #: The real node's name (:mod:`e2e.devcluster.node`), None when only KWOK nodes run.
    real_node: str | None = None
    versions: dict[str, str] = field(default_factory=dict)


def state_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The state directory: ``override``, else ``$KGOV_E2E_STATE``, else ``e2e/.state``."""
    if override is not None:
        return Path(override).resolve()
    env = os.environ.get("KGOV_E2E_STATE")
    return Path(env).resolve() if env else DEFAULT_STATE_DIR


class Paths:
    """File layout inside one state directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pki = root / "pki"
        self.logs = root / "logs"
        self.pids = root / "pids"
        self.etcd_data = root / "etcd"
        self.kueue_certs = self.pki / "kueue-webhook"
        self.governor_certs = self.pki / "governor"
        self.jobset_certs = self.pki / "jobset"
        self.jobset_config = root / "jobset-config.yaml"
        self.ca_crt = self.pki / "ca.crt"
        self.ca_key = self.pki / "ca.key"
        self.kubeconfig = root / "kubeconfig"
        self.tokens = self.pki / "tokens.csv"
        self.cluster_json = root / "cluster.json"
        self.kueue_config = root / "kueue-config.yaml"
        self.discovery_cache = root / "discovery"

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def pid(self, name: str) -> Path:
        return self.pids / f"{name}.pid"


def load_info(root: Path | None = None) -> ClusterInfo | None:
    """The saved ``cluster.json`` of a state directory, if there is one."""
    paths = Paths(root or state_dir())
    if not paths.cluster_json.exists():
        return None
    return ClusterInfo(**json.loads(paths.cluster_json.read_text()))


def save_info(paths: Paths, info: ClusterInfo) -> None:
    """Write ``info`` as the state directory's ``cluster.json``."""
    paths.cluster_json.write_text(json.dumps(asdict(info), indent=2) + "\n")
