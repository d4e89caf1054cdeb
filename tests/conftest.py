"""Shared fixtures: a private PKI on disk, free loopback ports, and real webhook servers over TLS.

Everything is real: certificates come from :mod:`webhook.certs`, the server is
:func:`webhook.serve.server.run_server` listening on 127.0.0.1, and clients verify it against the CA.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from webhook.certs import generate_ca, issue_serving_certificate, load_certificate, write_private
from webhook.serve.server import ServerConfig, run_server

REPO = Path(__file__).resolve().parent.parent
BUNDLED_PLATFORM = REPO / "kueue-config" / "platform.yaml"
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


@dataclass
class Pki:
    """A CA and a serving certificate for 127.0.0.1/localhost, as files in ``directory``."""

    directory: Path
    ca_cert: bytes = b""
    ca_key: bytes = b""

    def __post_init__(self) -> None:
        self.ca_cert, self.ca_key = generate_ca("kgov-test-ca", days=2)
        self.ca_file.write_bytes(self.ca_cert)
        self.install(*self.issue())

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def cert_file(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def key_file(self) -> Path:
        return self.directory / "tls.key"

    def issue(self) -> tuple[bytes, bytes]:
        """A new serving certificate and key from the same CA (a new serial each time)."""
        return issue_serving_certificate(self.ca_cert, self.ca_key, ["localhost"], [LOOPBACK], days=1)

    def install(self, cert_pem: bytes, key_pem: bytes) -> None:
        """Replace the serving pair on disk (each file atomically; the certificate first)."""
        write_private(self.cert_file, cert_pem)
        write_private(self.key_file, key_pem)

    def client_context(self) -> ssl.SSLContext:
        """A client TLS context that trusts only this CA and checks the host name/IP."""
        return ssl.create_default_context(cafile=str(self.ca_file))

    @staticmethod
    def serial(cert_pem: bytes) -> int:
        return int(load_certificate(cert_pem).serial_number)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    directory = tmp_path / "pki"
    directory.mkdir()
    return Pki(directory)


@pytest.fixture
def platform_file(tmp_path: Path) -> Path:
    """A private, editable copy of the bundled platform file."""
    target = tmp_path / "platform.yaml"
    shutil.copyfile(BUNDLED_PLATFORM, target)
    return target


@dataclass
class RunningServer:
    """A :func:`run_server` task on a loopback port, stopped through ``stop``."""

    config: ServerConfig
    stop: asyncio.Event
    task: asyncio.Task[None]
    ssl_context: ssl.SSLContext = field(repr=False)

    @property
    def port(self) -> int:
        return self.config.port

    def url(self, path: str) -> str:
        return f"https://{LOOPBACK}:{self.port}{path}"

    def metrics_url(self, path: str = "/metrics") -> str:
        """A URL on the plain-HTTP metrics port."""
        return f"http://{LOOPBACK}:{self.config.metrics_port}{path}"

    async def shutdown(self, timeout: float = 10.0) -> None:
        self.stop.set()
        await asyncio.wait_for(asyncio.shield(self.task), timeout)


ServerFactory = Callable[..., Awaitable[RunningServer]]


@pytest.fixture
async def start_server(pki: Pki, platform_file: Path) -> AsyncIterator[ServerFactory]:
    """Start real servers: ``await start_server(reload_interval=0.1)``; all are stopped at teardown.

    Keyword arguments override :class:`ServerConfig` fields (defaults: the fixture PKI, the copied
    platform file, free ports on 127.0.0.1 for the webhook and the metrics, no shutdown delay).
    """
    servers: list[RunningServer] = []

    async def start(**overrides: Any) -> RunningServer:
        settings: dict[str, Any] = {
            "cert_file": pki.cert_file,
            "key_file": pki.key_file,
            "platform": platform_file,
            "host": LOOPBACK,
            "port": free_port(),
            "metrics_port": free_port(),
            "shutdown_delay": 0.0,
            "shutdown_timeout": 5.0,
        }
        settings.update(overrides)
        config = ServerConfig(**settings)
        stop, started = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(run_server(config, stop, started))
        waiter = asyncio.create_task(started.wait())
        done, _ = await asyncio.wait({task, waiter}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            if task.done():
                task.result()  # re-raise the start-up error
            raise TimeoutError("server did not start within 10 s")
        server = RunningServer(config, stop, task, pki.client_context())
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop.set()
    for server in servers:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.task, 10)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line saying how many tests skipped for want of the shared cases, and why."""
    from support import CASES_MISSING

    skipped = [
        report
        for report in terminalreporter.stats.get("skipped", [])
        if isinstance(report.longrepr, tuple) and CASES_MISSING in str(report.longrepr[2])
    ]
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} tests skipped: {CASES_MISSING} (Kueue's examples; the property and fuzz tests "
            "use the project's own workloads of every kind instead)",
            yellow=True,
            bold=True,
        )
