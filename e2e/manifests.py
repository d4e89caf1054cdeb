"""What the local control plane installs, as plain data: CRDs, webhook configurations, nodes.

Pure functions over the upstream YAML in the Go module cache (no API calls), so the same objects
can be inspected, diffed or applied elsewhere.
"""

from __future__ import annotations

import base64
import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e import build
from webhook.core.kueue.registration import webhook_rules
from webhook.generate.cel import status_expression

KUEUE_NAMESPACE = "kueue-system"
GOVERNOR_WEBHOOK_CONFIGURATION = "kgov-governor"
GOVERNOR_WEBHOOK_NAME = "governor.kueue-governor.io"
# Namespaces no admission webhook of ours or Kueue's ever touches.
SYSTEM_NAMESPACES = ["kube-system", "kube-node-lease", "kube-public", KUEUE_NAMESPACE]

TOPOLOGY_LEVELS = [
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "kubernetes.io/hostname",
]
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
FAKE_NODE_LABEL = "kueue-governor.io/fake-node"

# Kueue integrations switched on, and the CRDs (from the Go modules Kueue v0.19 is built
# against) that make their kinds exist. (module, directory in the module, file glob).
KUEUE_FRAMEWORKS = [
    "batch/job",
    "jobset.x-k8s.io/jobset",
    "kubeflow.org/pytorchjob",
    "kubeflow.org/tfjob",
    "kubeflow.org/xgboostjob",
    "kubeflow.org/paddlejob",
    "kubeflow.org/jaxjob",
    "kubeflow.org/mpijob",
    "trainer.kubeflow.org/trainjob",
    "ray.io/rayjob",
    "ray.io/raycluster",
    "leaderworkerset.x-k8s.io/leaderworkerset",
    "workload.codeflare.dev/appwrapper",
    "pod",
    "deployment",
    "statefulset",
]
WORKLOAD_CRDS = [
    ("sigs.k8s.io/jobset", "config/components/crd/bases", "*.yaml"),
    # Kubeflow training-operator v1 kinds; its v1 MPIJob is left out: Kueue integrates the
    # mpi-operator's kubeflow.org/v2beta1 MPIJob, which has the same resource name.
    ("github.com/kubeflow/training-operator", "manifests/base/crds", "kubeflow.org_pytorchjobs.yaml"),
    ("github.com/kubeflow/training-operator", "manifests/base/crds", "kubeflow.org_tfjobs.yaml"),
    ("github.com/kubeflow/training-operator", "manifests/base/crds", "kubeflow.org_xgboostjobs.yaml"),
    ("github.com/kubeflow/training-operator", "manifests/base/crds", "kubeflow.org_paddlejobs.yaml"),
    ("github.com/kubeflow/training-operator", "manifests/base/crds", "kubeflow.org_jaxjobs.yaml"),
    ("github.com/kubeflow/mpi-operator", "manifests/base", "kubeflow.org_mpijobs.yaml"),
    ("github.com/kubeflow/trainer/v2", "manifests/base/crds", "trainer.kubeflow.org_*.yaml"),
    ("github.com/ray-project/kuberay/ray-operator", "config/crd/bases", "ray.io_rayjobs.yaml"),
    ("github.com/ray-project/kuberay/ray-operator", "config/crd/bases", "ray.io_rayclusters.yaml"),
    ("sigs.k8s.io/lws", "config/crd/bases", "*.yaml"),
    ("github.com/project-codeflare/appwrapper", "config/crd/bases", "*.yaml"),
]


@dataclass(frozen=True)
class TopologyShape:
    """Fan-out of the fake node tree, broadest level first.

    ``spines`` layer-1 domains, each with ``blocks`` layer-2 domains, each with ``racks`` layer-3
    domains, each with ``hosts`` nodes: ``spines * blocks * racks * hosts`` nodes in all.
    """

    spines: int = 1
    blocks: int = 2
    racks: int = 2
    hosts: int = 2
    gpus_per_node: int = 8
    instance_type: str = "p5.48xlarge"

    @classmethod
    def parse(cls, text: str) -> TopologyShape:
        """``"SxBxRxH"`` or ``"BxRxH"`` (one spine), e.g. ``"1x2x2x2"``.

        Raises:
            ValueError: not 3 or 4 positive integers separated by ``x``.
        """
        try:
            parts = [int(p) for p in text.lower().split("x")]
        except ValueError:
            raise ValueError(f"shape {text!r}: expected SxBxRxH or BxRxH") from None
        if len(parts) == 3:
            parts.insert(0, 1)
        if len(parts) != 4 or min(parts) < 1:
            raise ValueError(f"shape {text!r}: expected 3 or 4 positive integers (SxBxRxH or BxRxH)")
        spines, blocks, racks, hosts = parts
        return cls(spines=spines, blocks=blocks, racks=racks, hosts=hosts)

    @property
    def node_count(self) -> int:
        return self.spines * self.blocks * self.racks * self.hosts

    def __str__(self) -> str:
        return f"{self.spines}x{self.blocks}x{self.racks}x{self.hosts}"


# --------------------------------------------------------------------------- manifests


# libyaml's loader when PyYAML has it: the workload CRDs are megabytes of YAML.
_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(path.read_text(), Loader=_YamlLoader) if doc]


def deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """JSON merge of ``patch`` into a copy of ``base`` (maps merge, everything else replaces)."""
    merged = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def kueue_crds(kueue_dir: Path, webhook_port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's CRDs as its kustomization builds them, conversion webhooks pointed at 127.0.0.1.

    Reads ``config/components/crd/kustomization.yaml``: the listed bases, and the ``patches``
    that switch a CRD to ``strategy: Webhook``; the webhook's ``service:`` reference becomes
    ``url: https://127.0.0.1:<port><path>`` with our ``caBundle``.
    """
    crd_dir = kueue_dir / "config/components/crd"
    kustomization = yaml.safe_load((crd_dir / "kustomization.yaml").read_text())
    crds = {}
    for resource in kustomization["resources"]:
        doc = _load_yaml_documents(crd_dir / resource)[0]
        crds[doc["metadata"]["name"]] = doc
    for entry in kustomization.get("patches", []):
        patch = yaml.safe_load((crd_dir / entry["path"]).read_text())
        name = patch["metadata"]["name"]
        conversion = patch.get("spec", {}).get("conversion")
        if name not in crds or not conversion:
            continue
        client_config = conversion.get("webhook", {}).get("clientConfig", {})
        service = client_config.pop("service", None)
        if service is not None:
            client_config["url"] = f"https://127.0.0.1:{webhook_port}{service.get('path', '/convert')}"
            client_config["caBundle"] = base64.b64encode(ca_pem).decode()
        crds[name] = deep_merge(crds[name], {"spec": {"conversion": conversion}})
    return list(crds.values())


def _merge_webhooks(configuration: dict[str, Any], patch: dict[str, Any]) -> None:
    """Strategic merge of a webhook configuration patch: ``webhooks`` merge by ``name``."""
    by_name = {hook["name"]: hook for hook in configuration["webhooks"]}
    for hook_patch in patch.get("webhooks", []):
        target = by_name.get(hook_patch["name"])
        if target is not None:
            target.update(deep_merge(target, hook_patch))


def _field_path(path: str) -> list[str]:
    """Kustomize's ``fieldPath`` split into steps: ``webhooks.[name=a.b].namespaceSelector`` ->
    ``["webhooks", "[name=a.b]", "namespaceSelector"]`` (dots inside brackets are no separators)."""
    return re.findall(r"\[[^\]]*\]|[^.\[\]]+", path)


def _field_parent(document: dict[str, Any], steps: list[str]) -> dict[str, Any] | None:
    """The map holding the last step of a field path (None when a list item is not there)."""
    node: Any = document
    for step in steps[:-1]:
        if step.startswith("["):
            key, _, value = step[1:-1].partition("=")
            node = next((item for item in node if isinstance(item, dict) and item.get(key) == value), None)
            if node is None:
                return None
        else:
            node = node.setdefault(step, {})
    return node if isinstance(node, dict) else None


def _apply_replacements(documents: list[dict[str, Any]], replacements: list[dict[str, Any]]) -> None:
    """Kustomize ``replacements`` whose source and targets select documents by kind and name:
    the source field's value is copied to every target field path."""

    def selected(select: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            doc
            for doc in documents
            if doc.get("kind") == select.get("kind") and doc["metadata"].get("name") == select.get("name")
        ]

    for replacement in replacements:
        source = replacement["source"]
        (source_doc,) = selected(source)
        steps = _field_path(source["fieldPath"])
        holder = _field_parent(source_doc, steps)
        if holder is None or steps[-1] not in holder:
            raise ValueError(f"replacement source {source['fieldPath']} is not in {source['name']}")
        value = holder[steps[-1]]
        for target in replacement["targets"]:
            for doc in selected(target["select"]):
                for path in target["fieldPaths"]:
                    target_steps = _field_path(path)
                    parent = _field_parent(doc, target_steps)
                    if parent is not None:
                        parent[target_steps[-1]] = copy.deepcopy(value)


def kueue_webhook_configurations(kueue_dir: Path, webhook_port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's Mutating/ValidatingWebhookConfigurations, by URL on 127.0.0.1.

    ``config/components/webhook/manifests.yaml`` with its kustomization applied: the inline
    patches, then the ``replacements`` (v0.19 patches the pod webhook's namespace selector, which
    keeps kube-system and kueue-system out, and copies it to every job webhook), the release's
    ``kueue-`` name prefix, and every ``service:`` reference turned into
    ``url: https://127.0.0.1:<port><path>`` with our ``caBundle``.
    """
    webhook_dir = kueue_dir / "config/components/webhook"
    configurations = _load_yaml_documents(webhook_dir / "manifests.yaml")
    kustomization = yaml.safe_load((webhook_dir / "kustomization.yaml").read_text())
    patches = [yaml.safe_load(entry["patch"]) for entry in kustomization.get("patches", []) if "patch" in entry]
    ca_bundle = base64.b64encode(ca_pem).decode()
    for configuration in configurations:
        for patch in patches:
            if (
                patch["kind"] == configuration["kind"]
                and patch["metadata"]["name"] == configuration["metadata"]["name"]
            ):
                _merge_webhooks(configuration, patch)
    _apply_replacements(configurations, kustomization.get("replacements", []))
    for configuration in configurations:
        configuration["metadata"]["name"] = "kueue-" + configuration["metadata"]["name"]
        for hook in configuration["webhooks"]:
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{webhook_port}{service['path']}",
                "caBundle": ca_bundle,
            }
    return configurations


def workload_crds() -> list[dict[str, Any]]:
    """CRDs of the workload kinds Kueue integrates with, from the module versions Kueue pins."""
    documents = []
    for module, directory, pattern in WORKLOAD_CRDS:
        root = build.dependency_dir("kueue", module)
        files = sorted((root / directory).glob(pattern))
        if not files:
            raise FileNotFoundError(f"no CRD {pattern} under {directory} in {module} ({root})")
        for path in files:
            documents += [d for d in _load_yaml_documents(path) if d.get("kind") == "CustomResourceDefinition"]
    return documents


def fake_nodes(shape: TopologyShape) -> list[dict[str, Any]]:
    """Node objects (metadata + spec + status) for ``shape``, broadest level first.

    The status has capacity, allocatable and nodeInfo but no conditions: KWOK's
    ``node-initialize`` stage takes a node that is not Ready and makes it so, keeping the rest.

    Names and labels: layer-1 ``nn-spine-<s>``, layer-2 ``nn-block-<s>-<b>``, layer-3
    ``nn-rack-<s>-<b>-<r>``, hostname ``gpu-<s>-<b>-<r>-<h>``.
    """
    nodes = []
    resources = {
        "cpu": "192",
        "memory": "2Ti",
        "pods": "110",
        "ephemeral-storage": "7Ti",
        "nvidia.com/gpu": str(shape.gpus_per_node),
        "vpc.amazonaws.com/efa": "32",
    }
    for s in range(1, shape.spines + 1):
        for b in range(1, shape.blocks + 1):
            for r in range(1, shape.racks + 1):
                for h in range(1, shape.hosts + 1):
                    name = f"gpu-{s}-{b}-{r}-{h}"
                    labels = {
                        TOPOLOGY_LEVELS[0]: f"nn-spine-{s}",
                        TOPOLOGY_LEVELS[1]: f"nn-block-{s}-{b}",
                        TOPOLOGY_LEVELS[2]: f"nn-rack-{s}-{b}-{r}",
                        TOPOLOGY_LEVELS[3]: name,
                        INSTANCE_TYPE_LABEL: shape.instance_type,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        FAKE_NODE_LABEL: "true",
                    }
                    nodes.append(
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "metadata": {"name": name, "labels": labels},
                            "spec": {},
                            "status": {
                                "capacity": resources,
                                "allocatable": resources,
                                "nodeInfo": {
                                    "architecture": "amd64",
                                    "operatingSystem": "linux",
                                    "kubeletVersion": build.KUBERNETES_VERSION,
                                    "kubeProxyVersion": "",
                                    "containerRuntimeVersion": "fake://0",
                                    "kernelVersion": "",
                                    "osImage": "fake",
                                    "bootID": "",
                                    "machineID": "",
                                    "systemUUID": "",
                                },
                            },
                        }
                    )
    return nodes


def governor_webhook_configuration(port: int, ca_pem: bytes) -> dict[str, Any]:
    """The ``kgov-governor`` MutatingWebhookConfiguration, by URL on 127.0.0.1.

    Its name sorts before Kueue's (``kueue-…``) so the API server calls it first.
    """
    client_config = {"url": f"https://127.0.0.1:{port}/mutate", "caBundle": base64.b64encode(ca_pem).decode()}
    return governor_webhook_configuration_for(client_config, SYSTEM_NAMESPACES)


def governor_webhook_configuration_for(client_config: dict[str, Any], excluded: list[str]) -> dict[str, Any]:
    """``kgov-governor`` calling ``client_config`` (a URL or an in-cluster Service, and the
    caBundle), for the workload kinds of ``webhook.core.kueue.kinds``, in every namespace but ``excluded``."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": GOVERNOR_WEBHOOK_CONFIGURATION},
        "webhooks": [
            {
                "name": GOVERNOR_WEBHOOK_NAME,
                "clientConfig": client_config,
                "rules": webhook_rules(),
                # Status writes (every controller's, every kubelet's) only when they change metadata.
                "matchConditions": [{"name": "status-changes-metadata", "expression": status_expression()}],
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(excluded)}
                    ]
                },
                "sideEffects": "None",
                "reinvocationPolicy": "IfNeeded",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "timeoutSeconds": 5,
            }
        ],
    }
