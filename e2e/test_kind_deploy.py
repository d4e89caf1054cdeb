"""What ``e2e/kind/install.sh`` deploys, checked here without Docker.

The kind cluster itself cannot be brought up on this machine; its parts can be checked: the node
labels of ``e2e/kind/cluster.yaml`` against the local fake nodes, the in-cluster governor objects
of ``e2e.kind.deploy`` against the API server (server-side dry-run) and against the generated
policy ConfigMap they mount, and the serving certificate against the Service name.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import manifests
from e2e.kind import deploy
from e2e.support import BUNDLED_PLATFORM, FIELD_MANAGER, Generated, kgov_review

pytestmark = pytest.mark.e2e

KIND_DIR = Path(deploy.__file__).resolve().parent


def test_kind_workers_are_labelled_like_the_fake_nodes() -> None:
    config = yaml.safe_load((KIND_DIR / "cluster.yaml").read_text())
    roles = [node["role"] for node in config["nodes"]]
    assert roles.count("control-plane") == 1
    ignored = {manifests.TOPOLOGY_LEVELS[-1], manifests.FAKE_NODE_LABEL, "kubernetes.io/os", "kubernetes.io/arch"}
    fake = sorted(
        sorted((key, value) for key, value in node["metadata"]["labels"].items() if key not in ignored)
        for node in manifests.fake_nodes(manifests.TopologyShape())
    )
    workers = sorted(sorted(node["labels"].items()) for node in config["nodes"] if node["role"] == "worker")
    assert workers == fake


def test_install_script_is_valid_bash() -> None:
    result = subprocess.run(["bash", "-n", str(KIND_DIR / "install.sh")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_serving_certificate_names_the_service(tmp_path: Path) -> None:
    ca_pem, cert_pem, _ = deploy.ensure_pki(tmp_path)
    cert = x509.load_pem_x509_certificate(cert_pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert names == ["kgov-governor.kueue-governor-system.svc", "kgov-governor.kueue-governor-system.svc.cluster.local"]
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert.verify_directly_issued_by(ca)
    # A second run keeps the CA (the caBundle in the webhook configuration stays valid).
    again, _, _ = deploy.ensure_pki(tmp_path)
    assert again == ca_pem
    (webhook,) = deploy.webhook_objects(ca_pem)
    (hook,) = webhook["webhooks"]
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca_pem
    assert hook["clientConfig"]["service"] == {
        "name": "kgov-governor",
        "namespace": "kueue-governor-system",
        "path": "/mutate",
        "port": 443,
    }
    assert "kueue-governor-system" in hook["namespaceSelector"]["matchExpressions"][0]["values"]


async def test_in_cluster_governor_objects_are_accepted_by_the_api_server(
    dynamic: DynamicClient, bundled_config: Generated, tmp_path: Path
) -> None:
    """Server-side dry-run apply of every object ``install.sh`` applies for the governor, and
    the Deployment mounts the ConfigMap and key that ``kgov generate`` writes."""
    ca_pem, cert_pem, key_pem = deploy.ensure_pki(tmp_path / "pki")
    objects = deploy.server_objects("kueue-governor:e2e", cert_pem, key_pem) + deploy.webhook_objects(ca_pem)
    for obj in objects:
        resource = await dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        applied = await dynamic.server_side_apply(
            resource, obj, field_manager=FIELD_MANAGER, force_conflicts=True, dry_run="All"
        )
        assert applied.to_dict()["metadata"]["name"] == obj["metadata"]["name"]

    (configmap,) = bundled_config.of_kind("ConfigMap")
    (deployment,) = [obj for obj in objects if obj["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (policy_volume,) = [volume for volume in pod["volumes"] if volume["name"] == "policy"]
    assert policy_volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert deployment["metadata"]["namespace"] == configmap["metadata"]["namespace"]
    args = pod["containers"][0]["args"]
    (key,) = configmap["data"]
    assert args[args.index("--policy") + 1] == f"{deploy.POLICY_DIR}/{key}"
    assert "--watch-cluster" in args


def test_policy_configmap_answers_like_the_platform_file(bundled_config: Generated, tmp_path: Path) -> None:
    """In kind the governor reads the generated ConfigMap (``--policy``), here the platform file:
    both give the same answer."""
    (configmap,) = bundled_config.of_kind("ConfigMap")
    policy = tmp_path / "policy.json"
    policy.write_text(configmap["data"]["policy.json"])
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "same-answer", "namespace": "hyperpod-ns-data-science"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}},
    }
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "operation": "CREATE",
            "namespace": "hyperpod-ns-data-science",
            "name": "same-answer",
            "object": job,
        },
    }
    from_configmap = kgov_review(["--policy", str(policy)], body)
    from_platform = kgov_review(["--platform", str(BUNDLED_PLATFORM)], body)
    assert from_configmap == from_platform
    assert from_configmap["allowed"] is True and from_configmap["patchType"] == "JSONPatch"
