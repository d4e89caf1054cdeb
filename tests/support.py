"""Builders shared by the unit tests: AdmissionReviews, team indexes, node inventories."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.support import strip_kueue as strip_kueue  # one definition for the unit and e2e suites
from webhook.core.kueue.inventory import NodeInventory
from webhook.core.platform.platform import load_platform, parse_platform
from webhook.core.platform.policy import compile_policies
from webhook.core.platform.resolve import TeamIndex

REPO = Path(__file__).resolve().parents[1]
PLATFORM = REPO / "kueue-config" / "platform.yaml"
CASES = REPO.parent / "shared" / "cases" / "kueue-examples"
#: The skip reason of every test that needs the shared cases (counted in one summary line: conftest.py).
CASES_MISSING = f"the shared cases are not at {CASES}"
needs_cases = pytest.mark.skipif(not CASES.is_dir(), reason=CASES_MISSING)

AWS_LEVELS = [
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "kubernetes.io/hostname",
]


def bundled_teams() -> TeamIndex:
    return TeamIndex(compile_policies(load_platform(PLATFORM)))


def teams_from(platform: dict[str, Any]) -> TeamIndex:
    return TeamIndex(compile_policies(parse_platform(platform)))


def platform_with(policy: dict[str, Any], **team_fields: Any) -> dict[str, Any]:
    """A one-team platform (team 'ml', namespace 'ml', flavor 'gpu' on the AWS topology)."""
    team = {
        "name": "ml",
        "namespaces": ["ml"],
        "quotas": [{"flavor": "gpu", "resources": {"nvidia.com/gpu": {"nominalQuota": 64}}}],
        "policy": policy,
        **team_fields,
    }
    return {
        "apiVersion": "kueue-governor.io/v1alpha1",
        "kind": "Platform",
        "topologies": [{"name": "aws", "levels": AWS_LEVELS}],
        "flavors": [
            {
                "name": "gpu",
                "nodeLabels": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
                "topologyName": "aws",
                "nodeResources": {"nvidia.com/gpu": 8},
            }
        ],
        "priorities": [
            {"name": "high", "value": 1000, "podPriorityClass": True},
            {"name": "low", "value": 10, "podPriorityClass": True},
        ],
        "teams": [team],
    }


def review_body(
    obj: dict[str, Any],
    namespace: str,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    api_version: str = "admission.k8s.io/v1",
    dry_run: bool = False,
) -> dict[str, Any]:
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": obj.get("kind")},
        "operation": operation,
        "namespace": namespace,
        "name": metadata.get("name", "") if isinstance(metadata := obj.get("metadata"), dict) else "",
        "object": obj,
        "dryRun": dry_run,
    }
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def job(**extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "parallelism": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": {"nvidia.com/gpu": "8"}}}
                    ],
                }
            },
        },
    }
    obj.update(extra)
    return obj


def aws_nodes(blocks: int = 2, racks: int = 2, hosts: int = 2, gpus: int = 8) -> NodeInventory:
    """blocks × racks × hosts Ready p5 nodes with the AWS network labels."""
    items = []
    for b in range(1, blocks + 1):
        for r in range(1, racks + 1):
            for h in range(1, hosts + 1):
                name = f"node-{b}-{r}-{h}"
                items.append(
                    {
                        "metadata": {
                            "name": name,
                            "labels": {
                                AWS_LEVELS[0]: "nn-spine-1",
                                AWS_LEVELS[1]: f"nn-block-{b}",
                                AWS_LEVELS[2]: f"nn-rack-{b}-{r}",
                                AWS_LEVELS[3]: name,
                                "node.kubernetes.io/instance-type": "p5.48xlarge",
                            },
                        },
                        "status": {
                            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "192", "pods": "110"},
                            "conditions": [{"type": "Ready", "status": "True"}],
                        },
                    }
                )
    return NodeInventory.from_objects(items)


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
