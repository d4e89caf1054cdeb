"""The cluster's processes: free loopback ports, starting a command in its own process group
with its log in ``logs/<name>.log`` and a pid record in ``pids/<name>.pid``, telling whether
that process still runs (a recycled pid does not count), stopping it, the tail of its log, and
the waits on it (an HTTP probe, a TLS handshake, a port to bind) that fail early when it dies."""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.devcluster.state import DevClusterError, Paths


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports of :func:`free_port`, in ascending order."""
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
            env=env if env is not None else child_env(),
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


def child_env() -> dict[str, str]:
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


def wait_until(
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


def http_ok(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    """Whether a GET of ``url`` (no proxy, bearer ``token`` if given) answers 200."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=5) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError:
        return False


def tls_context(ca_file: Path) -> ssl.SSLContext:
    """A client TLS context that trusts the cluster's CA (``ca_file``)."""
    return ssl.create_default_context(cafile=str(ca_file))


def tls_handshake(port: int, context: ssl.SSLContext) -> bool:
    """Whether a TLS handshake with 127.0.0.1:``port`` succeeds (raises OSError/SSLError if not)."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=2) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1"),
    ):
        return True


def wait_port_free(port: int, timeout: float) -> None:
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
