"""A whole simulated cluster for the e2e suite: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, the Kueue manager and KWOK.

Everything runs as local processes on 127.0.0.1 (no containers, no real kubelet):

* etcd on free loopback ports, its data in the state directory;
* kube-apiserver with a serving certificate from our own CA, RBAC + Node authorization, a static
  admin token, service-account signing keys and the default admission plugins (webhooks on);
* Kueue's CRDs (conversion webhooks rewritten to ``https://127.0.0.1:<port>/convert``), the CRDs of
  the workload kinds Kueue integrates with, and Kueue's webhook configurations rewritten from
  in-cluster Services to URLs on 127.0.0.1 with our CA bundle;
* the Kueue manager out of cluster (``--kubeconfig``, ``--config``), serving its webhooks on
  127.0.0.1 with a certificate from our CA;
* kube-controller-manager (Job, ReplicaSet, Deployment and StatefulSet controllers, garbage
  collector, namespace and service-account controllers, node lifecycle) and kube-scheduler;
* fake GPU nodes: Node objects with AWS network topology labels and allocatable GPUs, kept Ready
  by KWOK with KWOK's own stages (node heartbeat with leases; pods go Running on the node the
  scheduler bound them to, and a Job's pods Succeeded after the delay in the pod's
  ``pod-complete.stage.kwok.x-k8s.io/delay`` annotation, 1 s plus up to 5 s jitter by default; the
  ``…/jitter-delay`` annotation, 5 s by default, caps that delay);
* optionally the JobSet controller manager (``jobset.x-k8s.io``, the release Kueue is built
  against) out of cluster (``--kubeconfig`` as its release's service account, ``--config``): no
  leader election, no internal certificate management, its webhook and metrics servers on
  127.0.0.1 with a certificate from our CA and its webhook configurations not registered (no
  JobSet webhook is ever called, so a JobSet is written with the fields its defaulting webhook
  would set); it creates a JobSet's Jobs, which kube-controller-manager's Job controller turns
  into pods. Off by default;
* optionally our own webhook, ``kgov serve``, registered as the ``kgov-governor``
  MutatingWebhookConfiguration.

State (pid files, logs, certificates, kubeconfig, etcd data) lives in ``$KGOV_E2E_STATE`` or
``e2e/.state``. Command line::

    python -m e2e.devcluster up [--shape 1x2x2x2] [--with-governor platform.yaml] [--with-jobset-controller]
    python -m e2e.devcluster status
    python -m e2e.devcluster down [--purge]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import ConflictError, api_exception
from kubernetes_asyncio.dynamic.resource import ResourceInstance

from e2e import build
from e2e.manifests import (
    FAKE_NODE_LABEL,
    GOVERNOR_WEBHOOK_CONFIGURATION,
    KUEUE_FRAMEWORKS,
    KUEUE_NAMESPACE,
    SYSTEM_NAMESPACES,
    TopologyShape,
    deep_merge,
    fake_nodes,
    governor_webhook_configuration,
    kueue_crds,
    kueue_webhook_configurations,
    workload_crds,
)
from webhook.certs import generate_ca, issue_serving_certificate, write_private

DEFAULT_STATE_DIR = Path(__file__).resolve().parent / ".state"
FIELD_MANAGER = "kgov-devcluster"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Kueue (v0.17 to v0.19.2) reads its metrics serving certificate from this fixed path whenever
# its internal certificate management is off (cmd/kueue/main.go); it cannot be configured.
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# Pod IPs KWOK hands out (no networking: only the pod status carries them).
KWOK_POD_CIDR = "10.0.0.1/16"
# KWOK's stages, from its module (kustomize/stage/...): nodes become Ready and renew a Lease as a
# kubelet does; pods are created, go Running and (owned by a Job, or any pod with the delay
# annotation: the annotated copy below) complete, and are deleted, each after the delay its
# ``<stage>.stage.kwok.x-k8s.io/delay`` annotation names.
KWOK_STAGES = [
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/general/pod-create.yaml",
    "kustomize/stage/pod/general/pod-init-container-running.yaml",
    "kustomize/stage/pod/general/pod-init-container-completed.yaml",
    "kustomize/stage/pod/general/pod-ready.yaml",
    "kustomize/stage/pod/general/pod-complete.yaml",
    "kustomize/stage/pod/general/pod-delete.yaml",
]
# KWOK's pod-complete stage completes only pods a Job owns; this copy of it (named
# ``pod-complete-annotated``) also completes any other pod, such as a Kueue pod group's bare Pods,
# that opts in with the ``pod-complete.stage.kwok.x-k8s.io/delay`` annotation. A Job's pod with the
# annotation matches both stages; they give it the same delay and status.
KWOK_POD_COMPLETE = "kustomize/stage/pod/general/pod-complete.yaml"
KWOK_POD_COMPLETE_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"
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
]
# Client rate limits of the controllers: the Job controller and the scheduler create and bind
# thousands of pods in the benchmarks; the defaults (20 and 50 QPS) would pace them.
CONTROLLER_QPS, CONTROLLER_BURST = 200, 400
# The JobSet controller's user: the service account its release manifests run it as. The governor
# lets only controllers (``system:`` users outside the team's namespace) create a child of an
# object Kueue manages, such as a JobSet's Jobs.
JOBSET_USER = "system:serviceaccount:jobset-system:jobset-controller-manager"

PROCESS_ORDER = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kueue",
    "kwok",
    "jobset",
    "governor",
]
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue", "kwok")


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
    versions: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------- state directory


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


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _free_ports(count: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return sorted(ports)


@dataclass(frozen=True)
class _PidRecord:
    """A pid file: the pid, the process's start time (clock ticks since boot) and executable."""

    pid: int
    start_time: int
    executable: str

    @classmethod
    def read(cls, path: Path) -> _PidRecord | None:
        try:
            pid, start_time, executable = path.read_text().split(maxsplit=2)
            return cls(int(pid), int(start_time), executable.strip())
        except (OSError, ValueError):
            return None

    def write(self, path: Path) -> None:
        path.write_text(f"{self.pid} {self.start_time} {self.executable}\n")


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a pid, from /proc/<pid>/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[19])  # fields 3 and 22 of proc(5), counted after the name


def process_alive(paths: Paths, name: str) -> int | None:
    """The pid of process ``name`` if it is running and is still the process we started.

    A pid file whose pid now belongs to another process (pids are recycled) does not count: the
    start time recorded at launch must match.
    """
    record = _PidRecord.read(paths.pid(name))
    if record is None:
        return None
    stat = _proc_stat(record.pid)
    if stat is None or stat[0] == "Z" or stat[1] != record.start_time:
        return None
    return record.pid


def start_process(paths: Paths, name: str, command: Sequence[str], env: dict[str, str] | None = None) -> int:
    """Start ``command`` in its own session (process group), log to ``logs/<name>.log``.

    The pid file holds ``<pid> <executable>`` so that ``down`` never signals a recycled pid.
    """
    paths.logs.mkdir(parents=True, exist_ok=True)
    paths.pids.mkdir(parents=True, exist_ok=True)
    with paths.log(name).open("ab") as log:
        log.write(f"\n=== {datetime.datetime.now(datetime.UTC).isoformat()} {' '.join(command)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env if env is not None else _child_env(),
        )
    stat = _proc_stat(proc.pid)
    _PidRecord(proc.pid, stat[1] if stat else 0, command[0]).write(paths.pid(name))
    _children[name] = proc
    return proc.pid


# Processes started by this Python process, to report how one ended (exit code or signal).
_children: dict[str, subprocess.Popen[bytes]] = {}


def _exit_reason(name: str) -> str:
    proc = _children.get(name)
    code = proc.poll() if proc is not None else None
    if code is None:
        return "is gone"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _child_env() -> dict[str, str]:
    """The environment for the control-plane processes: no proxy (everything is loopback)."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in {"http_proxy", "https_proxy", "all_proxy"}}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def stop_process(paths: Paths, name: str, timeout: float = 20.0, signum: signal.Signals = signal.SIGTERM) -> bool:
    """Send ``signum`` (SIGTERM) to the process group of ``name``, SIGKILL after ``timeout`` seconds.

    Only a process that is still the one recorded in the pid file is signalled. Returns whether
    a running process was found.
    """
    record = _PidRecord.read(paths.pid(name))
    if record is None or process_alive(paths, name) is None:
        paths.pid(name).unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(record.pid, signum)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _running(record):
        time.sleep(0.1)
    if _running(record):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, signal.SIGKILL)
        while _running(record):
            time.sleep(0.05)
    paths.pid(name).unlink(missing_ok=True)
    return True


def _running(record: _PidRecord) -> bool:
    proc = next((p for p in _children.values() if p.pid == record.pid), None)
    if proc is not None and proc.poll() is not None:  # our own child: now reaped
        return False
    stat = _proc_stat(record.pid)
    return stat is not None and stat[0] != "Z" and stat[1] == record.start_time


def log_tail(paths: Paths, name: str, lines: int = 60) -> str:
    """The last ``lines`` lines of a process log ("" when there is none)."""
    try:
        text = paths.log(name).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _wait_until(
    what: str,
    probe: Any,
    timeout: float,
    paths: Paths,
    process: str,
) -> None:
    """Poll ``probe()`` until it returns True; fail early if ``process`` died."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        if process_alive(paths, process) is None:
            raise DevClusterError(
                f"{process} {_exit_reason(process)} while waiting for {what}:\n{log_tail(paths, process)}"
            )
        try:
            if probe():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError) as error:
            last_error = str(error)
        time.sleep(0.25)
    raise DevClusterError(
        f"timed out after {timeout:.0f}s waiting for {what} ({last_error}):\n{log_tail(paths, process)}"
    )


def _http_ok(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=5) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError:
        return False


# --------------------------------------------------------------------------- certificates


def _write_pki(paths: Paths) -> dict[str, str]:
    """Create the CA, serving certificates, service-account keys and static tokens."""
    paths.pki.mkdir(parents=True, exist_ok=True)
    os.chmod(paths.pki, 0o700)
    ca_crt, ca_key = generate_ca("kueue-governor-e2e-ca", days=30)
    paths.ca_crt.write_bytes(ca_crt)
    write_private(paths.ca_key, ca_key)

    def serving(directory: Path, dns: list[str], ips: list[str]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        crt, key = issue_serving_certificate(ca_crt, ca_key, dns, ips, days=30)
        (directory / "tls.crt").write_bytes(crt)
        write_private(directory / "tls.key", key)

    serving(
        paths.pki / "apiserver",
        ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
        ["127.0.0.1", "10.96.0.1"],
    )
    serving(paths.kueue_certs, ["localhost"], ["127.0.0.1"])
    serving(paths.governor_certs, ["localhost"], ["127.0.0.1"])
    serving(paths.jobset_certs, ["localhost"], ["127.0.0.1"])

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_private(
        paths.pki / "sa.key",
        sa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    (paths.pki / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )

    users = {
        "admin": "kgov-admin",
        "kueue": "kueue-manager",
        "governor": "kgov-governor",
        "kube-controller-manager": "system:kube-controller-manager",
        "kube-scheduler": "system:kube-scheduler",
        "kwok": "kwok-controller",
        "jobset": JOBSET_USER,
    }
    tokens = {name: secrets.token_urlsafe(32) for name in users}
    write_private(
        paths.tokens,
        "".join(f'{tokens[name]},{user},uid-{name},"system:masters"\n' for name, user in users.items()).encode(),
    )
    return tokens


def _ensure_kueue_metrics_cert(ca_crt: bytes, ca_key: bytes) -> None:
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


def _write_kubeconfig(path: Path, server: str, ca_pem: bytes, user: str, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kgov-e2e",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "kgov-e2e", "context": {"cluster": "kgov-e2e", "user": user}}],
        "current-context": "kgov-e2e",
    }
    write_private(path, yaml.safe_dump(config, sort_keys=False).encode())


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


@contextlib.asynccontextmanager
async def api_client(kubeconfig: str | os.PathLike[str]) -> AsyncIterator[k8s.ApiClient]:
    """An async ``ApiClient`` for a kubeconfig file (closed on exit)."""
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with k8s.ApiClient(configuration) as api:
        yield api


class CheckedDynamicClient(DynamicClient):
    """A ``DynamicClient`` whose calls raise on an error status, as documented.

    kubernetes-asyncio's dynamic client always asks for the raw response (``_preload_content=False``)
    and its REST layer checks the status only for preloaded ones, so a refused request returns the
    ``Status`` body as if it were the object (fixed upstream in kubernetes_asyncio PR #402). Here
    every non-2xx answer raises the matching ``DynamicApiError`` (``NotFoundError``,
    ``ConflictError``, ``ForbiddenError`` …); ``serialize=False`` still returns the raw response
    of a successful call.
    """

    async def request(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        serialize = params.pop("serialize", True)
        serializer = params.pop("serializer", ResourceInstance)
        response = await super().request(method, path, body=body, serialize=False, **params)
        status = getattr(response, "status", 200)
        if not 200 <= status <= 299:
            error = ApiException(status=status, reason=response.reason)
            error.body = await response.read()
            error.headers = response.headers
            response.release()
            raise api_exception(error)
        if not serialize:
            return response
        try:
            data = await response.json()
        finally:
            response.release()
        return serializer(self, data) if isinstance(data, dict) else data


@contextlib.asynccontextmanager
async def dynamic_client(
    kubeconfig: str | os.PathLike[str], discovery_cache: Path | None = None
) -> AsyncIterator[DynamicClient]:
    """A ``DynamicClient`` (any kind, CRDs included, found by discovery) for a kubeconfig file.

    ``discovery_cache`` is the file the discovery results are cached in (default: one per API
    server URL in the temporary directory).
    """
    async with api_client(kubeconfig) as api:
        cache = str(discovery_cache) if discovery_cache is not None else None
        async with CheckedDynamicClient(api, cache_file=cache) as dynamic:
            yield dynamic


async def apply(dynamic: DynamicClient, body: dict[str, Any], subresource: str | None = None) -> Any:
    """Server-side apply one object (or its ``subresource``, e.g. ``"status"``), forcing conflicts.

    Returns the object as the API server stored it (a ``ResourceInstance``).
    """
    resource = await dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    if subresource is not None:
        resource = resource.subresources[subresource]
    return await dynamic.server_side_apply(resource, body, field_manager=FIELD_MANAGER, force_conflicts=True)


async def _apply_crds(dynamic: DynamicClient, crds: list[dict[str, Any]], timeout: float = 120.0) -> None:
    await asyncio.gather(*(apply(dynamic, crd) for crd in crds))
    pending = {crd["metadata"]["name"] for crd in crds}
    resource = await dynamic.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for name in sorted(pending):
            crd = (await dynamic.get(resource, name=name)).to_dict()
            if any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (crd.get("status") or {}).get("conditions") or []
            ):
                pending.discard(name)
        if pending:
            await asyncio.sleep(0.2)
    if pending:
        raise DevClusterError(f"CRDs not Established after {timeout:.0f}s: {sorted(pending)}")


async def apply_nodes(dynamic: DynamicClient, nodes: list[dict[str, Any]], concurrency: int = 32) -> None:
    """Create (or update) the fake nodes, ``concurrency`` at a time.

    A Node is created with its status (capacity, allocatable, nodeInfo) in one request, as a
    kubelet registers itself; KWOK then sets its conditions (Ready) and renews its Lease, and the
    node lifecycle controller lifts the ``node.kubernetes.io/not-ready`` taint the API server's
    TaintNodesByCondition plugin put on it. A node that already exists gets its labels and
    status applied instead.
    """
    resource = await dynamic.resources.get(api_version="v1", kind="Node")
    limit = asyncio.Semaphore(concurrency)

    async def one(node: dict[str, Any]) -> None:
        async with limit:
            try:
                await dynamic.create(resource, body=node)
            except ConflictError:
                await apply(dynamic, {key: node[key] for key in ("apiVersion", "kind", "metadata", "spec")})
                await apply(
                    dynamic,
                    {"apiVersion": "v1", "kind": "Node", "metadata": node["metadata"], "status": node["status"]},
                    "status",
                )

    await asyncio.gather(*(one(node) for node in nodes))


async def wait_nodes_ready(dynamic: DynamicClient, names: list[str], timeout: float = 120.0) -> None:
    """Wait until every named node is Ready and carries no NoSchedule/NoExecute taint.

    Raises:
        DevClusterError: some are not after ``timeout`` seconds (up to 5 are named, with their
            conditions and taints).
    """
    resource = await dynamic.resources.get(api_version="v1", kind="Node")
    wanted = set(names)
    deadline = time.monotonic() + timeout
    pending: dict[str, Any] = {}
    while time.monotonic() < deadline:
        listed = (await dynamic.get(resource, label_selector=f"{FAKE_NODE_LABEL}=true")).to_dict()["items"]
        pending = {
            node["metadata"]["name"]: node
            for node in listed
            if node["metadata"]["name"] in wanted and not _ready_untainted(node)
        }
        missing = wanted - {node["metadata"]["name"] for node in listed}
        if not pending and not missing:
            return
        await asyncio.sleep(0.5)
    sample = {
        name: {
            "conditions": {c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []},
            "taints": (node.get("spec") or {}).get("taints"),
        }
        for name, node in sorted(pending.items())[:5]
    }
    raise DevClusterError(f"{len(pending)} nodes not Ready and untainted after {timeout:.0f}s, e.g. {sample}")


def _ready_untainted(node: dict[str, Any]) -> bool:
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    taints = (node.get("spec") or {}).get("taints") or []
    return conditions.get("Ready") == "True" and not any(t.get("effect") in ("NoSchedule", "NoExecute") for t in taints)


# --------------------------------------------------------------------------- up / down / status


def _etcd_command(binary: Path, paths: Paths, client_port: int, peer_port: int) -> list[str]:
    peer = f"http://127.0.0.1:{peer_port}"
    client = f"http://127.0.0.1:{client_port}"
    return [
        str(binary),
        "--name=default",
        f"--data-dir={paths.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--initial-cluster-state=new",
        # a throwaway test store: durability is not worth an fsync per write
        "--unsafe-no-fsync",
        # room for the largest workload CRDs (their OpenAPI schemas run to hundreds of KiB)
        "--max-request-bytes=4194304",
        "--log-level=warn",
    ]


def _apiserver_command(binary: Path, paths: Paths, etcd_url: str, port: int) -> list[str]:
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
        # 127.0.0.1 may not be an endpoint of the `kubernetes` Service; nothing in this cluster
        # runs in a pod, so the endpoint reconciler has nothing to do.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
    ]


def _component_serving_flags(paths: Paths, port: int, kubeconfig: Path) -> list[str]:
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


def _controller_manager_command(binary: Path, paths: Paths, port: int, kubeconfig: Path) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        *_component_serving_flags(paths, port, kubeconfig),
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


def _scheduler_configuration(kubeconfig: Path) -> dict[str, Any]:
    """KubeSchedulerConfiguration: the default profile, no leader election, our client limits."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": CONTROLLER_QPS, "burst": CONTROLLER_BURST},
        "leaderElection": {"leaderElect": False},
    }


def _scheduler_command(binary: Path, paths: Paths, port: int, kubeconfig: Path, config: Path) -> list[str]:
    return [str(binary), f"--config={config}", *_component_serving_flags(paths, port, kubeconfig), "--v=1"]


def annotated_pod_complete_stage(kwok_dir: Path) -> dict[str, Any]:
    """KWOK's own ``pod-complete`` Stage with its ``ownerReferences`` kind ``Job`` selector
    replaced by: the pod has the annotation :data:`KWOK_POD_COMPLETE_ANNOTATION`.

    Raises:
        DevClusterError: KWOK's stage no longer has the one selector expression replaced.
    """
    (stage,) = yaml.safe_load_all((kwok_dir / KWOK_POD_COMPLETE).read_text())
    expressions = stage["spec"]["selector"]["matchExpressions"]
    owner = [e for e in expressions if e["key"] == ".metadata.ownerReferences.[].kind"]
    if len(owner) != 1:
        raise DevClusterError(f"KWOK's {KWOK_POD_COMPLETE} has no single ownerReferences selector: {expressions}")
    stage["metadata"]["name"] = "pod-complete-annotated"
    annotated = {"key": f'.metadata.annotations["{KWOK_POD_COMPLETE_ANNOTATION}"]', "operator": "Exists"}
    stage["spec"]["selector"]["matchExpressions"] = [annotated if e is owner[0] else e for e in expressions]
    return dict(stage)


def _kwok_command(binary: Path, kwok_dir: Path, port: int, kubeconfig: Path) -> list[str]:
    extra = kubeconfig.parent / "kwok-pod-complete-annotated.yaml"
    extra.write_text(yaml.safe_dump(annotated_pod_complete_stage(kwok_dir), sort_keys=False))
    stages = [str(kwok_dir / stage) for stage in KWOK_STAGES] + [str(extra)]
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--config={','.join(stages)}",
        f"--manage-nodes-with-label-selector={FAKE_NODE_LABEL}=true",
        # a Lease per node renewed every 10 s, as a kubelet does (node-heartbeat-with-lease)
        "--node-lease-duration-seconds=40",
        f"--cidr={KWOK_POD_CIDR}",
        "--node-ip=127.0.0.1",
        f"--server-address=127.0.0.1:{port}",
        # INFO logs a line per Lease renewal: 25 lines a second with 256 nodes
        "--v=WARN",
    ]


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
    webhook, metrics, health = _free_ports(3)
    token = next(
        (line.split(",")[0] for line in paths.tokens.read_text().splitlines() if f",{JOBSET_USER}," in line), None
    )
    if token is None:
        raise DevClusterError(f"the cluster in {paths.root} has no token for {JOBSET_USER}; start it again (down, up)")
    kubeconfig = paths.root / "jobset.kubeconfig"
    _write_kubeconfig(kubeconfig, info.apiserver_url, paths.ca_crt.read_bytes(), "jobset-controller-manager", token)
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
    _wait_until(
        "the JobSet controller's /readyz",
        lambda: _http_ok(f"http://127.0.0.1:{health}/readyz"),
        timeout,
        paths,
        "jobset",
    )
    info.jobset_health_port = health
    info.versions["jobset"] = build.JOBSET_VERSION
    _save(paths, info)
    return info


def _context(ca_file: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_file))


def up(
    root: Path | None = None,
    shape: TopologyShape | None = None,
    governor_platform: Path | None = None,
    timeout: float = 180.0,
    *,
    jobset_controller: bool = False,
) -> ClusterInfo:
    """Bring the cluster up (building binaries first if needed) and return its info.

    A cluster already running in the same state directory is returned as it is (with the JobSet
    controller and the governor started if asked for and not running). It returns once every fake
    node is Ready and untainted. ``jobset_controller`` also runs the JobSet controller manager
    (:func:`start_jobset_controller`).

    Raises:
        DevClusterError: a component did not start or become ready (its log tail is included).
    """
    paths = Paths(root or state_dir())
    shape = shape or TopologyShape()
    existing = load_info(paths.root)
    if existing is not None and all(process_alive(paths, n) for n in CONTROL_PLANE):
        if jobset_controller:
            existing = start_jobset_controller(paths.root)
        if governor_platform is not None and existing.governor_url is None:
            start_governor(paths.root, governor_platform)
            existing = load_info(paths.root) or existing
        return existing
    down(paths.root)  # whatever is left of an earlier run: stop it, start clean
    for stale in (paths.etcd_data, paths.pki, paths.pids, paths.logs, paths.cluster_json, paths.discovery_cache):
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink(missing_ok=True)
    paths.root.mkdir(parents=True, exist_ok=True)

    binaries = build.ensure_binaries()
    kueue_dir = build.module_dir("sigs.k8s.io/kueue", build.KUEUE_VERSION)
    tokens = _write_pki(paths)
    ca_pem = paths.ca_crt.read_bytes()
    _ensure_kueue_metrics_cert(ca_pem, paths.ca_key.read_bytes())
    kwok_dir = build.dependency_dir("kwok", "sigs.k8s.io/kwok")
    ports_list = _free_ports(9)
    etcd_client, etcd_peer, apiserver, kueue_webhook, kueue_health, kueue_metrics = ports_list[:6]
    controller_manager_port, scheduler_port, kwok_port = ports_list[6:]
    ports = {"kueue_webhook": kueue_webhook, "kueue_health": kueue_health, "kueue_metrics": kueue_metrics}
    etcd_url = f"http://127.0.0.1:{etcd_client}"
    apiserver_url = f"https://127.0.0.1:{apiserver}"
    info = ClusterInfo(
        state_dir=str(paths.root),
        kubeconfig=str(paths.kubeconfig),
        ca_file=str(paths.ca_crt),
        apiserver_url=apiserver_url,
        etcd_url=etcd_url,
        kueue_webhook_port=kueue_webhook,
        kueue_health_port=kueue_health,
        kueue_metrics_port=kueue_metrics,
        shape=str(shape),
        controller_manager_port=controller_manager_port,
        scheduler_port=scheduler_port,
        kwok_port=kwok_port,
        versions={
            "etcd": build.ETCD_VERSION,
            **{component: build.KUBERNETES_VERSION for component in build.KUBERNETES_COMPONENTS},
            "kueue": build.KUEUE_VERSION,
            "kwok": build.KWOK_VERSION,
        },
    )

    paths.etcd_data.mkdir(parents=True, exist_ok=True)
    os.chmod(paths.etcd_data, 0o700)
    start_process(paths, "etcd", _etcd_command(binaries["etcd"], paths, etcd_client, etcd_peer))
    _wait_until("etcd /health", lambda: _http_ok(f"{etcd_url}/health"), 60, paths, "etcd")

    start_process(paths, "kube-apiserver", _apiserver_command(binaries["kube-apiserver"], paths, etcd_url, apiserver))
    context = _context(paths.ca_crt)
    _wait_until(
        "kube-apiserver /readyz",
        lambda: _http_ok(f"{apiserver_url}/readyz", context, tokens["admin"]),
        timeout,
        paths,
        "kube-apiserver",
    )
    _write_kubeconfig(paths.kubeconfig, apiserver_url, ca_pem, "kgov-admin", tokens["admin"])
    kueue_kubeconfig = paths.root / "kueue.kubeconfig"
    _write_kubeconfig(kueue_kubeconfig, apiserver_url, ca_pem, "kueue-manager", tokens["kueue"])
    kubeconfigs = {}
    for component in ("kube-controller-manager", "kube-scheduler", "kwok"):
        kubeconfigs[component] = paths.root / f"{component}.kubeconfig"
        _write_kubeconfig(kubeconfigs[component], apiserver_url, ca_pem, component, tokens[component])

    start_process(
        paths,
        "kube-controller-manager",
        _controller_manager_command(
            binaries["kube-controller-manager"], paths, controller_manager_port, kubeconfigs["kube-controller-manager"]
        ),
    )
    scheduler_config = paths.root / "kube-scheduler-config.yaml"
    scheduler_config.write_text(yaml.safe_dump(_scheduler_configuration(kubeconfigs["kube-scheduler"])))
    start_process(
        paths,
        "kube-scheduler",
        _scheduler_command(
            binaries["kube-scheduler"], paths, scheduler_port, kubeconfigs["kube-scheduler"], scheduler_config
        ),
    )

    crds = kueue_crds(kueue_dir, kueue_webhook, ca_pem) + workload_crds()

    async def install_base() -> None:
        async with dynamic_client(paths.kubeconfig, paths.discovery_cache) as dynamic:
            await apply(dynamic, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}})
            await _apply_crds(dynamic, crds)

    asyncio.run(install_base())

    paths.kueue_config.write_text(yaml.safe_dump(kueue_configuration(kueue_dir, paths, ports), sort_keys=False))
    start_process(
        paths,
        "kueue",
        [str(binaries["kueue"]), f"--config={paths.kueue_config}", f"--kubeconfig={kueue_kubeconfig}"],
    )
    _wait_until(
        "Kueue /readyz",
        lambda: _http_ok(f"http://127.0.0.1:{kueue_health}/readyz"),
        timeout,
        paths,
        "kueue",
    )
    _wait_until(
        "Kueue's webhook server (TLS on 127.0.0.1)",
        lambda: _tls_handshake(kueue_webhook, context),
        timeout,
        paths,
        "kueue",
    )

    for component, port in (("kube-controller-manager", controller_manager_port), ("kube-scheduler", scheduler_port)):
        _wait_until(
            f"{component} /healthz",
            lambda port=port: _http_ok(f"https://127.0.0.1:{port}/healthz", context),
            timeout,
            paths,
            component,
        )
    start_process(paths, "kwok", _kwok_command(binaries["kwok"], kwok_dir, kwok_port, kubeconfigs["kwok"]))
    _wait_until("KWOK /healthz", lambda: _http_ok(f"http://127.0.0.1:{kwok_port}/healthz"), timeout, paths, "kwok")

    nodes = fake_nodes(shape)

    async def install_rest() -> None:
        async with dynamic_client(paths.kubeconfig, paths.discovery_cache) as dynamic:
            for configuration in kueue_webhook_configurations(kueue_dir, kueue_webhook, ca_pem):
                await apply(dynamic, configuration)
            await apply_nodes(dynamic, nodes)
            await wait_nodes_ready(dynamic, [node["metadata"]["name"] for node in nodes], timeout)

    asyncio.run(install_rest())
    info.node_names = [node["metadata"]["name"] for node in nodes]
    _save(paths, info)
    if jobset_controller:
        info = start_jobset_controller(paths.root, timeout)
    if governor_platform is not None:
        info = start_governor(paths.root, governor_platform)
    return info


def _tls_handshake(port: int, context: ssl.SSLContext) -> bool:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=2) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1"),
    ):
        return True


def _save(paths: Paths, info: ClusterInfo) -> None:
    paths.cluster_json.write_text(json.dumps(asdict(info), indent=2) + "\n")


def _governor_command() -> list[str]:
    """``kgov`` of this interpreter's environment first (a ``kgov`` on PATH may be another install)."""
    for candidate in (Path(sys.executable).parent / "kgov", shutil.which("kgov")):
        if candidate and Path(candidate).is_file():
            return [str(candidate)]
    return [sys.executable, "-c", "import sys; from webhook.cli import main; sys.exit(main())"]


def start_governor(
    root: Path | None,
    platform: Path | None,
    timeout: float = 60.0,
    *,
    policy: Sequence[str] = (),
    kubeconfig: Path | None = None,
) -> ClusterInfo:
    """Start ``kgov serve`` on a free loopback port and register ``kgov-governor`` for it.

    The server gets ``KUBECONFIG`` (its own static token, or ``kubeconfig``) in its environment; it
    must answer ``GET /readyz`` with 200 once ready, and ``POST /mutate`` with AdmissionReview v1.
    Its policy is ``--platform platform``, or the options ``policy`` when ``platform`` is None (e.g.
    ``["--policy-configmap", "ns/name"]``).

    Raises:
        DevClusterError: no running cluster in the state directory, or the server did not
            become ready (its log tail is included).
    """
    paths = Paths(root or state_dir())
    info = load_info(paths.root)
    if info is None or process_alive(paths, "kube-apiserver") is None:
        raise DevClusterError(f"no running cluster in {paths.root}; run `up` first")
    stop_process(paths, "governor")
    port, metrics_port = _free_ports(2)
    token = next(line.split(",")[0] for line in paths.tokens.read_text().splitlines() if ",kgov-governor," in line)
    governor_kubeconfig = kubeconfig or paths.root / "governor.kubeconfig"
    if kubeconfig is None:
        _write_kubeconfig(governor_kubeconfig, info.apiserver_url, paths.ca_crt.read_bytes(), "kgov-governor", token)
    env = _child_env()
    env["KUBECONFIG"] = str(governor_kubeconfig)
    command = [
        *_governor_command(),
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
    ]
    start_process(paths, "governor", command, env=env)
    context = _context(paths.ca_crt)
    _wait_until(
        "kgov serve /readyz",
        lambda: _http_ok(f"https://127.0.0.1:{port}/readyz", context),
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
    _save(paths, info)
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
        _save(paths, info)
    stop_process(paths, "governor")


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
    admin = next(line.split(",")[0] for line in paths.tokens.read_text().splitlines() if ",kgov-admin," in line)
    started = time.monotonic()
    # On SIGTERM the API server drains its connections (watches included) for up to 60 s itself.
    stop_process(paths, "kube-apiserver", timeout=90.0, signum=signal.SIGKILL if crash else signal.SIGTERM)
    if while_down is not None:
        while_down()
    port = int(info.apiserver_url.rsplit(":", 1)[1])
    for _ in range(10):
        _wait_port_free(port, 30.0)
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
    _wait_until(
        "kube-apiserver /readyz after a restart",
        lambda: _http_ok(f"{info.apiserver_url}/readyz", _context(paths.ca_crt), admin),
        180.0,
        paths,
        "kube-apiserver",
    )
    return time.monotonic() - started


def _wait_port_free(port: int, timeout: float) -> None:
    """Wait until 127.0.0.1:``port`` can be bound (with SO_REUSEADDR, as a Go server binds)."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
                return
            except OSError:
                if time.monotonic() >= deadline:
                    raise DevClusterError(f"127.0.0.1:{port} still in use after {timeout:.0f}s") from None
        time.sleep(0.2)


def compact_etcd(root: Path | None = None) -> int:
    """Compact etcd's history up to its current revision (etcd's v3 JSON gateway), as the API
    server's own periodic compaction would; returns that revision. A watch from any older
    resourceVersion then gets ``410 Gone``."""
    info = load_info(root or state_dir())
    if info is None:
        raise DevClusterError("no running cluster; run `up` first")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{info.etcd_url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with opener.open(request, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return answer

    revision = int(post("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


def down(root: Path | None = None, purge: bool = False) -> list[str]:
    """Stop every process ``up`` started (newest first); returns the names that were running.

    With ``purge`` the whole state directory goes too; otherwise logs and certificates stay
    for inspection and are replaced by the next ``up``.
    """
    paths = Paths(root or state_dir())
    stopped = [name for name in reversed(PROCESS_ORDER) if stop_process(paths, name)]
    paths.cluster_json.unlink(missing_ok=True)
    if purge and paths.root.exists():
        shutil.rmtree(paths.root)
    return stopped


def status(root: Path | None = None) -> dict[str, Any]:
    """Processes (pid or None), readiness of the API server and Kueue, and the saved info."""
    paths = Paths(root or state_dir())
    info = load_info(paths.root)
    result: dict[str, Any] = {
        "state_dir": str(paths.root),
        "processes": {name: process_alive(paths, name) for name in PROCESS_ORDER},
    }
    if info is not None:
        result["kubeconfig"] = info.kubeconfig
        token = yaml.safe_load(paths.kubeconfig.read_text())["users"][0]["user"]["token"]
        context = _context(paths.ca_crt)
        with contextlib.suppress(OSError, urllib.error.URLError, ssl.SSLError):
            result["apiserver_ready"] = _http_ok(f"{info.apiserver_url}/readyz", context, token)
        with contextlib.suppress(OSError, urllib.error.URLError):
            result["kueue_ready"] = _http_ok(f"http://127.0.0.1:{info.kueue_health_port}/readyz")
        result["info"] = asdict(info)
    return result


@contextlib.contextmanager
def running_cluster(
    root: Path,
    shape: TopologyShape | None = None,
    governor_platform: Path | None = None,
    *,
    jobset_controller: bool = False,
) -> Iterator[ClusterInfo]:
    """``up`` on entry, ``down`` on exit (also when ``up`` fails half-way)."""
    try:
        yield up(root, shape=shape, governor_platform=governor_platform, jobset_controller=jobset_controller)
    finally:
        down(root)


def apply_platform(root: Path, platform: Path) -> None:
    """``kgov generate PLATFORM --namespaces`` into the state directory, applied to the cluster
    (team namespaces with a ``default`` ServiceAccount), ClusterQueues waited for until Active: a
    person can then ``kubectl create`` a plain Job in a team namespace and watch Kueue admit it."""
    from e2e import support  # support builds on this module

    info = load_info(root)
    if info is None:
        raise DevClusterError("no cluster is running")
    generated = support.generate(platform, Paths(root).root / "generated")

    async def apply() -> None:
        async with dynamic_client(info.kubeconfig) as dynamic:
            await support.apply_generated(dynamic, generated)
            queues = [queue["metadata"]["name"] for queue in generated.of_kind("ClusterQueue")]
            await support.wait_cluster_queues_active(dynamic, queues)

    asyncio.run(apply())
    print(f"applied {len(generated.objects)} generated objects from {platform}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.devcluster", description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", help="default: $KGOV_E2E_STATE or e2e/.state")
    commands = parser.add_subparsers(dest="command", required=True)
    up_parser = commands.add_parser("up", help="start (or report) the local control plane")
    up_parser.add_argument("--shape", default=str(TopologyShape()), help="fake nodes: SxBxRxH or BxRxH")
    up_parser.add_argument(
        "--with-governor",
        metavar="PLATFORM",
        type=Path,
        help="also apply the platform's generated Kueue objects and namespaces, and run kgov serve",
    )
    up_parser.add_argument(
        "--with-jobset-controller",
        action="store_true",
        help="also run the JobSet controller manager (JobSets then create their Jobs and pods)",
    )
    down_parser = commands.add_parser("down", help="stop every process up started")
    down_parser.add_argument("--purge", action="store_true", help="also delete the state directory")
    commands.add_parser("status", help="processes and readiness, as JSON")
    governor_parser = commands.add_parser("governor", help="(re)start kgov serve on a running cluster")
    governor_parser.add_argument("platform", type=Path)
    commands.add_parser("build", help="build the binaries only")
    args = parser.parse_args(argv)
    root = state_dir(args.state_dir)
    try:
        if args.command == "up":
            started = time.monotonic()
            info = up(
                root,
                TopologyShape.parse(args.shape),
                args.with_governor,
                jobset_controller=args.with_jobset_controller,
            )
            if args.with_governor is not None:
                apply_platform(root, args.with_governor)
            print(f"control plane up in {time.monotonic() - started:.0f}s ({info.shape} nodes)", file=sys.stderr)
            print(info.kubeconfig)
        elif args.command == "down":
            stopped = down(root, purge=args.purge)
            print(f"stopped: {', '.join(stopped) or 'nothing was running'}", file=sys.stderr)
        elif args.command == "status":
            print(json.dumps(status(root), indent=2))
        elif args.command == "governor":
            print(start_governor(root, args.platform).governor_url)
        elif args.command == "build":
            print(json.dumps({k: str(v) for k, v in build.ensure_binaries().items()}, indent=2))
    except DevClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
