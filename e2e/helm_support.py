"""Helm in the tests: the helm binary (built from its Go module, see :mod:`e2e.build`), the chart,
and a local ``kgov serve`` fed from what the chart renders.

The local control plane runs no kubelet, so the chart's Deployment never runs a pod. Where a test
needs the webhook to answer, :class:`ChartServer` plays the kubelet's part: it copies the chart's
serving-certificate Secret and policy ConfigMap into files the way the kubelet updates a mounted
volume (a new directory swapped in by renaming the ``..data`` symlink, so both files of a Secret
change at once) and runs ``kgov serve`` on them with a token of the chart's ServiceAccount, so the
chart's RBAC is what the server gets. The chart's webhook points at it by ``webhook.url``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client as k8s

from e2e import build, devcluster, manifests, support

CHART = support.REPO / "helm" / "kueue-governor"
PLATFORM_VALUES = CHART / "ci" / "platform-values.yaml"
CI_VALUES = sorted(path for path in (CHART / "ci").glob("*-values.yaml") if path != PLATFORM_VALUES)


def helm_binary() -> Path:
    """The cached helm binary (built on first use, like the control plane's binaries)."""
    (binary,) = (b for b in build.binaries() if b.name == "helm")
    return build.build(binary)


class HelmError(RuntimeError):
    """helm exited non-zero; ``stderr`` has its message."""

    def __init__(self, command: Sequence[str], stderr: str) -> None:
        super().__init__(f"{' '.join(command)}: {stderr.strip()}")
        self.stderr = stderr


@dataclass
class Helm:
    """helm with its own home (no user configuration), optionally against a cluster."""

    kubeconfig: Path | None = None
    home: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kgov-helm-")))
    binary: Path = field(default_factory=helm_binary)

    def run(self, *args: str, timeout: float = 180) -> str:
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        env.pop("KUBECONFIG", None)
        command = [str(self.binary), *args]
        if self.kubeconfig is not None:
            command += ["--kubeconfig", str(self.kubeconfig)]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise HelmError(command, proc.stderr)
        return proc.stdout

    @staticmethod
    def _value_args(values: Sequence[Path], settings: dict[str, str] | None) -> list[str]:
        args = [arg for path in values for arg in ("-f", str(path))]
        for key, value in (settings or {}).items():
            args += ["--set-json", f"{key}={value}"]
        return args

    def template(
        self,
        values: Sequence[Path] = (PLATFORM_VALUES,),
        settings: dict[str, str] | None = None,
        namespace: str = "kueue-governor-system",
        release: str = "kgov",
        server: bool = False,
    ) -> list[dict[str, Any]]:
        """``helm template`` → the rendered objects. ``server``: ``--dry-run=server`` (lookup reads
        the cluster, as an upgrade's render does). ``settings``: ``--set-json key=JSON``."""
        args = ["template", release, str(CHART), "-n", namespace, *self._value_args(values, settings)]
        # `helm template` assumes a Kubernetes version even with --dry-run=server: the e2e API server's.
        args += ["--kube-version", build.KUBERNETES_VERSION, *(["--dry-run=server"] if server else [])]
        return [doc for doc in yaml.safe_load_all(self.run(*args)) if doc]

    def upgrade(
        self,
        values: Sequence[Path] = (PLATFORM_VALUES,),
        settings: dict[str, str] | None = None,
        namespace: str = "kueue-governor-system",
        release: str = "kgov",
    ) -> str:
        """``helm upgrade --install`` (no --wait: the local control plane runs no pods)."""
        args = ["upgrade", "--install", release, str(CHART), "-n", namespace, "--create-namespace"]
        return self.run(*args, *self._value_args(values, settings))

    def uninstall(self, namespace: str = "kueue-governor-system", release: str = "kgov") -> str:
        return self.run("uninstall", release, "-n", namespace)

    def close(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj.get("kind") == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = by_kind(objects, kind)
    return found


#: The kinds of the chart's admission registration: the webhook and the fail-safe (SPEC §8b).
REGISTRATION_KINDS = ("MutatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def chart_registration(webhook_url: str, failure_policy: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The chart's MutatingWebhookConfiguration and its ValidatingAdmissionPolicies with their
    bindings, as ``helm template`` renders them for the bundled platform
    (``ci/platform-values.yaml``), calling ``webhook_url`` with ``failure_policy`` and trusting
    ``ca_pem`` (PEM; the caBundle the chart would make is replaced). Labels are left out (they name
    a Helm release that is not installed)."""
    helm = Helm()
    try:
        settings = {"webhook.url": json.dumps(webhook_url), "webhook.failurePolicy": json.dumps(failure_policy)}
        objects = helm.template([PLATFORM_VALUES], settings)
    finally:
        helm.close()
    registration = [obj for obj in objects if obj["kind"] in REGISTRATION_KINDS]
    for obj in registration:
        obj["metadata"].pop("labels", None)
        for hook in obj.get("webhooks") or []:
            hook["clientConfig"]["caBundle"] = base64.b64encode(ca_pem).decode()
    return registration


# --------------------------------------------------------------------------- the kubelet's part


def write_volume(root: Path, files: dict[str, bytes]) -> None:
    """Update a "mounted volume" at ``root`` as the kubelet's atomic writer does: files in a new
    timestamped directory, the ``..data`` symlink swapped to it in one rename, and each file name a
    symlink through ``..data``."""
    root.mkdir(parents=True, exist_ok=True)
    fresh = root / f"..{time.time_ns()}"
    fresh.mkdir(mode=0o700)
    for name, data in files.items():
        descriptor = os.open(fresh / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
    staging = root / "..data_tmp"
    staging.unlink(missing_ok=True)
    staging.symlink_to(fresh.name)
    previous = (root / "..data").resolve() if (root / "..data").is_symlink() else None
    os.replace(staging, root / "..data")
    for name in files:
        link = root / name
        if not link.is_symlink():
            link.symlink_to(Path("..data") / name)
    if previous is not None and previous != fresh:
        shutil.rmtree(previous, ignore_errors=True)


@dataclass
class ChartServer:
    """``kgov serve`` on 127.0.0.1 reading the chart's Secret and ConfigMap (see the module docstring)."""

    kubeconfig: Path
    namespace: str
    fullname: str
    root: Path
    port: int = field(default_factory=devcluster.free_port)
    metrics_port: int = field(default_factory=devcluster.free_port)
    process: subprocess.Popen[bytes] | None = None
    syncs: dict[str, int] = field(default_factory=lambda: {"tls": 0, "policy": 0})
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _seen: dict[str, dict[str, bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        """The plain-HTTP port that serves ``/metrics``."""
        return f"http://127.0.0.1:{self.metrics_port}"

    @property
    def ca_file(self) -> Path:
        return self.root / "ca.crt"

    @property
    def log_file(self) -> Path:
        return self.root / "serve.log"

    # -- reading the chart's objects -------------------------------------------------------------
    async def _read(self) -> tuple[dict[str, bytes], dict[str, bytes]]:
        async with devcluster.api_client(self.kubeconfig) as api:
            core = k8s.CoreV1Api(api)
            secret = await core.read_namespaced_secret(f"{self.fullname}-tls", self.namespace)
            config_map = await core.read_namespaced_config_map(f"{self.fullname}-policy", self.namespace)
        tls = {name: base64.b64decode(value) for name, value in (secret.data or {}).items()}
        policy = {name: value.encode() for name, value in (config_map.data or {}).items()}
        return tls, policy

    def sync_once(self) -> None:
        """Copy the Secret and the ConfigMap to the volumes when they changed."""
        tls, policy = asyncio.run(self._read())
        for name, files in (("tls", tls), ("policy", policy)):
            if self._seen.get(name) != files:
                write_volume(self.root / name, files)
                self._seen[name] = files
                self.syncs[name] += 1
        if not self.ca_file.is_file() or self.ca_file.read_bytes() != tls["ca.crt"]:
            staging = self.ca_file.with_name(".ca.crt.tmp")
            staging.write_bytes(tls["ca.crt"])
            os.replace(staging, self.ca_file)  # read by the metrics client at any moment

    def _sync_loop(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(Exception):  # an object being replaced: the next round reads it
                self.sync_once()

    async def _service_account_kubeconfig(self) -> Path:
        """A kubeconfig with a token of the chart's ServiceAccount (so the chart's RBAC applies)."""
        spec = k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
        async with devcluster.api_client(self.kubeconfig) as api:
            token = await k8s.CoreV1Api(api).create_namespaced_service_account_token(
                self.fullname, self.namespace, k8s.AuthenticationV1TokenRequest(spec=spec)
            )
        cluster = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]
        path = self.root / "serviceaccount.kubeconfig"
        user = f"system:serviceaccount:{self.namespace}:{self.fullname}"
        ca_pem = base64.b64decode(cluster["certificate-authority-data"])
        devcluster.write_kubeconfig(path, cluster["server"], ca_pem, user, token.status.token)
        return path

    def start(self, timeout: float = 60) -> None:
        """Sync the volumes, start ``kgov serve`` and wait for ``/readyz``; keep syncing after."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.sync_once()
        kubeconfig = asyncio.run(self._service_account_kubeconfig())
        command = [
            *support.kgov_command(),
            "serve",
            "--policy",
            str(self.root / "policy" / "policy.json"),
            "--tls-cert-file",
            str(self.root / "tls" / "tls.crt"),
            "--tls-private-key-file",
            str(self.root / "tls" / "tls.key"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--metrics-port",
            str(self.metrics_port),
            "--shutdown-delay",
            "0",
            "--watch-cluster",
            "--kubeconfig",
            str(kubeconfig),
        ]
        env = {**os.environ, "POD_NAMESPACE": self.namespace}
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"kgov serve exited {self.process.returncode}: {self.log_file.read_text()[-3000:]}")
            with contextlib.suppress(Exception):
                support.read_metrics(self.metrics_url)
                if devcluster.http_ok(f"{self.url}/readyz", devcluster.tls_context(self.ca_file)):
                    break
            time.sleep(0.3)
        else:
            raise RuntimeError(f"kgov serve not ready in {timeout}s: {self.log_file.read_text()[-3000:]}")
        self._thread = threading.Thread(target=self._sync_loop, name="chart-volume-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        return support.read_metrics(self.metrics_url)

    def requests(self, kind: str, operation: str | None = None) -> float:
        """``kgov_admission_requests_total`` summed over results (and operations unless given)."""
        total = 0.0
        for (name, labels), value in self.metrics().items():
            found = dict(labels)
            if name != "kgov_admission_requests_total" or found.get("kind") != kind:
                continue
            if operation is None or found.get("operation") == operation:
                total += value
        return total

    def certificate_reloads(self) -> float:
        return sum(
            value
            for (name, labels), value in self.metrics().items()
            if name == "kgov_certificate_reloads_total" and dict(labels).get("result") == "ok"
        )


@contextlib.asynccontextmanager
async def bundled_governor_unregistered(api: k8s.ApiClient, dynamic: Any) -> AsyncIterator[None]:
    """Take the session's ``kgov-governor`` configuration (registered by the harness) away for the
    block, so only the chart's webhook answers, and put it back afterwards as the governor tests do
    (server-side apply by the suite's field manager), then give the API server's webhook informer a
    moment. Its server keeps running."""
    registration = k8s.AdmissionregistrationV1Api(api)
    try:
        stored = await registration.read_mutating_webhook_configuration(manifests.GOVERNOR_WEBHOOK_CONFIGURATION)
    except k8s.ApiException as error:
        if error.status != 404:
            raise
        yield
        return
    body = api.sanitize_for_serialization(stored)
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": body["metadata"]["name"], "labels": body["metadata"].get("labels") or {}},
        "webhooks": body["webhooks"],
    }
    await registration.delete_mutating_webhook_configuration(manifests.GOVERNOR_WEBHOOK_CONFIGURATION)
    try:
        await asyncio.sleep(2)
        yield
    finally:
        resource = await dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
        await dynamic.server_side_apply(resource, body, field_manager=support.FIELD_MANAGER, force_conflicts=True)
        await asyncio.sleep(2)
