"""The governor inside a kind cluster: the objects ``e2e/kind/install.sh`` applies.

``kgov serve`` runs as a Deployment in ``kueue-governor-system`` from the image ``install.sh``
builds (``e2e/kind/Dockerfile``) and loads into kind. It reads the compiled policy from the
``kgov-policy`` ConfigMap that ``kgov generate`` writes (so the generated config must be applied
first), keeps namespaces and nodes cached with ``--watch-cluster`` (its ServiceAccount may list and
watch them), and serves TLS with a certificate for its Service issued by a CA kept in ``--pki``
(reused on later runs, so the caBundle stays valid). The ``kgov-governor``
MutatingWebhookConfiguration is a separate part, applied once the Deployment is available, so
admission never fails closed while the server starts::

    python -m e2e.kind.deploy --image kueue-governor:e2e --pki DIR server  | kubectl apply --server-side -f -
    python -m e2e.kind.deploy --image kueue-governor:e2e --pki DIR webhook | kubectl apply --server-side -f -
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path
from typing import Any

import yaml

from e2e.manifests import SYSTEM_NAMESPACES, governor_webhook_configuration_for
from webhook.certs import generate_ca, issue_serving_certificate, write_private
from webhook.generate.manifests import DEFAULT_POLICY_NAMESPACE, POLICY_CONFIGMAP_NAME, POLICY_KEY

NAMESPACE = DEFAULT_POLICY_NAMESPACE  # kueue-governor-system: the webhook's own, never mutated
NAME = "kgov-governor"
TLS_SECRET = f"{NAME}-tls"
PORT = 8443
LABELS = {"app.kubernetes.io/name": "kueue-governor", "app.kubernetes.io/component": "webhook"}
POLICY_DIR = "/etc/kgov/policy"
TLS_DIR = "/etc/kgov/tls"


def service_dns_names() -> list[str]:
    return [f"{NAME}.{NAMESPACE}.svc", f"{NAME}.{NAMESPACE}.svc.cluster.local"]


def ensure_pki(directory: Path) -> tuple[bytes, bytes, bytes]:
    """The CA and the Service's serving certificate in ``directory``, made on first use.

    Returns ``(ca_pem, cert_pem, key_pem)``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca_crt, ca_key = directory / "ca.crt", directory / "ca.key"
    crt, key = directory / "tls.crt", directory / "tls.key"
    if not (ca_crt.exists() and ca_key.exists()):
        ca_pem, ca_key_pem = generate_ca("kueue-governor-kind-ca", days=365)
        ca_crt.write_bytes(ca_pem)
        write_private(ca_key, ca_key_pem)
        crt.unlink(missing_ok=True)
    if not (crt.exists() and key.exists()):
        cert_pem, key_pem = issue_serving_certificate(
            ca_crt.read_bytes(), ca_key.read_bytes(), service_dns_names(), [], days=90
        )
        crt.write_bytes(cert_pem)
        write_private(key, key_pem)
    return ca_crt.read_bytes(), crt.read_bytes(), key.read_bytes()


def server_objects(image: str, cert_pem: bytes, key_pem: bytes) -> list[dict[str, Any]]:
    """Namespace, ServiceAccount, RBAC, TLS Secret, Deployment and Service of ``kgov serve``."""
    metadata = {"namespace": NAMESPACE, "labels": LABELS}
    container = {
        "name": "governor",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": [
            "serve",
            "--policy",
            f"{POLICY_DIR}/{POLICY_KEY}",
            "--tls-cert-file",
            f"{TLS_DIR}/tls.crt",
            "--tls-private-key-file",
            f"{TLS_DIR}/tls.key",
            "--port",
            str(PORT),
            "--watch-cluster",
        ],
        "ports": [{"name": "https", "containerPort": PORT}, {"name": "metrics", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": PORT, "scheme": "HTTPS"}, "periodSeconds": 2},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": PORT, "scheme": "HTTPS"}, "periodSeconds": 10},
        "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "policy", "mountPath": POLICY_DIR, "readOnly": True},
            {"name": "tls", "mountPath": TLS_DIR, "readOnly": True},
        ],
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, **metadata}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": NAME, "labels": LABELS},
            "rules": [{"apiGroups": [""], "resources": ["namespaces", "nodes"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME, "labels": LABELS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": TLS_SECRET, **metadata},
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": base64.b64encode(cert_pem).decode(),
                "tls.key": base64.b64encode(key_pem).decode(),
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": NAME, **metadata},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": LABELS},
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": {
                        "serviceAccountName": NAME,
                        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [container],
                        "volumes": [
                            {"name": "policy", "configMap": {"name": POLICY_CONFIGMAP_NAME}},
                            {"name": "tls", "secret": {"secretName": TLS_SECRET}},
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, **metadata},
            "spec": {"selector": LABELS, "ports": [{"name": "https", "port": 443, "targetPort": PORT}]},
        },
    ]


def webhook_objects(ca_pem: bytes) -> list[dict[str, Any]]:
    """``kgov-governor`` calling the Service, trusted through the CA; never in system namespaces
    nor in the governor's own."""
    client_config = {
        "service": {"name": NAME, "namespace": NAMESPACE, "path": "/mutate", "port": 443},
        "caBundle": base64.b64encode(ca_pem).decode(),
    }
    return [governor_webhook_configuration_for(client_config, [*SYSTEM_NAMESPACES, NAMESPACE])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.kind.deploy", description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["server", "webhook"], help="what to print (apply server first)")
    parser.add_argument("--image", default="kueue-governor:e2e", help="the governor image loaded into kind")
    parser.add_argument("--pki", type=Path, required=True, help="directory of the CA and serving certificate")
    args = parser.parse_args(argv)
    ca_pem, cert_pem, key_pem = ensure_pki(args.pki)
    objects = server_objects(args.image, cert_pem, key_pem) if args.part == "server" else webhook_objects(ca_pem)
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
