"""What the real node changes on the machine, and putting it back.

The real node (:mod:`e2e.devcluster.node`) needs the machine: a bridge with the node's address,
two routes, one guard rule, kube-proxy's and the kubelet's iptables chains, the sysctls the kubelet
sets at start, mounts (the kubelet's root directory, pod volumes, network namespaces), cgroups and
a few directories outside the state directory. Only one real node can run on a machine (kube-proxy's
chains are global): :func:`claim_machine` records which state directory owns it.

Before anything changes, :func:`record_host` saves the sysctls' values and which outside
directories exist in ``<state>/node/host.json``; :func:`restore_host` puts every one of them back,
and can run any number of times (also after a crash, from the next ``up`` or ``down``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from e2e.devcluster.state import DevClusterError

BRIDGE = "kgov-cni0"
NODE_IP = "10.244.0.1"
POD_SUBNET = "10.244.0.0/24"
# The service range and KWOK's fake pod IPs stay on the bridge: a connection to a ClusterIP without
# a kube-proxy rule yet, or to a simulated pod, never leaves the machine.
LOCAL_ROUTES = ("10.96.0.0/16", "10.0.0.0/16")
GUARD_COMMENT = "kgov-real-node"
# Pods never reach anything off the machine: forwarded traffic from the pod range that does not go
# back into the bridge is dropped (in mangle: kube-proxy rewrites filter's FORWARD chain).
GUARD_RULE = ("FORWARD", "-s", POD_SUBNET, "!", "-o", BRIDGE, "-m", "comment", "--comment", GUARD_COMMENT, "-j", "DROP")
# The sysctls the kubelet, kube-proxy and the CNI bridge may set (kubelet: vm.overcommit_memory,
# kernel.panic, kernel.panic_on_oops; bridge isGateway: ip_forward).
SYSCTLS = (
    "net.ipv4.ip_forward",
    "vm.overcommit_memory",
    "kernel.panic",
    "kernel.panic_on_oops",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
)
# Directories outside the state directory the kubelet, libcni and containerd 1.6 write whatever
# their configuration says; each is removed afterwards if it did not exist before.
OUTSIDE_DIRS = (
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/var/log/containers",
    "/var/log/pods",
    "/run/containerd",
    "/run/netns",
)
CLAIM_FILE = Path("/run/kgov-real-node")
CNI_BIN_DIR = Path("/usr/lib/cni")
NEEDED_COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "ip")
CHAIN_PREFIXES = ("KUBE-", "CNI-")


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def _run(*command: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(command), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise DevClusterError(f"{' '.join(command)} failed: {proc.stderr.strip()}")
    return proc


def claim_machine(state_root: Path, alive: bool) -> Path | None:
    """Record ``state_root`` as the owner of the machine's one real node.

    ``alive`` says whether the current owner's node still runs (the caller checks its processes).
    Returns the state directory of a previous owner whose node is gone (its host changes are to be
    restored), or None.

    Raises:
        DevClusterError: another state directory's real node is running.
    """
    previous = Path(CLAIM_FILE.read_text().strip()) if CLAIM_FILE.exists() else None
    if previous is not None and previous != state_root and alive:
        raise DevClusterError(f"a real node already runs on this machine (state {previous}); one at a time")
    CLAIM_FILE.write_text(f"{state_root}\n")
    return previous if previous is not None and previous != state_root else None


def claim_owner() -> Path | None:
    """The state directory that owns the machine's real node, if any."""
    return Path(CLAIM_FILE.read_text().strip()) if CLAIM_FILE.exists() else None


def release_machine(state_root: Path) -> None:
    """Drop the claim if ``state_root`` holds it."""
    if claim_owner() == state_root:
        CLAIM_FILE.unlink(missing_ok=True)


def record_host(record: Path) -> None:
    """Save the sysctls and which outside directories exist, unless an earlier record is still pending."""
    if record.exists():
        return
    values = {name: _sysctl_path(name).read_text().strip() for name in SYSCTLS if _sysctl_path(name).exists()}
    existing = [path for path in OUTSIDE_DIRS if Path(path).exists()]
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"sysctls": values, "existing_dirs": existing}, indent=2) + "\n")


def setup_network() -> None:
    """The bridge with the node's address, the local routes and the guard rule (idempotent).

    Raises:
        DevClusterError: a command failed (iptables missing, no permission).
    """
    if _run("ip", "link", "show", BRIDGE).returncode != 0:
        _run("ip", "link", "add", BRIDGE, "type", "bridge", check=True)
    _run("ip", "addr", "replace", f"{NODE_IP}/24", "dev", BRIDGE, check=True)
    _run("ip", "link", "set", BRIDGE, "up", check=True)
    for route in LOCAL_ROUTES:
        _run("ip", "route", "replace", route, "dev", BRIDGE, check=True)
    if _run("iptables", "-t", "mangle", "-C", *GUARD_RULE).returncode != 0:
        _run("iptables", "-t", "mangle", "-I", GUARD_RULE[0], "1", *GUARD_RULE[1:], check=True)


def _clean_chains(binary: str) -> None:
    """Remove every jump to a ``KUBE-*``/``CNI-*`` chain from the built-in chains, then those chains."""
    if shutil.which(binary) is None:
        return
    for table in ("filter", "nat", "mangle"):
        listed = _run(binary, "-t", table, "-S")
        if listed.returncode != 0:
            continue
        rules = listed.stdout.splitlines()
        ours = [
            line.split()[1] for line in rules if line.startswith("-N ") and line.split()[1].startswith(CHAIN_PREFIXES)
        ]
        for line in rules:
            parts = line.split()
            jumps = parts[:1] == ["-A"] and parts[1] not in ours and "-j" in parts
            if jumps and parts[parts.index("-j") + 1].startswith(CHAIN_PREFIXES):
                _run(binary, "-t", table, "-D", *parts[1:])
        for chain in ours:
            _run(binary, "-t", table, "-F", chain)
        for chain in ours:
            _run(binary, "-t", table, "-X", chain)


def _mounts_under(prefixes: tuple[str, ...]) -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefixes):
            points.append(point)
    return sorted(set(points), key=len, reverse=True)


def _remove_cgroups(name: str) -> None:
    for controller in Path("/sys/fs/cgroup").iterdir():
        top = controller / name
        if not top.is_dir():
            continue
        for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def restore_host(node_root: Path, kube_proxy: Path | None) -> None:
    """Undo everything the real node changed on the machine (its processes must be stopped).

    In order: kube-proxy's ``--cleanup`` and the remaining ``KUBE-*``/``CNI-*`` chains (iptables and
    ip6tables), the guard rule, mounts under the node's directory and the CNI network namespaces,
    veths, routes and the bridge, the ``kubepods`` cgroups, the outside directories that did not
    exist before, the recorded sysctls. Errors of single steps are ignored: what can be undone is.
    """
    if kube_proxy is not None and kube_proxy.exists():
        _run(str(kube_proxy), "--cleanup")
    for binary in ("iptables", "ip6tables"):
        _clean_chains(binary)
    if shutil.which("iptables"):
        while _run("iptables", "-t", "mangle", "-D", *GUARD_RULE).returncode == 0:
            pass
    for point in _mounts_under((f"{node_root}/", "/run/netns/cni-", "/run/containerd/")):
        _run("umount", "-l", point)
    netns = Path("/run/netns")
    if netns.is_dir():
        for namespace in netns.glob("cni-*"):
            _run("ip", "netns", "delete", namespace.name)
    if _run("ip", "link", "show", BRIDGE).returncode == 0:
        for line in _run("ip", "-o", "link", "show", "master", BRIDGE).stdout.splitlines():
            _run("ip", "link", "delete", line.split(":")[1].strip().split("@")[0])
        for route in LOCAL_ROUTES:
            _run("ip", "route", "delete", route, "dev", BRIDGE)
        _run("ip", "link", "delete", BRIDGE)
    _remove_cgroups("kubepods")
    record_path = node_root / "host.json"
    if not record_path.exists():
        return
    record = json.loads(record_path.read_text())
    for path in OUTSIDE_DIRS:
        if path not in record["existing_dirs"]:
            for point in _mounts_under((f"{path}/",)):
                _run("umount", "-l", point)
            shutil.rmtree(path, ignore_errors=True)
    containers_log = Path("/var/log/containers")
    if containers_log.is_dir():  # it existed before: only the links into our pod logs go
        for link in containers_log.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(f"{node_root}/"):
                link.unlink()
    for name, value in record["sysctls"].items():
        with contextlib.suppress(OSError):
            _sysctl_path(name).write_text(value)
    record_path.unlink()


def check_machine() -> None:
    """Raises DevClusterError unless this process is root and the node's commands are installed."""
    if os.geteuid() != 0:
        raise DevClusterError("the real node needs root (containerd, the bridge, iptables)")
    missing = [name for name in NEEDED_COMMANDS if shutil.which(name) is None]
    missing += [f"{CNI_BIN_DIR}/{p}" for p in ("bridge", "host-local", "loopback") if not (CNI_BIN_DIR / p).exists()]
    if missing:
        raise DevClusterError(f"the real node needs {missing}: run `make e2e-node-deps`")
