"""What the local control plane installs, checked without a cluster (needs the Go module cache)."""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from e2e import build, devcluster, manifests
from e2e.devcluster.trainer import trainer_webhooks
from e2e.support import Domain, decode_topology_assignment

pytestmark = pytest.mark.e2e

CA = b"-----BEGIN CERTIFICATE-----\nnot parsed here\n-----END CERTIFICATE-----\n"
PORT = 9443


@pytest.fixture(scope="module")
def kueue_dir() -> Iterator[Path]:
    yield build.module_dir("sigs.k8s.io/kueue", build.KUEUE_VERSION)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1x2x2x2", (1, 2, 2, 2)), ("2x3x4", (1, 2, 3, 4)), ("3X1X1X5", (3, 1, 1, 5))],
)
def test_shape_parse(text: str, expected: tuple[int, int, int, int]) -> None:
    shape = manifests.TopologyShape.parse(text)
    assert (shape.spines, shape.blocks, shape.racks, shape.hosts) == expected
    assert manifests.TopologyShape.parse(str(shape)) == shape


@pytest.mark.parametrize("text", ["", "2x2", "1x2x0x2", "axbxc", "1x1x1x1x1"])
def test_shape_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="shape"):
        manifests.TopologyShape.parse(text)


def test_fake_nodes_form_a_tree() -> None:
    shape = manifests.TopologyShape(spines=2, blocks=2, racks=3, hosts=2)
    nodes = manifests.fake_nodes(shape)
    assert len(nodes) == shape.node_count == 24
    assert len({n["metadata"]["name"] for n in nodes}) == 24
    layer1, layer2, layer3, hostname = manifests.TOPOLOGY_LEVELS
    parent: dict[str, str] = {}
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert labels[hostname] == node["metadata"]["name"]
        # every domain has exactly one parent domain
        for child, up in ((labels[layer2], labels[layer1]), (labels[layer3], labels[layer2])):
            assert parent.setdefault(child, up) == up
        status = node["status"]
        assert status["allocatable"]["nvidia.com/gpu"] == "8"
        assert status["allocatable"] == status["capacity"]
        assert "conditions" not in status  # KWOK's node-initialize stage makes the node Ready
        assert "taints" not in node["spec"]
    assert Counter(n["metadata"]["labels"][layer1] for n in nodes) == {"nn-spine-1": 12, "nn-spine-2": 12}
    assert set(Counter(n["metadata"]["labels"][layer3] for n in nodes).values()) == {2}


def test_kueue_crds_convert_by_url_on_loopback(kueue_dir: Path) -> None:
    crds = manifests.kueue_crds(kueue_dir, PORT, CA)
    kustomization = yaml.safe_load((kueue_dir / "config/components/crd/kustomization.yaml").read_text())
    assert len(crds) == len(kustomization["resources"])
    converted = {crd["metadata"]["name"] for crd in crds if crd["spec"].get("conversion")}
    assert {"workloads.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io"} <= converted
    for crd in crds:
        conversion = crd["spec"].get("conversion")
        if conversion:
            config = conversion["webhook"]["clientConfig"]
            assert "service" not in config
            assert config["url"] == f"https://127.0.0.1:{PORT}/convert"
            assert base64.b64decode(config["caBundle"]) == CA


def test_kueue_webhook_configurations_by_url(kueue_dir: Path) -> None:
    configurations = manifests.kueue_webhook_configurations(kueue_dir, PORT, CA)
    names = sorted(c["metadata"]["name"] for c in configurations)
    assert names == ["kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"]
    hooks = {hook["name"]: hook for c in configurations for hook in c["webhooks"]}
    assert {"mjob.kb.io", "vjob.kb.io", "mpod.kb.io"} <= set(hooks)
    for hook in hooks.values():
        config = hook["clientConfig"]
        assert config["url"].startswith(f"https://127.0.0.1:{PORT}/")
        assert base64.b64decode(config["caBundle"]) == CA
    # the release kustomization's patch keeps Kueue's pod webhook out of system namespaces
    (expression,) = hooks["mpod.kb.io"]["namespaceSelector"]["matchExpressions"]
    assert expression["operator"] == "NotIn" and "kube-system" in expression["values"]


def test_governor_webhook_configuration() -> None:
    configuration = manifests.governor_webhook_configuration(PORT, CA)
    # The API server calls mutating webhooks in name order: ours must come before Kueue's.
    assert configuration["metadata"]["name"] < "kueue-mutating-webhook-configuration"
    (hook,) = configuration["webhooks"]
    assert hook["clientConfig"]["url"] == f"https://127.0.0.1:{PORT}/mutate"
    assert (hook["sideEffects"], hook["reinvocationPolicy"], hook["failurePolicy"]) == ("None", "IfNeeded", "Fail")
    assert hook["admissionReviewVersions"] == ["v1"] and hook["timeoutSeconds"] <= 5
    resources = {
        (group, resource) for rule in hook["rules"] for group in rule["apiGroups"] for resource in rule["resources"]
    }
    # One resource per workload kind (no wildcards: a webhook on "kubeflow.org/*" would also be
    # called for kinds it does not govern), covering every kind Kueue integrates here.
    assert {
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("", "pods"),
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("jobset.x-k8s.io", "jobsets"),
        ("kubeflow.org", "pytorchjobs"),
        ("kubeflow.org", "tfjobs"),
        ("kubeflow.org", "xgboostjobs"),
        ("kubeflow.org", "paddlejobs"),
        ("kubeflow.org", "jaxjobs"),
        ("kubeflow.org", "mpijobs"),
        ("trainer.kubeflow.org", "trainjobs"),
        ("ray.io", "rayjobs"),
        ("ray.io", "rayclusters"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("workload.codeflare.dev", "appwrappers"),
    } <= resources
    assert not [resource for _, resource in resources if resource == "*"]
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in hook["rules"])
    (expression,) = hook["namespaceSelector"]["matchExpressions"]
    assert set(expression["values"]) == {"kube-system", "kube-node-lease", "kube-public", "kueue-system"}


def test_workload_crds_serve_the_versions_kueue_integrates() -> None:
    served = {
        crd["metadata"]["name"]: {v["name"] for v in crd["spec"]["versions"] if v["served"]}
        for crd in manifests.workload_crds()
    }
    assert "v1alpha2" in served["jobsets.jobset.x-k8s.io"]
    assert "v1" in served["pytorchjobs.kubeflow.org"]
    assert "v2beta1" in served["mpijobs.kubeflow.org"]
    assert "v1" in served["rayjobs.ray.io"]


def test_decode_topology_assignment() -> None:
    # As Kueue wrote it (v0.17, and v0.19 with hostname-prefix encoding) for two pods on two hosts of one rack.
    levels, domains = decode_topology_assignment(
        {
            "levels": ["kubernetes.io/hostname"],
            "slices": [
                {
                    "domainCount": 2,
                    "podCounts": {"universal": 1},
                    "valuesPerLevel": [{"individual": {"prefix": "gpu-1-1-1-", "roots": ["1", "2"]}}],
                }
            ],
        }
    )
    assert levels == ["kubernetes.io/hostname"]
    assert domains == [Domain(("gpu-1-1-1-1",), 1), Domain(("gpu-1-1-1-2",), 1)]

    _, domains = decode_topology_assignment(
        {
            "levels": ["rack", "host"],
            "slices": [
                {
                    "domainCount": 2,
                    "podCounts": {"individual": [3, 1]},
                    "valuesPerLevel": [
                        {"universal": "r1"},
                        {"individual": {"roots": ["a", "b"], "suffix": ".x"}},
                    ],
                },
                {
                    "domainCount": 1,
                    "podCounts": {"universal": 2},
                    "valuesPerLevel": [{"universal": "r2"}, {"universal": "c"}],
                },
            ],
        }
    )
    assert domains == [Domain(("r1", "a.x"), 3), Domain(("r1", "b.x"), 1), Domain(("r2", "c"), 2)]


def test_kueue_job_webhooks_get_the_pod_webhooks_namespace_selector(kueue_dir: Path) -> None:
    # v0.19's kustomization copies vpod.kb.io's selector (a patch) to every job webhook
    # (replacements); without it they would be called for kube-system too.
    configurations = manifests.kueue_webhook_configurations(kueue_dir, PORT, CA)
    hooks = {hook["name"]: hook for c in configurations for hook in c["webhooks"]}
    selector = hooks["vpod.kb.io"]["namespaceSelector"]
    assert selector["matchExpressions"][0]["values"] == ["kube-system", "kueue-system"]
    for name in ("mjob.kb.io", "vjob.kb.io", "mjobset.kb.io", "mdeployment.kb.io", "vstatefulset.kb.io"):
        assert hooks[name]["namespaceSelector"] == selector, name
    assert "namespaceSelector" not in hooks["vclusterqueue.kb.io"]


def test_kwok_runs_its_own_stages() -> None:
    kwok_dir = build.dependency_dir("kwok", "sigs.k8s.io/kwok")
    stages = {}
    for path in devcluster.KWOK_STAGES:
        (stage,) = yaml.safe_load_all((kwok_dir / path).read_text())
        assert stage["kind"] == "Stage", path
        stages[stage["metadata"]["name"]] = stage
    assert {"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete"} <= set(stages)
    # A Job's pod completes after the delay its own annotation names.
    delay = stages["pod-complete"]["spec"]["delay"]
    assert delay["durationFrom"]["expressionFrom"] == '.metadata.annotations["pod-complete.stage.kwok.x-k8s.io/delay"]'
    kinds = [e for e in stages["pod-complete"]["spec"]["selector"]["matchExpressions"] if "ownerReferences" in e["key"]]
    assert kinds == [{"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]}]


def test_annotated_pod_complete_stage_is_kwoks_own_for_any_annotated_pod() -> None:
    """The extra stage differs from KWOK's pod-complete only in whom it selects: any pod with the
    delay annotation (a pod group's bare Pods) instead of a Job's pods; delay, jitter and status
    are KWOK's."""
    kwok_dir = build.dependency_dir("kwok", "sigs.k8s.io/kwok")
    (original,) = yaml.safe_load_all((kwok_dir / devcluster.KWOK_POD_COMPLETE).read_text())
    stage = devcluster.annotated_pod_complete_stage(kwok_dir)
    assert stage["metadata"]["name"] == "pod-complete-annotated"
    assert {k: v for k, v in stage["spec"].items() if k != "selector"} == {
        k: v for k, v in original["spec"].items() if k != "selector"
    }
    expressions = stage["spec"]["selector"]["matchExpressions"]
    assert not [e for e in expressions if "ownerReferences" in e["key"]]
    annotated = {"key": '.metadata.annotations["pod-complete.stage.kwok.x-k8s.io/delay"]', "operator": "Exists"}
    assert annotated in expressions
    kept = [e for e in original["spec"]["selector"]["matchExpressions"] if "ownerReferences" not in e["key"]]
    assert [e for e in expressions if "annotations" not in e["key"]] == kept
    assert len(kept) == 3  # not deleted, phase Running, Ready


def test_kubernetes_components_are_built_together() -> None:
    by_name = {binary.name: binary for binary in build.binaries()}
    components = [by_name[name] for name in build.KUBERNETES_COMPONENTS]
    assert {binary.wrapper for binary in components} == {build.BUILD_DIR / "kubernetes"}
    assert len({tuple(binary.ldflags) for binary in components}) == 1
    assert f"-X 'k8s.io/component-base/version.gitVersion={build.KUBERNETES_VERSION}'" in components[0].ldflags
    assert by_name["kwok"].ldflags == [f"-X 'sigs.k8s.io/kwok/pkg/consts.Version={build.KWOK_VERSION}'"]


def test_trainer_controller_is_the_release_kueue_pins() -> None:
    """The Trainer controller's wrapper module pins the Kubeflow Trainer Kueue v0.19.2 is built
    with (its TrainJob integration runs that version's runtime code), and its webhooks go by URL."""
    module = "github.com/kubeflow/trainer/v2"
    trainer = build.dependency_dir("trainer", module)
    assert trainer == build.dependency_dir("kueue", module)
    assert trainer.name.endswith(f"@{build.TRAINER_VERSION}")
    configurations = trainer_webhooks(trainer, 9443, b"ca")
    assert {c["kind"] for c in configurations} == {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    hooks = [hook for c in configurations for hook in c["webhooks"]]
    assert {hook["name"] for hook in hooks} >= {
        "defaulter.trainjob.trainer.kubeflow.org",
        "validator.trainjob.trainer.kubeflow.org",
    }
    assert all(hook["clientConfig"]["url"].startswith("https://127.0.0.1:9443/") for hook in hooks)
