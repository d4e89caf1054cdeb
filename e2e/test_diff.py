"""``kgov diff`` against the real kube-apiserver and Kueue, exactly.

The test writes a small platform of its own (unique names), generates it with ``--instance`` (every
object labelled ``app.kubernetes.io/instance``) and applies it as docs/concepts.md says, ``kubectl apply
--server-side -k``. ``kgov diff --instance`` owns only that instance's objects, so the other tests'
objects in the shared cluster cannot show up and the whole output can be asserted: first "the
cluster matches" (exit 0, nothing on stdout), then after changing the platform the exact header
lines and summary line, a removed field included (kubectl's field manager owns it).

Its quotas are written in forms Kueue does not keep (``"0.5"`` CPUs, ``1024Mi``): the test reads
back what the API server returns (another form) and the diff must still be empty.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import NotFoundError

from e2e import manifests, support
from e2e.conftest import E2ECluster

pytestmark = pytest.mark.e2e

GPU = "nvidia.com/gpu"


def kgov_diff(platform: Path, kubeconfig: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*support.kgov_command(), "diff", str(platform), "--kubeconfig", str(kubeconfig), *options],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def headers(stdout: str) -> list[str]:
    """The ``# create|update|delete: Kind/name`` and ``# RECREATE`` lines of a diff."""
    return [line for line in stdout.splitlines() if re.match(r"# (create|update|delete|RECREATE)", line)]


def changed_lines(stdout: str, label: str) -> list[str]:
    """The ``-``/``+`` lines of one object's unified diff (its ``---``/``+++`` lines left out)."""
    section = stdout.split(f"# update: {label}\n", 1)[1].split("\n# ", 1)[0]
    return [line for line in section.splitlines() if line[:1] in "-+" and not line.startswith(("--- ", "+++ "))]


def diff_platform(name: str) -> dict[str, Any]:
    """Two teams in one cohort on one TAS flavor of the fake GPU nodes, one priority; every name
    starts with ``name``."""

    def team(suffix: str, resources: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": f"{name}-{suffix}",
            "cohort": name,
            "quotas": [{"flavor": f"{name}-gpu", "resources": resources}],
        }

    return {
        "apiVersion": "kueue-governor.io/v1alpha1",
        "kind": "Platform",
        "topologies": [{"name": f"{name}-network", "levels": manifests.TOPOLOGY_LEVELS}],
        "flavors": [
            {
                "name": f"{name}-gpu",
                "nodeLabels": {manifests.INSTANCE_TYPE_LABEL: "p5.48xlarge"},
                "topologyName": f"{name}-network",
                "nodeResources": {"cpu": 192, "memory": "2Ti", GPU: 8},
            }
        ],
        "cohorts": [{"name": name}],
        "priorities": [{"name": f"{name}-train", "value": 500, "podPriorityClass": True}],
        "teams": [
            team(
                "a",
                {
                    "cpu": {"nominalQuota": "0.5", "borrowingLimit": 1},
                    "memory": {"nominalQuota": "1024Mi"},
                    GPU: {"nominalQuota": 2},
                },
            ),
            team("b", {"cpu": {"nominalQuota": 1}, "memory": {"nominalQuota": "1Gi"}, GPU: {"nominalQuota": 1}}),
        ],
    }


def kubectl_apply(directory: Path, kubeconfig: Path, home: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH")
    result = subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", "apply", "--server-side", "-k", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "NO_PROXY": "127.0.0.1,localhost"},
    )
    assert result.returncode == 0, result.stderr


async def _delete_all(dynamic: DynamicClient, generated: support.Generated) -> None:
    for obj in reversed(generated.objects):
        resource = await dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        with contextlib.suppress(NotFoundError):
            await dynamic.delete(
                resource,
                name=obj["metadata"]["name"],
                namespace=obj["metadata"].get("namespace"),
                propagation_policy="Background",
            )


async def test_applied_platform_matches_then_shows_exactly_the_changes(
    dynamic: DynamicClient, e2e_cluster: E2ECluster, tmp_path: Path
) -> None:
    name = f"diff-{secrets.token_hex(3)}"
    options = ("--namespaces", "--policy-namespace", f"{name}-system", "--instance", name)
    platform = diff_platform(name)
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(platform, sort_keys=False))
    generated = support.generate(path, tmp_path / "generated", *options[1:])
    assert all(obj["metadata"]["labels"]["app.kubernetes.io/instance"] == name for obj in generated.objects)
    try:
        kubectl_apply(generated.directory, e2e_cluster.kubeconfig, tmp_path)
        await support.wait_cluster_queues_active(dynamic, [f"{name}-a", f"{name}-b"])

        # What the API server returns is not what was applied: the diff must see through it.
        live = await support.get(dynamic, support.KUEUE_API, "ClusterQueue", f"{name}-a")
        assert live is not None
        resources = live["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        assert [(r["name"], r["nominalQuota"]) for r in resources] == [
            ("cpu", "500m"),
            ("memory", "1Gi"),
            (GPU, "2"),
        ]
        assert resources[0]["borrowingLimit"] == "1"

        result = kgov_diff(path, e2e_cluster.kubeconfig, *options)
        assert (result.returncode, result.stdout, result.stderr) == (0, "", f"the cluster matches {path}\n")

        changed = copy.deepcopy(platform)
        changed["flavors"][0]["nodeLabels"] = {manifests.INSTANCE_TYPE_LABEL: "p4d.24xlarge"}
        changed["teams"][0]["quotas"][0]["resources"][GPU]["nominalQuota"] = 3
        del changed["teams"][0]["quotas"][0]["resources"]["cpu"]["borrowingLimit"]
        del changed["teams"][1]
        changed["priorities"].append({"name": f"{name}-serve", "value": 1000, "podPriorityClass": True})
        path.write_text(yaml.safe_dump(changed, sort_keys=False))
        result = kgov_diff(path, e2e_cluster.kubeconfig, *options)

        assert result.returncode == 1, result.stderr
        assert headers(result.stdout) == [
            f"# update: ResourceFlavor/{name}-gpu",
            f"# RECREATE ResourceFlavor/{name}-gpu: this changes nodeLabels of a ResourceFlavor with topologyName "
            f"'{name}-network'; Kueue refuses changes to nodeLabels, tolerations and topologyName once it is set; "
            "delete it and apply again",
            f"# update: ClusterQueue/{name}-a",
            f"# create: WorkloadPriorityClass/{name}-serve",
            f"# create: PriorityClass/{name}-serve",
            f"# update: ConfigMap/{name}-system/kgov-policy",
            # Team b's ClusterQueue and LocalQueue go; its Namespace is never proposed for deletion.
            f"# delete: ClusterQueue/{name}-b",
            f"# delete: LocalQueue/{name}-b/{name}-b-queue",
        ]
        assert result.stderr == (
            f"kgov diff: the cluster differs from {path}: 2 to create, 3 to update (1 need a recreate), 2 to delete\n"
        )
        assert changed_lines(result.stdout, f"ResourceFlavor/{name}-gpu") == [
            "-    node.kubernetes.io/instance-type: p5.48xlarge",
            "+    node.kubernetes.io/instance-type: p4d.24xlarge",
        ]
        # The CPU borrowing limit kubectl applied is removed and the GPU quota changed; the CPU and
        # memory quotas, returned as "500m" and "1Gi" for "0.5" and 1024Mi, are not changes.
        assert changed_lines(result.stdout, f"ClusterQueue/{name}-a") == [
            "-        borrowingLimit: '1'",
            "-        nominalQuota: '2'",
            "+        nominalQuota: 3",
        ]
    finally:
        await _delete_all(dynamic, generated)
