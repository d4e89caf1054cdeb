"""``kgov diff`` against the real kube-apiserver, with the bundled platform's objects applied.

The cluster is shared by the session: other tests leave objects of their own platforms (50
generated teams…), which ``kgov diff`` rightly lists as strays to delete. So these tests assert on
what the diff says about the bundled platform's objects, not on the exit code of a whole-cluster
match.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from e2e import support
from e2e.conftest import E2ECluster

pytestmark = pytest.mark.e2e


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


def test_applied_platform_matches(bundled_config: support.Generated, e2e_cluster: E2ECluster) -> None:
    for options in ((), ("--namespaces",)):
        result = kgov_diff(support.BUNDLED_PLATFORM, e2e_cluster.kubeconfig, *options)
        assert result.returncode in (0, 1), result.stderr
        lines = headers(result.stdout)
        assert not [line for line in lines if not line.startswith("# delete:")], lines
        # Team namespaces are never proposed for deletion (with or without --namespaces).
        assert not [line for line in lines if line.startswith("# delete: Namespace/")], lines
        assert not [line for line in lines if "hyperpod-ns-" in line], lines


def test_drift_is_shown_and_refused_changes_flagged(
    bundled_config: support.Generated, e2e_cluster: E2ECluster, tmp_path: Path
) -> None:
    platform = yaml.safe_load(support.BUNDLED_PLATFORM.read_text())
    platform["flavors"][0]["nodeLabels"] = {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    platform["teams"][0]["quotas"][0]["resources"]["nvidia.com/gpu"]["nominalQuota"] = 48
    changed = tmp_path / "platform.yaml"
    changed.write_text(yaml.safe_dump(platform, sort_keys=False))
    result = kgov_diff(changed, e2e_cluster.kubeconfig)
    assert result.returncode == 1, result.stderr
    lines = headers(result.stdout)
    assert "# update: ResourceFlavor/p5-48xlarge" in lines
    assert "# update: ClusterQueue/hyperpod-ns-research-clusterqueue" in lines
    assert any(line.startswith("# RECREATE ResourceFlavor/p5-48xlarge: this changes nodeLabels") for line in lines)
    assert (
        "-    node.kubernetes.io/instance-type: p5.48xlarge\n+    node.kubernetes.io/instance-type: p4d.24xlarge"
        in (result.stdout)
    )
    assert re.search(r"\d+ to create, \d+ to update \(1 need a recreate\), \d+ to delete", result.stderr)
