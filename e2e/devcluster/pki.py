"""Who is who in the cluster: the private CA, the serving certificates issued from it (the API
server's, and the loopback ones of Kueue's webhooks, the governor and the JobSet controller), the
service-account signing keys, the static tokens of every user the API server accepts, and the
kubeconfig files that carry one of those tokens."""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from e2e.devcluster.state import DevClusterError, Paths
from webhook.certs import generate_ca, issue_serving_certificate, write_private

# The JobSet controller's user: the service account its release manifests run it as. The governor
# lets only the platform's controllers (by default, this account among them) create a child of an
# object Kueue manages, such as a JobSet's Jobs.
JOBSET_USER = "system:serviceaccount:jobset-system:jobset-controller-manager"
# Kubeflow Trainer v2.2.1's (manifests/overlays/manager), which creates the JobSet of a TrainJob.
TRAINER_USER = "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"
# The static tokens (``tokens.csv``, every user in ``system:masters``): the name a component's
# token is returned under by :func:`write_pki` -> the user the API server authenticates it as.
TOKEN_USERS = {
    "admin": "kgov-admin",
    "kueue": "kueue-manager",
    "governor": "kgov-governor",
    "kube-controller-manager": "system:kube-controller-manager",
    "kube-scheduler": "system:kube-scheduler",
    "kwok": "kwok-controller",
    "jobset": JOBSET_USER,
    "trainer": TRAINER_USER,
    "kubelet": "system:node:kgov-node",  # the real node (e2e/devcluster/node.py)
    "kube-proxy": "system:kube-proxy",
}


def write_pki(paths: Paths) -> dict[str, str]:
    """Create the CA, serving certificates, service-account keys and static tokens.

    Returns the token of each name of :data:`TOKEN_USERS`.
    """
    paths.pki.mkdir(parents=True, exist_ok=True)
    os.chmod(paths.pki, 0o700)
    ca_crt, ca_key = generate_ca("kueue-governor-e2e-ca", days=30)
    paths.ca_crt.write_bytes(ca_crt)
    write_private(paths.ca_key, ca_key)

    def serving(directory: Path, dns: list[str], ips: list[str]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        crt, key = issue_serving_certificate(ca_crt, ca_key, dns, ips, days=30)
        (directory / "tls.crt").write_bytes(crt)
        write_private(directory / "tls.key", key)

    serving(
        paths.pki / "apiserver",
        ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
        ["127.0.0.1", "10.96.0.1"],
    )
    serving(paths.kueue_certs, ["localhost"], ["127.0.0.1"])
    serving(paths.governor_certs, ["localhost"], ["127.0.0.1"])
    serving(paths.jobset_certs, ["localhost"], ["127.0.0.1"])

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_private(
        paths.pki / "sa.key",
        sa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    (paths.pki / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )

    tokens = {name: secrets.token_urlsafe(32) for name in TOKEN_USERS}
    write_private(
        paths.tokens,
        "".join(f'{tokens[name]},{user},uid-{name},"system:masters"\n' for name, user in TOKEN_USERS.items()).encode(),
    )
    return tokens


def token_of(paths: Paths, user: str) -> str:
    """The bearer token of ``user`` in the cluster's static token file (``token,user,uid,groups``).

    Raises:
        DevClusterError: the file has no such user (a cluster started before the user was added).
    """
    for line in paths.tokens.read_text().splitlines():
        fields = line.split(",")
        if len(fields) > 1 and fields[1] == user:
            return fields[0]
    raise DevClusterError(f"the cluster in {paths.root} has no token for {user}; start it again (down, up)")


def write_kubeconfig(path: Path, server: str, ca_pem: bytes, user: str, token: str) -> None:
    """A kubeconfig (mode 0600) for ``server``, trusting ``ca_pem``, as ``user`` with ``token``."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kgov-e2e",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "kgov-e2e", "context": {"cluster": "kgov-e2e", "user": user}}],
        "current-context": "kgov-e2e",
    }
    write_private(path, yaml.safe_dump(config, sort_keys=False).encode())
