"""The real node's names and files, and the configurations of its parts: containerd 1.6, the CNI
network, the kubelet, kube-proxy, the node's labels and the ``kubernetes`` EndpointSlice
(:mod:`e2e.devcluster.node` starts them)."""

from __future__ import annotations

import shutil
from typing import Any

from e2e import build, image
from e2e.devcluster.nodehost import BRIDGE, CNI_BIN_DIR, NODE_IP, POD_SUBNET
from e2e.devcluster.state import Paths
from e2e.manifests import FAKE_NODE_LABEL, TOPOLOGY_LEVELS, TopologyShape, fake_nodes

NODE_NAME = "kgov-node"
REAL_NODE_LABEL = "kgov.test/real-node"
REAL_NODE_TAINT = {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
# What a pod tolerates and selects to run on the real node.
REAL_NODE_TOLERATION = {"key": REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}
REAL_NODE_SELECTOR = {REAL_NODE_LABEL: "true"}
APISERVER_RELAY_PORT = 6443
KUBELET_PORT = 10250
# The node's processes, in start order (stopped in reverse, after the control plane's clients).
NODE_PROCESSES = ("containerd", "kubelet", "apiserver-relay", "kube-proxy")


class NodePaths:
    """File layout of the real node inside the cluster's state directory (``<state>/node``)."""

    def __init__(self, paths: Paths) -> None:
        self.root = paths.root / "node"
        # One real node per machine, so containerd's content store can be shared by every state
        # directory and outlive ``down``: the imported images stay, the next node starts fast.
        self.containerd_root = build.cache_dir() / "containerd"
        self.containerd_state = self.root / "containerd" / "state"
        self.containerd_config = self.root / "containerd" / "config.toml"
        self.socket = self.root / "containerd" / "containerd.sock"
        self.cni_conf = self.root / "cni" / "net.d"
        self.cni_ipam = self.root / "cni" / "ipam"
        self.kubelet_root = self.root / "kubelet"
        self.kubelet_pki = self.root / "kubelet-pki"
        self.pod_logs = self.root / "pod-logs"
        self.kubelet_config = self.root / "kubelet.yaml"
        self.kubelet_kubeconfig = self.root / "kubelet.kubeconfig"
        self.proxy_config = self.root / "kube-proxy.yaml"
        self.proxy_kubeconfig = self.root / "kube-proxy.kubeconfig"
        self.host_record = self.root / "host.json"


def containerd_config(node: NodePaths) -> str:
    """containerd 1.6's configuration (version 2): its own root, state and socket, the CRI plugin
    with the local pause image, overlayfs, runc with cgroupfs, the CNI plugins of Debian."""
    return f"""version = 2
root = "{node.containerd_root}"
state = "{node.containerd_state}"
[grpc]
  address = "{node.socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{image.PAUSE_IMAGE}"
  enable_unprivileged_ports = false
  # No CAP_SYS_RESOURCE here: the kubelet's oom_score_adj of -998 for sandboxes would fail every pod.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{shutil.which("runc") or "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{node.cni_conf}"
"""


def cni_config(node: NodePaths) -> dict[str, Any]:
    """The CNI network: the bridge (the node's address is its gateway), host-local IPAM, no masquerade."""
    ipam = {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]], "routes": [{"dst": "0.0.0.0/0"}]}
    return {
        "cniVersion": "0.4.0",
        "name": "kgov-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": ipam | {"dataDir": str(node.cni_ipam)},
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "loopback"},
        ],
    }


def kubelet_configuration(node: NodePaths, paths: Paths, healthz_port: int) -> dict[str, Any]:
    """KubeletConfiguration: cgroupfs on cgroup v1, anonymous reads (the API server has no kubelet
    client certificate), no cluster DNS, the taint, images never collected."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "address": NODE_IP,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": True},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(paths.ca_crt)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDomain": "cluster.local",
        "resolvConf": "",
        "registerWithTaints": [REAL_NODE_TAINT],
        "podLogsDir": str(node.pod_logs),
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "maxPods": 30,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
    }


def kube_proxy_configuration(node: NodePaths, healthz_port: int, metrics_port: int) -> dict[str, Any]:
    """KubeProxyConfiguration: iptables mode, NodePorts only on the node's address, and the host's
    conntrack sysctls and ``route_localnet`` left alone."""
    zero = {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"}
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(node.proxy_kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": POD_SUBNET,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{NODE_IP}/32"],
        "conntrack": zero | {"udpTimeout": "0s", "udpStreamTimeout": "0s"},
        "iptables": {"localhostNodePorts": False, "syncPeriod": "10s", "minSyncPeriod": "1s"},
    }


def node_labels(shape: TopologyShape) -> dict[str, str]:
    """The labels of the shape's first host (network topology, instance type) without its hostname and
    the KWOK label, plus :data:`REAL_NODE_LABEL`."""
    labels = dict(fake_nodes(shape)[0]["metadata"]["labels"])
    for name in (FAKE_NODE_LABEL, TOPOLOGY_LEVELS[-1], "kubernetes.io/os", "kubernetes.io/arch"):
        labels.pop(name, None)
    return labels | REAL_NODE_SELECTOR


def kubernetes_endpoints() -> dict[str, Any]:
    """The ``default/kubernetes`` EndpointSlice: the relay (the API server runs without an endpoint reconciler)."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": "kgov-e2e",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": APISERVER_RELAY_PORT, "protocol": "TCP"}],
    }
