"""``certs.mode: in-cluster`` in the chart's offline render (``helm template``, as Argo CD and Flux
run it) and in ``kgov serve``'s options: no key material, no caBundle, identical renders, and the
least-privilege RBAC the server needs to keep its own certificates.

Needs the cached helm binary (``make e2e-build``); skipped without it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from e2e import build
from e2e.helm_support import CHART, PLATFORM_VALUES, Helm, by_kind, one
from webhook.cli import main

NAMESPACE = "kgov-gitops"
FULLNAME = "kgov-kueue-governor"
IN_CLUSTER = {"certs.mode": '"in-cluster"'}


@pytest.fixture(scope="module")
def helm() -> Iterator[Helm]:
    (binary,) = (b for b in build.binaries() if b.name == "helm")
    if not build.binary_path(binary).is_file():
        pytest.skip("no cached helm binary (make e2e-build)")
    tool = Helm()
    yield tool
    tool.close()


def render(helm: Helm, **settings: str) -> tuple[str, list[dict[str, Any]]]:
    """The text of ``helm template`` (offline) and its objects."""
    args = ["template", "kgov", str(CHART), "-n", NAMESPACE, *helm._value_args([PLATFORM_VALUES], settings)]
    text = helm.run(*args, "--kube-version", build.KUBERNETES_VERSION)
    return text, [doc for doc in yaml.safe_load_all(text) if doc]


def test_offline_render_carries_no_key_material_and_no_ca_bundle(helm: Helm) -> None:
    text, objects = render(helm, **IN_CLUSTER)
    # PEM in clear, base64 of "-----" (PEM in a Secret's data or a caBundle), and the data keys.
    for marker in ("PRIVATE KEY", "BEGIN CERTIFICATE", "LS0tLS1", "caBundle:", "tls.key:", "ca.key:"):
        assert marker not in text, marker
    assert by_kind(objects, "Secret") == []
    (hook,) = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    assert "caBundle" not in hook["clientConfig"]
    assert "annotations" not in one(objects, "MutatingWebhookConfiguration")["metadata"]


def test_two_offline_renders_are_identical(helm: Helm) -> None:
    assert render(helm, **IN_CLUSTER)[0] == render(helm, **IN_CLUSTER)[0]


def test_self_managed_renders_mint_a_new_ca_each_time_offline(helm: Helm) -> None:
    """The reason for the mode: without a cluster to look up, every self-managed render differs."""
    first, second = (one(render(helm)[1], "MutatingWebhookConfiguration") for _ in range(2))
    assert first["webhooks"][0]["clientConfig"]["caBundle"] != second["webhooks"][0]["clientConfig"]["caBundle"]


def test_the_server_is_told_to_keep_its_certificates(helm: Helm) -> None:
    _, objects = render(helm, **IN_CLUSTER, **{"certs.inCluster.extraDNSNames": '["kgov.example"]'})
    (pod,) = [one(objects, "Deployment")["spec"]["template"]["spec"]]
    assert len(pod["containers"]) == 2  # server.processes: each process keeps and reads the pair
    (tls,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert tls == {"name": "tls", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
    for container in pod["containers"]:
        args = container["args"]
        assert args[args.index("--tls-cert-file=/etc/kueue-governor/tls/tls.crt") :][:10] == [
            "--tls-cert-file=/etc/kueue-governor/tls/tls.crt",
            "--tls-private-key-file=/etc/kueue-governor/tls/tls.key",
            f"--certs-secret={FULLNAME}-certs",
            f"--certs-dns-name={FULLNAME}.{NAMESPACE}.svc",
            f"--certs-dns-name={FULLNAME}.{NAMESPACE}.svc.cluster.local",
            "--certs-dns-name=kgov.example",
            "--certs-days=90",
            "--certs-ca-days=3650",
            "--certs-interval=30",
            "--mutating-webhook-configuration=kgov-governor",
        ]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "tls"]
        assert mount["readOnly"] is False
        assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_rbac_names_the_secret_and_the_webhook_configuration(helm: Helm) -> None:
    _, objects = render(helm, **IN_CLUSTER)
    role = next(r for r in by_kind(objects, "Role") if r["metadata"]["name"] == f"{FULLNAME}-certs")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [f"{FULLNAME}-certs"],
            "verbs": ["get", "update"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    cluster_role = next(r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"] == f"{FULLNAME}-certs")
    assert cluster_role["rules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": ["kgov-governor"],
            "verbs": ["get", "patch"],
        }
    ]
    bindings = [b for b in [*by_kind(objects, "RoleBinding"), *by_kind(objects, "ClusterRoleBinding")]]
    certs_bindings = [b for b in bindings if b["metadata"]["name"] == f"{FULLNAME}-certs"]
    assert len(certs_bindings) == 2
    for binding in certs_bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]


def test_other_modes_render_no_certificate_rbac(helm: Helm) -> None:
    _, objects = render(helm)
    names = {o["metadata"]["name"] for o in objects if o["kind"] in ("Role", "ClusterRole")}
    assert f"{FULLNAME}-certs" not in names
    containers = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert containers and not [a for c in containers for a in c["args"] if a.startswith("--certs-")]


def test_an_unknown_mode_is_refused_with_the_choices(helm: Helm) -> None:
    with pytest.raises(Exception, match="value must be one of 'self-managed', 'cert-manager', 'in-cluster'"):
        render(helm, **{"certs.mode": '"vault"'})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--certs-dns-name", "a.b.svc"],
            "--certs-dns-name, --certs-ip-address and --*-webhook-configuration need --certs-secret",
        ),
        (["--certs-secret", "ns/certs"], "--certs-secret needs at least one --certs-dns-name or --certs-ip-address"),
        (
            ["--certs-secret", "certs", "--certs-dns-name", "a"],
            "--certs-secret certs: give NAMESPACE/NAME, or set $POD_NAMESPACE",
        ),
        (
            ["--certs-secret", "ns/certs", "--certs-ip-address", "1.2.3.400"],
            "--certs-ip-address: '1.2.3.400' does not appear",
        ),
        (["--certs-secret", "ns/certs", "--certs-dns-name", "a", "--certs-days", "1"], "--certs-days"),
    ],
)
def test_serve_refuses_certificate_options_that_cannot_work(args: list[str], message: str, tmp_path: Any) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"apiVersion": "kueue-governor.io/v1alpha1", "kind": "PolicySet", "teams": []}))
    result = CliRunner().invoke(
        main,
        [
            "serve",
            "--policy",
            str(policy),
            "--tls-cert-file",
            str(tmp_path / "c"),
            "--tls-private-key-file",
            str(tmp_path / "k"),
            *args,
        ],
        env={"POD_NAMESPACE": ""},
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
