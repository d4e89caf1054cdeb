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
  MutatingWebhookConfiguration;
* optionally one real node (root only): containerd, runc, a CNI bridge, kubelet and kube-proxy,
  with the pause image and the project's image built on the machine, tainted so that only pods
  that ask for it land there; the ``kubernetes`` Service then has an endpoint (a relay to the API
  server) and the machine is restored by ``down``.

State (pid files, logs, certificates, kubeconfig, etcd data) lives in ``$KGOV_E2E_STATE`` or
``e2e/.state``. Command line::

    python -m e2e.devcluster up [--shape 1x2x2x2] [--with-governor platform.yaml] [--with-jobset-controller]
                                [--real-node]
    python -m e2e.devcluster status
    python -m e2e.devcluster down [--purge]

One module a part: :mod:`.state` (state directory, ``cluster.json``), :mod:`.processes` (pid
records, start/stop, logs, waits), :mod:`.pki` (CA, certificates, tokens, kubeconfigs),
:mod:`.client` (API clients, server-side apply), :mod:`.etcd`, :mod:`.apiserver`,
:mod:`.controllers` (kube-controller-manager, kube-scheduler), :mod:`.kueue`, :mod:`.kwok` (and
the fake nodes), :mod:`.jobset`, :mod:`.governor`, :mod:`.node` (the real node; :mod:`.nodeconfig`
its configurations, :mod:`.nodehost` what it changes on the machine, :mod:`.relay` the API server's
relay), :mod:`.cluster` (``up``, ``down``, ``status``
composed from them) and :mod:`.__main__` (the command line). This package re-exports their
public names.
"""

from e2e.devcluster.apiserver import (
    SERVICE_ACCOUNT_ISSUER,
    SERVICE_CLUSTER_IP_RANGE,
    apiserver_command,
    restart_apiserver,
    start_apiserver,
)
from e2e.devcluster.client import FIELD_MANAGER, CheckedDynamicClient, api_client, apply, apply_crds, dynamic_client
from e2e.devcluster.cluster import (
    CONTROL_PLANE,
    KUBECONFIG_USERS,
    PROCESS_ORDER,
    apply_platform,
    down,
    running_cluster,
    status,
    up,
)
from e2e.devcluster.controllers import CONTROLLER_BURST, CONTROLLER_QPS, CONTROLLERS
from e2e.devcluster.etcd import compact_etcd, etcd_command, start_etcd
from e2e.devcluster.governor import start_governor, stop_governor
from e2e.devcluster.jobset import jobset_configuration, start_jobset_controller
from e2e.devcluster.kueue import KUEUE_METRICS_CERT_DIR, kueue_configuration
from e2e.devcluster.kwok import (
    KWOK_POD_CIDR,
    KWOK_POD_COMPLETE,
    KWOK_POD_COMPLETE_ANNOTATION,
    KWOK_STAGES,
    annotated_pod_complete_stage,
    apply_nodes,
    wait_nodes_ready,
)
from e2e.devcluster.node import (
    NODE_NAME,
    REAL_NODE_LABEL,
    REAL_NODE_SELECTOR,
    REAL_NODE_TAINT,
    REAL_NODE_TOLERATION,
    NodePaths,
    start_real_node,
    stop_real_node,
)
from e2e.devcluster.pki import JOBSET_USER, TOKEN_USERS, write_kubeconfig, write_pki
from e2e.devcluster.processes import (
    child_env,
    free_port,
    free_ports,
    http_ok,
    log_tail,
    process_alive,
    start_process,
    stop_process,
    tls_context,
    wait_until,
)
from e2e.devcluster.state import DEFAULT_STATE_DIR, ClusterInfo, DevClusterError, Paths, load_info, state_dir

__all__ = [
    "CONTROLLERS",
    "CONTROLLER_BURST",
    "CONTROLLER_QPS",
    "CONTROL_PLANE",
    "DEFAULT_STATE_DIR",
    "FIELD_MANAGER",
    "JOBSET_USER",
    "KUBECONFIG_USERS",
    "KUEUE_METRICS_CERT_DIR",
    "KWOK_POD_CIDR",
    "KWOK_POD_COMPLETE",
    "KWOK_POD_COMPLETE_ANNOTATION",
    "KWOK_STAGES",
    "NODE_NAME",
    "PROCESS_ORDER",
    "REAL_NODE_LABEL",
    "REAL_NODE_SELECTOR",
    "REAL_NODE_TAINT",
    "REAL_NODE_TOLERATION",
    "SERVICE_ACCOUNT_ISSUER",
    "SERVICE_CLUSTER_IP_RANGE",
    "TOKEN_USERS",
    "CheckedDynamicClient",
    "ClusterInfo",
    "DevClusterError",
    "NodePaths",
    "Paths",
    "annotated_pod_complete_stage",
    "api_client",
    "apiserver_command",
    "apply",
    "apply_crds",
    "apply_nodes",
    "apply_platform",
    "child_env",
    "compact_etcd",
    "down",
    "dynamic_client",
    "etcd_command",
    "free_port",
    "free_ports",
    "http_ok",
    "jobset_configuration",
    "kueue_configuration",
    "load_info",
    "log_tail",
    "process_alive",
    "restart_apiserver",
    "running_cluster",
    "start_apiserver",
    "start_etcd",
    "start_governor",
    "start_jobset_controller",
    "start_process",
    "start_real_node",
    "state_dir",
    "status",
    "stop_governor",
    "stop_process",
    "stop_real_node",
    "tls_context",
    "up",
    "wait_nodes_ready",
    "wait_until",
    "write_kubeconfig",
    "write_pki",
]
