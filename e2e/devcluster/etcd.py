"""etcd: its command line (a single member on loopback ports, its data in the state directory, no
fsync), starting it and waiting for ``/health``, and compacting its history as the API server's
periodic compaction would."""

from __future__ import annotations

import base64
import json
import os
import urllib.request
from pathlib import Path
from typing import Any

from e2e.devcluster.processes import http_ok, start_process, wait_until
from e2e.devcluster.state import DevClusterError, Paths, load_info, state_dir


def etcd_command(binary: Path, paths: Paths, client_port: int, peer_port: int) -> list[str]:
    """etcd's command line: member ``default`` on 127.0.0.1, data in ``paths.etcd_data``."""
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


def start_etcd(paths: Paths, binary: Path, client_port: int, peer_port: int) -> None:
    """Start etcd (its data directory made private) and wait up to 60 s for its ``/health``.

    Raises:
        DevClusterError: etcd exited or did not become healthy (its log tail is included).
    """
    paths.etcd_data.mkdir(parents=True, exist_ok=True)
    os.chmod(paths.etcd_data, 0o700)
    start_process(paths, "etcd", etcd_command(binary, paths, client_port, peer_port))
    etcd_url = f"http://127.0.0.1:{client_port}"
    wait_until("etcd /health", lambda: http_ok(f"{etcd_url}/health"), 60, paths, "etcd")


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
