"""The webhook servers of the benchmarks through the real kube-apiserver, each run as its own
process on 127.0.0.1: ``kgov serve`` as the e2e cluster runs it, and the no-op (or canned) webhook
of ``noop_webhook.py`` on the same serving certificate; what they answer, count and present.

Imported by ``bench_apiserver.py``, ``bench_fail_safe.py`` and ``bench_faults.py`` as a plain
module (a script's own directory is on ``sys.path`` when it runs as ``python benchmarks/bench_x.py``).
Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apiserver_support import LOOPBACK, REPO, START_TIMEOUT_S, BenchError
from timing import process_cpu_seconds

from e2e import devcluster
from e2e.support import read_metrics
from webhook.certs import issue_serving_certificate, write_private


@dataclass
class Server:
    """A webhook server run as its own process on a fixed loopback port."""

    name: str
    command: list[str]
    port: int
    log: Path
    ready_path: str
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def start(self, context: ssl.SSLContext, timeout: float = START_TIMEOUT_S) -> float:
        """Start the process and wait until ``ready_path`` answers 200; returns the seconds taken."""
        started = time.monotonic()
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                cwd=REPO,
                env={**os.environ, **self.env},
            )
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchError(f"{self.name} exited {self.process.returncode}: {self.tail()}")
            with contextlib.suppress(OSError, ssl.SSLError):
                if devcluster.http_ok(f"https://{LOOPBACK}:{self.port}{self.ready_path}", context):
                    return time.monotonic() - started
            time.sleep(0.1)
        raise BenchError(f"{self.name} not ready in {timeout:.0f}s: {self.tail()}")

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process so far (``/proc/<pid>/stat``; 0 when not running)."""
        if self.process is None or self.process.poll() is not None:
            return 0.0
        return process_cpu_seconds(self.process.pid)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as the OOM killer or a node failure would: no drain, connections cut."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, characters: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-characters:] if self.log.exists() else ""


def kgov_server(root: Path, platform: Path, port: int, metrics_port: int) -> Server:
    """``kgov serve`` as ``start_governor`` runs it (the e2e serving certificate, its own token,
    ``--watch-cluster``), on a fixed port so that a restart keeps the registration."""
    paths = devcluster.Paths(root)
    info = devcluster.load_info(root)
    assert info is not None
    tokens = paths.tokens.read_text().splitlines()
    token = next(line.split(",")[0] for line in tokens if ",kgov-governor," in line)
    kubeconfig = root / "governor.kubeconfig"
    devcluster.write_kubeconfig(kubeconfig, info.apiserver_url, paths.ca_crt.read_bytes(), "kgov-governor", token)
    kgov = (
        [str(Path(sys.executable).parent / "kgov")]
        if (Path(sys.executable).parent / "kgov").is_file()
        else [sys.executable, "-m", "webhook.cli"]
    )
    command = [
        *kgov,
        "serve",
        "--platform",
        str(platform),
        "--tls-cert-file",
        str(paths.governor_certs / "tls.crt"),
        "--tls-private-key-file",
        str(paths.governor_certs / "tls.key"),
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--metrics-port",
        str(metrics_port),
        "--shutdown-delay",
        "0",
        "--watch-cluster",
        "--kubeconfig",
        str(kubeconfig),
    ]
    return Server("kgov serve", command, port, root / "kgov-serve.log", "/readyz", {"KUBECONFIG": str(kubeconfig)})


def noop_server(root: Path, port: int, patch_file: Path | None = None) -> Server:
    """The no-op webhook (``noop_webhook.py``) on the same serving certificate as ``kgov serve``;
    with ``patch_file``, the canned webhook answering every review with that JSON Patch."""
    paths = devcluster.Paths(root)
    command = [
        sys.executable,
        str(Path(__file__).resolve().parent / "noop_webhook.py"),
        str(port),
        str(paths.governor_certs / "tls.crt"),
        str(paths.governor_certs / "tls.key"),
    ]
    if patch_file is None:
        return Server("no-op webhook", command, port, root / "noop-webhook.log", "/healthz")
    command += ["--patch-file", str(patch_file)]
    return Server("canned webhook", command, port, root / "canned-webhook.log", "/healthz")


def _loopback_https(port: int, path: str, context: ssl.SSLContext, body: bytes | None = None) -> bytes:
    """GET (or with ``body``, POST as JSON) ``https://127.0.0.1:port/path``; the answer's bytes."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), urllib.request.ProxyHandler({}))
    request = urllib.request.Request(f"https://{LOOPBACK}:{port}{path}", data=body)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    with opener.open(request, timeout=10) as response:
        answer: bytes = response.read()
        return answer


def noop_count(port: int, context: ssl.SSLContext) -> int:
    """How many AdmissionReviews the no-op (or canned) webhook has answered."""
    return int(_loopback_https(port, "/count", context))


def noop_last_review(port: int, context: ssl.SSLContext) -> bytes:
    """The last AdmissionReview the no-op (or canned) webhook received, as the API server sent it."""
    return _loopback_https(port, "/last", context)


def webhook_answer(port: int, review: bytes, context: ssl.SSLContext) -> dict[str, Any]:
    """The ``response`` of the webhook on ``port`` (``POST /mutate``) to the AdmissionReview ``review``."""
    answer = json.loads(_loopback_https(port, "/mutate", context, review))
    response: dict[str, Any] = answer["response"]
    return response


def metric(url: str, name: str, **labels: str) -> float:
    """One sample of ``kgov serve``'s ``/metrics``, summed over the labels not given."""
    total = 0.0
    for (sample, found), value in read_metrics(url).items():
        if sample == name and all(dict(found).get(k) == v for k, v in labels.items()):
            total += value
    return total


def rotate_serving_certificate(root: Path) -> None:
    """A new serving certificate (new key) from the cluster's CA, written over the files the
    server reads, key then certificate, each atomically (as ``kgov certs renew`` writes them)."""
    paths = devcluster.Paths(root)
    cert, key = issue_serving_certificate(
        paths.ca_crt.read_bytes(), paths.ca_key.read_bytes(), ["localhost"], [LOOPBACK], days=30
    )
    write_private(paths.governor_certs / "tls.key", key)
    write_private(paths.governor_certs / "tls.crt", cert)


def served_serial(port: int, ca_file: Path) -> int:
    """The serial number of the certificate a fresh TLS handshake on ``port`` presents."""
    import socket

    from cryptography import x509

    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection((LOOPBACK, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=LOOPBACK) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def kgov_patch(noop_port: int, kgov_port: int, context: ssl.SSLContext) -> tuple[bytes, str]:
    """The AdmissionReview the no-op webhook received last (as the API server sent it), and the
    JSON Patch ``kgov serve`` answers it with (its ``patch``: base64). Raises BenchError when kgov's
    answer is not an allowed JSONPatch."""
    review = noop_last_review(noop_port, context)
    response = webhook_answer(kgov_port, review, context)
    if response.get("allowed") is not True or response.get("patchType") != "JSONPatch" or not response.get("patch"):
        raise BenchError(f"kgov serve did not patch the benchmark's Job: {response}")
    return review, str(response["patch"])
