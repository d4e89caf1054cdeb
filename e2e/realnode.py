"""The machine's one real node (:mod:`e2e.devcluster.node`) for the modules that run the chart's
pods on it: ``real_node``, a module fixture that waits until no other state directory holds the
node, starts it in the session's local cluster and stops it at the module's end.

Skipped without a local control plane, without root, or with ``KGOV_E2E_REAL_NODE=0``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e import devcluster
from e2e.conftest import E2ECluster
from e2e.devcluster import nodehost

__all__ = ["other_node_running", "real_node", "wait_for_the_machines_node"]


def other_node_running(root: Path) -> str | None:
    """Why the machine's one real node is in use by another state directory (None: it is not):
    the claim's owner runs containerd, or claimed the node less than 5 minutes ago and still
    exists (it builds and imports the image before its containerd runs), or any containerd of
    another state directory runs."""
    owner = nodehost.claim_owner()
    if owner is not None and owner != root:
        if devcluster.process_alive(devcluster.Paths(owner), "containerd"):
            return f"claimed by {owner}"
        with contextlib.suppress(FileNotFoundError):
            if owner.is_dir() and time.time() - nodehost.CLAIM_FILE.stat().st_mtime < 300:
                return f"claimed by {owner}, starting"
    found = subprocess.run(["pgrep", "-af", "containerd --config"], capture_output=True, text=True, check=False)
    others = [line for line in found.stdout.splitlines() if f"{root}/" not in line]
    return f"containerd running: {others[0]}" if others else None


def wait_for_the_machines_node(root: Path) -> None:
    """Wait until the real node has been free for 15 s in a row (another module between its claim
    and its containerd looks free for a moment), at most ``KGOV_E2E_REAL_NODE_WAIT`` seconds
    (1200); skip after that. Starting a second node beside a running one breaks both (one bridge,
    one set of kube-proxy rules, which a stopping node flushes)."""
    deadline = time.monotonic() + float(os.environ.get("KGOV_E2E_REAL_NODE_WAIT", "1200"))
    free_since: float | None = None
    while True:
        busy = other_node_running(root)
        now = time.monotonic()
        if busy is not None:
            free_since = None
        elif free_since is None:
            free_since = now
        elif now - free_since > 15:
            return
        if now > deadline:
            pytest.skip(f"the machine's one real node stayed in use ({busy})")
        time.sleep(2 + secrets.randbelow(4))


@pytest.fixture(scope="module")
def real_node(e2e_cluster: E2ECluster) -> Iterator[devcluster.ClusterInfo]:
    """The real node in the session's local cluster (started here, stopped at the module's end)."""
    if e2e_cluster.local is None:
        pytest.skip("the real node runs beside the local control plane only")
    if os.environ.get("KGOV_E2E_REAL_NODE") == "0":
        pytest.skip("KGOV_E2E_REAL_NODE=0")
    if os.geteuid() != 0:
        pytest.skip("the real node needs root")
    root = Path(e2e_cluster.local.state_dir)
    wait_for_the_machines_node(root)
    was_running = devcluster.process_alive(devcluster.Paths(root), "kubelet") is not None
    started = time.monotonic()
    info = devcluster.start_real_node(root)
    print(f"\nreal node Ready {time.monotonic() - started:.1f}s after start_real_node")
    try:
        yield info
    finally:
        if not was_running:
            devcluster.stop_real_node(devcluster.Paths(root))
